/*
 * overlap.h - do any two chunk boxes of a tensor overlap?
 *
 * A DCP .metadata may list 10^5 chunks for one tensor; comparing them in
 * pairs is 10^10 box tests at mount.  Chunk grids that checkpoints write
 * are (nearly) products of per-dimension cuts, so the boxes are laid on the
 * grid of every chunk boundary and each grid cell is claimed once: the
 * work is the number of cells, about the number of chunks.  A set of boxes
 * whose grid would have far more cells than chunks (only a crafted file)
 * is swept along its most-cut dimension instead, with a bound on the work.
 */
#ifndef US_OVERLAP_H
#define US_OVERLAP_H

#include <stdint.h>

#include "model.h"

/* Box tests the sweep may make before it gives up (~0.1 s). */
#define US_OVERLAP_SWEEP_MAX ((uint64_t)1 << 26)

enum us_overlap {
	US_OVERLAP_NONE = 0,
	US_OVERLAP_FOUND = 1,     /* *a < *b overlap */
	US_OVERLAP_NOMEM = -1,
	US_OVERLAP_TOO_IRREGULAR = -2, /* the sweep's bound was reached */
};

/*
 * us_chunks_overlap - find two of the @n chunks of an @ndim-dimensional
 * tensor whose boxes share an element; chunks with an empty box share
 * nothing.  Boxes must lie inside the tensor (offset + size cannot
 * overflow).  On US_OVERLAP_FOUND, *@a < *@b are their indexes.
 */
enum us_overlap us_chunks_overlap(uint32_t ndim, const struct us_chunk *c,
				  uint32_t n, uint32_t *a, uint32_t *b);

#endif /* US_OVERLAP_H */
