/*
 * deepspeed.c - the DeepSpeed ZeRO reader (stages 1-3, formats.md).
 *
 * SOURCE is a checkpoint root (a "latest" file naming the tag directory) or
 * the tag directory itself.  The fp32 master weights live only in the
 * optimizer files, as flat 1-D tensors per rank and param group; the model
 * states file says which parameters they hold (param_shapes), in order.
 * Every parameter becomes chunks pointing into those flat tensors
 * (deepspeed_flat.h), laid out as DeepSpeed's zero_to_fp32.py reads them:
 *  - ZeRO-1/2: per group, the ranks' partitions concatenated; parameters one
 *    after another (plus param_alignment_paddings when recorded);
 *  - ZeRO-3: each parameter split on its own, ceil(numel / W) elements per
 *    rank, at the same offset of every rank's vector (its groups
 *    concatenated); the last rank's piece is padded.
 * Buffers and ZeRO-2 frozen parameters are plain tensors of the model states
 * file; ZeRO-3 frozen parameters are fragments of every rank's model states.
 * shared_params (tied names) become aliases.  Adam's moments are rebuilt the
 * same way into the optimizer view.  Nothing is read but the pickles.
 */
#include "source.h"

#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../codec/pk2json.h"
#include "../io.h"
#include "../path.h"
#include "deepspeed_flat.h"
#include "torchpkl.h"

#define DS_MAX_RANKS 16384 /* a rank table is calloc'd at this size */
#define DS_TAG_MAX 256

/* One torch.save file of the checkpoint, parsed. */
struct ds_file {
	char *relpath;          /* relative to SOURCE */
	uint32_t file;          /* index in sd->files */
	struct us_torch_archive ta;
	bool present;
};

struct ds_param {
	const char *name;
	uint32_t group, ndim;
	const uint64_t *shape;
	uint64_t numel;
	uint64_t off;           /* ZeRO-2: in its group's vector; ZeRO-3: in
				 * every rank's vector */
};

struct ds {
	struct us_statedict *sd;
	int dirfd;
	char prefix[DS_TAG_MAX + 2]; /* "<tag>/" or "" */
	char where[DS_TAG_MAX + 2];  /* "<tag>" or ".": for messages */
	struct us_arena arena;
	struct ds_file *optim, *model; /* per rank (model: one for ZeRO <= 2) */
	uint32_t world, nmodel, ngroups;
	int stage;
	const struct us_pk **osd;      /* per rank: optimizer_state_dict */
	const struct us_pk *ms;        /* rank 0's model states */
	struct ds_param *params;
	uint32_t nparams;
	struct us_err *err;
};

/* ---- finding the files ---------------------------------------------------- */

static bool has_model_states(int dirfd)
{
	char **names;
	size_t n;
	bool yes = false;

	if (us_dirlist(dirfd, &names, &n) != US_OK)
		return false;
	for (size_t i = 0; i < n && !yes; i++)
		yes = us_path_has_suffix(names[i], "_model_states.pt");
	us_dirlist_free(names, n);
	return yes;
}

/* The tag "latest" names, stripped; false if there is none. */
static bool read_latest(int dirfd, char *tag)
{
	int fd = openat(dirfd, "latest", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, tag, DS_TAG_MAX);
	close(fd);
	if (n <= 0)
		return false;
	tag[n] = '\0';
	while (n > 0 && isspace((unsigned char)tag[n - 1]))
		tag[--n] = '\0';
	return n > 0 && us_path_is_inside(tag) && !memchr(tag, '\n', (size_t)n);
}

