/*
 * harness.h - a minimal unit-test harness: CHECK() records a failure with
 * file:line and goes on; main() returns non-zero if anything failed.
 */
#ifndef US_HARNESS_H
#define US_HARNESS_H

#include <stdio.h>
#include <stdlib.h>

static int us_test_failures;
static int us_test_checks;

#define CHECK(cond)                                                        \
	do {                                                               \
		us_test_checks++;                                          \
		if (!(cond)) {                                             \
			us_test_failures++;                                \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n",       \
				__FILE__, __LINE__, #cond);                \
		}                                                          \
	} while (0)

#define RUN(fn)                                                            \
	do {                                                               \
		int before_ = us_test_failures;                            \
		fn();                                                      \
		fprintf(stderr, "%s %s\n",                                 \
			us_test_failures == before_ ? "ok  " : "FAIL", #fn); \
	} while (0)

#define TEST_MAIN_END()                                                    \
	do {                                                               \
		fprintf(stderr, "%d checks, %d failed\n", us_test_checks,  \
			us_test_failures);                                 \
		return us_test_failures ? 1 : 0;                           \
	} while (0)

#endif /* US_HARNESS_H */
