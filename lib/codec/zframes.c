/* zframes.c - walk zstd frame and block headers (RFC 8878, section 3.1). */
#include "zframes.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

#include "../io.h"
#include "le.h"
#include "zstream.h"

#define MAGIC_ZSTD 0xFD2FB528u
#define MAGIC_SKIP 0x184D2A50u /* skippable: any value of the low 4 bits */
#define MAGIC_SKIP_MASK 0xFFFFFFF0u
#define FHD_SINGLE 0x20u   /* single segment: no window descriptor */
#define FHD_RESERVED 0x08u /* must be 0 (a decoder must check it) */
#define FHD_CHECKSUM 0x04u /* a 4-byte checksum follows the last block */
#define BLOCK_MAX (128u << 10)
#define BLOCK_HDR 3u
#define CHECKSUM 4u
#define FRAME_HDR_MAX 18u /* magic 4, descriptor 1, window 1, dict 4, size 8 */
#define WINDOW_MAX (1ull << US_ZSTREAM_WINDOWLOG_MAX)

enum block_type { BT_RAW, BT_RLE, BT_COMPRESSED, BT_RESERVED };

struct walk {
	const struct us_file *f;
	uint64_t base, end; /* the item, as file offsets */
	uint64_t pos;       /* the next header, as a file offset */
	struct us_zframes *out;
	struct us_err *err;
};

/* What a frame header says. */
struct fhdr {
	uint64_t window;  /* bytes of history the decoder keeps */
	uint64_t size;    /* declared content size, when has_size */
	bool has_size, checksum;
};

/* Damage at file offset @at: the frames are malformed. */
static enum us_status fail(struct walk *w, uint64_t at, const char *why)
{
	w->out->bad_at = at - w->base;
	return us_err_reason(w->err, US_E_FORMAT, "%s", why);
}

/* The @n bytes at w->pos; a frame that needs them past the item's end is
 * truncated. */
static enum us_status get(struct walk *w, unsigned char *buf, size_t n)
{
	if (n > w->end - w->pos)
		return fail(w, w->pos, "its zstd data ends inside a frame "
				       "(truncated)");
	if (us_file_pread(w->f, buf, n, w->pos) != US_OK) {
		/* inside the item, which the caller checked against the
		 * file: the file failed, not its format */
		w->out->bad_at = w->pos - w->base;
		return us_err_reason(w->err, US_E_IO,
				     "its zstd data cannot be read");
	}
	return US_OK;
}

/* Advance past @n bytes of content that must lie inside the item. */
static enum us_status skip(struct walk *w, uint64_t n)
{
	if (n > w->end - w->pos)
		return fail(w, w->pos, "its zstd data ends inside a frame "
				       "(truncated)");
	w->pos += n;
	return US_OK;
}

static enum us_status add(struct walk *w, uint64_t *sum, uint64_t n)
{
	if (__builtin_add_overflow(*sum, n, sum))
		return fail(w, w->pos, "its zstd frames decode to more than "
				       "2^64 bytes");
	return US_OK;
}

/* Window_Descriptor: 2^(10 + exponent) plus mantissa eighths of it. */
static uint64_t window_size(unsigned char wd)
{
	uint64_t base = 1ull << (10 + (wd >> 3));

	return base + base / 8 * (wd & 7);
}

static enum us_status frame_header(struct walk *w, struct fhdr *h)
{
	static const unsigned dict_len[4] = { 0, 1, 2, 4 };
	unsigned char b[FRAME_HDR_MAX];
	unsigned fhd, fcs_len;
	const unsigned char *p;
	bool single;
	size_t n;

	US_TRY(get(w, b, 5));
	fhd = b[4];
	single = fhd & FHD_SINGLE;
	if (fhd & FHD_RESERVED)
		return fail(w, w->pos + 4, "its zstd data sets the reserved bit "
					   "of a frame header");
	/* Frame_Content_Size_Flag 0 means no size, except that a single
	 * segment always has one (1 byte). */
	fcs_len = (fhd >> 6) == 0 ? (single ? 1 : 0) : 1u << (fhd >> 6);
	n = 5 + (single ? 0 : 1) + dict_len[fhd & 3] + fcs_len;
	US_TRY(get(w, b, n));
	p = b + 5;
	if (!single)
		h->window = window_size(*p++);
	if (us_le(p, dict_len[fhd & 3]) != 0)
		return fail(w, w->pos + 4, "its zstd frame needs a dictionary");
	p += dict_len[fhd & 3];
	h->has_size = fcs_len != 0;
	h->size = us_le(p, fcs_len) + (fcs_len == 2 ? 256 : 0);
	if (single)
		h->window = h->size;
	h->checksum = fhd & FHD_CHECKSUM;
	/* The decoder refuses more (zstream.h); refuse it here, first. */
	if (h->window > WINDOW_MAX)
		return fail(w, w->pos + 4, "its zstd frame needs a window larger "
					   "than 128 MiB");
	w->pos += n;
	return US_OK;
}

