/* hfconfig.h - what a recipe reads from a Hugging Face config.json. */
#ifndef US_RECIPE_HFCONFIG_H
#define US_RECIPE_HFCONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "../codec/json.h"
#include "../storage/storage.h"
#include "../us_error.h"

/*
 * us_hfconfig_read - config.json in @dir (NULL, or no such file: *@cfg
 * NULL), parsed; free with cJSON_Delete.  One that cannot be read or is not
 * JSON is a refusal naming it.  Read once per recipe run: head_dim and
 * every rule's offsets come from the one parse.
 */
enum us_status us_hfconfig_read(const struct us_dir *dir, cJSON **cfg,
				struct us_err *err);

/* us_hfconfig_head_dim - the attention head size @cfg gives: "head_dim",
 * else hidden_size / num_attention_heads (as transformers computes it); 0
 * when @cfg is NULL or gives neither. */
uint64_t us_hfconfig_head_dim(const cJSON *cfg);

/* us_hfconfig_u64 - the non-negative integer @cfg gives for the top-level
 * @key (num_hidden_layers) in *@v; false (*@v 0) when @cfg is NULL, lacks
 * @key or gives no such integer for it. */
bool us_hfconfig_u64(const cJSON *cfg, const char *key, uint64_t *v);

#endif /* US_RECIPE_HFCONFIG_H */
