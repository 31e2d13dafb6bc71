/* exec_cpu.c - the CPU executor: run a plan with pread into the reply buffer. */
#include "assemble.h"

#include <errno.h>
#include <sys/stat.h>

#include "../io.h"
#include "plan.h"

struct cpu_ctx {
	const struct us_statedict *sd;
	char *buf;
	const struct us_extent *checked; /* last extent whose file was checked */
};

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

	if (op->src->xf != US_XF_NONE)
		return -EIO; /* no reader produces transforms yet */
	if (!ctx->checked || ctx->checked->file != op->src->file) {
		rc = us_file_check(f);
		if (rc < 0)
			return rc;
		ctx->checked = op->src;
	}
	return us_pread_full(f->fd, ctx->buf + op->dst_off, op->len,
			     op->src_off);
}

int us_tensor_read(const struct us_statedict *sd, const struct us_tensor *t,
		   void *buf, uint64_t len, uint64_t off)
{
	struct cpu_ctx ctx = { .sd = sd, .buf = buf, .checked = NULL };

	return us_plan_range(t, off, len, cpu_emit, &ctx);
}
