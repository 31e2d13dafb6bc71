/*
 * dcp.c - the PyTorch Distributed Checkpoint reader (FSDP, FSDP2, DTensor
 * and tensor parallel, Accelerate, Lightning, Megatron torch_dist).
 *
 * .metadata is a pickle of Metadata{state_dict_metadata, storage_data,
 * planner_data}; classes are matched by their final name, because their
 * modules moved between torch 1.13 and today (formats.md).  Each tensor is a
 * list of chunks (N-D boxes, listed in rank order); each chunk's bytes are a
 * torch.save archive at [offset, offset + length) of a .distcp file, parsed
 * in place for its dtype, shape, strides and storage record.  Coverage (no
 * hole, no overlap) is checked by us_sd_finalize().  An item saved with the
 * zstd extension ("stream.zstd/1") is one zstd frame of such an archive:
 * only its head is decoded here (dcp_zstd.h), and reads decode it through
 * the cache (assemble/zitem.h).
 */
#include "../source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../codec/json.h"
#include "../../codec/pk2json.h"
#include "../../io.h"
#include "../../path.h"
#include "dcp_zstd.h"
#include "../idnames.h"
#include "../../codec/torchpkl.h"

#define MAX_METADATA (1ull << 30)

struct dcp_item {
	const char *fqn;
	const struct us_pk *offsets; /* a tuple of ints, or NULL */
	const char *relpath;
	uint64_t offset, length;
	const struct us_pk *transforms;
};

struct dcp {
	struct us_statedict *sd;
	const struct us_dir *dir;
	const char *prefix;     /* "" or "pytorch_model_fsdp_0/" */
	const char *metapath;   /* prefix + ".metadata", for messages */
	struct us_arena arena;  /* the pickle and the item table */
	struct dcp_item *items;
	size_t nitems;
	const struct us_pk *planner;
	/* planner_data's entries sorted by key: looked up once per entry of
	 * the state dict, which a linear search made quadratic (20k tensors:
	 * 2.5 s at mount) */
	struct planner_ent *pidx;
	size_t npidx;
	const char *strip;      /* the container key to drop, or NULL */
	bool optim_only;        /* Accelerate's optimizer_0/: no model tensors */
	bool bare_optim;        /* dcp.save(optimizer state dict) itself: its
				 * "state" and "param_groups" are top-level */
	cJSON *optim_tree;      /* non-tensor optimizer state, built up */
	size_t *json_budget;    /* values left to convert, for the whole source:
				 * shared references must not multiply the work */
	struct us_err *err;
};

/* A dataclass attribute: BUILD state is a dict, or (None, slots dict). */
static const struct us_pk *attr(const struct us_pk *obj, const char *name)
{
	const struct us_pk *st;

	if (!obj || obj->kind != US_PK_CALL)
		return NULL;
	st = obj->u.call.state;
	if (st && st->kind == US_PK_TUPLE && st->u.seq.n == 2) {
		const struct us_pk *v = us_pk_dict_get(st->u.seq.v[1], name);

		return v ? v : us_pk_dict_get(st->u.seq.v[0], name);
	}
	return us_pk_dict_get(st, name);
}

static bool is_class(const struct us_pk *obj, const char *name)
{
	return obj && obj->kind == US_PK_CALL && us_pk_global_named(obj->u.call.fn, name);
}

/* torch.Size((...)) or a plain tuple -> the tuple. */
static const struct us_pk *size_tuple(const struct us_pk *p)
{
	if (p && p->kind == US_PK_CALL && us_pk_global_named(p->u.call.fn, "Size"))
		p = us_pk_at(p->u.call.args, 0);
	return p && p->kind == US_PK_TUPLE ? p : NULL;
}

static bool tuple_u64(const struct us_pk *t, uint32_t n, uint64_t *out)
{
	if (!t || t->u.seq.n != n)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		const struct us_pk *v = t->u.seq.v[i];

		if (v->kind != US_PK_INT || v->u.i < 0)
			return false;
		out[i] = (uint64_t)v->u.i;
	}
	return true;
}

static int cmp_offsets(const struct us_pk *a, const struct us_pk *b)
{
	size_t na = a ? a->u.seq.n : 0, nb = b ? b->u.seq.n : 0;

	for (size_t i = 0; i < na && i < nb; i++)
		if (a->u.seq.v[i]->u.i != b->u.seq.v[i]->u.i)
			return a->u.seq.v[i]->u.i < b->u.seq.v[i]->u.i ? -1 : 1;
	return na < nb ? -1 : na > nb;
}

static int cmp_item(const void *x, const void *y)
{
	const struct dcp_item *a = x, *b = y;
	int c = strcmp(a->fqn, b->fqn);

	return c ? c : cmp_offsets(a->offsets, b->offsets);
}

static bool int_tuple_ok(const struct us_pk *t)
{
	for (size_t i = 0; t && i < t->u.seq.n; i++)
		if (t->u.seq.v[i]->kind != US_PK_INT)
			return false;
	return true;
}

/* Does the string @s hold a NUL byte before its end? */
static bool has_nul(const struct us_pk *s)
{
	return memchr(s->u.str.s, '\0', s->u.str.len) != NULL;
}

/* storage_data: {MetadataIndex(fqn, offset, index): _StorageInfo(...)}. */
static enum us_status load_items(struct dcp *d, const struct us_pk *storage)
{
	size_t n = storage->coll ? storage->coll->keys.n : 0;

	d->items = us_arena_calloc(&d->arena, n + 1, sizeof(*d->items));
	if (!d->items)
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const struct us_pk *k = storage->coll->keys.v[i];
		const struct us_pk *v = storage->coll->vals.v[i];
		const struct us_pk *fqn = attr(k, "fqn"), *rel = attr(v, "relative_path");
		const struct us_pk *off = attr(v, "offset"), *len = attr(v, "length");
		struct dcp_item *it = &d->items[d->nitems];