/* One block: its header, then its content inside the item.  Adds what it
 * decodes to to [*lo, *hi]; *last says whether it ends the frame. */
static enum us_status block(struct walk *w, uint64_t bmax, uint64_t *lo, uint64_t *hi,
		 bool *last)
{
	unsigned char b[BLOCK_HDR];
	uint64_t at = w->pos;
	uint32_t bh, size;
	enum block_type type;

	US_TRY(get(w, b, BLOCK_HDR));
	bh = (uint32_t)us_le(b, BLOCK_HDR);
	*last = bh & 1;
	type = (enum block_type)((bh >> 1) & 3);
	size = bh >> 3;
	if (type == BT_RESERVED)
		return fail(w, at, "its zstd data has a block of the reserved type");
	/* Raw and RLE: the size is the decoded size; compressed: the stored
	 * one, which decodes to at most the block maximum.  Either way no
	 * more than the block maximum. */
	if (size > bmax)
		return fail(w, at, "its zstd data has a block larger than its "
				   "frame allows");
	/* A compressed block holds a literals section header and a sequences
	 * section header, a byte each at least.  An empty one libzstd (so
	 * every reader of torch's) takes for an empty block: so do we. */
	if (type == BT_COMPRESSED && size == 1)
		return fail(w, at, "its zstd data has a compressed block too "
				   "short to be one");
	w->pos += BLOCK_HDR;
	w->out->blocks++;
	US_TRY(skip(w, type == BT_RLE ? 1 : size));
	if (type == BT_COMPRESSED)
		return size ? add(w, hi, bmax) : 0;
	US_TRY(add(w, lo, size));
	return add(w, hi, size);
}

static enum us_status zstd_frame(struct walk *w)
{
	struct fhdr h = { 0 };
	uint64_t at = w->pos, lo = 0, hi = 0, bmax;
	bool last = false;

	US_TRY(frame_header(w, &h));
	bmax = h.window < BLOCK_MAX ? h.window : BLOCK_MAX;
	while (!last)
		US_TRY(block(w, bmax, &lo, &hi, &last));
	if (h.checksum)
		US_TRY(skip(w, CHECKSUM));
	if (h.has_size) {
		if (h.size < lo || h.size > hi)
			return fail(w, at, "its zstd frame's declared content size "
					   "disagrees with its blocks");
		lo = hi = h.size;
		w->out->sized++;
	}
	w->out->frames++;
	US_TRY(add(w, &w->out->min_size, lo));
	return add(w, &w->out->max_size, hi);
}

static enum us_status skippable_frame(struct walk *w)
{
	unsigned char b[8];

	US_TRY(get(w, b, sizeof(b)));
	w->pos += sizeof(b);
	w->out->skippable++;
	return skip(w, us_le(b + 4, 4));
}

enum us_status us_zframes_walk(const struct us_file *f, uint64_t off,
			       uint64_t len,
			       struct us_zframes *out, struct us_err *err)
{
	struct walk w = { .f = f, .base = off, .end = off + len, .pos = off,
			  .out = out, .err = err };
	unsigned char m[4];
	uint32_t magic;

	assert(off + len >= off); /* the caller checked it against the file */
	memset(out, 0, sizeof(*out));
	while (w.pos < w.end) {
		uint64_t at = w.pos;
		enum us_status rc;

		if (w.end - w.pos < sizeof(m))
			magic = 0; /* too short to be any frame */
		else if ((rc = get(&w, m, sizeof(m))) != US_OK)
			return rc;
		else
			magic = (uint32_t)us_le(m, sizeof(m));
		if (magic == MAGIC_ZSTD)
			rc = zstd_frame(&w);
		else if ((magic & MAGIC_SKIP_MASK) == MAGIC_SKIP)
			rc = skippable_frame(&w);
		else if (at == off)
			rc = fail(&w, at, "its zstd data does not start with a "
					  "zstd frame");
		else
			rc = fail(&w, at, "its zstd data has bytes after its last "
					  "frame that are not a frame");
		if (rc != US_OK)
			return rc;
	}
	return US_OK;
}
