/* model.c - building and checking the state dict. */
#include "model.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/json.h"
#include "grow.h"
#include "overlap.h"
#include "storage/remote.h"

struct us_statedict *us_sd_new(void)
{
	struct us_statedict *sd = calloc(1, sizeof(*sd));

	if (sd)
		us_arena_init(&sd->arena);
	return sd;
}

void us_sd_free(struct us_statedict *sd)
{
	if (!sd)
		return;
	us_sd_free(sd->optim);
	free(sd->optim_json);
	for (size_t i = 0; !sd->borrowed_files && i < sd->nfiles; i++)
		us_file_close(&sd->files[i]);
	if (!sd->borrowed_files)
		free(sd->files);
	/* After the files (their objects live in its listing); the optimizer
	 * child, freed above, only borrowed them. */
	us_remote_free(sd->remote);
	free(sd->tensors);
	free(sd->consumed);
	free(sd->aliases);
	us_arena_free(&sd->arena);
	free(sd);
}

struct us_statedict *us_sd_optim(struct us_statedict *sd)
{
	if (!sd->optim) {
		sd->optim = us_sd_new();
		if (sd->optim) {
			sd->optim->borrowed_files = true;
			sd->optim->format = sd->format;
		}
	}
	return sd->optim;
}

bool us_sd_is_consumed(const struct us_statedict *sd, const char *relpath)
{
	for (size_t i = 0; i < sd->nconsumed; i++)
		if (strcmp(sd->consumed[i], relpath) == 0)
			return true;
	return false;
}

void us_sd_unconsume(struct us_statedict *sd, const char *relpath)
{
	for (size_t i = 0; i < sd->nconsumed; i++)
		if (strcmp(sd->consumed[i], relpath) == 0)
			sd->consumed[i] = sd->consumed[--sd->nconsumed];
}

enum us_status us_sd_consume(struct us_statedict *sd, const char *relpath)
{
	char *copy;

	if (us_sd_is_consumed(sd, relpath))
		return US_OK;
	US_TRY(US_GROW(sd->consumed, sd->consumed_cap, sd->nconsumed));
	copy = us_arena_strdup(&sd->arena, relpath);
	if (!copy)
		return US_E_NOMEM;
	sd->consumed[sd->nconsumed++] = copy;
	return US_OK;
}

const struct us_file *us_sd_find_file(const struct us_statedict *sd,
				      const char *relpath)
{
	for (size_t i = 0; i < sd->nfiles; i++)
		if (strcmp(sd->files[i].relpath, relpath) == 0)
			return &sd->files[i];
	return NULL;
}

enum us_status us_sd_open_file(struct us_statedict *sd, const struct us_dir *d,
			       const char *relpath, uint32_t *idx,
			       struct us_err *err)
{
	const struct us_file *known;
	struct us_file *f;
	enum us_status rc;

	/* The optimizer child's table is replaced by its parent's at
	 * finalize: a file opened there would be lost (and leak its fd). */
	assert(!sd->borrowed_files);
	if ((known = us_sd_find_file(sd, relpath))) {
		*idx = (uint32_t)(known - sd->files);
		return US_OK;
	}
	if (sd->nfiles >= UINT32_MAX ||
	    US_GROW(sd->files, sd->files_cap, sd->nfiles) != US_OK)
		return us_err_set(err, US_E_NOMEM, relpath, "out of memory");
	f = &sd->files[sd->nfiles];
	rc = us_file_open(d, relpath, f);
	if (rc == US_E_FORMAT)
		return us_err_set(err, rc, relpath, "not a regular file");
	if (rc == US_E_NOMEM)
		return us_err_set(err, rc, relpath, "out of memory");
	if (rc != US_OK)
		return us_err_set(err, rc, relpath, "cannot open: %s",
				  strerror(errno));
	f->relpath = us_arena_strdup(&sd->arena, relpath);
	if (!f->relpath || us_sd_consume(sd, relpath) != US_OK) {
		us_file_close(f);
		return us_err_set(err, US_E_NOMEM, relpath, "out of memory");
	}
	/* Shards are read front to back, and cold reads wait on them: twice the
	 * device's read-ahead window keeps the disk ahead of the FUSE requests
	 * (cold read of a 1 GB DCP: 0.45 -> 0.39 s median of 8, docs/
	 * benchmarks.md).  Our own WILLNEED prefetch was slower than this: it
	 * reads in small pages and stops the kernel's own read-ahead.  What
	 * this leaves (the read-ahead lapsing where a view switches shards)
	 * view/readahead.c covers.  (A remote object has its own prefetch.) */
	if (f->fd >= 0)
		posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*idx = (uint32_t)sd->nfiles++;
	return US_OK;
}

