/*
 * dcp_zstd.h - the head of a zstd-compressed DCP item ("stream.zstd/1").
 *
 * Such an item is a whole torch.save archive compressed as zstd frames:
 * one frame (zstandard), a data frame and an empty one (pyzstd), or any
 * concatenation of frames and skippable frames; torch writes no content
 * size and no checksum.  First every frame and block header of the item
 * is walked (codec/zframes.h), so that the frames' structure is checked
 * at mount whatever the item's size.  The archive's central directory is
 * at its end, so instead of decoding everything the mount decodes only the
 * head and walks the zip local headers forward: data.pkl is the first
 * record (a pickle is self-delimiting), each record is followed by a data
 * descriptor ("PK\x07\x08", crc, sizes: 16 bytes, or 24 with zip64 sizes)
 * because the local header's sizes are 0 (flag 0x08), and the walk stops
 * at the local header of the tensor's storage record data/<key>.
 */
#ifndef US_DCP_ZSTD_H
#define US_DCP_ZSTD_H

#include <stdint.h>

#include "../../arena.h"
#include "../../codec/torchpkl.h"

/* Items whose whole frame decodes within this many bytes are decoded to
 * their end at mount, which proves the frame intact and long enough. */
#define US_DCP_ZSTD_VERIFY (1u << 20)
/* Decoded bytes a read may need after the storage record: its data
 * descriptor, in the longer (zip64) of its two forms. */
#define US_DCP_ZSTD_DESC 24
/* data.pkl and the records before the storage must lie within this. */
#define US_DCP_ZSTD_HEAD_MAX (16u << 20)

struct us_dcp_zitem {
	struct us_torch_tensor tt; /* what data.pkl rebuilds */
	uint64_t data;    /* decoded offset of the storage record's data */
	uint64_t bytes;   /* its size */
	uint64_t first;   /* decoded offset of the tensor's first element */
	uint64_t served;  /* data + bytes + US_DCP_ZSTD_DESC: what reads need */
	bool verified;    /* the whole item was decoded at mount */
	uint64_t bad_at;  /* on a refusal by the frame walk: the item offset of
			   * the damage; else UINT64_MAX */
};

/*
 * us_dcp_zstd_item - parse the zstd item at [@off, @off + @len) of @f
 * (the pickle's values are allocated in @a).  US_OK with @out filled; else
 * @err holds a reason without a path (us_err_reason), of the kind found:
 * US_E_FORMAT when the item is corrupt, not a torch.save archive or holds
 * no tensor, US_E_UNSUPPORTED for a tensor that cannot be served, US_E_IO,
 * US_E_NOMEM.
 */
enum us_status us_dcp_zstd_item(const struct us_file *f, uint64_t off,
				uint64_t len,
				struct us_arena *a, struct us_dcp_zitem *out,
				struct us_err *err);

/*
 * us_dcp_zstd_value - the Python value of a zstd byte item (a torch.save
 * archive of a non-tensor value: an optimizer's lr, betas, params, ...):
 * its frames are walked, the item is decoded to its end, at most
 * US_DCP_ZSTD_HEAD_MAX bytes, and data.pkl, its first record, is loaded
 * into *@root (allocated in @a).  Fails as us_dcp_zstd_item does.
 */
enum us_status us_dcp_zstd_value(const struct us_file *f, uint64_t off,
				 uint64_t len,
				 struct us_arena *a, struct us_pk **root,
				 struct us_err *err);

#endif /* US_DCP_ZSTD_H */
