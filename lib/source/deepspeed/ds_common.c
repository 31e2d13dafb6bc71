/* ds_common.c - what the DeepSpeed readers share (ds_common.h). */
#include "ds_common.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../codec/pk2json.h"
#include "../../path.h"
#include "ds_flat.h"

/* Read the tag file @f into @tag, stripped at both ends as DeepSpeed's
 * open(latest).read().strip() does; false with @why when it is no tag. */
static bool read_tag_text(const struct us_file *f, char *tag,
			  struct us_err *why)
{
	char buf[US_DS_TAG_MAX + 2];
	size_t n = sizeof(buf) - 1, b = 0, e;

	if ((uint64_t)f->size < n)
		n = (size_t)f->size;
	if (us_file_pread(f, buf, n, 0) != US_OK)
		return us_err_reason(why, US_E_IO, "cannot be read: %s",
				     us_file_strerror(f)), false;
	e = n;
	while (b < e && isspace((unsigned char)buf[b]))
		b++;
	while (e > b && isspace((unsigned char)buf[e - 1]))
		e--;
	if (b == e)
		return us_err_reason(why, US_E_FORMAT, "is empty: it should "
				     "name the checkpoint's tag directory "
				     "(global_step<N>)"), false;
	if (e - b > US_DS_TAG_MAX)
		return us_err_reason(why, US_E_FORMAT, "holds more than %d "
				     "bytes: not a DeepSpeed tag file (one line "
				     "naming a directory)", US_DS_TAG_MAX), false;
	for (size_t i = b; i < e; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
			return us_err_reason(why, US_E_FORMAT, "holds %s: not "
					     "a DeepSpeed tag file (one line "
					     "naming a directory)",
					     buf[i] == '\n' ? "several lines" :
					     "bytes that are not text"), false;
	memcpy(tag, buf + b, e - b);
	tag[e - b] = '\0';
	return true;
}

/* @tag, which is text, must name a directory inside SOURCE. */
static enum us_ds_tag check_tag_dir(const struct us_dir *dir, const char *tag,
				    struct us_err *why)
{
	struct stat st;

	if (tag[0] == '/')
		us_err_reason(why, US_E_FORMAT, "names '%s', outside the "
			      "checkpoint directory", tag);
	else if (!us_path_is_inside(tag))
		us_err_reason(why, US_E_FORMAT, "names '%s', which climbs out "
			      "of the checkpoint directory", tag);
	else if (us_dir_statat(dir, tag, &st, 0) < 0)
		us_err_reason(why, US_E_FORMAT, "names '%s', which %s", tag,
			      errno == ENOENT ? "is not there" : strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		us_err_reason(why, US_E_FORMAT, "names '%s', which is not a "
			      "directory", tag);
	else
		return US_DS_TAG_DIR;
	return US_DS_TAG_BAD;
}

enum us_ds_tag us_ds_tag(const struct us_dir *dir, const char *name, char *tag,
			 struct us_err *why)
{
	struct us_file f;
	struct stat st;
	enum us_status rc;
	bool ok;

