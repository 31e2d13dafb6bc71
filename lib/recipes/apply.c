/*
 * apply.c - rewrite a state dict by a recipe (recipe.h): every source
 * tensor through the rules that match it, into a new tensor list.  The
 * old list's chunks stay in the arena; outputs either share them (a rename)
 * or get rewritten copies (layout.h).  Nothing is dropped unless a rule
 * says so, and what is dropped is recorded for inspect.
 */
#include "recipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hfconfig.h"
#include "pattern.h"
#include "transform.h"

#define NAME_MAX_LEN 4096

/* A rule's offsets, resolved once: config.json is read at the first
 * tensor the rule maps (a rule that matches nothing needs no config). */
struct offsets {
	bool done;
	uint64_t n[US_RECIPE_MAX_CAPS]; /* as rule.offset[] */
};

struct run {
	struct us_statedict *sd;
	const struct us_recipe *r;
	const struct us_dir *cfg; /* config.json's directory, NULL: none */
	cJSON *config;       /* its config.json, once read (NULL: none) */
	bool config_read;
	uint64_t head_dim;   /* config.json's, 0: none */
	struct offsets *off; /* per rule */
	bool *hit;           /* per rule: matched some tensor */
	const struct us_tensor **byname; /* the source tensors, sorted: a */
	size_t nold;                     /* concat finds its inputs here */
	struct us_err *err;
};

static struct us_rule_ref ref(const struct run *x, size_t i)
{
	return (struct us_rule_ref){ .recipe = x->r->name, .rule = i + 1 };
}

/* A rename: the output shares the source's chunks, as an alias does. */
static struct us_tensor *renamed(struct run *x, const struct us_tensor *t,
				 const char *name)
{
	struct us_tensor *o = us_sd_add_tensor(x->sd, name, t->dtype, t->ndim,
					       t->shape, 0, t->decl_path, x->err);

	if (o) {
		o->chunks = t->chunks;
		o->nchunks = t->nchunks;
	}
	return o;
}

static enum us_status too_long(struct run *x, size_t i, const struct us_tensor *t)
{
	return us_err_set(x->err, US_E_UNSUPPORTED, x->r->name, "rule %zu: the "
			  "name made from '%s' is too long", i + 1, t->name);
}

static enum us_status finish(struct run *x, size_t i, struct us_tensor *o,
			     const struct us_tensor *t);

/* config.json, parsed on first need and kept for the run. */
static enum us_status config(struct run *x, const cJSON **out)
{
	if (!x->config_read) {
		US_TRY(us_hfconfig_read(x->cfg, &x->config, x->err));
		x->config_read = true;
	}
	*out = x->config;
	return US_OK;
}

/* The offsets of rule @i, from config.json where the rule says so
 * (refused, naming the rule, when it does not give them). */
static enum us_status resolve(struct run *x, size_t i)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	struct offsets *off = &x->off[i];

	if (off->done)
		return US_OK;
	for (uint32_t k = 0; k < r->noffset; k++) {
		const struct us_offset *o = &r->offset[k];
		bool found = true;

		off->n[k] = o->n;
		if (o->config) {
			const cJSON *cfg;

			US_TRY(config(x, &cfg));
			found = us_hfconfig_u64(cfg, o->config, &off->n[k]);
		}
		if (!found)
			return us_err_set(x->err, US_E_UNSUPPORTED, x->r->name,
					  "rule %zu: the offset of '{%s}' is config.json's "
					  "\"%s\", and no config.json (in --overlay DIR or "
					  "SOURCE) gives it as a non-negative integer",
					  i + 1, r->from.caps[o->cap], o->config);
	}
	off->done = true;
	return US_OK;
}

/* @caps of rule @i's source @t with the rule's offsets added (written into
 * @num): the captures its target name is made of. */
static enum us_status shift(struct run *x, size_t i, const struct us_tensor *t,
			    const struct us_capture *caps, struct us_capture *out,
			    char (*num)[24])
{
	const struct us_recipe_rule *r = &x->r->rules[i];

	memcpy(out, caps, r->from.ncaps * sizeof(*out));
	if (!r->noffset)
		return US_OK;
	US_TRY(resolve(x, i));
	for (uint32_t k = 0; k < r->noffset; k++) {
		uint32_t c = r->offset[k].cap;

		if (!us_capture_add(&caps[c], x->off[i].n[k], num[k], sizeof(num[k]),
				    &out[c]))
			return us_err_set(x->err, US_E_UNSUPPORTED, x->r->name,
					  "rule %zu: '{%s}' of '%s' plus its offset "
					  "%llu does not fit 64 bits", i + 1,
					  r->from.caps[c], t->name,
					  (unsigned long long)x->off[i].n[k]);
	}
	return US_OK;
}

