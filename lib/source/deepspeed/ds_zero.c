/*
 * ds_zero.c - the DeepSpeed ZeRO reader (stages 1-3, formats.md).
 *
 * SOURCE is a checkpoint root (a "latest" file naming the tag directory) or
 * the tag directory itself.  The fp32 master weights live only in the
 * optimizer files, as flat 1-D tensors per rank and param group; the model
 * states file says which parameters they hold (param_shapes), in order.
 * Every parameter becomes chunks pointing into those flat tensors
 * (ds_flat.h), laid out as DeepSpeed's zero_to_fp32.py reads them:
 *  - ZeRO-1/2: per group, the ranks' partitions concatenated; parameters one
 *    after another (plus param_alignment_paddings when recorded);
 *  - ZeRO-3: each parameter split on its own, ceil(numel / W) elements per
 *    rank, at the same offset of every rank's vector (its groups
 *    concatenated); the last rank's piece is padded.
 * Buffers and ZeRO-2 frozen parameters are plain tensors of the model states
 * file; ZeRO-3 frozen parameters are fragments of every rank's model states.
 * shared_params (tied names) become aliases.  Adam's moments are rebuilt the
 * same way into the optimizer view.  Nothing is read but the pickles.
 * With --deepspeed-weights=module (ZeRO-1/2), the model view is instead the
 * 16-bit "module" state dict of the model states file, as saved.
 */
#include "../source.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../path.h"
#include "ds_flat.h"
#include "ds_common.h"

#define DS_TAG_MAX US_DS_TAG_MAX

struct ds {
	struct us_statedict *sd;
	const struct us_dir *dir;
	char prefix[DS_TAG_MAX + 2]; /* "<tag>/" or "" */
	char where[DS_TAG_MAX + 2];  /* "<tag>" or ".": for messages */
	struct us_arena arena;
	struct us_ds_file *optim, *model; /* per rank (model: one for ZeRO <= 2) */
	uint32_t optim_cap, model_cap;    /* their entries */
	uint32_t world, nmodel, ngroups;
	int stage;
	const struct us_pk **osd;      /* per rank: optimizer_state_dict */
	const struct us_pk *ms;        /* rank 0's model states */
	struct us_ds_param *params;
	uint32_t nparams;
	bool module_weights;           /* --deepspeed-weights=module */
	struct us_err *err;
};

/* ---- finding the files ---------------------------------------------------- */

static bool has_model_states(const struct us_dir *dir)
{
	return us_dir_any(dir, us_ds_model_states_name);
}

static bool is_safetensors(const char *name)
{
	return us_path_has_suffix(name, ".safetensors");
}

/* --format=deepspeed on a folder that is no DeepSpeed checkpoint at all
 * says so, rather than naming a "latest" that is not there. */
static bool is_global_step(const char *name)
{
	return !strncmp(name, "global_step", 11);
}

static bool ds_probe(const struct us_dir *dir, const char *file)
{
	char tag[DS_TAG_MAX + 1];
	struct us_dir d;
	bool yes;

	if (file)
		return false;
	if (has_model_states(dir))
		return true;
	switch (us_ds_tag(dir, "latest", tag, NULL)) {
	case US_DS_TAG_ABSENT:
		return false;
	case US_DS_TAG_BAD:
		/* a "latest" that leads nowhere (names nothing, is empty,
		 * climbs out, ...): ours, so that the refusal names it --
		 * unless safetensors files are there (tag directories pruned
		 * from an HF Trainer checkpoint: its model.safetensors is the
		 * model) */
		return !us_dir_any(dir, is_safetensors);
	case US_DS_TAG_DIR:
		break;
	}
	if (us_dir_openat(dir, tag, &d) < 0)
		return false;
	yes = has_model_states(&d);
	us_dir_close(&d);
	return yes;
}

static char *relpath(struct ds *d, const char *name)
{
	char *p = us_arena_alloc(&d->arena, strlen(d->prefix) + strlen(name) + 1);

	if (p)
		strcat(strcpy(p, d->prefix), name);
	return p;
}

