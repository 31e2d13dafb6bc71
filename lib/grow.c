/* grow.c - the growable-array helper (grow.h). */
#include "grow.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>

enum us_status us_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t ncap;
	void *p;

	assert(elem > 0 && n <= *cap);
	if (n < *cap)
		return US_OK;
	ncap = *cap ? *cap * 2 : 16;
	if (ncap < *cap || ncap > SIZE_MAX / elem)
		return US_E_NOMEM;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return US_E_NOMEM;
	*arr = p;
	*cap = ncap;
	return US_OK;
}