/* The target name of rule @i for @t (@caps its captures, @idx the split's
 * index). */
static enum us_status target(struct run *x, size_t i, const struct us_tensor *t,
			     const struct us_capture *caps, uint64_t idx,
			     char *name)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	struct us_capture out[US_RECIPE_MAX_CAPS];
	char num[US_RECIPE_MAX_CAPS][24];

	US_TRY(shift(x, i, t, caps, out, num));
	if (!us_pattern_format(&r->to, &r->from, out, r->split_var, idx, name,
			       NAME_MAX_LEN))
		return too_long(x, i, t);
	return US_OK;
}

static enum us_status emit(struct run *x, size_t i, const struct us_tensor *t,
			   const struct us_capture *caps, uint64_t idx)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	char name[NAME_MAX_LEN];
	struct us_tensor *o;
	struct us_layout l;

	US_TRY(target(x, i, t, caps, idx, name));
	if (!r->has_split && !r->has_slice && !r->has_permute) {
		o = renamed(x, t, name);
	} else {
		US_TRY(us_rule_layout(r, ref(x, i), t, idx, x->head_dim, &l, x->err));
		o = us_layout_to(x->sd, &l, name, t->dtype, t->decl_path, x->err);
		us_layout_free(&l);
	}
	return finish(x, i, o, t);
}

/* Output @o of rule @i from @t: what inspect and the views need. */
static enum us_status finish(struct run *x, size_t i, struct us_tensor *o,
			     const struct us_tensor *t)
{
	const struct us_recipe_rule *r = &x->r->rules[i];

	if (!o)
		return x->err ? x->err->status : US_E_NOMEM;
	o->source_name = t->name; /* what inspect and refusals call it */
	o->decl_path = t->decl_path;
	o->upcast_f32 = t->upcast_f32;
	o->recipe_rule = (uint32_t)(i + 1);
	o->recipe_cast = r->has_cast;
	o->recipe_cast_to = r->cast;
	return US_OK;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp((*(const struct us_tensor *const *)a)->name,
		      (*(const struct us_tensor *const *)b)->name);
}

static const struct us_tensor *find(const struct run *x, const char *name)
{
	const struct us_tensor key = { .name = name }, *kp = &key;
	const struct us_tensor **hit = bsearch(&kp, x->byname, x->nold,
					       sizeof(*x->byname), cmp_name);

	return hit ? *hit : NULL;
}

/* The output of concat rule @i from its inputs @in, @caps those of the
 * first input. */
static enum us_status emit_concat(struct run *x, size_t i,
				  const struct us_tensor *const *in,
				  const struct us_capture *caps)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	char name[NAME_MAX_LEN];
	struct us_tensor *o;
	struct us_layout l;

	US_TRY(target(x, i, in[0], caps, 0, name));
	US_TRY(us_concat_layout(r, ref(x, i), in, r->ncat + 1, &l, x->err));
	o = us_layout_to(x->sd, &l, name, in[0]->dtype, in[0]->decl_path, x->err);
	us_layout_free(&l);
	return finish(x, i, o, in[0]);
}

/* Concat rule @i matched by @t as its input @k: every input is named by
 * @t's captures and must exist; the output is made once, at the first. */
static enum us_status concat(struct run *x, size_t i, const struct us_tensor *t,
			     int k, const struct us_capture *caps)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	const struct us_tensor **in = calloc(r->ncat + 1, sizeof(*in));
	enum us_status rc = in ? US_OK : US_E_NOMEM;
	char name[NAME_MAX_LEN];

	for (size_t j = 0; rc == US_OK && j <= r->ncat; j++) {
		if (j == (size_t)k) {
			in[j] = t;
			continue;
		}
		if (!us_pattern_format(us_rule_input_pattern(r, j),
				       us_rule_input_pattern(r, (size_t)k), caps,
				       NULL, 0, name, sizeof(name)))
			rc = too_long(x, i, t);
		else if (!(in[j] = find(x, name)))
			rc = us_err_set(x->err, US_E_UNSUPPORTED, x->r->name,
					"rule %zu: concat's input '%s' is missing "
					"(needed with '%s')", i + 1, name, t->name);
	}
	if (rc == US_OK && k == 0)
		rc = emit_concat(x, i, in, caps);
	free(in);
	if (rc == US_E_NOMEM && !in)
		return us_err_set(x->err, rc, ".", "out of memory");
	return rc;
}

