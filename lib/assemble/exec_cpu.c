/*
 * exec_cpu.c - the CPU executor: run a plan with pread into the reply
 * buffer; transformed (zstd) extents go through zitem.c and the
 * assembler's cache.
 */
#include "exec.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "../io.h"
#include "assembler.h"
#include "gather.h"
#include "plan.h"
#include "tile.h"
#include "zitem.h"

/*
 * Gathers.  A plan emits many short runs where every output row gathers
 * from several chunks (Shard(1)); a transposed chunk too big for the cache
 * is read a group of rows at a time (row_group).  One pread each costs
 * a syscall per few bytes,
 * so short plain runs are queued, sorted by source, and served by one
 * preadv per source span that covers a group of them: each run straight
 * into its place in the reply, the unneeded bytes between runs into a junk
 * buffer.  Long runs go straight into the reply too, one pread each.
 * Memory: the buffers come from the assembler's bounded pool (gather.h),
 * one held per read while it gathers: the "fixed per-thread buffer" of
 * design.md, bounded by CPUs rather than by threads.
 */
#define GATHER_SHORT (64u << 10) /* runs shorter than this are gathered */
#define GATHER_BUF US_GATHER_BUF
#define GATHER_GAP US_GATHER_GAP
#define GATHER_OPS US_GATHER_OPS

static int op_cmp(const void *a, const void *b)
{
	const struct us_copy_op *x = a, *y = b;

	if (x->src->file != y->src->file)
		return x->src->file < y->src->file ? -1 : 1;
	return x->src_off < y->src_off ? -1 : x->src_off > y->src_off;
}

/*
 * Rows of a transposed chunk whose span the cache cannot hold, grouped:
 * the next output row reads the same elements one element further on in
 * the source, so @rows rows read, for each of their @count elements, one
 * run of @rows elements.  One pread per such run (or per span of nearby
 * runs) instead of one per element: a 128 MiB transposed tensor read with
 * a 16 MiB cache, source warm, 2.8 s -> 0.25 s (the cached path: 0.21 s).
 */
struct row_group {
	struct us_copy_op first;
	uint64_t rows;     /* 0: empty */
	uint64_t dst_step; /* output bytes from one row to the next */
};

struct cpu_ctx {
	const struct us_statedict *sd;
	struct us_gather_pool *gathers;  /* where ctx->g comes from */
	enum us_status rc;               /* why an emit stopped the plan */
	char *buf;
	const struct us_extent *checked; /* last extent whose file was checked */
	struct us_zitem_state z;         /* the zstd item being copied from */
	struct us_tile_state tile;       /* the strided chunk's span held */
	struct us_gather *g;             /* NULL until a short run is queued */
	struct row_group rg;             /* strided rows not yet read */
};

/*
 * One preadv from queued run @*i on (advanced past the runs it serves): the
 * runs of one file that each start at most GATHER_GAP past the previous
 * one's end, their bytes straight into the reply and the gaps into the junk
 * buffer.  A run that overlaps the previous one starts the next preadv.  A
 * remote file's runs must touch (no gap): its gap bytes would be fetched.
 */
static enum us_status flush_span(struct cpu_ctx *ctx, struct us_gather *g,
				 size_t *i)
{
	uint32_t file = g->ops[*i].src->file;
	const struct us_file *f = &ctx->sd->files[file];
	uint64_t start = g->ops[*i].src_off, end = start;
	uint64_t max_gap = f->fd >= 0 ? GATHER_GAP : 0;
	int n = 0;

	for (; *i < g->n; (*i)++) {
		const struct us_copy_op *o = &g->ops[*i];

		if (o->src->file != file || o->src_off < end ||
		    o->src_off - end > max_gap || n + 2 > US_GATHER_IOV)
			break;
		if (o->src_off > end)
			g->iov[n++] = (struct iovec){ g->junk, o->src_off - end };
		g->iov[n++] = (struct iovec){ ctx->buf + o->dst_off, o->len };
		end = o->src_off + o->len;
	}
	assert(n > 0); /* the first run always starts at @start */
	return us_file_preadv(f, g->iov, n, start);
}

/* Serve the queued runs: one preadv per span of nearby source bytes. */
static enum us_status gather_flush(struct cpu_ctx *ctx)
{
	struct us_gather *g = ctx->g;
	size_t i = 0;
	enum us_status rc = US_OK;