/* Record the file @name of rank @r in @tab (@cap entries, the highest
 * rank + 1 in @n). */
static enum us_status note_rank(struct ds *d, struct us_ds_file **tab,
				uint32_t *cap, uint32_t *n, long r,
				const char *name)
{
	struct us_ds_file *f;

	if (r < 0 || r >= US_DS_MAX_RANKS)
		return us_err_set(d->err, US_E_FORMAT, name, "rank out of range");
	f = us_ds_rank_slot(&d->arena, tab, cap, (uint32_t)r);
	if (!f)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	if (f->present)
		return us_err_set(d->err, US_E_FORMAT, relpath(d, name),
				  "a second file for rank %ld (with %s)", r,
				  f->relpath);
	f->present = true;
	f->relpath = relpath(d, name);
	if (!f->relpath)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	if ((uint32_t)r + 1 > *n)
		*n = (uint32_t)r + 1;
	return US_OK;
}

static enum us_status classify(struct ds *d, const char *name)
{
	long r, mp;

	if (us_ds_rank_name(name, "_optim_states.pt", &r, &mp) ||
	    us_ds_rank_name(name, "_model_states.pt", &r, &mp)) {
		if (mp != 0)
			return us_err_set(d->err, US_E_UNSUPPORTED,
					  relpath(d, name), "model (tensor) "
					  "parallel checkpoints are not supported");
		if (us_path_has_suffix(name, "_optim_states.pt"))
			return note_rank(d, &d->optim, &d->optim_cap, &d->world, r,
					 name);
		return note_rank(d, &d->model, &d->model_cap, &d->nmodel, r,
				 name);
	}
	if (!strncmp(name, "mp_rank_", 8) &&
	    us_path_has_suffix(name, "_model_states.pt")) {
		if (strcmp(name, "mp_rank_00_model_states.pt"))
			return us_err_set(d->err, US_E_UNSUPPORTED,
					  relpath(d, name), "model (tensor) "
					  "parallel checkpoints are not supported");
		return note_rank(d, &d->model, &d->model_cap, &d->nmodel, 0,
				 name);
	}
	return US_OK;
}

static enum us_status find_files(struct ds *d)
{
	char **names;
	size_t n;
	enum us_status rc = US_OK;
	struct us_dir tdir;

	if (us_dir_openat(d->dir, *d->prefix ? d->prefix : ".", &tdir) < 0)
		return us_err_set(d->err, US_E_FORMAT, "latest",
				  "names a missing directory '%s'", d->where);
	if (us_dirlist(&tdir, &names, &n) != US_OK) {
		us_dir_close(&tdir);
		return us_err_set(d->err, US_E_IO, d->where, "cannot list it");
	}
	for (size_t i = 0; i < n && rc == US_OK; i++)
		rc = classify(d, names[i]);
	us_dirlist_free(names, n);
	us_dir_close(&tdir);
	if (rc == US_OK && !d->world)
		rc = us_err_set(d->err, US_E_FORMAT, d->where,
				"no *_optim_states.pt file: the fp32 weights "
				"live only there");
	return rc;
}

/* The name DeepSpeed gives rank @r's file, for "missing" messages. */
static const char *expected_name(struct ds *d, const struct us_ds_file *tab,
				 uint32_t n, uint32_t r, const char *kind)
{
	char buf[128];
	const char *pfx = "";

	for (uint32_t i = 0; tab && i < n; i++) {
		if (!tab[i].present)
			continue;
		pfx = strstr(tab[i].relpath + strlen(d->prefix), "bf16_") ==
		      tab[i].relpath + strlen(d->prefix) ? "bf16_" :
		      strstr(tab[i].relpath + strlen(d->prefix), "fp16_") ==
		      tab[i].relpath + strlen(d->prefix) ? "fp16_" : "";
		break;
	}
	snprintf(buf, sizeof(buf), "%szero_pp_rank_%u_mp_rank_00_%s", pfx, r, kind);
	return relpath(d, buf);
}

