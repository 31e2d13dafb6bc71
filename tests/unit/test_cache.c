/*
 * test_cache.c - the bounded cache of decoded items (LRU order, the byte
 * bound, pinning, many threads at once) and zstd items read through it:
 * cached, streamed when larger than the cache, strided, corrupt, truncated,
 * shorter than promised, and changed after mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "assemble/assemble.h"
#include "assemble/assembler.h" /* as->cache, for its accounting */
#include "assemble/cache.h"
#include "codec/crc32.h"
#include "codec/zipdesc.h"
#include "file_fd.h"
#include "harness.h"
#include "model.h"
#include "tmpdir.h"

static struct us_cache_key K(uint64_t off)
{
	return (struct us_cache_key){ .file = 1, .item_off = off };
}

/* Insert @len bytes of value @v under @off (unless it is there); the entry
 * stays unpinned. */
static bool put_new(struct us_cache *c, uint64_t off, size_t len, int v)
{
	struct us_cache_entry *e;
	enum us_cache_claim r = us_cache_claim(c, K(off), len, &e);

	if (r == US_CACHE_NONE)
		return false;
	if (r == US_CACHE_FILL) {
		memset(us_cache_buf(e), v, len);
		e = us_cache_publish(c, e);
	}
	us_cache_put(c, e);
	return true;
}

/* Claim @off for @len bytes and give the entry back (nothing filled). */
static enum us_cache_claim claim_only(struct us_cache *c, uint64_t off, size_t len)
{
	struct us_cache_entry *e;
	enum us_cache_claim r = us_cache_claim(c, K(off), len, &e);

	if (r != US_CACHE_NONE)
		us_cache_put(c, e);
	return r;
}

static bool has(struct us_cache *c, uint64_t off)
{
	struct us_cache_entry *e = us_cache_get(c, K(off));

	if (e)
		us_cache_put(c, e);
	return e != NULL;
}

static void test_lru_order(void)
{
	struct us_cache *c = us_cache_new(100);

	CHECK(put_new(c, 1, 40, 1) && put_new(c, 2, 40, 2));
	CHECK(has(c, 1)); /* 1 is now the most recent: 2 goes first */
	CHECK(put_new(c, 3, 40, 3));
	CHECK(has(c, 1) && !has(c, 2) && has(c, 3));
	CHECK(us_cache_count(c) == 2 && us_cache_used(c) == 80);
	CHECK(put_new(c, 4, 100, 4)); /* needs everything */
	CHECK(!has(c, 1) && !has(c, 3) && has(c, 4));
	CHECK(claim_only(c, 5, 101) == US_CACHE_NONE); /* never fits */
	CHECK(us_cache_used(c) == 100);
	us_cache_free(c);
}

/* A claim that waits for another reader's fill (in its own thread). */
struct waiter {
	struct us_cache *c;
	uint64_t off;
	enum us_cache_claim r;
	struct us_cache_entry *e;
	int done; /* atomic */
};

