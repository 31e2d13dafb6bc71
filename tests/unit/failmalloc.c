/* failmalloc.c - see failmalloc.h. */
#include "failmalloc.h"

#include <stddef.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long left = -1; /* allocations that may still succeed; -1: all */
static bool hit;

void us_fail_after(long n)
{
	left = n;
	hit = false;
}

void us_fail_off(void)
{
	left = -1;
}

bool us_fail_hit(void)
{
	return hit;
}

/* May this allocation go ahead? */
static bool may(void)
{
	if (left < 0)
		return true;
	if (left == 0) {
		hit = true;
		return false;
	}
	left--;
	return true;
}

void *__wrap_malloc(size_t n)
{
	return may() ? __real_malloc(n) : NULL;
}

void *__wrap_calloc(size_t n, size_t size)
{
	return may() ? __real_calloc(n, size) : NULL;
}

void *__wrap_realloc(void *p, size_t n)
{
	return may() ? __real_realloc(p, n) : NULL;
}
