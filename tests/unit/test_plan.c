/*
 * test_plan.c - byte range -> copy ops, over chunk grids, strided
 * (transposed) sources and partial elements, checked against the expected
 * row-major bytes for every (offset, length) pair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "assemble/plan.h"
#include "harness.h"
#include "model.h"

/* The "file": chunk data laid out at the offsets the extents name. */
static unsigned char src_mem[1 << 16];

/* What the executor tests read through: the default one, or one remade
 * with another cache size (use_cache). */
static struct us_assembler *as;

static bool use_cache(uint64_t capacity)
{
	struct us_assembler_opts o = { .cache_size = capacity };

	us_assembler_free(as);
	as = NULL;
	return us_assembler_new(&o, &as, NULL) == US_OK;
}

struct sink {
	unsigned char *out;
	int nops;
};

static int emit_copy(void *ctx, const struct us_copy_op *op)
{
	struct sink *s = ctx;

	for (uint64_t i = 0; i < op->count; i++) {
		if (op->count > 1 &&
		    (op->src_off + i * op->src_stride < op->span_off ||
		     op->src_off + i * op->src_stride + op->len >
			     op->span_off + op->span_len))
			abort(); /* a strided element outside its chunk's span */
		memcpy(s->out + op->dst_off + i * op->len,
		       src_mem + op->src_off + i * op->src_stride, op->len);
	}
	s->nops++;
	return 0;
}

/* Store chunk @c of a [.., C] int32 tensor whose value is its linear index. */
static uint64_t place_chunk(struct us_chunk *c, const uint64_t *shape,
			    uint32_t ndim, uint64_t at, bool transpose)
{
	uint64_t n = 1, idx[8], cnt;

	for (uint32_t k = 0; k < ndim; k++)
		n *= c->sizes[k];
	c->src.offset = at;
	for (uint64_t e = 0; e < n; e++) {
		uint64_t rem = e, lin = 0, pos;
		int32_t v;

		for (uint32_t k = ndim; k-- > 0;) {
			idx[k] = rem % c->sizes[k];
			rem /= c->sizes[k];
		}
		for (uint32_t k = 0; k < ndim; k++)
			lin = lin * shape[k] + c->offsets[k] + idx[k];
		/* Row-major within the chunk, or column-major for a 2-D transpose. */
		pos = transpose ? idx[1] * c->sizes[0] + idx[0] : e;
		v = (int32_t)lin;
		memcpy(src_mem + at + pos * 4, &v, 4);
	}
	cnt = n * 4;
	return at + cnt + 12; /* a gap, so misplaced reads show */
}

static void check_all_ranges(const struct us_tensor *t)
{
	static unsigned char expect[1 << 14], got[1 << 14];
	int bad = 0;

	for (uint64_t i = 0; i < t->numel; i++) {
		int32_t v = (int32_t)i;
		memcpy(expect + i * 4, &v, 4);
	}
	for (uint64_t off = 0; off <= t->nbytes; off += 3) {
		for (uint64_t len = 0; off + len <= t->nbytes; len += 7) {
			struct sink s = { got, 0 };

			memset(got, 0xEE, len + 1);
			if (us_plan_range(t, off, len, emit_copy, &s) != 0 ||
			    memcmp(got, expect + off, len) != 0 || got[len] != 0xEE)
				bad++;
		}
	}
	CHECK(bad == 0);
}

static struct us_tensor *grid_tensor(struct us_statedict *sd, bool transpose)
{
	const uint64_t shape[2] = {7, 10};
	/* A 2x2 grid, uneven, listed out of offset order (as DCP lists ranks). */
	const uint64_t boxes[4][4] = {
		{4, 0, 3, 6}, {0, 0, 4, 6}, {0, 6, 4, 4}, {4, 6, 3, 4},
	};
	static int64_t tstrides[4][2];
	struct us_tensor *t = us_sd_add_tensor(sd, "grid", US_DT_I32, 2, shape,
					       4, "test", NULL);
	uint64_t at = 16;

	for (int i = 0; t && i < 4; i++) {
		struct us_chunk *c = &t->chunks[i];

		((uint64_t *)c->offsets)[0] = boxes[i][0];
		((uint64_t *)c->offsets)[1] = boxes[i][1];
		((uint64_t *)c->sizes)[0] = boxes[i][2];
		((uint64_t *)c->sizes)[1] = boxes[i][3];
		if (transpose && i == 2) {
			tstrides[i][0] = 1;
			tstrides[i][1] = (int64_t)boxes[i][2];
			c->src.strides = tstrides[i];
		}
		at = place_chunk(c, shape, 2, at, transpose && i == 2);
	}
	return t;
}

