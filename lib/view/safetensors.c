/*
 * safetensors.c - the model.safetensors view.
 *
 * Layout, computed at mount from metadata alone:
 *   u64 LE header length | header JSON padded with spaces to 8 | data
 * Tensors are ordered as the safetensors writer orders them: dtype order
 * (dtype.h) descending, then name by bytes, so every tensor starts at a
 * multiple of its element size and the same SOURCE always gives the same
 * bytes.  __metadata__ carries {"format": "pt"}, which transformers requires,
 * and a tied name is stored once: the others are left out and recorded as
 * "<dropped>": "<kept>" (huggingface_hub's convention; safetensors refuses
 * aliased spans).  Metadata keys are written sorted.
 */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "../assemble/assemble.h"
#include "../codec/jsonw.h"

struct st_view {
	char *name;     /* v->name: a copy, since shard names are built */
	char *header;   /* the first data_start bytes of the file */
	uint64_t data_start;
	size_t n;
	const struct us_tensor **order;
	uint64_t *begin; /* data offset of order[i], relative to data_start */
	const struct us_tensor **dropped; /* tied names left out, by name */
	size_t ndropped;
};

int us_tensor_cmp_writer_order(const void *a, const void *b)
{
	const struct us_tensor *x = *(const struct us_tensor *const *)a;
	const struct us_tensor *y = *(const struct us_tensor *const *)b;

	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void put_tensor_entry(struct us_sbuf *b, const struct us_tensor *t,
			     uint64_t begin)
{
	us_sbuf_putc(b, ',');
	us_sbuf_json_str(b, t->name);
	us_sbuf_puts(b, ":{\"dtype\":");
	us_sbuf_json_str(b, us_dtype_name(t->dtype));
	us_sbuf_puts(b, ",\"shape\":[");
	for (uint32_t k = 0; k < t->ndim; k++) {
		if (k)
			us_sbuf_putc(b, ',');
		us_sbuf_u64(b, t->shape[k]);
	}
	us_sbuf_puts(b, "],\"data_offsets\":[");
	us_sbuf_u64(b, begin);
	us_sbuf_putc(b, ',');
	us_sbuf_u64(b, begin + t->nbytes);
	us_sbuf_puts(b, "]}");
}

static int cmp_dropped(const void *a, const void *b)
{
	return strcmp((*(const struct us_tensor *const *)a)->name,
		      (*(const struct us_tensor *const *)b)->name);
}

/* {"__metadata__":{...}: "format" and the dropped tied names, sorted. */
static void put_metadata(struct us_sbuf *b, const struct st_view *sv)
{
	bool format_done = false;

	us_sbuf_puts(b, "{\"__metadata__\":{");
	for (size_t i = 0; i < sv->ndropped; i++) {
		const struct us_tensor *t = sv->dropped[i];

		if (!format_done && strcmp(t->name, "format") > 0) {
			us_sbuf_puts(b, "\"format\":\"pt\",");
			format_done = true;
		}
		us_sbuf_json_str(b, t->name);
		us_sbuf_putc(b, ':');
		us_sbuf_json_str(b, t->tie_of->name);
		us_sbuf_putc(b, ',');
	}
	if (!format_done)
		us_sbuf_puts(b, "\"format\":\"pt\",");
	b->len--; /* the last comma */
	us_sbuf_putc(b, '}');
}

/* Build the 8-byte length, the JSON and its padding; fill sv->begin. */
static enum us_status build_header(struct st_view *sv, uint64_t *data_len)
{
	struct us_sbuf b;
	uint64_t pos = 0, hlen;

	us_sbuf_init(&b);
	us_sbuf_putn(&b, "\0\0\0\0\0\0\0\0", 8);
	put_metadata(&b, sv);
	for (size_t i = 0; i < sv->n; i++) {
		sv->begin[i] = pos;
		put_tensor_entry(&b, sv->order[i], pos);
		pos += sv->order[i]->nbytes;
	}
	us_sbuf_putc(&b, '}');
	/* !b.oom: a buffer out of memory ignores putc, and this looped
	 * forever at mount (found by tests/faultinject). */
	while (!b.oom && b.len % 8)
		us_sbuf_putc(&b, ' ');
	if (b.oom) {
		us_sbuf_free(&b);
		return US_E_NOMEM;
	}
	hlen = b.len - 8;
	for (int i = 0; i < 8; i++)
		b.p[i] = (char)(hlen >> (8 * i));
	sv->header = b.p;
	sv->data_start = b.len;
	*data_len = pos;
	return US_OK;
}

/* Index of the first tensor whose data ends after @pos (data-relative). */
static size_t first_tensor_after(const struct st_view *sv, uint64_t pos)
{
	size_t lo = 0, hi = sv->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sv->begin[mid] + sv->order[mid]->nbytes <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Hand [@off, @off + @len) to @k: the header part, then each tensor's. */
static enum us_status st_walk(const struct us_view *v,
			      struct us_view_sink *k, size_t len,
			      uint64_t off)
{
	const struct st_view *sv = v->priv;
	uint64_t pos, end;
	enum us_status rc;

	if (off < sv->data_start) {
		size_t n = (size_t)(sv->data_start - off);

		n = n < len ? n : len;
		rc = us_sink_mem(k, sv->header + off, n);
		if (rc != US_OK || us_sink_stopped(k))
			return rc;
		len -= n;
		off += n;
	}
	pos = off - sv->data_start;
	end = pos + len;
	for (size_t i = first_tensor_after(sv, pos); i < sv->n && pos < end; i++) {
		const struct us_tensor *t = sv->order[i];
		uint64_t toff = pos - sv->begin[i];
		uint64_t n = t->nbytes - toff;

		n = n < end - pos ? n : end - pos;
		rc = us_sink_tensor(k, t, n, toff);
		if (rc != US_OK || us_sink_stopped(k))
			return rc;
		pos += n;
	}
	return US_OK;
}

static enum us_status st_view_read(struct us_assembler *as,
				   const struct us_view *v, char *buf,
				   size_t len, uint64_t off)
{
	struct us_view_sink k = { .sd = v->sd, .as = as, .buf = buf };

	return st_walk(v, &k, len, off);
}

static enum us_status st_view_map(const struct us_view *v,
				  struct us_segs *segs, size_t len,
				  uint64_t off)
{
	struct us_view_sink k = { .sd = v->sd, .segs = segs };

	return st_walk(v, &k, len, off);
}

static void st_view_destroy(struct us_view *v)
{
	struct st_view *sv = v->priv;

	if (!sv)
		return;
	free(sv->name);
	free(sv->header);
	free(sv->order);
	free(sv->begin);
	free(sv->dropped);
	free(sv);
}

static const struct us_view_ops st_view_ops = {
	.read = st_view_read,
	.destroy = st_view_destroy,
	.map = st_view_map,
};

enum us_status us_view_safetensors_new(const struct us_statedict *sd,
				       struct us_view **out,
				       struct us_err *err)
{
	return us_view_safetensors_named(sd, "model.safetensors", out, err);
}

enum us_status us_view_safetensors_subset(const struct us_statedict *sd,
					  const char *name,
					  const struct us_tensor *const *keep,
					  size_t nkeep,
					  const struct us_tensor *const *dropped,
					  size_t ndropped,
					  struct us_view **out,
					  struct us_err *err)
{
	struct us_view *v = calloc(1, sizeof(*v));
	struct st_view *sv = calloc(1, sizeof(*sv));
	uint64_t data_len = 0;

	if (!v || !sv)
		goto nomem;
	v->ops = &st_view_ops;
	v->sd = sd;
	v->priv = sv;
	sv->name = strdup(name);
	sv->order = calloc(nkeep + 1, sizeof(*sv->order));
	sv->begin = calloc(nkeep + 1, sizeof(*sv->begin));
	sv->dropped = calloc(ndropped + 1, sizeof(*sv->dropped));
	if (!sv->name || !sv->order || !sv->begin || !sv->dropped)
		goto nomem;
	v->name = sv->name;
	sv->n = nkeep;
	sv->ndropped = ndropped;
	if (nkeep)
		memcpy(sv->order, keep, nkeep * sizeof(*keep));
	if (ndropped)
		memcpy(sv->dropped, dropped, ndropped * sizeof(*dropped));
	if (sv->n > 1)
		qsort(sv->order, sv->n, sizeof(*sv->order),
		      us_tensor_cmp_writer_order);
	if (sv->ndropped > 1)
		qsort(sv->dropped, sv->ndropped, sizeof(*sv->dropped), cmp_dropped);
	if (build_header(sv, &data_len) != US_OK)
		goto nomem;
	v->size = sv->data_start + data_len;
	*out = v;
	return US_OK;
nomem:
	if (v)
		us_view_free(v);
	else
		free(sv);
	return us_err_set(err, US_E_NOMEM, name, "out of memory");
}

enum us_status us_view_safetensors_named(const struct us_statedict *sd,
					 const char *name,
					 struct us_view **out,
					 struct us_err *err)
{
	const struct us_tensor **keep = calloc(sd->ntensors + 1, sizeof(*keep));
	const struct us_tensor **dropped = calloc(sd->ntensors + 1,
						  sizeof(*dropped));
	size_t nkeep = 0, ndropped = 0;
	enum us_status rc;

	if (!keep || !dropped) {
		free(keep);
		free(dropped);
		return us_err_set(err, US_E_NOMEM, name, "out of memory");
	}
	for (size_t i = 0; i < sd->ntensors; i++) {
		if (sd->tensors[i].tie_of)
			dropped[ndropped++] = &sd->tensors[i];
		else
			keep[nkeep++] = &sd->tensors[i];
	}
	rc = us_view_safetensors_subset(sd, name, keep, nkeep, dropped, ndropped,
					out, err);
	free(keep);
	free(dropped);
	return rc;
}
