/* hfconfig.c - head_dim and other integers from config.json (hfconfig.h). */
#include "hfconfig.h"

#include <stdlib.h>

#include "../codec/json.h"
#include "../io.h"

/* A config.json is a few KiB; anything far bigger is not one. */
#define MAX_CONFIG (4u << 20)

static uint64_t get(const cJSON *cfg, const char *key)
{
	uint64_t v;

	if (!us_json_u64(cJSON_GetObjectItemCaseSensitive(cfg, key), &v))
		return 0;
	return v;
}

enum us_status us_hfconfig_read(const struct us_dir *dir, cJSON **cfg,
				struct us_err *err)
{
	enum us_status rc = US_OK;
	char *text = NULL;
	size_t len = 0;
	struct us_err jerr;

	*cfg = NULL;
	if (us_dir_is_open(dir))
		rc = us_read_small(dir, "config.json", MAX_CONFIG, &text, &len);
	if (rc != US_OK)
		return us_err_set(err, rc, "config.json", "cannot be read (%s)",
				  us_status_str(rc));
	if (!text)
		return US_OK;
	rc = us_json_parse(text, len, cfg, &jerr);
	free(text);
	if (rc != US_OK)
		return us_err_set(err, rc, "config.json", "%s", jerr.msg);
	return US_OK;
}

uint64_t us_hfconfig_head_dim(const cJSON *cfg)
{
	uint64_t head_dim = get(cfg, "head_dim");
	uint64_t hidden = get(cfg, "hidden_size");
	uint64_t heads = get(cfg, "num_attention_heads");

	if (!head_dim && heads && hidden % heads == 0)
		head_dim = hidden / heads;
	return head_dim;
}

bool us_hfconfig_u64(const cJSON *cfg, const char *key, uint64_t *v)
{
	*v = 0;
	return us_json_u64(cJSON_GetObjectItemCaseSensitive(cfg, key), v);
}
