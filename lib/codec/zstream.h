/*
 * zstream.h - streaming decompression of the zstd frames stored at a byte
 * range of a file (a DCP "stream.zstd/1" item: one frame from zstandard, a
 * data frame and an empty one from pyzstd, or any concatenation of frames
 * and skippable frames; their contents are read as one stream).  A frame
 * has no content size, no checksum as torch writes it, so the decoded size
 * is only known by decoding.
 *
 * Memory is fixed per stream: one input buffer (ZSTD_DStreamInSize, or the
 * item's length when smaller), one scratch buffer for skipping, and the
 * decoder's window, which is capped at 2^US_ZSTREAM_WINDOWLOG_MAX bytes; a
 * frame that needs more fails on its header (and is refused at mount, by
 * the header walk of zframes.h).  The decoder of the last closed stream is
 * kept for the next one (one slot for the process).
 */
#ifndef US_ZSTREAM_H
#define US_ZSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../storage/storage.h"
#include "../us_error.h"

/* zstd's own default limit: every compression level, --long included. */
#define US_ZSTREAM_WINDOWLOG_MAX 27

struct us_zstream;

/*
 * us_zstream_open - a decoder for the frames at [@off, @off + @len) of @f,
 * positioned at decoded byte 0.  Returns NULL when out of memory.
 */
struct us_zstream *us_zstream_open(const struct us_file *f, uint64_t off,
				   uint64_t len);
void us_zstream_close(struct us_zstream *z);

/*
 * us_zstream_read - decode up to @len bytes into @buf, straight from the
 * decoder (no intermediate copy); *@got receives the bytes produced, fewer
 * than @len only at the end of the item's last frame.  US_OK; US_E_FORMAT
 * when a frame is corrupt or truncated or bytes that are not a frame follow
 * one inside the item; US_E_IO when the file cannot be read (errno says
 * why).  Mount tells the two apart; the read path answers EIO for both, as
 * for a bad sector.  A failed stream cannot be resumed.
 */
enum us_status us_zstream_read(struct us_zstream *z, void *buf, size_t len,
			       size_t *got);

/* us_zstream_skip - decode and discard @n bytes.  US_OK, US_E_FORMAT if
 * the item ends first, US_E_NOMEM, or the failure of us_zstream_read. */
enum us_status us_zstream_skip(struct us_zstream *z, uint64_t n);

/* us_zstream_pos - decoded bytes produced so far. */
uint64_t us_zstream_pos(const struct us_zstream *z);

/* us_zstream_done - has the item's last frame ended? */
bool us_zstream_done(const struct us_zstream *z);

#endif /* US_ZSTREAM_H */
