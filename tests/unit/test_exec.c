/*
 * test_exec.c - the CPU executor (exec_cpu.c) through us_tensor_read, on a
 * real file: stored copies of strided 2-D chunks (transposed, and rows
 * with padding between them) into the caller's buffer, ranges that cross
 * chunk borders (Shard(0) and Shard(1) grids), and I/O failures, which
 * must answer US_E_IO and never a buffer of wrong bytes.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asm_fixture.h"
#include "assemble/assembler.h" /* as->cache, for its accounting */
#include "assemble/cache.h"
#include "harness.h"

static struct fx x;

static struct us_assembler *new_as(uint64_t cache)
{
	struct us_assembler_opts o = { .cache_size = cache };
	struct us_assembler *as = NULL;

	CHECK(us_assembler_new(&o, &as, NULL) == US_OK);
	return as;
}

/* Every (offset, length) on a grid of steps: the bytes of fx_byte. */
static int bad_ranges(struct us_assembler *as, const struct us_tensor *t)
{
	int bad = 0;

	for (uint64_t off = 0; off <= t->nbytes; off += 5)
		for (uint64_t len = 0; off + len <= t->nbytes; len += 13)
			bad += !fx_read_ok(as, &x, t, off, len);
	return bad;
}

/*
 * One [12, 10] chunk stored transposed (column-major: strides {1, 12}):
 * every output row is a strided gather.  With room in the cache the span
 * is held once (tile.c); with none, rows are read a group at a time.
 */
static void test_transposed_chunk(void)
{
	static const uint64_t shape[2] = { 12, 10 }, zero[2] = { 0, 0 };
	static const int64_t colmajor[2] = { 1, 12 };
	struct us_assembler *big, *none;
	struct us_tensor *t;

	CHECK(fx_begin(&x));
	t = fx_tensor(&x, "t", 2, shape, 1);
	CHECK(t != NULL);
	if (!t)
		goto out;
	fx_place(&x, t, 0, zero, shape, colmajor, 64);
	CHECK(fx_write(&x, 64 + 12 * 10 * 4 + 64));
	big = new_as(1u << 20);
	none = new_as(0);
	CHECK(big && none);
	if (big && none) {
		CHECK(fx_read_ok(big, &x, t, 0, t->nbytes));
		/* held: one span of exactly the chunk's 480 bytes */
		CHECK(us_cache_count(big->cache) == 1 &&
		      us_cache_used(big->cache) == 12 * 10 * 4);
		CHECK(bad_ranges(big, t) == 0);
		CHECK(fx_read_ok(none, &x, t, 0, t->nbytes));
		CHECK(us_cache_used(none->cache) == 0);
		CHECK(bad_ranges(none, t) == 0);
	}
	us_assembler_free(big);
	us_assembler_free(none);
out:
	fx_end(&x);
}

/* One [6, 5] chunk whose rows are 8 elements apart in the file (strides
 * {8, 1}): each row is one run, the padding is never copied. */
static void test_padded_rows(void)
{
	static const uint64_t shape[2] = { 6, 5 }, zero[2] = { 0, 0 };
	static const int64_t padded[2] = { 8, 1 };
	struct us_assembler *as = new_as(US_ASSEMBLER_CACHE_DEFAULT);
	struct us_tensor *t;

	CHECK(fx_begin(&x));
	t = fx_tensor(&x, "t", 2, shape, 1);
	CHECK(t != NULL && as != NULL);
	if (!t || !as)
		goto out;
	fx_place(&x, t, 0, zero, shape, padded, 40);
	CHECK(fx_write(&x, 40 + 6 * 8 * 4));
	CHECK(fx_read_ok(as, &x, t, 0, t->nbytes));
	CHECK(bad_ranges(as, t) == 0);
	CHECK(us_cache_count(as->cache) == 0); /* plain runs: nothing held */
out:
	us_assembler_free(as);
	fx_end(&x);
}

/*
 * Ranges across chunk borders.  Shard(0): [8, 6] as rows 0-2 and 3-7,
 * stored in the file in the other order with a gap; the border is at byte
 * 3 * 6 * 4 = 72.  Shard(1): [5, 9] as columns 0-3 and 4-8: every row
 * crosses a border, so the runs are short and gathered.
 */
static void test_across_chunks(void)
{
	static const uint64_t s0[2] = { 8, 6 }, s1[2] = { 5, 9 };
	static const uint64_t a0[2] = { 0, 0 }, z0[2] = { 3, 6 };
	static const uint64_t b0[2] = { 3, 0 }, y0[2] = { 5, 6 };
	static const uint64_t a1[2] = { 0, 0 }, z1[2] = { 5, 4 };
	static const uint64_t b1[2] = { 0, 4 }, y1[2] = { 5, 5 };
	struct us_assembler *as = new_as(US_ASSEMBLER_CACHE_DEFAULT);
	struct us_tensor *t0, *t1;
	uint64_t at;

	CHECK(fx_begin(&x) && as != NULL);
	t0 = fx_tensor(&x, "rows", 2, s0, 2);
	t1 = fx_tensor(&x, "cols", 2, s1, 2);
	CHECK(t0 && t1);
	if (!t0 || !t1 || !as)
		goto out;
	at = fx_place(&x, t0, 1, b0, y0, NULL, 16); /* the second half first */
	at = fx_place(&x, t0, 0, a0, z0, NULL, at);
	at = fx_place(&x, t1, 0, a1, z1, NULL, at);
	at = fx_place(&x, t1, 1, b1, y1, NULL, at);
	CHECK(fx_write(&x, at));
	CHECK(fx_read_ok(as, &x, t0, 70, 4));  /* 2 bytes either side */
	CHECK(fx_read_ok(as, &x, t0, 71, 30)); /* unaligned, both chunks */
	CHECK(fx_read_ok(as, &x, t0, 0, t0->nbytes));
	CHECK(bad_ranges(as, t0) == 0);
	CHECK(fx_read_ok(as, &x, t1, 14, 8)); /* row 0 across columns 3 | 4 */
	CHECK(fx_read_ok(as, &x, t1, 0, t1->nbytes));
	CHECK(bad_ranges(as, t1) == 0);
out:
	us_assembler_free(as);
	fx_end(&x);
}