static bool ds_probe(int dirfd, const char *file)
{
	char tag[DS_TAG_MAX + 1];
	bool yes;
	int d;

	if (file)
		return false;
	if (has_model_states(dirfd))
		return true;
	if (!read_latest(dirfd, tag))
		return false;
	d = openat(dirfd, tag, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (d < 0)
		return false;
	yes = has_model_states(d);
	close(d);
	return yes;
}

/* "[bf16_|fp16_]zero_pp_rank_<r>_mp_rank_<mp>_<kind>" -> r and mp. */
static bool parse_rank_name(const char *n, const char *kind, long *r, long *mp)
{
	char *end;

	if (!strncmp(n, "bf16_", 5) || !strncmp(n, "fp16_", 5))
		n += 5;
	if (strncmp(n, "zero_pp_rank_", 13) || !isdigit((unsigned char)n[13]))
		return false;
	*r = strtol(n + 13, &end, 10);
	if (strncmp(end, "_mp_rank_", 9) || !isdigit((unsigned char)end[9]))
		return false;
	*mp = strtol(end + 9, &end, 10);
	return !strcmp(end, kind);
}

static char *relpath(struct ds *d, const char *name)
{
	char *p = us_arena_alloc(&d->arena, strlen(d->prefix) + strlen(name) + 1);

	if (p)
		strcat(strcpy(p, d->prefix), name);
	return p;
}

/* Record the file @name of rank @r in @tab (@cap entries). */
static enum us_status note_rank(struct ds *d, struct ds_file **tab,
				uint32_t *n, long r, const char *name)
{
	if (r < 0 || r >= DS_MAX_RANKS)
		return us_err_set(d->err, US_E_FORMAT, name, "rank out of range");
	if (!*tab) {
		*tab = us_arena_calloc(&d->arena, DS_MAX_RANKS, sizeof(**tab));
		if (!*tab)
			return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	}
	if ((*tab)[r].present)
		return us_err_set(d->err, US_E_FORMAT, relpath(d, name),
				  "a second file for rank %ld (with %s)", r,
				  (*tab)[r].relpath);
	(*tab)[r].present = true;
	(*tab)[r].relpath = relpath(d, name);
	if (!(*tab)[r].relpath)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	if ((uint32_t)r + 1 > *n)
		*n = (uint32_t)r + 1;
	return US_OK;
}

static enum us_status classify(struct ds *d, const char *name)
{
	long r, mp;

	if (parse_rank_name(name, "_optim_states.pt", &r, &mp) ||
	    parse_rank_name(name, "_model_states.pt", &r, &mp)) {
		if (mp != 0)
			return us_err_set(d->err, US_E_UNSUPPORTED,
					  relpath(d, name), "model (tensor) "
					  "parallel checkpoints are not supported");
		if (us_path_has_suffix(name, "_optim_states.pt"))
			return note_rank(d, &d->optim, &d->world, r, name);
		return note_rank(d, &d->model, &d->nmodel, r, name);
	}
	if (!strncmp(name, "mp_rank_", 8) &&
	    us_path_has_suffix(name, "_model_states.pt")) {
		if (strcmp(name, "mp_rank_00_model_states.pt"))
			return us_err_set(d->err, US_E_UNSUPPORTED,
					  relpath(d, name), "model (tensor) "
					  "parallel checkpoints are not supported");
		return note_rank(d, &d->model, &d->nmodel, 0, name);
	}
	return US_OK;
}

static enum us_status find_files(struct ds *d)
{
	char **names;
	size_t n;
	enum us_status rc = US_OK;
	int tdir = *d->prefix ? openat(d->dirfd, d->prefix, O_PATH | O_DIRECTORY |
				       O_CLOEXEC) : dup(d->dirfd);

	if (tdir < 0)
		return us_err_set(d->err, US_E_FORMAT, "latest",
				  "names a missing directory '%s'", d->prefix);
	if (us_dirlist(tdir, &names, &n) != US_OK) {
		close(tdir);
		return us_err_set(d->err, US_E_IO, d->where, "cannot list it");
	}
	for (size_t i = 0; i < n && rc == US_OK; i++)
		rc = classify(d, names[i]);
	us_dirlist_free(names, n);
	close(tdir);
	if (rc == US_OK && !d->world)
		rc = us_err_set(d->err, US_E_FORMAT, d->where,
				"no *_optim_states.pt file: the fp32 weights "
				"live only there");
	return rc;
}

/* The name DeepSpeed gives rank @r's file, for "missing" messages. */
static const char *expected_name(struct ds *d, const struct ds_file *tab,
				 uint32_t r, const char *kind)
{
	char buf[128];
	const char *pfx = "";

	for (uint32_t i = 0; tab && i < DS_MAX_RANKS; i++) {
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

static enum us_status open_one(struct ds *d, struct ds_file *f)
{
	const char *why = NULL;

	US_TRY(us_sd_open_file(d->sd, d->dirfd, f->relpath, &f->file, d->err));
	if (us_torch_archive_open(&f->ta, d->sd->files[f->file].fd, 0,
				  (uint64_t)d->sd->files[f->file].size,
				  &d->arena, &why) < 0)
		return us_err_set(d->err, US_E_FORMAT, f->relpath, "%s", why);
	return US_OK;
}

/* ZeroStageEnum.<x>: an int, Class(2) (Python < 3.12) or getattr(Class, name). */
static int stage_of(const struct us_pk *p)
{
	static const char *const names[] = {"disabled", "optimizer_states",
					    "gradients", "weights"};
	const struct us_pk *a;

	if (p && p->kind == US_PK_INT)
		return (int)p->u.i;
	if (!p || p->kind != US_PK_CALL)
		return -1;
	a = us_pk_at(p->u.call.args, 0);
	if (a && a->kind == US_PK_INT)
		return (int)a->u.i;
	a = us_pk_at(p->u.call.args, 1);
	for (int i = 0; a && a->kind == US_PK_STR && i < 4; i++)
		if (!strcmp(a->u.str.s, names[i]))
			return i;
	return -1;
}

/* partition_count: an int, or a list per group (ZeRO-2): the max. */
static int64_t partition_count(const struct us_pk *p)
{
	int64_t m = -1;

	if (p && p->kind == US_PK_INT)
		return p->u.i;
	for (size_t i = 0; i < us_pk_len(p); i++) {
		const struct us_pk *v = us_pk_at(p, i);

		if (v->kind == US_PK_INT && v->u.i > m)
			m = v->u.i;
	}
	return m;
}

static enum us_status open_optim(struct ds *d)
{
	int64_t pc;

	d->osd = us_arena_calloc(&d->arena, d->world, sizeof(*d->osd));
	if (!d->osd)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	for (uint32_t r = 0; r < d->world; r++) {
		struct ds_file *f = &d->optim[r];

		if (!f->present)
			return us_err_set(d->err, US_E_FORMAT,
					  expected_name(d, d->optim, r, "optim_states.pt"),
					  "missing (rank files up to %u exist)",
					  d->world - 1);
		US_TRY(open_one(d, f));
		d->osd[r] = us_pk_dict_get(f->ta.root, "optimizer_state_dict");
		if (!us_pk_is_dictlike(d->osd[r]))
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "no optimizer_state_dict");
		if (stage_of(us_pk_dict_get(d->osd[r], "zero_stage")) !=
		    (r ? d->stage : stage_of(us_pk_dict_get(d->osd[r], "zero_stage"))))
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "zero_stage differs from rank 0's");
		if (!r)
			d->stage = stage_of(us_pk_dict_get(d->osd[0], "zero_stage"));
		pc = partition_count(us_pk_dict_get(d->osd[r], "partition_count"));
		if (pc != (int64_t)d->world) {
			if (pc > (int64_t)d->world && pc <= DS_MAX_RANKS)
				return us_err_set(d->err, US_E_FORMAT,
						  expected_name(d, d->optim, d->world,
								"optim_states.pt"),
						  "missing (partition_count is %lld)",
						  (long long)pc);
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "partition_count is %lld but %u rank "
					  "files exist", (long long)pc, d->world);
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

	if (d->nmodel != want)
		return us_err_set(d->err, US_E_FORMAT,
				  d->nmodel ? d->model[0].relpath : d->where,
				  "%u model states files for ZeRO-%d with %u ranks",
				  d->nmodel, d->stage, d->world);
	for (uint32_t r = 0; r < want; r++) {
		if (!d->model[r].present)
			return us_err_set(d->err, US_E_FORMAT,
					  expected_name(d, NULL, r, "model_states.pt"),
					  "missing");
		US_TRY(open_one(d, &d->model[r]));
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

/* torch.Size((...)) or a tuple -> ndim and shape (arena). */
static bool shape_of(struct ds *d, const struct us_pk *p, uint32_t *ndim,
		     const uint64_t **shape, uint64_t *numel)
{
	uint64_t *s;

	if (p && p->kind == US_PK_CALL && us_pk_global_named(p->u.call.fn, "Size"))
		p = us_pk_at(p->u.call.args, 0);
	if (!p || (p->kind != US_PK_TUPLE && p->kind != US_PK_LIST) ||
	    us_pk_len(p) > US_MAX_NDIM)
		return false;
	*ndim = (uint32_t)us_pk_len(p);
	s = us_arena_calloc(&d->arena, *ndim + 1, sizeof(*s));
	if (!s)
		return false;
	for (uint32_t k = 0; k < *ndim; k++) {
		const struct us_pk *v = us_pk_at(p, k);

		if (v->kind != US_PK_INT || v->u.i < 0)
			return false;
		s[k] = (uint64_t)v->u.i;
	}
	*shape = s;
	return us_numel(*ndim, s, numel);
}

static enum us_status load_params(struct ds *d)
{
	const struct us_pk *groups = us_pk_dict_get(d->ms, "param_shapes");
	const char *path = d->model[0].relpath;
	size_t total = 0;

	d->ngroups = (uint32_t)us_pk_len(groups);
	for (uint32_t g = 0; g < d->ngroups; g++) {
		if (!us_pk_is_dictlike(us_pk_at(groups, g)))
			return us_err_set(d->err, US_E_FORMAT, path,
					  "param_shapes[%u] is not a dict", g);
		total += us_pk_at(groups, g)->coll->keys.n;
	}
	d->params = us_arena_calloc(&d->arena, total + 1, sizeof(*d->params));
	if (!d->params)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	for (uint32_t g = 0; g < d->ngroups; g++) {
		const struct us_pk_coll *c = us_pk_at(groups, g)->coll;

		for (size_t i = 0; i < c->keys.n; i++) {
			struct ds_param *p = &d->params[d->nparams++];

			p->group = g;
			p->name = c->keys.v[i]->kind == US_PK_STR ?
				  c->keys.v[i]->u.str.s : NULL;
			if (!p->name || !shape_of(d, c->vals.v[i], &p->ndim,
						  &p->shape, &p->numel))
				return us_err_set(d->err, US_E_FORMAT, path,
						  "malformed param_shapes entry");
		}
	}
	return US_OK;
}

/* Rank @r's flat tensor for group @g (@slot NULL: the fp32 weights, else
 * that Adam slot), as a segment of @want elements (the fp32 partition's
 * length: slots carry the alignment padding the weights were saved without). */
static enum us_status segment(struct ds *d, uint32_t r, uint32_t g,
			      const char *slot, uint64_t want,
			      struct us_flat_seg *seg, enum us_dtype *dt)
{
	const struct us_pk *osd = d->osd[r], *v;
	struct us_torch_tensor tt;
	const char *why = "not a tensor", *path = d->optim[r].relpath;

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
	if (!v || us_torch_match(v, &tt, &why) != 1 || tt.ndim != 1 ||
	    (tt.shape[0] > 1 && tt.strides[0] != 1))
		return us_err_set(d->err, US_E_FORMAT, path, "group %u %s: %s", g,
				  slot ? slot : "fp32 partition",
				  why ? why : "not a 1-D contiguous tensor");
	if (us_torch_extent(&d->optim[r].ta, &tt, &seg->offset, &why) < 0)
		return us_err_set(d->err, US_E_FORMAT, path, "group %u: %s", g, why);
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
static uint32_t place(struct ds *d, const struct ds_param *p,
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
				const char *name, const struct ds_param *p,
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

static enum us_status add_plain(struct ds *d, const struct ds_file *f,
				const char *name, const struct us_pk *v)
{
	struct us_torch_tensor tt;
	const char *why = "not a tensor";
	struct us_tensor *t;
	uint64_t off;
	int64_t *st;

	if (us_torch_match(v, &tt, &why) != 1 ||
	    us_torch_extent(&f->ta, &tt, &off, &why) < 0)
		return us_err_set(d->err, US_E_FORMAT, f->relpath, "'%s': %s",
				  name, why);
	t = us_sd_add_whole_tensor(d->sd, name, tt.dtype, tt.ndim, tt.shape,
				   f->file, off, d->err);
	st = us_arena_calloc(&d->sd->arena, tt.ndim + 1, sizeof(*st));
	if (!t || !st)
		return us_err_set(d->err, US_E_NOMEM, f->relpath, "out of memory");
	memcpy(st, tt.strides, tt.ndim * sizeof(*st));
	t->chunks[0].src.strides = st;
	if (!t->numel)
		t->nchunks = 0;
	return US_OK;
}

static bool listed(const struct us_pk *list, const char *name)
{
	for (size_t i = 0; i < us_pk_len(list); i++)
		if (us_pk_is_str(us_pk_at(list, i), name))
			return true;
	return false;
}

static enum us_status add_buffers(struct ds *d)
{
	const struct us_pk *mod = us_pk_dict_get(d->ms, "module");
	const struct us_pk *names = us_pk_dict_get(d->ms, "buffer_names");

	for (size_t i = 0; us_pk_is_dictlike(mod) && i < mod->coll->keys.n; i++) {
		const struct us_pk *k = mod->coll->keys.v[i];

		if (k->kind == US_PK_STR && listed(names, k->u.str.s))
			US_TRY(add_plain(d, &d->model[0], k->u.str.s,
					 mod->coll->vals.v[i]));
	}
	return US_OK;
}

/* ZeRO-3 frozen param: every rank's fragment, concatenated, truncated. */
static enum us_status add_frozen_z3(struct ds *d, const char *name,
				    const struct us_pk *shape)
{
	struct us_flat_seg *segs = us_arena_calloc(&d->arena, d->world, sizeof(*segs));
	struct us_flat_vec v = { .segs = segs, .nsegs = d->world };
	struct ds_param p = { .name = name };

	if (!segs)
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	if (!shape_of(d, shape, &p.ndim, &p.shape, &p.numel))
		return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
				  "frozen '%s': malformed shape", name);
	for (uint32_t r = 0; r < d->world; r++) {
		const struct ds_file *f = &d->model[r];
		const struct us_pk *fr = us_pk_dict_get(us_pk_dict_get(f->ta.root,
						"frozen_param_fragments"), name);
		struct us_torch_tensor tt;
		const char *why = "missing";

		if (!fr || us_torch_match(fr, &tt, &why) != 1 || tt.ndim != 1 ||
		    (tt.shape[0] > 1 && tt.strides[0] != 1) ||
		    us_torch_extent(&f->ta, &tt, &segs[r].offset, &why) < 0)
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "frozen fragment '%s': %s", name,
					  why ? why : "not 1-D contiguous");
		if (r && tt.dtype != v.dtype)
			return us_err_set(d->err, US_E_FORMAT, f->relpath,
					  "frozen fragment '%s': dtype differs", name);
		segs[r].file = f->file;
		segs[r].numel = tt.shape[0];
		v.dtype = tt.dtype;
		v.numel += tt.shape[0];
	}
	if (v.numel < p.numel)
		return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
				  "frozen '%s': fragments hold %llu of %llu elements",
				  name, (unsigned long long)v.numel,
				  (unsigned long long)p.numel);
	{
		struct us_tensor probe = { .ndim = p.ndim, .shape = p.shape };
		uint32_t n = us_flat_count(&probe, &v, 0, p.numel, 0), next = 0;
		struct us_tensor *t = us_sd_add_tensor(d->sd, name, v.dtype, p.ndim,
						       p.shape, n, d->model[0].relpath,
						       d->err);

		if (!t)
			return d->err ? d->err->status : US_E_NOMEM;
		us_flat_place(t, &next, &v, 0, p.numel, 0);
	}
	return US_OK;
}

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
			US_TRY(add_frozen_z3(d, k->u.str.s, shapes->coll->vals.v[i]));
			continue;
		}
		if (!us_pk_dict_get(frags, k->u.str.s))
			return us_err_set(d->err, US_E_FORMAT, d->model[0].relpath,
					  "frozen '%s' has no fragment", k->u.str.s);
		US_TRY(add_plain(d, &d->model[0], k->u.str.s,
				 us_pk_dict_get(frags, k->u.str.s)));
	}
	return US_OK;
}

