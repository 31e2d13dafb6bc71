/*
 * st_dcp.c - DCP's per-rank safetensors shards: gather each tensor's chunks
 * from the files' DCP_SHARDING_INFO, then add one tensor per name (st_dcp.h).
 */
#include "st_dcp.h"

#include <stdlib.h>
#include <string.h>

#include "../../arena.h"
#include "../../grow.h"

struct piece {
	const char *name;     /* in the arena */
	enum us_dtype dtype;
	uint32_t ndim;
	uint64_t shape[US_MAX_NDIM];
	uint64_t offsets[US_MAX_NDIM];
	uint32_t file;
	uint64_t data_off;
	const char *path;     /* in the arena */
	size_t seq;           /* arrival order: chunks stay in file order */
};

struct us_st_pieces {
	struct us_arena arena;
	struct piece *v;
	size_t n, cap;
};

struct us_st_pieces *us_st_pieces_new(void)
{
	struct us_st_pieces *p = calloc(1, sizeof(*p));

	if (p)
		us_arena_init(&p->arena);
	return p;
}

void us_st_pieces_free(struct us_st_pieces *p)
{
	if (!p)
		return;
	us_arena_free(&p->arena);
	free(p->v);
	free(p);
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string,
		      (*(const cJSON *const *)b)->string);
}

static enum us_status index_info(struct us_st_info *in, const char *path,
				 struct us_err *err)
{
	size_t n = 0;

	for (const cJSON *c = in->root->child; c; c = c->next)
		n++;
	in->by_name = calloc(n ? n : 1, sizeof(*in->by_name));
	if (!in->by_name)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	for (const cJSON *c = in->root->child; c; c = c->next)
		in->by_name[in->n++] = c;
	qsort(in->by_name, in->n, sizeof(*in->by_name), cmp_entry);
	return US_OK;
}

enum us_status us_st_sharding_info(const cJSON *md, struct us_st_info **out,
				   const char *path, struct us_err *err)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(md, US_ST_DCP_KEY);
	struct us_err why;
	struct us_st_info *in;
	enum us_status rc;

	*out = NULL;
	if (!s)
		return US_OK;
	if (!cJSON_IsString(s))
		return us_err_set(err, US_E_FORMAT, path,
				  US_ST_DCP_KEY " is not a string");
	if (!(in = calloc(1, sizeof(*in))))
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	rc = us_json_parse(s->valuestring, strlen(s->valuestring), &in->root,
			   &why);
	if (rc != US_OK)
		rc = us_err_set(err, rc, path, US_ST_DCP_KEY " %s", why.msg);
	else if (!cJSON_IsObject(in->root))
		rc = us_err_set(err, US_E_FORMAT, path,
				US_ST_DCP_KEY " is not a JSON object");
	else
		rc = index_info(in, path, err);
	if (rc != US_OK) {
		us_st_info_free(in);
		return rc;
	}
	*out = in;
	return US_OK;
}

void us_st_info_free(struct us_st_info *info)
{
	if (!info)
		return;
	cJSON_Delete(info->root);
	free(info->by_name);
	free(info);
}

/* @name's entry of @info, or NULL. */
static const cJSON *info_get(const struct us_st_info *info, const char *name)
{
	cJSON key = { .string = (char *)name };
	const cJSON *kp = &key, **hit;

	hit = bsearch(&kp, info->by_name, info->n, sizeof(*info->by_name), cmp_entry);
	return hit ? *hit : NULL;
}

/* @name's "saved_offsets" in @info: @ndim non-negative integers. */
static enum us_status saved_offsets(const struct us_st_info *info,
				    const char *name, uint32_t ndim,
				    uint64_t *off, const char *path,
				    struct us_err *err)
{
	const cJSON *e = info_get(info, name);
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(e, "saved_offsets");
	const cJSON *x = cJSON_IsArray(o) ? o->child : NULL;

