/*
 * sharded.c - the sharded safetensors view (--max-shard-size).
 *
 * Lays the state dict out the way transformers' save_pretrained and
 * huggingface_hub's split_torch_state_dict_into_shards do, so loaders that
 * expect a sharded hub checkpoint find one:
 *   model-00001-of-0000N.safetensors ... and model.safetensors.index.json
 *   {"metadata": {"total_size": N}, "weight_map": {name: shard file}}
 *
 * Assignment is deterministic: stored tensors (a tied name's kept one) in
 * the safetensors writer's order, packed greedily; a tensor larger than the
 * limit gets a shard of its own at once, and shards are numbered in the
 * order they are closed - which is what huggingface_hub does, so a big
 * tensor met while a shard is open comes before that shard.  Tensors are
 * never split: a reader expects each one whole in one file.
 *
 * A dropped tied name is not in weight_map (the hub's index lists stored
 * names only; transformers re-ties from config.json); it is recorded as
 * "<dropped>": "<kept>" in the __metadata__ of its kept name's shard, the
 * same record model.safetensors carries.
 */
#include "view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/jsonw.h"

#define INDEX_NAME "model.safetensors.index.json"

struct plan {
	const struct us_tensor **stored; /* writer order */
	size_t nstored;
	size_t *shard_of;  /* by sd->tensors index: the shard, 0-based */
	size_t nshards;
	uint64_t total;    /* bytes of stored tensors: ties counted once */
};

static void plan_free(struct plan *p)
{
	free(p->stored);
	free(p->shard_of);
}

/* Group ids are handed out as groups open; a group's shard number is its
 * rank in closing order.  @close_rank maps one to the other. */
static void plan_assign(struct plan *p, const struct us_statedict *sd,
			uint64_t max, size_t *group, size_t *close_rank)
{
	size_t ngroups = 0, nclosed = 0, cur = SIZE_MAX;
	uint64_t cur_size = 0;

	for (size_t i = 0; i < p->nstored; i++) {
		uint64_t nb = p->stored[i]->nbytes;

		if (nb > max) {
			group[i] = ngroups;
			close_rank[ngroups++] = nclosed++;
			continue;
		}
		if (cur == SIZE_MAX || cur_size + nb > max) {
			if (cur != SIZE_MAX)
				close_rank[cur] = nclosed++;
			cur = ngroups++;
			cur_size = 0;
		}
		group[i] = cur;
		cur_size += nb;
	}
	if (cur != SIZE_MAX)
		close_rank[cur] = nclosed++;
	p->nshards = nclosed;
	for (size_t i = 0; i < p->nstored; i++)
		p->shard_of[p->stored[i] - sd->tensors] = close_rank[group[i]];
}

static enum us_status plan_build(struct plan *p, const struct us_statedict *sd,
				 uint64_t max)
{
	size_t *group = calloc(sd->ntensors + 1, sizeof(*group));
	size_t *close_rank = calloc(sd->ntensors + 1, sizeof(*close_rank));

	memset(p, 0, sizeof(*p));
	p->stored = calloc(sd->ntensors + 1, sizeof(*p->stored));
	p->shard_of = calloc(sd->ntensors + 1, sizeof(*p->shard_of));
	if (!group || !close_rank || !p->stored || !p->shard_of) {
		free(group);
		free(close_rank);
		plan_free(p);
		return US_E_NOMEM;
	}
	for (size_t i = 0; i < sd->ntensors; i++) {
		if (sd->tensors[i].tie_of)
			continue;
		p->stored[p->nstored++] = &sd->tensors[i];
		p->total += sd->tensors[i].nbytes;
	}
	qsort(p->stored, p->nstored, sizeof(*p->stored),
	      us_tensor_cmp_writer_order);
	plan_assign(p, sd, max, group, close_rank);
	free(group);
	free(close_rank);
	return US_OK;
}

static void shard_name(char *buf, size_t cap, size_t k, size_t n)
{
	snprintf(buf, cap, "model-%05zu-of-%05zu.safetensors", k + 1, n);
}

/* The tied names whose kept tensor lives in shard @k. */
static size_t shard_dropped(const struct plan *p, const struct us_statedict *sd,
			    size_t k, const struct us_tensor **out)
{
	size_t n = 0;

	for (size_t i = 0; i < sd->ntensors; i++) {
		const struct us_tensor *c = sd->tensors[i].tie_of;

		if (c && p->shard_of[c - sd->tensors] == k)
			out[n++] = &sd->tensors[i];
	}
	return n;
}

static enum us_status shard_view(const struct plan *p,
				 const struct us_statedict *sd, size_t k,
				 const struct us_tensor **keep,
				 const struct us_tensor **dropped,
				 struct us_view **out, struct us_err *err)
{
	char name[64];
	size_t nkeep = 0, ndropped;

