/*
 * torchzip.c - the pytorch_model.bin view: the whole state dict as the zip
 * archive torch.save (torch >= 2) writes for an OrderedDict of tensors.
 *
 * Records, all STORED, under the prefix "archive/":
 *   data.pkl   the pickle (protocol 2, weights_only opcodes only)
 *   byteorder  "little"
 *   data/<k>   one per storage, k = 0, 1, ... in order of first use
 *   version    "3\n"
 * torch.save also writes .format_version, .storage_alignment and
 * .data/serialization_id.  We leave them out on purpose: with
 * .format_version present torch may compute storage offsets from miniz's
 * arithmetic instead of reading the local headers (formats.md), and the
 * serialization id is a random number only used for logging.
 *
 * Everything but tensor bytes (headers, pickle, central directory) is built
 * here at mount from metadata alone and kept in memory; codec/zipw.c lays
 * the archive out exactly as miniz does and hands back the segments a read
 * maps onto.  Tensor bytes come from us_tensor_read() on read.  The same
 * state dict always gives the same bytes (no timestamps, no random ids).
 * See docs/pytorch_model_bin.md.
 */
#include "view.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../assemble/assemble.h"
#include "../codec/pklw.h"
#include "../codec/zipw.h"

#define VIEW_NAME "pytorch_model.bin"
#define PREFIX "archive/"
#define NO_MEMO UINT32_MAX
#define SETITEMS_BATCH 1000 /* pickle.Pickler's _BATCHSIZE */

/*
 * How torch.save writes each dtype.  Dtypes with a legacy typed storage
 * class use it with _rebuild_tensor_v2 (numel counts elements); the newer
 * ones (torch.storage._new_dtypes()) use UntypedStorage (numel counts
 * bytes) and _rebuild_tensor_v3, which takes the dtype as a last argument.
 * F4 and F6 have no torch dtype with the same shape semantics.
 */
static const struct {
	const char *storage; /* torch.<X>Storage, or NULL for UntypedStorage */
	const char *dtype;   /* torch.<dtype> for _rebuild_tensor_v3 */
} torch_types[US_DT_COUNT] = {
	[US_DT_BOOL] = {"BoolStorage", NULL},
	[US_DT_U8] = {"ByteStorage", NULL},
	[US_DT_I8] = {"CharStorage", NULL},
	[US_DT_I16] = {"ShortStorage", NULL},
	[US_DT_I32] = {"IntStorage", NULL},
	[US_DT_I64] = {"LongStorage", NULL},
	[US_DT_F16] = {"HalfStorage", NULL},
	[US_DT_BF16] = {"BFloat16Storage", NULL},
	[US_DT_F32] = {"FloatStorage", NULL},
	[US_DT_F64] = {"DoubleStorage", NULL},
	[US_DT_C64] = {"ComplexFloatStorage", NULL},
	[US_DT_U16] = {NULL, "uint16"},
	[US_DT_U32] = {NULL, "uint32"},
	[US_DT_U64] = {NULL, "uint64"},
	[US_DT_F8_E5M2] = {NULL, "float8_e5m2"},
	[US_DT_F8_E4M3] = {NULL, "float8_e4m3fn"},
	[US_DT_F8_E8M0] = {NULL, "float8_e8m0fnu"},
	[US_DT_F8_E4M3FNUZ] = {NULL, "float8_e4m3fnuz"},
	[US_DT_F8_E5M2FNUZ] = {NULL, "float8_e5m2fnuz"},
};

static bool torch_can_express(enum us_dtype dt)
{
	return torch_types[dt].storage || torch_types[dt].dtype;
}

/*
 * storage_of - the tensor whose storage tensor @i's bytes live in.
 * A tied name (ties.h) maps to its group's canonical tensor: the storage is written
 * once (data/<k> at its first use) and every name rebuilds from the same
 * key, as torch.save does for a tied model's state_dict().
 */