static void *claim_thread(void *arg)
{
	struct waiter *w = arg;

	w->r = us_cache_claim(w->c, K(w->off), 20, &w->e);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static bool still_waiting(struct waiter *w)
{
	usleep(50 * 1000);
	return !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

static void test_pinned_and_claims(void)
{
	struct us_cache *c = us_cache_new(100);
	struct us_cache_entry *a, *p;
	struct waiter w = { .c = c, .off = 7 };
	pthread_t th;

	CHECK(put_new(c, 1, 60, 1));
	p = us_cache_get(c, K(1));
	CHECK(p != NULL);
	/* The pinned entry cannot be evicted, so 50 more bytes do not fit. */
	CHECK(claim_only(c, 2, 50) == US_CACHE_NONE);
	CHECK(us_cache_used(c) == 60);
	us_cache_put(c, p);
	CHECK(put_new(c, 2, 50, 2) && !has(c, 1));
	/* Two readers want one item: the second waits for the first's fill
	 * and gets its bytes, one copy kept. */
	CHECK(us_cache_claim(c, K(7), 20, &a) == US_CACHE_FILL);
	CHECK(us_cache_used(c) == 70 && !has(c, 7)); /* being filled: a miss */
	CHECK(pthread_create(&th, NULL, claim_thread, &w) == 0);
	CHECK(still_waiting(&w));
	memset(us_cache_buf(a), 'a', 20);
	a = us_cache_publish(c, a);
	pthread_join(th, NULL);
	CHECK(w.r == US_CACHE_HIT && w.e == a && ((char *)us_cache_buf(a))[0] == 'a');
	CHECK(us_cache_used(c) == 70 && us_cache_count(c) == 2);
	us_cache_put(c, a);
	us_cache_put(c, w.e);
	/* A claim given back unpublished frees its room, and the reader
	 * waiting for it fills instead. */
	w = (struct waiter){ .c = c, .off = 8 };
	CHECK(us_cache_claim(c, K(8), 30, &a) == US_CACHE_FILL);
	CHECK(us_cache_used(c) == 100);
	CHECK(pthread_create(&th, NULL, claim_thread, &w) == 0);
	CHECK(still_waiting(&w));
	us_cache_put(c, a);
	pthread_join(th, NULL);
	CHECK(w.r == US_CACHE_FILL && us_cache_used(c) == 90 && !has(c, 8));
	us_cache_put(c, w.e);
	CHECK(us_cache_used(c) == 70 && !has(c, 8));
	us_cache_free(c);
}

static void test_bound_random(void)
{
	struct us_cache *c = us_cache_new(1000);
	struct us_cache_entry *pins[8] = {0};
	unsigned seed = 7;
	bool ok = true;

	for (int i = 0; i < 20000; i++) {
		uint64_t key = (uint64_t)(rand_r(&seed) % 64);
		int slot = rand_r(&seed) % 8;

		if (rand_r(&seed) % 3 == 0) {
			if (pins[slot])
				us_cache_put(c, pins[slot]);
			pins[slot] = us_cache_get(c, K(key));
		} else {
			put_new(c, key, (size_t)(rand_r(&seed) % 300), (int)key);
		}
		ok &= us_cache_used(c) <= 1000;
	}
	CHECK(ok);
	for (int i = 0; i < 8; i++)
		if (pins[i])
			us_cache_put(c, pins[i]);
	us_cache_free(c);
}

/* ---- threads --------------------------------------------------------------- */

struct worker {
	struct us_cache *c;
	unsigned seed;
	int bad;
};

/* Item @key's bytes are all (key * 7) & 255, so mix-ups show. */
static void *cache_worker(void *arg)
{
	struct worker *w = arg;

	for (int i = 0; i < 20000; i++) {
		uint64_t key = (uint64_t)(rand_r(&w->seed) % 40);
		size_t len = 16 + key * 8;
		unsigned char v = (unsigned char)(key * 7);
		struct us_cache_entry *e;
		enum us_cache_claim r = us_cache_claim(w->c, K(key), len, &e);

		if (r == US_CACHE_FILL) {
			memset(us_cache_buf(e), v, len);
			e = us_cache_publish(w->c, e);
		}
		if (r != US_CACHE_NONE) {
			const unsigned char *p = us_cache_buf(e);

			w->bad += us_cache_len(e) != len || p[0] != v || p[len - 1] != v;
			us_cache_put(w->c, e);
		}
		w->bad += us_cache_used(w->c) > us_cache_capacity(w->c);
	}
	return NULL;
}

static void test_threads(void)
{
	struct us_cache *c = us_cache_new(1500);
	pthread_t th[8];
	struct worker w[8];

	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){ .c = c, .seed = (unsigned)i + 1 };
		CHECK(pthread_create(&th[i], NULL, cache_worker, &w[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].bad == 0);
	}
	CHECK(us_cache_used(c) <= 1500);
	us_cache_free(c);
}

/* ---- zstd items through us_tensor_read --------------------------------------- */

/* The assembler the zstd tests read through, remade for each cache size. */
static struct us_assembler *as;

static bool use_cache(uint64_t capacity)
{
	struct us_assembler_opts o = { .cache_size = capacity };

	us_assembler_free(as);
	as = NULL;
	return us_assembler_new(&o, &as, NULL) == US_OK;
}

#define ROWS 96
#define COLS 160
#define HEAD 100 /* decoded bytes before the tensor, like a zip head */
#define TAIL 40  /* after it: its data descriptor, then "the central directory" */
#define NBYTES (ROWS * COLS * 4)
#define DECODED (HEAD + ROWS * COLS * 4 + TAIL)

static unsigned char plain[DECODED];

struct zfix {
	const char *dir;
	struct us_statedict *sd;
	struct us_tensor *t;
	uint64_t item_off, item_len;
	size_t clen;
};

/* One frame, no content size and no checksum, as DCP writes it. */
static size_t compress_item(unsigned char *out, size_t cap)
{
	ZSTD_CCtx *cc = ZSTD_createCCtx();
	ZSTD_inBuffer in = { plain, sizeof(plain), 0 };
	ZSTD_outBuffer ob = { out, cap, 0 };
	size_t r;

	ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 0);
	ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
	do
		r = ZSTD_compressStream2(cc, &ob, &in, ZSTD_e_end);
	while (r != 0 && !ZSTD_isError(r));
	ZSTD_freeCCtx(cc);
	return ZSTD_isError(r) ? 0 : ob.pos;
}