bool us_numel(uint32_t ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t n = 1;

	for (uint32_t k = 0; k < ndim; k++)
		if (__builtin_mul_overflow(n, shape[k], &n))
			return false;
	*out = n;
	return true;
}

bool us_nbytes(enum us_dtype dt, uint64_t numel, uint64_t *out)
{
	uint64_t bits;

	if (__builtin_mul_overflow(numel, (uint64_t)us_dtype_bits(dt), &bits))
		return false;
	if (bits % 8)
		return false;
	*out = bits / 8;
	return true;
}

struct us_tensor *us_sd_add_tensor(struct us_statedict *sd, const char *name,
				   enum us_dtype dtype, uint32_t ndim,
				   const uint64_t *shape, uint32_t nchunks,
				   const char *errpath, struct us_err *err)
{
	struct us_arena *a = &sd->arena;
	struct us_tensor *t;
	uint64_t *shp;

	if (ndim > US_MAX_NDIM) {
		us_err_set(err, US_E_UNSUPPORTED, errpath,
			   "tensor '%s' has %u dimensions (at most %d)", name,
			   ndim, US_MAX_NDIM);
		return NULL;
	}
	assert(!sd->finalized);
	if (US_GROW(sd->tensors, sd->tensors_cap, sd->ntensors) != US_OK)
		goto nomem;
	t = &sd->tensors[sd->ntensors];
	memset(t, 0, sizeof(*t));
	if (!us_numel(ndim, shape, &t->numel) ||
	    !us_nbytes(dtype, t->numel, &t->nbytes)) {
		us_err_set(err, US_E_FORMAT, errpath,
			   "tensor '%s': shape and dtype %s overflow or do not "
			   "fill whole bytes", name, us_dtype_name(dtype));
		return NULL;
	}
	t->name = t->source_name = us_arena_strdup(a, name);
	/* Consecutive tensors mostly come from one file: share its copy. */
	if (sd->ntensors && errpath && sd->tensors[sd->ntensors - 1].decl_path &&
	    !strcmp(sd->tensors[sd->ntensors - 1].decl_path, errpath))
		t->decl_path = sd->tensors[sd->ntensors - 1].decl_path;
	else if (errpath && !(t->decl_path = us_arena_strdup(a, errpath)))
		goto nomem;
	shp = us_arena_calloc(a, ndim ? ndim : 1, sizeof(*shp));
	t->chunks = us_arena_calloc(a, nchunks ? nchunks : 1, sizeof(*t->chunks));
	if (!t->name || !shp || !t->chunks)
		goto nomem;
	if (ndim)
		memcpy(shp, shape, ndim * sizeof(*shp));
	t->shape = shp;
	t->dtype = dtype;
	t->ndim = ndim;
	t->nchunks = nchunks;
	t->order = (uint32_t)sd->ntensors;
	t->nlinks = 1;
	for (uint32_t i = 0; i < nchunks; i++) {
		struct us_chunk *c = &t->chunks[i];

		c->offsets = us_arena_calloc(a, ndim ? ndim : 1, sizeof(uint64_t));
		c->sizes = us_arena_calloc(a, ndim ? ndim : 1, sizeof(uint64_t));
		if (!c->offsets || !c->sizes)
			goto nomem;
		c->src.dtype = dtype;
	}
	sd->ntensors++;
	return t;
nomem:
	us_err_set(err, US_E_NOMEM, errpath, "out of memory");
	return NULL;
}

struct us_tensor *us_sd_add_whole_tensor(struct us_statedict *sd,
					 const char *name, enum us_dtype dtype,
					 uint32_t ndim, const uint64_t *shape,
					 uint32_t file, uint64_t offset,
					 struct us_err *err)
{
	struct us_tensor *t;
	struct us_chunk *c;

