/*
 * parse.c - a recipe's JSON text to rules, validated (docs/recipes.md).
 * Everything that can be checked without the checkpoint is checked here,
 * so a broken recipe fails the same way on every checkpoint, refused like a
 * broken checkpoint (exit status 2): "<recipe>: rule N: <what is wrong>".
 */
#include "recipe.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/json.h"
#include "pattern.h"

struct ctx {
	const char *name;
	size_t rule; /* 1-based, for messages */
	struct us_err *err;
};

static enum us_status bad(struct ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static enum us_status bad(struct ctx *c, const char *fmt, ...)
{
	char what[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return us_err_set(c->err, US_E_FORMAT, c->name, "rule %zu: %s", c->rule, what);
}

/* Only @keys (NULL-terminated) may appear in @obj: a misspelt transform
 * must not be ignored. */
static enum us_status known_keys(struct ctx *c, const cJSON *obj,
				 const char *const *keys, const char *what)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, obj) {
		size_t k = 0;

		while (keys[k] && strcmp(keys[k], it->string))
			k++;
		if (!keys[k])
			return bad(c, "unknown %s '%s'", what, it->string);
	}
	return US_OK;
}

static enum us_status get_dim(struct ctx *c, const cJSON *obj, const char *t,
			      uint32_t *dim)
{
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(obj, "dim");
	uint64_t v;

	if (!d || !us_json_u64(d, &v) || v >= US_MAX_NDIM)
		return bad(c, "%s needs \"dim\": an integer from 0 to 63", t);
	*dim = (uint32_t)v;
	return US_OK;
}

static enum us_status get_u64(struct ctx *c, const cJSON *obj, const char *key,
			      const char *t, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (v && us_json_u64(v, out))
		return US_OK;
	return bad(c, "%s needs \"%s\": a non-negative integer", t, key);
}

static enum us_status parse_split(struct ctx *c, const cJSON *o,
				  struct us_recipe_rule *r)
{
	static const char *const keys[] = { "dim", "as", NULL };
	const cJSON *as = cJSON_GetObjectItemCaseSensitive(o, "as");

	if (!cJSON_IsObject(o))
		return bad(c, "%s must be an object", "\"split\"");
	US_TRY(known_keys(c, o, keys, "key of \"split\""));
	US_TRY(get_dim(c, o, "split", &r->split_dim));
	if (!cJSON_IsString(as))
		return bad(c, "%s needs \"as\": the capture of \"to\" that takes "
			   "the index", "split");
	if (us_pattern_cap(&r->from, as->valuestring) >= 0)
		return bad(c, "split's capture '{%s}' is also a capture of "
			   "\"from\"", as->valuestring);
	if (us_pattern_cap(&r->to, as->valuestring) < 0)
		return bad(c, "split's capture '{%s}' is not in \"to\"",
			   as->valuestring);
	if (!(r->split_var = strdup(as->valuestring)))
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	r->has_split = true;
	return US_OK;
}

static enum us_status parse_slice(struct ctx *c, const cJSON *o,
				  struct us_recipe_rule *r)
{
	static const char *const keys[] = { "dim", "start", "stop", NULL };

	if (!cJSON_IsObject(o))
		return bad(c, "%s must be an object", "\"slice\"");
	US_TRY(known_keys(c, o, keys, "key of \"slice\""));
	US_TRY(get_dim(c, o, "slice", &r->slice_dim));
	US_TRY(get_u64(c, o, "start", "slice", &r->slice_start));
	US_TRY(get_u64(c, o, "stop", "slice", &r->slice_stop));
	if (r->slice_start >= r->slice_stop)
		return bad(c, "%s: start must be below stop", "slice");
	r->has_slice = true;
	return US_OK;
}

/* An explicit order: each index 0..n-1 exactly once. */
static enum us_status parse_order(struct ctx *c, const cJSON *order,
				  struct us_recipe_rule *r)
{
	size_t n = (size_t)cJSON_GetArraySize(order), i = 0;
	bool *seen;
	const cJSON *it;

