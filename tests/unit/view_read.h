/*
 * view_read.h - us_view_read for tests that check bytes and counts: one
 * assembler for the test program, made on first use (reachable until
 * exit, so no leak is reported), and the count or the status in one value.
 */
#ifndef US_TEST_VIEW_READ_H
#define US_TEST_VIEW_READ_H

#include <stdlib.h>

#include "view/view.h"

static struct us_assembler *test_assembler(void)
{
	static struct us_assembler *as;

	if (!as && us_assembler_new(NULL, &as, NULL) != US_OK)
		abort();
	return as;
}

/* The bytes read, or the (negative) status of a failed read. */
static inline long long view_read(const struct us_view *v, char *buf,
				  size_t len, uint64_t off)
{
	size_t n;
	enum us_status st = us_view_read(test_assembler(), v, buf, len, off, &n);

	return st == US_OK ? (long long)n : (long long)st;
}

#endif /* US_TEST_VIEW_READ_H */