		if (!fqn || fqn->kind != US_PK_STR || !rel || rel->kind != US_PK_STR ||
		    !off || off->kind != US_PK_INT || off->u.i < 0 ||
		    !len || len->kind != US_PK_INT || len->u.i < 0)
			return us_err_set(d->err, US_E_FORMAT, d->metapath,
					  "malformed storage_data entry %zu", i);
		/* C strings from here on: a NUL would cut a path short
		 * ("__1_0.distcp\0/../../etc/passwd") or merge two names */
		if (has_nul(fqn) || has_nul(rel))
			return us_err_set(d->err, US_E_FORMAT, d->metapath,
					  "storage_data entry %zu has a NUL byte in "
					  "its %s", i, has_nul(rel) ? "relative_path" : "fqn");
		it->fqn = fqn->u.str.s;
		it->offsets = size_tuple(attr(k, "offset"));
		if (!int_tuple_ok(it->offsets))
			return us_err_set(d->err, US_E_FORMAT, d->metapath,
					  "malformed chunk offset for '%s'", it->fqn);
		it->relpath = rel->u.str.s;
		it->offset = (uint64_t)off->u.i;
		it->length = (uint64_t)len->u.i;
		it->transforms = attr(v, "transform_descriptors");
		d->nitems++;
	}
	qsort(d->items, d->nitems, sizeof(*d->items), cmp_item);
	return US_OK;
}

static const struct dcp_item *find_item(const struct dcp *d, const char *fqn,
					const struct us_pk *offsets)
{
	struct dcp_item key = { .fqn = fqn, .offsets = offsets };

	return bsearch(&key, d->items, d->nitems, sizeof(*d->items), cmp_item);
}

/* ---- planner_data --------------------------------------------------------- */

struct planner_ent {
	const char *key;
	const struct us_pk *path;
};

static int cmp_planner(const void *a, const void *b)
{
	return strcmp(((const struct planner_ent *)a)->key,
		      ((const struct planner_ent *)b)->key);
}

static enum us_status index_planner(struct dcp *d)
{
	const struct us_pk *p = d->planner;
	size_t n = us_pk_is_dictlike(p) ? p->coll->keys.n : 0;

	if (!n)
		return US_OK;
	d->pidx = us_arena_calloc(&d->arena, n, sizeof(*d->pidx));
	if (!d->pidx)
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (p->coll->keys.v[i]->kind == US_PK_STR)
			d->pidx[d->npidx++] = (struct planner_ent){
				.key = p->coll->keys.v[i]->u.str.s,
				.path = p->coll->vals.v[i] };
	qsort(d->pidx, d->npidx, sizeof(*d->pidx), cmp_planner);
	return US_OK;
}

/* planner_data[@fqn], or NULL.  (Equal keys: a dict pickle keeps the
 * last; bsearch may find either -- both refer to one name.) */
static const struct us_pk *planner_get(const struct dcp *d, const char *fqn)
{
	struct planner_ent key = { .key = fqn }, *hit;

	if (!d->npidx)
		return NULL;
	hit = bsearch(&key, d->pidx, d->npidx, sizeof(*d->pidx), cmp_planner);
	return hit ? hit->path : NULL;
}

/* ---- names: the container rule -------------------------------------------- */

/* The top-level container of @fqn: planner_data says how the state dict was
 * flattened, ("model", "layers.0.w") -> "model".  NULL for a flat key. */
static const char *container_of(const struct dcp *d, const char *fqn,
				char *buf, size_t len)
{
	const struct us_pk *path = planner_get(d, fqn);
	const char *dot;

	if (path && path->kind == US_PK_TUPLE) {
		const struct us_pk *c = us_pk_at(path, 0);

		return path->u.seq.n >= 2 && c && c->kind == US_PK_STR ? c->u.str.s : NULL;
	}
	/* No planner_data (older torch): only the well-known container keys. */
	dot = strchr(fqn, '.');
	if (!dot || (size_t)(dot - fqn) >= len)
		return NULL;
	memcpy(buf, fqn, (size_t)(dot - fqn));
	buf[dot - fqn] = '\0';
	return us_is_optimizer_container(buf) || us_is_model_container(buf) ?
	       buf : NULL;
}

static bool is_tensor_entry(const struct us_pk *v)
{
	return is_class(v, "TensorStorageMetadata");
}

/* Drop the container when every model tensor lives under the same one. */
static enum us_status choose_strip(struct dcp *d, const struct us_pk *smd)
{
	const char *cand = NULL;
	char buf[256];

	for (size_t i = 0; i < smd->coll->keys.n; i++) {
		const struct us_pk *k = smd->coll->keys.v[i];
		const char *c;

		if (k->kind != US_PK_STR || !is_tensor_entry(smd->coll->vals.v[i]))
			continue;
		c = container_of(d, k->u.str.s, buf, sizeof(buf));
		if (c && us_is_optimizer_container(c))
			continue;
		if (!c || (cand && strcmp(cand, c) != 0))
			return US_OK; /* flat keys, or several containers */
		if (!cand && !(cand = us_arena_strdup(&d->arena, c)))
			return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	}
	d->strip = cand;
	return US_OK;
}

/* Is @fqn part of the model view, and under which name? */
static const char *model_name(const struct dcp *d, const char *fqn)
{
	char buf[256];
	const char *c = container_of(d, fqn, buf, sizeof(buf));

	if (c && us_is_optimizer_container(c))
		return NULL; /* the optimizer view's */
	if (d->strip && c && !strcmp(c, d->strip) &&
	    !strncmp(fqn, c, strlen(c)) && fqn[strlen(c)] == '.')
		return fqn + strlen(c) + 1;
	return fqn;
}

