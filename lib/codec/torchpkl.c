/* torchpkl.c - tensors in torch.save pickles. */
#include "torchpkl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io.h"

/* Legacy typed storages: the element type is in the class name. */
static const struct {
	const char *name;
	enum us_dtype dt;
} storage_types[] = {
	{"FloatStorage", US_DT_F32},     {"DoubleStorage", US_DT_F64},
	{"HalfStorage", US_DT_F16},      {"BFloat16Storage", US_DT_BF16},
	{"LongStorage", US_DT_I64},      {"IntStorage", US_DT_I32},
	{"ShortStorage", US_DT_I16},     {"CharStorage", US_DT_I8},
	{"ByteStorage", US_DT_U8},       {"BoolStorage", US_DT_BOOL},
	{"ComplexFloatStorage", US_DT_C64},
};

/* torch.<dtype> globals (_rebuild_tensor_v3, DCP TensorProperties). */
static const struct {
	const char *name;
	enum us_dtype dt;
} torch_dtypes[] = {
	{"float32", US_DT_F32},  {"float", US_DT_F32},    {"float64", US_DT_F64},
	{"double", US_DT_F64},   {"float16", US_DT_F16},  {"half", US_DT_F16},
	{"bfloat16", US_DT_BF16}, {"int64", US_DT_I64},   {"long", US_DT_I64},
	{"int32", US_DT_I32},    {"int", US_DT_I32},      {"int16", US_DT_I16},
	{"short", US_DT_I16},    {"int8", US_DT_I8},      {"uint8", US_DT_U8},
	{"bool", US_DT_BOOL},    {"complex64", US_DT_C64}, {"cfloat", US_DT_C64},
	{"uint16", US_DT_U16},   {"uint32", US_DT_U32},   {"uint64", US_DT_U64},
	{"float8_e4m3fn", US_DT_F8_E4M3}, {"float8_e5m2", US_DT_F8_E5M2},
	{"float8_e8m0fnu", US_DT_F8_E8M0}, {"float8_e4m3fnuz", US_DT_F8_E4M3FNUZ},
	{"float8_e5m2fnuz", US_DT_F8_E5M2FNUZ},
};

bool us_torch_dtype(const struct us_pk *g, enum us_dtype *dt)
{
	if (!g || g->kind != US_PK_GLOBAL || strcmp(g->u.global.module, "torch"))
		return false;
	for (size_t i = 0; i < sizeof(torch_dtypes) / sizeof(*torch_dtypes); i++) {
		if (!strcmp(g->u.global.name, torch_dtypes[i].name)) {
			*dt = torch_dtypes[i].dt;
			return true;
		}
	}
	return false;
}

/* A tensor that is well-formed but not one these views can serve. */
#define UNSUPPORTED(err, msg) us_err_reason((err), US_E_UNSUPPORTED, "%s", (msg))
#define MALFORMED(err, msg) us_err_reason((err), US_E_FORMAT, "%s", (msg))

static bool is_int(const struct us_pk *p, int64_t min)
{
	return p && p->kind == US_PK_INT && p->u.i >= min;
}

/* A size or stride: a tuple of ints, or torch.Size((...)). */
static bool int_tuple(const struct us_pk *p, uint32_t *n, uint64_t *u, int64_t *s)
{
	if (p && p->kind == US_PK_CALL && us_pk_global_named(p->u.call.fn, "Size"))
		p = us_pk_at(p->u.call.args, 0);
	if (!p || p->kind != US_PK_TUPLE || p->u.seq.n > US_MAX_NDIM)
		return false;
	*n = (uint32_t)p->u.seq.n;
	for (size_t i = 0; i < p->u.seq.n; i++) {
		if (!is_int(p->u.seq.v[i], 0))
			return false;
		if (u)
			u[i] = (uint64_t)p->u.seq.v[i]->u.i;
		if (s)
			s[i] = p->u.seq.v[i]->u.i;
	}
	return true;
}

