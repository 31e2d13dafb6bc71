/* view.c - what every view shares: clamping reads to the file size, and
 * the sinks that walks hand their parts to. */
#include "view.h"

#include <stdlib.h>
#include <string.h>

/* Clamp [@off, @off + *@len) to @v's size; false when nothing is left. */
static bool clamp(const struct us_view *v, size_t *len, uint64_t off)
{
	if (off >= v->size)
		return false;
	if (*len > v->size - off)
		*len = (size_t)(v->size - off);
	return true;
}

enum us_status us_view_read(struct us_assembler *as, const struct us_view *v,
			    char *buf, size_t len, uint64_t off,
			    size_t *nread)
{
	enum us_status rc;

	*nread = 0;
	if (!clamp(v, &len, off))
		return US_OK;
	rc = v->ops->read(as, v, buf, len, off);
	if (rc == US_OK)
		*nread = len;
	return rc;
}

enum us_status us_view_map(const struct us_view *v, struct us_segs *segs,
			   size_t len, uint64_t off, size_t *nmapped)
{
	enum us_status rc;

	*nmapped = 0;
	segs->n = 0;
	segs->nshort = 0;
	segs->overflow = false;
	if (!v->ops->map) {
		segs->overflow = true; /* nothing to describe it with */
		return US_OK;
	}
	if (!clamp(v, &len, off))
		return US_OK;
	rc = v->ops->map(v, segs, len, off);
	if (rc == US_OK && !segs->overflow)
		*nmapped = len;
	return rc;
}

enum us_status us_sink_mem(struct us_view_sink *k, const void *p, size_t n)
{
	if (k->segs) {
		us_segs_add_mem(k->segs, p, n);
		return US_OK;
	}
	memcpy(k->buf, p, n);
	k->buf += n;
	return US_OK;
}

enum us_status us_sink_tensor(struct us_view_sink *k, const struct us_tensor *t,
			      uint64_t n, uint64_t toff)
{
	enum us_status rc;

	if (k->segs)
		return us_tensor_map(k->sd, t, k->segs, n, toff);
	rc = us_tensor_read(k->as, k->sd, t, k->buf, n, toff);
	k->buf += n;
	return rc;
}

void us_view_free(struct us_view *v)
{
	if (!v)
		return;
	if (v->ops && v->ops->destroy)
		v->ops->destroy(v);
	free(v);
}

enum us_status us_view_optimizer_new(const struct us_statedict *sd,
				     struct us_view *out[2], size_t *n,
				     struct us_err *err)
{
	const struct us_statedict *opt = sd->optim;
	enum us_status rc = US_OK;

	*n = 0;
	if (opt && opt->ntensors)
		rc = us_view_safetensors_named(opt, "optimizer.safetensors",
					       &out[(*n)++], err);
	if (rc == US_OK && sd->optim_json)
		rc = us_view_text_new("optimizer.json", sd->optim_json,
				      &out[(*n)++], err);
	if (rc != US_OK) {
		/* the failed one made nothing: free those before it */
		for (size_t i = 0; i + 1 < *n; i++)
			us_view_free(out[i]);
		*n = 0;
	}
	return rc;
}
