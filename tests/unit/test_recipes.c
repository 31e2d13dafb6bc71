/* test_recipes.c - recipe patterns, parsing and the chunk rewrites
 * (recipes/recipe.h): every output element must read the source element
 * the transform names, across chunk boundaries. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "recipes/layout.h"
#include "recipes/pattern.h"
#include "recipes/recipe.h"
#include "recipes/transform.h"

static void test_patterns(void)
{
	struct us_pattern from, to;
	struct us_capture caps[US_RECIPE_MAX_CAPS];
	struct us_err why;
	char out[128];

	CHECK(us_pattern_compile("layers.{i}.moe.w1", &from, &why) == US_OK);
	CHECK(us_pattern_compile("model.layers.{i}.mlp.experts.{e}.w", &to, &why) == US_OK);
	CHECK(us_pattern_match(&from, "layers.12.moe.w1", caps));
	CHECK(caps[0].len == 2 && !strncmp(caps[0].s, "12", 2));
	CHECK(!us_pattern_match(&from, "layers..moe.w1", caps));
	CHECK(!us_pattern_match(&from, "layers.x.moe.w1", caps));
	CHECK(!us_pattern_match(&from, "layers.1.moe.w1.bias", caps));
	CHECK(us_pattern_match(&from, "layers.3.moe.w1", caps));
	CHECK(us_pattern_format(&to, &from, caps, "e", 7, out, sizeof(out)));
	CHECK(!strcmp(out, "model.layers.3.mlp.experts.7.w"));
	CHECK(!us_pattern_format(&to, &from, caps, "e", 7, out, 10));
	us_pattern_free(&from);
	us_pattern_free(&to);
	CHECK(us_pattern_compile("a.{i", &from, &why) == US_E_FORMAT &&
	      strstr(why.msg, "not closed"));
	CHECK(us_pattern_compile("a.{i}{j}", &from, &why) == US_E_FORMAT);
	CHECK(us_pattern_compile("a.{i}1", &from, &why) == US_E_FORMAT);
	CHECK(us_pattern_compile("a.{i}.{i}", &from, &why) == US_E_FORMAT);
	CHECK(us_pattern_compile("", &from, &why) == US_E_FORMAT);
	CHECK(us_pattern_compile("a}", &from, &why) == US_E_FORMAT);
}

static void test_builtins_parse(void)
{
	for (size_t i = 0; us_recipe_builtin_names[i]; i++) {
		struct us_recipe *r = NULL;
		struct us_err err = {0};

		CHECK(us_recipe_load(us_recipe_builtin_names[i], &r, &err) == US_OK);
		CHECK(r && r->nrules > 10);
		us_recipe_free(r);
	}
}

static enum us_status parse(const char *text, struct us_err *err)
{
	struct us_recipe *r = NULL;
	enum us_status rc = us_recipe_parse(text, strlen(text), "t.json", &r, err);

	us_recipe_free(r);
	return rc;
}

static void test_parse_errors(void)
{
	struct us_err err = {0};

	CHECK(parse("{\"unshardfs_recipe\":1,\"rules\":[{\"from\":\"a\",\"to\":\"b\"}]}",
		    &err) == US_OK);
	CHECK(parse("{\"unshardfs_recipe\":1,\"rules\":[{\"from\":\"a\",\"to\":\"b\"},"
		    "{\"from\":\"c\",\"to\":\"d\",\"bogus\":1}]}", &err) == US_E_FORMAT);
	CHECK(strstr(err.msg, "t.json: rule 2: unknown") == err.msg);
	CHECK(parse("{\"unshardfs_recipe\":1,\"rules\":[{\"from\":\"a.{i}\",\"to\":\"b\"}]}",
		    &err) == US_E_FORMAT && strstr(err.msg, "'{i}'"));
	CHECK(parse("{\"unshardfs_recipe\":1,\"rules\":[{\"from\":\"a\",\"to\":\"b\","
		    "\"permute\":{\"dim\":0,\"order\":[0,2]}}]}", &err) == US_E_FORMAT);
	CHECK(parse("{\"unshardfs_recipe\":2,\"rules\":[]}", &err) == US_E_FORMAT);
	CHECK(parse("[", &err) == US_E_FORMAT);
}

/* A tensor [rows, cols] of F32 stored row-major in one file, in chunks of
 * @split rows (as FSDP shards dim 0). */
