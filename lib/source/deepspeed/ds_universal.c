/*
 * ds_universal.c - the DeepSpeed universal checkpoint reader (the output of
 * deepspeed.checkpoint.ds_to_universal; docs/deepspeed.md).
 *
 * SOURCE is the universal folder (<tag>_universal/: zero/ and copies of the
 * model states files) or a checkpoint root whose "latest_universal" names
 * it -- when the root has no "latest" (that one is the ZeRO checkpoint, which
 * the ZeRO reader serves), or with --format=deepspeed-universal.
 *
 * Every parameter has its own folder zero/<name>/ with fp32.pt, exp_avg.pt
 * and exp_avg_sq.pt: each a torch.save of the whole tensor, either bare and
 * flat (ZeRO-3) or as {"param": tensor, "cat_dim": ..., ...} (ZeRO-1/2).  As
 * DeepSpeed's loader does, the parameter list and shapes come from the model
 * states' param_shapes and each file's tensor is taken as a flat run of
 * numel elements; the other keys describe tensor-parallel merging and are
 * not needed.  ds_to_universal also writes fp32.pt for the module's entries
 * that have no optimizer state (buffers, frozen and tied names, upcast to
 * fp32): DeepSpeed's loader never reads those, and neither does this one --
 * buffers come from the model states as stored, tied names are aliases
 * (shared_params); only a frozen parameter's fp32.pt is used, since ZeRO-3
 * has no other whole copy of it (its fragments are the fallback).
 */
#include "ds_common.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../path.h"

#define UC_OPTIM "zero/optimizer_state.pt"

struct uc {
	struct us_statedict *sd;
	const struct us_dir *dir;
	char prefix[US_DS_TAG_MAX + 2]; /* "<tag>/" or "" */
	struct us_arena arena;
	struct us_ds_file *model;       /* per rank (one unless ZeRO-3) */
	uint32_t model_cap;             /* its entries */
	uint32_t nmodel;
	bool z3;
	const struct us_pk *ms;         /* rank 0's model states */
	struct us_ds_file optim;        /* zero/optimizer_state.pt */
	struct us_ds_param *params;
	uint32_t nparams, ngroups;
	bool module_weights;
	struct us_err *err;
};

/* ---- finding the folder ------------------------------------------------------ */

static bool is_universal(const struct us_dir *dir)
{
	return us_dir_exists(dir, UC_OPTIM) &&
	       us_dir_any(dir, us_ds_model_states_name);
}

static bool uc_probe(const struct us_dir *dir, const char *file)
{
	char tag[US_DS_TAG_MAX + 1];

	if (file)
		return false;
	if (is_universal(dir))
		return true;
	/* a root with both: "latest" is what DeepSpeed loads by default.  A
	 * root with only latest_universal is ours even when it or what it
	 * names is broken: the refusal then says what is wrong. */
	return us_ds_tag(dir, "latest", tag, NULL) == US_DS_TAG_ABSENT &&
	       us_ds_tag(dir, "latest_universal", tag, NULL) !=
	       US_DS_TAG_ABSENT;
}

/* "<prefix><a><b>" in the arena (NULL when out of memory). */
static char *relpath(struct uc *u, const char *a, const char *b)
{
	size_t n = strlen(u->prefix) + strlen(a) + strlen(b) + 1;
	char *p = us_arena_alloc(&u->arena, n);

	if (p)
		snprintf(p, n, "%s%s%s", u->prefix, a, b);
	return p;
}

/* "<prefix>zero/<param>/<file>" */
static char *state_path(struct uc *u, const char *param, const char *file)
{
	size_t n = strlen(u->prefix) + strlen(param) + strlen(file) + 8;
	char *p = us_arena_alloc(&u->arena, n);

	if (p)
		snprintf(p, n, "%szero/%s/%s", u->prefix, param, file);
	return p;
}

static enum us_status locate(struct uc *u)
{
	char tag[US_DS_TAG_MAX + 1];
	struct us_err why;

