/*
 * torch.c - the torch.save reader: a .bin/.pt/.pth/.ckpt file, a directory
 * holding one, or HF shards with pytorch_model.bin.index.json.
 *
 * The pickle is walked for tensors; nested dicts and lists give dotted names.
 * Container rule (design.md): when the model's tensors live under one
 * top-level key ({"epoch": 3, "model": {...}, "optimizer": {...}}), that key
 * is not part of the names; optimizer containers never feed the model view.
 * Tensors that share a storage keep pointing at the same bytes (ties).
 */
#include "../source.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../codec/jsonw.h"
#include "../../codec/json.h"
#include "../../codec/pk2json.h"
#include "../../io.h"
#include "../../path.h"
#include "../idnames.h"
#include "../index.h"
#include "../../codec/torchpkl.h"

#define TORCH_INDEX_SUFFIX ".bin.index.json"
#define MAX_WALK_DEPTH 64
/*
 * Values a walk may visit.  The depth bound alone is not enough: through the
 * pickle memo a few hundred bytes describe a DAG ({"a": x, "b": x} nested 60
 * deep) whose tree has 2^60 paths, which hung the mount (found by fuzzing).
 * 2^22 is far above any real state dict (every tensor is one visit).
 */
#define MAX_WALK_VISITS (1u << 22)

struct walk {
	struct us_statedict *sd;
	struct us_statedict *dst; /* where tensors go: sd, or its optimizer */
	const struct us_torch_archive *ta;
	uint32_t file;
	struct us_err *err;
	struct us_err why;  /* a codec's reason, before the path is added */
	uint32_t visits;    /* walk() calls so far, <= MAX_WALK_VISITS */
	size_t json_budget; /* values us_pk_to_json_budget may still convert */
};

static enum us_status add_tensor(struct walk *w, const char *name,
				 const struct us_torch_tensor *tt)
{
	const char *path = w->sd->files[w->file].relpath;
	struct us_tensor *t;
	uint64_t off;
	enum us_status st = us_torch_extent(w->ta, tt, &off, &w->why);

	if (st != US_OK)
		return us_err_set(w->err, st, path, "tensor '%s': %s", name,
				  w->why.msg);
	t = us_sd_add_tensor(w->dst, name, tt->dtype, tt->ndim, tt->shape, 1,
			     path, w->err);
	if (!t)
		return w->err ? w->err->status : US_E_NOMEM;
	if (tt->ndim)
		memcpy((uint64_t *)t->chunks[0].sizes, tt->shape,
		       tt->ndim * sizeof(uint64_t));
	t->chunks[0].src.file = w->file;
	t->chunks[0].src.offset = off;
	t->chunks[0].src.strides = us_arena_calloc(&w->sd->arena, tt->ndim + 1,
						   sizeof(int64_t));
	if (!t->chunks[0].src.strides)
		return us_err_set(w->err, US_E_NOMEM, path, "out of memory");
	memcpy((int64_t *)t->chunks[0].src.strides, tt->strides,
	       tt->ndim * sizeof(int64_t));
	return US_OK;
}

static bool has_tensor(const struct us_pk *v, bool weights, int depth,
		       uint32_t *budget);

/* Append the text of dict key or list index @k to @name; false when @k is
 * not something a name can be made of (a bool, float, tuple, bytes or None
 * key, or a string with a NUL in it). */
static bool key_text(const struct us_pk *k, struct us_sbuf *name)
{
	char num[24];

	if (k->kind == US_PK_STR) {
		if (memchr(k->u.str.s, '\0', k->u.str.len))
			return false;
		us_sbuf_puts(name, k->u.str.s);
		return true;
	}
	if (k->kind != US_PK_INT)
		return false;
	snprintf(num, sizeof(num), "%lld", (long long)k->u.i);
	us_sbuf_puts(name, num);
	return true;
}

static enum us_status walk(struct walk *w, const struct us_pk *v,
			   struct us_sbuf *name, int depth, bool top);

