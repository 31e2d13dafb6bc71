/* layout.c - chunk-list rewrites for recipes (layout.h). */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

#define OFF(l, i) ((l)->v + (size_t)(i) * 3 * (l)->ndim)
#define SIZE(l, i) (OFF(l, i) + (l)->ndim)
#define STRIDE(l, i) (OFF(l, i) + 2 * (l)->ndim)

void us_layout_free(struct us_layout *l)
{
	free(l->v);
	free(l->src);
	l->v = NULL;
	l->src = NULL;
	l->nchunks = 0;
}

static enum us_status alloc_chunks(struct us_layout *l, uint32_t ndim, size_t n)
{
	size_t per = 3 * (size_t)(ndim ? ndim : 1);

	l->v = calloc(n ? n * per : 1, sizeof(uint64_t));
	l->src = calloc(n ? n : 1, sizeof(*l->src));
	if (!l->v || !l->src) {
		us_layout_free(l);
		return US_E_NOMEM;
	}
	return US_OK;
}

/* Row-major strides over a chunk's own sizes: what NULL strides mean. */
static bool row_major(uint32_t ndim, const uint64_t *sizes, uint64_t *st)
{
	uint64_t s = 1;

	for (uint32_t k = ndim; k-- > 0;) {
		st[k] = s;
		if (sizes[k] && __builtin_mul_overflow(s, sizes[k], &s))
			return false;
	}
	return true;
}

/* Chunk @i of @t as the next chunk of @l: US_OK, 1 when it is empty
 * (skipped), or a refusal. */
static int copy_chunk(const struct us_tensor *t, uint32_t i,
		      struct us_layout *l, const char *path,
		      struct us_err *err)
{
	const struct us_chunk *c = &t->chunks[i];
	uint32_t n = l->nchunks;
	bool empty = false;

	for (uint32_t k = 0; k < t->ndim; k++) {
		uint64_t e;

		if (__builtin_add_overflow(c->offsets[k], c->sizes[k], &e) ||
		    e > t->shape[k])
			return us_err_set(err, US_E_FORMAT, path, "tensor '%s': "
					  "chunk %u lies outside the tensor",
					  t->source_name, i);
		if (c->src.strides && c->src.strides[k] < 0)
			return us_err_set(err, US_E_FORMAT, path, "tensor '%s': "
					  "negative strides", t->source_name);
		OFF(l, n)[k] = c->offsets[k];
		SIZE(l, n)[k] = c->sizes[k];
		STRIDE(l, n)[k] = c->src.strides ? (uint64_t)c->src.strides[k] : 0;
		empty |= c->sizes[k] == 0;
	}
	if (empty)
		return 1;
	if (!c->src.strides && !row_major(t->ndim, c->sizes, STRIDE(l, n)))
		return us_err_set(err, US_E_FORMAT, path, "tensor '%s': chunk "
				  "%u overflows", t->source_name, i);
	l->src[n] = c->src;
	l->src[n].strides = NULL;
	return US_OK;
}

enum us_status us_layout_from(const struct us_tensor *t, struct us_layout *l,
			      const char *path, struct us_err *err)
{
	memset(l, 0, sizeof(*l));
	l->ndim = t->ndim;
	memcpy(l->shape, t->shape, t->ndim * sizeof(uint64_t));
	l->isz = us_dtype_bits(t->dtype) / 8;
	if (us_dtype_bits(t->dtype) % 8)
		return us_err_set(err, US_E_UNSUPPORTED, path, "tensor '%s': a "
				  "recipe cannot re-lay sub-byte elements (%s)",
				  t->source_name, us_dtype_name(t->dtype));
	if (alloc_chunks(l, t->ndim, t->nchunks) != US_OK)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	for (uint32_t i = 0; i < t->nchunks; i++) {
		int rc = copy_chunk(t, i, l, path, err);

		if (rc < 0) {
			us_layout_free(l);
			return rc;
		}
		l->nchunks += rc == US_OK; /* an empty chunk holds no element */
	}
	return US_OK;
}

