/*
 * arena.h - a bump allocator for everything that lives as long as a mount.
 *
 * A state dict holds up to hundreds of thousands of small strings and arrays
 * (names, shapes, chunk boxes) that are all freed together at unmount; an
 * arena keeps them compact and makes the error paths of the readers trivial.
 */
#ifndef US_ARENA_H
#define US_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct us_arena_block;

struct us_arena {
	struct us_arena_block *head;
	size_t used; /* bytes handed out, for inspect and memory tests */
};

void us_arena_init(struct us_arena *a);
void us_arena_free(struct us_arena *a);

/* Aligned to 16 bytes, zeroed.  NULL on overflow or out of memory. */
void *us_arena_alloc(struct us_arena *a, size_t size);
/* us_arena_alloc of @n elements of @size bytes, with overflow checked. */
void *us_arena_calloc(struct us_arena *a, size_t n, size_t size);
char *us_arena_strdup(struct us_arena *a, const char *s);
char *us_arena_strndup(struct us_arena *a, const char *s, size_t n);

#endif /* US_ARENA_H */
