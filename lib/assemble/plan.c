/*
 * plan.c - byte range -> copy operations, for any chunk grid and strides.
 *
 * No bound is checked here: us_sd_finalize refused at mount every tensor
 * whose chunks leave its box, overlap, miss an element, or whose extents
 * overflow or leave their file (model.h).  What the arithmetic below
 * relies on from that is asserted where it is relied on.
 */
#include "plan.h"

#include <assert.h>
#include <string.h>

/* Which chunk holds element @idx.  @hint (the last hit) is tried first:
 * consecutive runs usually come from the same chunk. */
static const struct us_chunk *find_chunk(const struct us_tensor *t,
					 const uint64_t *idx, uint32_t *hint)
{
	for (uint32_t n = 0; n < t->nchunks; n++) {
		uint32_t i = (*hint + n) % t->nchunks;
		const struct us_chunk *c = &t->chunks[i];
		uint32_t k;

		for (k = 0; k < t->ndim; k++)
			if (idx[k] < c->offsets[k] ||
			    idx[k] - c->offsets[k] >= c->sizes[k])
				break;
		if (k == t->ndim) {
			*hint = i;
			return c;
		}
	}
	return NULL;
}

/* Source element stride of dim @k of chunk @c. */
static uint64_t src_stride(const struct us_tensor *t, const struct us_chunk *c,
			   uint32_t k)
{
	uint64_t s = 1;

	if (c->src.strides) {
		assert(c->src.strides[k] >= 0); /* finalize: extent_end */
		return (uint64_t)c->src.strides[k];
	}
	for (uint32_t j = k + 1; j < t->ndim; j++)
		s *= c->sizes[j];
	return s;
}

/*
 * From element @idx (inside chunk @c), how many elements follow that are
 * consecutive both in the tensor's row-major order and in the source?
 * Walk dims from the last: dim k can be crossed while the run stays
 * contiguous only if the chunk spans the tensor's whole extent in every dim
 * after k and the source strides are row-major over those dims.
 */
static uint64_t run_length(const struct us_tensor *t, const struct us_chunk *c,
			   const uint64_t *idx)
{
	uint64_t inner = 1, pos = 0, expect = 1;
	uint32_t k = t->ndim;

	while (k-- > 0) {
		uint64_t rem = c->offsets[k] + c->sizes[k] - idx[k];

		/* the box inside the tensor, @idx inside the box (find_chunk) */
		assert(c->offsets[k] + c->sizes[k] <= t->shape[k]);
		assert(idx[k] >= c->offsets[k] && rem > 0);
		if (c->sizes[k] > 1 && src_stride(t, c, k) != expect)
			return inner - pos;
		if (k == 0 || c->sizes[k] != t->shape[k])
			return rem * inner - pos;
		pos += idx[k] * inner;
		expect *= c->sizes[k];
		inner *= t->shape[k];
	}
	return 1;
}

static uint64_t src_offset(const struct us_tensor *t, const struct us_chunk *c,
			   const uint64_t *idx, uint64_t isz)
{
	uint64_t el = 0;

	/* No overflow: the chunk's last element is inside its file (finalize:
	 * extent_end), and @idx is inside the chunk. */
	for (uint32_t k = 0; k < t->ndim; k++)
		el += (idx[k] - c->offsets[k]) * src_stride(t, c, k);
	return c->src.offset + el * isz;
}

/* The bytes of chunk @c's storage, from its first element to its last. */
static void chunk_span(const struct us_tensor *t, const struct us_chunk *c,
		       uint64_t isz, uint64_t *off, uint64_t *len)
{
	uint64_t last = 0;

	for (uint32_t k = 0; k < t->ndim; k++) {
		assert(c->sizes[k] > 0); /* an empty chunk holds no element */
		last += (c->sizes[k] - 1) * src_stride(t, c, k);
	}
	*off = c->src.offset;
	*len = (last + 1) * isz;
	assert(*len / isz == last + 1 && *off + *len >= *off);
}

