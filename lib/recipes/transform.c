/* transform.c - split, slice and permute as layout rewrites (transform.h). */
#include "transform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "[64,32]" */
static const char *shape_str(uint32_t ndim, const uint64_t *shape, char *buf,
			     size_t cap)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, cap, "[");
	for (uint32_t k = 0; k < ndim && o < cap; k++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%llu", k ? "," : "",
				      (unsigned long long)shape[k]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
	return buf;
}

static enum us_status refuse(struct us_rule_ref ref, const struct us_tensor *t,
			     uint32_t ndim, const uint64_t *shape,
			     struct us_err *err, const char *what)
{
	char s[256];

	return us_err_set(err, US_E_UNSUPPORTED, ref.recipe,
			  "rule %zu: tensor '%s' %s: %s", ref.rule, t->name,
			  shape_str(ndim, shape, s, sizeof(s)), what);
}

/* The shape after the split: what slice and permute see. */
static uint32_t after_split(const struct us_recipe_rule *r,
			    const struct us_tensor *t, uint64_t *shape)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < t->ndim; k++)
		if (!r->has_split || k != r->split_dim)
			shape[n++] = t->shape[k];
	return n;
}

enum us_status us_rule_check(const struct us_recipe_rule *r,
			     struct us_rule_ref ref, const struct us_tensor *t,
			     uint64_t head_dim, struct us_err *err)
{
	uint64_t shape[US_MAX_NDIM], hd = r->head_dim ? r->head_dim : head_dim;
	uint32_t nd;
	char what[256];

	if (r->has_split && r->split_dim >= t->ndim)
		return refuse(ref, t, t->ndim, t->shape, err,
			      "split's dim is not a dimension of it");
	nd = after_split(r, t, shape);
	if (r->has_slice && r->slice_dim >= nd)
		return refuse(ref, t, nd, shape, err,
			      "slice's dim is not a dimension of it");
	if (r->has_slice && r->slice_stop > shape[r->slice_dim]) {
		snprintf(what, sizeof(what), "slice %llu:%llu is out of range "
			 "of dim %u", (unsigned long long)r->slice_start,
			 (unsigned long long)r->slice_stop, r->slice_dim);
		return refuse(ref, t, nd, shape, err, what);
	}
	if (r->has_slice)
		shape[r->slice_dim] = r->slice_stop - r->slice_start;
	if (r->has_permute && r->perm_dim >= nd)
		return refuse(ref, t, nd, shape, err,
			      "permute's dim is not a dimension of it");
	if (r->has_permute && r->order && r->norder != shape[r->perm_dim]) {
		snprintf(what, sizeof(what), "permute's order has %zu indices, "
			 "dim %u has %llu", r->norder, r->perm_dim,
			 (unsigned long long)shape[r->perm_dim]);
		return refuse(ref, t, nd, shape, err, what);
	}
	if (r->has_permute && r->rope && !hd)
		return refuse(ref, t, nd, shape, err, "permute's head_dim is "
			      "\"config\", and no config.json (in --overlay DIR "
			      "or SOURCE) gives head_dim or hidden_size and "
			      "num_attention_heads");
	if (r->has_permute && r->rope && (hd % 2 || shape[r->perm_dim] % hd)) {
		snprintf(what, sizeof(what), "dim %u is not a multiple of "
			 "head_dim %llu (an even number)", r->perm_dim,
			 (unsigned long long)hd);
		return refuse(ref, t, nd, shape, err, what);
	}
	return US_OK;
}

/* Meta's rotary layout pairs rows (2i, 2i+1) of each head; Hugging Face's
 * puts the pair's halves hd/2 apart: output row h*hd + j*hd/2 + i is source
 * row h*hd + 2i + j -- torchtitan's _permute, as two strided segments per
 * head. */
static struct us_segment *rope_segments(uint64_t n, uint64_t hd, size_t *nseg)
{
	struct us_segment *s = calloc((size_t)(n / hd) * 2, sizeof(*s));

	for (uint64_t h = 0; s && h < n / hd; h++)
		for (uint64_t j = 0; j < 2; j++)
			s[h * 2 + j] = (struct us_segment){
				.out = h * hd + j * (hd / 2), .len = hd / 2,
				.src = h * hd + j, .step = 2 };
	*nseg = (size_t)(n / hd) * 2;
	return s;
}

/* out[o] = src[order[o]], runs of consecutive sources merged. */
static struct us_segment *order_segments(const uint64_t *order, size_t n,
					 size_t *nseg)
{
	struct us_segment *s = calloc(n, sizeof(*s));
	size_t k = 0;

	for (size_t o = 0; s && o < n; o++) {
		if (k && s[k - 1].src + s[k - 1].len == order[o])
			s[k - 1].len++;
		else
			s[k++] = (struct us_segment){ .out = o, .len = 1,
				.src = order[o], .step = 1 };
	}
	*nseg = k;
	return s;
}