static struct us_tensor *make(struct us_statedict *sd, uint64_t rows, uint64_t cols,
			      uint64_t split)
{
	uint64_t shape[2] = { rows, cols };
	uint32_t n = (uint32_t)((rows + split - 1) / split);
	struct us_tensor *t = us_sd_add_tensor(sd, "t", US_DT_F32, 2, shape, n, "f", NULL);

	for (uint32_t i = 0; t && i < n; i++) {
		uint64_t r0 = i * split, rn = rows - r0 < split ? rows - r0 : split;

		((uint64_t *)t->chunks[i].offsets)[0] = r0;
		((uint64_t *)t->chunks[i].sizes)[0] = rn;
		((uint64_t *)t->chunks[i].sizes)[1] = cols;
		t->chunks[i].src.offset = r0 * cols * 4;
	}
	return t;
}

/* The source element (row-major index) output element @idx reads. */
static int64_t source_of(const struct us_layout *l, const uint64_t *idx)
{
	for (uint32_t i = 0; i < l->nchunks; i++) {
		const uint64_t *off = l->v + (size_t)i * 3 * l->ndim;
		const uint64_t *size = off + l->ndim, *st = off + 2 * l->ndim;
		uint64_t el = l->src[i].offset / 4;
		bool in = true;

		for (uint32_t k = 0; k < l->ndim; k++) {
			in &= idx[k] >= off[k] && idx[k] < off[k] + size[k];
			el += (idx[k] - off[k]) * st[k];
		}
		if (in)
			return (int64_t)el;
	}
	return -1;
}

static void test_rope_permute(void)
{
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = make(sd, 16, 3, 6); /* chunks cut heads apart */
	struct us_recipe_rule r = { .has_permute = true, .rope = true, .head_dim = 8 };
	struct us_rule_ref ref = { "t", 1 };
	struct us_layout l;
	struct us_err err = {0};

	CHECK(us_rule_layout(&r, ref, t, 0, 0, &l, &err) == US_OK);
	for (uint64_t h = 0; h < 2; h++)
		for (uint64_t j = 0; j < 2; j++)
			for (uint64_t i = 0; i < 4; i++)
				for (uint64_t c = 0; c < 3; c++) {
					uint64_t idx[2] = { h * 8 + j * 4 + i, c };
					int64_t want = (int64_t)((h * 8 + 2 * i + j) * 3 + c);

					CHECK(source_of(&l, idx) == want);
				}
	us_layout_free(&l);
	r.head_dim = 6; /* 16 rows: not a multiple */
	CHECK(us_rule_layout(&r, ref, t, 0, 0, &l, &err) == US_E_UNSUPPORTED);
	us_sd_free(sd);
}

static void test_split_slice_order(void)
{
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t = make(sd, 6, 4, 4);
	uint64_t order[4] = { 3, 1, 2, 0 };
	struct us_recipe_rule r = { .has_split = true, .split_dim = 0,
		.has_permute = true, .order = order, .norder = 4 };
	struct us_rule_ref ref = { "t", 1 };
	struct us_layout l;
	struct us_err err = {0};

	/* split row 5 (in the second chunk), then reverse-ish its 4 columns */
	CHECK(us_rule_layout(&r, ref, t, 5, 0, &l, &err) == US_OK);
	CHECK(l.ndim == 1 && l.shape[0] == 4);
	for (uint64_t c = 0; c < 4; c++)
		CHECK(source_of(&l, &c) == (int64_t)(5 * 4 + order[c]));
	us_layout_free(&l);
	r = (struct us_recipe_rule){ .has_slice = true, .slice_dim = 0,
		.slice_start = 2, .slice_stop = 6 };
	CHECK(us_rule_layout(&r, ref, t, 0, 0, &l, &err) == US_OK);
	CHECK(l.shape[0] == 4 && l.nchunks == 2);
	for (uint64_t row = 0; row < 4; row++)
		for (uint64_t c = 0; c < 4; c++) {
			uint64_t idx[2] = { row, c };

			CHECK(source_of(&l, idx) == (int64_t)((row + 2) * 4 + c));
		}
	us_layout_free(&l);
	r.slice_stop = 7;
	CHECK(us_rule_layout(&r, ref, t, 0, 0, &l, &err) == US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "rule 1: tensor 't' [6,4]: slice 2:7 is out of range"));
	us_sd_free(sd);
}

