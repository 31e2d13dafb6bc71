/*
 * test_grow.c - US_GROW keeps appended elements, grows geometrically, and
 * refuses a size that would overflow without touching the array.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "grow.h"
#include "harness.h"

static void check_appends(void)
{
	int *a = NULL;
	size_t n = 0, cap = 0, grows = 0;

	for (int i = 0; i < 100000; i++) {
		size_t before = cap;

		CHECK(US_GROW(a, cap, n) == US_OK);
		grows += cap != before;
		a[n++] = i;
	}
	for (size_t i = 0; i < n; i++)
		CHECK(a[i] == (int)i);
	CHECK(cap >= n && grows <= 14); /* 16 << 13 > 100000: doubling, not +1 */
	free(a);
}

static void check_overflow(void)
{
	struct big { char b[1 << 20]; } *a = NULL;
	size_t cap = SIZE_MAX / sizeof(*a) / 2 + 1;

	/* Doubling this capacity overflows the byte size: refused, untouched. */
	CHECK(US_GROW(a, cap, cap) == US_E_NOMEM);
	CHECK(a == NULL && cap == SIZE_MAX / sizeof(*a) / 2 + 1);
}

int main(void)
{
	RUN(check_appends);
	RUN(check_overflow);
	TEST_MAIN_END();
}