	assert(file < sd->nfiles);
	t = us_sd_add_tensor(sd, name, dtype, ndim, shape, 1,
			     sd->files[file].relpath, err);
	if (!t)
		return NULL;
	c = &t->chunks[0];
	if (ndim)
		memcpy((uint64_t *)c->sizes, shape, ndim * sizeof(uint64_t));
	c->src.file = file;
	c->src.offset = offset;
	return t;
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp(((const struct us_tensor *)a)->name,
		      ((const struct us_tensor *)b)->name);
}

/* The file to name in a refusal about @t's shape, chunks or name: the one
 * that declared it.  (For DCP that is .metadata, not the .distcp file of its
 * first chunk, which refusals of a broken chunk grid used to name.) */
static const char *tensor_file(const struct us_statedict *sd,
			       const struct us_tensor *t)
{
	if (t->decl_path)
		return t->decl_path;
	return t->nchunks ? sd->files[t->chunks[0].src.file].relpath : NULL;
}

/* The last byte an extent can address, +1, or false on overflow. */
static bool extent_end(const struct us_tensor *t, const struct us_chunk *c,
		       uint64_t *end)
{
	uint64_t isz = us_dtype_bits(c->src.dtype) / 8, maxel = 0, span;

	if (us_dtype_bits(c->src.dtype) % 8) {
		/* Sub-byte elements: only a whole contiguous tensor. */
		if (c->src.strides || t->nchunks != 1)
			return false;
		return !__builtin_add_overflow(c->src.offset, t->nbytes, end);
	}
	for (uint32_t k = 0; k < t->ndim; k++) {
		uint64_t stride, step;

		/* check_tensor put the box inside the shape: the products of
		 * sizes below are bounded by numel. */
		assert(c->offsets[k] + c->sizes[k] <= t->shape[k]);
		if (c->sizes[k] == 0)
			return !__builtin_add_overflow(c->src.offset, 0, end);
		if (c->src.strides) {
			if (c->src.strides[k] < 0)
				return false;
			stride = (uint64_t)c->src.strides[k];
		} else {
			stride = 1;
			for (uint32_t j = k + 1; j < t->ndim; j++)
				stride *= c->sizes[j]; /* bounded by numel */
		}
		if (__builtin_mul_overflow(c->sizes[k] - 1, stride, &step) ||
		    __builtin_add_overflow(maxel, step, &maxel))
			return false;
	}
	if (__builtin_add_overflow(maxel, 1, &maxel) ||
	    __builtin_mul_overflow(maxel, isz, &span) ||
	    __builtin_add_overflow(c->src.offset, span, end))
		return false;
	return true;
}

static enum us_status check_extent(const struct us_statedict *sd,
				   const struct us_tensor *t,
				   const struct us_chunk *c, struct us_err *err)
{
	const struct us_file *f = &sd->files[c->src.file];
	uint64_t end, limit, item_end;

	assert(c->src.file < sd->nfiles); /* readers index files they opened */
	if (c->src.dtype != t->dtype)
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "tensor '%s': stored as %s, declared %s",
				  t->source_name, us_dtype_name(c->src.dtype),
				  us_dtype_name(t->dtype));
	if (!extent_end(t, c, &end))
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "tensor '%s': strides or offsets out of range",
				  t->source_name);
	limit = (uint64_t)f->size;
	if (c->src.xf != US_XF_NONE) {
		if (__builtin_add_overflow(c->src.item_off, c->src.item_len,
					   &item_end) || item_end > limit)
			return us_err_set(err, US_E_FORMAT, f->relpath,
					  "tensor '%s': item extends past the "
					  "end of the file", t->source_name);
		limit = c->src.decoded_len;
	}
	if (end > limit)
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "tensor '%s': data extends past the end of "
				  "the file (needs %llu bytes, has %llu)",
				  t->source_name, (unsigned long long)end,
				  (unsigned long long)limit);
	return US_OK;
}

/* No element of @t in two chunks (overlap.h: not pair by pair, which
 * was 10^10 box tests for a DCP tensor of 10^5 chunks). */
static enum us_status check_overlap(const struct us_tensor *t,
				    const char *path, struct us_err *err)
{
	uint32_t a = 0, b = 0;

	switch (us_chunks_overlap(t->ndim, t->chunks, t->nchunks, &a, &b)) {
	case US_OVERLAP_NONE:
		return US_OK;
	case US_OVERLAP_FOUND:
		return us_err_set(err, US_E_FORMAT, path,
				  "tensor '%s': chunks %u and %u overlap",
				  t->source_name, a, b);
	case US_OVERLAP_TOO_IRREGULAR:
		return us_err_set(err, US_E_UNSUPPORTED, path,
				  "tensor '%s': its %u chunks do not form a "
				  "grid that can be checked for overlaps",
				  t->source_name, t->nchunks);
	default:
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	}
}