static size_t storage_of(const struct us_statedict *sd, size_t i)
{
	const struct us_tensor *c = sd->tensors[i].tie_of;

	return c ? (size_t)(c - sd->tensors) : i;
}

struct tz_view {
	struct us_zipw z;
};

/* The pickle being written and the memo indices Pickler would reuse: it
 * memoizes by object identity, so each global, each constant string and
 * each storage key is written once and fetched with BINGET afterwards. */
struct pk {
	struct us_pklw w;
	uint32_t od, v2, v3, storage, cpu, untyped;
	uint32_t cls[US_DT_COUNT], dtype[US_DT_COUNT];
	uint32_t *key_memo; /* per tensor acting as a storage */
	size_t *key;        /* per tensor acting as a storage: its data/<k> */
	size_t *rep;        /* per key k: the tensor whose bytes data/<k> holds */
	size_t nkeys;
};

static void memo_global(struct pk *p, uint32_t *slot, const char *module,
			const char *name)
{
	if (*slot != NO_MEMO) {
		us_pklw_get(&p->w, *slot);
		return;
	}
	us_pklw_global(&p->w, module, name);
	*slot = us_pklw_put(&p->w);
}

static void memo_str(struct pk *p, uint32_t *slot, const char *s)
{
	if (*slot != NO_MEMO) {
		us_pklw_get(&p->w, *slot);
		return;
	}
	us_pklw_str(&p->w, s);
	*slot = us_pklw_put(&p->w);
}

/* A tuple of ints, as Pickler writes tuple(torch.Size) and stride(). */
static void put_ints(struct pk *p, uint32_t n, const uint64_t *v)
{
	if (n > 3)
		us_pklw_op(&p->w, US_PKW_MARK);
	for (uint32_t k = 0; k < n; k++)
		us_pklw_uint(&p->w, v[k]);
	us_pklw_tuple(&p->w, n);
}

/* Row-major contiguous strides as torch computes them: a zero-size dim
 * counts as 1, so [2,0,3] has strides (3,3,1). */
static void contiguous_strides(const struct us_tensor *t, uint64_t *st)
{
	uint64_t acc = 1;

	for (uint32_t k = t->ndim; k-- > 0;) {
		st[k] = acc;
		acc *= t->shape[k] ? t->shape[k] : 1;
	}
}

/* ('storage', <class>, '<key>', 'cpu', numel) followed by BINPERSID. */
static void put_storage_pid(struct pk *p, const struct us_tensor *t, size_t s)
{
	const char *cls = torch_types[t->dtype].storage;
	char key[24];

	if (p->key[s] == SIZE_MAX) {
		p->key[s] = p->nkeys;
		p->rep[p->nkeys++] = s;
	}
	snprintf(key, sizeof(key), "%zu", p->key[s]);
	us_pklw_op(&p->w, US_PKW_MARK);
	memo_str(p, &p->storage, "storage");
	if (cls)
		memo_global(p, &p->cls[t->dtype], "torch", cls);
	else
		memo_global(p, &p->untyped, "torch.storage", "UntypedStorage");
	memo_str(p, &p->key_memo[s], key);
	memo_str(p, &p->cpu, "cpu");
	us_pklw_uint(&p->w, cls ? t->numel : t->nbytes);
	us_pklw_tuple(&p->w, 5);
	us_pklw_op(&p->w, US_PKW_BINPERSID);
}

/* name, then _rebuild_tensor_v2/v3(storage, 0, size, stride, False,
 * OrderedDict()[, dtype]) */
