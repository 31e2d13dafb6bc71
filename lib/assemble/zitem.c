/* zitem.c - zstd items through the cache, or streamed when too large. */
#include "zitem.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/crc32.h"
#include "../codec/zipdesc.h"
#include "../codec/zstream.h"
#include "../grow.h"

/* The served prefix ends with room for the storage record's data
 * descriptor (lib/source/dcp/dcp_zstd.h: 24 bytes, the longer form). */
#define DESC 24u
#define CHUNK (64u << 10)

static bool same_key(struct us_cache_key a, struct us_cache_key b)
{
	return a.file == b.file && a.item_off == b.item_off;
}

/*
 * A failed decode on the read path: mount walked every frame and block
 * header (zframes.h), so damage found now is in a structurally valid block,
 * which a read answers like a bad sector: I/O.  Success and a failed
 * allocation stay what they are.
 */
static enum us_status zs_status(enum us_status rc)
{
	return rc == US_OK || rc == US_E_NOMEM ? rc : US_E_IO;
}

/* Items checked by check_stream, and how it went (1 good, -1 bad), so
 * that each large item is checked once per assembler.  Sorted by key. */
struct checked {
	struct us_cache_key key;
	int state;
};

struct us_zitem_pool {
	pthread_mutex_t lock; /* checked and parked alike */
	struct checked *v;
	size_t n, cap;
	struct {
		struct us_zstream *z;
		struct us_cache_key key;
		uint64_t stamp; /* when parked: the oldest goes first */
	} parked[US_ZITEM_PARKED];
	uint64_t clock;
};

struct us_zitem_pool *us_zitem_pool_new(void)
{
	struct us_zitem_pool *p = calloc(1, sizeof(*p));

	if (p && pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p);
		p = NULL;
	}
	return p;
}