static enum us_status check_tensor(const struct us_statedict *sd,
				   const struct us_tensor *t,
				   struct us_err *err)
{
	const char *path = tensor_file(sd, t);
	uint64_t total = 0;

	for (uint32_t i = 0; i < t->nchunks; i++) {
		const struct us_chunk *c = &t->chunks[i];
		uint64_t vol = 1;

		for (uint32_t k = 0; k < t->ndim; k++) {
			uint64_t e;

			if (__builtin_add_overflow(c->offsets[k], c->sizes[k], &e) ||
			    e > t->shape[k])
				return us_err_set(err, US_E_FORMAT, path,
						  "tensor '%s': chunk %u lies "
						  "outside the tensor",
						  t->source_name, i);
			vol *= c->sizes[k]; /* bounded by numel */
		}
		if (__builtin_add_overflow(total, vol, &total))
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': chunk sizes overflow",
					  t->source_name);
		if (vol)
			US_TRY(check_extent(sd, t, c, err));
	}
	US_TRY(check_overlap(t, path, err));
	if (total != t->numel)
		return us_err_set(err, US_E_FORMAT, path,
				  "tensor '%s': chunks cover %llu of %llu "
				  "elements", t->source_name,
				  (unsigned long long)total,
				  (unsigned long long)t->numel);
	return US_OK;
}

/* Two tensors with one name: the same key twice, or two keys that unwrap
 * to one name (names.h) -- say which. */
static enum us_status report_duplicate(const struct us_statedict *sd,
				       const struct us_tensor *a,
				       const struct us_tensor *b,
				       struct us_err *err)
{
	if (strcmp(a->source_name, b->source_name) == 0)
		return us_err_set(err, US_E_FORMAT, tensor_file(sd, b),
				  "tensor '%s' is also in %s", b->name,
				  tensor_file(sd, a));
	return us_err_set(err, US_E_FORMAT, tensor_file(sd, b),
			  "'%s' and '%s' (in %s) both unwrap to '%s'; mount "
			  "with --no-unwrap or --strip-prefix", a->source_name,
			  b->source_name, tensor_file(sd, a), b->name);
}

/*
 * A name no view can serve as it is, refused naming @t's source file:
 *  - "" (a key torch.save and the safetensors writer both accept) would be
 *    in model.safetensors and pytorch_model.bin but could have no tensors/
 *    file: no directory entry has an empty name, and the views must agree
 *    on the names.  (Unwrapping never empties a name: us_unwrap_name keeps
 *    the source's then.  The optimizer child has no tensors/ directory.)
 *  - a name that is not UTF-8 (a pickle's str can carry lone surrogates,
 *    '\udc80' as ED B2 80, which torch.load accepts) would make headers
 *    safetensors refuses to open.
 * Checked once the names are final, so that it holds for every reader.
 */
static const char *unservable_name(const struct us_statedict *sd,
				   const struct us_tensor *t)
{
	if (!sd->borrowed_files && t->name[0] == '\0')
		return "a tensor has an empty name, which cannot be a file "
		       "under tensors/";
	if (!us_utf8_valid((const unsigned char *)t->name, strlen(t->name)))
		return "a tensor name is not valid UTF-8, which safetensors "
		       "cannot store";
	return NULL;
}

/* ---- us_sd_check: the invariants, verified again (debug builds) ----------
 *
 * us_sd_finalize establishes the invariants in model.h with the refusals
 * above; this re-derives every one of them by a second, independent route
 * (128-bit arithmetic instead of overflow builtins, a corner sum instead of
 * overlap.c's grid) so that a reader or a refactoring that breaks one is
 * caught at the mount that breaks it, not by a wrong byte at read time.
 * Linear in chunks, plus one sort per tensor for the tiling.
 */
#ifndef NDEBUG
#include <stdio.h>

__extension__ typedef unsigned __int128 u128;

static __thread char check_msg[512];