/* Two inputs [6,4] (chunks of 4 rows) and [3,4] (one chunk) along dim 0,
 * then [6,4] and [6,2] along dim 1: each output element reads its input's
 * element; inputs that disagree off the dim, or in dtype, are refused. */
static void test_concat(void)
{
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *a = make(sd, 6, 4, 4), *b = make(sd, 3, 4, 3);
	struct us_tensor *c = make(sd, 6, 2, 6);
	const struct us_tensor *in[2] = { a, b };
	struct us_recipe_rule r = { .has_concat = true, .cat_dim = 0 };
	struct us_rule_ref ref = { "t", 4 };
	struct us_layout l;
	struct us_err err = {0};

	b->chunks[0].src.offset = 1000 * 4; /* b's elements from 1000 on */
	c->chunks[0].src.offset = 2000 * 4;
	CHECK(us_concat_layout(&r, ref, in, 2, &l, &err) == US_OK);
	CHECK(l.shape[0] == 9 && l.shape[1] == 4 && l.nchunks == 3);
	for (uint64_t row = 0; row < 9; row++)
		for (uint64_t col = 0; col < 4; col++) {
			uint64_t idx[2] = { row, col };
			int64_t want = row < 6 ? (int64_t)(row * 4 + col)
					       : (int64_t)(1000 + (row - 6) * 4 + col);

			CHECK(source_of(&l, idx) == want);
		}
	us_layout_free(&l);
	in[1] = c;
	CHECK(us_concat_layout(&r, ref, in, 2, &l, &err) == US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "t: rule 4: concat along dim 0: 't' [6,4] and 't' "
		     "[6,2] differ off that dim"));
	r.cat_dim = 1;
	CHECK(us_concat_layout(&r, ref, in, 2, &l, &err) == US_OK);
	CHECK(l.shape[0] == 6 && l.shape[1] == 6);
	for (uint64_t row = 0; row < 6; row++)
		for (uint64_t col = 0; col < 6; col++) {
			uint64_t idx[2] = { row, col };
			int64_t want = col < 4 ? (int64_t)(row * 4 + col)
					       : (int64_t)(2000 + row * 2 + col - 4);

			CHECK(source_of(&l, idx) == want);
		}
	us_layout_free(&l);
	c->dtype = US_DT_BF16;
	CHECK(us_concat_layout(&r, ref, in, 2, &l, &err) == US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "rule 4: concat: 't' is F32 and 't' is BF16"));
	r.cat_dim = 2;
	CHECK(us_concat_layout(&r, ref, in, 2, &l, &err) == US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "concat's dim is not a dimension of it"));
	us_sd_free(sd);
}