/* ---- chunks --------------------------------------------------------------- */

/* The item's transform: none, or exactly one zstd stream; others refused. */
static enum us_status check_transforms(const struct dcp *d,
				       const struct dcp_item *it,
				       enum us_transform *xf)
{
	const struct us_pk *t = it->transforms;

	*xf = US_XF_NONE;
	if (!t || t->kind == US_PK_NONE || us_pk_len(t) == 0)
		return US_OK;
	if (us_pk_len(t) == 1 && us_pk_is_str(us_pk_at(t, 0), "stream.zstd/1")) {
		*xf = US_XF_ZSTD;
		return US_OK;
	}
	return us_err_set(d->err, US_E_UNSUPPORTED, d->metapath,
			  "'%s' has an unknown storage transform", it->fqn);
}

static enum us_status open_item_file(struct dcp *d, const struct dcp_item *it,
				     uint32_t *file)
{
	char path[4096];
	const struct us_file *f;
	uint64_t end;

	if (!us_path_is_inside(it->relpath))
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "storage_data names '%s', which is outside the "
				  "checkpoint directory", it->relpath);
	if (snprintf(path, sizeof(path), "%s%s", d->prefix, it->relpath) >=
	    (int)sizeof(path))
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "storage path too long");
	US_TRY(us_sd_open_file(d->sd, d->dir, path, file, d->err));
	f = &d->sd->files[*file];
	if (__builtin_add_overflow(it->offset, it->length, &end) ||
	    end > (uint64_t)f->size)
		return us_err_set(d->err, US_E_FORMAT, f->relpath,
				  "item of '%s' at [%llu, +%llu) runs past the end "
				  "of the file (%lld bytes): truncated?", it->fqn,
				  (unsigned long long)it->offset,
				  (unsigned long long)it->length, (long long)f->size);
	return US_OK;
}

/* A stored item: its archive is parsed in place, offsets are the file's.
 * Failures leave a reason without a path in @why (item_extent adds it). */
static enum us_status plain_item(const struct us_file *f,
				 const struct dcp_item *it,
				 struct us_arena *a, struct us_torch_tensor *tt,
				 struct us_extent *x, struct us_err *why)
{
	struct us_torch_archive ta;
	bool found;

	US_TRY(us_torch_archive_open(&ta, f, it->offset, it->length, a, why));
	US_TRY(us_torch_match(ta.root, tt, &found, why));
	if (!found)
		return us_err_reason(why, US_E_FORMAT, "item is not a tensor");
	return us_torch_extent(&ta, tt, &x->offset, why);
}

/*
 * A zstd item: only its head is decoded (dcp_zstd.h), and small items
 * whole.  decoded_len is the end of the storage record plus room for its
 * data descriptor -- all a read needs (the bytes and their CRC-32), and a
 * lower bound of the item's decoded size that the zip structure
 * guarantees: a real stream shorter than that, or whose record fails its
 * CRC (possible only for an item too long to be verified here), makes
 * reads of that tensor answer EIO, never other bytes.
 */
static enum us_status zstd_item(const struct us_file *f,
				const struct dcp_item *it,
				struct us_arena *a, struct us_torch_tensor *tt,
				struct us_extent *x, struct us_err *why,
				uint64_t *bad_at)
{
	struct us_dcp_zitem zi;
	enum us_status st = us_dcp_zstd_item(f, it->offset, it->length, a, &zi,
					     why);

	if (st != US_OK) {
		*bad_at = zi.bad_at;
		return st;
	}
	*tt = zi.tt;
	x->xf = US_XF_ZSTD;
	x->item_off = it->offset;
	x->item_len = it->length;
	x->decoded_len = zi.served;
	x->offset = zi.first;
	return US_OK;
}

/* Parse the item's torch.save archive and point the chunk at its storage. */
static enum us_status item_extent(struct dcp *d, const struct dcp_item *it,
				  const struct us_tensor *t, struct us_chunk *c)
{
	struct us_torch_tensor tt;
	struct us_arena a;
	struct us_err why;
	enum us_transform xf;
	uint32_t file;
	int64_t *strides;
	uint64_t bad_at = UINT64_MAX;
	enum us_status rc = US_OK;
	const struct us_file *f;

	US_TRY(check_transforms(d, it, &xf));
	US_TRY(open_item_file(d, it, &file));
	f = &d->sd->files[file];
	us_arena_init(&a);
	rc = xf == US_XF_ZSTD ? zstd_item(f, it, &a, &tt, &c->src, &why, &bad_at)
			      : plain_item(f, it, &a, &tt, &c->src, &why);
	if (rc != US_OK) {
		char at[96] = "";

		/* Where the frame walk found the damage, to look at it. */
		if (bad_at != UINT64_MAX)
			snprintf(at, sizeof(at), " (at byte %llu of the item, "
				 "%llu of the file)", (unsigned long long)bad_at,
				 (unsigned long long)(it->offset + bad_at));
		rc = us_err_set(d->err, rc, d->sd->files[file].relpath,
				"item of '%s': %s%s", it->fqn, why.msg, at);
		goto out;
	}
	if (tt.dtype != t->dtype || tt.ndim != t->ndim ||
	    memcmp(tt.shape, c->sizes, t->ndim * sizeof(uint64_t)) != 0) {
		rc = us_err_set(d->err, US_E_FORMAT, d->sd->files[file].relpath,
				"item of '%s' holds a %s tensor whose shape differs "
				"from its chunk in .metadata", it->fqn,
				us_dtype_name(tt.dtype));
		goto out;
	}
	strides = us_arena_calloc(&d->sd->arena, t->ndim + 1, sizeof(*strides));
	if (!strides) {
		rc = us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
		goto out;
	}
	memcpy(strides, tt.strides, t->ndim * sizeof(*strides));
	c->src.file = file;
	c->src.strides = strides;
out:
	us_arena_free(&a);
	return rc;
}

