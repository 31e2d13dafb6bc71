/*
 * zframes.h - the structure of a run of zstd frames, read from their
 * headers alone (RFC 8878), without decoding anything.
 *
 * A stored DCP "stream.zstd/1" item is what a zstd library wrote: one
 * frame (zstandard's stream_writer), a data frame then an empty one
 * (pyzstd, flushed twice), or any concatenation of frames and skippable
 * frames, which a zstd decoder reads as the concatenation of their
 * contents.  The walk checks, for every frame, the magic number, the frame
 * header descriptor (its reserved bit), the window (at most
 * 2^US_ZSTREAM_WINDOWLOG_MAX bytes), that no dictionary is needed, the
 * declared content size; then every block header: its type (not the
 * reserved one), its size (at most the frame's block maximum, inside the
 * item), the last-block flag; then the checksum when the frame has one;
 * and that the frames end exactly at the item's end.  What it cannot see
 * is whether a compressed block's entropy-coded content decodes: zstd
 * offers no proof of that short of decoding it.
 *
 * Cost: one pread of at most 18 bytes per frame and of 3 bytes per block
 * (a block decodes to at most 128 KiB).
 */
#ifndef US_ZFRAMES_H
#define US_ZFRAMES_H

#include <stdint.h>

#include "../storage/storage.h"
#include "../us_error.h"

/* What the frames decode to, as far as their headers tell. */
struct us_zframes {
	uint64_t min_size; /* at least this many bytes: raw and RLE blocks, */
	uint64_t max_size; /* at most this many; both declared sizes when given */
	uint32_t frames;   /* zstd frames */
	uint32_t sized;    /* of which declare their content size */
	uint32_t skippable;
	uint64_t blocks;
	uint64_t bad_at;   /* on failure: the item offset of the damage */
};

/*
 * us_zframes_walk - walk the frames at [@off, @off + @len) of @f (the
 * caller has checked the range against the file).  US_OK with @out filled;
 * else @out->bad_at and @err's reason, without a path (us_err_reason):
 * US_E_FORMAT for damaged frames, US_E_IO when the range cannot be read.
 */
enum us_status us_zframes_walk(const struct us_file *f, uint64_t off,
			       uint64_t len,
			       struct us_zframes *out, struct us_err *err);

#endif /* US_ZFRAMES_H */
