/*
 * tbuf.h - the reply buffers of the FUSE threads: a bounded pool.
 *
 * A read that cannot be spliced (a recipe's permuted rows, a Shard(1)
 * tensor, a remote SOURCE, pytorch_model.bin's records) is assembled into a
 * buffer and then replied.  The buffers used to be one per thread, grown to
 * the largest request and kept for the thread's life, so the daemon's
 * memory grew with the number of FUSE threads that ever buffered a read:
 * with a recipe, reading model.safetensors took it from 4.5 to 9.5 MiB VmHWM
 * (five threads' 1 MiB buffers; docs/benchmarks.md, "Recipes").  A read now
 * takes a buffer for the time of one reply and gives it back, most recently
 * used first, and no more than a limit exist: one per CPU for a local
 * SOURCE, whose buffered reads are memory copies anyway; more for a remote
 * one, whose reads wait on the network while they hold one.  A thread holds
 * at most one reply buffer; holding it, it may wait for a gather buffer
 * (assemble/gather.h) or a remote block, never for another reply buffer,
 * and nothing holding those waits for a reply buffer: no cycle.  readdir
 * has a buffer of its own.  This is the "fixed per-thread buffer" of
 * design.md's memory bound, bounded by the limit instead of the threads.
 */
#ifndef US_TBUF_H
#define US_TBUF_H

#include <stddef.h>

struct us_rbuf {
	char *p;
	size_t cap;
	struct us_rbuf *next; /* the free list */
};

/* us_rbuf_limit - at most @max buffers (0: one per online CPU, 2..16).
 * Called before the FUSE loop starts. */
void us_rbuf_limit(unsigned max);

/* us_rbuf_take - a buffer of at least @size bytes, waiting while the limit
 * are in use; NULL when out of memory.  us_rbuf_give once replied. */
struct us_rbuf *us_rbuf_take(size_t size);
void us_rbuf_give(struct us_rbuf *b);

#endif /* US_TBUF_H */
