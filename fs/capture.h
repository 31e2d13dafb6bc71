/*
 * capture.h - holding what libfuse and fusermount3 print while mounting.
 *
 * A failed mount makes libfuse log its reason ("fuse: ...") and the
 * fusermount3 it runs print its own ("fusermount3: ..."), both on fd 2, and
 * the daemon then said why it stopped: two or three lines where design.md
 * wants one.  So fd 2 points at a memory file while mounting; on failure
 * what was written becomes the reason of one line; on success it is
 * written out as it came (debug output of -d).
 */
#ifndef US_CAPTURE_H
#define US_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>

struct us_capture {
	int saved; /* the real fd 2, or -1 when not capturing */
	int fd;    /* the memory file */
};

/* us_capture_begin - point fd 2 at a memory file.  When that cannot be
 * done, nothing is captured and messages go where they went. */
void us_capture_begin(struct us_capture *c);

/*
 * us_capture_end - put fd 2 back.  With @replay the captured bytes are
 * written to it; otherwise they are made one line in @why (@cap bytes):
 * "fuse: " and "fusermount3: " prefixes dropped, lines joined by "; ".
 * @why is "" when nothing was captured; it may be NULL with @replay.
 */
void us_capture_end(struct us_capture *c, bool replay, char *why, size_t cap);

#endif /* US_CAPTURE_H */
