/*
 * ds_flat.h - DeepSpeed ZeRO keeps parameters as flat 1-D vectors;
 * a parameter is a flat element range of them.  This maps such a range onto
 * chunks (model.h): first onto the source segments that hold it (a range can
 * cross a rank's partition or a param group's tensor), then each piece onto
 * the N-D boxes of the parameter's shape.
 *
 * A flat range [a, b) of a row-major tensor of N dims decomposes into at
 * most 2N - 1 boxes, each contiguous in the flat order: a head that finishes
 * the partial slices of a, a run of whole slices, and a tail that starts the
 * partial slices of b.
 */
#ifndef US_DS_FLAT_H
#define US_DS_FLAT_H

#include <stdint.h>

#include "../../model.h"

/* A box of a tensor: its corner, its extent, and its first flat element. */
struct us_flat_box {
	uint64_t offsets[US_MAX_NDIM];
	uint64_t sizes[US_MAX_NDIM];
	uint64_t flat;
};

/* Room for every box one range can give. */
#define US_FLAT_MAX_BOXES (2 * US_MAX_NDIM)

/*
 * us_flat_boxes - the boxes of the flat range [@a, @b) of a row-major
 * tensor of @ndim dims @shape (0 <= a <= b <= numel), in flat order, into
 * @out (US_FLAT_MAX_BOXES entries).  Returns how many (0 for an empty
 * range; 1 for any range of a 0-dim tensor, which is [0, 1)).
 */
uint32_t us_flat_boxes(uint32_t ndim, const uint64_t *shape, uint64_t a,
		       uint64_t b, struct us_flat_box *out);

/* A stretch of a source vector: @numel elements at byte @offset of @file. */
struct us_flat_seg {
	uint32_t file;
	uint64_t offset;
	uint64_t numel;
};

/* A virtual 1-D vector: segments one after another (a ZeRO-2 group across
 * ranks, a ZeRO-3 rank across groups). */
struct us_flat_vec {
	struct us_flat_seg *segs;
	uint32_t nsegs;
	uint64_t numel;
	enum us_dtype dtype;
};

/*
 * us_flat_place - add to @t chunks for its flat elements [@t0, @t0 + @len)
 * that live at [@pos, @pos + @len) of @v.  @t must have been created with
 * room for them (us_flat_count); *@next is the first free chunk of @t,
 * advanced.  The caller checks that the range lies inside @v.
 */
void us_flat_place(struct us_tensor *t, uint32_t *next,
		   const struct us_flat_vec *v, uint64_t pos, uint64_t len,
		   uint64_t t0);

/* us_flat_count - how many chunks us_flat_place() would add. */
uint32_t us_flat_count(const struct us_tensor *t, const struct us_flat_vec *v,
		       uint64_t pos, uint64_t len, uint64_t t0);

#endif /* US_DS_FLAT_H */
