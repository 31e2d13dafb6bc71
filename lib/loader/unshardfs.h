/*
 * unshardfs.h - the loader: a checkpoint's consolidated state dict read
 * straight into the caller's memory, without FUSE (docs/loader.md).
 *
 * The loader builds the state dict exactly as the daemon does (the same
 * readers, names, ties and assembly of libunshard, from the same options),
 * so every tensor it reads equals, byte for byte, what a mount of the same
 * SOURCE with the same options serves.  PATH may also be the root of an
 * unshardfs mount: the loader then opens the mount's SOURCE with the
 * mount's options (its user.unshardfs.* xattrs), and refuses when SOURCE is
 * not readable here or its files changed since the mount.
 *
 * Every fallible function returns an enum us_status (US_OK is 0) and, when
 * @err is not NULL, fills it with one line "<path>: <what is wrong>".
 * This header and us_error.h are the whole interface of libunshard.so; a
 * loader may be used from any number of threads at once.
 */
#ifndef UNSHARDFS_H
#define UNSHARDFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "us_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define US_LOADER_API __attribute__((visibility("default")))

struct us_loader;

/*
 * The checkpoint options of the command line (unshardfs --help): each
 * string NULL for the default, spelled as the option takes it.  Zeroed,
 * the struct means the defaults; with a mount root, pass NULL or zeroed
 * options (the mount's own apply) or exactly the mount's options.
 */
struct us_loader_opts {
	const char *format;            /* --format: auto, safetensors, torch,
					* dcp, deepspeed, deepspeed-universal */
	bool no_unwrap;                /* --no-unwrap */
	const char *const *strip_prefix; /* --strip-prefix, @nstrip of them */
	size_t nstrip;
	const char *dtype;             /* --dtype: keep, bf16, f16, f32, ... */
	const char *ties;              /* --ties: auto, declared, off, equal */
	const char *deepspeed_weights; /* --deepspeed-weights: fp32, module */
	unsigned threads;              /* readers per call; 0: one per CPU,
					* at most 16 */
	uint64_t cache_size;           /* --cache-size; 0: the default */
	const char *recipe;            /* --recipe: NULL, auto, a built-in
					* name or a recipe file */
	const char *overlay;           /* --overlay DIR (its config.json) */
	bool hugepages;                /* back each destination buffer of at
					* least 2 MiB with transparent huge
					* pages, faulted in by the readers
					* before they read (docs/loader.md) */
	/* A remote SOURCE (s3://, https://): its store, as the daemon's
	 * options of the same names (NULL / false: the defaults).  Through a
	 * mount the mount's own are used (its options xattr). */
	const char *endpoint_url;      /* --endpoint-url */
	const char *region;            /* --region */
	const char *profile;           /* --profile */
	const char *addressing;        /* --addressing: auto, path, virtual */
	bool no_sign_request;          /* --no-sign-request */
	const char *cache_dir;         /* --cache-dir */
	uint64_t block_size;           /* --block-size; 0: the default */
	uint64_t cache_dir_size;       /* --cache-dir-size; 0: the default */
	unsigned connections;          /* --connections; 0: the default */
	unsigned retries;              /* --retries; 0: the default */
	unsigned timeout_s;            /* --timeout, seconds; 0: the default */
};

/*
 * us_loader_open - open @path (a SOURCE, or an unshardfs mount root) with
 * @opts (NULL: defaults) and read its metadata: nothing of the tensors is
 * read (except what --ties=auto compares, as at mount).  *@out is NULL on
 * failure.
 */
US_LOADER_API enum us_status us_loader_open(const char *path,
					    const struct us_loader_opts *opts,
					    struct us_loader **out,
					    struct us_err *err);
/* us_loader_close - free @ld (NULL: nothing), with no read in flight. */
US_LOADER_API void us_loader_close(struct us_loader *ld);

/* us_loader_source - SOURCE's absolute path (a mount's, resolved), or its
 * URL as given for a remote SOURCE. */
US_LOADER_API const char *us_loader_source(const struct us_loader *ld);
/* us_loader_options - the options in effect, in the canonical form of the
 * user.unshardfs.options xattr: "format=auto,no-unwrap=no,dtype=keep,...". */