/* ---- opening and parsing -------------------------------------------------- */

/* More rank files than @f's partition_count @pc (< world) says: name the
 * first one past it. */
static enum us_status extra_rank(struct ds *d, const struct us_ds_file *f,
				 int64_t pc)
{
	uint32_t r = pc > 0 ? (uint32_t)pc : 0;

	while (r < d->world && !d->optim[r].present)
		r++;
	if (r == d->world)
		return us_err_set(d->err, US_E_FORMAT, f->relpath,
				  "partition_count is %lld", (long long)pc);
	return us_err_set(d->err, US_E_FORMAT, d->optim[r].relpath,
			  "rank %u, but partition_count is %lld (%s)", r,
			  (long long)pc, f->relpath);
}

static enum us_status open_optim(struct ds *d)
{
	int64_t pc;

	d->osd = us_arena_calloc(&d->arena, d->world, sizeof(*d->osd));
	if (!d->osd)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	/* Remote: every rank's records fetched ahead, in parallel. */
	for (uint32_t r = 0; r < d->world; r++)
		if (d->optim[r].present)
			us_dir_advise(d->dir, d->optim[r].relpath, US_ADVISE_EDGE,
				      US_ADVISE_EDGE);
	for (uint32_t r = 0; r < d->world; r++) {
		struct us_ds_file *f = &d->optim[r];

		if (!f->present)
			return us_err_set(d->err, US_E_FORMAT,
					  expected_name(d, d->optim, d->world, r,
							"optim_states.pt"),
					  "missing (rank files up to %u exist)",
					  d->world - 1);
		US_TRY(us_ds_open(d->sd, d->dir, f, &d->arena, d->err));
		d->osd[r] = us_pk_dict_get(f->ta.root, "optimizer_state_dict");
		if (!us_pk_is_dictlike(d->osd[r]))
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "no optimizer_state_dict");
		if (us_ds_stage(us_pk_dict_get(d->osd[r], "zero_stage")) !=
		    (r ? d->stage : us_ds_stage(us_pk_dict_get(d->osd[r], "zero_stage"))))
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "zero_stage differs from rank 0's");
		if (!r)
			d->stage = us_ds_stage(us_pk_dict_get(d->osd[0], "zero_stage"));
		pc = us_ds_partition_count(us_pk_dict_get(d->osd[r], "partition_count"));
		if (pc != (int64_t)d->world) {
			if (pc > (int64_t)d->world && pc <= US_DS_MAX_RANKS)
				return us_err_set(d->err, US_E_FORMAT,
						  expected_name(d, d->optim, d->world,
								d->world, "optim_states.pt"),
						  "missing (partition_count is %lld)",
						  (long long)pc);
			return extra_rank(d, f, pc);
		}
	}
	if (d->stage < 1 || d->stage > 3)
		return us_err_set(d->err, US_E_UNSUPPORTED, d->optim[0].relpath,
				  "zero_stage %d is not a ZeRO checkpoint", d->stage);
	return US_OK;
}

static enum us_status open_model(struct ds *d)
{
	uint32_t want = d->stage == 3 ? d->world : 1;

	/* fewer: the loop names the first missing rank's file */
	if (d->nmodel > want || !d->nmodel)
		return us_err_set(d->err, US_E_FORMAT,
				  d->nmodel ? d->model[0].relpath : d->where,
				  "%u model states files for ZeRO-%d with %u ranks",
				  d->nmodel, d->stage, d->world);
	for (uint32_t r = 0; r < want && r < d->nmodel; r++)
		if (d->model[r].present)
			us_dir_advise(d->dir, d->model[r].relpath, US_ADVISE_EDGE,
				      US_ADVISE_EDGE);
	for (uint32_t r = 0; r < want; r++) {
		/* the table holds ranks below nmodel only */
		if (r >= d->nmodel || !d->model[r].present)
			return us_err_set(d->err, US_E_FORMAT,
					  expected_name(d, NULL, 0, r,
							"model_states.pt"),
					  "missing");
		US_TRY(us_ds_open(d->sd, d->dir, &d->model[r], &d->arena, d->err));
	}
	d->ms = d->model[0].ta.root;
	if (!us_pk_dict_get(d->ms, "param_shapes") ||
	    !us_pk_dict_get(d->ms, "buffer_names"))
		return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
				  "not a DeepSpeed model states file (no "
				  "param_shapes/buffer_names)");
	return US_OK;
}

