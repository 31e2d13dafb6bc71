/*
 * tile.h - the storage span of a strided (transposed) chunk, held in the
 * cache (cache.h) so that its rows are gathered from memory.
 *
 * Each output row of a transposed chunk takes one element from every
 * column: its elements lie across the whole of the chunk's storage.  Read
 * per row, a chunk would be read once per row; held whole (when it fits
 * --cache-size) it is read once, and every row is a strided copy.
 */
#ifndef US_TILE_H
#define US_TILE_H

#include <stdint.h>

#include "../model.h"
#include "cache.h"

/* What one read holds between its strided rows: the span it last used. */
struct us_tile_state {
	struct us_cache *cache; /* the assembler's */
	struct us_cache_key key;
	struct us_cache_entry *pinned;
};

void us_tile_begin(struct us_tile_state *st, struct us_cache *cache);

/*
 * us_tile_get - bytes [@off, @off + @len) of file @f (index @file), read
 * once and held in the cache; valid until us_tile_end or the next call.
 * NULL when they cannot be held (larger than the cache, or memory short):
 * the caller then reads the rows another way (exec_cpu.c); *@rc is then
 * US_OK, or US_E_IO when the file could not be read.
 */
const unsigned char *us_tile_get(struct us_tile_state *st,
				 const struct us_file *f, uint32_t file,
				 uint64_t off, uint64_t len, enum us_status *rc);

/* us_tile_end - release the span @st holds. */
void us_tile_end(struct us_tile_state *st);

#endif /* US_TILE_H */