static void put_tensor(struct pk *p, const struct us_statedict *sd, size_t i)
{
	const struct us_tensor *t = &sd->tensors[i];
	const char *v3 = torch_types[t->dtype].dtype;
	uint64_t st[US_MAX_NDIM];

	us_pklw_str(&p->w, t->name);
	us_pklw_put(&p->w);
	if (v3)
		memo_global(p, &p->v3, "torch._utils", "_rebuild_tensor_v3");
	else
		memo_global(p, &p->v2, "torch._utils", "_rebuild_tensor_v2");
	us_pklw_op(&p->w, US_PKW_MARK);
	put_storage_pid(p, t, storage_of(sd, i));
	us_pklw_uint(&p->w, 0);
	put_ints(p, t->ndim, t->shape);
	contiguous_strides(t, st);
	put_ints(p, t->ndim, st);
	us_pklw_op(&p->w, US_PKW_NEWFALSE);
	us_pklw_get(&p->w, p->od);
	us_pklw_op(&p->w, US_PKW_EMPTY_TUPLE);
	us_pklw_op(&p->w, US_PKW_REDUCE);
	us_pklw_put(&p->w);
	if (v3)
		memo_global(p, &p->dtype[t->dtype], "torch", v3);
	us_pklw_tuple(&p->w, v3 ? 7 : 6);
	us_pklw_op(&p->w, US_PKW_REDUCE);
	us_pklw_put(&p->w);
}

/* OrderedDict(), then the items in batches as Pickler._batch_setitems:
 * MARK ... SETITEMS for a batch of several, SETITEM for a batch of one. */
static void put_state_dict(struct pk *p, const struct us_statedict *sd)
{
	memo_global(p, &p->od, "collections", "OrderedDict");
	us_pklw_op(&p->w, US_PKW_EMPTY_TUPLE);
	us_pklw_op(&p->w, US_PKW_REDUCE);
	us_pklw_put(&p->w);
	for (size_t b = 0; b < sd->ntensors; b += SETITEMS_BATCH) {
		size_t n = sd->ntensors - b;

		n = n < SETITEMS_BATCH ? n : SETITEMS_BATCH;
		if (n > 1)
			us_pklw_op(&p->w, US_PKW_MARK);
		for (size_t i = b; i < b + n; i++)
			put_tensor(p, sd, i);
		us_pklw_op(&p->w, n > 1 ? US_PKW_SETITEMS : US_PKW_SETITEM);
	}
	us_pklw_op(&p->w, US_PKW_STOP);
}

static void pk_free(struct pk *p)
{
	us_sbuf_free(&p->w.b);
	free(p->key_memo);
	free(p->key);
	free(p->rep);
}

/* Build data.pkl into @p; p->rep[k] is then the tensor behind data/<k>. */
static enum us_status build_pickle(struct pk *p, const struct us_statedict *sd)
{
	size_t n = sd->ntensors + 1;

	memset(p, 0, sizeof(*p));
	us_pklw_init(&p->w);
	p->od = p->v2 = p->v3 = p->storage = p->cpu = p->untyped = NO_MEMO;
	for (int d = 0; d < US_DT_COUNT; d++)
		p->cls[d] = p->dtype[d] = NO_MEMO;
	p->key_memo = malloc(n * sizeof(*p->key_memo));
	p->key = malloc(n * sizeof(*p->key));
	p->rep = malloc(n * sizeof(*p->rep));
	if (!p->key_memo || !p->key || !p->rep)
		return US_E_NOMEM;
	for (size_t i = 0; i < n; i++) {
		p->key_memo[i] = NO_MEMO;
		p->key[i] = SIZE_MAX;
	}
	put_state_dict(p, sd);
	return p->w.b.oom ? US_E_NOMEM : US_OK;
}

/* The storages' data records, in key order (the order of first use). */
static void add_storages(struct us_zipw *z, const struct us_statedict *sd,
			 const struct pk *p)
{
	char name[64];

	for (size_t k = 0; k < p->nkeys; k++) {
		snprintf(name, sizeof(name), PREFIX "data/%zu", k);
		us_zipw_add_ext(z, name, sd->tensors[p->rep[k]].nbytes,
				p->rep[k]);
	}
}

