/* ds_flat.c - flat element ranges as chunks (ds_flat.h). */
#include "ds_flat.h"

#include <string.h>

struct boxer {
	uint32_t ndim;
	const uint64_t *shape;
	uint64_t inner[US_MAX_NDIM]; /* elements per step of each dim */
	uint64_t idx[US_MAX_NDIM];   /* the slice being descended into */
	struct us_flat_box *out;
	uint32_t n;
};

/* One box: dims before @k fixed at idx, [lo, hi) of dim @k, whole after. */
static void emit(struct boxer *b, uint32_t k, uint64_t lo, uint64_t hi,
		 uint64_t flat)
{
	struct us_flat_box *x = &b->out[b->n++];

	memset(x, 0, sizeof(*x));
	for (uint32_t j = 0; j < b->ndim; j++) {
		x->offsets[j] = j < k ? b->idx[j] : j == k ? lo : 0;
		x->sizes[j] = j < k ? 1 : j == k ? hi - lo : b->shape[j];
	}
	x->flat = flat;
}

/*
 * The range [a, b) of the slice idx[0..k) (a sub-tensor of dims k..ndim),
 * relative to that slice; @base is the slice's first flat element.  Only
 * the head or the tail recurses, and each ends at a slice boundary, so the
 * recursion gives at most one box per dim on each side.
 */
static void split(struct boxer *b, uint32_t k, uint64_t a, uint64_t e,
		  uint64_t base)
{
	uint64_t in = b->inner[k], ia = a / in, ib = e / in;

	if (a == e)
		return;
	if (ia == ib) { /* inside one slice of dim k */
		b->idx[k] = ia;
		split(b, k + 1, a - ia * in, e - ia * in, base + ia * in);
		return;
	}
	if (a % in) { /* head: the rest of slice ia */
		b->idx[k] = ia;
		split(b, k + 1, a - ia * in, in, base + ia * in);
		ia++;
	}
	if (ia < ib)
		emit(b, k, ia, ib, base + ia * in);
	if (e % in) { /* tail: the start of slice ib */
		b->idx[k] = ib;
		split(b, k + 1, 0, e - ib * in, base + ib * in);
	}
}

uint32_t us_flat_boxes(uint32_t ndim, const uint64_t *shape, uint64_t a,
		       uint64_t b, struct us_flat_box *out)
{
	struct boxer bx = { .ndim = ndim, .shape = shape, .out = out };
	uint64_t in = 1;

	if (a >= b)
		return 0;
	if (ndim == 0) { /* a scalar: its one element */
		memset(out, 0, sizeof(*out));
		return 1;
	}
	for (uint32_t k = ndim; k-- > 0;) {
		bx.inner[k] = in;
		in *= shape[k]; /* bounded by numel, checked by the caller */
	}
	split(&bx, 0, a, b, 0);
	return bx.n;
}

/* The segment of @v holding element @pos, and @pos within it. */
static uint32_t seg_at(const struct us_flat_vec *v, uint64_t *pos)
{
	uint32_t s = 0;

	while (s + 1 < v->nsegs && *pos >= v->segs[s].numel)
		*pos -= v->segs[s++].numel;
	return s;
}

/* Walk the pieces of [pos, pos + len) of @v; @fn sees each with the
 * tensor's flat range it holds. */
static uint32_t walk(struct us_tensor *t, uint32_t *next,
		     const struct us_flat_vec *v, uint64_t pos, uint64_t len,
		     uint64_t t0, bool fill)
{
	struct us_flat_box box[US_FLAT_MAX_BOXES];
	uint64_t in = pos, isz = us_dtype_bits(v->dtype) / 8;
	uint32_t s = seg_at(v, &in), count = 0;

	while (len && s < v->nsegs) {
		const struct us_flat_seg *g = &v->segs[s];
		uint64_t take = g->numel - in < len ? g->numel - in : len;
		uint32_t n = us_flat_boxes(t->ndim, t->shape, t0, t0 + take, box);

		for (uint32_t i = 0; fill && i < n; i++) {
			struct us_chunk *c = &t->chunks[(*next)++];

			if (t->ndim) {
				memcpy((uint64_t *)c->offsets, box[i].offsets,
				       t->ndim * sizeof(uint64_t));
				memcpy((uint64_t *)c->sizes, box[i].sizes,
				       t->ndim * sizeof(uint64_t));
			}
			c->src.file = g->file;
			c->src.dtype = v->dtype;
			c->src.offset = g->offset + (in + box[i].flat - t0) * isz;
		}
		count += n;
		t0 += take;
		len -= take;
		in = 0;
		s++;
	}
	return count;
}

uint32_t us_flat_count(const struct us_tensor *t, const struct us_flat_vec *v,
		       uint64_t pos, uint64_t len, uint64_t t0)
{
	return walk((struct us_tensor *)t, NULL, v, pos, len, t0, false);
}

void us_flat_place(struct us_tensor *t, uint32_t *next,
		   const struct us_flat_vec *v, uint64_t pos, uint64_t len,
		   uint64_t t0)
{
	walk(t, next, v, pos, len, t0, true);
}