void us_zitem_pool_free(struct us_zitem_pool *p)
{
	if (!p)
		return;
	for (int i = 0; i < US_ZITEM_PARKED; i++)
		us_zstream_close(p->parked[i].z);
	free(p->v);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* ---- the storage record's CRC-32 ------------------------------------------ */

/*
 * torch writes each zstd frame without a checksum, and zstd passes raw
 * literals through unchecked, so a flipped byte may decode "fine".  The
 * archive's descriptor after the storage record has its size and CRC-32:
 * no byte of an item is served before its record matched them.  The
 * record starts where the descriptor's size says, at or before the
 * tensor's first element.
 */
static enum us_status record_start(const struct us_extent *x,
				   const unsigned char *desc, uint64_t *start,
				   uint64_t *size)
{
	uint64_t rend = x->decoded_len - DESC;

	if (x->decoded_len < DESC || us_zip_desc_size(desc, size) < 0 || *size > rend ||
	    (*start = rend - *size) > x->offset)
		return US_E_IO;
	return US_OK;
}

/* A decoded prefix in memory (the cache path). */
static enum us_status check_buf(const struct us_extent *x,
				const unsigned char *buf)
{
	const unsigned char *desc;
	uint64_t start, size;

	if (x->decoded_len < DESC)
		return US_E_IO;
	desc = buf + x->decoded_len - DESC;
	if (record_start(x, desc, &start, &size) != US_OK ||
	    us_zip_desc_check(desc, size, us_crc32(0, buf + start, (size_t)size)) < 0)
		return US_E_IO;
	return US_OK;
}

/* Decode @n bytes from @z, continuing *@crc over them; US_E_IO if short. */
static enum us_status crc_stream(struct us_zstream *z, unsigned char *buf,
				 uint64_t n, uint32_t *crc)
{
	while (n > 0) {
		size_t want = n < CHUNK ? (size_t)n : CHUNK, got;
		enum us_status rc = us_zstream_read(z, buf, want, &got);

		if (rc != US_OK)
			return zs_status(rc);
		if (got != want)
			return US_E_IO;
		*crc = us_crc32(*crc, buf, want);
		n -= want;
	}
	return US_OK;
}

/*
 * An item too large for the cache, in two streaming passes: the CRC of
 * everything before the descriptor, whose size tells where the record
 * starts; then the CRC of the head before it, which is taken off the
 * first (us_crc32_suffix).  The head is small: the second pass is cheap.
 */
static enum us_status check_stream(const struct us_file *f,
				   const struct us_extent *x)
{
	unsigned char *buf = malloc(CHUNK), desc[DESC];
	struct us_zstream *z = us_zstream_open(f, x->item_off, x->item_len);
	uint32_t crc_all = 0, crc_head = 0;
	uint64_t start = 0, size = 0;
	enum us_status rc = buf && z ? US_OK : US_E_NOMEM;
	size_t got = 0;

	if (rc == US_OK && x->decoded_len < DESC)
		rc = US_E_IO;
	if (rc == US_OK)
		rc = crc_stream(z, buf, x->decoded_len - DESC, &crc_all);
	if (rc == US_OK)
		rc = zs_status(us_zstream_read(z, desc, DESC, &got));
	if (rc == US_OK && got != DESC)
		rc = US_E_IO;
	if (rc == US_OK)
		rc = record_start(x, desc, &start, &size);
	us_zstream_close(z);
	z = NULL;
	if (rc == US_OK && !(z = us_zstream_open(f, x->item_off, x->item_len)))
		rc = US_E_NOMEM;
	if (rc == US_OK)
		rc = crc_stream(z, buf, start, &crc_head);
	if (rc == US_OK &&
	    us_zip_desc_check(desc, size, us_crc32_suffix(crc_all, crc_head, size)) < 0)
		rc = US_E_IO;
	us_zstream_close(z);
	free(buf);
	return rc;
}

static int cmp_key(const void *a, const void *b)
{
	const struct us_cache_key *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->item_off < y->item_off ? -1 : x->item_off > y->item_off;
}

static int checked_state(struct us_zitem_pool *p, struct us_cache_key key)
{
	struct checked *hit;
	int state;

	pthread_mutex_lock(&p->lock);
	hit = p->n ? bsearch(&key, p->v, p->n, sizeof(*p->v), cmp_key) : NULL;
	state = hit ? hit->state : 0;
	pthread_mutex_unlock(&p->lock);
	return state;
}

/* Remember @state (not remembering costs only a second check). */
static void checked_note(struct us_zitem_pool *p, struct us_cache_key key,
			 int state)
{
	size_t i = 0;

	pthread_mutex_lock(&p->lock);
	while (i < p->n && cmp_key(&p->v[i].key, &key) < 0)
		i++;
	if (i < p->n && cmp_key(&p->v[i].key, &key) == 0)
		goto out;
	if (US_GROW(p->v, p->cap, p->n) != US_OK)
		goto out; /* not remembered: the item is checked again next time */
	memmove(&p->v[i + 1], &p->v[i], (p->n - i) * sizeof(*p->v));
	p->v[i] = (struct checked){ .key = key, .state = state };
	p->n++;
out:
	pthread_mutex_unlock(&p->lock);
}

static enum us_status check_streamed_item(struct us_zitem_state *st,
					  const struct us_file *f,
					  const struct us_extent *x)
{
	int state = checked_state(st->pool, st->key);
	enum us_status rc;

	if (state)
		return state > 0 ? US_OK : US_E_IO;
	rc = check_stream(f, x);
	if (rc == US_OK || rc == US_E_IO)
		checked_note(st->pool, st->key, rc == US_OK ? 1 : -1);
	return rc;
}

/* ---- parked streams ------------------------------------------------------- */

/* The parked stream of @key furthest along but not past @off, or NULL. */
static struct us_zstream *unpark(struct us_zitem_pool *p,
				 struct us_cache_key key, uint64_t off)
{
	struct us_zstream *z = NULL;
	int best = -1;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < US_ZITEM_PARKED; i++) {
		struct us_zstream *c = p->parked[i].z;

		if (c && same_key(p->parked[i].key, key) && us_zstream_pos(c) <= off &&
		    (best < 0 || us_zstream_pos(c) > us_zstream_pos(p->parked[best].z)))
			best = i;
	}
	if (best >= 0) {
		z = p->parked[best].z;
		p->parked[best].z = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	return z;
}

static void park(struct us_zitem_pool *p, struct us_cache_key key,
		 struct us_zstream *z)
{
	struct us_zstream *old;
	int slot = 0;

	if (us_zstream_done(z)) {
		us_zstream_close(z); /* nothing left to resume */
		return;
	}
	pthread_mutex_lock(&p->lock);
	for (int i = 1; i < US_ZITEM_PARKED && p->parked[slot].z; i++)
		if (!p->parked[i].z || p->parked[i].stamp < p->parked[slot].stamp)
			slot = i;
	old = p->parked[slot].z;
	p->parked[slot].z = z;
	p->parked[slot].key = key;
	p->parked[slot].stamp = ++p->clock;
	pthread_mutex_unlock(&p->lock);
	us_zstream_close(old);
}

/* ---- one read ------------------------------------------------------------- */

/* Nothing is locked until the first transformed op, so that reads of
 * stored tensors never touch the cache's lock or the pool's. */
void us_zitem_begin(struct us_zitem_state *st, struct us_cache *cache,
		    struct us_zitem_pool *pool)
{
	memset(st, 0, sizeof(*st));
	st->cache = cache;
	st->pool = pool;
}

void us_zitem_end(struct us_zitem_state *st)
{
	if (st->pinned)
		us_cache_put(st->cache, st->pinned);
	if (st->z)
		park(st->pool, st->key, st->z);
	st->pinned = NULL;
	st->z = NULL;
}

struct decode {
	const struct us_file *f;
	const struct us_extent *x;
};

/* Decode the item's served prefix into @buf (@len = its decoded_len). */
static enum us_status decode_item(void *ctx, void *buf, size_t len)
{
	const struct decode *d = ctx;
	struct us_zstream *z = us_zstream_open(d->f, d->x->item_off,
					       d->x->item_len);
	enum us_status rc;
	size_t n;

	if (!z)
		return US_E_NOMEM;
	rc = us_zstream_read(z, buf, len, &n);
	us_zstream_close(z);
	if (rc != US_OK)
		return zs_status(rc);
	/* Shorter than the zip structure promised, or not the bytes its
	 * CRC-32 names: EIO, never bytes that are not the item's. */
	if ((uint64_t)n != d->x->decoded_len || check_buf(d->x, buf) != US_OK)
		return US_E_IO;
	return US_OK;
}

/* The item's served prefix from the cache, decoded into it on a miss (or
 * by the reader already decoding it).  NULL with *@rc = 0 when the cache
 * has no room for it: stream instead. */
static struct us_cache_entry *fill(struct us_zitem_state *st,
				   const struct us_file *f,
				   const struct us_extent *x, enum us_status *rc)
{
	*rc = US_OK;
	if (x->decoded_len > SIZE_MAX)
		return NULL;
	return us_cache_fetch(st->cache, st->key, (size_t)x->decoded_len,
			      decode_item, &(struct decode){ .f = f, .x = x }, rc);
}

/* Position @st->z at decoded byte @off of the item: resume one that is
 * behind it (ours or a parked one), else start from the item's first byte. */
static enum us_status seek_stream(struct us_zitem_state *st,
				  const struct us_file *f,
				  const struct us_extent *x, uint64_t off)
{
	if (st->z && us_zstream_pos(st->z) > off) {
		us_zstream_close(st->z);
		st->z = NULL;
	}
	if (!st->z)
		st->z = unpark(st->pool, st->key, off);
	if (!st->z)
		st->z = us_zstream_open(f, x->item_off, x->item_len);
	if (!st->z)
		return US_E_NOMEM;
	return zs_status(us_zstream_skip(st->z, off - us_zstream_pos(st->z)));
}

static enum us_status copy_streamed(struct us_zitem_state *st,
				    const struct us_file *f,
				    const struct us_extent *x, void *dst,
				    uint64_t off, uint64_t len)
{
	enum us_status rc = seek_stream(st, f, x, off);
	size_t n = 0;

	if (rc == US_OK)
		rc = zs_status(us_zstream_read(st->z, dst, (size_t)len, &n));
	if (rc == US_OK && (uint64_t)n != len)
		rc = US_E_IO;
	if (rc != US_OK) {
		/* A failed stream is not resumable. */
		us_zstream_close(st->z);
		st->z = NULL;
	}
	return rc;
}

/* Switch @st to the item of @x, releasing what it held for another. */
static void select_item(struct us_zitem_state *st, const struct us_extent *x)
{
	struct us_cache_key key = { .file = x->file, .item_off = x->item_off };

	if (same_key(st->key, key) && (st->pinned || st->z))
		return;
	us_zitem_end(st);
	st->key = key;
}

enum us_status us_zitem_copy(struct us_zitem_state *st, const struct us_file *f,
			     const struct us_extent *x, void *dst, uint64_t off,
			     uint64_t len)
{
	enum us_status rc = US_OK;

	assert(off <= x->decoded_len && len <= x->decoded_len - off);
	if (x->xf != US_XF_ZSTD)
		return US_E_IO;
	select_item(st, x);
	if (!st->pinned && !st->z) {
		st->pinned = fill(st, f, x, &rc);
		if (rc != US_OK)
			return rc;
	}
	if (st->pinned) {
		memcpy(dst, (const char *)us_cache_buf(st->pinned) + off, (size_t)len);
		return US_OK;
	}
	if (!st->z && (rc = check_streamed_item(st, f, x)) != US_OK)
		return rc;
	return copy_streamed(st, f, x, dst, off, len);
}