static enum us_status walk_child(struct walk *w, const struct us_pk *k,
				 const struct us_pk *v, struct us_sbuf *name,
				 int depth)
{
	size_t mark = name->len;
	uint32_t budget = MAX_WALK_VISITS - w->visits;
	enum us_status rc;
	bool holds;

	if (mark)
		us_sbuf_putc(name, '.');
	if (!key_text(k, name)) {
		name->len = mark;
		if (name->p)
			name->p[mark] = '\0';
		/* Not a name a state dict can have: skipped, unless tensors
		 * live under it (dropping them silently would serve a model
		 * with weights missing).  The search is charged to the walk's
		 * own bound. */
		holds = has_tensor(v, false, depth, &budget);
		w->visits = MAX_WALK_VISITS - budget;
		if (budget == 0)
			return us_err_set(w->err, US_E_FORMAT,
					  w->sd->files[w->file].relpath,
					  "the pickle's shared references expand to "
					  "more than %u values", MAX_WALK_VISITS);
		if (!holds)
			return US_OK;
		return us_err_set(w->err, US_E_UNSUPPORTED,
				  w->sd->files[w->file].relpath,
				  "%s%s%s holds tensors under a %s, which cannot "
				  "be a tensor name", mark ? "'" : "",
				  mark ? name->p : "the top-level dict",
				  mark ? "'" : "",
				  k->kind == US_PK_STR ? "key with a NUL in it"
						       : "key that is not a string");
	}
	us_sbuf_putc(name, '\0');
	name->len--;
	if (name->oom)
		return us_err_set(w->err, US_E_NOMEM, ".", "out of memory");
	rc = walk(w, v, name, depth + 1, false);
	name->len = mark;
	if (name->p)
		name->p[mark] = '\0';
	return rc;
}

static enum us_status walk(struct walk *w, const struct us_pk *v,
			   struct us_sbuf *name, int depth, bool top)
{
	struct us_torch_tensor tt;
	enum us_status rc = US_OK;
	bool m;

	if (depth > MAX_WALK_DEPTH)
		return us_err_set(w->err, US_E_FORMAT,
				  w->sd->files[w->file].relpath,
				  "state dict nests too deeply");
	if (++w->visits > MAX_WALK_VISITS)
		return us_err_set(w->err, US_E_FORMAT,
				  w->sd->files[w->file].relpath,
				  "the pickle's shared references expand to more "
				  "than %u values", MAX_WALK_VISITS);
	rc = us_torch_match(v, &tt, &m, &w->why);
	if (rc != US_OK)
		return us_err_set(w->err, rc, w->sd->files[w->file].relpath,
				  "tensor '%s': %s", name->len ? name->p : "",
				  w->why.msg);
	if (m && depth == 0)
		return us_err_set(w->err, US_E_UNSUPPORTED,
				  w->sd->files[w->file].relpath,
				  "the checkpoint is a single tensor, not a "
				  "state dict");
	if (m)
		return add_tensor(w, name->len ? name->p : "", &tt);
	if (us_pk_is_dictlike(v)) {
		for (size_t i = 0; rc == US_OK && i < v->coll->keys.n; i++) {
			const struct us_pk *k = v->coll->keys.v[i];

			if (top && k->kind == US_PK_STR && us_is_optimizer_container(k->u.str.s))
				continue;
			rc = walk_child(w, k, v->coll->vals.v[i], name, depth);
		}
	} else if (v->kind == US_PK_LIST || v->kind == US_PK_TUPLE) {
		for (size_t i = 0; rc == US_OK && i < v->u.seq.n; i++) {
			struct us_pk idx = { .kind = US_PK_INT, .u.i = (int64_t)i };

			rc = walk_child(w, &idx, v->u.seq.v[i], name, depth);
		}
	}
	return rc;
}