/*
 * A file "__0_0.distcp" with 64 junk bytes, then the item.  The tensor is
 * [ROWS, COLS] i32 with element (r, c) = r * COLS + c, stored row-major, or
 * transposed (column-major) when @transpose.  @corrupt flips bytes in the
 * middle of the frame; @cut drops its last bytes; @extra claims more
 * decoded bytes than the frame has; @flip changes a tensor byte after its
 * CRC was taken (a corruption zstd itself cannot see).
 */
static bool zfix_make(struct zfix *z, bool transpose, bool corrupt, size_t cut,
		      uint64_t extra, bool flip)
{
	static const unsigned char sig[4] = { 'P', 'K', 7, 8 };
	uint32_t crc, n32 = NBYTES;
	static unsigned char file[64 + DECODED + 1024];
	uint64_t shape[2] = { ROWS, COLS };
	struct us_err err = {0};
	struct us_chunk *c;
	uint32_t idx;
	int dfd;

	memset(plain, 0x5a, sizeof(plain));
	for (uint32_t r = 0; r < ROWS; r++)
		for (uint32_t k = 0; k < COLS; k++) {
			int32_t v = (int32_t)(r * COLS + k);
			size_t pos = transpose ? (size_t)k * ROWS + r : (size_t)r * COLS + k;

			memcpy(plain + HEAD + pos * 4, &v, 4);
		}
	crc = us_crc32(0, plain + HEAD, NBYTES);
	memcpy(plain + HEAD + NBYTES, sig, 4);
	memcpy(plain + HEAD + NBYTES + 4, &crc, 4);
	memcpy(plain + HEAD + NBYTES + 8, &n32, 4);
	memcpy(plain + HEAD + NBYTES + 12, &n32, 4);
	if (flip)
		plain[HEAD + NBYTES / 3] ^= 1;
	memset(file, 0xee, 64);
	z->clen = compress_item(file + 64, sizeof(file) - 64);
	if (!z->clen)
		return false;
	if (corrupt)
		for (size_t i = z->clen / 2; i < z->clen / 2 + 8; i++)
			file[64 + i] ^= 0x5c;
	z->item_off = 64;
	z->item_len = z->clen - cut;
	z->dir = tmpdir_new();
	if (tmpdir_write(z->dir, "__0_0.distcp", file, 64 + z->clen) < 0)
		return false;
	z->sd = us_sd_new();
	dfd = open(z->dir, O_RDONLY | O_DIRECTORY);
	if (!z->sd || dfd < 0 ||
	    us_sd_open_file(z->sd, US_TEST_DIR(dfd), "__0_0.distcp", &idx, &err) != US_OK) {
		if (dfd >= 0)
			close(dfd);
		return false;
	}
	close(dfd);
	z->t = us_sd_add_tensor(z->sd, "w", US_DT_I32, 2, shape, 1, "w", &err);
	if (!z->t)
		return false;
	c = &z->t->chunks[0];
	memcpy((uint64_t *)c->sizes, shape, sizeof(shape)); /* the whole tensor */
	c->src.file = idx;
	c->src.xf = US_XF_ZSTD;
	c->src.item_off = z->item_off;
	c->src.item_len = z->item_len;
	c->src.decoded_len = HEAD + NBYTES + 24 + extra;
	c->src.offset = HEAD;
	if (transpose) {
		static const int64_t tstrides[2] = { 1, ROWS };

		c->src.strides = tstrides;
	}
	return true;
}

static void zfix_free(struct zfix *z)
{
	us_sd_free(z->sd);
	tmpdir_rm(z->dir);
}

static int32_t expect_at(uint64_t byte)
{
	return (int32_t)(byte / 4);
}

/* Read [off, off + len) and compare with the row-major values. */
static bool range_ok(const struct zfix *z, uint64_t off, uint64_t len)
{
	unsigned char *buf = malloc(len ? len : 1);
	bool ok = buf && us_tensor_read(as, z->sd, z->t, buf, len, off) == 0;

	for (uint64_t b = off; ok && b < off + len; b++) {
		int32_t v = expect_at(b);

		ok = buf[b - off] == ((const unsigned char *)&v)[b % 4];
	}
	free(buf);
	return ok;
}

/* Every 4 KiB page in order, backwards, then odd unaligned ranges. */
static bool read_patterns(const struct zfix *z)
{
	uint64_t n = ROWS * COLS * 4;
	bool ok = true;

	for (uint64_t off = 0; off < n; off += 4096)
		ok &= range_ok(z, off, n - off < 4096 ? n - off : 4096);
	for (uint64_t off = n; off > 0;) {
		uint64_t len = off < 5000 ? off : 5000;

		off -= len;
		ok &= range_ok(z, off, len);
	}
	ok &= range_ok(z, 3, 7) && range_ok(z, n - 5, 5) && range_ok(z, 0, n);
	return ok;
}

