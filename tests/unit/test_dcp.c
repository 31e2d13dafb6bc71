/*
 * test_dcp.c - the DCP reader (source/dcp), through us_source_open on the
 * committed torch-made fixtures: the tensors it describes (names after
 * unwrapping, dtypes, shapes, chunk counts, strides, zstd items), and the
 * refusal, with its status and the file it names, for damaged copies.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "harness.h"
#include "source/source.h"
#include "tmpdir.h"

struct want {
	const char *name;
	enum us_dtype dtype;
	uint32_t ndim;
	uint64_t shape[2];
	uint32_t nchunks;
};

static struct us_statedict *open_ok(const char *path)
{
	struct us_statedict *sd = fixture_open(path);

	CHECK(sd != NULL);
	return sd;
}

static const struct us_tensor *expect_tensor(const struct us_statedict *sd,
					     const struct want *w)
{
	const struct us_tensor *t = us_sd_find(sd, w->name);

	CHECK(t != NULL);
	if (!t) {
		fprintf(stderr, "  missing '%s'\n", w->name);
		return NULL;
	}
	CHECK(t->dtype == w->dtype);
	CHECK(t->ndim == w->ndim);
	for (uint32_t k = 0; k < w->ndim && k < t->ndim; k++)
		CHECK(t->shape[k] == w->shape[k]);
	CHECK(t->nchunks == w->nchunks);
	if (t->nchunks != w->nchunks)
		fprintf(stderr, "  '%s': %u chunks\n", w->name, t->nchunks);
	return t;
}

/* FSDP2 on 2 ranks: every parameter split in two by rows, the 1-element
 * scale and the buffer held by one rank (the other's zero-volume chunk is
 * dropped), names unwrapped from the "model" container. */
static void test_fsdp2_2rank(void)
{
	static const struct want ws[] = {
		{ "embed.weight", US_DT_F32, 2, { 37, 16 }, 2 },
		{ "head.weight", US_DT_F32, 2, { 37, 16 }, 2 },
		{ "blocks.0.lin1.weight", US_DT_F32, 2, { 13, 16 }, 2 },
		{ "blocks.1.lin2.bias", US_DT_F32, 1, { 16 }, 2 },
		{ "gate.weight", US_DT_F32, 2, { 4, 16 }, 2 },
		{ "scale", US_DT_F32, 1, { 1 }, 1 },
		{ "pos", US_DT_I64, 1, { 7 }, 1 },
	};
	struct us_statedict *sd = open_ok(fixture_path("torch/fsdp2_2rank"));
	const struct us_tensor *t;

	if (!sd)
		return;
	CHECK(strcmp(sd->format, "dcp") == 0);
	CHECK(sd->ntensors == 20);
	CHECK(sd->ties_as_copies);
	for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		expect_tensor(sd, &ws[i]);
	t = us_sd_find(sd, "embed.weight");
	if (t) {
		CHECK(strcmp(t->source_name, "model.embed.weight") == 0);
		CHECK(strcmp(t->decl_path, ".metadata") == 0);
		/* Row-split: the two boxes meet at a row inside the tensor. */
		CHECK(t->chunks[0].offsets[0] + t->chunks[0].sizes[0] ==
		      t->chunks[1].offsets[0] || t->chunks[1].offsets[0] +
		      t->chunks[1].sizes[0] == t->chunks[0].offsets[0]);
		CHECK(t->tie_of == NULL); /* no config.json: no evidence */
	}
	/* The "optim" container feeds the optimizer child. */
	CHECK(sd->optim && us_sd_find(sd->optim, "state.embed.weight.exp_avg"));
	CHECK(sd->optim_json != NULL);
	CHECK(us_sd_find(sd, "model.embed.weight") == NULL);
#ifndef NDEBUG
	CHECK(us_sd_check(sd) == NULL);
#endif
	us_sd_free(sd);
}

/* DTensor on a 2x2 mesh: four chunks where both dims are sharded, the
 * transposed local shard kept with its strides, a bf16 tensor. */
static void test_dtensor_2d(void)
{
	static const struct want ws[] = {
		{ "layers.0.attn.wq.weight", US_DT_F32, 2, { 6, 10 }, 4 },
		{ "layers.0.attn.wk.weight", US_DT_F32, 2, { 8, 6 }, 2 },
		{ "layers.0.mlp.w3.weight", US_DT_BF16, 2, { 8, 5 }, 4 },
		{ "layers.0.norm.weight", US_DT_F32, 1, { 5 }, 1 },
	};
	struct us_statedict *sd = open_ok(fixture_path("torch/dtensor_2d"));
	const struct us_tensor *t;
	bool transposed = false;

	if (!sd)
		return;
	CHECK(sd->ntensors == 7);
	CHECK(sd->nfiles == 5); /* .metadata and four .distcp */
	for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		expect_tensor(sd, &ws[i]);
	t = us_sd_find(sd, "layers.0.attn.wk.weight");
	for (uint32_t i = 0; t && i < t->nchunks; i++) {
		const int64_t *s = t->chunks[i].src.strides;

		transposed |= s && s[0] == 1 && s[1] == (int64_t)t->chunks[i].sizes[0];
	}
	CHECK(transposed);
	us_sd_free(sd);
}