	if (is_universal(u->dir))
		return US_OK;
	switch (us_ds_tag(u->dir, "latest_universal", tag, &why)) {
	case US_DS_TAG_ABSENT:
		return us_err_set(u->err, US_E_FORMAT, ".", "no %s here, and "
				  "no latest_universal naming a universal "
				  "checkpoint folder", UC_OPTIM);
	case US_DS_TAG_BAD:
		return us_err_set(u->err, why.status, "latest_universal",
				  "%s", why.msg);
	case US_DS_TAG_DIR:
		break;
	}
	snprintf(u->prefix, sizeof(u->prefix), "%s/", tag);
	US_TRY(us_sd_consume(u->sd, "latest_universal"));
	if (!us_dir_exists(u->dir, relpath(u, UC_OPTIM, "")))
		return us_err_set(u->err, US_E_FORMAT, relpath(u, UC_OPTIM, ""),
				  "missing: not a universal checkpoint");
	return US_OK;
}

/* ---- the model states files ------------------------------------------------- */

static enum us_status note_model(struct uc *u, const char *name, long r, bool z3)
{
	struct us_ds_file *f;

	if (u->nmodel && z3 != u->z3)
		return us_err_set(u->err, US_E_FORMAT, relpath(u, name, ""),
				  "ZeRO-3 and ZeRO-1/2 model states side by side");
	if (r < 0 || r >= US_DS_MAX_RANKS)
		return us_err_set(u->err, US_E_FORMAT, relpath(u, name, ""),
				  "rank out of range or given twice");
	f = us_ds_rank_slot(&u->arena, &u->model, &u->model_cap, (uint32_t)r);
	if (!f)
		return us_err_set(u->err, US_E_NOMEM, ".", "out of memory");
	if (f->present)
		return us_err_set(u->err, US_E_FORMAT, relpath(u, name, ""),
				  "rank out of range or given twice");
	u->z3 = z3;
	f->present = true;
	f->relpath = relpath(u, name, "");
	if ((uint32_t)r + 1 > u->nmodel)
		u->nmodel = (uint32_t)r + 1;
	return f->relpath ? US_OK :
	       us_err_set(u->err, US_E_NOMEM, ".", "out of memory");
}

static enum us_status classify(struct uc *u, const char *name)
{
	long r, mp;

	if (us_ds_rank_name(name, "_model_states.pt", &r, &mp) && mp == 0)
		return note_model(u, name, r, true);
	if (!strcmp(name, "mp_rank_00_model_states.pt"))
		return note_model(u, name, 0, false);
	if (us_ds_model_states_name(name) && (!strncmp(name, "mp_rank_", 8) ||
					us_ds_rank_name(name, "_model_states.pt", &r, &mp)))
		return us_err_set(u->err, US_E_UNSUPPORTED, relpath(u, name, ""),
				  "model (tensor) parallel checkpoints are not "
				  "supported");
	return US_OK;
}

static enum us_status find_model(struct uc *u)
{
	struct us_dir tdir = US_DIR_NONE;
	enum us_status rc = US_OK;
	char **names;
	size_t n;

	if (us_dir_openat(u->dir, *u->prefix ? u->prefix : ".", &tdir) < 0 ||
	    us_dirlist(&tdir, &names, &n) != US_OK) {
		us_dir_close(&tdir);
		return us_err_set(u->err, US_E_IO, *u->prefix ? u->prefix : ".",
				  "cannot list it");
	}
	for (size_t i = 0; i < n && rc == US_OK; i++)
		rc = classify(u, names[i]);
	us_dirlist_free(names, n);
	us_dir_close(&tdir);
	return rc;
}

static enum us_status open_model(struct uc *u)
{
	char buf[96];

	for (uint32_t r = 0; r < u->nmodel; r++) {
		if (!u->model[r].present) {
			snprintf(buf, sizeof(buf), "zero_pp_rank_%u_mp_rank_00_"
				 "model_states.pt", r);
			return us_err_set(u->err, US_E_FORMAT, relpath(u, buf, ""),
					  "missing (model states files up to rank "
					  "%u exist)", u->nmodel - 1);
		}
		US_TRY(us_ds_open(u->sd, u->dir, &u->model[r], &u->arena, u->err));
	}
	u->ms = u->model[0].ta.root;
	if (!us_pk_dict_get(u->ms, "param_shapes") ||
	    !us_pk_dict_get(u->ms, "buffer_names"))
		return us_err_set(u->err, US_E_FORMAT, u->model[0].relpath,
				  "not a DeepSpeed model states file (no "
				  "param_shapes/buffer_names)");
	return us_ds_params(&u->arena, u->ms, u->model[0].relpath, &u->params,
			    &u->nparams, &u->ngroups, u->err);
}

