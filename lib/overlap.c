/* overlap.c - chunk boxes that overlap: a grid of cells, or a sweep. */
#include "overlap.h"

#include <stdbool.h>
#include <stdlib.h>

/* Up to this many boxes, pairs are tested directly. */
#define PAIRWISE_MAX 32u

static bool box_empty(uint32_t ndim, const struct us_chunk *c)
{
	for (uint32_t k = 0; k < ndim; k++)
		if (c->sizes[k] == 0)
			return true;
	return false;
}

static bool boxes_overlap(uint32_t ndim, const struct us_chunk *a,
			  const struct us_chunk *b)
{
	for (uint32_t k = 0; k < ndim; k++)
		if (a->offsets[k] >= b->offsets[k] + b->sizes[k] ||
		    b->offsets[k] >= a->offsets[k] + a->sizes[k])
			return false;
	return true;
}

static enum us_overlap found(uint32_t i, uint32_t j, uint32_t *a, uint32_t *b)
{
	*a = i < j ? i : j;
	*b = i < j ? j : i;
	return US_OVERLAP_FOUND;
}

/* The first later box that overlaps an earlier one, as pairs would say. */
static enum us_overlap pairwise(uint32_t ndim, const struct us_chunk *c,
				const uint32_t *idx, uint32_t m,
				uint32_t *a, uint32_t *b)
{
	for (uint32_t i = 1; i < m; i++)
		for (uint32_t j = 0; j < i; j++)
			if (boxes_overlap(ndim, &c[idx[i]], &c[idx[j]]))
				return found(idx[j], idx[i], a, b);
	return US_OVERLAP_NONE;
}

static int cmp_u64(const void *pa, const void *pb)
{
	uint64_t x = *(const uint64_t *)pa, y = *(const uint64_t *)pb;

	return x < y ? -1 : x > y;
}

/* Every box boundary along each dimension, sorted and unique. */
struct cuts {
	uint64_t *v[US_MAX_NDIM];
	size_t n[US_MAX_NDIM];
	uint64_t *mem;
};

static bool cuts_make(struct cuts *g, uint32_t ndim, const struct us_chunk *c,
		      const uint32_t *idx, uint32_t m)
{
	g->mem = ndim ? malloc((size_t)ndim * 2 * m * sizeof(*g->mem)) : NULL;
	if (ndim && !g->mem)
		return false;
	for (uint32_t k = 0; k < ndim; k++) {
		uint64_t *v = g->mem + (size_t)k * 2 * m;
		size_t n = 0;

		for (uint32_t i = 0; i < m; i++) {
			v[2 * i] = c[idx[i]].offsets[k];
			v[2 * i + 1] = c[idx[i]].offsets[k] + c[idx[i]].sizes[k];
		}
		qsort(v, (size_t)2 * m, sizeof(*v), cmp_u64);
		for (size_t i = 0; i < (size_t)2 * m; i++)
			if (n == 0 || v[i] != v[n - 1])
				v[n++] = v[i];
		g->v[k] = v;
		g->n[k] = n;
	}
	return true;
}