/* stream.zstd/1 items: the extent is in the decoded item. */
static void test_zstd(void)
{
	struct us_statedict *sd = open_ok(fixture_path("torch/zstd"));
	static const struct want big = { "big.weight", US_DT_F32, 2, { 160, 256 }, 1 };
	const struct us_tensor *t;

	if (!sd)
		return;
	t = expect_tensor(sd, &big);
	if (t) {
		const struct us_extent *x = &t->chunks[0].src;

		CHECK(x->xf == US_XF_ZSTD);
		CHECK(x->offset + t->nbytes <= x->decoded_len);
		CHECK(x->item_off + x->item_len <=
		      (uint64_t)sd->files[x->file].size);
		CHECK(x->item_len < t->nbytes); /* it is compressed */
	}
	us_sd_free(sd);
}

/* Open @dir; expect @want and a message starting with @prefix. */
static void expect_refusal(const char *dir, enum us_status want,
			   const char *prefix)
{
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	struct us_dir srcdir = US_DIR_NONE;
	enum us_status rc = us_source_open(dir, NULL, &sd, &srcdir, &err);

	CHECK(rc == want);
	CHECK(sd == NULL && srcdir.fd == -1 && !srcdir.remote);
	CHECK(strncmp(err.msg, prefix, strlen(prefix)) == 0);
	if (rc != want || strncmp(err.msg, prefix, strlen(prefix)))
		fprintf(stderr, "  want %d '%s...', got %d '%s'\n", want, prefix,
			rc, err.msg);
	us_sd_free(sd);
}

/* A copy of fsdp2_2rank whose file @name is cut to @keep bytes (or whose
 * every @from becomes @to), refused with @want naming @prefix. */
static void damaged(const char *name, long keep, const char *from,
		    const char *to, enum us_status want, const char *prefix)
{
	const char *d = tmpdir_new();
	char dir[4096], path[4200];
	unsigned char *buf;
	size_t len = 0;

	snprintf(dir, sizeof(dir), "%s", d);
	CHECK(fixture_copy_dir("torch/fsdp2_2rank", dir) == 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	buf = fixture_slurp(path, &len);
	CHECK(buf != NULL);
	if (buf && keep >= 0)
		len = (size_t)keep < len ? (size_t)keep : len;
	if (buf && from)
		CHECK(fixture_replace(buf, len, from, to) > 0);
	if (buf)
		CHECK(tmpdir_write(dir, name, buf, len) == 0);
	free(buf);
	expect_refusal(dir, want, prefix);
	tmpdir_rm(dir);
}

static void test_refusals(void)
{
	/* The pickle ends early. */
	damaged(".metadata", 16000, NULL, NULL, US_E_FORMAT,
		".metadata: not a DCP metadata pickle");
	damaged(".metadata", 0, NULL, NULL, US_E_FORMAT, ".metadata: ");
	/* storage_data paths that leave SOURCE (same length, so the pickle
	 * stays well-formed). */
	damaged(".metadata", -1, "__0_0.distcp", "../_0.distcp", US_E_FORMAT,
		".metadata: storage_data names '../_0.distcp', which is outside");
	damaged(".metadata", -1, "__1_0.distcp", "/_1_0.distcp", US_E_FORMAT,
		".metadata: storage_data names '/_1_0.distcp', which is outside");
	/* ...one that is not there: an I/O refusal naming it. */
	damaged(".metadata", -1, "__1_0.distcp", "__7_0.distcp", US_E_IO,
		"__7_0.distcp: cannot open");
	/* A truncated shard: its items run past its end. */
	damaged("__1_0.distcp", 1000, NULL, NULL, US_E_FORMAT,
		"__1_0.distcp: item of ");
	/* The Metadata class renamed: a pickle, but not DCP's. */
	damaged(".metadata", -1, "\x8c\x08Metadata", "\x8c\x08Metadatx", US_E_FORMAT,
		".metadata: does not hold a DCP Metadata object");
}

int main(void)
{
	RUN(test_fsdp2_2rank);
	RUN(test_dtensor_2d);
	RUN(test_zstd);
	RUN(test_refusals);
	TEST_MAIN_END();
}