/* Move the byte offset of chunk @i by @n elements of stride @st. */
static bool advance(struct us_layout *l, uint32_t i, uint64_t n, uint64_t st)
{
	uint64_t d;

	return !__builtin_mul_overflow(n, st, &d) &&
	       !__builtin_mul_overflow(d, l->isz, &d) &&
	       !__builtin_add_overflow(l->src[i].offset, d, &l->src[i].offset);
}

enum us_status us_layout_select(struct us_layout *l, uint32_t dim, uint64_t idx)
{
	struct us_layout out = { .ndim = l->ndim - 1, .isz = l->isz };
	uint32_t n = 0;

	if (alloc_chunks(&out, out.ndim, l->nchunks) != US_OK)
		return US_E_NOMEM;
	for (uint32_t k = 0, j = 0; k < l->ndim; k++)
		if (k != dim)
			out.shape[j++] = l->shape[k];
	for (uint32_t i = 0; i < l->nchunks; i++) {
		uint64_t o = OFF(l, i)[dim], s = SIZE(l, i)[dim];

		if (idx < o || idx - o >= s)
			continue;
		out.src[n] = l->src[i];
		if (!advance(&out, n, idx - o, STRIDE(l, i)[dim])) {
			us_layout_free(&out);
			return US_E_FORMAT;
		}
		for (uint32_t k = 0, j = 0; k < l->ndim; k++) {
			if (k == dim)
				continue;
			OFF(&out, n)[j] = OFF(l, i)[k];
			SIZE(&out, n)[j] = SIZE(l, i)[k];
			STRIDE(&out, n)[j++] = STRIDE(l, i)[k];
		}
		n++;
	}
	us_layout_free(l);
	out.nchunks = n;
	*l = out;
	return US_OK;
}

/* The part of source range [c0, c0+cn) that segment @g reads: its first
 * and last step k; false when they do not meet. */
static bool meet(const struct us_segment *g, uint64_t c0, uint64_t cn,
		 uint64_t *k0, uint64_t *k1)
{
	uint64_t last = c0 + cn - 1; /* cn > 0, bounded by the dim */

	if (g->len == 0 || last < g->src)
		return false;
	*k0 = c0 > g->src ? (c0 - g->src + g->step - 1) / g->step : 0;
	*k1 = (last - g->src) / g->step;
	if (*k1 > g->len - 1)
		*k1 = g->len - 1;
	return *k0 <= *k1;
}

enum us_status us_layout_remap(struct us_layout *l, uint32_t dim,
			       const struct us_segment *seg, size_t nseg,
			       uint64_t newsize)
{
	struct us_layout out = { .ndim = l->ndim, .isz = l->isz };
	size_t n = 0, cap = (size_t)l->nchunks * nseg;

	if (nseg && cap / nseg != l->nchunks)
		return US_E_NOMEM;
	if (alloc_chunks(&out, out.ndim, cap) != US_OK)
		return US_E_NOMEM;
	memcpy(out.shape, l->shape, sizeof(out.shape));
	out.shape[dim] = newsize;
	for (uint32_t i = 0; i < l->nchunks; i++) {
		uint64_t c0 = OFF(l, i)[dim], cn = SIZE(l, i)[dim];

		for (size_t g = 0; cn && g < nseg; g++) {
			uint64_t k0, k1;

			if (!meet(&seg[g], c0, cn, &k0, &k1))
				continue;
			memcpy(OFF(&out, n), OFF(l, i), 3 * l->ndim * sizeof(uint64_t));
			out.src[n] = l->src[i];
			OFF(&out, n)[dim] = seg[g].out + k0;
			SIZE(&out, n)[dim] = k1 - k0 + 1;
			if (!advance(&out, (uint32_t)n, seg[g].src + seg[g].step * k0 - c0,
				     STRIDE(l, i)[dim]) ||
			    __builtin_mul_overflow(STRIDE(l, i)[dim], seg[g].step,
						   &STRIDE(&out, n)[dim])) {
				us_layout_free(&out);
				return US_E_FORMAT;
			}
			n++;
		}
	}
	if (n > UINT32_MAX) {
		us_layout_free(&out);
		return US_E_NOMEM;
	}
	us_layout_free(l);
	out.nchunks = (uint32_t)n;
	*l = out;
	return US_OK;
}

