/*
 * map.c - the zero-copy executor: a plan described as file segments
 * instead of executed.
 *
 * When every op of a read is a plain run (no cast, no transform), the bytes
 * need no assembly at all: the daemon can hand the kernel "these bytes of
 * this fd" and let it splice them from the page cache into the FUSE reply,
 * one copy fewer than pread into a buffer and write it back.  Anything else
 * (a --dtype cast, a zstd item, a gather of many short runs) sets
 * us_segs.overflow and the caller reads through us_tensor_read.
 */
#include "exec.h"

#include <assert.h>

#include "plan.h"

/* Runs shorter than MAP_SHORT that do not continue the last segment are
 * not worth a splice each: past MAP_MAX_SHORT of them in one reply (a
 * gather across chunks, a transposed chunk) the gathering executor, which
 * reads such runs in spans, costs less. */
#define MAP_SHORT (16u << 10)
#define MAP_MAX_SHORT 4

void us_segs_add_mem(struct us_segs *s, const void *mem, size_t len)
{
	if (s->sources)
		return; /* nothing to read ahead */
	if (s->n == s->cap) {
		s->overflow = true;
		return;
	}
	s->v[s->n++] = (struct us_seg){ .fd = -1, .mem = mem, .len = len };
}

static void add_fd(struct us_segs *s, int fd, uint64_t off, uint64_t len)
{
	struct us_seg *last = s->n ? &s->v[s->n - 1] : NULL;

	if (last && last->fd == fd && last->off + last->len == off) {
		last->len += len; /* the next run of the same file: one segment */
		return;
	}
	if (s->n == s->cap || (len < MAP_SHORT && ++s->nshort > MAP_MAX_SHORT)) {
		s->overflow = true;
		return;
	}
	s->v[s->n++] = (struct us_seg){ .fd = fd, .off = off, .len = len };
}

struct map_ctx {
	const struct us_statedict *sd;
	struct us_segs *segs;
	int32_t checked;   /* the last file whose identity was checked */
	enum us_status rc; /* why map_emit stopped the plan */
};

/* Stops the plan (1) once the range cannot be mapped, or a file changed. */
static int map_emit(void *vctx, const struct us_copy_op *op)
{
	struct map_ctx *ctx = vctx;
	const struct us_file *f = &ctx->sd->files[op->src->file];

	/* A remote object has no descriptor to splice from: the executor
	 * reads it (us_file_pread), as it does transformed and strided ops. */
	if (op->src->xf != US_XF_NONE || op->count > 1 || f->fd < 0) {
		ctx->segs->overflow = true; /* the executor's work */
		return 1;
	}
	/* finalize: the run lies inside its file, so the kernel's splice of
	 * it is never short (a short reply would be served as EOF) */
	assert(op->src->file < ctx->sd->nfiles);
	assert(op->src_off + op->len <= (uint64_t)f->size);
	/* As in the CPU executor: a changed file answers EIO. */
	if (ctx->checked != (int32_t)op->src->file) {
		ctx->rc = us_file_check(f);
		if (ctx->rc != US_OK)
			return 1;
		ctx->checked = (int32_t)op->src->file;
	}
	add_fd(ctx->segs, f->fd, op->src_off, op->len);
	return ctx->segs->overflow;
}

/*
 * segs->sources: the file bytes an op reads.  A strided row reads from its
 * first element to its last; rows of one chunk overlap, so a range inside
 * or continuing the last segment of the same file extends it.
 */
static int sources_emit(void *vctx, const struct us_copy_op *op)
{
	struct map_ctx *ctx = vctx;
	struct us_segs *s = ctx->segs;
	struct us_seg *last = s->n ? &s->v[s->n - 1] : NULL;
	const struct us_file *f = &ctx->sd->files[op->src->file];
	uint64_t off = op->src_off;
	uint64_t end = off + (op->count - 1) * op->src_stride + op->len;

	if (op->src->xf != US_XF_NONE)
		return 0; /* offsets in a decoded item, not in the file */
	assert(op->src->file < ctx->sd->nfiles); /* finalize */
	if (last && last->file == f && off >= last->off &&
	    off <= last->off + last->len) {
		if (end > last->off + last->len)
			last->len = (size_t)(end - last->off);
		return 0;
	}
	if (s->n == s->cap) {
		s->overflow = true;
		return 1; /* full: what is listed is enough */
	}
	s->v[s->n++] = (struct us_seg){ .fd = f->fd, .off = off,
					.len = (size_t)(end - off), .file = f };
	return 0;
}

/* The sources of bytes [@off, @off + @len) of @t; a cast tensor's come
 * from whole stored elements: plan those.  Only a gap in the chunks
 * (plan.h: never after us_sd_finalize) makes it fail. */
static enum us_status tensor_sources(const struct us_tensor *t,
				     struct map_ctx *ctx, uint64_t len,
				     uint64_t off)
{
	struct us_tensor s = *t;

	if (us_tensor_is_cast(t)) {
		uint64_t di = us_dtype_bits(t->dtype) / 8;
		uint64_t e0 = off / di, e1 = (off + len + di - 1) / di;

		s = us_tensor_stored(t);
		off = e0 * (us_dtype_bits(s.dtype) / 8);
		len = (e1 - e0) * (us_dtype_bits(s.dtype) / 8);
	}
	return us_plan_range(&s, off, len, sources_emit, ctx) < 0 ? US_E_IO : US_OK;
}

enum us_status us_tensor_map(const struct us_statedict *sd,
			     const struct us_tensor *t, struct us_segs *segs,
			     uint64_t len, uint64_t off)
{
	struct map_ctx ctx = { .sd = sd, .segs = segs, .checked = -1 };

	if (segs->sources)
		return tensor_sources(t, &ctx, len, off);
	if (us_tensor_is_cast(t)) {
		segs->overflow = true;
		return US_OK;
	}
	if (us_plan_range(t, off, len, map_emit, &ctx) < 0)
		return US_E_IO; /* a gap in the chunks (plan.h) */
	return ctx.rc;
}
