/*
 * assemble.h - tensor bytes on demand: what views call to fill a reply.
 */
#ifndef US_ASSEMBLE_H
#define US_ASSEMBLE_H

#include <stdbool.h>
#include <stdint.h>

#include "../model.h"

/*
 * us_tensor_read - fill @buf with bytes [@off, @off + @len) of @t in
 * row-major order (the caller keeps the range inside t->nbytes).
 * Contiguous source runs are read straight into @buf.  Returns 0, or a
 * negative errno: -EIO when a source file fails or no longer is the file
 * recorded at mount (design.md: old and new bytes are never mixed).
 */
int us_tensor_read(const struct us_statedict *sd, const struct us_tensor *t,
		   void *buf, uint64_t len, uint64_t off);

/*
 * A reply described instead of filled (map.c): up to @cap segments, each
 * @len bytes at @mem (fd -1) or at offset @off of file descriptor @fd.
 * @overflow is set when a segment did not fit (or too many were short).
 *
 * With @sources set, the segments say instead which source bytes the range
 * is made from, for reading them ahead (view/readahead.c): no memory, casts
 * as their stored bytes, a strided row as the span it reads, zstd items
 * left out; nothing answers -EAGAIN, and a full @v just ends the list.
 */
struct us_seg {
	int fd;
	uint64_t off;
	const void *mem;
	size_t len;
};

struct us_segs {
	struct us_seg *v;
	size_t n, cap;
	size_t nshort; /* short segments so far (map.c) */
	bool overflow;
	bool sources;
};

void us_segs_add_mem(struct us_segs *s, const void *mem, size_t len);

/*
 * us_tensor_map - describe bytes [@off, @off + @len) of @t as segments of
 * the source files, appended to @segs, without reading them (merging runs
 * that continue the last segment).  0; -EAGAIN when the range needs the
 * executor (a cast, a transformed item, short runs, or more segments than
 * fit); -EIO when a source file changed since mount.
 */
int us_tensor_map(const struct us_statedict *sd, const struct us_tensor *t,
		  struct us_segs *segs, uint64_t len, uint64_t off);

/*
 * us_assemble_init - set the bound on decoded data kept in memory
 * (--cache-size, in bytes; cache.h) and forget any state of an earlier
 * state dict.  Call before serving, with no read in flight.  0 or -ENOMEM.
 */
int us_assemble_init(uint64_t cache_size);

/* us_tensor_read_stored - the same, in the dtype the chunks are stored in
 * (the executor proper); us_tensor_read adds the --dtype cast. */
int us_tensor_read_stored(const struct us_statedict *sd,
			  const struct us_tensor *t, void *buf, uint64_t len,
			  uint64_t off);

/* us_tensor_is_cast - is @t presented in another dtype than it is stored
 * in (--dtype)?  us_tensor_read_cast reads such a tensor (cast_read.c). */
bool us_tensor_is_cast(const struct us_tensor *t);
/* us_tensor_stored - @t as stored: the same chunks, in their dtype. */
struct us_tensor us_tensor_stored(const struct us_tensor *t);
int us_tensor_read_cast(const struct us_statedict *sd, const struct us_tensor *t,
			void *buf, uint64_t len, uint64_t off);

/* us_assemble_set_device - where --dtype casts run: -1 the CPU, or CUDA
 * device N (falls back to the CPU per call if the device fails). */
void us_assemble_set_device(int dev);

/* us_file_check - 0 while @f still has the identity seen at mount, else -EIO
 * (or the fstat errno). */
int us_file_check(const struct us_file *f);

#endif /* US_ASSEMBLE_H */