static const char *violation(const struct us_tensor *t, int64_t chunk,
			     const char *what)
{
	char at[32] = "";

	if (chunk >= 0)
		snprintf(at, sizeof(at), " chunk %lld", (long long)chunk);
	snprintf(check_msg, sizeof(check_msg), "tensor '%s'%s: %s",
		 t && t->name ? t->name : "?", at, what);
	return check_msg;
}

/* Points (a chunk corner and its signed weight) sorted by coordinates. */
static int cmp_corner(const void *x, const void *y, void *ndim)
{
	const uint64_t *a = x, *b = y;

	for (uint32_t k = 0; k < *(const uint32_t *)ndim; k++)
		if (a[k] != b[k])
			return a[k] < b[k] ? -1 : 1;
	return 0;
}

/* Record the 2^ndim corners of the box [lo, lo + sz) with weight
 * (-1)^(upper coordinates) * @sign at @rec (ndim + 1 words each). */
static uint64_t *put_corners(uint64_t *rec, uint32_t ndim, const uint64_t *lo,
			     const uint64_t *sz, int64_t sign)
{
	for (uint64_t m = 0; m < (uint64_t)1 << ndim; m++, rec += ndim + 1) {
		int64_t w = sign;

		for (uint32_t k = 0; k < ndim; k++) {
			bool up = m >> k & 1;

			rec[k] = lo ? lo[k] + (up ? sz[k] : 0) : (up ? sz[k] : 0);
			w = up ? -w : w;
		}
		rec[ndim] = (uint64_t)w;
	}
	return rec;
}

/* Biggest corner table the tiling check builds (words), ~32 MiB. */
#define CHECK_TILE_MAX_WORDS ((uint64_t)1 << 22)

/*
 * Do the non-empty chunks of @t tile it exactly once?  The sum of the
 * boxes' indicator functions is fixed by its mixed differences, which are
 * the boxes' corners with weights +-1; it equals the tensor's indicator
 * (every element covered once: no gap, no overlap) exactly when the corner
 * weights of all chunks, added up point by point, equal the tensor box's.
 * So: list every corner with its weight, and the tensor's corners with the
 * opposite weight, sort, and every point must sum to zero -- O(c 2^d log)
 * for c chunks of d dimensions.  Skipped (NULL) where that table would be
 * large (many dimensions) or cannot be allocated: a debug check must not
 * turn an out-of-memory into an assertion failure.  Volumes are checked to
 * sum to numel separately, and finalize's overlap.c proof stands there.
 */
static const char *check_tiling(const struct us_tensor *t)
{
	uint32_t d = t->ndim, nvol = 0;
	uint64_t words, npts, *tab, *p;
	const char *bad = NULL;

	for (uint32_t i = 0; i < t->nchunks; i++) {
		uint64_t v = 1;

		for (uint32_t k = 0; k < d; k++)
			v = t->chunks[i].sizes[k] ? v : 0;
		nvol += v ? 1 : 0;
	}
	if (t->numel == 0 || d > 16)
		return NULL;
	npts = (uint64_t)(nvol + 1) << d;
	words = npts * (d + 1);
	if (words > CHECK_TILE_MAX_WORDS)
		return NULL;
	tab = malloc(words * sizeof(*tab));
	if (!tab)
		return NULL;
	p = put_corners(tab, d, NULL, t->shape, -1);
	for (uint32_t i = 0; i < t->nchunks; i++) {
		const struct us_chunk *c = &t->chunks[i];
		bool empty = false;

		for (uint32_t k = 0; k < d; k++)
			empty = empty || c->sizes[k] == 0;
		if (!empty)
			p = put_corners(p, d, c->offsets, c->sizes, 1);
	}
	assert(p == tab + words);
	qsort_r(tab, npts, (d + 1) * sizeof(*tab), cmp_corner, &d);
	for (uint64_t i = 0; i < npts && !bad;) {
		int64_t sum = 0;
		uint64_t j = i;

		for (; j < npts && !cmp_corner(tab + i * (d + 1),
					       tab + j * (d + 1), &d); j++)
			sum += (int64_t)tab[j * (d + 1) + d];
		if (sum)
			bad = violation(t, -1, "its chunks leave a gap or "
					"overlap (corner weights do not cancel)");
		i = j;
	}
	free(tab);
	return bad;
}

/* The last byte, +1, a non-empty chunk's extent addresses; 0 when it does
 * not fit 64 bits (finalize would have refused). */