/* One chunk: its box from .metadata, its bytes from the matching item. */
static enum us_status add_chunk(struct dcp *d, const char *fqn,
				const struct us_pk *cm, struct us_tensor *t,
				uint32_t *nc)
{
	const struct us_pk *off = size_tuple(attr(cm, "offsets"));
	const struct us_pk *sz = size_tuple(attr(cm, "sizes"));
	struct us_chunk *c = &t->chunks[*nc];
	const struct dcp_item *it;
	uint64_t vol = 1;

	if (!tuple_u64(off, t->ndim, (uint64_t *)c->offsets) ||
	    !tuple_u64(sz, t->ndim, (uint64_t *)c->sizes))
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "'%s': malformed chunk", fqn);
	for (uint32_t k = 0; k < t->ndim; k++)
		vol *= c->sizes[k] ? 1 : 0;
	if (!vol)
		return US_OK; /* zero-volume chunks (offset = dim size) occur */
	it = find_item(d, fqn, off);
	if (!it)
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "'%s': a chunk has no storage_data entry", fqn);
	US_TRY(item_extent(d, it, t, c));
	(*nc)++;
	return US_OK;
}

static enum us_status tensor_dtype(const struct dcp *d, const char *fqn,
				   const struct us_pk *props, enum us_dtype *dt)
{
	const struct us_pk *st = props && props->kind == US_PK_CALL ?
				 props->u.call.state : NULL;
	const struct us_pk *g = st && st->kind == US_PK_TUPLE ? us_pk_at(st, 0)
							      : attr(props, "dtype");

	if (!us_torch_dtype(g, dt))
		return us_err_set(d->err, US_E_UNSUPPORTED, d->metapath,
				  "'%s': dtype %s has no safetensors equivalent", fqn,
				  g && g->kind == US_PK_GLOBAL ? g->u.global.name : "?");
	return US_OK;
}

static enum us_status add_tensor(struct dcp *d, struct us_statedict *dst,
				 const char *fqn, const char *name,
				 const struct us_pk *tsm)
{
	const struct us_pk *size = size_tuple(attr(tsm, "size"));
	const struct us_pk *chunks = attr(tsm, "chunks");
	uint64_t shape[US_MAX_NDIM];
	uint32_t ndim, nc = 0;
	enum us_dtype dt;
	struct us_tensor *t;

	if (strstr(fqn, "_flat_param"))
		return us_err_set(d->err, US_E_UNSUPPORTED, d->metapath,
				  "'%s' is an FSDP1 LOCAL_STATE_DICT flat parameter: "
				  "the split into parameters is not saved, so it "
				  "cannot be unflattened without the model; save "
				  "with SHARDED_STATE_DICT or FSDP2 instead", fqn);
	US_TRY(tensor_dtype(d, fqn, attr(tsm, "properties"), &dt));
	ndim = size ? (uint32_t)size->u.seq.n : US_MAX_NDIM + 1;
	if (ndim > US_MAX_NDIM || !tuple_u64(size, ndim, shape) ||
	    !chunks || chunks->kind != US_PK_LIST)
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "'%s': malformed size or chunk list", fqn);
	t = us_sd_add_tensor(dst, name, dt, ndim, shape,
			     (uint32_t)chunks->u.seq.n, d->metapath, d->err);
	if (!t)
		return d->err ? d->err->status : US_E_NOMEM;
	t->source_name = us_arena_strdup(&dst->arena, fqn);
	if (!t->source_name)
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	for (size_t i = 0; i < chunks->u.seq.n; i++)
		US_TRY(add_chunk(d, fqn, chunks->u.seq.v[i], t, &nc));
	t->nchunks = nc;
	return US_OK;
}

/* ---- .metadata ------------------------------------------------------------ */

static enum us_status load_metadata(struct dcp *d, const struct us_pk **root)
{
	const struct us_file *f;
	struct us_err why;
	unsigned char *buf;
	uint32_t idx;
	size_t used;
	enum us_status st;

	US_TRY(us_sd_open_file(d->sd, d->dir, d->metapath, &idx, d->err));
	f = &d->sd->files[idx];
	if ((uint64_t)f->size > MAX_METADATA)
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "larger than 1 GiB");
	buf = malloc((size_t)f->size + 1);
	if (!buf)
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	if (us_file_pread(f, buf, (size_t)f->size, 0) != US_OK) {
		us_err_set(d->err, US_E_IO, d->metapath, "cannot read: %s",
			   us_file_strerror(f));
		free(buf);
		return US_E_IO;
	}
	st = us_pickle_load(buf, (size_t)f->size, &d->arena,
			    (struct us_pk **)root, &used, &why);
	free(buf);
	if (st == US_E_NOMEM)
		return us_err_set(d->err, st, d->metapath, "%s", why.msg);
	if (st != US_OK)
		return us_err_set(d->err, st, d->metapath,
				  "not a DCP metadata pickle: %s", why.msg);
	if (!is_class(*root, "Metadata"))
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "does not hold a DCP Metadata object");
	return US_OK;
}

/* Every .distcp and *.metadata file of the DCP directory is checkpoint. */
static enum us_status consume_dir(struct dcp *d)
{
	char **names, path[4096];
	size_t n;
	struct us_dir sub;
	enum us_status rc = US_OK;

