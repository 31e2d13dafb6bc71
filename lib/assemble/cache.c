/* cache.c - LRU of decoded items, bounded in bytes, safe across threads. */
#include "cache.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define MIN_BUCKETS 64u

/* The LRU list: a ring through the cache's head, most recent first. */
struct link {
	struct link *prev, *next;
};

struct us_cache_entry {
	struct link lru;                    /* first: a link is its entry */
	struct us_cache_key key;
	struct us_cache_entry *hnext;       /* hash chain */
	unsigned refs;
	bool listed;   /* in the list and the table (else only pinned) */
	bool filling;  /* claimed: in the table only, until published */
	size_t len;
	unsigned char data[];
};

struct us_cache {
	pthread_mutex_t lock;
	pthread_cond_t filled;          /* an entry being filled was published or given up */
	uint64_t capacity;
	uint64_t used;                  /* bytes of every entry alive */
	struct link lru;                /* head: lru.next is the MRU */
	struct us_cache_entry **buckets;
	size_t nbuckets, count;         /* nbuckets is a power of two */
};

struct us_cache *us_cache_new(uint64_t capacity)
{
	struct us_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->buckets = calloc(MIN_BUCKETS, sizeof(*c->buckets));
	if (!c->buckets || pthread_mutex_init(&c->lock, NULL) != 0) {
		free(c->buckets);
		free(c);
		return NULL;
	}
	if (pthread_cond_init(&c->filled, NULL) != 0) {
		pthread_mutex_destroy(&c->lock);
		free(c->buckets);
		free(c);
		return NULL;
	}
	c->nbuckets = MIN_BUCKETS;
	c->capacity = capacity;
	c->lru.next = c->lru.prev = &c->lru;
	return c;
}

static struct us_cache_entry *entry(struct link *l)
{
	return (struct us_cache_entry *)(void *)l;
}

void us_cache_free(struct us_cache *c)
{
	struct link *l, *next;

	if (!c)
		return;
	for (l = c->lru.next; l != &c->lru; l = next) {
		next = l->next;
		assert(entry(l)->refs == 0); /* a reader still holds it: caller bug */
		free(entry(l));
	}
	pthread_cond_destroy(&c->filled);
	pthread_mutex_destroy(&c->lock);
	free(c->buckets);
	free(c);
}

static size_t hash(const struct us_cache *c, struct us_cache_key k)
{
	uint64_t h = (k.item_off ^ ((uint64_t)k.file << 40)) * 0x9E3779B97F4A7C15ull;

	return (size_t)(h >> 32) & (c->nbuckets - 1);
}

static struct us_cache_entry **slot(struct us_cache *c, struct us_cache_key k)
{
	struct us_cache_entry **p = &c->buckets[hash(c, k)];

	while (*p && ((*p)->key.file != k.file || (*p)->key.item_off != k.item_off))
		p = &(*p)->hnext;
	return p;
}

static void lru_unlink(struct us_cache_entry *e)
{
	e->lru.prev->next = e->lru.next;
	e->lru.next->prev = e->lru.prev;
}

static void lru_push(struct us_cache *c, struct us_cache_entry *e)
{
	e->lru.prev = &c->lru;
	e->lru.next = c->lru.next;
	c->lru.next->prev = &e->lru;
	c->lru.next = &e->lru;
}

/* Double the table when it is as full as it is wide; a failed resize only
 * makes chains longer. */
static void maybe_grow(struct us_cache *c)
{
	struct us_cache_entry **old = c->buckets, *e, *next;
	size_t oldn = c->nbuckets;

	if (c->count < c->nbuckets)
		return;
	c->buckets = calloc(oldn * 2, sizeof(*c->buckets));
	if (!c->buckets) {
		c->buckets = old;
		return;
	}
	c->nbuckets = oldn * 2;
	for (size_t i = 0; i < oldn; i++) {
		for (e = old[i]; e; e = next) {
			size_t h = hash(c, e->key);

			next = e->hnext;
			e->hnext = c->buckets[h];
			c->buckets[h] = e;
		}
	}
	free(old);
}

/* Take a listed entry out of the list and the table; the caller frees it
 * now or lets its last reader do so. */
static void unlist(struct us_cache *c, struct us_cache_entry *e)
{
	*slot(c, e->key) = e->hnext;
	lru_unlink(e);
	e->listed = false;
	c->count--;
}

static void drop(struct us_cache *c, struct us_cache_entry *e)
{
	c->used -= e->len;
	free(e);
}