	if (n == 0)
		return bad(c, "%s is empty", "permute's \"order\"");
	r->order = calloc(n, sizeof(*r->order));
	seen = calloc(n, 1);
	if (!r->order || !seen) {
		free(seen);
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	}
	cJSON_ArrayForEach(it, order) {
		uint64_t v;

		if (!us_json_u64(it, &v) || v >= n || seen[v]) {
			free(seen);
			return bad(c, "%s is not a permutation of 0..n-1 (each "
				   "index once)", "permute's \"order\"");
		}
		seen[v] = true;
		r->order[i++] = v;
	}
	free(seen);
	r->norder = n;
	return US_OK;
}

static enum us_status parse_rope(struct ctx *c, const cJSON *o,
				 struct us_recipe_rule *r)
{
	const cJSON *rope = cJSON_GetObjectItemCaseSensitive(o, "rope");
	const cJSON *hd = cJSON_GetObjectItemCaseSensitive(o, "head_dim");

	if (!cJSON_IsString(rope) || strcmp(rope->valuestring, "interleaved_to_halves"))
		return bad(c, "%s: the only \"rope\" reorder is "
			   "\"interleaved_to_halves\"", "permute");
	r->rope = true;
	if (cJSON_IsString(hd) && !strcmp(hd->valuestring, "config"))
		return US_OK; /* head_dim = 0: from config.json at mount */
	if (!hd || !us_json_u64(hd, &r->head_dim) || r->head_dim == 0 ||
	    r->head_dim % 2)
		return bad(c, "%s needs \"head_dim\": a positive even integer "
			   "or \"config\"", "permute");
	return US_OK;
}

static enum us_status parse_permute(struct ctx *c, const cJSON *o,
				    struct us_recipe_rule *r)
{
	static const char *const keys[] = { "dim", "order", "rope", "head_dim", NULL };
	const cJSON *order = cJSON_GetObjectItemCaseSensitive(o, "order");
	bool rope = cJSON_GetObjectItemCaseSensitive(o, "rope") != NULL;

	if (!cJSON_IsObject(o))
		return bad(c, "%s must be an object", "\"permute\"");
	US_TRY(known_keys(c, o, keys, "key of \"permute\""));
	US_TRY(get_dim(c, o, "permute", &r->perm_dim));
	if (!!order == rope)
		return bad(c, "%s needs exactly one of \"order\" and \"rope\"",
			   "permute");
	r->has_permute = true;
	if (order && !cJSON_IsArray(order))
		return bad(c, "%s must be an array", "permute's \"order\"");
	if (!order && cJSON_GetObjectItemCaseSensitive(o, "head_dim") == NULL)
		return bad(c, "%s needs \"head_dim\"", "permute's \"rope\"");
	return order ? parse_order(c, order, r) : parse_rope(c, o, r);
}

static enum us_status parse_cast(struct ctx *c, const cJSON *o,
				 struct us_recipe_rule *r)
{
	if (!cJSON_IsString(o) || !us_dtype_from_name(o->valuestring, &r->cast) ||
	    (r->cast != US_DT_F32 && r->cast != US_DT_F16 &&
	     r->cast != US_DT_BF16 && r->cast != US_DT_F64))
		return bad(c, "%s must be one of \"F64\", \"F32\", \"F16\", "
			   "\"BF16\"", "\"cast\"");
	r->has_cast = true;
	return US_OK;
}

/* "config:KEY": KEY, a config.json key (letters, digits, '_'), or NULL. */
static const char *config_key(const cJSON *v)
{
	const char *k;
	size_t n;

	if (!cJSON_IsString(v) || strncmp(v->valuestring, "config:", 7))
		return NULL;
	k = v->valuestring + 7;
	n = strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		   "0123456789_");
	return n > 0 && n <= 63 && !k[n] ? k : NULL;
}

/* One entry of "offset": a capture of "from" (so of "to", which writes it
 * shifted) by a number or by config.json's KEY (read at mount). */
static enum us_status parse_offset_one(struct ctx *c, const cJSON *it,
				       struct us_recipe_rule *r)
{
	int cap = us_pattern_cap(&r->from, it->string);
	const char *key = config_key(it);
	struct us_offset *o;