/* Rule @i maps @t: one output, or one per index of the split dim. */
static enum us_status map(struct run *x, size_t i, const struct us_tensor *t,
			  const struct us_capture *caps)
{
	const struct us_recipe_rule *r = &x->r->rules[i];
	uint64_t n = 1;

	US_TRY(us_rule_check(r, ref(x, i), t, x->head_dim, x->err));
	if (r->has_split)
		n = t->shape[r->split_dim];
	for (uint64_t k = 0; k < n; k++)
		US_TRY(emit(x, i, t, caps, k));
	return US_OK;
}

static enum us_status drop(struct run *x, size_t i, const struct us_tensor *t)
{
	struct us_statedict *sd = x->sd;
	size_t n = sd->nrecipe_dropped;
	const char **names = us_arena_calloc(&sd->arena, n + 1, sizeof(*names));
	uint32_t *rules = us_arena_calloc(&sd->arena, n + 1, sizeof(*rules));

	/* Arena arrays, regrown per drop: a recipe drops a handful. */
	if (!names || !rules)
		return us_err_set(x->err, US_E_NOMEM, ".", "out of memory");
	if (n) {
		memcpy(names, sd->recipe_dropped, n * sizeof(*names));
		memcpy(rules, sd->recipe_dropped_rule, n * sizeof(*rules));
	}
	names[n] = t->name;
	rules[n] = (uint32_t)(i + 1);
	sd->recipe_dropped = names;
	sd->recipe_dropped_rule = rules;
	sd->nrecipe_dropped = n + 1;
	return US_OK;
}

/* Every rule matching @t; none is a refusal, and so is a rule dropping
 * what another maps (the recipe would contradict itself). */
static enum us_status one_tensor(struct run *x, const struct us_tensor *t)
{
	struct us_capture caps[US_RECIPE_MAX_CAPS];
	size_t mapped = 0, dropped = 0, first = 0;

	for (size_t i = 0; i < x->r->nrules; i++) {
		const struct us_recipe_rule *r = &x->r->rules[i];
		int k = us_rule_input(r, t->name, caps);

		if (k < 0)
			continue;
		if (!mapped && !dropped)
			first = i;
		x->hit[i] = true;
		/* A fused tensor may feed several slices, but a concat's input
		 * belongs to it alone: else its bytes would be served twice. */
		if ((mapped || dropped) &&
		    (r->has_concat || x->r->rules[first].has_concat))
			return us_err_set(x->err, US_E_FORMAT, x->r->name, "rules "
					  "%zu and %zu both take '%s' (an input of a "
					  "concat belongs to that rule alone)",
					  first + 1, i + 1, t->name);
		if (r->has_concat) {
			mapped++;
			US_TRY(concat(x, i, t, k, caps));
			continue;
		}
		if (r->drop && mapped)
			return us_err_set(x->err, US_E_FORMAT, x->r->name, "rule %zu: "
					  "drops '%s', which rule %zu maps", i + 1,
					  t->name, first + 1);
		if (!r->drop && dropped)
			return us_err_set(x->err, US_E_FORMAT, x->r->name, "rule %zu: "
					  "maps '%s', which rule %zu drops", i + 1,
					  t->name, first + 1);
		if (r->drop) {
			dropped++;
			US_TRY(drop(x, i, t));
		} else {
			mapped++;
			US_TRY(map(x, i, t, caps));
		}
	}
	if (!mapped && !dropped)
		return us_err_set(x->err, US_E_UNSUPPORTED,
				  t->decl_path ? t->decl_path : ".",
				  "tensor '%s' matches no rule of recipe %s (mount "
				  "without --recipe to serve the source names)",
				  t->name, x->r->name);
	return US_OK;
}

/* Two outputs with one name: say which rules and sources made them. */
static enum us_status check_unique(struct run *x)
{
	struct us_statedict *sd = x->sd;
	const struct us_tensor **v = malloc((sd->ntensors + 1) * sizeof(*v));
	enum us_status rc = US_OK;

