/* inspect.c - printing the state dict without mounting it. */
#include "inspect.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/jsonw.h"
#include "export.h" /* us_pt_mark_visible */
#include "source/passthrough.h"

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

/* A recipe's output: the rule (1-based) and the source names it read. */
static void put_json_recipe_rule(struct us_sbuf *b, const struct us_tensor *t)
{
	us_sbuf_puts(b, ",\"recipe_rule\":");
	if (!t->recipe_rule) {
		us_sbuf_puts(b, "null");
		return;
	}
	us_sbuf_u64(b, t->recipe_rule);
	us_sbuf_puts(b, ",\"source_names\":[");
	us_sbuf_json_str(b, t->source_name);
	us_sbuf_putc(b, ']');
}

/* "recipe": its name or null; "recipe_dropped": what its rules dropped. */
static void put_json_recipe(struct us_sbuf *b, const struct us_statedict *sd)
{
	us_sbuf_puts(b, ",\"recipe\":");
	if (sd->recipe)
		us_sbuf_json_str(b, sd->recipe);
	else
		us_sbuf_puts(b, "null");
	us_sbuf_puts(b, ",\"recipe_dropped\":[");
	for (size_t i = 0; i < sd->nrecipe_dropped; i++) {
		us_sbuf_puts(b, i ? ",{\"name\":" : "{\"name\":");
		us_sbuf_json_str(b, sd->recipe_dropped[i]);
		us_sbuf_puts(b, ",\"recipe_rule\":");
		us_sbuf_u64(b, sd->recipe_dropped_rule[i]);
		us_sbuf_putc(b, '}');
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
	put_json_recipe_rule(b, t);
	us_sbuf_putc(b, '}');
}

static void put_json_tensors(struct us_sbuf *b, const struct us_statedict *sd)
{
	us_sbuf_putc(b, '[');
	for (size_t i = 0; i < sd->ntensors; i++) {
		if (i)
			us_sbuf_putc(b, ',');
		put_json_tensor(b, sd, &sd->tensors[i]);
	}
	us_sbuf_putc(b, ']');
}

/* "optimizer": null, or its tensors (the rows of optimizer.safetensors)
 * and the size of optimizer.json (null when there is none). */
static void put_json_optimizer(struct us_sbuf *b, const struct us_statedict *sd)
{
	const struct us_statedict *opt = sd->optim;

	us_sbuf_puts(b, ",\"optimizer\":");
	if (!(opt && opt->ntensors) && !sd->optim_json) {
		us_sbuf_puts(b, "null");
		return;
	}
	us_sbuf_puts(b, "{\"tensors\":");
	if (opt)
		put_json_tensors(b, opt);
	else
		us_sbuf_puts(b, "[]");
	us_sbuf_puts(b, ",\"json_bytes\":");
	if (sd->optim_json)
		us_sbuf_u64(b, strlen(sd->optim_json));
	else
		us_sbuf_puts(b, "null");
	us_sbuf_putc(b, '}');
}

/* "passthrough": the files a mount serves as they are, with their sizes. */
static void put_json_passthrough(struct us_sbuf *b, const struct us_pt_list *pt)
{
	us_sbuf_puts(b, ",\"passthrough\":[");
	for (size_t i = 0; i < pt->n; i++) {
		if (i)
			us_sbuf_putc(b, ',');
		us_sbuf_puts(b, "{\"path\":");
		us_sbuf_json_str(b, pt->v[i].relpath);
		us_sbuf_puts(b, ",\"bytes\":");
		us_sbuf_u64(b, (uint64_t)pt->v[i].st.st_size);
		us_sbuf_putc(b, '}');
	}
	us_sbuf_putc(b, ']');
}

static int print_json(const struct us_statedict *sd, const struct us_pt_list *pt,
		      FILE *out)
{
	struct us_sbuf b;
	int rc;

	us_sbuf_init(&b);
	us_sbuf_puts(&b, "{\"format\":");
	us_sbuf_json_str(&b, sd->format ? sd->format : "unknown");
	us_sbuf_puts(&b, ",\"tensors\":");
	put_json_tensors(&b, sd);
	put_json_recipe(&b, sd);
	put_json_optimizer(&b, sd);
	put_json_passthrough(&b, pt);
	us_sbuf_puts(&b, "}\n");
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
	     fprintf(out, "%-*s  %-7s  %-18s  %12llu  %6u  %s%s%s", width,
		     t->name, us_dtype_name(t->dtype), shape.p,
		     (unsigned long long)t->nbytes, t->nchunks, src.p,
		     t->tie_of ? "  = " : "", t->tie_of ? t->tie_of->name : "");
	if (rc >= 0 && t->recipe_rule)
		rc = fprintf(out, "  rule %u <- %s", t->recipe_rule, t->source_name);
	if (rc >= 0)
		rc = fputc('\n', out);
	us_sbuf_free(&shape);
	us_sbuf_free(&src);
	return rc < 0 ? -1 : 0;
}

static const char *plural(unsigned long long n)
{
	return n == 1 ? "" : "s";
}

/* The header and one row per tensor; the bytes of the untied ones in
 * *@total and the count of tied ones in *@tied. */
static int print_table(const struct us_statedict *sd, FILE *out,
		       unsigned long long *total, size_t *tied)
{
	int width = 4;

	*total = 0;
	*tied = 0;
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
			(*tied)++;
		else
			*total += sd->tensors[i].nbytes;
	}
	return 0;
}