static enum us_status add_ties(struct ds *d)
{
	const struct us_pk *sp = us_pk_dict_get(d->ms, "shared_params");

	for (size_t i = 0; us_pk_is_dictlike(sp) && i < sp->coll->keys.n; i++) {
		const struct us_pk *k = sp->coll->keys.v[i], *v = sp->coll->vals.v[i];

		if (k->kind == US_PK_STR && v->kind == US_PK_STR &&
		    us_sd_add_alias(d->sd, k->u.str.s, v->u.str.s) != US_OK)
			return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	}
	return US_OK;
}

/* ---- the optimizer view ------------------------------------------------------ */

static const struct us_pk *base_state(const struct ds *d)
{
	return us_pk_dict_get(d->osd[0], d->stage == 3 ? "optimizer_state_dict" :
			      "base_optimizer_state");
}

/* param_groups of rank 0, "params" naming the parameters of each group. */
static enum us_status optim_json(struct ds *d, const struct us_pk *groups)
{
	cJSON *tree = cJSON_CreateObject(), *jg = us_pk_to_json(groups), *g;
	uint32_t gi = 0;

	if (!tree || !jg || !cJSON_AddItemToObject(tree, "param_groups", jg)) {
		cJSON_Delete(tree);
		cJSON_Delete(jg);
		return us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
	}
	cJSON_ArrayForEach(g, jg) {
		cJSON *names = cJSON_CreateArray();
		char buf[4096];

		for (uint32_t i = 0; names && i < d->nparams; i++) {
			if (d->params[i].group != gi || strlen(d->params[i].name) >= sizeof(buf))
				continue;
			us_unwrap_name(d->params[i].name, d->sd->names, buf);
			cJSON_AddItemToArray(names, cJSON_CreateString(buf));
		}
		if (names)
			cJSON_ReplaceItemInObject(g, "params", names);
		gi++;
	}
	d->sd->optim_json = cJSON_Print(tree);
	cJSON_Delete(tree);
	return d->sd->optim_json ? US_OK :
	       us_err_set(d->err, US_E_NOMEM, ".", "out of memory");
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
	return optim_json(d, us_pk_dict_get(base, "param_groups"));
}

