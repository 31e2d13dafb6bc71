/*
 * torchpkl.h - reading a torch.save archive: its zip, its data.pkl, and the
 * tensors the pickle rebuilds.  Shared by the torch.save reader (.bin, .pt)
 * and the DCP reader (every DCP tensor item is such an archive).
 *
 * A tensor is recognised by its rebuild call, never executed:
 *   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, grad, hooks)
 *   torch._utils._rebuild_tensor_v3(..., dtype)   (newer dtypes)
 *   torch._utils._rebuild_parameter(tensor, ...)  (nn.Parameter)
 *   torch._tensor._rebuild_from_type_v2(func, type, args, state) (subclasses)
 * where storage is BINPERSID(('storage', torch.<X>Storage, key, location, numel)).
 * Element address = (offset + sum(index_k * stride_k)) * itemsize within the
 * record "data/<key>" (formats.md).
 */
#ifndef US_TORCHPKL_H
#define US_TORCHPKL_H

#include <stdbool.h>
#include <stdint.h>

#include "pickle.h"
#include "zip.h"
#include "../model.h"

struct us_torch_tensor {
	enum us_dtype dtype;
	uint32_t ndim;
	uint64_t shape[US_MAX_NDIM];
	int64_t strides[US_MAX_NDIM];
	uint64_t storage_offset; /* in elements */
	const char *storage_key;
	uint64_t storage_numel;  /* as the persistent id says (bytes if untyped) */
	bool untyped;            /* storage_numel counts bytes */
};

/*
 * The functions below that return an enum us_status leave, on failure, a
 * reason without a path in @err (us_err_reason), for the reader to prefix:
 * US_E_FORMAT for a malformed pickle or archive, US_E_UNSUPPORTED for a
 * well-formed tensor these views cannot serve, US_E_IO and US_E_NOMEM.
 */

/*
 * us_torch_match - is @p a tensor rebuild?  US_OK with *@found true and @t
 * filled, or *@found false when @p is not a tensor; a failure when it is a
 * tensor we cannot serve (a sparse, quantized or meta tensor, a dtype
 * safetensors cannot name: US_E_UNSUPPORTED) or a malformed one.
 */
enum us_status us_torch_match(const struct us_pk *p, struct us_torch_tensor *t,
			      bool *found, struct us_err *err);

/* us_torch_expect - us_torch_match where a tensor must be: a @p that is
 * none (or NULL) is US_E_FORMAT, with @missing as the reason. */
enum us_status us_torch_expect(const struct us_pk *p, struct us_torch_tensor *t,
			       const char *missing, struct us_err *err);

/* us_torch_dtype - the dtype a torch.<name> global names; false if none. */
bool us_torch_dtype(const struct us_pk *g, enum us_dtype *dt);

struct us_torch_archive {
	struct us_zip zip;
	struct us_pk *root; /* the value data.pkl builds */
};

/* us_torch_archive_open - the zip at [@base, @base + @len) of @f and its
 * data.pkl. */
enum us_status us_torch_archive_open(struct us_torch_archive *ta,
				     const struct us_file *f,
				     uint64_t base, uint64_t len,
				     struct us_arena *a, struct us_err *err);

/*
 * us_torch_span_fits - US_OK when every element @t's shape, strides and
 * storage_offset address lies inside a storage record of @bytes bytes;
 * else US_E_FORMAT (negative or overflowing strides included).  The one
 * check for stored archives (us_torch_extent) and zstd items.
 */
enum us_status us_torch_span_fits(const struct us_torch_tensor *t,
				  uint64_t bytes, struct us_err *err);

/*
 * us_torch_extent - where @t's elements live: the file offset of its first
 * element in the record data/<key> (*@off), after checking that every
 * element its shape and strides can address lies inside that record.
 */
enum us_status us_torch_extent(const struct us_torch_archive *ta,
			       const struct us_torch_tensor *t, uint64_t *off,
			       struct us_err *err);

#endif /* US_TORCHPKL_H */