static enum us_status build_archive(struct tz_view *tv,
				    const struct us_statedict *sd)
{
	struct pk p;
	enum us_status rc = build_pickle(&p, sd);

	if (rc == US_OK) {
		us_zipw_add_mem(&tv->z, PREFIX "data.pkl", p.w.b.p, p.w.b.len);
		us_zipw_add_mem(&tv->z, PREFIX "byteorder", "little", 6);
		add_storages(&tv->z, sd, &p);
		us_zipw_add_mem(&tv->z, PREFIX "version", "3\n", 2);
		rc = us_zipw_finish(&tv->z);
	}
	pk_free(&p);
	return rc;
}

/* Hand [@off, @off + @len) to @k, segment by segment of the archive. */
static enum us_status tz_walk(const struct us_view *v,
			      struct us_view_sink *k, size_t len,
			      uint64_t off)
{
	const struct tz_view *tv = v->priv;
	size_t i = us_zipw_find(&tv->z, off);

	while (len) {
		const struct us_zipw_seg *s;
		uint64_t in;
		uint64_t n;
		enum us_status rc;

		/* The segments tile [0, size) and reads are clamped to it. */
		assert(i < tv->z.nsegs);
		s = &tv->z.segs[i++];
		in = off - s->off;
		n = s->len - in < len ? s->len - in : len;
		rc = s->ext ? us_sink_tensor(k, &v->sd->tensors[s->src], n, in)
			    : us_sink_mem(k, tv->z.meta.p + s->src + in, n);
		if (rc != US_OK || us_sink_stopped(k))
			return rc;
		len -= n;
		off += n;
	}
	return US_OK;
}

static enum us_status tz_read(struct us_assembler *as,
			      const struct us_view *v, char *buf, size_t len,
			      uint64_t off)
{
	struct us_view_sink k = { .sd = v->sd, .as = as, .buf = buf };

	return tz_walk(v, &k, len, off);
}

static enum us_status tz_map(const struct us_view *v, struct us_segs *segs,
			     size_t len, uint64_t off)
{
	struct us_view_sink k = { .sd = v->sd, .segs = segs };

	return tz_walk(v, &k, len, off);
}

static void tz_destroy(struct us_view *v)
{
	struct tz_view *tv = v->priv;

	if (!tv)
		return;
	us_zipw_free(&tv->z);
	free(tv);
}

static const struct us_view_ops tz_ops = {
	.read = tz_read,
	.destroy = tz_destroy,
	.map = tz_map,
};

/* One line naming the first tensor torch.save could not have written. */
static enum us_status check_dtypes(const struct us_statedict *sd,
				   struct us_err *err)
{
	for (size_t i = 0; i < sd->ntensors; i++) {
		const struct us_tensor *t = &sd->tensors[i];
		const char *path = t->nchunks ?
			sd->files[t->chunks[0].src.file].relpath : VIEW_NAME;

		if (!torch_can_express(t->dtype))
			return us_err_set(err, US_E_UNSUPPORTED, path,
					  "tensor '%s' has dtype %s, which has no torch dtype: "
					  "pytorch_model.bin cannot hold it",
					  t->name, us_dtype_name(t->dtype));
	}
	return US_OK;
}

enum us_status us_view_torch_new(const struct us_statedict *sd,
				 struct us_view **out, struct us_err *err)
{
	struct us_view *v;
	struct tz_view *tv;

	US_TRY(check_dtypes(sd, err));
	v = calloc(1, sizeof(*v));
	tv = calloc(1, sizeof(*tv));
	if (!v || !tv)
		goto nomem;
	us_zipw_init(&tv->z);
	v->name = VIEW_NAME;
	v->ops = &tz_ops;
	v->sd = sd;
	v->priv = tv;
	if (build_archive(tv, sd) != US_OK)
		goto nomem;
	v->size = tv->z.size;
	*out = v;
	return US_OK;
nomem:
	if (v)
		us_view_free(v);
	else
		free(tv);
	return us_err_set(err, US_E_NOMEM, VIEW_NAME, "out of memory");
}