static void test_grid(void)
{
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = grid_tensor(sd, false);

	CHECK(t != NULL);
	if (t)
		check_all_ranges(t);
	us_sd_free(sd);
}

static void test_grid_transposed(void)
{
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = grid_tensor(sd, true);

	CHECK(t != NULL);
	if (t)
		check_all_ranges(t);
	us_sd_free(sd);
}

/* A chunk spanning whole trailing dims: runs merge across rows. */
static void test_merge_across_rows(void)
{
	const uint64_t shape[3] = {2, 3, 4};
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = us_sd_add_tensor(sd, "m", US_DT_I32, 3, shape, 2,
					       "test", NULL);
	unsigned char out[96];
	struct sink s = { out, 0 };
	uint64_t at = 0;

	CHECK(t != NULL);
	if (!t)
		goto out;
	for (int i = 0; i < 2; i++) {
		uint64_t *o = (uint64_t *)t->chunks[i].offsets;
		uint64_t *z = (uint64_t *)t->chunks[i].sizes;

		o[0] = (uint64_t)i; z[0] = 1; z[1] = 3; z[2] = 4;
		at = place_chunk(&t->chunks[i], shape, 3, at, false);
	}
	check_all_ranges(t);
	CHECK(us_plan_range(t, 0, 96, emit_copy, &s) == 0);
	CHECK(s.nops == 2); /* one run per chunk, not one per row */
out:
	us_sd_free(sd);
}

static void test_whole_and_scalar(void)
{
	const uint64_t shape[2] = {5, 6};
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = us_sd_add_tensor(sd, "w", US_DT_I32, 2, shape, 1,
					       "test", NULL);
	struct us_tensor *sc;
	unsigned char out[8];
	struct sink s = { out, 0 };

	CHECK(t != NULL);
	if (!t)
		goto out;
	memcpy((uint64_t *)t->chunks[0].sizes, shape, sizeof(shape));
	place_chunk(&t->chunks[0], shape, 2, 100, false);
	check_all_ranges(t);
	sc = us_sd_add_tensor(sd, "s", US_DT_I32, 0, NULL, 1, "test", NULL);
	CHECK(sc && sc->numel == 1 && sc->nbytes == 4);
	if (sc) {
		int32_t v = 0x01020304;

		sc->chunks[0].src.offset = 4000;
		memcpy(src_mem + 4000, &v, 4);
		CHECK(us_plan_range(sc, 1, 2, emit_copy, &s) == 0);
		CHECK(out[0] == 0x03 && out[1] == 0x02);
	}
out:
	us_sd_free(sd);
}

/* Bytes of @n segments, read back with pread; 0 when they equal @want. */
static int segs_equal(const struct us_seg *v, size_t n, const unsigned char *want)
{
	static unsigned char buf[1 << 16];
	size_t at = 0;

	for (size_t i = 0; i < n; i++) {
		if (v[i].fd < 0 || v[i].len > sizeof(buf) ||
		    pread(v[i].fd, buf, v[i].len, (off_t)v[i].off) != (ssize_t)v[i].len ||
		    memcmp(buf, want + at, v[i].len) != 0)
			return -1;
		at += v[i].len;
	}
	return 0;
}

/*
 * The zero-copy executor (map.c) on every range: either it declines
 * (overflow: short runs of a gather) or its segments hold exactly the bytes.
 * Returns the number of wrong answers.
 */
static int map_all_ranges(const struct us_statedict *sd,
			  const struct us_tensor *t, const unsigned char *expect)
{
	struct us_seg v[8];
	int bad = 0;

	for (uint64_t off = 0; off <= t->nbytes; off += 5) {
		for (uint64_t len = 1; off + len <= t->nbytes; len += 11) {
			struct us_segs segs = { .v = v, .cap = 8 };
			enum us_status rc = us_tensor_map(sd, t, &segs, len, off);

			if (rc != US_OK ||
			    (!segs.overflow && segs_equal(v, segs.n, expect + off) != 0))
				bad++;
		}
	}
	return bad;
}

/*
 * The CPU executor on the same grids, through a real file: short runs
 * (each element of the transposed chunk, each row piece of the others) are
 * gathered by source span (exec_cpu.c); the bytes must be the plan's.
 */