static u128 check_span_end(const struct us_tensor *t, const struct us_chunk *c)
{
	unsigned bits = us_dtype_bits(c->src.dtype);
	u128 maxel = 0, stride = 1;

	if (bits % 8)
		return (u128)c->src.offset + t->nbytes;
	for (uint32_t k = t->ndim; k-- > 0;) {
		u128 s = c->src.strides ? (u128)(uint64_t)c->src.strides[k]
					: stride;

		maxel += (u128)(c->sizes[k] - 1) * s;
		stride *= c->sizes[k];
		if (maxel > UINT64_MAX || stride > UINT64_MAX)
			return 0;
	}
	return (u128)c->src.offset + (maxel + 1) * (bits / 8);
}

static bool is_float_kind(enum us_dtype dt)
{
	return dt == US_DT_F64 || dt == US_DT_F32 || dt == US_DT_F16 ||
	       dt == US_DT_BF16;
}

/* The extent of non-empty chunk @i: a known file, a known transform,
 * every byte inside the file (or the decoded item), the dtype as declared
 * (or a float presented as another float: us_tensor_present_as). */
static const char *check_extent_again(const struct us_statedict *sd,
				      const struct us_tensor *t, uint32_t i)
{
	const struct us_chunk *c = &t->chunks[i];
	const struct us_extent *x = &c->src;
	u128 end, limit;

	if (x->file >= sd->nfiles || !sd->files)
		return violation(t, i, "extent names no file of the state dict");
	limit = (u128)(uint64_t)sd->files[x->file].size;
	if (x->dtype != t->dtype &&
	    !(is_float_kind(x->dtype) && is_float_kind(t->dtype)))
		return violation(t, i, "stored dtype differs from the tensor's");
	if (us_dtype_bits(x->dtype) % 8 &&
	    (x->strides || t->nchunks != 1 || x->dtype != t->dtype))
		return violation(t, i, "sub-byte elements not one whole extent");
	for (uint32_t k = 0; x->strides && k < t->ndim; k++)
		if (x->strides[k] < 0)
			return violation(t, i, "negative stride");
	if (x->xf == US_XF_ZSTD) {
		if ((u128)x->item_off + x->item_len > limit)
			return violation(t, i, "item extends past its file");
		limit = x->decoded_len;
	} else if (x->xf != US_XF_NONE) {
		return violation(t, i, "unknown transform");
	}
	end = check_span_end(t, c);
	if (end == 0 || end > limit)
		return violation(t, i, "extent reaches past its file or item");
	return NULL;
}

/* Shape, numel, nbytes, every chunk's box and extent, the volume sum. */
static const char *check_tensor_again(const struct us_statedict *sd,
				      const struct us_tensor *t)
{
	u128 numel = 1, total = 0;
	const char *bad;

	if (t->ndim > US_MAX_NDIM || !t->shape || (t->nchunks && !t->chunks))
		return violation(t, -1, "ndim, shape or chunk list unset");
	for (uint32_t k = 0; k < t->ndim; k++)
		if ((numel *= t->shape[k]) > UINT64_MAX)
			return violation(t, -1, "numel overflows");
	if (numel != t->numel || numel * us_dtype_bits(t->dtype) % 8 ||
	    numel * us_dtype_bits(t->dtype) / 8 != t->nbytes)
		return violation(t, -1, "numel or nbytes do not match shape "
				 "and dtype");
	for (uint32_t i = 0; i < t->nchunks; i++) {
		const struct us_chunk *c = &t->chunks[i];
		u128 vol = 1;

		if (!c->offsets || !c->sizes)
			return violation(t, i, "box unset");
		for (uint32_t k = 0; k < t->ndim; k++) {
			if ((u128)c->offsets[k] + c->sizes[k] > t->shape[k])
				return violation(t, i, "box outside the tensor");
			vol *= c->sizes[k]; /* <= numel: inside the shape */
		}
		total += vol;
		if (vol && (bad = check_extent_again(sd, t, i)))
			return bad;
	}
	if (total != numel)
		return violation(t, -1, "chunk volumes do not sum to numel");
	return check_tiling(t);
}

/* tie_of names an untied tensor of the same kind in this state dict, and
 * nlinks counts the group on every member. */
