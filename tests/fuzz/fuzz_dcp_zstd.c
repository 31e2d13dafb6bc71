/*
 * fuzz_dcp_zstd.c - libFuzzer target: the zstd frame walk
 * (us_zframes_walk, lib/codec/zframes.c), the multi-frame stream
 * (lib/codec/zstream.c) and the head walker of a zstd DCP item
 * (us_dcp_zstd_item, lib/source/dcp/dcp_zstd.c).
 *
 * The low 2 bits of the first input byte pick the mode:
 *   0: the rest is the item as stored: zstd frames (hostile frames,
 *      truncation, trailing bytes);
 *   1: the rest is the decoded torch.save archive, which the target
 *      compresses into one frame first -- so the fuzzer works on the zip
 *      local headers, data.pkl and data descriptors the walker parses,
 *      not on zstd's entropy coding;
 *   2: the rest is zstd frames, walked and decoded whole: the walk and the
 *      decoder must agree (below);
 *   3: like 1, split into two frames and ended with pyzstd's empty frame.
 * A walk that succeeds must describe a storage record inside what it says
 * reads need.  In mode 2: what the decoder reads whole, the walk accepts
 * (it never refuses what torch reads; a window over 128 MiB, legacy zstd
 * formats and a declared content size that its blocks cannot decode to
 * are refused on purpose), and what both accept decodes to a size inside
 * the walk's bounds (unless a frame declares its size: libzstd 1.5.4's
 * streaming decoder does not check it, its one-shot decoder does).
 */
#include "fuzz_util.h"

#include <zstd.h>

#include "codec/zframes.h"
#include "codec/zstream.h"
#include "source/dcp/dcp_zstd.h"

/* Decoding a hostile item could expand without end (RLE blocks): past
 * this, the mode-2 oracle gives up. */
#define DECODE_MAX (8u << 20)

static void walk_item(const void *item, size_t len)
{
	struct us_dcp_zitem zi;
	struct us_arena a;
	struct us_err err = { .msg = "" };
	int fd = fuzz_memfd(item, len);
	struct us_file f = { .fd = fd };
	enum us_status st;

	us_arena_init(&a);
	st = us_dcp_zstd_item(&f, 0, len, &a, &zi, &err);
	if (st == US_OK) {
		if (zi.data + zi.bytes + US_DCP_ZSTD_DESC != zi.served ||
		    zi.first < zi.data || zi.bad_at != UINT64_MAX)
			abort();
	} else if (!fuzz_refusal_ok(st, &err)) {
		abort();
	} else if (zi.bad_at != UINT64_MAX && zi.bad_at > len) {
		abort(); /* damage reported outside the item */
	}
	us_arena_free(&a);
	us_arena_init(&a);
	{
		struct us_pk *root;

		err.msg[0] = '\0';
		st = us_dcp_zstd_value(&f, 0, len, &a, &root, &err);
		if (st != US_OK && !fuzz_refusal_ok(st, &err))
			abort();
	}
	us_arena_free(&a);
	close(fd);
}

/* Decode the whole item: its size, -1 if it fails, -2 if too large. */
static int64_t decode_all(const struct us_file *f, size_t len)
{
	static unsigned char buf[4096]; /* small: no single-pass shortcut */
	struct us_zstream *z = us_zstream_open(f, 0, len);
	uint64_t n = 0;

	if (!z)
		abort();
	while (!us_zstream_done(z) && n <= DECODE_MAX) {
		size_t got;

		if (us_zstream_read(z, buf, sizeof(buf), &got) != US_OK) {
			us_zstream_close(z);
			return -1;
		}
		n += (uint64_t)got;
	}
	us_zstream_close(z);
	return n > DECODE_MAX ? -2 : (int64_t)n;
}

/* Refusals the decoder may not share: on purpose. */
static bool deliberate(const uint8_t *item, size_t len, uint64_t at,
		       const char *why)
{
	uint32_t m = 0;

	if (strstr(why, "window") || strstr(why, "declared content size"))
		return true;
	if (at + 4 <= len)
		m = (uint32_t)item[at] | (uint32_t)item[at + 1] << 8 |
		    (uint32_t)item[at + 2] << 16 | (uint32_t)item[at + 3] << 24;
	return m >= 0xFD2FB51Eu && m <= 0xFD2FB527u; /* zstd v0.1-v0.7 */
}

static void walk_frames(const uint8_t *item, size_t len)
{
	struct us_zframes zf;
	struct us_err err = { .msg = "" };
	int fd = fuzz_memfd(item, len);
	struct us_file f = { .fd = fd };
	enum us_status rc = us_zframes_walk(&f, 0, len, &zf, &err);
	const char *why = err.msg;
	int64_t n;

	if (rc < 0 && (!fuzz_refusal_ok(rc, &err) || zf.bad_at > len))
		abort();
	if (rc == 0 && (zf.min_size > zf.max_size || zf.bad_at != 0))
		abort();
	if (rc == 0 && zf.min_size > DECODE_MAX) {
		close(fd);
		return;
	}
	n = decode_all(&f, len);
	if (n >= 0 && rc < 0 && !deliberate(item, len, zf.bad_at, why))
		abort(); /* the walk refused what decodes */
	if (n >= 0 && rc == 0 && zf.sized == 0 &&
	    ((uint64_t)n < zf.min_size || (uint64_t)n > zf.max_size))
		abort(); /* decoded outside the walk's bounds */
	close(fd);
}

static ZSTD_CCtx *cctx(void)
{
	/* One compression context for the whole run: ZSTD_compress() would
	 * allocate and clear a fresh one per input, which cost more than
	 * the walk itself. */
	static ZSTD_CCtx *c;

	if (!c)
		c = ZSTD_createCCtx();
	if (!c)
		abort();
	return c;
}

static size_t compress_into(unsigned char *dst, size_t cap, const uint8_t *src,
			    size_t n)
{
	size_t r = ZSTD_compressCCtx(cctx(), dst, cap, src, n, 1);

	if (ZSTD_isError(r))
		abort();
	return r;
}

/* The archive compressed: one frame, or (@split) two frames and the
 * empty frame of pyzstd's second flush. */
static void compressed_archive(const uint8_t *src, size_t n, bool split)
{
	static const unsigned char empty[9] = { 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0, 1, 0, 0 };
	size_t cap = 2 * ZSTD_compressBound(n) + sizeof(empty), k = n / 2, len;
	unsigned char *frames = malloc(cap);

	if (!frames)
		abort();
	if (!split) {
		len = compress_into(frames, cap, src, n);
	} else {
		len = compress_into(frames, cap, src, k);
		len += compress_into(frames + len, cap - len, src + k, n - k);
		memcpy(frames + len, empty, sizeof(empty));
		len += sizeof(empty);
	}
	walk_item(frames, len);
	free(frames);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	switch (data[0] & 3) {
	case 0:
		walk_item(data + 1, size - 1);
		break;
	case 1:
		compressed_archive(data + 1, size - 1, false);
		break;
	case 2:
		walk_frames(data + 1, size - 1);
		break;
	default:
		compressed_archive(data + 1, size - 1, true);
		break;
	}
	return 0;
}
