/* tile.c - strided chunks' storage spans in the cache (tile.h). */
#include "tile.h"

#include <stddef.h>

#include "../io.h"

/* Spans share the cache with decoded zstd items, keyed by file offset: the
 * top bit (no file offset has it) keeps a span from ever being taken for
 * an item at the same offset, whatever a hostile checkpoint declares. */
#define TILE_KEY_BIT (1ull << 63)

void us_tile_begin(struct us_tile_state *st, struct us_cache *cache)
{
	st->cache = cache;
	st->pinned = NULL;
}

void us_tile_end(struct us_tile_state *st)
{
	if (st->pinned)
		us_cache_put(st->cache, st->pinned);
	st->pinned = NULL;
}

static bool holds(const struct us_tile_state *st, struct us_cache_key key,
		  uint64_t len)
{
	return st->pinned && st->key.file == key.file &&
	       st->key.item_off == key.item_off &&
	       us_cache_len(st->pinned) >= len;
}

struct span {
	const struct us_file *f;
	uint64_t off;
};

static enum us_status read_span(void *ctx, void *buf, size_t len)
{
	const struct span *sp = ctx;

	return us_file_pread(sp->f, buf, len, sp->off);
}

const unsigned char *us_tile_get(struct us_tile_state *st,
				 const struct us_file *f, uint32_t file,
				 uint64_t off, uint64_t len, enum us_status *rc)
{
	struct us_cache_key key = { .file = file, .item_off = off | TILE_KEY_BIT };
	struct us_cache *c = st->cache;
	struct us_cache_entry *e;

	*rc = US_OK;
	if (holds(st, key, len))
		return us_cache_buf(st->pinned);
	us_tile_end(st);
	if (!c || off >= TILE_KEY_BIT || len > SIZE_MAX)
		return NULL;
	/* read on a miss, or by the reader already reading it */
	e = us_cache_fetch(c, key, (size_t)len, read_span,
			   &(struct span){ .f = f, .off = off }, rc);
	if (e && us_cache_len(e) < len) {
		/* Another chunk's shorter span from the same offset. */
		us_cache_put(c, e);
		e = NULL;
	}
	if (!e)
		return NULL;
	st->key = key;
	st->pinned = e;
	return us_cache_buf(e);
}
