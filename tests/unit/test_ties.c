/*
 * test_ties.c - tie groups: declared by shared bytes; for a format that
 * saves copies, linked only on the writer's evidence (config.json's
 * tie_word_embeddings naming an embedding pair) confirmed by equal bytes --
 * never for equal bytes alone (unless --ties=equal), a near-tie (one byte
 * different), constants, two parameters the optimizer lists, the names an
 * optimizer leaves out, or copies of a model.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_fd.h"
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
	struct us_dir srcdir = US_DIR_NONE;

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(us_source_open(path, &o, &sd, &srcdir, &err) == US_OK);
	us_dir_close(&srcdir);
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
	CHECK(us_ties_detect(sd, mode, US_TEST_DIR(dirfd), false, &err) == US_OK);
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
	CHECK(us_ties_detect(sd, US_TIES_DECLARED, &US_DIR_NONE, false, &err) == US_OK);
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

static const struct spec emb[] = {
	{ "model.embed_tokens.weight", P1 }, { "lm_head.weight", P1 },
	{ "c", P1_FLIPPED }, { "z1", ZERO }, { "z2", ZERO },
};
#define EMB "model.embed_tokens.weight"

static void config_case(const char *config, bool want)
{
	const char *d = write_fixture(emb, 5, config);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	if (want != tied(sd, EMB, "lm_head.weight"))
		fprintf(stderr, "config %s: %s\n", config, want ? "untied" : "tied");
	CHECK(want == tied(sd, EMB, "lm_head.weight"));
	CHECK(untied(sd, "c") && untied(sd, "z1") && untied(sd, "z2"));
	/* the optimizer lists both: two parameters, whatever config.json says */
	detect(sd, d, US_TIES_AUTO,
	       "{\"param_groups\":[{\"params\":[\"" EMB "\",\"lm_head.weight\"]}]}");
	CHECK(untied(sd, "lm_head.weight"));
	/* ties=declared reads neither the evidence nor the bytes */
	detect(sd, d, US_TIES_DECLARED, NULL);
	CHECK(untied(sd, "lm_head.weight"));
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

/* config.json ties an output and an input embedding of one model, nothing
 * else: two equal names that are not that pair, three or more equal copies
 * (a teacher beside its student), or a pair across two models stay apart. */
static void group_case(const struct spec *specs, int n, const char *a,
		       const char *b, bool want)
{
	const char *d = write_fixture(specs, n, "{\"tie_word_embeddings\": true, "
				      "\"vocab_size\": 64}");
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	if (want != tied(sd, a, b))
		fprintf(stderr, "%s-%s: %s\n", a, b, want ? "untied" : "tied");
	CHECK(want == tied(sd, a, b));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void test_config_names_the_pair(void)
{
	static const struct spec plain[] = {
		{ "a", P1 }, { "b", P1 }, { "z1", ZERO },
	};
	static const struct spec bert[] = {
		{ "bert.embeddings.word_embeddings.weight", P1 },
		{ "cls.predictions.decoder.weight", P1 }, { "z1", ZERO },
	};
	static const struct spec kd[] = { /* a teacher deep-copied from its student */
		{ "student.model.embed_tokens.weight", P1 },
		{ "student.lm_head.weight", P1 },
		{ "teacher.model.embed_tokens.weight", P1 },
		{ "teacher.lm_head.weight", P1 },
	};
	static const struct spec across[] = { /* one model's head, another's embedding */
		{ "student.model.embed_tokens.weight", P1 },
		{ "teacher.lm_head.weight", P1 }, { "z1", ZERO },
	};
	static const struct spec peft[] = { /* PEFT modules_to_save: a trainable copy */
		{ "lm_head.modules_to_save.default.weight", P1 },
		{ "lm_head.original_module.weight", P1 }, { "z1", ZERO },
	};

	group_case(plain, 3, "a", "b", false);
	group_case(bert, 3, "bert.embeddings.word_embeddings.weight",
		   "cls.predictions.decoder.weight", true);
	group_case(kd, 4, "student.model.embed_tokens.weight",
		   "student.lm_head.weight", false);
	group_case(kd, 4, "student.lm_head.weight", "teacher.lm_head.weight", false);
	group_case(across, 3, "student.model.embed_tokens.weight",
		   "teacher.lm_head.weight", false);
	group_case(peft, 3, "lm_head.modules_to_save.default.weight",
		   "lm_head.original_module.weight", false);
	CHECK(us_tie_embedding_pair("lm_head.weight", "model.embed_tokens.weight"));
	CHECK(us_tie_embedding_pair("lm_head.weight", "transformer.wte.weight"));
	CHECK(us_tie_embedding_pair("language_model.lm_head.weight",
				    "language_model.model.embed_tokens.weight"));
	CHECK(!us_tie_embedding_pair("model.embed_tokens.weight", "lm_head.weight"));
	CHECK(!us_tie_embedding_pair("xlm_head.weight", "model.embed_tokens.weight"));
	CHECK(!us_tie_embedding_pair("a.lm_head.weight", "b.embed_tokens.weight"));
}

/* Two classes of equal bytes in the vocab kind: which is the embedding
 * pair is ambiguous, so config.json links neither. */
static void test_config_ambiguous(void)
{
	static const struct spec two[] = {
		{ EMB, P1 }, { "lm_head.weight", P1 }, { "p", P2 }, { "q", P2 },
	};
	const char *d = write_fixture(two, 4, "{\"tie_word_embeddings\": true, "
				      "\"vocab_size\": 64}");
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, NULL);
	CHECK(untied(sd, "lm_head.weight") && untied(sd, "q"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static const struct spec mods[] = {
	{ "embed.weight", P1 }, { "head.weight", P1 }, { "c", P1_FLIPPED },
	{ "z1", ZERO }, { "z2", ZERO },
};

static void optim_case(const char *optim_json)
{
	const char *d = write_fixture(mods, 5, NULL);
	struct us_statedict *sd = open_sd(d);

	if (!sd)
		goto out;
	detect(sd, d, US_TIES_AUTO, optim_json);
	if (!untied(sd, "head.weight"))
		fprintf(stderr, "optim %s: tied\n", optim_json);
	CHECK(untied(sd, "head.weight") && !tied(sd, "embed.weight", "head.weight"));
	CHECK(untied(sd, "c") && untied(sd, "z1") && untied(sd, "z2"));
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

/* The optimizer never proposes a pair: a name it leaves out may be a
 * second name of a shared parameter, or a frozen copy (an EMA, a teacher,
 * PEFT's original_module, a buffer) equal while the original has not moved.
 * Both stay served. */
static void test_optimizer_alone_is_no_evidence(void)
{
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\",\"c\"]}]}");
	optim_case("{\"param_groups\":[{\"params\":[\"head.weight\"]}]}");
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\"]}],"
		   "\"scalars\":{\"state.embed.weight.step\": 1}}");
	optim_case("{\"param_groups\":[{\"params\":[\"embed.weight\"]},"
		   "{\"params\":[\"head.weight\"]}]}");
	optim_case("{\"param_groups\":[{\"params\":[0, 2]}]}");
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
	RUN(test_config_names_the_pair);
	RUN(test_optimizer_alone_is_no_evidence);
	RUN(test_model_type_table);
	RUN(test_mode_parse);
	TEST_MAIN_END();
}