	if ((ndim && !x) || cJSON_GetArraySize(o) != (int)ndim)
		return us_err_set(err, US_E_FORMAT, path,
				  "tensor '%s': " US_ST_DCP_KEY " has no "
				  "saved_offsets of %u dimensions for it", name,
				  ndim);
	for (uint32_t k = 0; k < ndim; k++, x = x->next)
		if (!us_json_u64(x, &off[k]))
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': saved_offsets are not "
					  "non-negative integers", name);
	return US_OK;
}

enum us_status us_st_pieces_add(struct us_st_pieces *p,
				const struct us_st_info *info,
				const char *name, enum us_dtype dtype,
				uint32_t ndim, const uint64_t *shape,
				uint32_t file, uint64_t data_off,
				const char *path, struct us_err *err)
{
	struct piece *x;

	if (US_GROW(p->v, p->cap, p->n) != US_OK)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	x = &p->v[p->n];
	memset(x, 0, sizeof(*x));
	US_TRY(saved_offsets(info, name, ndim, x->offsets, path, err));
	x->name = us_arena_strdup(&p->arena, name);
	x->path = us_arena_strdup(&p->arena, path);
	if (!x->name || !x->path)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	x->dtype = dtype;
	x->ndim = ndim;
	memcpy(x->shape, shape, ndim * sizeof(*shape));
	x->file = file;
	x->data_off = data_off;
	x->seq = p->n++;
	return US_OK;
}

static int cmp_piece(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* The whole tensor's shape: per dimension, the largest offset + size. */
static enum us_status whole_shape(const struct piece *v, size_t n,
				  uint64_t *shape, struct us_err *err)
{
	memset(shape, 0, US_MAX_NDIM * sizeof(*shape));
	for (size_t i = 0; i < n; i++) {
		if (v[i].dtype != v[0].dtype || v[i].ndim != v[0].ndim)
			return us_err_set(err, US_E_FORMAT, v[i].path,
					  "tensor '%s': its chunk here is %s with "
					  "%u dimensions, in %s %s with %u",
					  v[i].name, us_dtype_name(v[i].dtype),
					  v[i].ndim, v[0].path,
					  us_dtype_name(v[0].dtype), v[0].ndim);
		for (uint32_t k = 0; k < v[i].ndim; k++) {
			uint64_t end;

			if (__builtin_add_overflow(v[i].offsets[k], v[i].shape[k], &end))
				return us_err_set(err, US_E_FORMAT, v[i].path,
						  "tensor '%s': saved_offsets "
						  "overflow", v[i].name);
			if (end > shape[k])
				shape[k] = end;
		}
	}
	return US_OK;
}

/* One tensor from the @n chunks of one name. */
static enum us_status commit_one(struct us_statedict *sd,
				 const struct piece *v, size_t n,
				 struct us_err *err)
{
	uint64_t shape[US_MAX_NDIM];
	struct us_tensor *t;

	if (n > UINT32_MAX)
		return us_err_set(err, US_E_UNSUPPORTED, v[0].path,
				  "tensor '%s': too many chunks", v[0].name);
	US_TRY(whole_shape(v, n, shape, err));
	t = us_sd_add_tensor(sd, v[0].name, v[0].dtype, v[0].ndim, shape,
			     (uint32_t)n, v[0].path, err);
	if (!t)
		return err ? err->status : US_E_NOMEM;
	for (size_t i = 0; i < n; i++) {
		struct us_chunk *c = &t->chunks[i];

		memcpy((uint64_t *)c->offsets, v[i].offsets, v[i].ndim * sizeof(uint64_t));
		memcpy((uint64_t *)c->sizes, v[i].shape, v[i].ndim * sizeof(uint64_t));
		c->src.file = v[i].file;
		c->src.offset = v[i].data_off;
	}
	return US_OK;
}

enum us_status us_st_pieces_commit(struct us_st_pieces *p,
				   struct us_statedict *sd, struct us_err *err)
{
	if (p->n > 1)
		qsort(p->v, p->n, sizeof(*p->v), cmp_piece);
	for (size_t i = 0, j; i < p->n; i = j) {
		for (j = i + 1; j < p->n && !strcmp(p->v[j].name, p->v[i].name); j++)
			;
		US_TRY(commit_one(sd, p->v + i, j - i, err));
	}
	return US_OK;
}