US_LOADER_API const char *us_loader_options(const struct us_loader *ld);
/* us_loader_mounted - whether @ld was opened through a mount root. */
US_LOADER_API bool us_loader_mounted(const struct us_loader *ld);

/* One tensor of the state dict. */
struct us_loader_tensor {
	const char *name;       /* as every view names it */
	const char *dtype;      /* safetensors spelling: "F32", "BF16", ... */
	uint32_t ndim;
	const uint64_t *shape;  /* @ndim sizes */
	uint64_t nbytes;        /* row-major bytes */
	size_t tie;             /* the index of its tie group's canonical tensor
				 * (the name model.safetensors keeps); its own
				 * index when untied or canonical */
};

/* us_loader_count - the number of tensors, indexed 0..n-1 by name order. */
US_LOADER_API size_t us_loader_count(const struct us_loader *ld);
/* us_loader_info - tensor @i (US_E_USAGE when out of range). */
US_LOADER_API enum us_status us_loader_info(const struct us_loader *ld,
					    size_t i,
					    struct us_loader_tensor *out,
					    struct us_err *err);
/* us_loader_find - the index of tensor @name, or -1. */
US_LOADER_API long us_loader_find(const struct us_loader *ld,
				  const char *name);

/*
 * us_loader_chunk - the box of tensor @i's source chunk @k (a DCP shard's,
 * a ZeRO partition's piece, ...): its corner in *@offsets and its extent in
 * *@sizes, ndim entries each, owned by @ld.  Returns the tensor's number of
 * chunks (0 for @i out of range); for @k past them it fills nothing.  A
 * caller that assembles on a device reads each chunk whole (a request with
 * .chunk = @k + 1) and places it there: docs/loader.md.
 */
US_LOADER_API uint32_t us_loader_chunk(const struct us_loader *ld, size_t i,
				       uint32_t k, const uint64_t **offsets,
				       const uint64_t **sizes);

/*
 * us_loader_read - rows [@row0, @row1) along dim 0 of tensor @i into @buf
 * (@cap bytes at least (@row1 - @row0) * nbytes / shape[0]): rank r of n
 * holds its slice of a tensor-parallel split this way.  A 0-dim tensor has
 * one row.  Large reads are split across the loader's threads, each
 * reading its piece straight into @buf.
 */
US_LOADER_API enum us_status us_loader_read(struct us_loader *ld, size_t i,
					    uint64_t row0, uint64_t row1,
					    void *buf, uint64_t cap,
					    struct us_err *err);

/*
 * us_loader_read_slice - indices [@start, @stop) along dim @dim of tensor
 * @i, for the outer indices [@outer0, @outer1) (those of the dims before
 * @dim, row-major: the product of their sizes is the whole range), into
 * @buf (@cap bytes at least) in row-major order: a column-parallel rank's
 * slice of dim 1 is @outer0 = 0, @outer1 = shape[0].  Only the slice's
 * bytes are read, one run per outer index, over the loader's threads.
 */
struct us_loader_slice {
	uint32_t dim;
	uint64_t start, stop;
	uint64_t outer0, outer1;
};
US_LOADER_API enum us_status us_loader_read_slice(struct us_loader *ld,
						  size_t i,
						  const struct us_loader_slice *s,
						  void *buf, uint64_t cap,
						  struct us_err *err);

/* One piece of a batch: bytes [@off, @off + @len) of tensor @tensor, in
 * its row-major order; or, with @chunk = k + 1, of its source chunk k
 * (us_loader_chunk) in the chunk's own row-major order, as the tensor's
 * dtype (the same bytes the tensor has in that box). */
struct us_loader_req {
	size_t tensor;
	uint64_t off;
	uint64_t len;
	void *buf;
	uint32_t chunk;         /* 0: the tensor's bytes; k + 1: chunk k's */
};

/*
 * us_loader_read_many - every request of @reqs, spread over the loader's
 * threads (a large request is split, small ones are shared out): one call
 * for a whole state dict, or for a staging buffer's worth of it.  On
 * failure the contents of every @buf are unspecified.
 */
US_LOADER_API enum us_status us_loader_read_many(struct us_loader *ld,
						 const struct us_loader_req *reqs,
						 size_t n, struct us_err *err);

#ifdef __cplusplus
}
#endif

#endif /* UNSHARDFS_H */