/* More than one element, none of its dimensions empty. */
static bool is_weight(const struct us_torch_tensor *tt)
{
	bool big = false;

	for (uint32_t k = 0; k < tt->ndim; k++) {
		if (tt->shape[k] == 0)
			return false;
		big |= tt->shape[k] > 1;
	}
	return big;
}

/*
 * Does @v hold any tensor -- with @weights, one of more than one element
 * (what scripts keep beside the model, a step count, a metric, Lightning's
 * best_model_score, holds scalars)?  Bounded: past *@budget visits the
 * answer is "maybe" (true), and the walk then refuses the file itself.
 */
static bool has_tensor(const struct us_pk *v, bool weights, int depth,
		       uint32_t *budget)
{
	struct us_torch_tensor tt;
	bool found;

	if (!v || depth > MAX_WALK_DEPTH)
		return false;
	if (*budget == 0)
		return true;
	--*budget;
	/* a tensor that cannot be served is still a tensor, not a weight */
	if (us_torch_match(v, &tt, &found, NULL) != US_OK)
		return !weights;
	if (found)
		return !weights || is_weight(&tt);
	if (us_pk_is_dictlike(v)) {
		for (size_t i = 0; i < v->coll->vals.n; i++)
			if (has_tensor(v->coll->vals.v[i], weights, depth + 1, budget))
				return true;
	} else if (v->kind == US_PK_LIST || v->kind == US_PK_TUPLE) {
		for (size_t i = 0; i < v->u.seq.n; i++)
			if (has_tensor(v->u.seq.v[i], weights, depth + 1, budget))
				return true;
	}
	return false;
}

/* Keys training scripts and frameworks keep the model's state dict under
 * (Lightning: "state_dict"; most scripts: "model" or "model_state_dict"). */
static bool is_model_key(const struct us_pk *k)
{
	return k->kind == US_PK_STR && us_is_model_container(k->u.str.s);
}

/*
 * The container rule: if exactly one top-level, non-optimizer entry holds
 * tensors and it is itself a dict, the model is that dict.  (A state dict
 * is flat -- "a.b.weight" -- so a nested dict at the top is a container.)
 * When several entries hold tensors, the one dict under a model key
 * (is_model_key) is the model if the others are training state: a bare
 * tensor (an RNG state, a step count) or containers of scalars (Lightning's
 * callbacks keep best_model_score).  A second container of real weights (an
 * EMA copy, a discriminator) means the whole pickle is walked, every name
 * keeping its top-level key: nothing is dropped without a word.
 */
static const struct us_pk *model_root(const struct us_pk *root)
{
	const struct us_pk *only = NULL, *named = NULL;
	size_t holders = 0, nnamed = 0, weights = 0;
	uint32_t budget = MAX_WALK_VISITS;

	if (!us_pk_is_dictlike(root))
		return root;
	for (size_t i = 0; i < root->coll->keys.n; i++) {
		const struct us_pk *k = root->coll->keys.v[i];
		const struct us_pk *v = root->coll->vals.v[i];

		if (k->kind == US_PK_STR && us_is_optimizer_container(k->u.str.s))
			continue;
		if (!has_tensor(v, false, 0, &budget))
			continue;
		holders++;
		if (!us_pk_is_dictlike(v))
			continue;
		only = v;
		if (is_model_key(k)) {
			named = v;
			nnamed++;
		} else if (has_tensor(v, true, 0, &budget)) {
			weights++;
		}
	}
	if (holders == 1 && only)
		return only;
	return nnamed == 1 && weights == 0 ? named : root;
}

/* ---- optimizer state ------------------------------------------------------ */

/*
 * A torch optimizer's state_dict: {"state": {id: {slot: value}},
 * "param_groups": [{"params": [id, ...], "param_names": [name, ...], ...}]}.
 * Ids are positions, not names; only "param_names" (torch >= 2.6, when the
 * optimizer was built from named_parameters()) says which parameter an id
 * is.  Without it the tensors cannot be named, so only optimizer.json is
 * served.
 */