/* BINPERSID(('storage', torch.<X>Storage, key, location, numel)). */
static enum us_status match_storage(const struct us_pk *p,
				    struct us_torch_tensor *t, struct us_err *err)
{
	const struct us_pk *id, *cls, *key, *numel;

	if (!p || p->kind != US_PK_PERSID)
		return MALFORMED(err, "tensor storage is not a persistent id");
	id = p->u.persid;
	cls = us_pk_at(id, 1);
	key = us_pk_at(id, 2);
	numel = us_pk_at(id, 4);
	if (!us_pk_is_str(us_pk_at(id, 0), "storage") || !cls ||
	    cls->kind != US_PK_GLOBAL || !key || key->kind != US_PK_STR ||
	    !is_int(numel, 0))
		return MALFORMED(err, "malformed storage persistent id");
	t->storage_key = key->u.str.s;
	t->storage_numel = (uint64_t)numel->u.i;
	if (!strcmp(cls->u.global.name, "UntypedStorage")) {
		t->untyped = true;
		return US_OK;
	}
	for (size_t i = 0; i < sizeof(storage_types) / sizeof(*storage_types); i++) {
		if (!strcmp(cls->u.global.name, storage_types[i].name)) {
			t->dtype = storage_types[i].dt;
			return US_OK;
		}
	}
	return UNSUPPORTED(err, "tensor storage type has no safetensors dtype");
}

/*
 * The optional last argument of _rebuild_tensor_v2/_v3: torch's tensor
 * metadata, a dict of flags.  torch.save keeps a lazy conj() or neg view as
 * the stored bytes plus {"conj": True} / {"neg": True}, and torch.load
 * applies the flag; serving the stored bytes would be silently wrong, so a
 * set flag (or one we do not know) refuses the tensor.
 */
static enum us_status match_metadata(const struct us_pk *md, struct us_err *err)
{
	if (!md || md->kind == US_PK_NONE)
		return US_OK;
	if (!us_pk_is_dictlike(md))
		return MALFORMED(err, "malformed tensor metadata");
	for (size_t i = 0; i < md->coll->vals.n; i++) {
		const struct us_pk *k = md->coll->keys.v[i], *v = md->coll->vals.v[i];

		if ((v->kind == US_PK_BOOL && !v->u.b) ||
		    (v->kind == US_PK_INT && v->u.i == 0))
			continue;
		if (us_pk_is_str(k, "conj") || us_pk_is_str(k, "neg"))
			return UNSUPPORTED(err, "it is a lazy conj() or neg view "
					   "(torch's conj/neg bit): save "
					   "t.resolve_conj().resolve_neg() instead");
		return UNSUPPORTED(err, "it carries tensor metadata this reader "
				   "does not know");
	}
	return US_OK;
}

/* _rebuild_tensor_v2/_v3 arguments. */
static enum us_status match_rebuild(const struct us_pk *args, bool v3,
				    struct us_torch_tensor *t, struct us_err *err)
{
	uint32_t nstride = 0;

	memset(t, 0, sizeof(*t));
	US_TRY(match_storage(us_pk_at(args, 0), t, err));
	if (v3 && !us_torch_dtype(us_pk_at(args, 6), &t->dtype))
		return UNSUPPORTED(err, "tensor dtype has no safetensors equivalent");
	if (!v3 && t->untyped)
		return MALFORMED(err, "untyped storage without a dtype");
	if (!is_int(us_pk_at(args, 1), 0) ||
	    !int_tuple(us_pk_at(args, 2), &t->ndim, t->shape, NULL) ||
	    !int_tuple(us_pk_at(args, 3), &nstride, NULL, t->strides) ||
	    nstride != t->ndim)
		return MALFORMED(err, "malformed tensor offset, size or stride");
	US_TRY(match_metadata(us_pk_at(args, v3 ? 7 : 6), err));
	t->storage_offset = (uint64_t)us_pk_at(args, 1)->u.i;
	return US_OK;
}

/* @p is a tensor when its rebuild call matches: *@found then says so. */
static enum us_status rebuilt(const struct us_pk *args, bool v3,
			      struct us_torch_tensor *t, bool *found,
			      struct us_err *err)
{
	US_TRY(match_rebuild(args, v3, t, err));
	*found = true;
	return US_OK;
}

