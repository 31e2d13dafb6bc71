/*
 * loader_slice.c - a slice of one tensor read as a batch: rows of dim 0
 * (us_loader_read), or indices along any dim (us_loader_read_slice), whose
 * runs, one per index of the dims before it, are requests of one batch
 * (loader_read.c) over the loader's threads.
 */
#include "loader_impl.h"

#include <stdlib.h>

/* Does a buffer of @cap bytes hold the @need bytes of a read of @t? */
static enum us_status fits(const struct us_tensor *t, uint64_t cap,
			   uint64_t need, struct us_err *err)
{
	if (cap >= need)
		return US_OK;
	return us_err_set(err, US_E_USAGE, t->name, "a buffer of %llu bytes "
			  "for %llu", (unsigned long long)cap,
			  (unsigned long long)need);
}

enum us_status us_loader_read(struct us_loader *ld, size_t i, uint64_t row0,
			      uint64_t row1, void *buf, uint64_t cap,
			      struct us_err *err)
{
	const struct us_tensor *t = us_ld_tensor(ld, i, err);
	uint64_t rows, row_bytes;
	struct us_loader_req r;

	if (!t)
		return US_E_USAGE;
	rows = t->ndim ? t->shape[0] : 1;
	row_bytes = rows ? t->nbytes / rows : 0;
	if (row0 > row1 || row1 > rows)
		return us_err_set(err, US_E_USAGE, t->name, "rows [%llu, %llu) "
				  "are outside its %llu rows",
				  (unsigned long long)row0,
				  (unsigned long long)row1,
				  (unsigned long long)rows);
	if (rows && t->nbytes % rows && (row0 || row1 != rows))
		return us_err_set(err, US_E_USAGE, t->name, "rows of %s elements "
				  "do not fill whole bytes", us_dtype_name(t->dtype));
	r = (struct us_loader_req){ .tensor = i, .off = row0 * row_bytes,
				    .len = (row1 - row0) * row_bytes, .buf = buf };
	US_TRY(fits(t, cap, r.len, err));
	return us_loader_read_many(ld, &r, 1, err);
}

/* Requests per batch of a slice: bounds the array whatever its outer count. */
#define SLICE_BATCH 4096

static enum us_status slice_check(const struct us_tensor *t,
				  const struct us_loader_slice *s,
				  uint64_t outer, struct us_err *err)
{
	if (s->dim >= t->ndim)
		return us_err_set(err, US_E_USAGE, t->name, "no dim %u (%u dims)",
				  s->dim, t->ndim);
	if (s->start > s->stop || s->stop > t->shape[s->dim])
		return us_err_set(err, US_E_USAGE, t->name, "indices [%llu, %llu) "
				  "of dim %u: want start <= stop <= %llu (its size)",
				  (unsigned long long)s->start,
				  (unsigned long long)s->stop, s->dim,
				  (unsigned long long)t->shape[s->dim]);
	if (s->outer0 > s->outer1 || s->outer1 > outer)
		return us_err_set(err, US_E_USAGE, t->name, "outer indices [%llu, "
				  "%llu): want outer0 <= outer1 <= %llu (the "
				  "product of the sizes before dim %u)",
				  (unsigned long long)s->outer0,
				  (unsigned long long)s->outer1,
				  (unsigned long long)outer, s->dim);
	if (t->numel && t->nbytes % t->numel)
		return us_err_set(err, US_E_USAGE, t->name, "elements of %s do "
				  "not fill whole bytes", us_dtype_name(t->dtype));
	return US_OK;
}

enum us_status us_loader_read_slice(struct us_loader *ld, size_t i,
				    const struct us_loader_slice *s, void *buf,
				    uint64_t cap, struct us_err *err)
{
	const struct us_tensor *t = us_ld_tensor(ld, i, err);
	struct us_loader_req *reqs;
	uint64_t outer = 1, row, run, stride, n;
	enum us_status rc = US_OK;

	if (!t)
		return US_E_USAGE;
	for (uint32_t d = 0; d < s->dim && d < t->ndim; d++)
		outer *= t->shape[d];
	US_TRY(slice_check(t, s, outer, err));
	row = t->numel ? t->nbytes / t->shape[s->dim] / outer : 0;
	run = (s->stop - s->start) * row;
	stride = t->shape[s->dim] * row;
	n = s->outer1 - s->outer0;
	US_TRY(fits(t, cap, n * run, err));
	if (!run || !n)
		return US_OK;
	reqs = calloc(n < SLICE_BATCH ? n : SLICE_BATCH, sizeof(*reqs));
	if (!reqs)
		return us_err_set(err, US_E_NOMEM, t->name, "out of memory");
	for (uint64_t k0 = 0; k0 < n && rc == US_OK; k0 += SLICE_BATCH) {
		uint64_t m = n - k0 < SLICE_BATCH ? n - k0 : SLICE_BATCH;

		for (uint64_t k = 0; k < m; k++)
			reqs[k] = (struct us_loader_req){
				.tensor = i, .len = run,
				.off = (s->outer0 + k0 + k) * stride + s->start * row,
				.buf = (char *)buf + (k0 + k) * run,
			};
		rc = us_loader_read_many(ld, reqs, (size_t)m, err);
	}
	free(reqs);
	return rc;
}
