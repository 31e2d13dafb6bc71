/*
 * raw.c - the tensors/<name> view: one tensor's raw bytes, little-endian and
 * row-major, exactly t->nbytes long, with no header.
 *
 * There can be 100k tensors, so a raw view is nothing but its struct us_view:
 * priv points at the tensor (owned by the state dict), and reads go straight
 * to us_tensor_read.  us_view_raw_array_new() puts all of them in one block.
 * The xattr values are built on request: nothing is kept per tensor for them.
 */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "../assemble/assemble.h"
#include "../codec/jsonw.h"

/* Past this, user.unshardfs.source lists no more files (XATTR_SIZE_MAX is
 * 64 KiB, and nobody reads a list that long). */
#define RAW_SOURCE_MAX 4000

const char us_raw_xattr_list[] = US_XATTR_DTYPE "\0" US_XATTR_SHAPE "\0"
				 US_XATTR_SOURCE;
const size_t us_raw_xattr_list_len = sizeof(us_raw_xattr_list);

static enum us_status raw_read(struct us_assembler *as,
			       const struct us_view *v, char *buf, size_t len,
			       uint64_t off)
{
	return us_tensor_read(as, v->sd, v->priv, buf, len, off);
}

static enum us_status raw_map(const struct us_view *v, struct us_segs *segs,
			      size_t len, uint64_t off)
{
	return us_tensor_map(v->sd, v->priv, segs, len, off);
}

/* Nothing to free: the tensor belongs to the state dict. */
static void raw_destroy(struct us_view *v)
{
	(void)v;
}

static const struct us_view_ops raw_ops = {
	.read = raw_read,
	.destroy = raw_destroy,
	.map = raw_map,
};

static void raw_init(struct us_view *v, const struct us_statedict *sd,
		     const struct us_tensor *t)
{
	v->name = t->name;
	v->size = t->nbytes;
	v->ops = &raw_ops;
	v->sd = sd;
	/* priv is not const; raw_read only hands it back to us_tensor_read,
	 * which takes a const tensor. */
	v->priv = (void *)(uintptr_t)t;
}

enum us_status us_view_raw_new(const struct us_statedict *sd,
			       const struct us_tensor *t,
			       struct us_view **out, struct us_err *err)
{
	struct us_view *v = calloc(1, sizeof(*v));

	if (!v)
		return us_err_set(err, US_E_NOMEM, t->name, "out of memory");
	raw_init(v, sd, t);
	*out = v;
	return US_OK;
}

enum us_status us_view_raw_array_new(const struct us_statedict *sd,
				     struct us_view **out, struct us_err *err)
{
	struct us_view *v = calloc(sd->ntensors + 1, sizeof(*v));

	if (!v)
		return us_err_set(err, US_E_NOMEM, "tensors", "out of memory");
	for (size_t i = 0; i < sd->ntensors; i++)
		raw_init(&v[i], sd, &sd->tensors[i]);
	*out = v;
	return US_OK;
}

void us_view_raw_array_free(struct us_view *views)
{
	free(views);
}

const struct us_tensor *us_view_raw_tensor(const struct us_view *v)
{
	return v->ops == &raw_ops ? v->priv : NULL;
}

static void put_shape(struct us_sbuf *b, const struct us_tensor *t)
{
	for (uint32_t k = 0; k < t->ndim; k++) {
		if (k)
			us_sbuf_putc(b, ',');
		us_sbuf_u64(b, t->shape[k]);
	}
}

/*
 * Distinct files in chunk order, comma-separated, then " (N chunks)" when
 * there is more than one chunk.  Past RAW_SOURCE_MAX the list stops with
 * ",... (F files)".  A bitmap over sd->files keeps it linear in the chunks.
 */
static void put_source(struct us_sbuf *b, const struct us_statedict *sd,
		       const struct us_tensor *t)
{
	unsigned char *seen = calloc(sd->nfiles / 8 + 1, 1);
	uint64_t nfiles = 0;
	bool cut = false;

	if (!seen) {
		b->oom = true;
		return;
	}
	for (uint32_t i = 0; i < t->nchunks; i++) {
		uint32_t f = t->chunks[i].src.file;

		if (f >= sd->nfiles || (seen[f / 8] & (1u << (f % 8))))
			continue;
		seen[f / 8] |= (unsigned char)(1u << (f % 8));
		if (b->len > RAW_SOURCE_MAX) {
			cut = true;
		} else {
			if (nfiles)
				us_sbuf_putc(b, ',');
			us_sbuf_puts(b, sd->files[f].relpath);
		}
		nfiles++;
	}
	free(seen);
	if (cut) {
		us_sbuf_puts(b, ",... (");
		us_sbuf_u64(b, nfiles);
		us_sbuf_puts(b, " files)");
	}
	if (t->nchunks > 1) {
		us_sbuf_puts(b, " (");
		us_sbuf_u64(b, t->nchunks);
		us_sbuf_puts(b, " chunks)");
	}
}

enum us_status us_view_raw_xattr(const struct us_view *v, const char *name,
				 struct us_sbuf *b)
{
	const struct us_tensor *t = us_view_raw_tensor(v);

	if (!t)
		return US_E_USAGE;
	if (strcmp(name, US_XATTR_DTYPE) == 0)
		us_sbuf_puts(b, us_dtype_name(t->dtype));
	else if (strcmp(name, US_XATTR_SHAPE) == 0)
		put_shape(b, t);
	else if (strcmp(name, US_XATTR_SOURCE) == 0)
		put_source(b, v->sd, t);
	else
		return US_E_USAGE;
	return b->oom ? US_E_NOMEM : US_OK;
}
