/* view.c - what every view shares: clamping reads to the file size. */
#include "view.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

long long us_view_read(const struct us_view *v, char *buf, size_t len,
		       uint64_t off)
{
	int rc;

	if (off >= v->size)
		return 0;
	if (len > v->size - off)
		len = (size_t)(v->size - off);
	rc = v->ops->read(v, buf, len, off);
	return rc < 0 ? rc : (long long)len;
}

long long us_view_map(const struct us_view *v, struct us_segs *segs,
		      size_t len, uint64_t off)
{
	int rc;

	if (!v->ops->map)
		return -EAGAIN;
	if (off >= v->size)
		return 0;
	if (len > v->size - off)
		len = (size_t)(v->size - off);
	segs->n = 0;
	segs->nshort = 0;
	segs->overflow = false;
	rc = v->ops->map(v, segs, len, off);
	return rc < 0 ? rc : (long long)len;
}

int us_sink_mem(struct us_view_sink *k, const void *p, size_t n)
{
	if (k->segs) {
		us_segs_add_mem(k->segs, p, n);
		return k->segs->overflow ? -EAGAIN : 0;
	}
	memcpy(k->buf, p, n);
	k->buf += n;
	return 0;
}

int us_sink_tensor(struct us_view_sink *k, const struct us_tensor *t,
		   uint64_t n, uint64_t toff)
{
	int rc;

	if (k->segs)
		return us_tensor_map(k->sd, t, k->segs, n, toff);
	rc = us_tensor_read(k->sd, t, k->buf, n, toff);
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
