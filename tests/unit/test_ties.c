/*
 * test_ties.c - tie groups: declared by shared bytes; for a format that
 * saves copies, linked only on the writer's evidence (the optimizer's
 * names, config.json's tie_word_embeddings) confirmed by equal bytes --
 * never for equal bytes alone (unless --ties=equal), a near-tie (one byte
 * different), constants, two parameters the optimizer lists, or copies of
 * one module.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "source/source.h"
#include "tie_evidence.h"
#include "ties.h"
#include "tmpdir.h"

/* Every tensor is F32 [64,64]: a vocab-shaped kind when config.json says
 * vocab_size 64. */
#define N 4096

enum pattern { ZERO, P1, P1_FLIPPED, P2 };

struct spec {
	const char *name;
	enum pattern pat;
};

static void fill(float *v, enum pattern pat)
{
	for (int i = 0; i < N; i++)
		v[i] = pat == ZERO ? 0.0f : (float)i * (pat == P2 ? 0.25f : 0.5f);
	if (pat == P1_FLIPPED)
		((unsigned char *)v)[N * 2] ^= 1;
}

/* m.safetensors with @specs (and "alias" declared as a drop of the first)
 * in a fresh directory, plus config.json when @config is not NULL. */
static const char *write_fixture(const struct spec *specs, int n,
				 const char *config)
{
	static char json[4096];
	const char *d = tmpdir_new();
	size_t hlen, total, data = (size_t)n * N * 4;
	unsigned char *file;
	int len;

	len = snprintf(json, sizeof(json),
		       "{\"__metadata__\":{\"format\":\"pt\",\"alias\":\"%s\"}",
		       specs[0].name);
	for (int i = 0; i < n; i++)
		len += snprintf(json + len, sizeof(json) - (size_t)len,
				",\"%s\":{\"dtype\":\"F32\",\"shape\":[64,64],"
				"\"data_offsets\":[%d,%d]}",
				specs[i].name, i * N * 4, (i + 1) * N * 4);
	json[len++] = '}';
	while (len % 8)
		json[len++] = ' ';
	hlen = (size_t)len;
	total = 8 + hlen + data;
	file = malloc(total);
	for (int i = 0; i < 8; i++)
		file[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(file + 8, json, hlen);
	for (int i = 0; i < n; i++)
		fill((float *)(file + 8 + hlen + (size_t)i * N * 4), specs[i].pat);
	tmpdir_write(d, "m.safetensors", file, total);
	if (config)
		tmpdir_write(d, "config.json", config, strlen(config));
	free(file);
	return d;
}

static struct us_statedict *open_sd(const char *d)
{
	char path[4200];
	struct us_source_opts o = { .ties = US_TIES_OFF };
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	int dirfd = -1;

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(us_source_open(path, &o, &sd, &dirfd, &err) == US_OK);
	if (dirfd >= 0)
		close(dirfd);
	return sd;
}

static const struct us_tensor *get(const struct us_statedict *sd, const char *n)
{
	return us_sd_find(sd, n);
}

/* Detect again as a DCP reader would ask, with @optim_json as the
 * optimizer's JSON and @d's config.json. */
static void detect(struct us_statedict *sd, const char *d,
		   enum us_ties_mode mode, const char *optim_json)
{
	struct us_err err = {0};
	int dirfd = open(d, O_PATH | O_DIRECTORY);

	for (size_t i = 0; i < sd->ntensors; i++) {
		sd->tensors[i].tie_of = NULL;
		sd->tensors[i].nlinks = 1;
	}
	free(sd->optim_json);
	sd->optim_json = optim_json ? strdup(optim_json) : NULL;
	sd->ties_as_copies = true;
	CHECK(us_ties_detect(sd, mode, dirfd, false, &err) == US_OK);
	close(dirfd);
}

static bool tied(const struct us_statedict *sd, const char *a, const char *b)
{
	return get(sd, b)->tie_of == get(sd, a);
}

static bool untied(const struct us_statedict *sd, const char *n)
{
	return get(sd, n)->tie_of == NULL && get(sd, n)->nlinks == 1;
}

static const struct spec basic[] = {
	{ "a", P1 }, { "b", P1 }, { "c", P1_FLIPPED }, { "z1", ZERO }, { "z2", ZERO },
};

static void test_declared(void)
{
	const char *d = write_fixture(basic, 5, NULL);
	struct us_statedict *sd = open_sd(d);
	struct us_err err = {0};

	if (!sd)
		goto out;
	CHECK(sd->ntensors == 6); /* the alias became a tensor */
	CHECK(get(sd, "alias")->tie_of == NULL); /* ties off */
	/* declared only: the alias shares a's bytes; b is a separate copy */
	CHECK(us_ties_detect(sd, US_TIES_DECLARED, -1, false, &err) == US_OK);
	CHECK(tied(sd, "a", "alias"));
	CHECK(untied(sd, "b"));
	CHECK(get(sd, "a")->nlinks == 2);
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

/* Equal bytes alone: a tie only when asked for with --ties=equal. */
static void test_equal_bytes_are_no_evidence(void)
{
	const char *d = write_fixture(basic, 5, NULL);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	CHECK(tied(sd, "a", "alias")); /* declared still */
	CHECK(untied(sd, "b") && untied(sd, "c"));
	CHECK(get(sd, "a")->nlinks == 2);
	detect(sd, d, US_TIES_EQUAL, NULL);
	CHECK(tied(sd, "a", "b") && tied(sd, "a", "alias"));
	CHECK(get(sd, "a")->tie_of == NULL && get(sd, "a")->nlinks == 3);
	CHECK(untied(sd, "c"));                     /* one byte differs */
	CHECK(untied(sd, "z1") && untied(sd, "z2")); /* constants */
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void config_case(const char *config, bool want)
{
	const char *d = write_fixture(basic, 5, config);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	if (want != tied(sd, "a", "b"))
		fprintf(stderr, "config %s: a-b %s\n", config, want ? "untied" : "tied");
	CHECK(want == tied(sd, "a", "b"));
	CHECK(untied(sd, "c") && untied(sd, "z1") && untied(sd, "z2"));
	/* the optimizer lists both: two parameters, whatever config.json says */
	detect(sd, d, US_TIES_AUTO, "{\"param_groups\":[{\"params\":[\"a\",\"b\"]}]}");
	CHECK(untied(sd, "b"));
	/* ties=declared reads neither the evidence nor the bytes */
	detect(sd, d, US_TIES_DECLARED, NULL);
	CHECK(untied(sd, "b"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void test_config_tie_word_embeddings(void)
{
	config_case("{\"tie_word_embeddings\": true, \"vocab_size\": 64}", true);
	config_case("{\"tie_word_embeddings\": false, \"vocab_size\": 64, "
		    "\"model_type\": \"gpt2\"}", false);
	/* absent: the model type's default, where transformers 4 and 5 agree */
	config_case("{\"model_type\": \"gpt2\", \"vocab_size\": 64}", true);
	config_case("{\"model_type\": \"llama\", \"vocab_size\": 64}", false);
	config_case("{\"model_type\": \"no-such-model\", \"vocab_size\": 64}", false);
	/* not the vocab kind; no vocab; not a config */
	config_case("{\"tie_word_embeddings\": true, \"vocab_size\": 65}", false);
	config_case("{\"tie_word_embeddings\": true}", false);
	config_case("{\"tie_word_embeddings\": null, \"vocab_size\": 64}", false);
	config_case("[1, 2]", false);
	config_case("{\"tie_word_embeddings\": true, \"vocab_size\": 64", false);
}

/* Two classes of equal bytes in the vocab kind: which is the embedding
 * pair is ambiguous, so config.json links neither. */
static void test_config_ambiguous(void)
{
	static const struct spec two[] = {
		{ "a", P1 }, { "b", P1 }, { "p", P2 }, { "q", P2 },
	};
	const char *d = write_fixture(two, 4, "{\"tie_word_embeddings\": true, "
				      "\"vocab_size\": 64}");
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	CHECK(untied(sd, "b") && untied(sd, "q"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static const struct spec mods[] = {
	{ "embed.weight", P1 }, { "head.weight", P1 }, { "c", P1_FLIPPED },
	{ "z1", ZERO }, { "z2", ZERO },
};

static void optim_case(const char *optim_json, const char *a, const char *b,
		       bool want)
{
	const char *d = write_fixture(mods, 5, NULL);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, optim_json);
	if (want != tied(sd, a, b))
		fprintf(stderr, "optim %s: %s-%s %s\n", optim_json, a, b,
			want ? "untied" : "tied");
	CHECK(want == tied(sd, a, b));
	CHECK(untied(sd, "c") && untied(sd, "z1") && untied(sd, "z2"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void test_optimizer_names(void)
{
	/* a shared parameter is listed once, under its first name */
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\",\"c\"]}]}",
		   "embed.weight", "head.weight", true);
	/* the kept name is the first in the source, whichever is listed */
	optim_case("{\"param_groups\":[{\"params\":[\"head.weight\"]}]}",
		   "embed.weight", "head.weight", true);
	/* per-parameter scalars name it too */
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\"]}],"
		   "\"scalars\":{\"state.embed.weight.step\": 1}}",
		   "embed.weight", "head.weight", true);
	/* both listed: two parameters that happen to be equal */
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\"]},"
		   "{\"params\":[\"head.weight\"]}]}",
		   "embed.weight", "head.weight", false);
	/* neither listed (buffers, frozen weights): no evidence */
	optim_case("{\"param_groups\":[{\"params\":[\"c\"]}]}",
		   "embed.weight", "head.weight", false);
	/* keyed by position, or by a name the model lacks: no evidence */
	optim_case("{\"param_groups\":[{\"params\":[0, 2]}]}",
		   "embed.weight", "head.weight", false);
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\",\"nope\"]}]}",
		   "embed.weight", "head.weight", false);
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\"]}],"
		   "\"scalars\":{\"state.nope.step\": 1}}",
		   "embed.weight", "head.weight", false);
	optim_case("{\"param_groups\":[]}", "embed.weight", "head.weight", false);
}

/* An unlisted name that ends like the listed one ("ema.blk.norm.weight" and
 * "blk.norm.weight") is a copy of the module (an EMA, a frozen reference)
 * whose original has not moved, not a second path to one parameter. */
static void test_module_copy_is_no_tie(void)
{
	static const struct spec copy[] = {
		{ "blk.norm.weight", P1 }, { "ema.blk.norm.weight", P1 },
		{ "lm_head.weight", P2 }, { "model.embed_tokens.weight", P2 },
	};
	const char *d = write_fixture(copy, 4, NULL);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO,
	       "{\"param_groups\":[{\"params\":[\"blk.norm.weight\","
	       "\"model.embed_tokens.weight\"]}]}");
	CHECK(untied(sd, "ema.blk.norm.weight"));
	CHECK(tied(sd, "lm_head.weight", "model.embed_tokens.weight"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void test_model_type_table(void)
{
	CHECK(us_tie_model_type_ties("gpt2") && us_tie_model_type_ties("bert"));
	CHECK(us_tie_model_type_ties("albert") && us_tie_model_type_ties("yoso"));
	CHECK(us_tie_model_type_ties("gpt-sw3") && us_tie_model_type_ties("t5"));
	CHECK(!us_tie_model_type_ties("llama") && !us_tie_model_type_ties("qwen2"));
	CHECK(!us_tie_model_type_ties("mistral") && !us_tie_model_type_ties(""));
}

static void test_mode_parse(void)
{
	enum us_ties_mode m;

	CHECK(us_ties_mode_parse("auto", &m) && m == US_TIES_AUTO);
	CHECK(us_ties_mode_parse("declared", &m) && m == US_TIES_DECLARED);
	CHECK(us_ties_mode_parse("off", &m) && m == US_TIES_OFF);
	CHECK(us_ties_mode_parse("equal", &m) && m == US_TIES_EQUAL);
	CHECK(!us_ties_mode_parse("sometimes", &m));
	CHECK(!us_ties_mode_parse("proven", &m));
}

int main(void)
{
	RUN(test_declared);
	RUN(test_equal_bytes_are_no_evidence);
	RUN(test_config_tie_word_embeddings);
	RUN(test_config_ambiguous);
	RUN(test_optimizer_names);
	RUN(test_module_copy_is_no_tie);
	RUN(test_model_type_table);
	RUN(test_mode_parse);
	TEST_MAIN_END();
}
