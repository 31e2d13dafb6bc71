/* arena.c - bump allocation in 64 KiB blocks (larger requests get their own). */
#include "arena.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK 65536u
#define ARENA_ALIGN 16u

struct us_arena_block {
	struct us_arena_block *next;
	size_t cap, off;
	_Alignas(16) unsigned char data[];
};

void us_arena_init(struct us_arena *a)
{
	a->head = NULL;
	a->used = 0;
}

void us_arena_free(struct us_arena *a)
{
	struct us_arena_block *b = a->head;

	while (b) {
		struct us_arena_block *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->used = 0;
}

static struct us_arena_block *arena_new_block(struct us_arena *a, size_t need)
{
	size_t cap = need > ARENA_BLOCK ? need : ARENA_BLOCK;
	/* A big request's own block comes zeroed from calloc, which takes
	 * fresh pages from the kernel without writing them: the DeepSpeed
	 * readers' 16384-entry rank tables then cost the pages they use, not
	 * a memset of megabytes per mount. */
	struct us_arena_block *b = need > ARENA_BLOCK ? calloc(1, sizeof(*b) + cap)
						      : malloc(sizeof(*b) + cap);

	if (!b)
		return NULL;
	b->cap = cap;
	b->off = 0;
	if (need > ARENA_BLOCK && a->head) {
		/* Keep filling the current block: put the big one behind it. */
		b->next = a->head->next;
		a->head->next = b;
	} else {
		b->next = a->head;
		a->head = b;
	}
	return b;
}

void *us_arena_alloc(struct us_arena *a, size_t size)
{
	struct us_arena_block *b = a->head;
	bool zeroed = false;
	size_t need;
	void *p;

	if (size > SIZE_MAX - ARENA_ALIGN)
		return NULL;
	need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	if (need == 0)
		need = ARENA_ALIGN;
	if (!b || b->cap - b->off < need) {
		b = arena_new_block(a, need);
		if (!b)
			return NULL;
		zeroed = need > ARENA_BLOCK;
	}
	p = b->data + b->off;
	b->off += need;
	a->used += need;
	if (!zeroed)
		memset(p, 0, size);
	return p;
}

void *us_arena_calloc(struct us_arena *a, size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	return us_arena_alloc(a, n * size);
}

char *us_arena_strndup(struct us_arena *a, const char *s, size_t n)
{
	char *p = us_arena_alloc(a, n + 1);

	if (p) {
		memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

char *us_arena_strdup(struct us_arena *a, const char *s)
{
	return us_arena_strndup(a, s, strlen(s));
}
