/*
 * pipe.h - sizing requests and replies to the pipe libfuse splices through.
 *
 * libfuse splices a reply through a pipe it sizes as one page per segment
 * plus two, plus the reply (fuse_send_data_iov); it cannot grow a pipe past
 * /proc/sys/fs/pipe-max-size (1 MiB by default) and then falls back to a
 * freshly allocated bounce buffer per reply -- a copy, and under glibc's
 * growing mmap threshold, memory that piles up in the threads' arenas.  So
 * a reply is only handed to libfuse when it fits that pipe (us_fits_pipe),
 * and requests are sized (us_max_read) so that one of up to US_SPLICE_SEGS
 * segments does; anything else takes our own buffer (tbuf.h).
 */
#ifndef US_PIPE_H
#define US_PIPE_H

#include <stdbool.h>
#include <stddef.h>

#define US_SPLICE_SEGS 5

/* us_fits_pipe - can libfuse splice @size bytes in @nsegs segments? */
bool us_fits_pipe(size_t size, size_t nsegs);

/*
 * us_max_read - the largest read request the kernel may send: the largest
 * whose reply, in up to US_SPLICE_SEGS segments, libfuse can still splice:
 * 1015808 bytes (992 KiB) with the default 1 MiB pipe-max-size, at most
 * 1 MiB (256 pages, the kernel's FUSE maximum).  main.c passes it as
 * -o max_read, and init as conn->max_read.
 */
unsigned us_max_read(void);

/*
 * us_read_ahead_kb - the read-ahead the daemon asks of its mount's bdi
 * instead of the kernel's 128 KiB default: US_READ_AHEAD_REQS requests of
 * us_max_read() bytes.  Four: while one thread waits for a shard's pages
 * others copy theirs (cold read of a 1 GB DCP, median of 8: one request
 * 0.41 s, four 0.38-0.40 s; warm the same, docs/benchmarks.md).
 */
#define US_READ_AHEAD_REQS 4
unsigned us_read_ahead_kb(void);

#endif /* US_PIPE_H */