	if (!v)
		return us_err_set(x->err, US_E_NOMEM, ".", "out of memory");
	for (size_t i = 0; i < sd->ntensors; i++)
		v[i] = &sd->tensors[i];
	qsort(v, sd->ntensors, sizeof(*v), cmp_name);
	for (size_t i = 1; rc == US_OK && i < sd->ntensors; i++)
		if (!strcmp(v[i]->name, v[i - 1]->name))
			rc = us_err_set(x->err, US_E_FORMAT, x->r->name, "rules %u "
					"and %u both make '%s' (from '%s' and '%s')",
					v[i - 1]->recipe_rule, v[i]->recipe_rule,
					v[i]->name, v[i - 1]->source_name,
					v[i]->source_name);
	free(v);
	return rc;
}

static enum us_status check_required(struct run *x)
{
	for (size_t i = 0; i < x->r->nrules; i++)
		if (x->r->rules[i].required && !x->hit[i])
			return us_err_set(x->err, US_E_UNSUPPORTED, x->r->name,
					  "rule %zu: no tensor matches '%s', which "
					  "the recipe requires (a checkpoint of "
					  "another model?)", i + 1,
					  x->r->rules[i].from.text);
	return US_OK;
}

static bool needs_config(const struct us_recipe *r)
{
	for (size_t i = 0; i < r->nrules; i++)
		if (r->rules[i].rope && !r->rules[i].head_dim)
			return true;
	return false;
}

static bool has_concat(const struct us_recipe *r)
{
	for (size_t i = 0; i < r->nrules; i++)
		if (r->rules[i].has_concat)
			return true;
	return false;
}

/* The sorted index concat looks its inputs up in. */
static enum us_status index_names(struct run *x, const struct us_tensor *old,
				  size_t nold)
{
	if (!has_concat(x->r))
		return US_OK;
	if (!(x->byname = malloc((nold + 1) * sizeof(*x->byname))))
		return us_err_set(x->err, US_E_NOMEM, ".", "out of memory");
	for (size_t i = 0; i < nold; i++)
		x->byname[i] = &old[i];
	x->nold = nold;
	qsort(x->byname, nold, sizeof(*x->byname), cmp_name);
	return US_OK;
}

static enum us_status run_all(struct run *x, const struct us_tensor *old,
			      size_t nold)
{
	US_TRY(index_names(x, old, nold));
	for (size_t i = 0; i < nold; i++)
		US_TRY(one_tensor(x, &old[i]));
	US_TRY(check_required(x));
	return check_unique(x);
}

enum us_status us_recipe_apply(struct us_statedict *sd,
			       const struct us_recipe *r, const struct us_dir *cfg,
			       struct us_err *err)
{
	struct run x = { .sd = sd, .r = r, .cfg = cfg, .err = err };
	struct us_tensor *old = sd->tensors;
	size_t nold = sd->ntensors, oldcap = sd->tensors_cap;
	enum us_status rc;

	if (needs_config(r)) {
		const cJSON *c;

		US_TRY(config(&x, &c));
		x.head_dim = us_hfconfig_head_dim(c);
	}
	x.hit = calloc(r->nrules, sizeof(*x.hit));
	x.off = calloc(r->nrules, sizeof(*x.off));
	if (!x.hit || !x.off) {
		free(x.hit);
		free(x.off);
		cJSON_Delete(x.config);
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	sd->tensors = NULL;
	sd->ntensors = sd->tensors_cap = 0;
	rc = run_all(&x, old, nold);
	if (rc == US_OK && !(sd->recipe = us_arena_strdup(&sd->arena, r->name)))
		rc = us_err_set(err, US_E_NOMEM, ".", "out of memory");
	free(x.hit);
	free(x.off);
	free(x.byname);
	cJSON_Delete(x.config);
	if (rc != US_OK) {
		/* us_sd_free frees whichever list is in sd: put the old back */
		free(sd->tensors);
		sd->tensors = old;
		sd->ntensors = nold;
		sd->tensors_cap = oldcap;
		return rc;
	}
	free(old);
	return US_OK;
}

void us_recipe_present(struct us_statedict *sd)
{
	for (size_t i = 0; i < sd->ntensors; i++)
		if (sd->tensors[i].recipe_cast)
			us_tensor_present_as(&sd->tensors[i],
					     sd->tensors[i].recipe_cast_to);
}
