/*
 * exec.h - the executors behind the front door (read.c), private to
 * assemble/.
 *
 * Layers, each calling only the ones below it:
 *   read.c       us_tensor_read: a cast tensor to cast_read.c, any other
 *                to the CPU executor
 *   cast_read.c  reads stored elements through the CPU executor, converts
 *                them on the CPU or the assembler's CUDA device
 *   exec_cpu.c   runs a plan (plan.h): pread, gathers, zstd items (zitem.c)
 *                and strided spans (tile.c) through the assembler's cache
 *   map.c        the zero-copy executor: the same plan described, not run
 * us_file_check (storage/storage.h) serves exec_cpu.c and map.c alike.
 */
#ifndef US_EXEC_H
#define US_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "assemble.h"

/* us_exec_cpu_read - us_tensor_read in the dtype the chunks are stored in
 * (@t's own dtype is ignored): the CPU executor proper. */
enum us_status us_exec_cpu_read(struct us_assembler *as,
				const struct us_statedict *sd,
				const struct us_tensor *t, void *buf,
				uint64_t len, uint64_t off);

/* us_cast_read - us_tensor_read of a tensor us_tensor_is_cast says is
 * presented in another dtype (--dtype). */
enum us_status us_cast_read(struct us_assembler *as,
			    const struct us_statedict *sd,
			    const struct us_tensor *t, void *buf, uint64_t len,
			    uint64_t off);

/* us_tensor_is_cast - is @t presented in another dtype than it is stored in? */
bool us_tensor_is_cast(const struct us_tensor *t);
/* us_tensor_stored - @t as stored: the same chunks, in their dtype. */
struct us_tensor us_tensor_stored(const struct us_tensor *t);

#endif /* US_EXEC_H */