/*
 * A read that fails is US_E_IO, on each way the executor reads: one long
 * run straight into the buffer, short runs gathered, a strided span held
 * in the cache, strided rows grouped without it.  The failure is real:
 * the descriptor is swapped for a write-only one of the same file, so its
 * identity still matches (us_file_check passes) and pread fails (EBADF).
 */
static void test_io_error(void)
{
	static const uint64_t big[1] = { 32768 }, zero1[1] = { 0 };
	static const uint64_t sq[2] = { 16, 16 }, zero2[2] = { 0, 0 };
	static const uint64_t half[2] = { 16, 8 }, mid[2] = { 0, 8 };
	static const int64_t colmajor[2] = { 1, 16 };
	struct us_assembler *cached = new_as(1u << 20), *none = new_as(0);
	struct us_tensor *whole, *tr, *sh1;
	static unsigned char buf[131072];
	uint64_t at;
	int wfd, fd;

	CHECK(fx_begin(&x) && cached && none);
	whole = fx_tensor(&x, "whole", 1, big, 1);
	tr = fx_tensor(&x, "tr", 2, sq, 1);
	sh1 = fx_tensor(&x, "sh1", 2, sq, 2);
	if (!whole || !tr || !sh1 || !cached || !none)
		goto out;
	at = fx_place(&x, whole, 0, zero1, big, NULL, 0);
	at = fx_place(&x, tr, 0, zero2, sq, colmajor, at);
	at = fx_place(&x, sh1, 0, zero2, half, NULL, at);
	at = fx_place(&x, sh1, 1, mid, half, NULL, at);
	CHECK(fx_write(&x, at));
	/* first, all good */
	CHECK(fx_read_ok(cached, &x, whole, 0, whole->nbytes));
	CHECK(fx_read_ok(cached, &x, sh1, 0, sh1->nbytes));
	fd = x.sd->files[x.file].fd;
	wfd = open(fx_path(&x), O_WRONLY);
	CHECK(wfd >= 0 && dup2(wfd, fd) == fd);
	if (wfd >= 0)
		close(wfd);
	CHECK(us_tensor_read(cached, x.sd, whole, buf, whole->nbytes, 0) == US_E_IO);
	CHECK(us_tensor_read(cached, x.sd, whole, buf, 100, 3) == US_E_IO);
	CHECK(us_tensor_read(cached, x.sd, sh1, buf, sh1->nbytes, 0) == US_E_IO);
	CHECK(us_tensor_read(cached, x.sd, tr, buf, tr->nbytes, 0) == US_E_IO);
	CHECK(us_tensor_read(none, x.sd, tr, buf, tr->nbytes, 0) == US_E_IO);
	/* a failed fill is given up, never listed in the cache */
	CHECK(us_cache_count(cached->cache) == 0);
out:
	us_assembler_free(cached);
	us_assembler_free(none);
	fx_end(&x);
}

/* A file whose identity changed since mount (its mtime set back, its
 * size cut) answers US_E_IO, even for bytes already held in the cache. */
static void test_file_changed(void)
{
	static const uint64_t sq[2] = { 16, 16 }, zero2[2] = { 0, 0 };
	static const int64_t colmajor[2] = { 1, 16 };
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 12345, 0 } };
	struct us_assembler *as = new_as(1u << 20);
	static unsigned char buf[1024];
	struct us_tensor *tr;

	CHECK(fx_begin(&x) && as);
	tr = fx_tensor(&x, "tr", 2, sq, 1);
	if (!tr || !as)
		goto out;
	CHECK(fx_write(&x, fx_place(&x, tr, 0, zero2, sq, colmajor, 0)));
	CHECK(fx_read_ok(as, &x, tr, 0, tr->nbytes)); /* the span now held */
	CHECK(us_cache_count(as->cache) == 1);
	CHECK(utimensat(AT_FDCWD, fx_path(&x), ts, 0) == 0);
	CHECK(us_tensor_read(as, x.sd, tr, buf, tr->nbytes, 0) == US_E_IO);
	CHECK(us_tensor_read(as, x.sd, tr, buf, 8, 0) == US_E_IO);
	CHECK(truncate(fx_path(&x), 100) == 0);
	CHECK(us_tensor_read(as, x.sd, tr, buf, 8, 0) == US_E_IO);
out:
	us_assembler_free(as);
	fx_end(&x);
}

int main(void)
{
	RUN(test_transposed_chunk);
	RUN(test_padded_rows);
	RUN(test_across_chunks);
	RUN(test_io_error);
	RUN(test_file_changed);
	TEST_MAIN_END();
}