/* ---- parameters ----------------------------------------------------------- */

/* Rank @r's flat tensor for group @g (@slot NULL: the fp32 weights, else
 * that Adam slot), as a segment of @want elements (the fp32 partition's
 * length: slots carry the alignment padding the weights were saved without). */
static enum us_status segment(struct ds *d, uint32_t r, uint32_t g,
			      const char *slot, uint64_t want,
			      struct us_flat_seg *seg, enum us_dtype *dt)
{
	const struct us_pk *osd = d->osd[r], *v;
	struct us_torch_tensor tt;
	const char *path = d->optim[r].relpath;
	struct us_err why;
	enum us_status rc;

	if (!slot) {
		v = us_pk_at(us_pk_dict_get(osd, d->stage == 3 ? "fp32_flat_groups" :
					    "single_partition_of_fp32_groups"), g);
	} else {
		const struct us_pk *base = us_pk_dict_get(osd, d->stage == 3 ?
			"optimizer_state_dict" : "base_optimizer_state");
		const struct us_pk *st = us_pk_dict_get(base, "state");
		struct us_pk key = { .kind = US_PK_INT, .u.i = g };

		v = NULL;
		for (size_t i = 0; us_pk_is_dictlike(st) && i < st->coll->keys.n; i++)
			if (st->coll->keys.v[i]->kind == US_PK_INT &&
			    st->coll->keys.v[i]->u.i == key.u.i)
				v = us_pk_dict_get(st->coll->vals.v[i], slot);
	}
	rc = us_torch_expect(v, &tt, "not a tensor", &why);
	/* (One that is not 1-D contiguous has always been reported "not a
	 * tensor": kept so, messages are the contract.) */
	if (rc == US_OK && (tt.ndim != 1 || (tt.shape[0] > 1 && tt.strides[0] != 1)))
		rc = us_err_reason(&why, US_E_FORMAT, "not a tensor");
	if (rc != US_OK)
		return us_err_set(d->err, rc, path, "group %u %s: %s", g,
				  slot ? slot : "fp32 partition", why.msg);
	rc = us_torch_extent(&d->optim[r].ta, &tt, &seg->offset, &why);
	if (rc != US_OK)
		return us_err_set(d->err, rc, path, "group %u: %s", g, why.msg);
	if (want == UINT64_MAX)
		want = tt.shape[0];
	if (tt.shape[0] < want)
		return us_err_set(d->err, US_E_FORMAT, path,
				  "group %u %s holds %llu elements, the fp32 "
				  "partition %llu", g, slot ? slot : "",
				  (unsigned long long)tt.shape[0],
				  (unsigned long long)want);
	seg->file = d->optim[r].file;
	seg->numel = want;
	*dt = tt.dtype;
	return US_OK;
}

/*
 * The flat vectors of @slot: ZeRO-2, one per group (ranks concatenated);
 * ZeRO-3, one per rank (groups concatenated).  @fp32 (the weights' vectors,
 * NULL when building them) gives each segment's length.
 */
static enum us_status vectors(struct ds *d, const char *slot,
			      const struct us_flat_vec *fp32,
			      struct us_flat_vec **out)
{
	bool z3 = d->stage == 3;
	uint32_t nv = z3 ? d->world : d->ngroups, ns = z3 ? d->ngroups : d->world;
	struct us_flat_vec *v = us_arena_calloc(&d->arena, nv + 1, sizeof(*v));

