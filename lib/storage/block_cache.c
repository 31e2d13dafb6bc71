/*
 * block_cache.c - aligned blocks of remote objects kept in memory, shared by
 * all reading threads.
 *
 * One mutex guards the table, the LRU list and every entry's state; one
 * condition variable wakes the threads waiting for an in-flight block.  An
 * entry is LOADING (one thread fetches it: two threads that want one block
 * make one request), READY, or FAILED (the fetch failed: the entry leaves
 * the table at once, so the next read tries again, and the threads that
 * waited on it see the failure), or ABANDONED (a prefetch claimed it and
 * then could not queue it: no fetch was made, so the threads that waited on
 * it look again instead of failing).  Only READY entries with no reference are
 * on the LRU list and can be evicted; so the bytes held are the bound plus
 * the blocks in use or in flight (threads x block size).
 */
#include "remote_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum { B_LOADING, B_READY, B_FAILED, B_ABANDONED };

#define NBUCKETS 4096u

struct us_bcache {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t bound, held;
	struct us_block *bucket[NBUCKETS];
	struct us_block lru; /* sentinel: lnext is the most recent */
};

static size_t hash(size_t obj, uint64_t blk)
{
	uint64_t x = (uint64_t)obj * 0x9E3779B97F4A7C15ull ^ blk;

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (size_t)(x ^ (x >> 32)) % NBUCKETS;
}

struct us_bcache *us_bcache_new(uint64_t bytes)
{
	struct us_bcache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->bound = bytes;
	c->lru.lnext = c->lru.lprev = &c->lru;
	return c;
}

static void lru_unlink(struct us_block *b)
{
	b->lprev->lnext = b->lnext;
	b->lnext->lprev = b->lprev;
	b->lprev = b->lnext = NULL;
}

static void lru_push(struct us_bcache *c, struct us_block *b)
{
	b->lnext = c->lru.lnext;
	b->lprev = &c->lru;
	c->lru.lnext->lprev = b;
	c->lru.lnext = b;
}

static void table_remove(struct us_bcache *c, struct us_block *b)
{
	struct us_block **pp = &c->bucket[hash(b->obj, b->blk)];

	while (*pp && *pp != b)
		pp = &(*pp)->hnext;
	assert(*pp == b);
	*pp = b->hnext;
	b->linked = false;
}

static void block_free(struct us_bcache *c, struct us_block *b)
{
	if (b->data)
		c->held -= b->len;
	free(b->data);
	free(b);
}

/* Drop the least recent unreferenced blocks while over the bound. */
static void evict(struct us_bcache *c)
{
	while (c->held > c->bound && c->lru.lprev != &c->lru) {
		struct us_block *b = c->lru.lprev;

		assert(b->refs == 0 && b->state == B_READY);
		lru_unlink(b);
		table_remove(c, b);
		block_free(c, b);
	}
}

void us_bcache_free(struct us_bcache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < NBUCKETS; i++) {
		while (c->bucket[i]) {
			struct us_block *b = c->bucket[i];
			assert(b->refs == 0);
			c->bucket[i] = b->hnext;
			block_free(c, b);
		}
	}
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
}

static struct us_block *lookup(struct us_bcache *c, size_t obj, uint64_t blk)
{
	for (struct us_block *b = c->bucket[hash(obj, blk)]; b; b = b->hnext)
		if (b->obj == obj && b->blk == blk)
			return b;
	return NULL;
}

bool us_bcache_has(struct us_bcache *c, size_t obj, uint64_t blk)
{
	pthread_mutex_lock(&c->mu);
	bool has = lookup(c, obj, blk) != NULL;
	pthread_mutex_unlock(&c->mu);
	return has;
}

int us_bcache_get(struct us_bcache *c, size_t obj, uint64_t blk,
		  bool claim_only, struct us_block **out)
{
	struct us_block *b;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&c->mu);
again:
	b = lookup(c, obj, blk);
	if (b && claim_only) {
		rc = 0;
		goto out;
	}
	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b) {
			rc = US_E_NOMEM;
			goto out;
		}
		b->obj = obj;
		b->blk = blk;
		b->state = B_LOADING;
		b->refs = 1;
		b->linked = true;
		size_t h = hash(obj, blk);
		b->hnext = c->bucket[h];
		c->bucket[h] = b;
		*out = b;
		rc = 1;
		goto out;
	}
	if (b->refs++ == 0 && b->state == B_READY)
		lru_unlink(b);
	while (b->state == B_LOADING)
		pthread_cond_wait(&c->cv, &c->mu);
	if (b->state == B_ABANDONED) { /* never fetched: look again */
		if (--b->refs == 0)
			block_free(c, b);
		goto again;
	}
	*out = b;
	rc = b->state == B_READY ? US_OK : US_E_IO;
out:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void us_bcache_done(struct us_bcache *c, struct us_block *b, char *data,
		    size_t len)
{
	pthread_mutex_lock(&c->mu);
	assert(b->state == B_LOADING && b->refs > 0);
	if (data) {
		b->data = data;
		b->len = len;
		b->state = B_READY;
		c->held += len;
	} else {
		b->state = B_FAILED;
		table_remove(c, b);
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void us_bcache_abandon(struct us_bcache *c, struct us_block *b)
{
	pthread_mutex_lock(&c->mu);
	assert(b->state == B_LOADING && b->refs > 0);
	b->state = B_ABANDONED;
	table_remove(c, b);
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void us_bcache_put(struct us_bcache *c, struct us_block *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&c->mu);
	assert(b->refs > 0 && b->state != B_LOADING);
	if (--b->refs == 0) {
		if (b->state == B_READY && b->linked) {
			lru_push(c, b);
			evict(c);
		} else {
			block_free(c, b);
		}
	}
	pthread_mutex_unlock(&c->mu);
}