	*tag = '\0';
	if (why) {
		why->status = US_OK;
		why->msg[0] = '\0';
	}
	/* A dangling symlink is a tag file too: it says something is wrong.
	 * A directory (or a link to one) is not: other tools keep a "latest"
	 * link to their newest checkpoint folder, and DeepSpeed never makes
	 * one, so it leaves the root to the other readers. */
	if (us_dir_statat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    (us_dir_statat(dir, name, &st, 0) == 0 && S_ISDIR(st.st_mode)))
		return US_DS_TAG_ABSENT;
	/* us_file_open: O_NONBLOCK, a FIFO named latest must not hang the
	 * mount */
	rc = us_file_open(dir, name, &f);
	if (rc == US_E_FORMAT) {
		us_err_reason(why, US_E_FORMAT, "is not a regular file: it "
			      "should hold the checkpoint's tag (global_step<N>)");
		return US_DS_TAG_BAD;
	}
	if (rc != US_OK) {
		us_err_reason(why, US_E_IO, "cannot be opened: %s",
			      strerror(errno));
		return US_DS_TAG_BAD;
	}
	ok = read_tag_text(&f, tag, why);
	us_file_close(&f);
	if (!ok) {
		*tag = '\0';
		return US_DS_TAG_BAD;
	}
	return check_tag_dir(dir, tag, why);
}

bool us_ds_model_states_name(const char *n)
{
	return us_path_has_suffix(n, "_model_states.pt");
}

bool us_ds_rank_name(const char *n, const char *kind, long *r, long *mp)
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

struct us_ds_file *us_ds_rank_slot(struct us_arena *a, struct us_ds_file **tab,
				   uint32_t *cap, uint32_t r)
{
	uint32_t n = *cap ? *cap : 8;
	struct us_ds_file *t;

	if (r < *cap)
		return &(*tab)[r];
	while (n <= r)
		n *= 2;
	/* the old table stays in the arena: at most as much again */
	t = us_arena_calloc(a, n, sizeof(*t));
	if (!t)
		return NULL;
	if (*cap)
		memcpy(t, *tab, *cap * sizeof(*t));
	*tab = t;
	*cap = n;
	return &t[r];
}

int us_ds_stage(const struct us_pk *p)
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

int64_t us_ds_partition_count(const struct us_pk *p)
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

enum us_status us_ds_open(struct us_statedict *sd, const struct us_dir *dir,
			  struct us_ds_file *f, struct us_arena *a,
			  struct us_err *err)
{
	struct us_err why;
	enum us_status st;