	if (cap < 0)
		return bad(c, "offset's '{%s}' is not a capture of \"from\"",
			   it->string);
	if (us_pattern_cap(&r->to, it->string) < 0)
		return bad(c, "offset's '{%s}' is not in \"to\"", it->string);
	/* us_json_parse refuses duplicate keys: each entry is another
	 * capture of "from", so there are at most US_RECIPE_MAX_CAPS */
	for (uint32_t k = 0; k < r->noffset; k++)
		assert(r->offset[k].cap != (uint32_t)cap);
	assert(r->noffset < US_RECIPE_MAX_CAPS);
	o = &r->offset[r->noffset];
	if (!key && !us_json_u64(it, &o->n))
		return bad(c, "offset's '{%s}' must be a non-negative integer or "
			   "\"config:KEY\" (an integer of config.json)", it->string);
	if (key && !(o->config = strdup(key)))
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	o->cap = (uint32_t)cap;
	r->noffset++;
	return US_OK;
}

static enum us_status parse_offset(struct ctx *c, const cJSON *o,
				   struct us_recipe_rule *r)
{
	const cJSON *it;

	if (!cJSON_IsObject(o) || !o->child)
		return bad(c, "%s must be an object of captures and offsets "
			   "({\"k\": N} or {\"k\": \"config:KEY\"})", "\"offset\"");
	cJSON_ArrayForEach(it, o)
		US_TRY(parse_offset_one(c, it, r));
	return US_OK;
}

static enum us_status compile(struct ctx *c, const cJSON *v, const char *key,
			      struct us_pattern *p)
{
	struct us_err why;
	enum us_status rc;

	if (!cJSON_IsString(v))
		return bad(c, "\"%s\" must be a string (a name pattern)", key);
	rc = us_pattern_compile(v->valuestring, p, &why);
	if (rc == US_E_NOMEM)
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	return rc == US_OK ? US_OK : bad(c, "\"%s\": %s", key, why.msg);
}

/* A concat's inputs: each input's name is made from the first's captures,
 * so they all have the same ones, and no two are one pattern. */
static enum us_status check_inputs(struct ctx *c, const struct us_recipe_rule *r)
{
	for (size_t k = 0; k < r->ncat; k++) {
		const struct us_pattern *p = &r->cat_from[k];
		bool same = p->ncaps == r->from.ncaps;

		for (uint32_t i = 0; same && i < p->ncaps; i++)
			same = us_pattern_cap(&r->from, p->caps[i]) >= 0;
		if (!same)
			return bad(c, "concat's input %zu '%s' does not have the same "
				   "captures as the first, '%s'", k + 2, p->text,
				   r->from.text);
		for (size_t j = 0; j <= k; j++)
			if (!strcmp(us_rule_input_pattern(r, j)->text, p->text))
				return bad(c, "concat's input '%s' is given twice",
					   p->text);
	}
	return US_OK;
}

/* "from": one pattern, or with "concat" an array of 2 or more. */
static enum us_status parse_from(struct ctx *c, const cJSON *o,
				 struct us_recipe_rule *r)
{
	const cJSON *from = cJSON_GetObjectItemCaseSensitive(o, "from");
	bool cat = cJSON_GetObjectItemCaseSensitive(o, "concat") != NULL;
	const cJSON *it;
	size_t n;

	if (!cJSON_IsArray(from)) {
		if (cat)
			return bad(c, "%s", "concat needs \"from\": an array of 2 "
				   "or more name patterns");
		return compile(c, from, "from", &r->from);
	}
	if (!cat)
		return bad(c, "%s", "\"from\" is an array only with \"concat\"");
	if ((n = (size_t)cJSON_GetArraySize(from)) < 2)
		return bad(c, "%s", "concat needs \"from\": an array of 2 or "
			   "more name patterns");
	if (!(r->cat_from = calloc(n - 1, sizeof(*r->cat_from))))
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	r->ncat = n - 1; /* zeroed patterns until compiled: free is safe */
	n = 0;
	cJSON_ArrayForEach(it, from) {
		US_TRY(compile(c, it, "from", n ? &r->cat_from[n - 1] : &r->from));
		n++;
	}
	return check_inputs(c, r);
}