	if (!v)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	for (uint32_t i = 0; i < nv; i++) {
		v[i].segs = us_arena_calloc(&d->arena, ns + 1, sizeof(*v[i].segs));
		v[i].nsegs = ns;
		if (!v[i].segs)
			return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
		for (uint32_t j = 0; j < ns; j++) {
			uint32_t r = z3 ? i : j, g = z3 ? j : i;
			uint64_t want = fp32 ? fp32[i].segs[j].numel : UINT64_MAX;
			enum us_dtype dt;

			US_TRY(segment(d, r, g, slot, want, &v[i].segs[j], &dt));
			if (j && dt != v[i].dtype)
				return us_err_set(d->err, US_E_FORMAT,
						  d->optim[r].relpath,
						  "group %u: dtype differs", g);
			v[i].dtype = dt;
			v[i].numel += v[i].segs[j].numel;
		}
	}
	*out = v;
	return US_OK;
}

static enum us_status check_group_counts(struct ds *d)
{
	const char *key = d->stage == 3 ? "fp32_flat_groups" :
			  "single_partition_of_fp32_groups";

	for (uint32_t r = 0; r < d->world; r++)
		if (us_pk_len(us_pk_dict_get(d->osd[r], key)) != d->ngroups)
			return us_err_set(d->err, US_E_FORMAT, d->optim[r].relpath,
					  "%zu %s, param_shapes has %u groups",
					  us_pk_len(us_pk_dict_get(d->osd[r], key)),
					  key, d->ngroups);
	return US_OK;
}

/* ZeRO-1/2 offsets: params in order, then padding to 2 * W (zero_to_fp32). */
static enum us_status layout_z2(struct ds *d, const struct us_flat_vec *v)
{
	const struct us_pk *pads = us_pk_dict_get(d->osd[0], "param_alignment_paddings");
	uint64_t align = 2ull * d->world;
	uint32_t i = 0;

	for (uint32_t g = 0; g < d->ngroups; g++) {
		const struct us_pk *gp = pads && pads->kind != US_PK_NONE ?
					 us_pk_at(pads, g) : NULL;
		uint64_t off = 0;

		for (uint32_t k = 0; i < d->nparams && d->params[i].group == g; k++, i++) {
			const struct us_pk *pad = gp ? us_pk_at(gp, k) : NULL;

			d->params[i].off = off;
			if (__builtin_add_overflow(off, d->params[i].numel, &off) ||
			    off > v[g].numel)
				return us_err_set(d->err, US_E_FORMAT, d->optim[0].relpath,
						  "group %u holds %llu elements across "
						  "ranks, param_shapes need more", g,
						  (unsigned long long)v[g].numel);
			if (gp && (!pad || pad->kind != US_PK_INT || pad->u.i < 0))
				return us_err_set(d->err, US_E_FORMAT, d->optim[0].relpath,
						  "malformed param_alignment_paddings");
			off += pad ? (uint64_t)pad->u.i : 0;
		}
		if ((off + align - 1) / align != (v[g].numel + align - 1) / align)
			return us_err_set(d->err, US_E_FORMAT, d->optim[0].relpath,
					  "group %u: param_shapes use %llu of %llu "
					  "elements", g, (unsigned long long)off,
					  (unsigned long long)v[g].numel);
	}
	return US_OK;
}

/* ZeRO-3 offsets: each param takes ceil(numel / W) of every rank. */
static enum us_status layout_z3(struct ds *d, const struct us_flat_vec *v)
{
	uint64_t off = 0;

	for (uint32_t r = 1; r < d->world; r++)
		for (uint32_t g = 0; g < d->ngroups; g++)
			if (v[r].segs[g].numel != v[0].segs[g].numel)
				return us_err_set(d->err, US_E_FORMAT, d->optim[r].relpath,
						  "group %u holds %llu elements, rank 0 "
						  "%llu", g,
						  (unsigned long long)v[r].segs[g].numel,
						  (unsigned long long)v[0].segs[g].numel);
	for (uint32_t i = 0; i < d->nparams; i++) {
		d->params[i].off = off;
		off += (d->params[i].numel + d->world - 1) / d->world;
	}
	if (off != v[0].numel)
		return us_err_set(d->err, US_E_FORMAT, d->optim[0].relpath,
				  "param_shapes need %llu elements per rank, the "
				  "fp32 groups hold %llu", (unsigned long long)off,
				  (unsigned long long)v[0].numel);
	return US_OK;
}

