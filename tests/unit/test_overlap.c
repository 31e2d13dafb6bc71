/*
 * test_overlap.c - overlapping chunk boxes (overlap.h): small sets pair by
 * pair, big grids on their cells, irregular sets by a sweep; and a tensor
 * of 100,000 chunks that finalizes (it used to take 5 * 10^9 box tests).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_fd.h"
#include "harness.h"
#include "model.h"
#include "overlap.h"
#include "tmpdir.h"

/* Chunks with room for @ndim dims each, from one allocation. */
struct boxes {
	struct us_chunk *c;
	uint64_t *dims;
	uint32_t n, ndim;
};

static void boxes_new(struct boxes *b, uint32_t n, uint32_t ndim)
{
	b->c = calloc(n, sizeof(*b->c));
	b->dims = calloc((size_t)n * 2 * (ndim ? ndim : 1), sizeof(*b->dims));
	b->n = n;
	b->ndim = ndim;
	for (uint32_t i = 0; b->c && b->dims && i < n; i++) {
		b->c[i].offsets = b->dims + (size_t)i * 2 * ndim;
		b->c[i].sizes = b->dims + (size_t)i * 2 * ndim + ndim;
	}
}

static void box_set(struct boxes *b, uint32_t i, uint32_t k, uint64_t off,
		    uint64_t size)
{
	((uint64_t *)b->c[i].offsets)[k] = off;
	((uint64_t *)b->c[i].sizes)[k] = size;
}

static void boxes_free(struct boxes *b)
{
	free(b->c);
	free(b->dims);
}

static enum us_overlap run(const struct boxes *b, uint32_t *x, uint32_t *y)
{
	*x = *y = UINT32_MAX;
	return us_chunks_overlap(b->ndim, b->c, b->n, x, y);
}

/* Few boxes: pair by pair, the first later box that overlaps an earlier. */
static void test_small(void)
{
	struct boxes b;
	uint32_t x, y;

	boxes_new(&b, 4, 2);
	box_set(&b, 0, 0, 0, 2); box_set(&b, 0, 1, 0, 2);
	box_set(&b, 1, 0, 2, 2); box_set(&b, 1, 1, 0, 2);
	box_set(&b, 2, 0, 0, 4); box_set(&b, 2, 1, 2, 2);
	box_set(&b, 3, 0, 9, 0); box_set(&b, 3, 1, 0, 9); /* empty */
	CHECK(run(&b, &x, &y) == US_OVERLAP_NONE);
	box_set(&b, 2, 0, 1, 3); box_set(&b, 2, 1, 1, 3); /* into 0 and 1 */
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x == 0 && y == 2);
	boxes_free(&b);

	boxes_new(&b, 2, 0); /* scalars: two non-empty chunks always overlap */
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x == 0 && y == 1);
	boxes_free(&b);
}

/* A 400 x 250 grid of uneven cells, listed out of order; then one box
 * grown by a row into its neighbour. */
static void grid2d(struct boxes *b)
{
	uint32_t i = 0;

	boxes_new(b, 400 * 250, 2);
	for (uint32_t r = 0; r < 400; r++)
		for (uint32_t c = 0; c < 250; c++, i++) {
			uint32_t at = (i * 7919u) % b->n; /* a permutation */

			box_set(b, at, 0, r * 3 + (r > 0), 3 + (r == 0));
			box_set(b, at, 1, c * 2, 2);
		}
}

static void test_grid_2d(void)
{
	struct boxes b;
	uint32_t x, y, g;

	grid2d(&b);
	CHECK(run(&b, &x, &y) == US_OVERLAP_NONE);
	for (g = 0; g < b.n; g++) /* the box at row 1, column 0 */
		if (b.c[g].offsets[0] == 4 && b.c[g].offsets[1] == 0)
			break;
	((uint64_t *)b.c[g].sizes)[0] += 1;
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x < y &&
	      (x == g || y == g));
	boxes_free(&b);
}

/* 50^3 cubes, and 100,000 rows of one dimension (FSDP's flat shards). */
static void test_grid_3d_and_rows(void)
{
	struct boxes b;
	uint32_t x, y, i = 0;

	boxes_new(&b, 50 * 50 * 50, 3);
	for (uint32_t p = 0; p < 50; p++)
		for (uint32_t q = 0; q < 50; q++)
			for (uint32_t r = 0; r < 50; r++, i++) {
				box_set(&b, i, 0, p, 1);
				box_set(&b, i, 1, q * 2, 2);
				box_set(&b, i, 2, r * 5, 5);
			}
	CHECK(run(&b, &x, &y) == US_OVERLAP_NONE);
	box_set(&b, 124999, 2, 244, 6); /* the last cube, one element early */
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x == 124998 && y == 124999);
	boxes_free(&b);

	boxes_new(&b, 100000, 1);
	for (i = 0; i < b.n; i++)
		box_set(&b, i, 0, (uint64_t)(b.n - 1 - i) * 10, 10);
	CHECK(run(&b, &x, &y) == US_OVERLAP_NONE);
	box_set(&b, 5, 0, (uint64_t)(b.n - 1 - 6) * 10 + 9, 10);
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x == 5 && y == 6);
	boxes_free(&b);
}

/* Rows split at a different column each: (rows/2)^2 grid cells, more than
 * the grid path allows, so the sweep decides. */
