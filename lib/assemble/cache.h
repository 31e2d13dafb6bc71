/*
 * cache.h - the bounded cache of decoded items (--cache-size).
 *
 * Entries are byte buffers keyed by (file, item offset): a zstd item decoded
 * up to the bytes the mount serves from it.  The cache is an LRU list plus a
 * hash table behind one mutex; the FUSE loop is multithreaded, so an entry
 * is pinned (reference counted) while a reader copies from it, and an entry
 * evicted while pinned is freed by its last reader.
 *
 * The bound: the bytes of every entry alive -- listed, pinned after
 * eviction, or allocated and still being filled -- never exceed the
 * capacity.  Room is reserved before a buffer is allocated; when it cannot
 * be made (the item is larger than the capacity, or pinned entries hold
 * the room) the caller is told so and streams instead.
 */
#ifndef US_CACHE_H
#define US_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../us_error.h"

struct us_cache;
struct us_cache_entry;

struct us_cache_key {
	uint32_t file;     /* index into us_statedict.files */
	uint64_t item_off; /* the item's byte offset in that file */
};

/* us_cache_new - an empty cache holding at most @capacity bytes; NULL when
 * out of memory.  us_cache_free needs every entry released first. */
struct us_cache *us_cache_new(uint64_t capacity);
void us_cache_free(struct us_cache *c);

/* us_cache_get - the entry for @key, pinned and made most recently used;
 * NULL on a miss (an entry still being filled is a miss: never waits). */
struct us_cache_entry *us_cache_get(struct us_cache *c, struct us_cache_key key);

/*
 * us_cache_claim - the entry for @key, for a reader that would otherwise
 * fill it.  The kernel sends several read requests of one file at once
 * (read-ahead), and they land in the same item: each decoding it would
 * multiply the work by the requests in flight.  So one reader fills and
 * the others wait for it:
 *   US_CACHE_HIT  *@e is the filled entry, pinned;
 *   US_CACHE_FILL *@e is a new pinned entry of @len bytes, listed as being
 *                 filled: fill it, then us_cache_publish it (or us_cache_put
 *                 it to give up: a waiting reader then fills instead);
 *   US_CACHE_NONE no room can be made (evicting least recently used
 *                 entries nobody pins), or memory is short: do without.
 * A claim of a key being filled waits until it is published or given up.
 */
enum us_cache_claim { US_CACHE_HIT, US_CACHE_FILL, US_CACHE_NONE };
enum us_cache_claim us_cache_claim(struct us_cache *c, struct us_cache_key key,
				   size_t len, struct us_cache_entry **e);

/*
 * us_cache_fetch - us_cache_claim, with the fill done by @fill(@ctx, buf,
 * len): it returns a status, and on a failure the claim is given up and
 * *@rc set to it.  The filled entry (or the hit) is returned pinned; NULL
 * with *@rc = US_OK when the cache has no room: do without it.
 */
typedef enum us_status (*us_cache_fill_fn)(void *ctx, void *buf, size_t len);
struct us_cache_entry *us_cache_fetch(struct us_cache *c, struct us_cache_key key,
				      size_t len, us_cache_fill_fn fill,
				      void *ctx, enum us_status *rc);

/* us_cache_publish - list @e, claimed (US_CACHE_FILL) and filled, waking
 * the claims that wait for it; returns @e, still pinned. */
struct us_cache_entry *us_cache_publish(struct us_cache *c,
					struct us_cache_entry *e);

/* us_cache_put - unpin @e (from get, claim or publish); a claimed entry
 * put unpublished is dropped (given up: a waiting claim fills instead). */
void us_cache_put(struct us_cache *c, struct us_cache_entry *e);

void *us_cache_buf(struct us_cache_entry *e);
size_t us_cache_len(const struct us_cache_entry *e);

/* Accounting, for tests: bytes alive (see above), and listed entries. */
uint64_t us_cache_used(struct us_cache *c);
size_t us_cache_count(struct us_cache *c);
uint64_t us_cache_capacity(const struct us_cache *c);

#endif /* US_CACHE_H */