	if (!g || g->n == 0)
		return US_OK;
	qsort(g->ops, g->n, sizeof(*g->ops), op_cmp);
	while (i < g->n && rc == US_OK)
		rc = flush_span(ctx, g, &i);
	g->n = 0;
	return rc;
}

static enum us_status cpu_op(struct cpu_ctx *ctx, const struct us_copy_op *op);

/* Element @i of strided row @op, as a plain op. */
static struct us_copy_op element_of(const struct us_copy_op *op, uint64_t i)
{
	struct us_copy_op e = *op;

	e.count = 1;
	e.src_off = op->src_off + i * op->src_stride;
	e.dst_off = op->dst_off + i * op->len;
	return e;
}

/* Copy @n elements of @len bytes, @stride apart in @s, packed into @d.
 * The common sizes get a fixed-size copy the compiler inlines. */
static void gather(char *d, const unsigned char *s, uint64_t n, uint64_t len,
		   uint64_t stride)
{
	uint64_t i;

	switch (len) {
	case 2:
		for (i = 0; i < n; i++)
			memcpy(d + 2 * i, s + i * stride, 2);
		break;
	case 4:
		for (i = 0; i < n; i++)
			memcpy(d + 4 * i, s + i * stride, 4);
		break;
	case 8:
		for (i = 0; i < n; i++)
			memcpy(d + 8 * i, s + i * stride, 8);
		break;
	default:
		for (i = 0; i < n; i++)
			memcpy(d + len * i, s + i * stride, len);
	}
}

/* Does @op continue row group @rg (same chunk and shape, the next row)? */
static bool group_extends(const struct row_group *rg,
			  const struct us_copy_op *op)
{
	const struct us_copy_op *f = &rg->first;

	if (rg->rows == 0 || op->src != f->src || op->count != f->count ||
	    op->len != f->len || op->src_stride != f->src_stride ||
	    op->src_off != f->src_off + rg->rows * f->len ||
	    (rg->rows + 1) * f->len > GATHER_BUF)
		return false;
	if (rg->rows == 1) /* the second row sets the step; rows never overlap */
		return op->dst_off >= f->dst_off + f->count * f->len;
	return op->dst_off == f->dst_off + rg->rows * rg->dst_step;
}

/* Read the group's runs, a span of nearby ones per pread, and scatter each
 * run's elements to their rows. */
static enum us_status group_flush(struct cpu_ctx *ctx)
{
	struct row_group *rg = &ctx->rg;
	const struct us_copy_op *f = &rg->first;
	uint64_t run = rg->rows * f->len, i = 0, n;
	enum us_status rc = US_OK;
	const struct us_file *file;

	if (rg->rows == 0)
		return US_OK;
	file = &ctx->sd->files[f->src->file];
	while (i < f->count && rc == US_OK) {
		n = 1;
		if (f->src_stride <= run + GATHER_GAP && f->src_stride)
			n = (GATHER_BUF - run) / f->src_stride + 1;
		if (n > f->count - i)
			n = f->count - i;
		assert((n - 1) * f->src_stride + run <= GATHER_BUF);
		rc = us_file_pread(file, ctx->g->span,
				    (size_t)((n - 1) * f->src_stride + run),
				    f->src_off + i * f->src_stride);
		for (uint64_t k = 0; rc == US_OK && k < n; k++)
			for (uint64_t j = 0; j < rg->rows; j++)
				memcpy(ctx->buf + f->dst_off + j * rg->dst_step +
				       (i + k) * f->len,
				       ctx->g->span + k * f->src_stride + j * f->len,
				       f->len);
		i += n;
	}
	rg->rows = 0;
	return rc;
}

/* Queue strided row @op in the row group (flushing the group it does not
 * continue).  false when there is no buffer for it (*@rc is then US_OK). */
static bool group_add(struct cpu_ctx *ctx, const struct us_copy_op *op,
		      enum us_status *rc)
{
	struct row_group *rg = &ctx->rg;

	*rc = US_OK;
	if (!ctx->g && !(ctx->g = us_gather_take(ctx->gathers)))
		return false;
	if (group_extends(rg, op)) {
		if (rg->rows == 1)
			rg->dst_step = op->dst_off - rg->first.dst_off;
		rg->rows++;
		return true;
	}
	*rc = group_flush(ctx);
	*rg = (struct row_group){ .first = *op, .rows = 1 };
	return true;
}

/*
 * A strided row (a transposed chunk): gathered from the chunk's storage
 * span held in the cache (tile.c).  A span that cannot be held is read a
 * group of rows at a time (group_add); one in a zstd item, element by
 * element from the decoded item.
 */