static const char *check_ties(const struct us_statedict *sd)
{
	uint64_t members = 0, extra = 0;

	for (size_t i = 0; i < sd->ntensors; i++) {
		const struct us_tensor *t = &sd->tensors[i], *c = t->tie_of;

		if (!c) {
			if (t->nlinks < 1)
				return violation(t, -1, "nlinks is 0");
			extra += t->nlinks - 1;
			continue;
		}
		members++;
		if (c < sd->tensors || c >= sd->tensors + sd->ntensors || c == t)
			return violation(t, -1, "tie_of is not another tensor "
					 "of this state dict");
		if (c->tie_of)
			return violation(t, -1, "tie_of is not canonical");
		if (c->ndim != t->ndim || c->nbytes != t->nbytes ||
		    c->dtype != t->dtype ||
		    memcmp(c->shape, t->shape, t->ndim * sizeof(*t->shape)))
			return violation(t, -1, "tied to a tensor of another "
					 "dtype or shape");
		if (t->nlinks < 2 || t->nlinks != c->nlinks)
			return violation(t, -1, "nlinks differs from its "
					 "canonical's");
	}
	if (members != extra)
		return violation(NULL, -1, "nlinks do not count the tie groups");
	return NULL;
}

/* One level (not the optimizer child). */
static const char *check_level(const struct us_statedict *sd)
{
	const char *bad;

	if (!sd->finalized || (sd->ntensors && !sd->tensors))
		return violation(NULL, -1, "state dict not finalized");
	for (size_t i = 0; i < sd->ntensors; i++) {
		const struct us_tensor *t = &sd->tensors[i];

		if (!t->name || !t->source_name || unservable_name(sd, t))
			return violation(t, -1, "name unset or unservable");
		if (i && strcmp(sd->tensors[i - 1].name, t->name) >= 0)
			return violation(t, -1, "names not unique and sorted");
		if ((bad = check_tensor_again(sd, t)))
			return bad;
	}
	return check_ties(sd);
}

/* At the end of finalize: the optimizer child was checked by its own. */
static void assert_level_ok(const struct us_statedict *sd)
{
	const char *bad = check_level(sd);

	if (bad)
		fprintf(stderr, "unshardfs: internal error: us_sd_check: %s\n",
			bad);
	assert(!bad);
}

const char *us_sd_check(const struct us_statedict *sd)
{
	const char *bad = check_level(sd);

	if (!bad && sd->optim) {
		if (sd->optim->files != sd->files ||
		    sd->optim->nfiles != sd->nfiles)
			return violation(NULL, -1, "the optimizer does not share "
					 "the state dict's files");
		bad = us_sd_check(sd->optim);
	}
	return bad;
}

void us_sd_assert_ok(const struct us_statedict *sd)
{
	const char *bad = us_sd_check(sd);

	if (bad)
		fprintf(stderr, "unshardfs: internal error: us_sd_check: %s\n",
			bad);
	assert(!bad);
}
#endif /* !NDEBUG */

enum us_status us_sd_finalize(struct us_statedict *sd, struct us_err *err)
{
	assert(!sd->finalized);
	sd->finalized = true;
	if (sd->optim) {
		/* The parent's file table is complete now: share it. */
		sd->optim->files = sd->files;
		sd->optim->nfiles = sd->nfiles;
		US_TRY(us_sd_finalize(sd->optim, err));
	}
	if (sd->ntensors > 1)
		qsort(sd->tensors, sd->ntensors, sizeof(*sd->tensors),
		      cmp_tensor_name);
	for (size_t i = 0; i < sd->ntensors; i++) {
		const struct us_tensor *t = &sd->tensors[i];
		const char *why = unservable_name(sd, t);

		if (why) {
			const char *path = tensor_file(sd, t);

			return us_err_set(err, US_E_UNSUPPORTED, path ? path : ".",
					  "%s", why);
		}
		if (i > 0 && strcmp(t->name, sd->tensors[i - 1].name) == 0)
			return report_duplicate(sd, &sd->tensors[i - 1], t, err);
		US_TRY(check_tensor(sd, t, err));
	}
#ifndef NDEBUG
	assert_level_ok(sd);
#endif
	return US_OK;
}