static void test_concat_parse(void)
{
	struct us_err err = {0};
	const char *head = "{\"unshardfs_recipe\":1,\"rules\":[";
	char buf[512];

#define CAT(rule) (snprintf(buf, sizeof(buf), "%s%s]}", head, rule), parse(buf, &err))
	CHECK(CAT("{\"from\":[\"a.{i}.q\",\"a.{i}.k\"],\"to\":\"b.{i}.qk\","
		  "\"concat\":{\"dim\":0},\"cast\":\"BF16\"}") == US_OK);
	CHECK(CAT("{\"from\":[\"a.{i}.q\",\"a.k\"],\"to\":\"b.{i}\","
		  "\"concat\":{\"dim\":0}}") == US_E_FORMAT &&
	      strstr(err.msg, "rule 1: concat's input 2 'a.k' does not have the same captures"));
	CHECK(CAT("{\"from\":[\"a.q\",\"a.q\"],\"to\":\"b\",\"concat\":{\"dim\":0}}")
	      == US_E_FORMAT && strstr(err.msg, "given twice"));
	CHECK(CAT("{\"from\":[\"a.q\"],\"to\":\"b\",\"concat\":{\"dim\":0}}")
	      == US_E_FORMAT && strstr(err.msg, "2 or more"));
	CHECK(CAT("{\"from\":\"a.q\",\"to\":\"b\",\"concat\":{\"dim\":0}}")
	      == US_E_FORMAT && strstr(err.msg, "2 or more"));
	CHECK(CAT("{\"from\":[\"a.q\",\"a.k\"],\"to\":\"b\"}") == US_E_FORMAT &&
	      strstr(err.msg, "only with \"concat\""));
	CHECK(CAT("{\"from\":[\"a.q\",\"a.k\"],\"to\":\"b\",\"concat\":{\"dim\":0},"
		  "\"slice\":{\"dim\":0,\"start\":0,\"stop\":1}}") == US_E_FORMAT &&
	      strstr(err.msg, "concat takes no split"));
	CHECK(CAT("{\"from\":[\"a.q\",\"a.k\"],\"to\":\"b\",\"concat\":{\"axis\":0}}")
	      == US_E_FORMAT && strstr(err.msg, "unknown key of \"concat\" 'axis'"));
	CHECK(CAT("{\"from\":[\"a.q\",\"a.k\"],\"drop\":true,\"concat\":{\"dim\":0}}")
	      == US_E_FORMAT);
#undef CAT
}

static void test_offset_parse(void)
{
	struct us_err err = {0};
	const char *head = "{\"unshardfs_recipe\":1,\"rules\":[";
	struct us_recipe *r = NULL;
	char buf[512];

#define OFF(rule) (snprintf(buf, sizeof(buf), "%s%s]}", head, rule), parse(buf, &err))
	snprintf(buf, sizeof(buf), "%s{\"from\":\"m.{k}.w{j}\",\"to\":\"l.{k}.{j}\","
		 "\"offset\":{\"k\":\"config:num_hidden_layers\",\"j\":3}}]}", head);
	CHECK(us_recipe_parse(buf, strlen(buf), "t.json", &r, &err) == US_OK);
	CHECK(r && r->rules[0].noffset == 2 && r->rules[0].offset[0].cap == 0 &&
	      !strcmp(r->rules[0].offset[0].config, "num_hidden_layers") &&
	      r->rules[0].offset[1].cap == 1 && !r->rules[0].offset[1].config &&
	      r->rules[0].offset[1].n == 3);
	us_recipe_free(r);
	/* the same target text as another rule: with an offset it need not
	 * make the same names (the mount checks each name) */
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\"},"
		  "{\"from\":\"m.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":2}}") == US_OK);
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"j\":1}}")
	      == US_E_FORMAT && strstr(err.msg, "t.json: rule 1: offset's '{j}' is not a "
				       "capture of \"from\""));
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}.{e}\",\"split\":{\"dim\":0,"
		  "\"as\":\"e\"},\"offset\":{\"e\":1}}") == US_E_FORMAT &&
	      strstr(err.msg, "'{e}' is not a capture of \"from\""));
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":-1}}")
	      == US_E_FORMAT && strstr(err.msg, "non-negative integer or \"config:KEY\""));
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":1.5}}")
	      == US_E_FORMAT);
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":\"config:\"}}")
	      == US_E_FORMAT);
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":\"7\"}}")
	      == US_E_FORMAT);
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{\"i\":1,\"i\":2}}")
	      == US_E_FORMAT && strstr(err.msg, "duplicate key"));
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":{}}") == US_E_FORMAT &&
	      strstr(err.msg, "\"offset\" must be an object"));
	CHECK(OFF("{\"from\":\"a.{i}\",\"to\":\"b.{i}\",\"offset\":2}") == US_E_FORMAT);
	CHECK(OFF("{\"from\":\"a.{i}\",\"drop\":true,\"offset\":{\"i\":1}}")
	      == US_E_FORMAT);