enum us_status us_layout_cat(struct us_layout *l, const struct us_layout *parts,
			     size_t n, uint32_t dim)
{
	size_t per = 3 * (size_t)parts[0].ndim, total = 0;
	uint64_t base = 0;

	for (size_t p = 0; p < n; p++)
		total += parts[p].nchunks;
	if (total > UINT32_MAX)
		return US_E_NOMEM;
	memset(l, 0, sizeof(*l));
	if (alloc_chunks(l, parts[0].ndim, total) != US_OK)
		return US_E_NOMEM;
	l->ndim = parts[0].ndim;
	l->isz = parts[0].isz;
	memcpy(l->shape, parts[0].shape, sizeof(l->shape));
	for (size_t p = 0; p < n; p++) {
		for (uint32_t i = 0; i < parts[p].nchunks; i++) {
			memcpy(OFF(l, l->nchunks), OFF(&parts[p], i), per * sizeof(uint64_t));
			OFF(l, l->nchunks)[dim] += base; /* < base + dim: no overflow */
			l->src[l->nchunks++] = parts[p].src[i];
		}
		if (__builtin_add_overflow(base, parts[p].shape[dim], &base)) {
			us_layout_free(l);
			return US_E_FORMAT;
		}
	}
	l->shape[dim] = base;
	return US_OK;
}

/* Strides as the model stores them: NULL where they are row-major over
 * the chunk's sizes (the fast contiguous read paths look for that). */
static enum us_status put_strides(struct us_statedict *sd, const struct us_layout *l,
				  uint32_t i, struct us_chunk *c)
{
	uint64_t rm[US_MAX_NDIM];
	int64_t *st;
	bool same = row_major(l->ndim, SIZE(l, i), rm);

	for (uint32_t k = 0; same && k < l->ndim; k++)
		same = SIZE(l, i)[k] <= 1 || rm[k] == STRIDE(l, i)[k];
	if (same)
		return US_OK;
	st = us_arena_calloc(&sd->arena, l->ndim, sizeof(*st));
	if (!st)
		return US_E_NOMEM;
	for (uint32_t k = 0; k < l->ndim; k++) {
		if (STRIDE(l, i)[k] > INT64_MAX)
			return US_E_FORMAT;
		st[k] = (int64_t)STRIDE(l, i)[k];
	}
	c->src.strides = st;
	return US_OK;
}

struct us_tensor *us_layout_to(struct us_statedict *sd, const struct us_layout *l,
			       const char *name, enum us_dtype dtype,
			       const char *path, struct us_err *err)
{
	struct us_tensor *t = us_sd_add_tensor(sd, name, dtype, l->ndim, l->shape,
					       l->nchunks, path, err);

	for (uint32_t i = 0; t && i < l->nchunks; i++) {
		struct us_chunk *c = &t->chunks[i];
		enum us_status rc;

		memcpy((uint64_t *)c->offsets, OFF(l, i), l->ndim * sizeof(uint64_t));
		memcpy((uint64_t *)c->sizes, SIZE(l, i), l->ndim * sizeof(uint64_t));
		c->src = l->src[i];
		if ((rc = put_strides(sd, l, i, c)) == US_E_NOMEM) {
			us_err_set(err, rc, path, "out of memory");
			return NULL;
		}
		if (rc != US_OK) {
			us_err_set(err, rc, path, "tensor '%s': strides overflow", name);
			return NULL;
		}
	}
	return t;
}