	if (us_dir_openat(d->dir, *d->prefix ? d->prefix : ".", &sub) < 0)
		return us_err_set(d->err, US_E_IO, d->metapath, "cannot list");
	if (us_dirlist(&sub, &names, &n) != US_OK) {
		us_dir_close(&sub);
		return us_err_set(d->err, US_E_IO, d->metapath, "cannot list");
	}
	for (size_t i = 0; rc == US_OK && i < n; i++) {
		if (!us_path_has_suffix(names[i], ".distcp") &&
		    !us_path_has_suffix(names[i], ".metadata") &&
		    strcmp(names[i], ".metadata") != 0)
			continue;
		snprintf(path, sizeof(path), "%s%s", d->prefix, names[i]);
		rc = us_sd_consume(d->sd, path);
	}
	us_dirlist_free(names, n);
	us_dir_close(&sub);
	return rc;
}

/* ---- optimizer state ------------------------------------------------------ */

/*
 * Optimizer entries are flattened as (container, "state", <param fqn>,
 * <slot>) and (container, "param_groups", <i>, <key>) in planner_data.
 * Tensors become "state.<param>.<slot>" in the optimizer state dict; byte
 * items (Python values) go into the JSON tree at their path, except
 * per-parameter ones, which are "scalars" under their flattened name.
 */
static const struct us_pk *planner_path(const struct dcp *d, const char *fqn)
{
	const struct us_pk *p = planner_get(d, fqn);

	return p && p->kind == US_PK_TUPLE && p->u.seq.n >= 2 ? p : NULL;
}

/* "<container>.<rest>" -> "<rest>" (the name inside the optimizer). */
static const char *optim_name(const struct dcp *d, const char *fqn)
{
	const struct us_pk *path = planner_path(d, fqn);
	const struct us_pk *c = path ? us_pk_at(path, 0) : NULL;
	const char *dot = strchr(fqn, '.');

	if (d->bare_optim)
		return fqn; /* no container: already "state.<param>.<slot>" */
	if (c && c->kind == US_PK_STR && !strncmp(fqn, c->u.str.s, c->u.str.len) &&
	    fqn[c->u.str.len] == '.')
		return fqn + c->u.str.len + 1;
	return dot ? dot + 1 : fqn;
}

/* The Python object of a byte item: the data.pkl of its torch.save
 * archive, stored, or compressed (decoded whole, up to 16 MiB). */
static enum us_status byte_item_root(const struct us_file *f,
				     const struct dcp_item *it,
				     enum us_transform xf, struct us_arena *a,
				     struct us_pk **root, struct us_err *why)
{
	struct us_torch_archive ta;

	if (xf == US_XF_ZSTD)
		return us_dcp_zstd_value(f, it->offset, it->length, a, root, why);
	US_TRY(us_torch_archive_open(&ta, f, it->offset, it->length, a, why));
	*root = ta.root;
	return US_OK;
}

/*
 * A failure while decoding an informative value: the checkpoint's fault
 * (an unknown transform, a damaged archive, a file that cannot be opened)
 * makes the value null, never a refusal; the machine's (memory, a failed
 * read of a file that opened) refuses, since the same SOURCE must always
 * give the same optimizer.json (tests/faultinject).
 */
static bool value_is_null_for(enum us_status rc)
{
	return rc != US_E_NOMEM && rc != US_E_IO;
}

/* The value of a byte item (a torch.save archive of a Python object) in
 * *@out: null when it cannot be decoded (value_is_null_for). */
static enum us_status byte_item_value(struct dcp *d, const char *fqn,
				      cJSON **out)
{
	const struct dcp_item *it = find_item(d, fqn, NULL);
	struct us_err ignored, *err = d->err;
	enum us_transform xf;
	enum us_status rc;
	struct us_pk *root;
	struct us_arena a;
	uint32_t file;

	*out = NULL;
	d->err = &ignored; /* scratch: a null value needs no message */
	rc = it ? check_transforms(d, it, &xf) : US_E_FORMAT;
	if (rc == US_OK)
		rc = open_item_file(d, it, &file);
	d->err = err;
	if (rc == US_E_NOMEM)
		return us_err_set(err, US_E_NOMEM, d->metapath, "out of memory");
	if (rc == US_OK) {
		us_arena_init(&a);
		rc = byte_item_root(&d->sd->files[file], it, xf, &a, &root,
				    &ignored);
		if (rc == US_OK && !(*out = us_pk_to_json_budget(root, d->json_budget)))
			rc = US_E_NOMEM;
		us_arena_free(&a);
		if (!value_is_null_for(rc))
			return us_err_set(err, rc, it->relpath, "item of '%s': %s",
					  fqn, rc == US_E_NOMEM ? "out of memory"
								: ignored.msg);
	}
	if (!*out && !(*out = cJSON_CreateNull()))
		return us_err_set(err, US_E_NOMEM, d->metapath, "out of memory");
	return US_OK;
}

/*
 * Grow @arr with nulls to @n items.  Each null costs one of @budget (the
 * checkpoint's JSON budget): a planner path of 40 indexes near 65535 would
 * otherwise make 40 * 65535 of them -- and counting the array's items on
 * every one (cJSON walks its list) made that 10^10 steps (fuzz_dcp_metadata).
 */
static enum us_status pad_array(cJSON *arr, size_t n, size_t *budget)
{
	size_t have = (size_t)cJSON_GetArraySize(arr);

	if (have >= n)
		return US_OK;
	if (n - have > *budget)
		return US_E_UNSUPPORTED;
	*budget -= n - have;
	for (; have < n; have++) {
		cJSON *null = cJSON_CreateNull();

		if (!cJSON_AddItemToArray(arr, null)) {
			cJSON_Delete(null);
			return US_E_NOMEM;
		}
	}
	return US_OK;
}

/* A new container for the next path key: an array before an int. */
static cJSON *new_node(bool next_int)
{
	return next_int ? cJSON_CreateArray() : cJSON_CreateObject();
}

/*
 * Put @v at @path[@from..] under the tree root (ints index arrays).
 * US_OK: placed (the tree owns @v); US_E_UNSUPPORTED: the path does not fit
 * the tree (a key where an index is, an index past the budget), @v still
 * the caller's; US_E_NOMEM: out of memory, @v still the caller's.  Memory
 * must never move a value elsewhere: the same SOURCE gives one
 * optimizer.json (tests/faultinject).
 */