#undef OFF
}

static void test_capture_add(void)
{
	struct us_capture c = { "0007", 4 }, out;
	char buf[24];

	CHECK(us_capture_add(&c, 61, buf, sizeof(buf), &out));
	CHECK(out.len == 2 && !strncmp(out.s, "68", 2));
	c = (struct us_capture){ "18446744073709551615", 20 }; /* UINT64_MAX */
	CHECK(us_capture_add(&c, 0, buf, sizeof(buf), &out) && out.len == 20);
	CHECK(!us_capture_add(&c, 1, buf, sizeof(buf), &out));
	c = (struct us_capture){ "18446744073709551616", 20 };
	CHECK(!us_capture_add(&c, 0, buf, sizeof(buf), &out));
	c = (struct us_capture){ "99999999999999999999999", 23 };
	CHECK(!us_capture_add(&c, 0, buf, sizeof(buf), &out));
}

/* A recipe with offsets applied: the target's capture is the source's plus
 * the literal, or plus config.json's integer; a config.json without it is
 * a refusal naming the rule, but only when the rule is used. */
static void test_offset_apply(void)
{
	static const char lit[] = "{\"unshardfs_recipe\":1,\"rules\":["
		"{\"from\":\"layers.{i}.w\",\"to\":\"l.{i}.w\"},"
		"{\"from\":\"mtp.{k}.w\",\"to\":\"l.{k}.w\",\"offset\":{\"k\":5}},"
		"{\"from\":\"x.{k}\",\"to\":\"y.{k}\","
		"\"offset\":{\"k\":\"config:num_hidden_layers\"}}]}";
	struct us_statedict *sd = us_sd_new();
	struct us_recipe *r = NULL;
	struct us_err err = {0};

	CHECK(us_recipe_parse(lit, strlen(lit), "t.json", &r, &err) == US_OK);
	make(sd, 2, 2, 2)->name = "layers.4.w";
	make(sd, 2, 2, 2)->name = "mtp.0.w";
	CHECK(us_recipe_apply(sd, r, NULL, &err) == US_OK);
	CHECK(sd->ntensors == 2 && !strcmp(sd->tensors[0].name, "l.4.w") &&
	      !strcmp(sd->tensors[1].name, "l.5.w"));
	us_sd_free(sd);
	sd = us_sd_new();
	make(sd, 2, 2, 2)->name = "x.1";
	CHECK(us_recipe_apply(sd, r, NULL, &err) == US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "t.json: rule 3: the offset of '{k}' is config.json's "
			      "\"num_hidden_layers\", and no config.json"));
	us_sd_free(sd);
	sd = us_sd_new();
	make(sd, 2, 2, 2)->name = "layers.0.w";
	make(sd, 2, 2, 2)->name = "mtp.99999999999999999999.w";
	CHECK(us_recipe_apply(sd, r, NULL, &err) == US_E_UNSUPPORTED &&
	      strstr(err.msg, "rule 2: '{k}' of 'mtp.99999999999999999999.w' plus its "
			      "offset 5 does not fit 64 bits"));
	us_sd_free(sd);
	us_recipe_free(r);
}

int main(void)
{
	RUN(test_patterns);
	RUN(test_builtins_parse);
	RUN(test_parse_errors);
	RUN(test_rope_permute);
	RUN(test_split_slice_order);
	RUN(test_concat);
	RUN(test_concat_parse);
	RUN(test_offset_parse);
	RUN(test_capture_add);
	RUN(test_offset_apply);
	TEST_MAIN_END();
}