/* zero/optimizer_state.pt: its stage must agree with the model states. */
static enum us_status open_optim(struct uc *u)
{
	const struct us_pk *root;
	int stage;
	int64_t pc;

	u->optim.relpath = relpath(u, UC_OPTIM, "");
	if (!u->optim.relpath)
		return us_err_set(u->err, US_E_NOMEM, ".", "out of memory");
	US_TRY(us_ds_open(u->sd, u->dir, &u->optim, &u->arena, u->err));
	root = u->optim.ta.root;
	stage = us_ds_stage(us_pk_dict_get(root, "zero_stage"));
	if (stage < 1 || stage > 3 || (stage == 3) != u->z3)
		return us_err_set(u->err, US_E_FORMAT, u->optim.relpath,
				  "zero_stage %d, but %s model states files", stage,
				  u->z3 ? "ZeRO-3" : "ZeRO-1/2");
	pc = us_ds_partition_count(us_pk_dict_get(root, "partition_count"));
	if (u->z3 && pc > (int64_t)u->nmodel && pc <= US_DS_MAX_RANKS) {
		char buf[96];

		snprintf(buf, sizeof(buf), "zero_pp_rank_%u_mp_rank_00_"
			 "model_states.pt", u->nmodel);
		return us_err_set(u->err, US_E_FORMAT, relpath(u, buf, ""),
				  "missing (partition_count is %lld)", (long long)pc);
	}
	if (u->z3 && pc != (int64_t)u->nmodel)
		return us_err_set(u->err, US_E_FORMAT, u->optim.relpath,
				  "partition_count is %lld but %u model states "
				  "files exist", (long long)pc, u->nmodel);
	return US_OK;
}

/* ---- zero/<param>/<state>.pt ------------------------------------------------- */

/* A param name becomes a path component: it must not climb out. */
static bool safe_component(const char *n)
{
	return *n && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..");
}

/* The tensor of a state file: bare (ZeRO-3) or under "param" (ZeRO-1/2),
 * whole and contiguous, as DeepSpeed's .view(-1) requires. */
static enum us_status state_tensor(struct uc *u, const struct us_ds_file *f,
				   uint64_t numel, struct us_torch_tensor *tt,
				   uint64_t *off)
{
	const struct us_pk *v = f->ta.root;
	struct us_err why;
	enum us_status st;
	uint64_t n = 1;
	int64_t step = 1;

	if (us_pk_is_dictlike(v))
		v = us_pk_dict_get(v, "param");
	st = us_torch_expect(v, tt, "holds no tensor (bare, or under 'param')",
			     &why);
	if (st != US_OK)
		return us_err_set(u->err, st, f->relpath, "%s", why.msg);
	for (uint32_t k = tt->ndim; k-- > 0; step *= (int64_t)tt->shape[k]) {
		if (tt->shape[k] > 1 && tt->strides[k] != step)
			return us_err_set(u->err, US_E_FORMAT, f->relpath,
					  "tensor is not contiguous");
		n *= tt->shape[k];
	}
	if (n != numel)
		return us_err_set(u->err, US_E_FORMAT, f->relpath,
				  "tensor holds %llu elements, param_shapes say %llu",
				  (unsigned long long)n, (unsigned long long)numel);
	st = us_torch_extent(&f->ta, tt, off, &why);
	if (st != US_OK)
		return us_err_set(u->err, st, f->relpath, "%s", why.msg);
	return US_OK;
}

/*
 * zero/<p->name>/<state>.pt as tensor @tname of @dst, shaped as @p.  A
 * missing file is refused when @required, else *@found says so.
 */
