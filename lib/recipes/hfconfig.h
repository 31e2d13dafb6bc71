/* hfconfig.h - what a recipe reads from a Hugging Face config.json. */
#ifndef US_RECIPE_HFCONFIG_H
#define US_RECIPE_HFCONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "../storage/storage.h"
#include "../us_error.h"

/*
 * us_hfconfig_head_dim - the attention head size config.json in @dir
 * gives: "head_dim", else hidden_size / num_attention_heads (as transformers
 * computes it).  0 when there is no config.json or it gives neither; a
 * config.json that is not JSON is a refusal naming it.
 */
enum us_status us_hfconfig_head_dim(const struct us_dir *dir,
				    uint64_t *head_dim,
				    struct us_err *err);

/*
 * us_hfconfig_u64 - the non-negative integer config.json in @dir gives
 * for the top-level @key (num_hidden_layers), in *@v; *@found is false
 * (and *@v 0) when there is no config.json, or it lacks @key or gives no
 * such integer for it.  A config.json that is not JSON is a refusal
 * naming it.
 */
enum us_status us_hfconfig_u64(const struct us_dir *dir, const char *key,
			       uint64_t *v, bool *found, struct us_err *err);

#endif /* US_RECIPE_HFCONFIG_H */
