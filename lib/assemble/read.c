/*
 * read.c - the front door: us_tensor_read picks the layer a tensor's bytes
 * come through (exec.h).  A tensor presented in its stored dtype is the
 * CPU executor's alone (plain runs, gathers, zstd items, strided spans, op
 * by op); one presented in another dtype goes through the cast layer,
 * which runs the conversion where the assembler says (CPU or CUDA).
 */
#include "exec.h"

#include <assert.h>

enum us_status us_tensor_read(struct us_assembler *as,
			      const struct us_statedict *sd,
			      const struct us_tensor *t, void *buf,
			      uint64_t len, uint64_t off)
{
	assert(as && sd && t);
	assert(off <= t->nbytes && len <= t->nbytes - off);
	if (us_tensor_is_cast(t))
		return us_cast_read(as, sd, t, buf, len, off);
	return us_exec_cpu_read(as, sd, t, buf, len, off);
}
