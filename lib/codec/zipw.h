/*
 * zipw.h - the layout of a STORED zip archive as PyTorch's miniz writes it,
 * for archives whose large records are supplied later, on read.
 *
 * Nothing is written to a file: the writer produces every byte that is not
 * caller data (local headers, data descriptors, the central directory, the
 * zip64 end records) in one memory buffer, plus a list of segments that
 * tiles the whole archive.  A segment is either a slice of that buffer or a
 * range of a caller record ("external", identified by a tag); a reader maps
 * a byte range onto segments and fills external ones itself.
 *
 * The byte layout follows miniz's mz_zip_writer_add_mem_ex_v2 as built into
 * torch (checked against torch.save archives under and over 4 GiB):
 *  - local header: version 0, flags 0x0808 (0x0800 for an empty record: it
 *    has no data descriptor), time/date 0 (1980-01-01 in DOS terms), CRC and
 *    sizes 0; extra field = [zip64 {size, 0} if size >= 0xFFFFFFFF]
 *    [zip64 {offset} if the header offset >= 0xFFFFFFFF] then "FB" padding
 *    of 'Z' bytes, always present, so the data starts on a 64-byte boundary;
 *  - data descriptor after non-empty data: signature, CRC, sizes as u64 when
 *    the local header carried a zip64 field, else as u32;
 *  - central directory: real CRC and sizes, 0xFFFFFFFF plus a zip64 field
 *    for sizes/offsets >= 0xFFFFFFFF, no padding extra;
 *  - zip64 end record, zip64 locator and classic end record, always.
 * CRC: records given as bytes get their real CRC-32; external records get 0,
 * because computing it would mean reading all tensor data at mount.
 */
#ifndef US_ZIPW_H
#define US_ZIPW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../us_error.h"
#include "jsonw.h"

/* Where record data starts: a multiple of this, from the archive start. */
#define US_ZIPW_ALIGN 64

struct us_zipw_seg {
	uint64_t off;  /* first archive byte of the segment */
	uint64_t len;
	uint64_t src;  /* memory: offset in meta; external: the caller's tag */
	bool ext;
};

struct us_zipw {
	struct us_sbuf meta;     /* every non-external byte, in archive order */
	struct us_sbuf cd;       /* the central directory, until finish */
	struct us_zipw_seg *segs;
	size_t nsegs, segs_cap;
	uint64_t size;           /* archive bytes laid out so far */
	uint64_t nentries;
	bool oom;
};

void us_zipw_init(struct us_zipw *z);
void us_zipw_free(struct us_zipw *z);

/* us_zipw_add_mem - a record whose @len bytes are known now (real CRC). */
void us_zipw_add_mem(struct us_zipw *z, const char *name, const void *data,
		     size_t len);
/* us_zipw_add_ext - a record of @len bytes that the reader supplies: its
 * segment carries @tag.  CRC 0.  Returns the archive offset of its data. */
uint64_t us_zipw_add_ext(struct us_zipw *z, const char *name, uint64_t len,
			 uint64_t tag);
/* us_zipw_finish - append the central directory and the end records.
 * US_E_NOMEM if any step ran out of memory (errors are sticky). */
enum us_status us_zipw_finish(struct us_zipw *z);

/* us_zipw_find - index of the segment holding archive byte @off (which
 * must be < z->size). */
size_t us_zipw_find(const struct us_zipw *z, uint64_t off);


#endif /* US_ZIPW_H */
