/*
 * gather.h - the span buffers of the CPU executor's gathers, a bounded pool
 * per assembler (private to assemble/).
 *
 * A gather reads the bytes of many short runs of one source span with one
 * preadv: each run straight into the reply, the bytes between runs into a
 * small junk buffer (exec_cpu.c).  It used to read the whole span into a
 * 1 MiB buffer and copy the runs out, and the span buffers were per thread,
 * kept for the thread's life, so the daemon's memory grew with the number
 * of FUSE threads that ever gathered: a RoPE-permuted q/k (rows two apart,
 * recipes) read through three views took the daemon from 8.4 to 18.9 MiB
 * VmHWM (docs/benchmarks.md, "Recipes").  A read takes a buffer for the
 * duration of one us_exec_cpu_read and gives it back, and no more than
 * one per CPU exist: more concurrent gathers than CPUs only queue for memory
 * bandwidth anyway.  A reader holds at most one gather buffer; holding it,
 * it may wait on its source's bytes (a remote block), never on a buffer of
 * either pool (a reply buffer, fs/tbuf.h, is always taken first), so
 * waiting cannot deadlock.  The span buffer remains
 * for the row groups of a transposed chunk (elements scattered to rows,
 * which no iovec can express), and its pages are touched only by them.
 */
#ifndef US_GATHER_H
#define US_GATHER_H

#include <stddef.h>
#include <sys/uio.h>

#include "plan.h"

#define US_GATHER_BUF (1u << 20) /* the span buffer: 2x a FUSE request */
#define US_GATHER_OPS 16384      /* queued runs, before a flush */
#define US_GATHER_GAP (16u << 10) /* unneeded bytes read to save a syscall */
#define US_GATHER_IOV 1024       /* one preadv's buffers (Linux's IOV_MAX) */

struct us_gather {
	char *span;              /* US_GATHER_BUF bytes (row groups only) */
	struct us_copy_op *ops;  /* US_GATHER_OPS entries */
	struct iovec iov[US_GATHER_IOV];
	char junk[US_GATHER_GAP]; /* the bytes between a preadv's runs */
	size_t n;                /* ops queued */
	struct us_gather *next;  /* the pool's free list */
};

struct us_gather_pool;

/* us_gather_pool_new - a pool of at most one buffer per online CPU (at
 * least 2, at most 16), none allocated yet.  NULL: out of memory. */
struct us_gather_pool *us_gather_pool_new(void);
void us_gather_pool_free(struct us_gather_pool *p);

/* us_gather_take - a buffer with n == 0, waiting while @max are in use;
 * NULL when one cannot be allocated (the caller then reads run by run). */
struct us_gather *us_gather_take(struct us_gather_pool *p);
/* us_gather_give - return @g (NULL: nothing) to the pool. */
void us_gather_give(struct us_gather_pool *p, struct us_gather *g);

#endif /* US_GATHER_H */