static enum us_status tree_put(cJSON *root, const struct us_pk *path,
			       size_t from, cJSON *v, size_t *budget)
{
	cJSON *node = root;

	for (size_t i = from; i < path->u.seq.n; i++) {
		const struct us_pk *k = path->u.seq.v[i];
		bool last = i + 1 == path->u.seq.n;
		bool next_int = !last && path->u.seq.v[i + 1]->kind == US_PK_INT;
		cJSON *child;

		if (k->kind == US_PK_STR && cJSON_IsObject(node)) {
			child = cJSON_GetObjectItemCaseSensitive(node, k->u.str.s);
			if (last) {
				/* only the key's copy can fail */
				cJSON_DeleteItemFromObjectCaseSensitive(node, k->u.str.s);
				return cJSON_AddItemToObject(node, k->u.str.s, v)
					       ? US_OK : US_E_NOMEM;
			}
			if (!child) {
				child = new_node(next_int);
				if (!cJSON_AddItemToObject(node, k->u.str.s, child)) {
					/* not added: still ours (it leaked when
					 * the key's copy failed: faultinject) */
					cJSON_Delete(child);
					return US_E_NOMEM;
				}
			}
		} else if (k->kind == US_PK_INT && k->u.i >= 0 && k->u.i < 65536 &&
			   cJSON_IsArray(node)) {
			US_TRY(pad_array(node, (size_t)k->u.i + 1, budget));
			if (last) /* padded: the slot exists, nothing allocates */
				return cJSON_ReplaceItemInArray(node, (int)k->u.i, v)
					       ? US_OK : US_E_UNSUPPORTED;
			child = cJSON_GetArrayItem(node, (int)k->u.i);
			if (cJSON_IsNull(child)) {
				child = new_node(next_int);
				/* unchecked, an orphan child (and @v in it) leaked */
				if (!child ||
				    !cJSON_ReplaceItemInArray(node, (int)k->u.i, child)) {
					cJSON_Delete(child);
					return US_E_NOMEM;
				}
			}
		} else {
			return US_E_UNSUPPORTED;
		}
		node = child;
	}
	return US_E_UNSUPPORTED;
}

static enum us_status add_optim_value(struct dcp *d, const char *fqn)
{
	const struct us_pk *path = planner_path(d, fqn);
	size_t from = d->bare_optim ? 0 : 1; /* past the container key */
	enum us_status rc = US_E_UNSUPPORTED;
	cJSON *v, *scalars;

	US_TRY(byte_item_value(d, fqn, &v));
	if (path && us_pk_is_str(us_pk_at(path, from), "param_groups"))
		rc = tree_put(d->optim_tree, path, from, v, d->json_budget);
	if (rc == US_OK)
		return US_OK;
	if (rc == US_E_NOMEM) {
		cJSON_Delete(v);
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	}
	scalars = cJSON_GetObjectItemCaseSensitive(d->optim_tree, "scalars");
	if (!cJSON_AddItemToObject(scalars, optim_name(d, fqn), v)) {
		/* Its key could not be copied: v is still ours (it leaked,
		 * and the value went missing: tests/faultinject). */
		cJSON_Delete(v);
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	}
	return US_OK;
}

static enum us_status read_entry(struct dcp *d, const char *fqn,
				 const struct us_pk *v)
{
	char buf[256];
	const char *c = container_of(d, fqn, buf, sizeof(buf));
	bool optim = d->optim_only || (c && us_is_optimizer_container(c));
	struct us_statedict *o;

	if (!optim) {
		return is_tensor_entry(v) ? add_tensor(d, d->sd, fqn,
						       model_name(d, fqn), v)
					  : US_OK; /* a non-tensor model value */
	}
	if (!is_tensor_entry(v))
		return add_optim_value(d, fqn);
	o = us_sd_optim(d->sd);
	if (!o)
		return us_err_set(d->err, US_E_NOMEM, d->metapath, "out of memory");
	return add_tensor(d, o, fqn, optim_name(d, fqn), v);
}

/* The first element of @fqn's flattening path ("state" of ("state",
 * "w", "exp_avg")), or its first dotted segment without planner_data. */
static bool top_key_is(const struct dcp *d, const char *fqn, const char *key)
{
	const struct us_pk *path = planner_path(d, fqn);
	size_t n = strlen(key);

	if (d->npidx) /* a model's "state.w" flattens to ("state.w",) */
		return path && us_pk_is_str(us_pk_at(path, 0), key);
	return !strncmp(fqn, key, n) && fqn[n] == '.';
}

/*
 * dcp.save(optimizer_state_dict) with no container around it: every entry
 * sits under "state" or "param_groups", and both are there.  Without this
 * the "state" prefix would pass for a model container and the moments for
 * weights.
 */
static bool is_bare_optimizer(const struct dcp *d, const struct us_pk *smd)
{
	bool state = false, groups = false;

	for (size_t i = 0; smd->coll && i < smd->coll->keys.n; i++) {
		const struct us_pk *k = smd->coll->keys.v[i];

		if (k->kind != US_PK_STR)
			return false;
		if (top_key_is(d, k->u.str.s, "state"))
			state = true;
		else if (top_key_is(d, k->u.str.s, "param_groups"))
			groups = true;
		else
			return false;
	}
	return state && groups;
}

/*
 * A remote SOURCE: ask for the records around the items of the entries
 * after @i (each item is a torch.save archive: its header and its end
 * records are what add_tensor reads), so that the store fetches them in
 * parallel while we parse, instead of one round trip each, in turn (a 4 GB
 * DCP of a model and its Adam state holds thousands of items).  Only files
 * already open are advised: opening one here would change which refusal a
 * broken checkpoint gets.  Local files need no hint (the page cache).
 */