/* Evict unpinned entries, least recent first, until @len more bytes fit. */
static bool make_room(struct us_cache *c, size_t len)
{
	struct link *l = c->lru.prev, *prev;

	if (len > c->capacity)
		return false;
	while (c->used > c->capacity - len && l != &c->lru) {
		prev = l->prev;
		if (entry(l)->refs == 0) {
			unlist(c, entry(l));
			drop(c, entry(l));
		}
		l = prev;
	}
	return c->used <= c->capacity - len;
}

struct us_cache_entry *us_cache_get(struct us_cache *c, struct us_cache_key key)
{
	struct us_cache_entry *e;

	pthread_mutex_lock(&c->lock);
	e = *slot(c, key);
	if (e && e->filling)
		e = NULL;
	if (e) {
		e->refs++;
		lru_unlink(e);
		lru_push(c, e);
	}
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* A new pinned entry of @len bytes, room reserved; NULL if it cannot be. */
static struct us_cache_entry *new_entry(struct us_cache *c, struct us_cache_key key,
					size_t len)
{
	struct us_cache_entry *e = NULL;

	if (make_room(c, len)) {
		e = malloc(sizeof(*e) + len);
		if (e) {
			*e = (struct us_cache_entry){ .key = key, .refs = 1, .len = len };
			c->used += len; /* reserved from now on */
		}
	}
	return e;
}

/* The slot of @key once no claim is filling it. */
static struct us_cache_entry **slot_filled(struct us_cache *c, struct us_cache_key key)
{
	struct us_cache_entry **p = slot(c, key);

	while (*p && (*p)->filling) {
		pthread_cond_wait(&c->filled, &c->lock);
		p = slot(c, key); /* the table may have been resized */
	}
	return p;
}

enum us_cache_claim us_cache_claim(struct us_cache *c, struct us_cache_key key,
				   size_t len, struct us_cache_entry **e)
{
	enum us_cache_claim r = US_CACHE_NONE;
	struct us_cache_entry **p;

	pthread_mutex_lock(&c->lock);
	p = slot_filled(c, key);
	*e = *p;
	if (*e) {
		(*e)->refs++;
		lru_unlink(*e);
		lru_push(c, *e);
		r = US_CACHE_HIT;
	} else if ((*e = new_entry(c, key, len))) {
		/* in the table, so that other claims wait for it */
		(*e)->filling = true;
		*slot(c, key) = *e;
		r = US_CACHE_FILL;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* Give up a claimed entry: out of the table, and a waiting claim fills. */
static void give_up(struct us_cache *c, struct us_cache_entry *e)
{
	*slot(c, e->key) = e->hnext;
	e->filling = false;
	pthread_cond_broadcast(&c->filled);
}

struct us_cache_entry *us_cache_publish(struct us_cache *c,
					struct us_cache_entry *e)
{
	pthread_mutex_lock(&c->lock);
	assert(e->filling);
	e->filling = false; /* already in the table */
	pthread_cond_broadcast(&c->filled);
	lru_push(c, e);
	e->listed = true;
	c->count++;
	maybe_grow(c);
	pthread_mutex_unlock(&c->lock);
	return e;
}

struct us_cache_entry *us_cache_fetch(struct us_cache *c, struct us_cache_key key,
				      size_t len, us_cache_fill_fn fill,
				      void *ctx, enum us_status *rc)
{
	struct us_cache_entry *e;

	*rc = US_OK;
	switch (us_cache_claim(c, key, len, &e)) {
	case US_CACHE_HIT:
		return e;
	case US_CACHE_NONE:
		return NULL;
	case US_CACHE_FILL:
		break;
	}
	*rc = fill(ctx, us_cache_buf(e), len);
	if (*rc != US_OK) {
		us_cache_put(c, e);
		return NULL;
	}
	return us_cache_publish(c, e);
}

void us_cache_put(struct us_cache *c, struct us_cache_entry *e)
{
	pthread_mutex_lock(&c->lock);
	assert(e->refs > 0);
	if (e->filling)
		give_up(c, e);
	if (--e->refs == 0 && !e->listed)
		drop(c, e);
	pthread_mutex_unlock(&c->lock);
}

void *us_cache_buf(struct us_cache_entry *e)
{
	return e->data;
}

size_t us_cache_len(const struct us_cache_entry *e)
{
	return e->len;
}

uint64_t us_cache_used(struct us_cache *c)
{
	uint64_t used;

	pthread_mutex_lock(&c->lock);
	used = c->used;
	pthread_mutex_unlock(&c->lock);
	return used;
}

size_t us_cache_count(struct us_cache *c)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->count;
	pthread_mutex_unlock(&c->lock);
	return n;
}

uint64_t us_cache_capacity(const struct us_cache *c)
{
	return c->capacity;
}
