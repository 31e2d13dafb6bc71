/* zstream.c - the zstd frames at a file range, decoded as one stream. */
#include "zstream.h"

#include <stdatomic.h>
#include <stdlib.h>

#include <zstd.h>

#include "../io.h"

#define SKIP_BUF (64u << 10)

struct us_zstream {
	ZSTD_DCtx *dctx;
	const struct us_file *f;
	uint64_t in_off, in_end; /* next compressed byte to read; item end */
	unsigned char *in;       /* compressed input, in_pos..in_len unread */
	size_t in_cap, in_pos, in_len;
	unsigned char *scratch;  /* decoded bytes that us_zstream_skip drops */
	uint64_t out_pos;
	bool done;
};

/*
 * One decoder kept from the last closed stream.  A decoder is ~96 KiB plus
 * its window buffers (window + block size for frames without a content
 * size: megabytes), and every read of a zstd item opens a stream, so
 * reusing one saves an allocation and the page faults of clearing it.
 * One slot, swapped atomically: threads that find it empty make their own.
 */
static _Atomic(ZSTD_DCtx *) spare_dctx;

static ZSTD_DCtx *dctx_get(void)
{
	ZSTD_DCtx *d = atomic_exchange(&spare_dctx, NULL);

	if (d && ZSTD_isError(ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters))) {
		ZSTD_freeDCtx(d);
		d = NULL;
	}
	return d ? d : ZSTD_createDCtx();
}

static void dctx_put(ZSTD_DCtx *d)
{
	ZSTD_DCtx *none = NULL;

	if (d && !atomic_compare_exchange_strong(&spare_dctx, &none, d))
		ZSTD_freeDCtx(d);
}

struct us_zstream *us_zstream_open(const struct us_file *f, uint64_t off,
				   uint64_t len)
{
	struct us_zstream *z = calloc(1, sizeof(*z));

	if (!z)
		return NULL;
	z->f = f;
	z->in_off = off;
	z->in_end = off + len; /* the caller checked it against the file */
	/* An item smaller than zstd's suggested input size (128 KiB) needs no
	 * more than itself: most items are small, and a zstd DCP checkpoint
	 * opens one stream per item read. */
	z->in_cap = ZSTD_DStreamInSize();
	if (len && len < z->in_cap)
		z->in_cap = (size_t)len;
	z->in = malloc(z->in_cap);
	z->dctx = dctx_get();
	if (!z->in || !z->dctx ||
	    ZSTD_isError(ZSTD_DCtx_setParameter(z->dctx, ZSTD_d_windowLogMax,
						US_ZSTREAM_WINDOWLOG_MAX))) {
		us_zstream_close(z);
		return NULL;
	}
	return z;
}

void us_zstream_close(struct us_zstream *z)
{
	if (!z)
		return;
	dctx_put(z->dctx);
	free(z->in);
	free(z->scratch);
	free(z);
}

static bool input_left(const struct us_zstream *z)
{
	return z->in_pos < z->in_len || z->in_off < z->in_end;
}

static enum us_status refill(struct us_zstream *z)
{
	uint64_t left = z->in_end - z->in_off;
	size_t n = left < z->in_cap ? (size_t)left : z->in_cap;

	US_TRY(us_file_pread(z->f, z->in, n, z->in_off));
	z->in_off += n;
	z->in_pos = 0;
	z->in_len = n;
	return US_OK;
}

/* One decoder step into @out. */
static enum us_status step(struct us_zstream *z, ZSTD_outBuffer *out)
{
	ZSTD_inBuffer in;
	size_t before = out->pos, ret;

	if (z->in_pos == z->in_len && z->in_off < z->in_end)
		US_TRY(refill(z));
	in = (ZSTD_inBuffer){ z->in, z->in_len, z->in_pos };
	ret = ZSTD_decompressStream(z->dctx, out, &in);
	if (ZSTD_isError(ret))
		return US_E_FORMAT;
	z->in_pos = in.pos;
	z->out_pos += out->pos - before;
	if (ret == 0) {
		/* A frame ended.  The item may hold more: pyzstd ends each item
		 * with an empty frame, and a zstd stream is any concatenation
		 * of frames (skippable ones included), read as the
		 * concatenation of their contents, as torch's readers do.
		 * Mount has walked their headers (zframes.h). */
		z->done = !input_left(z);
		return US_OK;
	}
	/* The frame wants more input, and the item has none: truncated.
	 * (With input or output room left, the decoder always progresses.) */
	if (!input_left(z) && out->pos == before)
		return US_E_FORMAT;
	return US_OK;
}

enum us_status us_zstream_read(struct us_zstream *z, void *buf, size_t len,
			       size_t *got)
{
	ZSTD_outBuffer out = { buf, len, 0 };
	enum us_status rc = US_OK;

	while (rc == US_OK && out.pos < out.size && !z->done)
		rc = step(z, &out);
	*got = out.pos;
	return rc;
}

enum us_status us_zstream_skip(struct us_zstream *z, uint64_t n)
{
	if (!z->scratch && !(z->scratch = malloc(SKIP_BUF)))
		return US_E_NOMEM;
	while (n > 0) {
		size_t want = n < SKIP_BUF ? (size_t)n : SKIP_BUF, got;

		US_TRY(us_zstream_read(z, z->scratch, want, &got));
		if (got < want)
			return US_E_FORMAT; /* the item ended first */
		n -= (uint64_t)got;
	}
	return US_OK;
}

uint64_t us_zstream_pos(const struct us_zstream *z)
{
	return z->out_pos;
}

bool us_zstream_done(const struct us_zstream *z)
{
	return z->done;
}