static const struct us_pk *find_optimizer(const struct us_pk *root)
{
	for (size_t i = 0; us_pk_is_dictlike(root) && i < root->coll->keys.n; i++) {
		const struct us_pk *k = root->coll->keys.v[i];
		const struct us_pk *v = root->coll->vals.v[i];

		if (k->kind != US_PK_STR || !us_is_optimizer_container(k->u.str.s))
			continue;
		if (v->kind == US_PK_LIST && v->u.seq.n) /* Lightning's list */
			v = v->u.seq.v[0];
		if (us_pk_dict_get(v, "state") && us_pk_dict_get(v, "param_groups"))
			return v;
	}
	return NULL;
}

/* The groups' params/param_names pairs as a table (idnames.h). */
static enum us_status param_table(const struct us_pk *groups,
				  struct us_idnames *t)
{
	for (size_t g = 0; g < us_pk_len(groups); g++) {
		const struct us_pk *grp = us_pk_at(groups, g);
		const struct us_pk *ids = us_pk_dict_get(grp, "params");
		const struct us_pk *names = us_pk_dict_get(grp, "param_names");

		for (size_t i = 0; i < us_pk_len(ids) && i < us_pk_len(names); i++) {
			const struct us_pk *x = us_pk_at(ids, i), *n = us_pk_at(names, i);

			if (x->kind == US_PK_INT && n->kind == US_PK_STR)
				US_TRY(us_idnames_add(t, x->u.i, n->u.str.s));
		}
	}
	us_idnames_sort(t);
	return US_OK;
}

static enum us_status optim_slot(struct walk *w, cJSON *scalars,
				 const char *pname, const struct us_pk *slot,
				 const struct us_pk *v)
{
	struct us_torch_tensor tt;
	char name[4096];
	enum us_status st;
	bool m;

	if (slot->kind != US_PK_STR ||
	    snprintf(name, sizeof(name), "state.%s.%s", pname, slot->u.str.s) >=
	    (int)sizeof(name))
		return US_OK;
	st = us_torch_match(v, &tt, &m, &w->why);
	if (st != US_OK)
		return us_err_set(w->err, st, w->sd->files[w->file].relpath,
				  "'%s': %s", name, w->why.msg);
	if (m)
		return add_tensor(w, name, &tt); /* unwrapped later (source.c) */
	/* A scalar's key is final here: "state.<unwrapped param>.<slot>",
	 * as its tensors are named and as the DCP reader keys them. */
	strcpy(name, "state.");
	us_unwrap_name(pname, w->sd->names, name + 6);
	if (strlen(name) + strlen(slot->u.str.s) + 2 > sizeof(name))
		return US_OK;
	strcat(strcat(name, "."), slot->u.str.s);
	cJSON_AddItemToObject(scalars, name,
			      us_pk_to_json_budget(v, &w->json_budget));
	return US_OK;
}

static enum us_status read_optimizer(struct walk *w, const struct us_pk *root)
{
	const struct us_pk *opt = find_optimizer(root), *state, *groups;
	struct us_idnames ids = { 0 };
	cJSON *tree, *scalars, *jgroups;
	enum us_status rc = US_OK;

