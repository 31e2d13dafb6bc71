/*
 * plan.h - a read of a tensor's byte range, as copy operations.
 *
 * The bytes of a tensor, as every view shows them, are its elements in
 * row-major order.  A chunk holds a box of them somewhere in a source file.
 * Planning walks the requested range and emits maximal runs that are
 * contiguous both in the output and in the source: those are read straight
 * into the reply buffer.  Where the source is strided (a transposed shard),
 * each output row of a chunk is one strided op (count elements, a source
 * stride); the executor gathers them.
 *
 * Plans are plain C with no I/O so that every shape is unit-testable.
 */
#ifndef US_PLAN_H
#define US_PLAN_H

#include <stdint.h>

#include "../model.h"

struct us_copy_op {
	const struct us_extent *src; /* the chunk's extent */
	uint64_t src_off; /* byte offset in the file (or decoded item) */
	uint64_t dst_off; /* byte offset in the caller's buffer */
	uint64_t len;     /* bytes (count > 1: of each element) */
	/*
	 * A strided row: @count (> 1) whole elements of @len bytes, consecutive
	 * in the output, @src_stride bytes apart in the source -- a row of a
	 * transposed chunk.  [@span_off, @span_off + @span_len) is the chunk's
	 * whole storage span, so that an executor can hold it once and gather
	 * every row from memory.  count == 1 for a plain run.
	 */
	uint64_t count;
	uint64_t src_stride;
	uint64_t span_off, span_len;
};

/* Called for every op in output order; a return > 0 stops the plan. */
typedef int (*us_plan_emit_fn)(void *ctx, const struct us_copy_op *op);

/*
 * us_plan_range - plan bytes [@off, @off + @len) of @t (clamped by the
 * caller to t->nbytes).  Returns 0, the first non-zero value of @emit, or
 * -1 if the tensor's chunks do not cover an element (cannot happen after
 * us_sd_finalize; asserted in debug builds).
 */
int us_plan_range(const struct us_tensor *t, uint64_t off, uint64_t len,
		  us_plan_emit_fn emit, void *ctx);

#endif /* US_PLAN_H */
