/*
 * readahead.h - keep the source bytes of a sequential reader coming off the
 * disk ahead of it.
 *
 * The kernel reads ahead per open file, and the daemon reads each shard
 * through the one descriptor all its reads share.  A consolidated file
 * interleaves shards (a Shard(0) DCP tensor is rank 0's rows, then rank
 * 1's), so each shard is read in stretches; traced on a cold read of a 1 GB
 * DCP (block:block_rq_issue), the kernel's read-ahead of a shard had lapsed
 * at the start of most stretches and the first 8-16 MiB of each came in
 * request-sized synchronous reads, about 1 ms per MiB, while the disk
 * otherwise delivers 3 GB/s.  Replaying the daemon's exact reads from one
 * process did not show it; the cause inside the kernel was not pinned down.
 *
 * So the daemon reads ahead itself: after a read of a view that continues
 * a sequential run, the source runs of the next US_RA_WINDOW bytes of the
 * view (casts and gathers included: us_segs.sources) are read through a
 * second descriptor of each source file, one that
 * only ever reads forward, with sendfile(2) to /dev/null: the kernel's own
 * sequential read-ahead fills the page cache in large folios and nothing
 * is copied.  (posix_fadvise(WILLNEED), tried before, reads in order-0
 * pages and stops the file's read-ahead: it was slower.)
 */
#ifndef US_READAHEAD_H
#define US_READAHEAD_H

#include <stdint.h>

#include "view.h"


/* How far ahead of a sequential reader its sources are read. */
#define US_RA_WINDOW (64u << 20)

struct us_readahead;

/*
 * us_readahead_new - read-ahead for views of @sd (its files' descriptors
 * index the streams).  NULL when out of memory or /dev/null cannot be
 * opened: reads then simply go without.
 */
struct us_readahead *us_readahead_new(const struct us_statedict *sd);
void us_readahead_free(struct us_readahead *ra);

/*
 * us_readahead_after - @v was just read at [@off, @off + @len): when that
 * continues its last read, read its sources ahead (blocking, in the
 * caller's thread: call it after the reply went out).  Thread-safe; a
 * stream another thread is reading ahead is skipped.  NULL @ra: nothing.
 */
void us_readahead_after(struct us_readahead *ra, const struct us_view *v,
			uint64_t off, uint64_t len);

#endif /* US_READAHEAD_H */
