/* index.c - the JSON index of a sharded checkpoint. */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/json.h"
#include "../io.h"
#include "../path.h"

#define MAX_INDEX (256ull << 20)

static enum us_status index_load(struct us_statedict *sd,
				 const struct us_dir *dir,
				 const char *relpath, cJSON **root,
				 struct us_err *err)
{
	const struct us_file *f;
	struct us_err why;
	enum us_status st;
	uint32_t idx;
	char *text;

	/* Opened as a source file: it is consumed (not passed through) and
	 * held like the shards, though no tensor data comes from it. */
	US_TRY(us_sd_open_file(sd, dir, relpath, &idx, err));
	f = &sd->files[idx];
	if ((uint64_t)f->size > MAX_INDEX)
		return us_err_set(err, US_E_FORMAT, relpath,
				  "index is larger than 256 MiB");
	text = malloc((size_t)f->size + 1);
	if (!text)
		return us_err_set(err, US_E_NOMEM, relpath, "out of memory");
	if (us_file_pread(f, text, (size_t)f->size, 0) != US_OK) {
		us_err_set(err, US_E_IO, relpath, "cannot read: %s",
			   us_file_strerror(f));
		free(text);
		return US_E_IO;
	}
	st = us_json_parse(text, (size_t)f->size, root, &why);
	free(text);
	if (st != US_OK)
		return us_err_set(err, st, relpath, "index %s", why.msg);
	return US_OK;
}

static int cmp_cstr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct shard names of @wm, sorted, each checked to stay inside SOURCE. */
static enum us_status index_shards(const cJSON *wm, const char *index,
				   const char ***out, size_t *nout,
				   struct us_err *err)
{
	size_t n = 0, k = 0;
	const char **v;

	for (const cJSON *c = wm->child; c; c = c->next) {
		if (!cJSON_IsString(c))
			return us_err_set(err, US_E_FORMAT, index,
					  "weight_map entry '%s' is not a file "
					  "name", c->string);
		if (!us_path_is_inside(c->valuestring))
			return us_err_set(err, US_E_FORMAT, index,
					  "weight_map names '%s', which is "
					  "outside the checkpoint directory",
					  c->valuestring);
		n++;
	}
	v = calloc(n + 1, sizeof(*v));
	if (!v)
		return us_err_set(err, US_E_NOMEM, index, "out of memory");
	for (const cJSON *c = wm->child; c; c = c->next)
		v[k++] = c->valuestring;
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_cstr);
	k = 0;
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(v[i], v[k - 1]) != 0)
			v[k++] = v[i];
	*out = v;
	*nout = k;
	return US_OK;
}

static int cmp_source_name(const void *a, const void *b)
{
	return strcmp((*(const struct us_tensor *const *)a)->source_name,
		      (*(const struct us_tensor *const *)b)->source_name);
}

static const struct us_tensor *find_source(const struct us_tensor **by_name,
					   size_t n, const char *name)
{
	struct us_tensor key = { .source_name = name };
	const struct us_tensor *kp = &key, **hit;

	hit = bsearch(&kp, by_name, n, sizeof(*by_name), cmp_source_name);
	return hit ? *hit : NULL;
}

/* Every weight_map entry must name a tensor that its shard really holds.
 * Runs on source names, before unwrapping and finalize. */
static enum us_status index_check(const struct us_statedict *sd,
				  const cJSON *wm, const char *index,
				  struct us_err *err)
{
	const struct us_tensor **by_name;
	enum us_status rc = US_OK;

	by_name = malloc((sd->ntensors + 1) * sizeof(*by_name));
	if (!by_name)
		return us_err_set(err, US_E_NOMEM, index, "out of memory");
	for (size_t i = 0; i < sd->ntensors; i++)
		by_name[i] = &sd->tensors[i];
	qsort(by_name, sd->ntensors, sizeof(*by_name), cmp_source_name);
	for (const cJSON *c = wm->child; c && rc == US_OK; c = c->next) {
		const struct us_tensor *t = find_source(by_name, sd->ntensors,
							c->string);
		const char *in = t ? sd->files[t->chunks[0].src.file].relpath : NULL;

		if (!t)
			rc = us_err_set(err, US_E_FORMAT, c->valuestring,
					"has no tensor '%s' (%s says it does)",
					c->string, index);
		else if (strcmp(in, c->valuestring) != 0)
			rc = us_err_set(err, US_E_FORMAT, index,
					"weight_map puts '%s' in %s, but it is "
					"in %s", c->string, c->valuestring, in);
	}
	free(by_name);
	return rc;
}

enum us_status us_index_read(struct us_statedict *sd, const struct us_dir *dir,
			     const char *relpath, us_shard_reader read_shard,
			     struct us_err *err)
{
	const char **shards = NULL;
	const cJSON *wm;
	cJSON *root = NULL;
	size_t n = 0;
	enum us_status rc;

	US_TRY(index_load(sd, dir, relpath, &root, err));
	wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(root) || !cJSON_IsObject(wm))
		rc = us_err_set(err, US_E_FORMAT, relpath,
				"index has no weight_map object");
	else
		rc = index_shards(wm, relpath, &shards, &n, err);
	/* A remote SOURCE fetches every shard's header ahead, in parallel,
	 * while the shards are read one by one (a shard's first and last
	 * 64 KiB: a safetensors header, a zip's records). */
	for (size_t i = 0; rc == US_OK && i < n; i++)
		us_dir_advise(dir, shards[i], US_ADVISE_EDGE, US_ADVISE_EDGE);
	for (size_t i = 0; rc == US_OK && i < n; i++)
		rc = read_shard(sd, dir, shards[i], err);
	if (rc == US_OK)
		rc = index_check(sd, wm, relpath, err);
	free(shards);
	cJSON_Delete(root);
	return rc;
}

enum us_status us_index_find(char **names, size_t n, const char *preferred,
			     const char *suffix, const char **index,
			     struct us_err *err)
{
	const char *found = NULL;

	*index = NULL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(names[i], preferred) == 0) {
			*index = names[i];
			return US_OK;
		}
		if (!us_path_has_suffix(names[i], suffix))
			continue;
		if (found)
			return us_err_set(err, US_E_UNSUPPORTED, names[i],
					  "several indexes (also %s): mount one "
					  "model at a time", found);
		found = names[i];
	}
	*index = found;
	return US_OK;
}
