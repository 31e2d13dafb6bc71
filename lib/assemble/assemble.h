/*
 * assemble.h - tensor bytes on demand: what views call to fill a reply.
 *
 * The one public header of assemble/; everything else in the folder is
 * private to it.  Reads go through a struct us_assembler that its user
 * creates and owns (the daemon makes one per mount; a loader linked into
 * another program makes its own): it holds the bounded cache of decoded
 * items and strided spans, the parked zstd streams, and where casts run.
 * Nothing is process-wide, so two assemblers in one process never see each
 * other's cache or device.
 *
 * An assembler serves the state dicts of one file table: cache entries name
 * files by their index in us_statedict.files, which a state dict shares
 * with its optimizer child (model.h, us_sd_optim).  Read another
 * checkpoint through another assembler.
 *
 * Every function returns an enum us_status (us_error.h): US_OK, US_E_IO
 * when a source file fails or no longer is the file recorded at mount
 * (design.md: old and new bytes are never mixed), US_E_NOMEM.  The daemon
 * turns a status into an errno at the FUSE boundary, and nowhere else.
 */
#ifndef US_ASSEMBLE_H
#define US_ASSEMBLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model.h"
#include "../us_error.h"

/* The --cache-size default, and the bound of an assembler made without opts. */
#define US_ASSEMBLER_CACHE_DEFAULT (256ull << 20)

struct us_assembler;

/* Where --dtype casts run (the gathers always run on the CPU: in the FUSE
 * path every byte returns to host memory anyway, design.md). */
enum us_executor {
	US_EXEC_CPU = 0,
	US_EXEC_CUDA, /* on us_assembler_opts.device, falling back to the CPU
		       * per call when the device fails: the same bytes */
};

struct us_assembler_opts {
	/* Bytes of decoded items and strided spans kept in memory
	 * (--cache-size).  0 is a valid bound: nothing is held, zstd items
	 * are streamed and strided chunks read a group of rows at a time. */
	uint64_t cache_size;
	enum us_executor executor;
	int device; /* US_EXEC_CUDA: the CUDA device index */
};

/*
 * us_assembler_new - an assembler with @opts (NULL: a cache of
 * US_ASSEMBLER_CACHE_DEFAULT bytes, on the CPU) in *@out.  US_OK, or
 * US_E_NOMEM with @err (may be NULL) filled.  Create it before serving
 * and free it after the last read returned.
 */
enum us_status us_assembler_new(const struct us_assembler_opts *opts,
				struct us_assembler **out, struct us_err *err);
/* us_assembler_free - free @as (NULL: nothing), with no read in flight. */
void us_assembler_free(struct us_assembler *as);

/*
 * us_tensor_read - fill @buf with bytes [@off, @off + @len) of @t (a tensor
 * of @sd) in row-major order, in the dtype the views show (t->dtype, cast
 * from the stored one under --dtype).  The caller keeps the range inside
 * t->nbytes.  Contiguous source runs are read straight into @buf.
 * Thread-safe: any number of reads of one assembler may run at once.
 */
enum us_status us_tensor_read(struct us_assembler *as,
			      const struct us_statedict *sd,
			      const struct us_tensor *t, void *buf,
			      uint64_t len, uint64_t off);

/*
 * A reply described instead of filled (map.c): up to @cap segments, each
 * @len bytes at @mem (fd -1) or at offset @off of file descriptor @fd.
 * @overflow is set when the range cannot be described: a segment did not
 * fit, too many were short, or the range needs the executor (a cast, a
 * transformed item, a strided row); read it with us_tensor_read instead.
 *
 * With @sources set, the segments say instead which source bytes the range
 * is made from, for reading them ahead (view/readahead.c): no memory, casts
 * as their stored bytes, a strided row as the span it reads, zstd items
 * left out; only a full @v sets @overflow, and it just ends the list.
 */
struct us_seg {
	int fd;
	uint64_t off;
	const void *mem;
	size_t len;
	/* With @sources: the file read (a remote one has fd -1), so that
	 * read-ahead can ask its store for exactly these bytes. */
	const struct us_file *file;
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
 * that continue the last segment).  US_OK (check segs->overflow), or
 * US_E_IO when a source file changed since mount.  It needs no assembler:
 * describing holds no cache and runs on no device.
 */
enum us_status us_tensor_map(const struct us_statedict *sd,
			     const struct us_tensor *t, struct us_segs *segs,
			     uint64_t len, uint64_t off);

/*
 * Devices for us_assembler_opts.device: the CUDA devices this process can
 * use (0 when the build has no CUDA, or there is no driver or device; @why,
 * if not NULL, then receives a short static reason).  us_assemble_probe
 * asks the same in a forked child, so that a process that will fork
 * (daemonize) stays CUDA-free until its first cast (assemble/cuda.h).
 */
int us_assemble_device_count(const char **why);
int us_assemble_probe(char *why, size_t whylen);

#endif /* US_ASSEMBLE_H */