static enum us_status permute(const struct us_recipe_rule *r, uint64_t hd,
			      struct us_layout *l)
{
	uint64_t n = l->shape[r->perm_dim];
	struct us_segment *s;
	size_t nseg = 0;
	enum us_status rc;

	s = r->order ? order_segments(r->order, r->norder, &nseg)
		     : rope_segments(n, hd, &nseg);
	if (!s)
		return US_E_NOMEM;
	rc = us_layout_remap(l, r->perm_dim, s, nseg, n);
	free(s);
	return rc;
}

enum us_status us_rule_layout(const struct us_recipe_rule *r,
			      struct us_rule_ref ref, const struct us_tensor *t,
			      uint64_t idx, uint64_t head_dim,
			      struct us_layout *l, struct us_err *err)
{
	const char *path = t->decl_path ? t->decl_path : ref.recipe;
	enum us_status rc = US_OK;

	US_TRY(us_rule_check(r, ref, t, head_dim, err));
	US_TRY(us_layout_from(t, l, path, err));
	if (r->has_split)
		rc = us_layout_select(l, r->split_dim, idx);
	if (rc == US_OK && r->has_slice) {
		struct us_segment s = { .out = 0, .src = r->slice_start, .step = 1,
			.len = r->slice_stop - r->slice_start };

		rc = us_layout_remap(l, r->slice_dim, &s, 1, s.len);
	}
	if (rc == US_OK && r->has_permute)
		rc = permute(r, r->head_dim ? r->head_dim : head_dim, l);
	if (rc != US_OK) {
		us_layout_free(l);
		if (rc == US_E_NOMEM)
			return us_err_set(err, rc, path, "out of memory");
		return us_err_set(err, rc, path, "tensor '%s': offsets overflow",
				  t->name);
	}
	return US_OK;
}

/* Input @b against the first, @a: what a concat along @dim needs. */
static enum us_status concat_fits(struct us_rule_ref ref, uint32_t dim,
				  const struct us_tensor *a,
				  const struct us_tensor *b, struct us_err *err)
{
	char sa[256], sb[256];
	bool same = a->ndim == b->ndim;

	if (dim >= b->ndim)
		return refuse(ref, b, b->ndim, b->shape, err,
			      "concat's dim is not a dimension of it");
	for (uint32_t k = 0; same && k < a->ndim; k++)
		same = k == dim || a->shape[k] == b->shape[k];
	if (!same)
		return us_err_set(err, US_E_UNSUPPORTED, ref.recipe, "rule %zu: "
				  "concat along dim %u: '%s' %s and '%s' %s "
				  "differ off that dim", ref.rule, dim, a->name,
				  shape_str(a->ndim, a->shape, sa, sizeof(sa)),
				  b->name, shape_str(b->ndim, b->shape, sb, sizeof(sb)));
	if (a->dtype != b->dtype)
		return us_err_set(err, US_E_UNSUPPORTED, ref.recipe, "rule %zu: "
				  "concat: '%s' is %s and '%s' is %s (one dtype; "
				  "a cast applies to the result)", ref.rule,
				  a->name, us_dtype_name(a->dtype), b->name,
				  us_dtype_name(b->dtype));
	return US_OK;
}

enum us_status us_concat_layout(const struct us_recipe_rule *r,
				struct us_rule_ref ref,
				const struct us_tensor *const *in, size_t n,
				struct us_layout *l, struct us_err *err)
{
	const char *path = in[0]->decl_path ? in[0]->decl_path : ref.recipe;
	struct us_layout *parts = calloc(n, sizeof(*parts));
	enum us_status rc = parts ? US_OK : US_E_NOMEM;
	size_t made = 0;
	bool joining = false;

	for (size_t k = 0; rc == US_OK && k < n; k++)
		rc = concat_fits(ref, r->cat_dim, in[0], in[k], err);
	for (; rc == US_OK && made < n; made++)
		rc = us_layout_from(in[made], &parts[made], path, err);
	if (rc == US_OK) {
		joining = true;
		rc = us_layout_cat(l, parts, n, r->cat_dim);
	}
	for (size_t k = 0; k < made; k++)
		us_layout_free(&parts[k]);
	free(parts);
	if (rc == US_E_NOMEM)
		return us_err_set(err, rc, path, "out of memory");
	if (rc == US_E_FORMAT && joining)
		return us_err_set(err, rc, path, "rule %zu: concat of '%s': dim %u "
				  "overflows", ref.rule, in[0]->name, r->cat_dim);
	return rc;
}
