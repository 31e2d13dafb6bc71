/*
 * layout.h - a tensor's chunk list as a working copy that recipe
 * transforms rewrite (recipe.h): select one index of a dim (a split), and
 * remap a dim by affine segments (a slice, a permutation).  Every chunk
 * keeps its source extent; only its box, byte offset and element strides
 * change, so the result reads the same source bytes through the same read
 * path.
 */
#ifndef US_RECIPE_LAYOUT_H
#define US_RECIPE_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "../model.h"

/* Chunk i's box and strides: v[i*3*ndim + {0, ndim, 2*ndim} + k]. */
struct us_layout {
	uint32_t ndim;
	uint64_t shape[US_MAX_NDIM];
	uint64_t isz;            /* bytes per element */
	uint32_t nchunks;
	uint64_t *v;             /* offsets, sizes, strides (as uint64) */
	struct us_extent *src;   /* per chunk; strides unused */
};

/*
 * A segment of a remap: output indices [out, out+len) along the dim read
 * source indices src, src+step, ... (step >= 1).
 */
struct us_segment {
	uint64_t out, len, src, step;
};

/* us_layout_from - the chunks of @t with explicit strides; a chunk outside
 * the tensor is refused (finalize would; the rewrite must not hide it). */
enum us_status us_layout_from(const struct us_tensor *t, struct us_layout *l,
			      const char *path, struct us_err *err);
void us_layout_free(struct us_layout *l);

/* us_layout_select - keep index @idx of dim @dim and remove the dim. */
enum us_status us_layout_select(struct us_layout *l, uint32_t dim, uint64_t idx);

/* us_layout_remap - dim @dim becomes @newsize long, its indices given by
 * the @nseg segments (which tile [0, newsize) and stay inside the dim). */
enum us_status us_layout_remap(struct us_layout *l, uint32_t dim,
			       const struct us_segment *seg, size_t nseg,
			       uint64_t newsize);

/* us_layout_cat - @l becomes the @n layouts @parts joined along dim @dim
 * (each part's chunks shifted by the sizes before it); the parts have
 * the same ndim and the same sizes off @dim (the caller checked).  The
 * parts are left as they are.  US_E_FORMAT when the dim overflows. */
enum us_status us_layout_cat(struct us_layout *l, const struct us_layout *parts,
			     size_t n, uint32_t dim);

/* us_layout_to - add the tensor @name of @dtype with @l's chunks to @sd. */
struct us_tensor *us_layout_to(struct us_statedict *sd, const struct us_layout *l,
			       const char *name, enum us_dtype dtype,
			       const char *path, struct us_err *err);

#endif /* US_RECIPE_LAYOUT_H */