enum us_status us_torch_match(const struct us_pk *p, struct us_torch_tensor *t,
			      bool *found, struct us_err *err)
{
	const struct us_pk *fn;

	*found = false;
	for (int depth = 0; depth < 8; depth++) {
		if (!p || p->kind != US_PK_CALL || p->u.call.fn->kind != US_PK_GLOBAL)
			return US_OK;
		fn = p->u.call.fn;
		if (us_pk_global_named(fn, "_rebuild_tensor_v2"))
			return rebuilt(p->u.call.args, false, t, found, err);
		if (us_pk_global_named(fn, "_rebuild_tensor_v3"))
			return rebuilt(p->u.call.args, true, t, found, err);
		if (us_pk_global_named(fn, "_rebuild_parameter") ||
		    us_pk_global_named(fn, "_rebuild_parameter_with_state")) {
			p = us_pk_at(p->u.call.args, 0);
			continue;
		}
		if (us_pk_global_named(fn, "_rebuild_from_type_v2")) {
			/* (func, type, args, state): a tensor with Python
			 * attributes (torch.compile tags parameters so); its
			 * data is func(*args), a plain rebuild. */
			const struct us_pk *args = p->u.call.args;

			if (!us_pk_global_named(us_pk_at(args, 0), "_rebuild_tensor_v2") &&
			    !us_pk_global_named(us_pk_at(args, 0), "_rebuild_tensor_v3"))
				return UNSUPPORTED(err, "tensor subclasses are not "
						   "supported");
			return rebuilt(us_pk_at(args, 2),
				       us_pk_global_named(us_pk_at(args, 0),
							  "_rebuild_tensor_v3"),
				       t, found, err);
		}
		if (!strncmp(fn->u.global.name, "_rebuild_", 9) &&
		    !strcmp(fn->u.global.module, "torch._utils"))
			return UNSUPPORTED(err, "sparse, quantized or meta tensors "
					   "are not supported");
		return US_OK;
	}
	return US_OK;
}

enum us_status us_torch_expect(const struct us_pk *p, struct us_torch_tensor *t,
			       const char *missing, struct us_err *err)
{
	bool found;

	US_TRY(us_torch_match(p, t, &found, err));
	return found ? US_OK : MALFORMED(err, missing);
}

/*
 * The byteorder record (torch.save writes "little" or "big"; older
 * archives have none and are little-endian): torch.load byte-swaps a "big"
 * archive's storages, which these views would serve unswapped, so such an
 * archive is refused rather than served as wrong values.
 */
static enum us_status check_byteorder(const struct us_torch_archive *ta,
				      const struct us_file *f, uint64_t base, struct us_err *err)
{
	static const char unreadable[] = "its byteorder record cannot be read";
	const struct us_zip_entry *e = us_zip_find(&ta->zip, "byteorder");
	char text[8];
	uint64_t off;
	enum us_status st;

	if (!e)
		return US_OK;
	if (e->size > sizeof(text))
		return MALFORMED(err, unreadable);
	/* The message stays the record's; the kind is the failure's. */
	st = us_zip_data(&ta->zip, e, &off, err);
	if (st != US_OK)
		return us_err_reason(err, st, "%s", unreadable);
	if (us_file_pread(f, text, (size_t)e->size, base + off) != US_OK)
		return us_err_reason(err, US_E_IO, "%s", unreadable);
	if (e->size == 6 && !memcmp(text, "little", 6))
		return US_OK;
	if (e->size == 3 && !memcmp(text, "big", 3))
		return UNSUPPORTED(err, "a big-endian torch.save archive (byteorder "
				   "'big'): not served, its tensors would need "
				   "byte-swapping");
	return MALFORMED(err, "its byteorder record is neither 'little' nor 'big'");
}

