/*
 * test_deepspeed.c - the flat range -> N-D box decomposition DeepSpeed's
 * flat partitions need (lib/source/deepspeed/ds_flat.h): the boxes of [a, b) tile
 * exactly the elements a..b-1, in order, each contiguous, at most 2N-1 of
 * them; and pieces that cross segments point at the right bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "source/deepspeed/ds_flat.h"

/* The flat index of @idx in a row-major tensor of @shape. */
static uint64_t flat_of(uint32_t ndim, const uint64_t *shape, const uint64_t *idx)
{
	uint64_t f = 0;

	for (uint32_t k = 0; k < ndim; k++)
		f = f * shape[k] + idx[k];
	return f;
}

/* Walk @x's elements row-major; each must be the next expected one. */
static int box_covers(uint32_t ndim, const uint64_t *shape,
		      const struct us_flat_box *x, uint64_t *expect)
{
	uint64_t idx[US_MAX_NDIM], vol = 1;

	for (uint32_t k = 0; k < ndim; k++)
		vol *= x->sizes[k];
	if (flat_of(ndim, shape, x->offsets) != x->flat || x->flat != *expect)
		return 0;
	for (uint64_t e = 0; e < vol; e++) {
		uint64_t r = e;

		for (uint32_t k = ndim; k-- > 0;) {
			idx[k] = x->offsets[k] + r % x->sizes[k];
			r /= x->sizes[k];
		}
		if (flat_of(ndim, shape, idx) != (*expect)++)
			return 0;
	}
	return 1;
}

static void check_range(uint32_t ndim, const uint64_t *shape, uint64_t a,
			uint64_t b)
{
	struct us_flat_box box[US_FLAT_MAX_BOXES];
	uint32_t n = us_flat_boxes(ndim, shape, a, b, box);
	uint64_t expect = a;
	int ok = 1;

	for (uint32_t i = 0; i < n; i++)
		ok &= box_covers(ndim, shape, &box[i], &expect);
	CHECK(ok);
	CHECK(expect == b || (ndim == 0 && a < b));
	CHECK(a == b ? n == 0 : n >= 1 && n <= (ndim ? 2 * ndim - 1 : 1));
}

static void test_exhaustive_small(void)
{
	static const uint64_t shapes[][4] = {
		{7}, {3, 5}, {4, 1, 3}, {2, 3, 4, 2}, {1, 1, 1, 5}, {5, 4},
	};
	static const uint32_t nd[] = {1, 2, 3, 4, 4, 2};

	for (size_t s = 0; s < sizeof(nd) / sizeof(*nd); s++) {
		uint64_t numel = 1;

		for (uint32_t k = 0; k < nd[s]; k++)
			numel *= shapes[s][k];
		for (uint64_t a = 0; a <= numel; a++)
			for (uint64_t b = a; b <= numel; b++)
				check_range(nd[s], shapes[s], a, b);
	}
}

static void test_worst_case_count(void)
{
	static const uint64_t shape[3] = {4, 4, 4};
	struct us_flat_box box[US_FLAT_MAX_BOXES];

	/* (0,1,1) .. (3,2,3): head 2 boxes, middle 1, tail 2. */
	CHECK(us_flat_boxes(3, shape, 5, 59, box) == 5);
	CHECK(us_flat_boxes(3, shape, 0, 64, box) == 1);
	CHECK(box[0].sizes[0] == 4 && box[0].sizes[2] == 4);
	CHECK(us_flat_boxes(3, shape, 16, 32, box) == 1);
	CHECK(box[0].offsets[0] == 1 && box[0].sizes[0] == 1);
}

static void test_scalar_and_empty(void)
{
	struct us_flat_box box[US_FLAT_MAX_BOXES];
	static const uint64_t z[2] = {0, 3};

	CHECK(us_flat_boxes(0, NULL, 0, 1, box) == 1);
	CHECK(us_flat_boxes(2, z, 0, 0, box) == 0);
}

/* A [3, 4] f32 tensor whose 12 elements lie at vector positions 5..16 of
 * two segments of 7 and 20 elements in two files. */
static void test_place_across_segments(void)
{
	static const uint64_t shape[2] = {3, 4};
	struct us_flat_seg segs[2] = {
		{ .file = 0, .offset = 64, .numel = 7 },
		{ .file = 1, .offset = 128, .numel = 20 },
	};
	struct us_flat_vec v = { segs, 2, 27, US_DT_F32 };
	struct us_chunk ch[8];
	uint64_t offs[8][2], sizes[8][2];
	struct us_tensor t = { .ndim = 2, .shape = shape, .numel = 12,
			       .dtype = US_DT_F32, .chunks = ch };
	uint32_t n = us_flat_count(&t, &v, 5, 12, 0), next = 0;

	memset(ch, 0, sizeof(ch));
	for (int i = 0; i < 8; i++) {
		ch[i].offsets = offs[i];
		ch[i].sizes = sizes[i];
	}
	/* elements 0,1 in file 0; 2,3 (row 0 tail) then rows 1-2 in file 1 */
	CHECK(n == 3);
	us_flat_place(&t, &next, &v, 5, 12, 0);
	CHECK(next == 3);
	CHECK(ch[0].src.file == 0 && ch[0].src.offset == 64 + 5 * 4);
	CHECK(offs[0][0] == 0 && offs[0][1] == 0 && sizes[0][1] == 2);
	CHECK(ch[1].src.file == 1 && ch[1].src.offset == 128);
	CHECK(offs[1][1] == 2 && sizes[1][1] == 2);
	CHECK(ch[2].src.file == 1 && ch[2].src.offset == 128 + 2 * 4);
	CHECK(offs[2][0] == 1 && sizes[2][0] == 2 && sizes[2][1] == 4);
}

int main(void)
{
	RUN(test_exhaustive_small);
	RUN(test_worst_case_count);
	RUN(test_scalar_and_empty);
	RUN(test_place_across_segments);
	TEST_MAIN_END();
}
