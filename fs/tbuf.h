/*
 * tbuf.h - one reply buffer per FUSE thread.
 *
 * Grown to the largest request seen, and freed by a key destructor when the
 * loop retires the thread (idle threads come and go).  This is the "fixed
 * per-thread buffer" of design.md's memory bound.
 */
#ifndef US_TBUF_H
#define US_TBUF_H

#include <stddef.h>

/* us_thread_buf - this thread's buffer, at least @size bytes; NULL when
 * out of memory.  Valid until this thread's next call. */
char *us_thread_buf(size_t size);

#endif /* US_TBUF_H */