	if (!opt)
		return US_OK;
	state = us_pk_dict_get(opt, "state");
	groups = us_pk_dict_get(opt, "param_groups");
	w->dst = us_sd_optim(w->sd);
	tree = cJSON_CreateObject();
	scalars = cJSON_AddObjectToObject(tree, "scalars");
	jgroups = us_pk_to_json_budget(groups, &w->json_budget);
	if (!w->dst || !tree || !scalars || !jgroups ||
	    !cJSON_AddItemToObject(tree, "param_groups", jgroups)) {
		/* Not added to tree, so not freed with it (leaked when an
		 * allocation failed: tests/faultinject). */
		cJSON_Delete(jgroups);
		cJSON_Delete(tree);
		return us_err_set(w->err, US_E_NOMEM, ".", "out of memory");
	}
	if (param_table(groups, &ids) != US_OK)
		rc = us_err_set(w->err, US_E_NOMEM, ".", "out of memory");
	/* ids -> names, then every name unwrapped */
	if (rc == US_OK && (us_idnames_name_params(jgroups, &ids) != US_OK ||
			    us_unwrap_json_groups(jgroups, w->sd->names) != US_OK))
		rc = us_err_set(w->err, US_E_NOMEM, ".", "out of memory");
	for (size_t i = 0; us_pk_is_dictlike(state) && rc == US_OK &&
			   i < state->coll->keys.n; i++) {
		const struct us_pk *id = state->coll->keys.v[i];
		const struct us_pk *slots = state->coll->vals.v[i];
		const char *pname = id->kind == US_PK_INT ? us_idnames_get(&ids, id->u.i) : NULL;

		for (size_t j = 0; pname && us_pk_is_dictlike(slots) && rc == US_OK &&
				   j < slots->coll->keys.n; j++)
			rc = optim_slot(w, scalars, pname, slots->coll->keys.v[j],
					slots->coll->vals.v[j]);
	}
	if (rc == US_OK && !(w->sd->optim_json = cJSON_Print(tree)))
		rc = us_err_set(w->err, US_E_NOMEM, ".", "out of memory");
	us_idnames_free(&ids);
	cJSON_Delete(tree);
	w->dst = w->sd;
	return rc;
}

/* Does the archive hold any storage record (<prefix>/data/<key>)? */
static bool has_storages(const struct us_zip *z)
{
	size_t plen = strlen(z->prefix);

	for (size_t i = 0; i < z->n; i++)
		if (!strncmp(z->v[i].name, z->prefix, plen) &&
		    !strncmp(z->v[i].name + plen, "/data/", 6))
			return true;
	return false;
}

static enum us_status torch_read_file(struct us_statedict *sd,
				      const struct us_dir *dir,
				      const char *relpath, struct us_err *err)
{
	struct us_torch_archive ta;
	struct us_arena arena;
	struct us_sbuf name;
	struct walk w = { .sd = sd, .dst = sd, .ta = &ta, .err = err,
			  .json_budget = US_PK_JSON_BUDGET };
	const struct us_pk *model;
	size_t before;
	enum us_status rc;

	US_TRY(us_sd_open_file(sd, dir, relpath, &w.file, err));
	us_arena_init(&arena);
	us_sbuf_init(&name);
	rc = us_torch_archive_open(&ta, &sd->files[w.file], 0,
				   (uint64_t)sd->files[w.file].size, &arena,
				   &w.why);
	if (rc != US_OK) {
		rc = us_err_set(err, rc, relpath, "%s", w.why.msg);
		goto out;
	}
	/* --no-unwrap keeps the container level too (names.h) */
	model = sd->names && sd->names->no_unwrap ? ta.root : model_root(ta.root);
	before = sd->ntensors + (sd->optim ? sd->optim->ntensors : 0);
	rc = walk(&w, model, &name, 0, model == ta.root);
	if (rc == US_OK)
		rc = read_optimizer(&w, ta.root);
	if (rc == US_OK && before == sd->ntensors + (sd->optim ? sd->optim->ntensors : 0) &&
	    !find_optimizer(ta.root) && has_storages(&ta.zip))
		rc = us_err_set(err, US_E_UNSUPPORTED, relpath,
				"holds tensor data but no dict of tensors (a "
				"pickled nn.Module or another object?): save its "
				"state_dict() instead");
out:
	us_sbuf_free(&name);
	us_arena_free(&arena);
	return rc;
}

