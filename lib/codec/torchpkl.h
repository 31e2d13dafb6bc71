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
 * us_torch_match - is @p a tensor rebuild?  Returns 1 and fills @t, 0 when
 * @p is not a tensor, or -1 when it is a tensor we cannot serve (a sparse,
 * quantized or meta tensor, a dtype safetensors cannot name): *@why says so.
 */
int us_torch_match(const struct us_pk *p, struct us_torch_tensor *t,
		   const char **why);

/* us_torch_dtype - the dtype a torch.<name> global names; -1 if none. */
int us_torch_dtype(const struct us_pk *g, enum us_dtype *dt);

struct us_torch_archive {
	struct us_zip zip;
	struct us_pk *root; /* the value data.pkl builds */
};

/* us_torch_archive_open - the zip at [@base, @base + @len) of @fd and its
 * data.pkl.  Returns 0, or -1 with *@why set. */
int us_torch_archive_open(struct us_torch_archive *ta, int fd, uint64_t base,
			  uint64_t len, struct us_arena *a, const char **why);

/*
 * us_torch_span_fits - 0 when every element @t's shape, strides and
 * storage_offset address lies inside a storage record of @bytes bytes;
 * else -1 with *@why set (negative or overflowing strides included).  The
 * one check for stored archives (us_torch_extent) and zstd items.
 */
int us_torch_span_fits(const struct us_torch_tensor *t, uint64_t bytes,
		       const char **why);

/*
 * us_torch_extent - where @t's elements live: the file offset of its first
 * element in the record data/<key> (*@off), after checking that every
 * element its shape and strides can address lies inside that record.
 */
int us_torch_extent(const struct us_torch_archive *ta,
		    const struct us_torch_tensor *t, uint64_t *off,
		    const char **why);

#endif /* US_TORCHPKL_H */