/* Place (or count, when @t is NULL) the chunks of param @p. */
static uint32_t place(struct ds *d, const struct us_ds_param *p,
		      const struct us_flat_vec *v, struct us_tensor *t,
		      const struct us_tensor *shape_only)
{
	const struct us_tensor *s = t ? t : shape_only;
	uint32_t n = 0, next = 0;

	if (d->stage != 3) {
		if (!t)
			return us_flat_count(s, &v[p->group], p->off, p->numel, 0);
		us_flat_place(t, &next, &v[p->group], p->off, p->numel, 0);
		return next;
	}
	for (uint32_t r = 0; r < d->world; r++) {
		uint64_t part = (p->numel + d->world - 1) / d->world;
		uint64_t a = part * r, b = a + part < p->numel ? a + part : p->numel;

		if (a >= b)
			break;
		if (t)
			us_flat_place(t, &next, &v[r], p->off, b - a, a);
		else
			n += us_flat_count(s, &v[r], p->off, b - a, a);
	}
	return t ? next : n;
}

static enum us_status add_param(struct ds *d, struct us_statedict *dst,
				const char *name, const struct us_ds_param *p,
				const struct us_flat_vec *v)
{
	struct us_tensor probe = { .ndim = p->ndim, .shape = p->shape };
	struct us_tensor *t;
	uint32_t n = place(d, p, v, NULL, &probe);

	t = us_sd_add_tensor(dst, name, v[0].dtype, p->ndim, p->shape, n,
			     d->optim[0].relpath, d->err);
	if (!t)
		return d->err ? d->err->status : US_E_NOMEM;
	place(d, p, v, t, NULL);
	return US_OK;
}

/* ---- plain tensors: buffers and frozen params ------------------------------ */

static enum us_status add_frozen(struct ds *d)
{
	const struct us_pk *shapes = us_pk_dict_get(d->ms, "frozen_param_shapes");
	const struct us_pk *frags = us_pk_dict_get(d->ms, "frozen_param_fragments");

	for (size_t i = 0; us_pk_is_dictlike(shapes) && i < shapes->coll->keys.n; i++) {
		const struct us_pk *k = shapes->coll->keys.v[i];

		if (k->kind != US_PK_STR)
			return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
					  "malformed frozen_param_shapes");
		if (d->stage == 3) {
			US_TRY(us_ds_add_frozen_z3(d->sd, &d->arena, d->model, d->world,
						   k->u.str.s, shapes->coll->vals.v[i],
						   d->err));
			continue;
		}
		if (!us_pk_dict_get(frags, k->u.str.s))
			return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
					  "frozen '%s' has no fragment", k->u.str.s);
		US_TRY(us_ds_add_plain(d->sd, &d->model[0], k->u.str.s,
				       us_pk_dict_get(frags, k->u.str.s), d->err));
	}
	return US_OK;
}

/* ---- the optimizer view ------------------------------------------------------ */

static const struct us_pk *base_state(const struct ds *d)
{
	return us_pk_dict_get(d->osd[0], d->stage == 3 ? "optimizer_state_dict" :
			      "base_optimizer_state");
}

static enum us_status add_optim(struct ds *d, const struct us_flat_vec *fp32)
{
	static const char *const slots[] = {"exp_avg", "exp_avg_sq"};
	const struct us_pk *base = base_state(d);
	const struct us_pk *st = us_pk_dict_get(base, "state");
	struct us_statedict *o;
	char name[4096];