/* After the model's table, a blank line and a titled table of its own, so
 * that the model's table (up to the first blank line) reads as before. */
static int print_optimizer(const struct us_statedict *sd, FILE *out)
{
	const struct us_statedict *opt = sd->optim;
	unsigned long long total = 0;
	size_t tied = 0, n = opt ? opt->ntensors : 0;

	if (!n && !sd->optim_json)
		return 0;
	fputs("\noptimizer (optimizer.safetensors, optimizer.json):\n", out);
	if (n && print_table(opt, out, &total, &tied) < 0)
		return -1;
	fprintf(out, "%zu optimizer tensor%s, %llu byte%s", n, plural(n),
		total, plural(total));
	if (sd->optim_json)
		fprintf(out, "; optimizer.json %zu byte%s", strlen(sd->optim_json),
			plural(strlen(sd->optim_json)));
	fputc('\n', out);
	return 0;
}

/* One line under the totals: the recipe, and every name it dropped. */
static void print_recipe(const struct us_statedict *sd, FILE *out)
{
	if (!sd->recipe)
		return;
	fprintf(out, "recipe %s; dropped by the recipe: ", sd->recipe);
	if (!sd->nrecipe_dropped)
		fputs("none", out);
	for (size_t i = 0; i < sd->nrecipe_dropped; i++)
		fprintf(out, "%s%s (rule %u)", i ? ", " : "", sd->recipe_dropped[i],
			sd->recipe_dropped_rule[i]);
	fputc('\n', out);
}

static void print_passthrough(const struct us_pt_list *pt, FILE *out)
{
	unsigned long long total = 0;
	size_t n = pt->n;

	if (!n)
		return;
	fprintf(out, "\npassed through (served as they are):\n%12s  %s\n",
		"BYTES", "PATH");
	for (size_t i = 0; i < pt->n; i++) {
		const struct us_pt_entry *e = &pt->v[i];

		fprintf(out, "%12llu  %s\n", (unsigned long long)e->st.st_size,
			e->relpath);
		total += (unsigned long long)e->st.st_size;
	}
	fprintf(out, "%zu file%s, %llu byte%s\n", n, plural(n), total,
		plural(total));
}

static int print_text(const struct us_statedict *sd, const struct us_pt_list *pt,
		      FILE *out)
{
	unsigned long long total;
	size_t tied;

	if (print_table(sd, out, &total, &tied) < 0)
		return -1;
	fprintf(out, "%zu tensor%s (%zu tied to another), %llu byte%s, %zu source "
		"file%s (%s)\n", sd->ntensors, plural(sd->ntensors), tied, total,
		plural(total), sd->nfiles, plural(sd->nfiles),
		sd->format ? sd->format : "?");
	print_recipe(sd, out);
	if (print_optimizer(sd, out) < 0)
		return -1;
	print_passthrough(pt, out);
	return ferror(out) ? -1 : 0;
}

/* Keep in @pt only what a mount shows (a source file named like a view is
 * hidden by it).  Directories go too: inspect lists files. */
static int visible_files(struct us_pt_list *pt)
{
	bool *keep = calloc(pt->n + 1, sizeof(*keep));
	size_t k = 0;

	if (!keep)
		return -1;
	us_pt_mark_visible(pt, keep);
	for (size_t i = 0; i < pt->n; i++) {
		if (keep[i] && !S_ISDIR(pt->v[i].st.st_mode))
			pt->v[k++] = pt->v[i];
		else
			free(pt->v[i].relpath);
	}
	pt->n = k; /* parent indices are stale now: nothing reads them */
	free(keep);
	return 0;
}

int us_inspect_print(const struct us_statedict *sd, const struct us_dir *src,
		     const char *overlay, bool json, FILE *out)
{
	struct us_pt_list pt = {0};
	struct us_err err = {0};
	int rc;

	if (us_pt_collect(src, sd, overlay, &pt, &err) != US_OK) {
		fprintf(stderr, "unshardfs: %s\n", err.msg);
		return -1;
	}
	if (visible_files(&pt) < 0) {
		fprintf(stderr, "unshardfs: .: out of memory\n");
		us_pt_free(&pt);
		return -1;
	}
	rc = json ? print_json(sd, &pt, out) : print_text(sd, &pt, out);
	us_pt_free(&pt);
	/* Every exit 2 says why in one line (tests/faultinject found this one
	 * silent: an allocation failing while rows are made). */
	if (rc < 0)
		fprintf(stderr, "unshardfs: .: cannot print the tensor table: "
			"out of memory or a write error\n");
	return rc;
}