#define ADVISE_AHEAD 64 /* entries */
#define ITEM_EDGE 4096u /* bytes at each end of an item */

static const struct us_file *open_file_named(const struct dcp *d,
					     const char *relpath)
{
	char path[4096];

	if (snprintf(path, sizeof(path), "%s%s", d->prefix, relpath) >=
	    (int)sizeof(path))
		return NULL;
	return us_sd_find_file(d->sd, path);
}

static void advise_items(const struct dcp *d, const char *fqn)
{
	size_t lo = 0, hi = d->nitems;

	while (lo < hi) { /* the first item of @fqn: items sort by fqn first */
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(d->items[mid].fqn, fqn) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < d->nitems && !strcmp(d->items[lo].fqn, fqn); lo++) {
		const struct dcp_item *it = &d->items[lo];
		const struct us_file *f = open_file_named(d, it->relpath);
		uint64_t edge = it->length < ITEM_EDGE ? it->length : ITEM_EDGE;

		if (!f || it->offset > (uint64_t)f->size ||
		    it->length > (uint64_t)f->size - it->offset)
			continue; /* add_tensor refuses it, in its turn */
		/* each edge with the neighbouring item's: one range per
		 * boundary, asked for twice (by both items) but fetched once */
		uint64_t from = it->offset > ITEM_EDGE ? it->offset - ITEM_EDGE : 0;

		us_file_advise(f, from, it->offset + edge - from);
		us_file_advise(f, it->offset + it->length - edge, edge + ITEM_EDGE);
	}
}

static void advise_ahead(const struct dcp *d, const struct us_pk *smd,
			 size_t i, size_t *upto)
{
	if (!d->dir || !d->dir->remote)
		return;
	for (; *upto < smd->coll->keys.n && *upto <= i + ADVISE_AHEAD; (*upto)++) {
		const struct us_pk *k = smd->coll->keys.v[*upto];

		if (k->kind == US_PK_STR && !has_nul(k))
			advise_items(d, k->u.str.s);
	}
}

static enum us_status read_tensors(struct dcp *d, const struct us_pk *root)
{
	const struct us_pk *smd = attr(root, "state_dict_metadata");
	const struct us_pk *storage = attr(root, "storage_data");

	if (!smd || smd->kind != US_PK_DICT || !storage || storage->kind != US_PK_DICT)
		return us_err_set(d->err, US_E_FORMAT, d->metapath,
				  "Metadata lacks state_dict_metadata or storage_data");
	d->planner = attr(root, "planner_data");
	US_TRY(index_planner(d));
	US_TRY(load_items(d, storage));
	d->bare_optim = is_bare_optimizer(d, smd);
	d->optim_only |= d->bare_optim;
	/* --no-unwrap keeps the container level too (names.h) */
	if (!d->optim_only && !(d->sd->names && d->sd->names->no_unwrap))
		US_TRY(choose_strip(d, smd));
	for (size_t i = 0, upto = 1; smd->coll && i < smd->coll->keys.n; i++) {
		const struct us_pk *k = smd->coll->keys.v[i];

		if (i > 0) /* after entry 0 opened the files */
			advise_ahead(d, smd, i, &upto);
		if (k->kind != US_PK_STR)
			return us_err_set(d->err, US_E_FORMAT, d->metapath,
					  "a state_dict_metadata key is not a string");
		if (has_nul(k))
			return us_err_set(d->err, US_E_FORMAT, d->metapath,
					  "the state_dict_metadata key '%s...' holds "
					  "a NUL byte", k->u.str.s);
		US_TRY(read_entry(d, k->u.str.s, smd->coll->vals.v[i]));
	}
	return US_OK;
}

/* Where the DCP directory is: SOURCE itself, or Accelerate's subdirectory. */
static const char *dcp_prefix(const struct us_dir *dir)
{
	if (us_dir_exists(dir, ".metadata"))
		return "";
	if (us_dir_exists(dir, "pytorch_model_fsdp_0/.metadata"))
		return "pytorch_model_fsdp_0/";
	return NULL;
}

static bool dcp_probe(const struct us_dir *dir, const char *file)
{
	return !file && dcp_prefix(dir) != NULL;
}

/* One DCP directory (@prefix) of SOURCE: its .metadata and items. */
static enum us_status read_dcp_dir(struct us_statedict *sd,
				   const struct us_dir *dir,
				   const char *prefix, bool optim_only,
				   cJSON *optim_tree, size_t *json_budget,
				   struct us_err *err)
{
	struct dcp d = { .sd = sd, .dir = dir, .prefix = prefix,
			 .optim_only = optim_only, .optim_tree = optim_tree,
			 .json_budget = json_budget, .err = err };
	const struct us_pk *root = NULL;
	char metapath[64];
	enum us_status rc;

	snprintf(metapath, sizeof(metapath), "%s.metadata", prefix);
	d.metapath = metapath;
	us_arena_init(&d.arena);
	rc = load_metadata(&d, &root);
	if (rc == US_OK)
		rc = read_tensors(&d, root);
	if (rc == US_OK)
		rc = consume_dir(&d);
	us_arena_free(&d.arena);
	return rc;
}

/* The groups' "params" and "param_names" side by side (torch >= 2.6, an
 * optimizer built from named_parameters()), as a table (idnames.h). */
static enum us_status param_table(const cJSON *groups, struct us_idnames *t)
{
	const cJSON *g;

