/*
 * zitem.h - serving bytes of zstd-compressed items (DCP "stream.zstd/1").
 *
 * An item whose served prefix (us_extent.decoded_len: up to the end of its
 * storage record, see lib/source/dcp/dcp.c) fits the cache is decoded once into a
 * cache entry and copied from there.  A larger one is never held whole: it
 * is decoded as a stream from its first byte, dropping everything before
 * the requested range.  So that sequential reads of a large item do not
 * start over each time, a few streams are parked after a read, keyed by
 * item and decoded position, and resumed by the next read that lies ahead
 * of them.
 *
 * Memory: the cache's capacity, plus at most one stream per reading thread
 * and US_ZITEM_PARKED parked ones per assembler, each a fixed ~256 KiB of
 * buffers plus the frame's window (<= 2^US_ZSTREAM_WINDOWLOG_MAX).
 */
#ifndef US_ZITEM_H
#define US_ZITEM_H

#include <stdint.h>

#include "../model.h"
#include "cache.h"

#define US_ZITEM_PARKED 4

struct us_zstream;

/*
 * An assembler's streams parked between reads, and the large items it has
 * checked (each is checked once), behind their own locks: items and
 * streams name files by index, so they belong to one assembler (one file
 * table), never to the process.
 */
struct us_zitem_pool;

/* us_zitem_pool_new - an empty pool; NULL when out of memory. */
struct us_zitem_pool *us_zitem_pool_new(void);
/* us_zitem_pool_free - close every parked stream and free @p (NULL: nothing). */
void us_zitem_pool_free(struct us_zitem_pool *p);

/* What one us_tensor_read holds between its copy operations: consecutive
 * ops (a strided chunk gives one per element) reuse the same item. */
struct us_zitem_state {
	struct us_cache *cache;
	struct us_zitem_pool *pool;
	struct us_cache_key key;
	struct us_cache_entry *pinned; /* the item's cache entry, or NULL */
	struct us_zstream *z;          /* the item's stream, or NULL */
};

/* us_zitem_begin - start a read through @cache and @pool (the assembler's). */
void us_zitem_begin(struct us_zitem_state *st, struct us_cache *cache,
		    struct us_zitem_pool *pool);

/*
 * us_zitem_copy - copy decoded bytes [@off, @off + @len) of the item @x
 * describes (inside x->decoded_len, checked at mount) from file @f into
 * @dst.  US_OK; US_E_IO when the item does not decode to at least
 * x->decoded_len bytes, fails its CRC-32 or the file cannot be read;
 * US_E_NOMEM.
 */
enum us_status us_zitem_copy(struct us_zitem_state *st, const struct us_file *f,
			     const struct us_extent *x, void *dst, uint64_t off,
			     uint64_t len);

/* us_zitem_end - release what @st holds (parking its stream). */
void us_zitem_end(struct us_zitem_state *st);

#endif /* US_ZITEM_H */