static enum us_status strided_op(struct cpu_ctx *ctx, const struct us_file *f,
				 const struct us_copy_op *op)
{
	const unsigned char *span = NULL;
	enum us_status rc = US_OK;

	if (op->src->xf == US_XF_NONE)
		span = us_tile_get(&ctx->tile, f, op->src->file, op->span_off,
				   op->span_len, &rc);
	if (rc != US_OK)
		return rc;
	if (span) {
		/* the row's last element inside the span held (plan.c) */
		assert(op->src_off >= op->span_off &&
		       op->src_off - op->span_off + (op->count - 1) * op->src_stride +
			       op->len <= op->span_len);
		gather(ctx->buf + op->dst_off, span + (op->src_off - op->span_off),
		       op->count, op->len, op->src_stride);
		return US_OK;
	}
	if (op->src->xf == US_XF_NONE && group_add(ctx, op, &rc))
		return rc;
	/* no buffer for a group: one element at a time */
	for (uint64_t i = 0; i < op->count && rc == US_OK; i++) {
		struct us_copy_op e = element_of(op, i);

		rc = cpu_op(ctx, &e);
	}
	return rc;
}

/* A plain run: queued for a gather when short, else read straight in. */
static enum us_status plain_op(struct cpu_ctx *ctx, const struct us_file *f,
			       const struct us_copy_op *op)
{
	enum us_status rc;

	if (op->len < GATHER_SHORT && op->src->xf == US_XF_NONE) {
		if (!ctx->g)
			ctx->g = us_gather_take(ctx->gathers);
		if (ctx->g) {
			if (ctx->g->n == GATHER_OPS &&
			    (rc = gather_flush(ctx)) != US_OK)
				return rc;
			ctx->g->ops[ctx->g->n++] = *op;
			return US_OK;
		}
	}
	if (op->src->xf != US_XF_NONE)
		return us_zitem_copy(&ctx->z, f, op->src, ctx->buf + op->dst_off,
				     op->src_off, op->len);
	return us_file_pread(f, ctx->buf + op->dst_off, op->len,
			      op->src_off);
}

static enum us_status cpu_op(struct cpu_ctx *ctx, const struct us_copy_op *op)
{
	const struct us_file *f = &ctx->sd->files[op->src->file];
	enum us_status rc;

	/* finalize: every extent names a file of the table and lies inside
	 * it (or inside its decoded item, which zitem.c asserts) */
	assert(op->src->file < ctx->sd->nfiles);
	assert(op->src->xf != US_XF_NONE ||
	       (op->count > 1 ? op->span_off + op->span_len
			      : op->src_off + op->len) <= (uint64_t)f->size);

	/* First, for every extent, transformed or not: a file that changed
	 * since mount answers EIO, even when its item is cached. */
	if (!ctx->checked || ctx->checked->file != op->src->file) {
		rc = us_file_check(f);
		if (rc != US_OK)
			return rc;
		ctx->checked = op->src;
	}
	if (op->count > 1)
		return strided_op(ctx, f, op);
	return plain_op(ctx, f, op);
}

/* The plan's callback: a failure stops the plan, its status kept. */
static int cpu_emit(void *vctx, const struct us_copy_op *op)
{
	struct cpu_ctx *ctx = vctx;

	ctx->rc = cpu_op(ctx, op);
	return ctx->rc != US_OK;
}

enum us_status us_exec_cpu_read(struct us_assembler *as,
				const struct us_statedict *sd,
				const struct us_tensor *t, void *buf,
				uint64_t len, uint64_t off)
{
	struct cpu_ctx ctx = { .sd = sd, .gathers = as->gathers, .buf = buf,
			       .checked = NULL };
	enum us_status rc, frc, grc;

	us_zitem_begin(&ctx.z, as->cache, as->zitems);
	us_tile_begin(&ctx.tile, as->cache);
	/* A plan stopped by no emit found a gap in the chunks (plan.h). */
	rc = us_plan_range(t, off, len, cpu_emit, &ctx) == 0 ? US_OK :
	     ctx.rc != US_OK ? ctx.rc : US_E_IO;
	frc = gather_flush(&ctx); /* always empties the queue */
	grc = group_flush(&ctx);  /* and the row group */
	us_gather_give(as->gathers, ctx.g);
	us_tile_end(&ctx.tile);
	us_zitem_end(&ctx.z);
	return rc != US_OK ? rc : frc != US_OK ? frc : grc;
}