/* ---- the reader ------------------------------------------------------------- */

static enum us_status add_params(struct ds *d)
{
	struct us_flat_vec *v;

	US_TRY(load_params(d));
	US_TRY(check_group_counts(d));
	US_TRY(vectors(d, NULL, NULL, &v));
	US_TRY(d->stage == 3 ? layout_z3(d, v) : layout_z2(d, v));
	for (uint32_t i = 0; i < d->nparams; i++)
		US_TRY(add_param(d, d->sd, d->params[i].name, &d->params[i], v));
	US_TRY(add_optim(d, v));
	return US_OK;
}

static enum us_status ds_read_all(struct ds *d)
{
	char tag[DS_TAG_MAX + 1];

	strcpy(d->where, ".");
	if (!has_model_states(d->dirfd)) {
		if (!read_latest(d->dirfd, tag))
			return us_err_set(d->err, US_E_FORMAT, "latest",
					  "no checkpoint tag");
		snprintf(d->prefix, sizeof(d->prefix), "%s/", tag);
		snprintf(d->where, sizeof(d->where), "%s", tag);
		US_TRY(us_sd_consume(d->sd, "latest"));
	}
	US_TRY(find_files(d));
	US_TRY(open_optim(d));
	US_TRY(open_model(d));
	US_TRY(add_params(d));
	US_TRY(add_frozen(d));
	US_TRY(add_buffers(d));
	return add_ties(d);
}

static enum us_status ds_read(struct us_statedict *sd, int dirfd,
			      const char *file, struct us_err *err)
{
	struct ds d = { .sd = sd, .dirfd = dirfd, .err = err };
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
