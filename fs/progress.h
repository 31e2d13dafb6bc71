/*
 * progress.h - a one-line progress bar on stderr for long writes (export):
 * bytes done of total, throughput and ETA, redrawn at most 4 times a second.
 * It draws only when enabled (a terminal, no -q); otherwise every call is a
 * no-op, so callers need not check.
 */
#ifndef US_PROGRESS_H
#define US_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct us_progress {
	bool on;
	uint64_t total, done;
	double start, last_draw;   /* seconds, CLOCK_MONOTONIC */
};

void us_progress_start(struct us_progress *p, bool on, uint64_t total);
/* us_progress_add - @n more bytes are done; redraw when it is time. */
void us_progress_add(struct us_progress *p, uint64_t n);
/* us_progress_end - the last redraw and a newline (nothing when off). */
void us_progress_end(struct us_progress *p);

#endif /* US_PROGRESS_H */