	/* Elastic checkpoints keep per-group lists, not a torch state dict:
	 * the model view does not need them, so only the moments are skipped. */
	if (!us_pk_is_dictlike(st) || !st->coll->keys.n)
		return US_OK;
	o = us_sd_optim(d->sd);
	if (!o)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	for (size_t s = 0; s < sizeof(slots) / sizeof(*slots); s++) {
		struct us_flat_vec *v;

		if (!us_pk_dict_get(st->coll->vals.v[0], slots[s]))
			continue;
		US_TRY(vectors(d, slots[s], fp32, &v));
		for (uint32_t i = 0; i < d->nparams; i++) {
			if (snprintf(name, sizeof(name), "state.%s.%s",
				     d->params[i].name, slots[s]) >= (int)sizeof(name))
				continue;
			US_TRY(add_param(d, o, name, &d->params[i], v));
		}
	}
	return us_ds_optim_json(d->sd, us_pk_dict_get(base, "param_groups"),
				d->params, d->nparams, d->err);
}

/* ---- the reader ------------------------------------------------------------- */

static enum us_status add_params(struct ds *d)
{
	struct us_flat_vec *v;

	US_TRY(us_ds_params(&d->arena, d->ms, d->model[0].relpath, &d->params,
			    &d->nparams, &d->ngroups, d->err));
	US_TRY(check_group_counts(d));
	US_TRY(vectors(d, NULL, NULL, &v));
	US_TRY(d->stage == 3 ? layout_z3(d, v) : layout_z2(d, v));
	/* module: the weights come from the model states; the moments still
	 * need the fp32 partitions' layout */
	for (uint32_t i = 0; i < d->nparams && !d->module_weights; i++)
		US_TRY(add_param(d, d->sd, d->params[i].name, &d->params[i], v));
	US_TRY(add_optim(d, v));
	return US_OK;
}

static enum us_status ds_read_all(struct ds *d)
{
	char tag[DS_TAG_MAX + 1];
	struct us_err why;

	strcpy(d->where, ".");
	if (!has_model_states(d->dir)) {
		switch (us_ds_tag(d->dir, "latest", tag, &why)) {
		case US_DS_TAG_ABSENT:
			if (!us_dir_any(d->dir, is_global_step))
				return us_err_set(d->err, US_E_FORMAT, ".",
						  "no DeepSpeed checkpoint here "
						  "(no latest file, no "
						  "global_step*/ folder and no "
						  "*_model_states.pt file)");
			return us_err_set(d->err, US_E_FORMAT, ".",
					  "no *_model_states.pt file, and no "
					  "latest naming a tag directory "
					  "(mount a global_step*/ folder)");
		case US_DS_TAG_BAD:
			return us_err_set(d->err, why.status, "latest", "%s",
					  why.msg);
		case US_DS_TAG_DIR:
			break;
		}
		snprintf(d->prefix, sizeof(d->prefix), "%s/", tag);
		snprintf(d->where, sizeof(d->where), "%s", tag);
		US_TRY(us_sd_consume(d->sd, "latest"));
	}
	US_TRY(find_files(d));
	US_TRY(open_optim(d));
	US_TRY(open_model(d));
	if (d->module_weights && d->stage == 3)
		return us_ds_module_refusal(d->model[0].relpath, d->err);
	US_TRY(add_params(d));
	if (d->module_weights)
		US_TRY(us_ds_add_module(d->sd, &d->model[0], US_DS_MODULE_ALL, d->err));
	else {
		US_TRY(add_frozen(d));
		US_TRY(us_ds_add_module(d->sd, &d->model[0], US_DS_BUFFERS_FP32,
					 d->err));
	}
	return us_ds_add_ties(d->sd, d->ms, d->err);
}

static enum us_status ds_read(struct us_statedict *sd, const struct us_dir *dir,
			      const char *file, const struct us_source_opts *opts,
			      struct us_err *err)
{
	struct ds d = { .sd = sd, .dir = dir, .err = err,
			.module_weights = opts && opts->ds_weights == US_DS_WEIGHTS_MODULE };
	enum us_status rc;

	(void)file;
	sd->format = "deepspeed";
	us_arena_init(&d.arena);
	rc = ds_read_all(&d);
	us_arena_free(&d.arena);
	return rc;
}

const struct us_reader us_reader_deepspeed = {
	.name = "deepspeed",
	.probe = ds_probe,
	.read = ds_read,
};