static enum us_status add_state(struct uc *u, struct us_statedict *dst,
				const char *tname, const struct us_ds_param *p,
				const char *state, bool required, bool *found)
{
	struct us_ds_file f = {0};
	struct us_torch_tensor tt;
	struct us_tensor *t;
	char file[32];
	uint64_t off;

	*found = false;
	if (!safe_component(p->name))
		return us_err_set(u->err, US_E_FORMAT, u->model[0].relpath,
				  "parameter name '%s' is not a folder name", p->name);
	snprintf(file, sizeof(file), "%s.pt", state);
	f.relpath = state_path(u, p->name, file);
	if (!f.relpath)
		return us_err_set(u->err, US_E_NOMEM, ".", "out of memory");
	if (!us_dir_exists(u->dir, f.relpath))
		return required ? us_err_set(u->err, US_E_FORMAT, f.relpath,
					     "missing (param_shapes lists '%s')",
					     p->name) : US_OK;
	*found = true;
	US_TRY(us_ds_open(u->sd, u->dir, &f, &u->arena, u->err));
	US_TRY(state_tensor(u, &f, p->numel, &tt, &off));
	/* one contiguous run: the parameter's own shape, row-major (the
	 * optimizer child has no files of its own: no us_sd_add_whole_tensor) */
	t = us_sd_add_tensor(dst, tname, tt.dtype, p->ndim, p->shape, 1,
			     f.relpath, u->err);
	if (!t)
		return u->err ? u->err->status : US_E_NOMEM;
	if (p->ndim)
		memcpy((uint64_t *)t->chunks[0].sizes, p->shape,
		       p->ndim * sizeof(uint64_t));
	t->chunks[0].src.file = f.file;
	t->chunks[0].src.offset = off;
	if (!t->numel)
		t->nchunks = 0;
	return US_OK;
}

static enum us_status add_params(struct uc *u)
{
	bool found;

	for (uint32_t i = 0; i < u->nparams; i++)
		US_TRY(add_state(u, u->sd, u->params[i].name, &u->params[i],
				 "fp32", true, &found));
	return US_OK;
}

/* Frozen params: their fp32.pt (ZeRO-1/2 conversions write one from the
 * module), else the model states' fragments, as the ZeRO reader serves them. */
static enum us_status add_frozen(struct uc *u)
{
	const struct us_pk *shapes = us_pk_dict_get(u->ms, "frozen_param_shapes");
	const struct us_pk *frags = us_pk_dict_get(u->ms, "frozen_param_fragments");

	for (size_t i = 0; us_pk_is_dictlike(shapes) && i < shapes->coll->keys.n; i++) {
		const struct us_pk *k = shapes->coll->keys.v[i];
		struct us_ds_param p = {0};
		bool found;

		if (k->kind != US_PK_STR ||
		    !us_ds_shape(&u->arena, shapes->coll->vals.v[i], &p.ndim,
				 &p.shape, &p.numel))
			return us_err_set(u->err, US_E_FORMAT, u->model[0].relpath,
					  "malformed frozen_param_shapes");
		p.name = k->u.str.s;
		US_TRY(add_state(u, u->sd, p.name, &p, "fp32", false, &found));
		if (found)
			continue;
		if (u->z3) {
			US_TRY(us_ds_add_frozen_z3(u->sd, &u->arena, u->model, u->nmodel,
						   p.name, shapes->coll->vals.v[i], u->err));
			continue;
		}
		if (!us_pk_dict_get(frags, p.name))
			return us_err_set(u->err, US_E_FORMAT, u->model[0].relpath,
					  "frozen '%s' has neither fp32.pt nor a "
					  "fragment", p.name);
		US_TRY(us_ds_add_plain(u->sd, &u->model[0], p.name,
				       us_pk_dict_get(frags, p.name), u->err));
	}
	return US_OK;
}

/* ---- the optimizer view ------------------------------------------------------ */

/* Adam's moments: a slot is served when the first param has its file, and
 * then every param must (DeepSpeed's loader reads all of them). */
static enum us_status add_optim(struct uc *u)
{
	static const char *const slots[] = {"exp_avg", "exp_avg_sq"};
	const struct us_pk *root = u->optim.ta.root, *groups;
	struct us_statedict *o = us_sd_optim(u->sd);
	char name[4096];

