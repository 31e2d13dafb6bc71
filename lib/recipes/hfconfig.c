/* hfconfig.c - head_dim from config.json (hfconfig.h). */
#include "hfconfig.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../codec/json.h"
#include "../io.h"

/* A config.json is a few KiB; anything far bigger is not one. */
#define MAX_CONFIG (4u << 20)

/* config.json's text; NULL when absent (not an error: *@rc stays US_OK). */
static char *read_config(int dirfd, size_t *len, enum us_status *rc)
{
	struct stat st;
	char *text = NULL;
	int fd;

	*rc = US_OK;
	/* O_NONBLOCK: a FIFO named config.json must not hang the mount */
	fd = dirfd < 0 ? -1 : openat(dirfd, "config.json",
				     O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > MAX_CONFIG)
		*rc = US_E_FORMAT;
	else if (!(text = malloc((size_t)st.st_size + 1)))
		*rc = US_E_NOMEM;
	else if ((*rc = us_pread_exact(fd, text, (size_t)st.st_size, 0)) != US_OK) {
		free(text);
		text = NULL;
	}
	if (text)
		*len = (size_t)st.st_size;
	close(fd);
	return text;
}

static uint64_t get(const cJSON *cfg, const char *key)
{
	uint64_t v;

	if (!us_json_u64(cJSON_GetObjectItemCaseSensitive(cfg, key), &v))
		return 0;
	return v;
}

enum us_status us_hfconfig_head_dim(int dirfd, uint64_t *head_dim,
				    struct us_err *err)
{
	enum us_status rc;
	size_t len = 0;
	char *text = read_config(dirfd, &len, &rc);
	uint64_t hidden, heads;
	struct us_err jerr;
	cJSON *cfg;

	*head_dim = 0;
	if (rc != US_OK)
		return us_err_set(err, rc, "config.json", "cannot be read (%s)",
				  us_status_str(rc));
	if (!text)
		return US_OK;
	rc = us_json_parse(text, len, &cfg, &jerr);
	free(text);
	if (rc != US_OK)
		return us_err_set(err, rc, "config.json", "%s", jerr.msg);
	*head_dim = get(cfg, "head_dim");
	hidden = get(cfg, "hidden_size");
	heads = get(cfg, "num_attention_heads");
	if (!*head_dim && heads && hidden % heads == 0)
		*head_dim = hidden / heads;
	cJSON_Delete(cfg);
	return US_OK;
}
