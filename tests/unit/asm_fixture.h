/*
 * asm_fixture.h - state dicts over one scratch file, for the tests of the
 * executors (test_exec.c, test_map.c, test_assembler.c).
 *
 * Tensors are int32 whose element at linear index i holds i, so the bytes
 * every read must produce are known without a second implementation: byte
 * b of a tensor is byte b % 4 of the int32 b / 4.  A chunk's elements are
 * placed in the file image where its extent (offset, strides) says.
 */
#ifndef US_ASM_FIXTURE_H
#define US_ASM_FIXTURE_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_fd.h"
#include "assemble/assemble.h"
#include "model.h"
#include "tmpdir.h"

#define FX_FILE_MAX (1u << 20)

struct fx {
	const char *dir;
	struct us_statedict *sd;
	uint32_t file;                    /* index of "shard.bin" */
	unsigned char img[FX_FILE_MAX];   /* the file, as written */
	size_t len;                       /* bytes of img written */
};

/* The byte @b of a tensor built by fx_place: int32 i at index i. */
static inline unsigned char fx_byte(uint64_t b)
{
	int32_t v = (int32_t)(b / 4);

	return ((const unsigned char *)&v)[b % 4];
}

/* A new tensor @name of @nchunks chunks, int32 of @shape (@ndim dims). */
static inline struct us_tensor *fx_tensor(struct fx *x, const char *name,
					  uint32_t ndim, const uint64_t *shape,
					  uint32_t nchunks)
{
	return us_sd_add_tensor(x->sd, name, US_DT_I32, ndim, shape, nchunks,
				"test", NULL);
}

/*
 * Chunk @ci of @t is the box (@offs, @sizes); its elements go into the file
 * image at byte @at with element strides @strides (NULL: row-major over the
 * box).  Returns the first byte past the elements, plus a gap of 12 so that
 * a misplaced read shows.
 */
static inline uint64_t fx_place(struct fx *x, struct us_tensor *t, uint32_t ci,
				const uint64_t *offs, const uint64_t *sizes,
				const int64_t *strides, uint64_t at)
{
	struct us_chunk *c = &t->chunks[ci];
	uint64_t n = 1, last = 0;

	for (uint32_t k = 0; k < t->ndim; k++) {
		((uint64_t *)c->offsets)[k] = offs[k];
		((uint64_t *)c->sizes)[k] = sizes[k];
		n *= sizes[k];
	}
	c->src.file = x->file;
	c->src.offset = at;
	c->src.strides = strides;
	for (uint64_t e = 0; e < n; e++) {
		uint64_t rem = e, lin = 0, pos = 0, row = 1, idx[8];
		int32_t v;

		for (uint32_t k = t->ndim; k-- > 0;) {
			idx[k] = rem % sizes[k]; /* e is row-major in the box */
			rem /= sizes[k];
			pos += idx[k] * (strides ? (uint64_t)strides[k] : row);
			row *= sizes[k];
		}
		for (uint32_t k = 0; k < t->ndim; k++)
			lin = lin * t->shape[k] + offs[k] + idx[k];
		v = (int32_t)lin;
		memcpy(x->img + at + pos * 4, &v, 4);
		if (pos > last)
			last = pos;
	}
	return at + (last + 1) * 4 + 12;
}

/* Start a state dict; fx_write then writes the image and opens the file. */
static inline bool fx_begin(struct fx *x)
{
	memset(x->img, 0xA5, sizeof(x->img));
	x->len = 0;
	x->dir = tmpdir_new();
	x->sd = us_sd_new();
	return x->dir && x->sd;
}

/* Write img[0, @len) as the file and point every chunk at it. */
static inline bool fx_write(struct fx *x, size_t len)
{
	struct us_err err = {0};
	int dfd;
	bool ok;

	x->len = len;
	if (tmpdir_write(x->dir, "shard.bin", x->img, len) < 0)
		return false;
	dfd = open(x->dir, O_RDONLY | O_DIRECTORY);
	if (dfd < 0)
		return false;
	ok = us_sd_open_file(x->sd, US_TEST_DIR(dfd), "shard.bin", &x->file, &err) == US_OK;
	close(dfd);
	for (size_t i = 0; ok && i < x->sd->ntensors; i++)
		for (uint32_t c = 0; c < x->sd->tensors[i].nchunks; c++)
			x->sd->tensors[i].chunks[c].src.file = x->file;
	return ok;
}

static inline void fx_end(struct fx *x)
{
	us_sd_free(x->sd);
	if (x->dir)
		tmpdir_rm(x->dir);
}

/* The path of the fixture's file, for changing it behind the reader. */
static inline const char *fx_path(const struct fx *x)
{
	static char path[4200];

	snprintf(path, sizeof(path), "%s/shard.bin", x->dir);
	return path;
}

/* Read [@off, @off + @len) of @t through @as into @got and compare with
 * fx_byte; also that nothing past @len was written. */
static inline bool fx_read_into(struct us_assembler *as, const struct fx *x,
				const struct us_tensor *t, uint64_t off,
				uint64_t len, unsigned char *got)
{
	memset(got, 0xEE, len + 1);
	if (us_tensor_read(as, x->sd, t, got, len, off) != US_OK)
		return false;
	for (uint64_t b = 0; b < len; b++)
		if (got[b] != fx_byte(off + b))
			return false;
	return got[len] == 0xEE;
}

static inline bool fx_read_ok(struct us_assembler *as, const struct fx *x,
			      const struct us_tensor *t, uint64_t off,
			      uint64_t len)
{
	static unsigned char got[FX_FILE_MAX + 1];

	return fx_read_into(as, x, t, off, len, got);
}

/* The same from any thread: a buffer of its own. */
static inline bool fx_read_ok_mt(struct us_assembler *as, const struct fx *x,
				 const struct us_tensor *t, uint64_t off,
				 uint64_t len)
{
	unsigned char *got = malloc(len + 1);
	bool ok = got && fx_read_into(as, x, t, off, len, got);

	free(got);
	return ok;
}

#endif /* US_ASM_FIXTURE_H */