static void test_zstd_cached_and_streamed(void)
{
	for (int transpose = 0; transpose < 2; transpose++) {
		struct zfix z;

		CHECK(zfix_make(&z, transpose, false, 0, 0, false));
		CHECK(use_cache(256u << 20)); /* whole item cached */
		CHECK(read_patterns(&z));
		CHECK(us_cache_count(as->cache) == 1);
		CHECK(use_cache(1024)); /* larger than the cache */
		CHECK(read_patterns(&z));
		CHECK(us_cache_used(as->cache) == 0);
		zfix_free(&z);
	}
}

static void test_zstd_eio(void)
{
	static unsigned char buf[256];
	uint64_t sizes[2] = { 256u << 20, 1024 };

	/* A corrupt frame, a cut item, a stream shorter than promised, a
	 * tensor byte that decodes but fails the CRC: EIO from the first
	 * byte on, cached or streamed, and again on a second read. */
	static const struct { bool corrupt; size_t cut; uint64_t extra; bool flip; } bad[] = {
		{ true, 0, 0, false }, { false, 5, 0, false },
		{ false, 0, TAIL - 24 + 1, false }, { false, 0, 0, true },
	};

	for (int s = 0; s < 2; s++) {
		for (size_t b = 0; b < sizeof(bad) / sizeof(*bad); b++) {
			struct zfix z;

			CHECK(zfix_make(&z, false, bad[b].corrupt, bad[b].cut,
					bad[b].extra, bad[b].flip));
			CHECK(use_cache(sizes[s]));
			CHECK(us_tensor_read(as, z.sd, z.t, buf, sizeof(buf), 0) == US_E_IO);
			CHECK(us_tensor_read(as, z.sd, z.t, buf, sizeof(buf),
					     NBYTES - sizeof(buf)) == US_E_IO);
			zfix_free(&z);
		}
	}
}

/* A cached item of a file changed since mount is not served. */
static void test_zstd_file_changed(void)
{
	static unsigned char buf[64];
	char path[4096];
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 12345, 0 } };
	struct zfix z;

	CHECK(zfix_make(&z, false, false, 0, 0, false));
	CHECK(use_cache(256u << 20));
	CHECK(us_tensor_read(as, z.sd, z.t, buf, sizeof(buf), 0) == 0);
	snprintf(path, sizeof(path), "%s/__0_0.distcp", z.dir);
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
	CHECK(us_tensor_read(as, z.sd, z.t, buf, sizeof(buf), 0) == US_E_IO);
	zfix_free(&z);
}

struct reader {
	const struct zfix *z;
	unsigned seed;
	int bad;
};

static void *read_worker(void *arg)
{
	struct reader *r = arg;
	uint64_t n = ROWS * COLS * 4;

	for (int i = 0; i < 300; i++) {
		uint64_t off = (uint64_t)rand_r(&r->seed) % n;
		uint64_t len = 1 + (uint64_t)rand_r(&r->seed) % 6000;

		r->bad += !range_ok(r->z, off, len < n - off ? len : n - off);
	}
	return NULL;
}

/* Readers racing on one item: cached with evictions, and streamed. */
static void test_zstd_threads(void)
{
	uint64_t sizes[2] = { DECODED, 1024 };

	for (int s = 0; s < 2; s++) {
		pthread_t th[6];
		struct reader r[6];
		struct zfix z;

		CHECK(zfix_make(&z, s == 1, false, 0, 0, false));
		CHECK(use_cache(sizes[s]));
		for (int i = 0; i < 6; i++) {
			r[i] = (struct reader){ .z = &z, .seed = (unsigned)i + 11 };
			CHECK(pthread_create(&th[i], NULL, read_worker, &r[i]) == 0);
		}
		for (int i = 0; i < 6; i++) {
			pthread_join(th[i], NULL);
			CHECK(r[i].bad == 0);
		}
		zfix_free(&z);
	}
}

/* CRC-32: known values, and the CRC of a suffix recovered from the whole. */
static void test_crc(void)
{
	static unsigned char buf[100000];
	unsigned seed = 3;
	uint32_t all, head;

	CHECK(us_crc32(0, "123456789", 9) == 0xcbf43926u);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)rand_r(&seed);
	all = us_crc32(0, buf, sizeof(buf));
	for (size_t cut = 0; cut <= sizeof(buf); cut += 7919) {
		head = us_crc32(0, buf, cut);
		CHECK(us_crc32_suffix(all, head, sizeof(buf) - cut) ==
		      us_crc32(0, buf + cut, sizeof(buf) - cut));
	}
}

int main(void)
{
	RUN(test_crc);
	RUN(test_lru_order);
	RUN(test_pinned_and_claims);
	RUN(test_bound_random);
	RUN(test_threads);
	RUN(test_zstd_cached_and_streamed);
	RUN(test_zstd_eio);
	RUN(test_zstd_file_changed);
	RUN(test_zstd_threads);
	us_assembler_free(as);
	TEST_MAIN_END();
}
