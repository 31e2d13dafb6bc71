/* inspect.c - printing the state dict without mounting it. */
#include "inspect.h"

#include <string.h>

#include "codec/jsonw.h"

/* Append the distinct source files of @t, in first-use order. */
static void put_sources(struct us_sbuf *b, const struct us_statedict *sd,
			const struct us_tensor *t, bool json)
{
	bool first = true;

	for (uint32_t i = 0; i < t->nchunks; i++) {
		uint32_t f = t->chunks[i].src.file;
		uint32_t j;

		for (j = 0; j < i && t->chunks[j].src.file != f; j++)
			;
		if (j < i)
			continue;
		if (!first)
			us_sbuf_putc(b, ',');
		first = false;
		if (json)
			us_sbuf_json_str(b, sd->files[f].relpath);
		else
			us_sbuf_puts(b, sd->files[f].relpath);
	}
}

static void put_shape(struct us_sbuf *b, const struct us_tensor *t)
{
	us_sbuf_putc(b, '[');
	for (uint32_t k = 0; k < t->ndim; k++) {
		if (k)
			us_sbuf_putc(b, ',');
		us_sbuf_u64(b, t->shape[k]);
	}
	us_sbuf_putc(b, ']');
}

static void put_json_tensor(struct us_sbuf *b, const struct us_statedict *sd,
			    const struct us_tensor *t)
{
	us_sbuf_puts(b, "{\"name\":");
	us_sbuf_json_str(b, t->name);
	us_sbuf_puts(b, ",\"source_name\":");
	us_sbuf_json_str(b, t->source_name);
	us_sbuf_puts(b, ",\"dtype\":");
	us_sbuf_json_str(b, us_dtype_name(t->dtype));
	us_sbuf_puts(b, ",\"shape\":");
	put_shape(b, t);
	us_sbuf_puts(b, ",\"bytes\":");
	us_sbuf_u64(b, t->nbytes);
	us_sbuf_puts(b, ",\"chunks\":");
	us_sbuf_u64(b, t->nchunks);
	us_sbuf_puts(b, ",\"sources\":[");
	put_sources(b, sd, t, true);
	us_sbuf_puts(b, "],\"tied_to\":");
	if (t->tie_of)
		us_sbuf_json_str(b, t->tie_of->name);
	else
		us_sbuf_puts(b, "null");
	us_sbuf_puts(b, ",\"links\":");
	us_sbuf_u64(b, t->nlinks);
	us_sbuf_putc(b, '}');
}

static int print_json(const struct us_statedict *sd, FILE *out)
{
	struct us_sbuf b;
	int rc;

	us_sbuf_init(&b);
	us_sbuf_puts(&b, "{\"format\":");
	us_sbuf_json_str(&b, sd->format ? sd->format : "unknown");
	us_sbuf_puts(&b, ",\"tensors\":[");
	for (size_t i = 0; i < sd->ntensors; i++) {
		if (i)
			us_sbuf_putc(&b, ',');
		put_json_tensor(&b, sd, &sd->tensors[i]);
	}
	us_sbuf_puts(&b, "]}\n");
	rc = b.oom || fwrite(b.p, 1, b.len, out) != b.len ? -1 : 0;
	us_sbuf_free(&b);
	return rc;
}

static int print_row(const struct us_statedict *sd, const struct us_tensor *t,
		     int width, FILE *out)
{
	struct us_sbuf shape, src;
	int rc;

	us_sbuf_init(&shape);
	us_sbuf_init(&src);
	put_shape(&shape, t);
	put_sources(&src, sd, t, false);
	us_sbuf_putc(&shape, '\0');
	us_sbuf_putc(&src, '\0');
	rc = shape.oom || src.oom ? -1 :
	     fprintf(out, "%-*s  %-7s  %-18s  %12llu  %6u  %s%s%s\n", width,
		     t->name, us_dtype_name(t->dtype), shape.p,
		     (unsigned long long)t->nbytes, t->nchunks, src.p,
		     t->tie_of ? "  = " : "", t->tie_of ? t->tie_of->name : "");
	us_sbuf_free(&shape);
	us_sbuf_free(&src);
	return rc < 0 ? -1 : 0;
}

static const char *plural(unsigned long long n)
{
	return n == 1 ? "" : "s";
}

int us_inspect_print(const struct us_statedict *sd, bool json, FILE *out)
{
	unsigned long long total = 0;
	size_t tied = 0;
	int width = 4;

	if (json)
		return print_json(sd, out);
	for (size_t i = 0; i < sd->ntensors; i++) {
		int len = (int)strlen(sd->tensors[i].name);

		width = len > width ? (len < 60 ? len : 60) : width;
	}
	fprintf(out, "%-*s  %-7s  %-18s  %12s  %6s  %s\n", width, "NAME",
		"DTYPE", "SHAPE", "BYTES", "CHUNKS", "SOURCE");
	for (size_t i = 0; i < sd->ntensors; i++) {
		if (print_row(sd, &sd->tensors[i], width, out) < 0)
			return -1;
		if (sd->tensors[i].tie_of)
			tied++;
		else
			total += sd->tensors[i].nbytes;
	}
	fprintf(out, "%zu tensor%s (%zu tied to another), %llu byte%s, %zu source "
		"file%s (%s)\n", sd->ntensors, plural(sd->ntensors), tied, total,
		plural(total), sd->nfiles, plural(sd->nfiles),
		sd->format ? sd->format : "?");
	return ferror(out) ? -1 : 0;
}