static enum us_status parse_concat(struct ctx *c, const cJSON *o,
				   struct us_recipe_rule *r)
{
	static const char *const keys[] = { "dim", NULL };

	if (!cJSON_IsObject(o))
		return bad(c, "%s must be an object", "\"concat\"");
	US_TRY(known_keys(c, o, keys, "key of \"concat\""));
	US_TRY(get_dim(c, o, "concat", &r->cat_dim));
	/* Joined as stored: a transform of the result would need to say
	 * whether it applies to each input or to the whole. */
	if (r->has_split || r->has_slice || r->has_permute)
		return bad(c, "%s", "concat takes no split, slice or permute");
	r->has_concat = true;
	return US_OK;
}

/* Every capture of "from" must be in "to" (else two tensors would make
 * one name), and every capture of "to" must come from somewhere. */
static enum us_status check_caps(struct ctx *c, const struct us_recipe_rule *r)
{
	for (uint32_t i = 0; i < r->from.ncaps; i++)
		if (us_pattern_cap(&r->to, r->from.caps[i]) < 0)
			return bad(c, "capture '{%s}' of \"from\" is not in \"to\" "
				   "(two tensors would get one name)", r->from.caps[i]);
	for (uint32_t i = 0; i < r->to.ncaps; i++)
		if (us_pattern_cap(&r->from, r->to.caps[i]) < 0 &&
		    !(r->split_var && !strcmp(r->split_var, r->to.caps[i])))
			return bad(c, "capture '{%s}' of \"to\" is not a capture of "
				   "\"from\" (nor split's \"as\")", r->to.caps[i]);
	return US_OK;
}

static enum us_status parse_transforms(struct ctx *c, const cJSON *o,
				       struct us_recipe_rule *r)
{
	const cJSON *v;

	if ((v = cJSON_GetObjectItemCaseSensitive(o, "split")))
		US_TRY(parse_split(c, v, r));
	if ((v = cJSON_GetObjectItemCaseSensitive(o, "slice")))
		US_TRY(parse_slice(c, v, r));
	if ((v = cJSON_GetObjectItemCaseSensitive(o, "permute")))
		US_TRY(parse_permute(c, v, r));
	if ((v = cJSON_GetObjectItemCaseSensitive(o, "cast")))
		US_TRY(parse_cast(c, v, r));
	if ((v = cJSON_GetObjectItemCaseSensitive(o, "concat")))
		US_TRY(parse_concat(c, v, r));
	US_TRY(check_caps(c, r));
	if ((v = cJSON_GetObjectItemCaseSensitive(o, "offset")))
		US_TRY(parse_offset(c, v, r));
	return US_OK;
}

static enum us_status parse_rule(struct ctx *c, const cJSON *o,
				 struct us_recipe_rule *r)
{
	static const char *const keys[] = { "from", "to", "drop", "require",
		"split", "slice", "permute", "cast", "concat", "offset", "comment",
		NULL };
	const cJSON *drop, *req, *to;

	if (!cJSON_IsObject(o))
		return bad(c, "%s is not an object", "the rule");
	US_TRY(known_keys(c, o, keys, "transform or key"));
	US_TRY(parse_from(c, o, r));
	drop = cJSON_GetObjectItemCaseSensitive(o, "drop");
	req = cJSON_GetObjectItemCaseSensitive(o, "require");
	to = cJSON_GetObjectItemCaseSensitive(o, "to");
	if ((drop && !cJSON_IsBool(drop)) || (req && !cJSON_IsBool(req)))
		return bad(c, "%s must be true or false", "\"drop\" and \"require\"");
	r->drop = cJSON_IsTrue(drop);
	r->required = cJSON_IsTrue(req);
	if (r->drop) {
		if (cJSON_GetArraySize(o) > 2 + (req != NULL) +
		    (cJSON_GetObjectItemCaseSensitive(o, "comment") != NULL))
			return bad(c, "%s: a dropped tensor has no \"to\" or transforms",
				   "\"drop\"");
		return US_OK;
	}
	if (!to)
		return bad(c, "%s", "the rule needs \"to\" (or \"drop\": true)");
	US_TRY(compile(c, to, "to", &r->to));
	return parse_transforms(c, o, r);
}

