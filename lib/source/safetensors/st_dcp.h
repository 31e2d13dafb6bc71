/*
 * st_dcp.h - safetensors files written by DCP's HuggingFaceStorageWriter
 * with save_distributed=True: each rank writes its own
 * shard-<rank>-model-<k>-of-<n>.safetensors holding its chunk of every
 * tensor under the tensor's own name, and records where each chunk sits in
 * the whole tensor in the header's __metadata__:
 *
 *     "DCP_SHARDING_INFO": "{\"w\": {\"saved_offsets\": [4, 0]}, ...}"
 *
 * (a JSON object serialized into the string value).  No file records a
 * tensor's full shape; torch's own reader (HuggingFaceStorageReader) takes
 * each dimension as the largest offset + size of its chunks, and so do we.
 * The chunks found here become one multi-chunk tensor per name; finalize
 * then checks that they tile it (model.c), as for any DCP tensor.  Nothing
 * records the world size: a lost rank file whose chunks all end their
 * tensors is indistinguishable from smaller tensors (to torch's reader
 * too); one from the middle leaves holes and is refused.
 */
#ifndef US_ST_DCP_H
#define US_ST_DCP_H

#include <stdint.h>

#include "../../codec/json.h"
#include "../source.h"

#define US_ST_DCP_KEY "DCP_SHARDING_INFO"

/* The chunks of a directory's files, gathered before they are merged. */
struct us_st_pieces;

struct us_st_pieces *us_st_pieces_new(void);
void us_st_pieces_free(struct us_st_pieces *p);

/* A file's DCP_SHARDING_INFO, its entries sorted by name for lookup (a
 * linear search per tensor was quadratic in a header of 10^5 tensors). */
struct us_st_info {
	cJSON *root;
	const cJSON **by_name;
	size_t n;
};

/*
 * us_st_sharding_info - the parsed DCP_SHARDING_INFO of a header's
 * __metadata__ @md; US_OK with *@out NULL when it has none.  Free with
 * us_st_info_free.
 */
enum us_status us_st_sharding_info(const cJSON *md, struct us_st_info **out,
				   const char *path, struct us_err *err);
void us_st_info_free(struct us_st_info *info);

/*
 * us_st_pieces_add - one tensor entry of @path (sd file @file, its bytes at
 * @data_off): its chunk's corner comes from @info's "saved_offsets" for
 * @name, which must be there, with one non-negative integer per dimension.
 */
enum us_status us_st_pieces_add(struct us_st_pieces *p,
				const struct us_st_info *info,
				const char *name, enum us_dtype dtype,
				uint32_t ndim, const uint64_t *shape,
				uint32_t file, uint64_t data_off,
				const char *path, struct us_err *err);

/*
 * us_st_pieces_commit - add one tensor per name gathered to @sd, its chunks
 * in file order.  The chunks of a name must agree on dtype and rank.
 */
enum us_status us_st_pieces_commit(struct us_st_pieces *p,
				   struct us_statedict *sd, struct us_err *err);

#endif /* US_ST_DCP_H */
