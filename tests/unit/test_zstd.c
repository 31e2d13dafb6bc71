/*
 * test_zstd.c - the zstd frame walk (codec/zframes.c) and the multi-frame
 * stream (codec/zstream.c): what every writer writes is accepted and
 * decodes to the concatenation of its frames; structural damage is
 * refused by the walk, and the stream never returns bytes past it.
 *
 * Frames are made by hand (raw and RLE blocks need no entropy coder), and
 * by libzstd for real compressed blocks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <zstd.h>

#include "codec/zframes.h"
#include "codec/zstream.h"
#include "file_fd.h"
#include "harness.h"

/* ---- building items ------------------------------------------------------ */

struct buf {
	unsigned char v[1 << 20];
	size_t n;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > sizeof(b->v))
		abort();
	memcpy(b->v + b->n, p, n);
	b->n += n;
}

static void put_le(struct buf *b, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		unsigned char c = (unsigned char)(v >> (8 * i));

		put(b, &c, 1);
	}
}

/* A single-segment frame header declaring @size (4-byte size field). */
static void frame_hdr(struct buf *b, uint32_t size, unsigned char extra_bits)
{
	put_le(b, 0xFD2FB528u, 4);
	put_le(b, 0x20u | (2u << 6) | extra_bits, 1); /* single, FCS 4 bytes */
	put_le(b, size, 4);
}

static void raw_block(struct buf *b, const char *s, bool last)
{
	size_t n = strlen(s);

	put_le(b, (uint32_t)(n << 3) | last, 3);
	put(b, s, n);
}

/* The frame pyzstd's second flush writes: single segment, size 0, one
 * empty last raw block. */
static void empty_frame(struct buf *b)
{
	static const unsigned char f[9] = { 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0, 1, 0, 0 };

	put(b, f, sizeof(f));
}

static void skippable(struct buf *b, unsigned nibble, const char *s)
{
	put_le(b, 0x184D2A50u | nibble, 4);
	put_le(b, strlen(s), 4);
	put(b, s, strlen(s));
}

static void text_frame(struct buf *b, const char *s)
{
	frame_hdr(b, (uint32_t)strlen(s), 0);
	raw_block(b, s, true);
}

static int memfd(const struct buf *b)
{
	int fd = memfd_create("zstd", MFD_CLOEXEC);

	if (fd < 0 || (b->n && write(fd, b->v, b->n) != (ssize_t)b->n))
		abort();
	return fd;
}

/* Walk @b; returns the walk's result, *@why its reason. */
static enum us_status walk(const struct buf *b, struct us_zframes *zf,
			   const char **why)
{
	static struct us_err err;
	int fd = memfd(b);
	struct us_file f;
	enum us_status rc = us_zframes_walk(us_test_file(&f, fd), 0, b->n, zf,
					    &err);

	*why = rc == US_OK ? NULL : err.msg;
	close(fd);
	return rc;
}

/* Decode @b whole with us_zstream; returns the bytes, or -1 for frames
 * that are corrupt or truncated (US_E_FORMAT), -2 for any other failure. */
static ssize_t decode(const struct buf *b, void *out, size_t cap)
{
	int fd = memfd(b);
	struct us_file f;
	struct us_zstream *z = us_zstream_open(us_test_file(&f, fd), 0, b->n);
	size_t got = 0;
	enum us_status rc = us_zstream_read(z, out, cap, &got);
	ssize_t n = rc == US_OK ? (ssize_t)got : rc == US_E_FORMAT ? -1 : -2;

	if (n >= 0 && !us_zstream_done(z))
		n = -1000; /* the item did not end within cap */
	us_zstream_close(z);
	close(fd);
	return n;
}

static bool refused(const struct buf *b, const char *word)
{
	struct us_zframes zf;
	const char *why;

	return walk(b, &zf, &why) == US_E_FORMAT && why && strstr(why, word);
}

/* ---- what writers write --------------------------------------------------- */

static void test_concatenated_frames(void)
{
	static struct buf b;
	struct us_zframes zf;
	const char *why;
	char out[64];

	b.n = 0;
	text_frame(&b, "hello ");
	empty_frame(&b);           /* pyzstd's second flush */
	skippable(&b, 0xE, "xyz"); /* pzstd, seekable tables: skipped */
	text_frame(&b, "world");
	skippable(&b, 0x0, "");
	CHECK(walk(&b, &zf, &why) == 0);
	CHECK(zf.frames == 3 && zf.sized == 3 && zf.skippable == 2 && zf.blocks == 3);
	CHECK(zf.min_size == 11 && zf.max_size == 11);
	CHECK(decode(&b, out, sizeof(out)) == 11 && !memcmp(out, "hello world", 11));
}

/* libzstd's streaming compressor, as zstandard and pyzstd call it: no
 * content size, blocks of real compressed data. */
static size_t compress_stream(struct buf *b, const void *src, size_t n, int level)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_inBuffer in = { src, n, 0 };
	ZSTD_outBuffer out = { b->v + b->n, sizeof(b->v) - b->n, 0 };
	size_t rem;

	ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
	do
		rem = ZSTD_compressStream2(c, &out, &in, ZSTD_e_end);
	while (rem && !ZSTD_isError(rem));
	if (ZSTD_isError(rem))
		abort();
	ZSTD_freeCCtx(c);
	b->n += out.pos;
	return out.pos;
}

