/*
 * zstream.h - streaming decompression of one zstd frame stored at a byte
 * range of a file (a DCP "stream.zstd/1" item: one frame, no content size,
 * no checksum, so its decoded size is only known by decoding it).
 *
 * Memory is fixed per stream: one input buffer (ZSTD_DStreamInSize, or the
 * item's length when smaller), one scratch buffer for skipping, and the
 * decoder's window, which is capped at 2^US_ZSTREAM_WINDOWLOG_MAX bytes; a
 * frame that needs more fails on its header (so at mount, where every
 * item's head is decoded).  The decoder of the last closed stream is kept
 * for the next one (one slot for the process).
 */
#ifndef US_ZSTREAM_H
#define US_ZSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* zstd's own default limit: every compression level, --long included. */
#define US_ZSTREAM_WINDOWLOG_MAX 27

struct us_zstream;

/*
 * us_zstream_open - a decoder for the frame at [@off, @off + @len) of @fd,
 * positioned at decoded byte 0.  Returns NULL when out of memory.
 */
struct us_zstream *us_zstream_open(int fd, uint64_t off, uint64_t len);
void us_zstream_close(struct us_zstream *z);

/*
 * us_zstream_read - decode up to @len bytes into @buf, straight from the
 * decoder (no intermediate copy).  Returns the bytes produced, fewer than
 * @len only at the end of the frame; or -EIO when the frame is corrupt or
 * truncated, data follows the frame inside the item, or the file cannot be
 * read (-errno).
 */
ssize_t us_zstream_read(struct us_zstream *z, void *buf, size_t len);

/* us_zstream_skip - decode and discard @n bytes.  0, -EIO if the frame
 * ends first, or the error of us_zstream_read. */
int us_zstream_skip(struct us_zstream *z, uint64_t n);

/* us_zstream_pos - decoded bytes produced so far. */
uint64_t us_zstream_pos(const struct us_zstream *z);

/* us_zstream_done - has the frame ended (and the item with it)? */
bool us_zstream_done(const struct us_zstream *z);

#endif /* US_ZSTREAM_H */