/* Where @x (a boundary of some box) is among the cuts of dimension @k. */
static size_t cut_at(const struct cuts *g, uint32_t k, uint64_t x)
{
	size_t lo = 0, hi = g->n[k];

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (g->v[k][mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* The number of grid cells, or false when it passes @cap. */
static bool cells_within(const struct cuts *g, uint32_t ndim, uint64_t cap,
			 uint64_t *cells)
{
	*cells = 1;
	for (uint32_t k = 0; k < ndim; k++)
		if (__builtin_mul_overflow(*cells, g->n[k] - 1, cells) ||
		    *cells > cap)
			return false;
	return true;
}

/*
 * Claim, box after box in index order, the cells each one covers; a cell
 * claimed twice is an overlap.  Each step claims a new cell or stops, so
 * the work is at most the number of cells.
 */
static enum us_overlap claim(const struct cuts *g, uint32_t ndim,
			     const struct us_chunk *c, const uint32_t *idx,
			     uint32_t m, uint32_t *owner,
			     uint32_t *a, uint32_t *b)
{
	size_t lo[US_MAX_NDIM], hi[US_MAX_NDIM], at[US_MAX_NDIM];
	uint64_t stride[US_MAX_NDIM], s = 1;

	for (uint32_t k = ndim; k-- > 0;) { /* row-major over the cells */
		stride[k] = s;
		s *= g->n[k] - 1;
	}
	for (uint32_t i = 0; i < m; i++) {
		const struct us_chunk *ch = &c[idx[i]];
		int k;

		for (k = 0; k < (int)ndim; k++) {
			lo[k] = at[k] = cut_at(g, k, ch->offsets[k]);
			hi[k] = cut_at(g, k, ch->offsets[k] + ch->sizes[k]);
		}
		do {
			uint64_t cell = 0;

			for (k = 0; k < (int)ndim; k++)
				cell += at[k] * stride[k];
			if (owner[cell])
				return found(owner[cell] - 1, idx[i], a, b);
			owner[cell] = idx[i] + 1;
			for (k = (int)ndim - 1; k >= 0 && ++at[k] == hi[k]; k--)
				at[k] = lo[k]; /* odometer over the box's cells */
		} while (k >= 0);
	}
	return US_OVERLAP_NONE;
}

/* A box in the sweep's order: its start along the swept dimension. */
struct start {
	uint64_t at;
	uint32_t i;
};

static int cmp_start(const void *pa, const void *pb)
{
	const struct start *x = pa, *y = pb;

	return x->at < y->at ? -1 : x->at > y->at;
}

/*
 * Boxes in order of their start along dimension @k; each is tested against
 * the earlier ones still open there (the only ones it can overlap).
 */
static enum us_overlap sweep(uint32_t ndim, uint32_t k,
			     const struct us_chunk *c, const uint32_t *idx,
			     uint32_t m, uint32_t *a, uint32_t *b)
{
	struct start *order = malloc((size_t)m * sizeof(*order));
	uint32_t *open = malloc((size_t)m * sizeof(*open)), nopen = 0;
	enum us_overlap r = US_OVERLAP_NONE;
	uint64_t work = 0;

	if (!order || !open) {
		r = US_OVERLAP_NOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < m; i++)
		order[i] = (struct start){ c[idx[i]].offsets[k], idx[i] };
	qsort(order, m, sizeof(*order), cmp_start);
	for (uint32_t i = 0; i < m && r == US_OVERLAP_NONE; i++) {
		const struct us_chunk *ch = &c[order[i].i];
		uint32_t kept = 0;

		work += nopen;
		if (work > US_OVERLAP_SWEEP_MAX) {
			r = US_OVERLAP_TOO_IRREGULAR;
			break;
		}
		for (uint32_t j = 0; j < nopen && r == US_OVERLAP_NONE; j++) {
			const struct us_chunk *o = &c[open[j]];

			if (o->offsets[k] + o->sizes[k] <= ch->offsets[k])
				continue; /* closed before this one starts */
			if (boxes_overlap(ndim, ch, o))
				r = found(open[j], order[i].i, a, b);
			open[kept++] = open[j];
		}
		nopen = kept;
		open[nopen++] = order[i].i;
	}
out:
	free(order);
	free(open);
	return r;
}

/*
 * The dimension along which boxes are thinnest (the smallest share of the
 * grid's intervals per box, on average): the sweep keeps open only boxes
 * that span the current start, so thin boxes keep few open.
 */
static uint32_t thinnest(const struct cuts *g, uint32_t ndim,
			 const struct us_chunk *c, const uint32_t *idx,
			 uint32_t m)
{
	double best = 2.0;
	uint32_t kbest = 0;

	for (uint32_t k = 0; k < ndim; k++) {
		double spans = 0;

		for (uint32_t i = 0; i < m; i++) {
			const struct us_chunk *ch = &c[idx[i]];

			spans += (double)(cut_at(g, k, ch->offsets[k] + ch->sizes[k]) -
					  cut_at(g, k, ch->offsets[k]));
		}
		spans /= (double)m * (double)(g->n[k] - 1);
		if (spans < best) {
			best = spans;
			kbest = k;
		}
	}
	return kbest;
}

static enum us_overlap on_grid(uint32_t ndim, const struct us_chunk *c,
			       const uint32_t *idx, uint32_t m,
			       uint32_t *a, uint32_t *b)
{
	uint64_t cap = (uint64_t)m * 16 + 4096, cells;
	enum us_overlap r = US_OVERLAP_NOMEM;
	struct cuts g = { 0 };

	if (!cuts_make(&g, ndim, c, idx, m))
		return US_OVERLAP_NOMEM;
	if (cells_within(&g, ndim, cap, &cells)) {
		uint32_t *owner = calloc(cells, sizeof(*owner));

		if (owner)
			r = claim(&g, ndim, c, idx, m, owner, a, b);
		free(owner);
	} else {
		r = sweep(ndim, thinnest(&g, ndim, c, idx, m), c, idx, m, a, b);
	}
	free(g.mem);
	return r;
}

enum us_overlap us_chunks_overlap(uint32_t ndim, const struct us_chunk *c,
				  uint32_t n, uint32_t *a, uint32_t *b)
{
	uint32_t *idx, m = 0;
	enum us_overlap r;

	if (n < 2)
		return US_OVERLAP_NONE;
	idx = malloc((size_t)n * sizeof(*idx));
	if (!idx)
		return US_OVERLAP_NOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (!box_empty(ndim, &c[i]))
			idx[m++] = i;
	if (m <= PAIRWISE_MAX)
		r = pairwise(ndim, c, idx, m, a, b);
	else
		r = on_grid(ndim, c, idx, m, a, b);
	free(idx);
	return r;
}