static void test_libzstd_frames(void)
{
	static struct buf b;
	static unsigned char src[600000], out[2 * sizeof(src) + 1];
	struct us_zframes zf;
	const char *why;
	size_t first;

	for (size_t i = 0; i < sizeof(src); i++) /* compressible, not trivially */
		src[i] = (unsigned char)((i * 2654435761u) >> 13) % 7;
	b.n = 0;
	first = compress_stream(&b, src, sizeof(src), 3);
	CHECK(walk(&b, &zf, &why) == 0 && zf.frames == 1);
	CHECK(zf.min_size <= sizeof(src) && sizeof(src) <= zf.max_size);
	CHECK(zf.blocks >= sizeof(src) / (128 << 10));
	/* two frames of it, then pyzstd's empty frame */
	compress_stream(&b, src, sizeof(src), 1);
	empty_frame(&b);
	CHECK(walk(&b, &zf, &why) == 0 && zf.frames == 3);
	CHECK(zf.max_size >= 2 * sizeof(src));
	CHECK(decode(&b, out, sizeof(out)) == 2 * sizeof(src));
	CHECK(!memcmp(out, src, sizeof(src)) && !memcmp(out + sizeof(src), src, sizeof(src)));
	/* cut inside the second frame: refused, and the stream says corrupt (US_E_FORMAT) */
	b.n = first + 100;
	CHECK(refused(&b, "truncated"));
	CHECK(decode(&b, out, sizeof(out)) == -1);
}

/* ---- damage the walk refuses --------------------------------------------- */

static void test_damage(void)
{
	static struct buf b;
	char out[64];

	b.n = 0; /* trailing bytes: too short for a magic, or not one */
	text_frame(&b, "abc");
	put(&b, "\0\0", 2);
	CHECK(refused(&b, "after its last frame"));
	CHECK(decode(&b, out, sizeof(out)) == -1);
	b.n -= 2;
	put(&b, "garbage!", 8);
	CHECK(refused(&b, "after its last frame"));
	b.n = 0;
	put(&b, "PK\3\4", 4);
	CHECK(refused(&b, "does not start with a zstd frame"));

	b.n = 0; /* reserved bit of the frame header descriptor */
	frame_hdr(&b, 3, 0x08);
	raw_block(&b, "abc", true);
	CHECK(refused(&b, "reserved bit"));

	b.n = 0; /* a dictionary id */
	put_le(&b, 0xFD2FB528u, 4);
	put_le(&b, 0x20u | 1u, 1);
	put_le(&b, 7, 1); /* dictionary 7 */
	put_le(&b, 3, 1); /* size 3 */
	raw_block(&b, "abc", true);
	CHECK(refused(&b, "dictionary"));

	b.n = 0; /* a window of 2^28 */
	put_le(&b, 0xFD2FB528u, 4);
	put_le(&b, 0, 1);
	put_le(&b, (28 - 10) << 3, 1);
	raw_block(&b, "abc", true);
	CHECK(refused(&b, "window"));

	b.n = 0; /* the reserved block type */
	frame_hdr(&b, 3, 0);
	put_le(&b, (3u << 3) | (3u << 1) | 1u, 3);
	put(&b, "abc", 3);
	CHECK(refused(&b, "reserved type"));

	b.n = 0; /* a block longer than the frame's window (its declared size) */
	frame_hdr(&b, 3, 0);
	raw_block(&b, "abcd", true);
	CHECK(refused(&b, "larger than its frame allows"));

	b.n = 0; /* declared size 5, blocks of 3 */
	frame_hdr(&b, 5, 0);
	raw_block(&b, "abc", true);
	CHECK(refused(&b, "declared content size"));

	b.n = 0; /* no last block before the item ends */
	frame_hdr(&b, 6, 0);
	raw_block(&b, "abc", false);
	CHECK(refused(&b, "truncated"));

	b.n = 0; /* a checksum flag, and no room for the checksum */
	frame_hdr(&b, 3, 0x04);
	raw_block(&b, "abc", true);
	put(&b, "\1\2", 2);
	CHECK(refused(&b, "truncated"));

	b.n = 0; /* a skippable frame longer than the item */
	put_le(&b, 0x184D2A5Au, 4);
	put_le(&b, 1000, 4);
	CHECK(refused(&b, "truncated"));

	b.n = 0; /* a compressed block of one byte */
	frame_hdr(&b, 3, 0);
	put_le(&b, (1u << 3) | (2u << 1) | 1u, 3);
	put(&b, "a", 1);
	CHECK(refused(&b, "compressed block too short"));
}

/* RLE blocks: one stored byte, repeated by the header's size. */
static void test_rle(void)
{
	static struct buf b;
	struct us_zframes zf;
	const char *why;
	char out[64];

	b.n = 0;
	frame_hdr(&b, 40, 0);
	put_le(&b, (40u << 3) | (1u << 1) | 1u, 3);
	put(&b, "z", 1);
	CHECK(walk(&b, &zf, &why) == 0 && zf.min_size == 40 && zf.max_size == 40);
	CHECK(decode(&b, out, sizeof(out)) == 40 && out[0] == 'z' && out[39] == 'z');
}

int main(void)
{
	RUN(test_concatenated_frames);
	RUN(test_libzstd_frames);
	RUN(test_damage);
	RUN(test_rle);
	TEST_MAIN_END();
}
