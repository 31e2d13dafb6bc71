/*
 * test_map.c - the zero-copy executor (map.c): a range described as
 * segments of the source file, merged where runs continue each other, and
 * declined (us_segs.overflow) wherever the bytes need the executor: a
 * cast, a zstd item, a strided row, too many short runs, more segments
 * than fit.  Then the sources mode that read-ahead uses, and a changed
 * file, which answers US_E_IO.
 */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asm_fixture.h"
#include "harness.h"

static struct fx x;

/* The bytes the segments name (fd segments read back with pread) are
 * those of the tensor from @off on. */
static bool segs_hold(const struct us_segs *s, uint64_t off)
{
	static unsigned char buf[FX_FILE_MAX];

	for (size_t i = 0; i < s->n; i++) {
		const struct us_seg *g = &s->v[i];

		if (g->fd >= 0 ? pread(g->fd, buf, g->len, (off_t)g->off) !=
					 (ssize_t)g->len
			       : (memcpy(buf, g->mem, g->len), false))
			return false;
		for (size_t b = 0; b < g->len; b++)
			if (buf[b] != fx_byte(off + b))
				return false;
		off += g->len;
	}
	return true;
}

static struct us_segs segs_of(struct us_seg *v, size_t cap, bool sources)
{
	return (struct us_segs){ .v = v, .cap = cap, .sources = sources };
}

/*
 * Three row chunks of a [3, 8192] tensor (32 KiB each: not short).  Rows 0
 * and 1 back to back in the file, row 2 after a gap: a whole read is two
 * segments, the first merged from two runs.
 */
static struct us_tensor *rows_tensor(uint64_t *end)
{
	static const uint64_t shape[2] = { 3, 8192 }, row[2] = { 1, 8192 };
	struct us_tensor *t = fx_tensor(&x, "rows", 2, shape, 3);
	uint64_t at = 0;

	for (uint32_t i = 0; t && i < 3; i++) {
		uint64_t offs[2] = { i, 0 };

		at = fx_place(&x, t, i, offs, row, NULL, at) - 12 + (i == 1) * 100;
	}
	*end = at;
	return t;
}

static void test_segments(void)
{
	struct us_seg v[4];
	struct us_segs s;
	struct us_tensor *t;
	uint64_t end;

	CHECK(fx_begin(&x));
	t = rows_tensor(&end);
	CHECK(t && fx_write(&x, end));
	if (!t)
		goto out;
	s = segs_of(v, 4, false);
	CHECK(us_tensor_map(x.sd, t, &s, t->nbytes, 0) == US_OK && !s.overflow);
	CHECK(s.n == 2 && v[0].off == 0 && v[0].len == 65536 &&
	      v[1].off == 65536 + 100 && v[1].len == 32768);
	CHECK(v[0].fd == x.sd->files[x.file].fd && segs_hold(&s, 0));
	/* a range inside row 1 and 2: its own offsets */
	s = segs_of(v, 4, false);
	CHECK(us_tensor_map(x.sd, t, &s, 40000, 30000) == US_OK && !s.overflow);
	CHECK(s.n == 2 && v[0].off == 30000 && v[0].len == 65536 - 30000 &&
	      segs_hold(&s, 30000));
	/* appended after memory a view put first (us_segs_add_mem) */
	s = segs_of(v, 4, false);
	us_segs_add_mem(&s, "hdr", 3);
	CHECK(us_tensor_map(x.sd, t, &s, 10, 0) == US_OK && s.n == 2 &&
	      v[0].fd == -1 && v[0].len == 3 && v[1].len == 10);
	/* more segments than fit */
	s = segs_of(v, 1, false);
	CHECK(us_tensor_map(x.sd, t, &s, t->nbytes, 0) == US_OK && s.overflow);
out:
	fx_end(&x);
}