static void exec_all_ranges(bool transpose)
{
	static unsigned char expect[1 << 14], got[1 << 14];
	char path[] = "/tmp/us-test-plan-XXXXXX";
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = grid_tensor(sd, transpose);
	int fd = mkstemp(path), bad = 0;
	uint32_t idx = 0;

	CHECK(t != NULL && fd >= 0);
	if (!t || fd < 0)
		goto out;
	CHECK(write(fd, src_mem, sizeof(src_mem)) == (ssize_t)sizeof(src_mem));
	{
		struct us_err err = {0};

		CHECK(us_sd_open_file(sd, NULL, path, &idx, &err) == US_OK);
	}
	for (uint32_t i = 0; i < t->nchunks; i++)
		t->chunks[i].src.file = idx;
	for (uint64_t i = 0; i < t->numel; i++) {
		int32_t v = (int32_t)i;
		memcpy(expect + i * 4, &v, 4);
	}
	for (uint64_t off = 0; off <= t->nbytes; off += 5) {
		for (uint64_t len = 0; off + len <= t->nbytes; len += 11) {
			memset(got, 0xEE, len + 1);
			if (us_tensor_read(as, sd, t, got, len, off) != US_OK ||
			    memcmp(got, expect + off, len) != 0 || got[len] != 0xEE)
				bad++;
		}
	}
	CHECK(bad == 0);
	CHECK(map_all_ranges(sd, t, expect) == 0);
out:
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	us_sd_free(sd);
}

static void test_exec_gather(void)
{
	exec_all_ranges(false);
}

static void test_exec_gather_transposed(void)
{
	exec_all_ranges(true);
}

/* With a cache too small for the transposed chunk's span (tile.c), its
 * rows are served element by element: the same bytes. */
static void test_exec_transposed_uncached(void)
{
	CHECK(use_cache(16));
	exec_all_ranges(true);
	CHECK(use_cache(256u << 20));
}

/*
 * Two row chunks of 32 KiB: stored back to back they are one segment; with
 * a gap, two; presented as another dtype (--dtype), the read needs the
 * executor.
 */
static void test_map_segments(void)
{
	const uint64_t shape[2] = {2, 8192};
	char path[] = "/tmp/us-test-map-XXXXXX";
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = us_sd_add_tensor(sd, "rows", US_DT_I32, 2, shape,
					       2, "test", NULL);
	int fd = mkstemp(path);
	struct us_seg v[4];
	struct us_segs segs = { .v = v, .cap = 4 };
	uint32_t idx = 0;
	struct us_err err = {0};

	CHECK(t != NULL && fd >= 0);
	if (!t || fd < 0)
		goto out;
	for (uint32_t i = 0; i < 2; i++) {
		((uint64_t *)t->chunks[i].offsets)[0] = i;
		((uint64_t *)t->chunks[i].sizes)[0] = 1;
		((uint64_t *)t->chunks[i].sizes)[1] = 8192;
	}
	CHECK(write(fd, src_mem, sizeof(src_mem)) == (ssize_t)sizeof(src_mem));
	CHECK(us_sd_open_file(sd, NULL, path, &idx, &err) == US_OK);
	t->chunks[0].src.file = t->chunks[1].src.file = idx;
	t->chunks[0].src.offset = 0;
	t->chunks[1].src.offset = 32768;
	CHECK(us_tensor_map(sd, t, &segs, t->nbytes, 0) == US_OK &&
	      !segs.overflow && segs.n == 1 &&
	      v[0].len == t->nbytes && v[0].off == 0);
	t->chunks[1].src.offset = 32768 + 100;
	segs.n = 0;
	CHECK(us_tensor_map(sd, t, &segs, 40000, 100) == US_OK &&
	      !segs.overflow && segs.n == 2 &&
	      v[0].off == 100 && v[0].len == 32668 && v[1].off == 32868 &&
	      v[1].len == 40000 - 32668);
	t->dtype = US_DT_F16; /* a cast view of the stored i32... */
	segs.n = 0;
	CHECK(us_tensor_map(sd, t, &segs, 64, 0) == US_OK && segs.overflow);
	t->dtype = US_DT_I32;
out:
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	us_sd_free(sd);
}

int main(void)
{
	CHECK(use_cache(US_ASSEMBLER_CACHE_DEFAULT));
	RUN(test_grid);
	RUN(test_grid_transposed);
	RUN(test_merge_across_rows);
	RUN(test_whole_and_scalar);
	RUN(test_exec_gather);
	RUN(test_exec_gather_transposed);
	RUN(test_exec_transposed_uncached);
	RUN(test_map_segments);
	us_assembler_free(as);
	TEST_MAIN_END();
}