	US_TRY(us_sd_open_file(sd, dir, f->relpath, &f->file, err));
	st = us_torch_archive_open(&f->ta, &sd->files[f->file], 0,
				   (uint64_t)sd->files[f->file].size, a, &why);
	if (st != US_OK)
		return us_err_set(err, st, f->relpath, "%s", why.msg);
	return US_OK;
}

bool us_ds_shape(struct us_arena *a, const struct us_pk *p, uint32_t *ndim,
		 const uint64_t **shape, uint64_t *numel)
{
	uint64_t *s;

	if (p && p->kind == US_PK_CALL && us_pk_global_named(p->u.call.fn, "Size"))
		p = us_pk_at(p->u.call.args, 0);
	if (!p || (p->kind != US_PK_TUPLE && p->kind != US_PK_LIST) ||
	    us_pk_len(p) > US_MAX_NDIM)
		return false;
	*ndim = (uint32_t)us_pk_len(p);
	s = us_arena_calloc(a, *ndim + 1, sizeof(*s));
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

enum us_status us_ds_params(struct us_arena *a, const struct us_pk *ms,
			    const char *path, struct us_ds_param **out,
			    uint32_t *n, uint32_t *ngroups, struct us_err *err)
{
	const struct us_pk *groups = us_pk_dict_get(ms, "param_shapes");
	struct us_ds_param *params;
	size_t total = 0;

	*n = 0;
	*ngroups = (uint32_t)us_pk_len(groups);
	for (uint32_t g = 0; g < *ngroups; g++) {
		if (!us_pk_is_dictlike(us_pk_at(groups, g)))
			return us_err_set(err, US_E_FORMAT, path,
					  "param_shapes[%u] is not a dict", g);
		total += us_pk_at(groups, g)->coll->keys.n;
	}
	params = us_arena_calloc(a, total + 1, sizeof(*params));
	if (!params)
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	for (uint32_t g = 0; g < *ngroups; g++) {
		const struct us_pk_coll *c = us_pk_at(groups, g)->coll;

		for (size_t i = 0; i < c->keys.n; i++) {
			struct us_ds_param *p = &params[(*n)++];

			p->group = g;
			p->name = c->keys.v[i]->kind == US_PK_STR ?
				  c->keys.v[i]->u.str.s : NULL;
			if (!p->name || !us_ds_shape(a, c->vals.v[i], &p->ndim,
						     &p->shape, &p->numel))
				return us_err_set(err, US_E_FORMAT, path,
						  "malformed param_shapes entry");
		}
	}
	*out = params;
	return US_OK;
}

enum us_status us_ds_add_plain(struct us_statedict *sd,
			       const struct us_ds_file *f, const char *name,
			       const struct us_pk *v, struct us_err *err)
{
	struct us_torch_tensor tt;
	struct us_err why;
	struct us_tensor *t;
	uint64_t off;
	int64_t *st;
	enum us_status rc = us_torch_expect(v, &tt, "not a tensor", &why);

	if (rc == US_OK)
		rc = us_torch_extent(&f->ta, &tt, &off, &why);
	if (rc != US_OK)
		return us_err_set(err, rc, f->relpath, "'%s': %s", name, why.msg);
	t = us_sd_add_whole_tensor(sd, name, tt.dtype, tt.ndim, tt.shape,
				   f->file, off, err);
	st = us_arena_calloc(&sd->arena, tt.ndim + 1, sizeof(*st));
	if (!t || !st)
		return us_err_set(err, US_E_NOMEM, f->relpath, "out of memory");
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

enum us_status us_ds_add_module(struct us_statedict *sd,
				const struct us_ds_file *f,
				enum us_ds_module_part part, struct us_err *err)
{
	const struct us_pk *ms = f->ta.root;
	const struct us_pk *mod = us_pk_dict_get(ms, "module");
	const struct us_pk *names = us_pk_dict_get(ms, "buffer_names");
	const struct us_pk *shared = us_pk_dict_get(ms, "shared_params");
	bool all = part == US_DS_MODULE_ALL;

	if (all && !us_pk_is_dictlike(mod))
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "no module state dict");
	for (size_t i = 0; us_pk_is_dictlike(mod) && i < mod->coll->keys.n; i++) {
		const struct us_pk *k = mod->coll->keys.v[i];

		if (k->kind != US_PK_STR)
			continue;
		/* the dropped name of a tie comes back as an alias */
		if (all ? us_pk_dict_get(shared, k->u.str.s) != NULL :
			  !listed(names, k->u.str.s))
			continue;
		US_TRY(us_ds_add_plain(sd, f, k->u.str.s, mod->coll->vals.v[i], err));
		/* zero_to_fp32 upcasts floating buffers with .float() (a bf16
		 * model under zero.Init has bf16 buffers); float8 stays stored */
		if (part == US_DS_BUFFERS_FP32)
			sd->tensors[sd->ntensors - 1].upcast_f32 = true;
	}
	return US_OK;
}

enum us_status us_ds_add_frozen_z3(struct us_statedict *sd, struct us_arena *a,
				   const struct us_ds_file *model, uint32_t world,
				   const char *name, const struct us_pk *shape,
				   struct us_err *err)
{
	struct us_flat_seg *segs = us_arena_calloc(a, world, sizeof(*segs));
	struct us_flat_vec v = { .segs = segs, .nsegs = world };
	struct us_tensor probe = {0}, *t;
	uint32_t n, next = 0;
	uint64_t numel;

	if (!segs)
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	if (!us_ds_shape(a, shape, &probe.ndim, &probe.shape, &numel))
		return us_err_set(err, US_E_FORMAT, model[0].relpath,
				  "frozen '%s': malformed shape", name);
	for (uint32_t r = 0; r < world; r++) {
		const struct us_ds_file *f = &model[r];
		const struct us_pk *fr = us_pk_dict_get(us_pk_dict_get(f->ta.root,
						"frozen_param_fragments"), name);
		struct us_torch_tensor tt;
		struct us_err why;
		enum us_status st = us_torch_expect(fr, &tt, "missing", &why);

		/* (A fragment that is not 1-D contiguous has always been
		 * reported "missing": kept so, messages are the contract.) */
		if (st == US_OK && (tt.ndim != 1 ||
				    (tt.shape[0] > 1 && tt.strides[0] != 1)))
			st = us_err_reason(&why, US_E_FORMAT, "missing");
		if (st == US_OK)
			st = us_torch_extent(&f->ta, &tt, &segs[r].offset, &why);
		if (st != US_OK)
			return us_err_set(err, st, f->relpath,
					  "frozen fragment '%s': %s", name, why.msg);
		if (r && tt.dtype != v.dtype)
			return us_err_set(err, US_E_FORMAT, f->relpath,
					  "frozen fragment '%s': dtype differs", name);
		segs[r].file = f->file;
		segs[r].numel = tt.shape[0];
		v.dtype = tt.dtype;
		v.numel += tt.shape[0];
	}
	if (v.numel < numel)
		return us_err_set(err, US_E_FORMAT, model[0].relpath,
				  "frozen '%s': fragments hold %llu of %llu elements",
				  name, (unsigned long long)v.numel,
				  (unsigned long long)numel);
	n = us_flat_count(&probe, &v, 0, numel, 0);
	t = us_sd_add_tensor(sd, name, v.dtype, probe.ndim, probe.shape, n,
			     model[0].relpath, err);
	if (!t)
		return err ? err->status : US_E_NOMEM;
	us_flat_place(t, &next, &v, 0, numel, 0);
	return US_OK;
}

enum us_status us_ds_add_ties(struct us_statedict *sd, const struct us_pk *ms,
			      struct us_err *err)
{
	const struct us_pk *sp = us_pk_dict_get(ms, "shared_params");

	for (size_t i = 0; us_pk_is_dictlike(sp) && i < sp->coll->keys.n; i++) {
		const struct us_pk *k = sp->coll->keys.v[i], *v = sp->coll->vals.v[i];

		if (k->kind == US_PK_STR && v->kind == US_PK_STR &&
		    us_sd_add_alias(sd, k->u.str.s, v->u.str.s) != US_OK)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	return US_OK;
}

enum us_status us_ds_module_refusal(const char *path, struct us_err *err)
{
	return us_err_set(err, US_E_UNSUPPORTED, path,
			  "--deepspeed-weights=module: a ZeRO-3 module holds no "
			  "weights (they are partitioned); use fp32");
}

/* The unwrapped names of group @gi's parameters, as a JSON array (NULL
 * when out of memory: never a shorter list). */
static cJSON *group_names(const struct us_statedict *sd,
			  const struct us_ds_param *params, uint32_t n,
			  uint32_t gi)
{
	cJSON *names = cJSON_CreateArray();
	char buf[4096];

	for (uint32_t i = 0; names && i < n; i++) {
		cJSON *s;

		if (params[i].group != gi || strlen(params[i].name) >= sizeof(buf))
			continue;
		us_unwrap_name(params[i].name, sd->names, buf);
		s = cJSON_CreateString(buf);
		if (!cJSON_AddItemToArray(names, s)) {
			cJSON_Delete(s);
			cJSON_Delete(names);
			names = NULL;
		}
	}
	return names;
}

enum us_status us_ds_optim_json(struct us_statedict *sd, const struct us_pk *groups,
				const struct us_ds_param *params, uint32_t n,
				struct us_err *err)
{
	cJSON *tree = cJSON_CreateObject(), *jg = us_pk_to_json(groups), *g;
	uint32_t gi = 0;

	if (!tree || !jg || !cJSON_AddItemToObject(tree, "param_groups", jg)) {
		cJSON_Delete(tree);
		cJSON_Delete(jg);
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	cJSON_ArrayForEach(g, jg) {
		cJSON *old = cJSON_GetObjectItemCaseSensitive(g, "params"), *names;

		if (!old) {
			gi++; /* no list to name: the group stays as saved */
			continue;
		}
		/* The key is set here: cJSON 1.7.15's ReplaceItemInObject does
		 * not check its copy of the key, and a failed copy printed the
		 * group without "params" (tests/faultinject). */
		names = group_names(sd, params, n, gi++);
		if (names && (names->string = cJSON_malloc(sizeof("params"))))
			memcpy(names->string, "params", sizeof("params"));
		if (!names || !names->string ||
		    !cJSON_ReplaceItemViaPointer(g, old, names)) {
			cJSON_Delete(names);
			cJSON_Delete(tree);
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
		}
	}
	sd->optim_json = cJSON_Print(tree);
	cJSON_Delete(tree);
	return sd->optim_json ? US_OK :
	       us_err_set(err, US_E_NOMEM, ".", "out of memory");
}
