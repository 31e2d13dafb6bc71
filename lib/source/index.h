/*
 * index.h - sharded checkpoints with a JSON index: model.safetensors.index.json
 * and pytorch_model.bin.index.json share one format,
 *   {"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}.
 * Shard names come from the checkpoint, so each must stay inside SOURCE.
 * Every entry must name a tensor its shard really holds.
 */
#ifndef US_INDEX_H
#define US_INDEX_H

#include <stddef.h>

#include "../model.h"

/* Reads one shard, describing its tensors into @sd. */
typedef enum us_status (*us_shard_reader)(struct us_statedict *sd,
			const struct us_dir *dir,
					  const char *relpath,
					  struct us_err *err);

/*
 * us_index_read - load the index @relpath under @dir, read each distinct
 * shard once (sorted by name) with @read_shard, and check the weight_map
 * against what the shards hold.  The index is marked consumed.
 */
enum us_status us_index_read(struct us_statedict *sd, const struct us_dir *dir,
			     const char *relpath, us_shard_reader read_shard,
			     struct us_err *err);

/*
 * us_index_find - among the sorted directory entries @names, the index to
 * use: "<stem><suffix>" if present, else the only name ending in @suffix.
 * *@index is NULL when there is none; several without the preferred one is
 * a refusal.
 */
enum us_status us_index_find(char **names, size_t n, const char *preferred,
			     const char *suffix, const char **index,
			     struct us_err *err);

#endif /* US_INDEX_H */