static void test_irregular(void)
{
	struct boxes b;
	uint32_t x, y;

	boxes_new(&b, 2 * 2000, 2);
	for (uint32_t r = 0; r < 2000; r++) {
		box_set(&b, 2 * r, 0, r, 1);
		box_set(&b, 2 * r, 1, 0, r + 1);
		box_set(&b, 2 * r + 1, 0, r, 1);
		box_set(&b, 2 * r + 1, 1, r + 1, 4000 - r - 1);
	}
	CHECK(run(&b, &x, &y) == US_OVERLAP_NONE);
	box_set(&b, 2 * 1500 + 1, 1, 1500, 2500); /* one column into its left */
	CHECK(run(&b, &x, &y) == US_OVERLAP_FOUND && x == 3000 && y == 3001);
	boxes_free(&b);
}

static uint64_t rnd(uint64_t *state, uint64_t n)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return (*state >> 33) % n;
}

/* A random guillotine partition of [0, 2^20)^ndim into b->n boxes: cut a
 * random box at a random place, again and again (irregular cuts). */
static void partition(struct boxes *b, uint64_t *state)
{
	for (uint32_t k = 0; k < b->ndim; k++)
		box_set(b, 0, k, 0, 1u << 20);
	for (uint32_t n = 1; n < b->n; n++) {
		uint32_t i = (uint32_t)rnd(state, n), k = (uint32_t)rnd(state, b->ndim);
		uint64_t off = b->c[i].offsets[k], size = b->c[i].sizes[k], cut;

		if (size < 2) {
			n--; /* too thin here: cut another */
			continue;
		}
		cut = 1 + rnd(state, size - 1);
		for (uint32_t j = 0; j < b->ndim; j++)
			box_set(b, n, j, b->c[i].offsets[j], b->c[i].sizes[j]);
		box_set(b, i, k, off, cut);
		box_set(b, n, k, off + cut, size - cut);
	}
}

static bool overlap_pair(const struct boxes *b, uint32_t x, uint32_t y)
{
	for (uint32_t k = 0; k < b->ndim; k++)
		if (b->c[x].offsets[k] >= b->c[y].offsets[k] + b->c[y].sizes[k] ||
		    b->c[y].offsets[k] >= b->c[x].offsets[k] + b->c[x].sizes[k])
			return false;
	return true;
}

/* Random partitions, small (grid cells) and large (the sweep): none
 * overlap; grown by one along one dimension, the pair named overlaps. */
static void test_random(void)
{
	uint64_t state = 42;
	int bad = 0;

	for (int trial = 0; trial < 60; trial++) {
		uint32_t n = trial < 50 ? 33 + (uint32_t)rnd(&state, 100) : 3000;
		struct boxes b;
		uint32_t x, y, i, k;

		boxes_new(&b, n, 1 + (uint32_t)rnd(&state, 3));
		partition(&b, &state);
		bad += run(&b, &x, &y) != US_OVERLAP_NONE;
		i = (uint32_t)rnd(&state, n);
		k = (uint32_t)rnd(&state, b.ndim);
		if (b.c[i].offsets[k] > 0) /* grow into the neighbour below */
			((uint64_t *)b.c[i].offsets)[k]--;
		((uint64_t *)b.c[i].sizes)[k]++;
		if (b.c[i].offsets[k] + b.c[i].sizes[k] <= (1u << 20) ||
		    b.c[i].offsets[k] > 0)
			bad += run(&b, &x, &y) != US_OVERLAP_FOUND ||
			       x >= y || !overlap_pair(&b, x, y);
		boxes_free(&b);
	}
	CHECK(bad == 0);
}

/* A [400, 250] I32 tensor in 100,000 chunks of 1 x 1, all read from one
 * 4-byte file: it finalizes; with two chunks on one element it is refused. */
static enum us_status finalize_grid(bool overlap, struct us_err *err)
{
	const uint64_t shape[2] = { 400, 250 };
	struct us_statedict *sd = us_sd_new();
	const char *dir = tmpdir_new();
	struct us_tensor *t;
	enum us_status st = US_E_NOMEM;
	uint32_t file;
	int dirfd;

	tmpdir_write(dir, "w.bin", "\1\2\3\4", 4);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sd && us_sd_open_file(sd, US_TEST_DIR(dirfd), "w.bin", &file, err) == US_OK &&
	    (t = us_sd_add_tensor(sd, "w", US_DT_I32, 2, shape, 100000,
				  "w.bin", err))) {
		for (uint32_t i = 0; i < t->nchunks; i++) {
			struct us_chunk *c = &t->chunks[i];

			((uint64_t *)c->offsets)[0] = i / 250;
			((uint64_t *)c->offsets)[1] = i % 250;
			((uint64_t *)c->sizes)[0] = 1;
			((uint64_t *)c->sizes)[1] = 1;
			c->src.file = file;
			c->src.dtype = US_DT_I32;
		}
		if (overlap) { /* chunk 99999 on chunk 50000's element */
			((uint64_t *)t->chunks[99999].offsets)[0] = 200;
			((uint64_t *)t->chunks[99999].offsets)[1] = 0;
		}
		st = us_sd_finalize(sd, err);
	}
	us_sd_free(sd);
	if (dirfd >= 0)
		close(dirfd);
	tmpdir_rm(dir);
	return st;
}

static void test_finalize_big_grid(void)
{
	struct us_err err = { 0 };

	CHECK(finalize_grid(false, &err) == US_OK);
	CHECK(finalize_grid(true, &err) == US_E_FORMAT);
	CHECK(strstr(err.msg, "chunks 50000 and 99999 overlap") != NULL);
}

int main(void)
{
	RUN(test_small);
	RUN(test_grid_2d);
	RUN(test_grid_3d_and_rows);
	RUN(test_irregular);
	RUN(test_random);
	RUN(test_finalize_big_grid);
	TEST_MAIN_END();
}
