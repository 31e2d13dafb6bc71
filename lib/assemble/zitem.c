/* zitem.c - zstd items through the cache, or streamed when too large. */
#include "zitem.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/crc32.h"
#include "../codec/zipdesc.h"
#include "../codec/zstream.h"

/* The served prefix ends with room for the storage record's data
 * descriptor (lib/source/dcp/dcp_zstd.h: 24 bytes, the longer form). */
#define DESC 24u
#define CHUNK (64u << 10)

static bool same_key(struct us_cache_key a, struct us_cache_key b)
{
	return a.file == b.file && a.item_off == b.item_off;
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
static int record_start(const struct us_extent *x, const unsigned char *desc,
			uint64_t *start, uint64_t *size)
{
	uint64_t rend = x->decoded_len - DESC;

	if (x->decoded_len < DESC || us_zip_desc_size(desc, size) < 0 || *size > rend ||
	    (*start = rend - *size) > x->offset)
		return -EIO;
	return 0;
}

/* A decoded prefix in memory (the cache path). */
static int check_buf(const struct us_extent *x, const unsigned char *buf)
{
	const unsigned char *desc;
	uint64_t start, size;

	if (x->decoded_len < DESC)
		return -EIO;
	desc = buf + x->decoded_len - DESC;
	if (record_start(x, desc, &start, &size) < 0 ||
	    us_zip_desc_check(desc, size, us_crc32(0, buf + start, (size_t)size)) < 0)
		return -EIO;
	return 0;
}

/* Decode @n bytes from @z, continuing *@crc over them; -EIO if short. */
static int crc_stream(struct us_zstream *z, unsigned char *buf, uint64_t n,
		      uint32_t *crc)
{
	while (n > 0) {
		size_t want = n < CHUNK ? (size_t)n : CHUNK;
		ssize_t got = us_zstream_read(z, buf, want);

		if (got < 0)
			return (int)got;
		if ((size_t)got != want)
			return -EIO;
		*crc = us_crc32(*crc, buf, want);
		n -= want;
	}
	return 0;
}

/*
 * An item too large for the cache, in two streaming passes: the CRC of
 * everything before the descriptor, whose size tells where the record
 * starts; then the CRC of the head before it, which is taken off the
 * first (us_crc32_suffix).  The head is small: the second pass is cheap.
 */
static int check_stream(const struct us_file *f, const struct us_extent *x)
{
	unsigned char *buf = malloc(CHUNK), desc[DESC];
	struct us_zstream *z = us_zstream_open(f->fd, x->item_off, x->item_len);
	uint32_t crc_all = 0, crc_head = 0;
	uint64_t start = 0, size = 0;
	int rc = buf && z ? 0 : -ENOMEM;

	if (rc == 0 && x->decoded_len < DESC)
		rc = -EIO;
	if (rc == 0)
		rc = crc_stream(z, buf, x->decoded_len - DESC, &crc_all);
	if (rc == 0 && us_zstream_read(z, desc, DESC) != DESC)
		rc = -EIO;
	if (rc == 0)
		rc = record_start(x, desc, &start, &size);
	us_zstream_close(z);
	z = NULL;
	if (rc == 0 && !(z = us_zstream_open(f->fd, x->item_off, x->item_len)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = crc_stream(z, buf, start, &crc_head);
	if (rc == 0 &&
	    us_zip_desc_check(desc, size, us_crc32_suffix(crc_all, crc_head, size)) < 0)
		rc = -EIO;
	us_zstream_close(z);
	free(buf);
	return rc;
}

/* Items checked by check_stream, and how it went (1 good, -1 bad), so
 * that each large item is checked once per mount.  Sorted by key. */
static struct {
	pthread_mutex_t lock;
	struct checked {
		struct us_cache_key key;
		int state;
	} *v;
	size_t n, cap;
} checked = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int cmp_key(const void *a, const void *b)
{
	const struct us_cache_key *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->item_off < y->item_off ? -1 : x->item_off > y->item_off;
}

static int checked_state(struct us_cache_key key)
{
	struct checked *hit;
	int state;

	pthread_mutex_lock(&checked.lock);
	hit = checked.n ? bsearch(&key, checked.v, checked.n, sizeof(*checked.v),
				  cmp_key) : NULL;
	state = hit ? hit->state : 0;
	pthread_mutex_unlock(&checked.lock);
	return state;
}

/* Remember @state (not remembering costs only a second check). */
static void checked_note(struct us_cache_key key, int state)
{
	size_t i = 0;

	pthread_mutex_lock(&checked.lock);
	while (i < checked.n && cmp_key(&checked.v[i].key, &key) < 0)
		i++;
	if (i < checked.n && cmp_key(&checked.v[i].key, &key) == 0)
		goto out;
	if (checked.n == checked.cap) {
		size_t cap = checked.cap ? checked.cap * 2 : 64;
		struct checked *v = realloc(checked.v, cap * sizeof(*v));

		if (!v)
			goto out;
		checked.v = v;
		checked.cap = cap;
	}
	memmove(&checked.v[i + 1], &checked.v[i], (checked.n - i) * sizeof(*checked.v));
	checked.v[i] = (struct checked){ .key = key, .state = state };
	checked.n++;
out:
	pthread_mutex_unlock(&checked.lock);
}

static int check_streamed_item(struct us_zitem_state *st,
			       const struct us_file *f,
			       const struct us_extent *x)
{
	int state = checked_state(st->key), rc;

	if (state)
		return state > 0 ? 0 : -EIO;
	rc = check_stream(f, x);
	if (rc == 0 || rc == -EIO)
		checked_note(st->key, rc == 0 ? 1 : -1);
	return rc;
}

/* ---- parked streams ------------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	struct {
		struct us_zstream *z;
		struct us_cache_key key;
		uint64_t stamp; /* when parked: the oldest goes first */
	} v[US_ZITEM_PARKED];
	uint64_t clock;
} parked = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The parked stream of @key furthest along but not past @off, or NULL. */
static struct us_zstream *unpark(struct us_cache_key key, uint64_t off)
{
	struct us_zstream *z = NULL;
	int best = -1;

	pthread_mutex_lock(&parked.lock);
	for (int i = 0; i < US_ZITEM_PARKED; i++) {
		struct us_zstream *c = parked.v[i].z;

		if (c && same_key(parked.v[i].key, key) && us_zstream_pos(c) <= off &&
		    (best < 0 || us_zstream_pos(c) > us_zstream_pos(parked.v[best].z)))
			best = i;
	}
	if (best >= 0) {
		z = parked.v[best].z;
		parked.v[best].z = NULL;
	}
	pthread_mutex_unlock(&parked.lock);
	return z;
}

static void park(struct us_cache_key key, struct us_zstream *z)
{
	struct us_zstream *old;
	int slot = 0;

	if (us_zstream_done(z)) {
		us_zstream_close(z); /* nothing left to resume */
		return;
	}
	pthread_mutex_lock(&parked.lock);
	for (int i = 1; i < US_ZITEM_PARKED && parked.v[slot].z; i++)
		if (!parked.v[i].z || parked.v[i].stamp < parked.v[slot].stamp)
			slot = i;
	old = parked.v[slot].z;
	parked.v[slot].z = z;
	parked.v[slot].key = key;
	parked.v[slot].stamp = ++parked.clock;
	pthread_mutex_unlock(&parked.lock);
	us_zstream_close(old);
}

void us_zitem_reset(void)
{
	pthread_mutex_lock(&parked.lock);
	for (int i = 0; i < US_ZITEM_PARKED; i++) {
		us_zstream_close(parked.v[i].z);
		parked.v[i].z = NULL;
	}
	pthread_mutex_unlock(&parked.lock);
	pthread_mutex_lock(&checked.lock);
	free(checked.v);
	checked.v = NULL;
	checked.n = checked.cap = 0;
	pthread_mutex_unlock(&checked.lock);
}

/* ---- one read ------------------------------------------------------------- */

/* The cache is looked up on the first transformed op, so that reads of
 * stored tensors never touch its lock. */
void us_zitem_begin(struct us_zitem_state *st)
{
	memset(st, 0, sizeof(*st));
}

void us_zitem_end(struct us_zitem_state *st)
{
	if (st->pinned)
		us_cache_put(st->cache, st->pinned);
	if (st->z)
		park(st->key, st->z);
	st->pinned = NULL;
	st->z = NULL;
}

struct decode {
	const struct us_file *f;
	const struct us_extent *x;
};

/* Decode the item's served prefix into @buf (@len = its decoded_len). */
static int decode_item(void *ctx, void *buf, size_t len)
{
	const struct decode *d = ctx;
	struct us_zstream *z = us_zstream_open(d->f->fd, d->x->item_off,
					       d->x->item_len);
	ssize_t n = z ? us_zstream_read(z, buf, len) : -ENOMEM;

	us_zstream_close(z);
	/* Shorter than the zip structure promised, or not the bytes its
	 * CRC-32 names: EIO, never bytes that are not the item's. */
	if (n >= 0 && ((uint64_t)n != d->x->decoded_len ||
		       check_buf(d->x, buf) < 0))
		n = -EIO;
	return n < 0 ? (int)n : 0;
}

/* The item's served prefix from the cache, decoded into it on a miss (or
 * by the reader already decoding it).  NULL with *@rc = 0 when the cache
 * has no room for it: stream instead. */
static struct us_cache_entry *fill(struct us_zitem_state *st,
				   const struct us_file *f,
				   const struct us_extent *x, int *rc)
{
	*rc = 0;
	if (!st->cache || x->decoded_len > SIZE_MAX)
		return NULL;
	return us_cache_fetch(st->cache, st->key, (size_t)x->decoded_len,
			      decode_item, &(struct decode){ .f = f, .x = x }, rc);
}

/* Position @st->z at decoded byte @off of the item: resume one that is
 * behind it (ours or a parked one), else start from the item's first byte. */
static int seek_stream(struct us_zitem_state *st, const struct us_file *f,
		       const struct us_extent *x, uint64_t off)
{
	if (st->z && us_zstream_pos(st->z) > off) {
		us_zstream_close(st->z);
		st->z = NULL;
	}
	if (!st->z)
		st->z = unpark(st->key, off);
	if (!st->z)
		st->z = us_zstream_open(f->fd, x->item_off, x->item_len);
	if (!st->z)
		return -ENOMEM;
	return us_zstream_skip(st->z, off - us_zstream_pos(st->z));
}

static int copy_streamed(struct us_zitem_state *st, const struct us_file *f,
			 const struct us_extent *x, void *dst, uint64_t off,
			 uint64_t len)
{
	int rc = seek_stream(st, f, x, off);
	ssize_t n;

	if (rc == 0) {
		n = us_zstream_read(st->z, dst, (size_t)len);
		rc = n < 0 ? (int)n : (uint64_t)n == len ? 0 : -EIO;
	}
	if (rc < 0) {
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

int us_zitem_copy(struct us_zitem_state *st, const struct us_file *f,
		  const struct us_extent *x, void *dst, uint64_t off,
		  uint64_t len)
{
	int rc = 0;

	assert(off <= x->decoded_len && len <= x->decoded_len - off);
	if (x->xf != US_XF_ZSTD)
		return -EIO;
	select_item(st, x);
	if (!st->cache)
		st->cache = us_cache_global();
	if (!st->pinned && !st->z && st->cache) {
		st->pinned = fill(st, f, x, &rc);
		if (rc < 0)
			return rc;
	}
	if (st->pinned) {
		memcpy(dst, (const char *)us_cache_buf(st->pinned) + off, (size_t)len);
		return 0;
	}
	if (!st->z && (rc = check_streamed_item(st, f, x)) < 0)
		return rc;
	return copy_streamed(st, f, x, dst, off, len);
}