const struct us_tensor *us_sd_find(const struct us_statedict *sd,
				   const char *name)
{
	size_t lo = 0, hi = sd->ntensors;

	assert(sd->finalized); /* sorted by name */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, sd->tensors[mid].name);

		if (c == 0)
			return &sd->tensors[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

enum us_status us_sd_add_alias(struct us_statedict *sd, const char *name,
			       const char *target)
{
	struct us_alias *a;

	assert(!sd->finalized);
	US_TRY(US_GROW(sd->aliases, sd->aliases_cap, sd->naliases));
	a = &sd->aliases[sd->naliases];
	a->name = us_arena_strdup(&sd->arena, name);
	a->target = us_arena_strdup(&sd->arena, target);
	if (!a->name || !a->target)
		return US_E_NOMEM;
	sd->naliases++;
	return US_OK;
}

static int cmp_ptr_name(const void *a, const void *b)
{
	return strcmp((*(const struct us_tensor *const *)a)->name,
		      (*(const struct us_tensor *const *)b)->name);
}

static const struct us_tensor *find_by_name(const struct us_tensor **v,
					    size_t n, const char *name)
{
	struct us_tensor key = { .name = name };
	const struct us_tensor *kp = &key, **hit;

	hit = bsearch(&kp, v, n, sizeof(*v), cmp_ptr_name);
	return hit ? *hit : NULL;
}

/* Pairs (alias, target index) of the aliases that apply; phase one, while
 * tensor pointers are stable. */
static size_t valid_aliases(struct us_statedict *sd, size_t *target)
{
	const struct us_tensor **v = malloc((sd->ntensors + 1) * sizeof(*v));
	size_t n = sd->ntensors, k = 0;

	if (!v)
		return SIZE_MAX;
	for (size_t i = 0; i < n; i++)
		v[i] = &sd->tensors[i];
	qsort(v, n, sizeof(*v), cmp_ptr_name);
	for (size_t i = 0; i < sd->naliases; i++) {
		const struct us_tensor *t = find_by_name(v, n, sd->aliases[i].target);

		if (t && !find_by_name(v, n, sd->aliases[i].name)) {
			sd->aliases[k] = sd->aliases[i];
			target[k++] = (size_t)(t - sd->tensors);
		}
	}
	free(v);
	return k;
}

enum us_status us_sd_resolve_aliases(struct us_statedict *sd,
				     struct us_err *err)
{
	size_t *target, n;

	/* Adds tensors: the array may move, and finalize has not sorted or
	 * checked them yet. */
	assert(!sd->finalized);
	if (!sd->naliases)
		return US_OK;
	target = malloc(sd->naliases * sizeof(*target));
	n = target ? valid_aliases(sd, target) : SIZE_MAX;
	if (n == SIZE_MAX) {
		free(target);
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		struct us_tensor *copy, *t;

		copy = us_sd_add_tensor(sd, sd->aliases[i].name,
					sd->tensors[target[i]].dtype,
					sd->tensors[target[i]].ndim,
					sd->tensors[target[i]].shape, 0, ".", err);
		if (!copy) {
			free(target);
			return err ? err->status : US_E_NOMEM;
		}
		t = &sd->tensors[target[i]]; /* after add: the array may move */
		copy->decl_path = t->decl_path;
		copy->chunks = t->chunks;
		copy->nchunks = t->nchunks;
	}
	sd->naliases = 0;
	free(target);
	return US_OK;
}

static bool is_castable(enum us_dtype dt)
{
	return dt == US_DT_F64 || dt == US_DT_F32 || dt == US_DT_F16 ||
	       dt == US_DT_BF16;
}

void us_tensor_present_as(struct us_tensor *t, enum us_dtype dtype)
{
	if (!is_castable(t->dtype) || !is_castable(dtype) || t->dtype == dtype)
		return;
	/* Assumed, not proven: the stored elements (2 bytes or more) lie in
	 * files, so numel is far below the 2^61 at which 8-byte elements
	 * would overflow nbytes. */
	assert(t->numel <= UINT64_MAX / 8);
	t->dtype = dtype;
	t->nbytes = t->numel * (us_dtype_bits(dtype) / 8);
}

void us_sd_present_as(struct us_statedict *sd, enum us_dtype dtype)
{
	if (!sd)
		return;
	for (size_t i = 0; i < sd->ntensors; i++)
		us_tensor_present_as(&sd->tensors[i], dtype);
#ifndef NDEBUG
	us_sd_assert_ok(sd); /* tied names still agree on dtype and nbytes */
#endif
	/* Not sd->optim: moments and step counts are training state, kept as
	 * stored (a bf16 step count is exact only up to 256). */
}
