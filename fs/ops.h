/* ops.h - the FUSE low-level operations of a mount. */
#ifndef US_OPS_H
#define US_OPS_H

#include "tree.h"

/* Attribute and entry timeouts: the tree never changes while mounted. */
#define US_TIMEOUT 86400.0

extern const struct fuse_lowlevel_ops us_fuse_ops;

/*
 * us_max_read - the largest read request the kernel may send: the largest
 * whose reply, in up to a few segments, libfuse can still splice (ops.c,
 * fits_pipe): 1015808 bytes (992 KiB) with the default 1 MiB pipe-max-size,
 * at most 1 MiB (256 pages, the kernel's FUSE maximum).  main.c passes it
 * as -o max_read.
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

/*
 * us_raise_read_ahead - make the mount on @abs_mnt (absolute, as
 * /proc/self/mountinfo lists it) raise its bdi read_ahead_kb to @kb, when
 * lower, at the first open (ops.c says why then).  Call right after
 * fuse_session_mount(): it reads mountinfo, which needs no FUSE request.
 * Raising needs root; otherwise nothing happens (docs/benchmarks.md gives
 * the command for others).
 */
void us_raise_read_ahead(const char *abs_mnt, unsigned kb);

#endif /* US_OPS_H */