/* torch.save archives are zips; before torch 1.6 they were bare pickles. */
static enum us_status torch_read_checked(struct us_statedict *sd,
					 const struct us_dir *dir,
					 const char *relpath, struct us_err *err)
{
	unsigned char magic[4] = {0};
	struct us_file f;

	/* Anything that does not open as a regular file (a FIFO included:
	 * never blocked on) is refused by us_sd_open_file below. */
	if (us_file_open(dir, relpath, &f) == US_OK) {
		enum us_status rc = us_file_pread(&f, magic, 4, 0);

		us_file_close(&f);
		if (rc == US_OK && memcmp(magic, "PK\x03\x04", 4) != 0)
			return us_err_set(err, US_E_UNSUPPORTED, relpath,
					  "not a zip: the legacy (torch < 1.6) "
					  "torch.save format is not supported; "
					  "re-save it with a current torch");
	}
	return torch_read_file(sd, dir, relpath, err);
}

static bool is_torch_name(const char *n)
{
	return us_path_has_suffix(n, ".bin") || us_path_has_suffix(n, ".pt") ||
	       us_path_has_suffix(n, ".pth") || us_path_has_suffix(n, ".ckpt");
}

/* The one torch.save file of a directory without an index. */
static enum us_status pick_single(char **names, size_t n, const char **pick,
				  struct us_err *err)
{
	static const char *const preferred[] = {
		"pytorch_model.bin", "model.bin", "model.pt", "model.pth",
		"checkpoint.pt", "checkpoint.pth",
	};
	const char *found = NULL;

	for (size_t p = 0; p < sizeof(preferred) / sizeof(*preferred); p++)
		for (size_t i = 0; i < n; i++)
			if (!strcmp(names[i], preferred[p]))
				return *pick = names[i], US_OK;
	for (size_t i = 0; i < n; i++) {
		if (!is_torch_name(names[i]))
			continue;
		if (found)
			return us_err_set(err, US_E_UNSUPPORTED, ".",
					  "several torch.save files (%s, %s) "
					  "and no index: mount one file", found,
					  names[i]);
		found = names[i];
	}
	*pick = found;
	return found ? US_OK
		     : us_err_set(err, US_E_FORMAT, ".", "no torch.save file");
}

static enum us_status torch_read_dir(struct us_statedict *sd,
				     const struct us_dir *dir,
				     struct us_err *err)
{
	const char *index = NULL, *pick = NULL;
	char **names;
	size_t n;
	enum us_status rc;

	if (us_dirlist(dir, &names, &n) != US_OK)
		return us_err_set(err, US_E_IO, ".", "cannot list the directory");
	/* transformers' order: pytorch_model.bin, then the index */
	for (size_t i = 0; i < n && !pick; i++)
		if (!strcmp(names[i], "pytorch_model.bin"))
			pick = names[i];
	rc = pick ? US_OK : us_index_find(names, n, "pytorch_model" TORCH_INDEX_SUFFIX,
					  TORCH_INDEX_SUFFIX, &index, err);
	if (rc == US_OK && index) {
		rc = us_index_read(sd, dir, index, torch_read_checked, err);
	} else if (rc == US_OK && (pick || (rc = pick_single(names, n, &pick, err)) == US_OK)) {
		rc = torch_read_checked(sd, dir, pick, err);
		/* a lone file under another name stays visible (model.h) */
		if (rc == US_OK && strcmp(pick, "pytorch_model.bin") != 0)
			us_sd_unconsume(sd, pick);
	}
	us_dirlist_free(names, n);
	return rc;
}

static bool torch_dir_entry(const char *name)
{
	return is_torch_name(name) || us_path_has_suffix(name, TORCH_INDEX_SUFFIX);
}

static bool torch_probe(const struct us_dir *dir, const char *file)
{
	if (file)
		return is_torch_name(file);
	return us_dir_any(dir, torch_dir_entry);
}

static enum us_status torch_read(struct us_statedict *sd,
				 const struct us_dir *dir,
				 const char *file,
				 const struct us_source_opts *opts,
				 struct us_err *err)
{
	(void)opts; /* no format options */
	sd->format = "torch";
	if (file)
		return torch_read_checked(sd, dir, file, err);
	return torch_read_dir(sd, dir, err);
}

const struct us_reader us_reader_torch = {
	.name = "torch",
	.probe = torch_probe,
	.read = torch_read,
};