/* What needs the executor is declined, and nothing is read for it. */
static void test_declined(void)
{
	static const uint64_t sq[2] = { 16, 16 }, zero2[2] = { 0, 0 };
	static const uint64_t half[2] = { 16, 8 }, mid[2] = { 0, 8 };
	static const int64_t colmajor[2] = { 1, 16 };
	struct us_tensor *tr, *sh1, *cast, *z;
	struct us_seg v[64];
	struct us_segs s;
	uint64_t at;

	CHECK(fx_begin(&x));
	tr = fx_tensor(&x, "tr", 2, sq, 1);
	sh1 = fx_tensor(&x, "sh1", 2, sq, 2);
	cast = fx_tensor(&x, "cast", 2, sq, 1);
	z = fx_tensor(&x, "z", 2, sq, 1);
	if (!tr || !sh1 || !cast || !z)
		goto out;
	at = fx_place(&x, tr, 0, zero2, sq, colmajor, 0);
	at = fx_place(&x, sh1, 0, zero2, half, NULL, at);
	at = fx_place(&x, sh1, 1, mid, half, NULL, at);
	at = fx_place(&x, cast, 0, zero2, sq, NULL, at);
	at = fx_place(&x, z, 0, zero2, sq, NULL, at);
	CHECK(fx_write(&x, at));
	/* a strided row */
	s = segs_of(v, 64, false);
	CHECK(us_tensor_map(x.sd, tr, &s, tr->nbytes, 0) == US_OK && s.overflow);
	/* Shard(1): 32 runs of 32 bytes, no two continuing each other */
	s = segs_of(v, 64, false);
	CHECK(us_tensor_map(x.sd, sh1, &s, sh1->nbytes, 0) == US_OK && s.overflow);
	/* ...while two short runs are still worth a splice each */
	s = segs_of(v, 64, false);
	CHECK(us_tensor_map(x.sd, sh1, &s, 64, 0) == US_OK && !s.overflow &&
	      s.n == 2 && segs_hold(&s, 0));
	/* a cast (--dtype): stored i32, presented as f16 */
	cast->dtype = US_DT_F16;
	cast->nbytes = cast->numel * 2;
	s = segs_of(v, 64, false);
	CHECK(us_tensor_map(x.sd, cast, &s, 64, 0) == US_OK && s.overflow);
	/* a zstd item: offsets in the decoded bytes, not the file */
	z->chunks[0].src.xf = US_XF_ZSTD;
	s = segs_of(v, 64, false);
	CHECK(us_tensor_map(x.sd, z, &s, 64, 0) == US_OK && s.overflow && s.n == 0);
out:
	fx_end(&x);
}

/*
 * Sources (read-ahead): a strided chunk is the span its rows read, a cast
 * its stored elements, a zstd item nothing; a full list just ends.
 */
static void test_sources(void)
{
	static const uint64_t sq[2] = { 16, 16 }, zero2[2] = { 0, 0 };
	static const int64_t colmajor[2] = { 1, 16 };
	struct us_tensor *tr, *cast, *rows;
	struct us_seg v[4];
	struct us_segs s;
	uint64_t at, cast_at, end;

	CHECK(fx_begin(&x));
	rows = rows_tensor(&end);
	tr = fx_tensor(&x, "tr", 2, sq, 1);
	cast = fx_tensor(&x, "cast", 2, sq, 1);
	if (!rows || !tr || !cast)
		goto out;
	at = fx_place(&x, tr, 0, zero2, sq, colmajor, end);
	cast_at = at;
	at = fx_place(&x, cast, 0, zero2, sq, NULL, at);
	CHECK(fx_write(&x, at));
	s = segs_of(v, 4, true);
	CHECK(us_tensor_map(x.sd, tr, &s, tr->nbytes, 0) == US_OK && !s.overflow);
	CHECK(s.n == 1 && v[0].off == end && v[0].len == 16 * 16 * 4);
	/* bytes [10, 30) of an f16 view: elements 5..14, stored as i32 */
	cast->dtype = US_DT_F16;
	cast->nbytes = cast->numel * 2;
	s = segs_of(v, 4, true);
	CHECK(us_tensor_map(x.sd, cast, &s, 20, 10) == US_OK && s.n == 1 &&
	      v[0].off == cast_at + 5 * 4 && v[0].len == 10 * 4);
	/* no memory in a list of sources */
	s = segs_of(v, 4, true);
	us_segs_add_mem(&s, "hdr", 3);
	CHECK(s.n == 0);
	/* full after one: the first is kept, and it says so */
	s = segs_of(v, 1, true);
	CHECK(us_tensor_map(x.sd, rows, &s, rows->nbytes, 0) == US_OK &&
	      s.n == 1 && v[0].off == 0 && v[0].len == 65536 && s.overflow);
out:
	fx_end(&x);
}

/* As the CPU executor: a file changed since mount is never described. */
static void test_file_changed(void)
{
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 12345, 0 } };
	struct us_seg v[4];
	struct us_segs s = segs_of(v, 4, false);
	struct us_tensor *t;
	uint64_t end;

	CHECK(fx_begin(&x));
	t = rows_tensor(&end);
	CHECK(t && fx_write(&x, end));
	if (!t)
		goto out;
	CHECK(us_tensor_map(x.sd, t, &s, 100, 0) == US_OK && s.n == 1);
	CHECK(utimensat(AT_FDCWD, fx_path(&x), ts, 0) == 0);
	s = segs_of(v, 4, false);
	CHECK(us_tensor_map(x.sd, t, &s, 100, 0) == US_E_IO);
out:
	fx_end(&x);
}

int main(void)
{
	RUN(test_segments);
	RUN(test_declined);
	RUN(test_sources);
	RUN(test_file_changed);
	TEST_MAIN_END();
}