	if (!o)
		return us_err_set(u->err, US_E_NOMEM, ".", "out of memory");
	for (size_t s = 0; s < sizeof(slots) / sizeof(*slots); s++) {
		bool found = true;

		for (uint32_t i = 0; i < u->nparams; i++) {
			if (snprintf(name, sizeof(name), "state.%s.%s", u->params[i].name,
				     slots[s]) >= (int)sizeof(name))
				continue;
			US_TRY(add_state(u, o, name, &u->params[i], slots[s], i > 0 && found,
					 &found));
			if (!found)
				break; /* only possible for the first param */
		}
	}
	groups = us_pk_dict_get(root, "param_groups");
	if (!groups)
		groups = us_pk_dict_get(us_pk_dict_get(root, "optimizer_state_dict"),
					"param_groups");
	if (groups && (groups->kind == US_PK_LIST || groups->kind == US_PK_TUPLE))
		return us_ds_optim_json(u->sd, groups, u->params, u->nparams, u->err);
	return US_OK;
}

/* Every file under zero/<param>/ belongs to the checkpoint, even the ones
 * not served (step.pt, the buffers' and tied names' fp32.pt). */
static enum us_status consume_zero(struct uc *u)
{
	char *zero = relpath(u, "zero", ""), **names = NULL, **inner;
	size_t n = 0, m;
	struct us_dir zdir = US_DIR_NONE;
	enum us_status rc = US_OK;

	if (!zero || us_dir_openat(u->dir, zero, &zdir) < 0 ||
	    us_dirlist(&zdir, &names, &n) != US_OK)
		n = 0;
	for (size_t i = 0; i < n && rc == US_OK; i++) {
		struct us_dir pdir = US_DIR_NONE;
		struct stat st;

		/* a symlink to a directory is not a parameter's folder */
		if (us_dir_statat(&zdir, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) ||
		    us_dir_openat(&zdir, names[i], &pdir) < 0 ||
		    us_dirlist(&pdir, &inner, &m) != US_OK) {
			us_dir_close(&pdir);
			continue;
		}
		for (size_t j = 0; j < m && rc == US_OK; j++) {
			char *rp = state_path(u, names[i], inner[j]);

			rc = rp ? us_sd_consume(u->sd, rp) : US_E_NOMEM;
		}
		us_dirlist_free(inner, m);
		us_dir_close(&pdir);
	}
	if (names)
		us_dirlist_free(names, n);
	us_dir_close(&zdir);
	return rc == US_OK ? US_OK : us_err_set(u->err, rc, ".", "out of memory");
}

/* ---- the reader ------------------------------------------------------------- */

static enum us_status uc_read_all(struct uc *u)
{
	US_TRY(locate(u));
	US_TRY(find_model(u));
	if (!u->nmodel)
		return us_err_set(u->err, US_E_FORMAT, *u->prefix ? u->prefix : ".",
				  "no *_model_states.pt file");
	US_TRY(open_model(u));
	US_TRY(open_optim(u));
	if (u->module_weights && u->z3)
		return us_ds_module_refusal(u->model[0].relpath, u->err);
	if (u->module_weights) {
		US_TRY(us_ds_add_module(u->sd, &u->model[0], US_DS_MODULE_ALL, u->err));
	} else {
		US_TRY(add_params(u));
		US_TRY(add_frozen(u));
		US_TRY(us_ds_add_module(u->sd, &u->model[0], US_DS_BUFFERS_STORED,
					 u->err));
	}
	US_TRY(add_optim(u));
	US_TRY(us_ds_add_ties(u->sd, u->ms, u->err));
	return consume_zero(u);
}

static enum us_status uc_read(struct us_statedict *sd, const struct us_dir *dir,
			      const char *file, const struct us_source_opts *opts,
			      struct us_err *err)
{
	struct uc u = { .sd = sd, .dir = dir, .err = err,
			.module_weights = opts &&
					  opts->ds_weights == US_DS_WEIGHTS_MODULE };
	enum us_status rc;

	(void)file;
	sd->format = "deepspeed-universal";
	us_arena_init(&u.arena);
	rc = uc_read_all(&u);
	us_arena_free(&u.arena);
	return rc;
}

const struct us_reader us_reader_ds_universal = {
	.name = "deepspeed-universal",
	.probe = uc_probe,
	.read = uc_read,
};