	cJSON_ArrayForEach(g, groups) {
		const cJSON *ids = cJSON_GetObjectItemCaseSensitive(g, "params");
		const cJSON *names = cJSON_GetObjectItemCaseSensitive(g, "param_names");
		const cJSON *x = cJSON_IsArray(ids) ? ids->child : NULL;
		const cJSON *n = cJSON_IsArray(names) ? names->child : NULL;

		for (; x && n; x = x->next, n = n->next) {
			int64_t id;

			if (us_json_i64(x, &id) && cJSON_IsString(n))
				US_TRY(us_idnames_add(t, id, n->valuestring));
		}
	}
	us_idnames_sort(t);
	return US_OK;
}

/* "state.<id><rest>" -> "state.<name of id><rest>", allocated by @alloc;
 * NULL (and *@oom false) when @key is not that or @ids does not name the
 * id. */
static char *named_state_key(const char *key, const struct us_idnames *ids,
			     void *(*alloc)(size_t), bool *oom)
{
	char *end, *out;
	const char *pn;
	size_t n;

	*oom = false;
	if (strncmp(key, "state.", 6) != 0)
		return NULL;
	pn = us_idnames_get(ids, strtoll(key + 6, &end, 10));
	if (end == key + 6 || *end != '.' || !pn)
		return NULL;
	n = strlen(pn) + strlen(end) + 7;
	if (!(out = alloc(n)))
		return *oom = true, NULL;
	snprintf(out, n, "state.%s%s", pn, end);
	return out;
}

/* An optimizer tensor's "state.<id>.<slot>" name, renamed (source_name
 * stays the key, for messages). */
static enum us_status rename_state(struct us_statedict *o, struct us_tensor *t,
				   const struct us_idnames *ids)
{
	bool oom;
	char *name = named_state_key(t->name, ids, malloc, &oom);

	if (name)
		t->name = us_arena_strdup(&o->arena, name);
	free(name);
	return oom || !t->name ? US_E_NOMEM : US_OK;
}

/* The same for the keys of the per-parameter scalars ("state.0.step"). */
static enum us_status name_scalar_ids(cJSON *scalars, const struct us_idnames *ids)
{
	for (cJSON *it = scalars ? scalars->child : NULL; it; it = it->next) {
		bool oom;
		/* a key is freed by cJSON: allocated by it */
		char *name = it->string ?
			named_state_key(it->string, ids, cJSON_malloc, &oom) : NULL;

		if (!name) {
			if (it->string && oom)
				return US_E_NOMEM;
			continue;
		}
		if (!(it->type & cJSON_StringIsConst))
			cJSON_free(it->string);
		it->type &= ~cJSON_StringIsConst;
		it->string = name;
	}
	return US_OK;
}

/*
 * A plain optimizer.state_dict() saved through DCP keys its state by
 * position: "state.<id>.<slot>".  Where param_names say which parameter an
 * id is, the tensors, the scalars and "params" get the names instead, as
 * the torch.save reader gives them (torch.c); unwrapping follows.
 */
static enum us_status name_optim_ids(struct us_statedict *o, cJSON *groups,
				     cJSON *scalars)
{
	struct us_idnames ids = { 0 };
	enum us_status rc = param_table(groups, &ids);

	for (size_t i = 0; o && rc == US_OK && i < o->ntensors; i++)
		rc = rename_state(o, &o->tensors[i], &ids);
	if (rc == US_OK)
		rc = name_scalar_ids(scalars, &ids);
	if (rc == US_OK)
		rc = us_idnames_name_params(groups, &ids);
	us_idnames_free(&ids);
	return rc;
}

/* The optimizer's non-tensor state as optimizer.json, if there is any. */
static enum us_status finish_optim_json(struct us_statedict *sd, cJSON *tree,
					const struct us_names_opts *names)
{
	cJSON *groups = cJSON_GetObjectItemCaseSensitive(tree, "param_groups");
	cJSON *scalars = cJSON_GetObjectItemCaseSensitive(tree, "scalars");

	if (!groups && !cJSON_GetArraySize(scalars))
		return US_OK;
	if (name_optim_ids(sd->optim, groups, scalars) != US_OK)
		return US_E_NOMEM;
	US_TRY(us_unwrap_json_optim_keys(scalars, names));
	US_TRY(us_unwrap_json_groups(groups, names));
	sd->optim_json = cJSON_Print(tree);
	return sd->optim_json ? US_OK : US_E_NOMEM;
}

static enum us_status dcp_read(struct us_statedict *sd,
			       const struct us_dir *dir,
			       const char *file,
			       const struct us_source_opts *opts,
			       struct us_err *err)
{
	const char *prefix = file ? NULL : dcp_prefix(dir);
	size_t budget = US_PK_JSON_BUDGET;
	cJSON *tree = cJSON_CreateObject();
	enum us_status rc;

	(void)opts; /* no format options */
	sd->format = "dcp";
	sd->ties_as_copies = true; /* every FQN is saved, a tied pair twice */
	if (!prefix) {
		cJSON_Delete(tree);
		return us_err_set(err, US_E_FORMAT, file ? file : ".",
				  "a DCP checkpoint is a directory with .metadata");
	}
	if (!tree || !cJSON_AddObjectToObject(tree, "scalars")) {
		cJSON_Delete(tree);
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	rc = read_dcp_dir(sd, dir, prefix, false, tree, &budget, err);
	/* Accelerate / HF Trainer keep the optimizer in its own DCP directory. */
	if (rc == US_OK && *prefix &&
	    us_dir_exists(dir, "optimizer_0/.metadata"))
		rc = read_dcp_dir(sd, dir, "optimizer_0/", true, tree, &budget, err);
	if (rc == US_OK && finish_optim_json(sd, tree, sd->names) != US_OK)
		rc = us_err_set(err, US_E_NOMEM, ".", "out of memory");
	cJSON_Delete(tree);
	return rc;
}

const struct us_reader us_reader_dcp = {
	.name = "dcp",
	.probe = dcp_probe,
	.read = dcp_read,
};