/* Two rules whose targets are the same pattern make the same names.  With
 * an offset they need not (main layers and the layers numbered after
 * them): whether they do is seen at mount, name by name (apply.c). */
static enum us_status check_targets(struct ctx *c, const struct us_recipe *r)
{
	for (size_t i = 0; i < r->nrules; i++) {
		for (size_t j = 0; j < i; j++) {
			if (r->rules[i].drop || r->rules[j].drop ||
			    r->rules[i].noffset || r->rules[j].noffset ||
			    strcmp(r->rules[i].to.text, r->rules[j].to.text))
				continue;
			c->rule = i + 1;
			return bad(c, "produces the same names as rule %zu", j + 1);
		}
	}
	return US_OK;
}

static enum us_status parse_root(struct ctx *c, const cJSON *root,
				 struct us_recipe *r)
{
	static const char *const keys[] = { "unshardfs_recipe", "description",
					    "rules", NULL };
	const cJSON *rules = cJSON_GetObjectItemCaseSensitive(root, "rules");
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "unshardfs_recipe");
	const cJSON *it;
	uint64_t v;

	if (!cJSON_IsObject(root) || !ver || !us_json_u64(ver, &v) || v != 1)
		return us_err_set(c->err, US_E_FORMAT, c->name, "not a recipe: "
				  "a JSON object with \"unshardfs_recipe\": 1 "
				  "(docs/recipes.md)");
	US_TRY(known_keys(c, root, keys, "top-level key"));
	if (!cJSON_IsArray(rules) || cJSON_GetArraySize(rules) == 0)
		return us_err_set(c->err, US_E_FORMAT, c->name,
				  "\"rules\" must be a non-empty array");
	r->rules = calloc((size_t)cJSON_GetArraySize(rules), sizeof(*r->rules));
	if (!r->rules)
		return us_err_set(c->err, US_E_NOMEM, c->name, "out of memory");
	cJSON_ArrayForEach(it, rules) {
		c->rule = r->nrules + 1;
		US_TRY(parse_rule(c, it, &r->rules[r->nrules++]));
	}
	return check_targets(c, r);
}

enum us_status us_recipe_parse(const char *text, size_t len, const char *name,
			       struct us_recipe **out, struct us_err *err)
{
	struct ctx c = { .name = name, .err = err };
	struct us_recipe *r = calloc(1, sizeof(*r));
	struct us_err jerr;
	cJSON *root = NULL;
	enum us_status rc;

	*out = NULL;
	if (!r || !(r->name = strdup(name))) {
		free(r);
		return us_err_set(err, US_E_NOMEM, name, "out of memory");
	}
	rc = us_json_parse(text, len, &root, &jerr);
	if (rc != US_OK)
		rc = us_err_set(err, rc == US_E_NOMEM ? rc : US_E_FORMAT, name,
				"%s", jerr.msg);
	else
		rc = parse_root(&c, root, r);
	cJSON_Delete(root);
	if (rc != US_OK) {
		us_recipe_free(r);
		return rc;
	}
	*out = r;
	return US_OK;
}

void us_recipe_free(struct us_recipe *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nrules; i++) {
		us_pattern_free(&r->rules[i].from);
		us_pattern_free(&r->rules[i].to);
		free(r->rules[i].split_var);
		free(r->rules[i].order);
		for (size_t k = 0; k < r->rules[i].ncat; k++)
			us_pattern_free(&r->rules[i].cat_from[k]);
		free(r->rules[i].cat_from);
		for (uint32_t k = 0; k < r->rules[i].noffset; k++)
			free(r->rules[i].offset[k].config);
	}
	free(r->rules);
	free(r->name);
	free(r);
}