/* data.pkl, read whole (the caller bounded its size) and loaded. */
static enum us_status load_data_pkl(struct us_torch_archive *ta,
				    const struct us_file *f,
				    uint64_t base, const struct us_zip_entry *pkl,
				    size_t budget, struct us_arena *a,
				    struct us_err *err)
{
	unsigned char *buf;
	uint64_t off;
	size_t used;
	enum us_status st;

	US_TRY(us_zip_data(&ta->zip, pkl, &off, err));
	buf = malloc((size_t)pkl->size + 1);
	if (!buf)
		return us_err_reason(err, US_E_NOMEM, "out of memory");
	st = us_file_pread(f, buf, (size_t)pkl->size, base + off);
	if (st != US_OK)
		st = us_err_reason(err, US_E_IO, "cannot read data.pkl");
	else
		st = us_pickle_load_bounded(buf, (size_t)pkl->size, a, budget,
					    &ta->root, &used, err);
	free(buf);
	return st;
}

enum us_status us_torch_archive_open(struct us_torch_archive *ta,
				     const struct us_file *f,
				     uint64_t base, uint64_t len,
				     struct us_arena *a, struct us_err *err)
{
	const struct us_zip_entry *pkl;
	size_t budget;

	US_TRY(us_zip_open(&ta->zip, f, base, len, a, err));
	US_TRY(check_byteorder(ta, f, base, err));
	pkl = us_zip_find(&ta->zip, "data.pkl");
	if (!pkl)
		return MALFORMED(err, "no data.pkl record: not a torch.save archive");
	/* The tensors' records bound what data.pkl may take to load (its
	 * nesting, memo or garbage do not): us_pickle_budget. */
	budget = us_pickle_budget(0, ta->zip.n);
	if (pkl->size > budget)
		return MALFORMED(err, "data.pkl is larger than its archive's "
				 "records allow (docs/hardening.md)");
	return load_data_pkl(ta, f, base, pkl, budget, a, err);
}

enum us_status us_torch_span_fits(const struct us_torch_tensor *t,
				  uint64_t bytes, struct us_err *err)
{
	uint64_t isz = us_dtype_bits(t->dtype) / 8, maxel = t->storage_offset;
	uint64_t span, numel = 1;

	for (uint32_t k = 0; k < t->ndim; k++) {
		uint64_t step;

		if (t->strides[k] < 0)
			return MALFORMED(err, "negative tensor stride");
		if (__builtin_mul_overflow(numel, t->shape[k], &numel))
			return MALFORMED(err, "tensor size overflows");
		if (t->shape[k] == 0)
			continue;
		if (__builtin_mul_overflow(t->shape[k] - 1, (uint64_t)t->strides[k], &step) ||
		    __builtin_add_overflow(maxel, step, &maxel))
			return MALFORMED(err, "tensor strides overflow");
	}
	/* isz 0: a sub-byte dtype has no element offset torch.save can name */
	if (numel && (!isz || __builtin_mul_overflow(maxel + 1, isz, &span) ||
		      span > bytes))
		return MALFORMED(err, "tensor extends past the end of its storage "
				 "record");
	return US_OK;
}

enum us_status us_torch_extent(const struct us_torch_archive *ta,
			       const struct us_torch_tensor *t, uint64_t *off,
			       struct us_err *err)
{
	char record[512];
	const struct us_zip_entry *e;
	uint64_t isz = us_dtype_bits(t->dtype) / 8, data, first;

	if (snprintf(record, sizeof(record), "data/%s", t->storage_key) >=
	    (int)sizeof(record))
		return MALFORMED(err, "storage key too long");
	e = us_zip_find(&ta->zip, record);
	if (!e)
		return MALFORMED(err, "tensor storage record is missing");
	US_TRY(us_zip_data(&ta->zip, e, &data, err));
	US_TRY(us_torch_span_fits(t, e->size, err));
	/* an empty tensor's storage_offset is not bounded by the record */
	if (__builtin_mul_overflow(t->storage_offset, isz, &first) ||
	    __builtin_add_overflow(first, ta->zip.base + data, off))
		return MALFORMED(err, "tensor offset overflows");
	return US_OK;
}
