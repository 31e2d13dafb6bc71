/*
 * grow.h - the one growable-array helper of libunshard and the daemon.
 *
 * Arrays here are plain (pointer, count, capacity) triples owned by their
 * struct: readers append tensors, chunks, files and names as they parse, and
 * nothing else needs a container type.  US_GROW makes room for one more
 * element, doubling the capacity (from 16), so appends are amortised O(1)
 * and a failed allocation leaves the array as it was.
 *
 *	if (US_GROW(sd->tensors, sd->cap_tensors, sd->ntensors) != US_OK)
 *		return us_err_set(err, US_E_NOMEM, NULL, "out of memory");
 *	sd->tensors[sd->ntensors++] = t;
 */
#ifndef US_GROW_H
#define US_GROW_H

#include <stddef.h>

#include "us_error.h"

/*
 * us_grow - make *@arr (of @elem-byte elements, @cap allocated) hold at least
 * @n + 1 elements.  US_OK, or US_E_NOMEM (also when the size would overflow),
 * with *@arr and *@cap untouched.
 */
enum us_status us_grow(void **arr, size_t *cap, size_t n, size_t elem);

/* US_GROW - us_grow for a typed pointer lvalue @arr and its size_t @cap. */
#define US_GROW(arr, cap, n) \
	us_grow((void **)&(arr), &(cap), (n), sizeof(*(arr)))

#endif /* US_GROW_H */