	for (size_t i = 0; i < p->nstored; i++)
		if (p->shard_of[p->stored[i] - sd->tensors] == k)
			keep[nkeep++] = p->stored[i];
	ndropped = shard_dropped(p, sd, k, dropped);
	shard_name(name, sizeof(name), k, p->nshards);
	return us_view_safetensors_subset(sd, name, keep, nkeep, dropped,
					  ndropped, out, err);
}

static int cmp_by_name(const void *a, const void *b)
{
	return strcmp((*(const struct us_tensor *const *)a)->name,
		      (*(const struct us_tensor *const *)b)->name);
}

/* json.dumps(index, indent=2, sort_keys=True) + "\n", as the hub writes it
 * (strcmp on UTF-8 sorts as Python sorts code points). */
static char *index_json(const struct plan *p, const struct us_statedict *sd)
{
	const struct us_tensor **byname = calloc(p->nstored + 1,
						 sizeof(*byname));
	struct us_sbuf b;
	char name[64];

	if (!byname)
		return NULL;
	memcpy(byname, p->stored, p->nstored * sizeof(*byname));
	qsort(byname, p->nstored, sizeof(*byname), cmp_by_name);
	us_sbuf_init(&b);
	us_sbuf_puts(&b, "{\n  \"metadata\": {\n    \"total_size\": ");
	us_sbuf_u64(&b, p->total);
	us_sbuf_puts(&b, "\n  },\n  \"weight_map\": {");
	for (size_t i = 0; i < p->nstored; i++) {
		us_sbuf_puts(&b, i ? ",\n    " : "\n    ");
		us_sbuf_json_str(&b, byname[i]->name);
		us_sbuf_puts(&b, ": ");
		shard_name(name, sizeof(name), p->shard_of[byname[i] - sd->tensors],
			   p->nshards);
		us_sbuf_json_str(&b, name);
	}
	us_sbuf_puts(&b, p->nstored ? "\n  }\n}\n" : "}\n}\n");
	us_sbuf_putc(&b, '\0');
	free(byname);
	if (b.oom) {
		us_sbuf_free(&b);
		return NULL;
	}
	return b.p;
}

static void views_free(struct us_view **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		us_view_free(v[i]);
	free(v);
}

/* Every shard, then the index. */
static enum us_status build_views(const struct plan *p,
				  const struct us_statedict *sd,
				  struct us_view **v, size_t *n,
				  struct us_err *err)
{
	const struct us_tensor **keep = calloc(sd->ntensors + 1, sizeof(*keep));
	const struct us_tensor **dropped = calloc(sd->ntensors + 1,
						  sizeof(*dropped));
	enum us_status rc = US_E_NOMEM;
	char *json = NULL;

	if (!keep || !dropped)
		goto out;
	for (size_t k = 0; k < p->nshards; k++) {
		rc = shard_view(p, sd, k, keep, dropped, &v[*n], err);
		if (rc != US_OK)
			goto out;
		(*n)++;
	}
	rc = US_E_NOMEM;
	json = index_json(p, sd);
	if (!json)
		goto out;
	rc = us_view_text_new(INDEX_NAME, json, &v[*n], err);
	if (rc == US_OK)
		(*n)++;
out:
	if (rc == US_E_NOMEM && !err->msg[0])
		us_err_set(err, US_E_NOMEM, INDEX_NAME, "out of memory");
	free(json);
	free(keep);
	free(dropped);
	return rc;
}

enum us_status us_view_safetensors_sharded(const struct us_statedict *sd,
					   uint64_t max_shard,
					   struct us_view ***out, size_t *nout,
					   struct us_err *err)
{
	struct us_view **v;
	struct plan p;
	size_t n = 0;
	enum us_status rc;

	if (plan_build(&p, sd, max_shard) != US_OK)
		return us_err_set(err, US_E_NOMEM, INDEX_NAME, "out of memory");
	v = calloc(p.nshards + 2, sizeof(*v));
	if (!v) {
		plan_free(&p);
		return us_err_set(err, US_E_NOMEM, INDEX_NAME, "out of memory");
	}
	/* One shard is what save_pretrained writes as plain model.safetensors. */
	if (p.nshards <= 1) {
		rc = us_view_safetensors_new(sd, &v[0], err);
		n = rc == US_OK;
	} else {
		rc = build_views(&p, sd, v, &n, err);
	}
	plan_free(&p);
	if (rc != US_OK) {
		views_free(v, n);
		return rc;
	}
	*out = v;
	*nout = n;
	return US_OK;
}
