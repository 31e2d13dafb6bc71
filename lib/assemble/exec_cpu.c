/*
 * exec_cpu.c - the CPU executor: run a plan with pread into the reply
 * buffer; transformed (zstd) extents go through zitem.c and the cache.
 */
#include "assemble.h"

#include <errno.h>
#include <sys/stat.h>

#include "../io.h"
#include "cache.h"
#include "plan.h"
#include "zitem.h"

struct cpu_ctx {
	const struct us_statedict *sd;
	char *buf;
	const struct us_extent *checked; /* last extent whose file was checked */
	struct us_zitem_state z;         /* the zstd item being copied from */
};

int us_assemble_init(uint64_t cache_size)
{
	us_zitem_reset();
	return us_cache_init(cache_size);
}

int us_file_check(const struct us_file *f)
{
	struct stat st;

	if (fstat(f->fd, &st) < 0)
		return -errno;
	if (st.st_dev != f->dev || st.st_ino != f->ino ||
	    st.st_size != f->size || st.st_mtim.tv_sec != f->mtime.tv_sec ||
	    st.st_mtim.tv_nsec != f->mtime.tv_nsec)
		return -EIO;
	return 0;
}

static int cpu_emit(void *vctx, const struct us_copy_op *op)
{
	struct cpu_ctx *ctx = vctx;
	const struct us_file *f = &ctx->sd->files[op->src->file];
	int rc;

	/* First, for every extent, transformed or not: a file that changed
	 * since mount answers EIO, even when its item is cached. */
	if (!ctx->checked || ctx->checked->file != op->src->file) {
		rc = us_file_check(f);
		if (rc < 0)
			return rc;
		ctx->checked = op->src;
	}
	if (op->src->xf != US_XF_NONE)
		return us_zitem_copy(&ctx->z, f, op->src, ctx->buf + op->dst_off,
				     op->src_off, op->len);
	return us_pread_full(f->fd, ctx->buf + op->dst_off, op->len,
			     op->src_off);
}

int us_tensor_read(const struct us_statedict *sd, const struct us_tensor *t,
		   void *buf, uint64_t len, uint64_t off)
{
	struct cpu_ctx ctx = { .sd = sd, .buf = buf, .checked = NULL };
	int rc;

	us_zitem_begin(&ctx.z);
	rc = us_plan_range(t, off, len, cpu_emit, &ctx);
	us_zitem_end(&ctx.z);
	return rc;
}