/*
 * From element @p (index @idx, inside chunk @c, with a strided last dim),
 * how many whole elements along the last dim lie inside the chunk and
 * before @end?  1 means: no strided row to emit here.
 */
static uint64_t strided_count(const struct us_tensor *t, const struct us_chunk *c,
			      const uint64_t *idx, uint64_t p, uint64_t off,
			      uint64_t end, uint64_t isz)
{
	uint32_t k;
	uint64_t rem, whole;

	if (t->ndim == 0 || !c->src.strides || p * isz < off)
		return 1;
	k = t->ndim - 1;
	rem = c->offsets[k] + c->sizes[k] - idx[k];
	whole = (end - p * isz) / isz;
	return rem < whole ? rem : whole;
}

static void unravel(const struct us_tensor *t, uint64_t p, uint64_t *idx)
{
	for (uint32_t k = t->ndim; k-- > 0;) {
		idx[k] = p % t->shape[k];
		p /= t->shape[k];
	}
}

/* A whole contiguous single-chunk tensor (safetensors, most .bin): one op. */
static int plan_whole(const struct us_tensor *t, uint64_t off, uint64_t len,
		      us_plan_emit_fn emit, void *ctx)
{
	struct us_copy_op op = {
		.src = &t->chunks[0].src,
		.src_off = t->chunks[0].src.offset + off,
		.dst_off = 0,
		.len = len,
		.count = 1,
	};

	return emit(ctx, &op);
}

static bool is_whole_contiguous(const struct us_tensor *t)
{
	if (t->nchunks != 1 || t->chunks[0].src.strides)
		return t->nchunks == 1 && t->ndim == 0;
	return true; /* one chunk tiles the tensor, so it is the whole tensor */
}

int us_plan_range(const struct us_tensor *t, uint64_t off, uint64_t len,
		  us_plan_emit_fn emit, void *ctx)
{
	uint64_t idx[US_MAX_NDIM], isz, p, end;
	uint32_t hint = 0;

	assert(off <= t->nbytes && len <= t->nbytes - off);
	if (len == 0)
		return 0;
	assert(t->nchunks > 0); /* finalize: the chunks cover numel > 0 */
	if (is_whole_contiguous(t))
		return plan_whole(t, off, len, emit, ctx);
	isz = us_dtype_bits(t->dtype) / 8;
	assert(isz > 0); /* sub-byte tensors are always whole (model.c) */
	/* nbytes = numel * isz did not overflow (us_nbytes), so neither does
	 * any p * isz below. */
	assert(t->nbytes / isz == t->numel && t->nbytes % isz == 0);
	end = off + len;
	for (p = off / isz; p * isz < end;) {
		const struct us_chunk *c;
		struct us_copy_op op;
		uint64_t run, b0, b1, n;
		int rc;

		unravel(t, p, idx);
		c = find_chunk(t, idx, &hint);
		assert(c); /* us_sd_finalize: the chunks tile the tensor */
		if (!c)
			return -1;
		run = run_length(t, c, idx);
		memset(&op, 0, sizeof(op));
		op.src = &c->src;
		op.count = 1;
		if (run == 1 && (n = strided_count(t, c, idx, p, off, end, isz)) > 1) {
			op.src_off = src_offset(t, c, idx, isz);
			op.dst_off = p * isz - off;
			op.len = isz;
			op.count = n;
			op.src_stride = src_stride(t, c, t->ndim - 1) * isz;
			chunk_span(t, c, isz, &op.span_off, &op.span_len);
			rc = emit(ctx, &op);
			if (rc)
				return rc;
			p += n;
			continue;
		}
		b0 = p * isz > off ? p * isz : off;
		b1 = (p + run) * isz < end ? (p + run) * isz : end;
		op.src_off = src_offset(t, c, idx, isz) + (b0 - p * isz);
		op.dst_off = b0 - off;
		op.len = b1 - b0;
		rc = emit(ctx, &op);
		if (rc)
			return rc;
		p += run;
	}
	return 0;
}
