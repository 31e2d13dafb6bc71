/*
 * test_torch.c - the torch.save reader (source/torch), through
 * us_source_open on the committed fixtures: every dtype, strided and offset
 * storages, a tie by shared storage, wrapper names unwrapped, the optimizer
 * found beside the model; and refusals, with their status and the file they
 * name, for damaged copies.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "harness.h"
#include "source/source.h"
#include "tmpdir.h"

static struct us_statedict *open_ok(const char *path)
{
	struct us_statedict *sd = fixture_open(path);

	CHECK(sd != NULL);
	return sd;
}

/* @name: dtype @dt, shape [@d0, @d1] (ndim @ndim), one chunk. */
static const struct us_tensor *expect(const struct us_statedict *sd,
				      const char *name, enum us_dtype dt,
				      uint32_t ndim, uint64_t d0, uint64_t d1)
{
	const struct us_tensor *t = us_sd_find(sd, name);
	const uint64_t shape[2] = { d0, d1 };

	CHECK(t != NULL);
	if (!t) {
		fprintf(stderr, "  missing '%s'\n", name);
		return NULL;
	}
	CHECK(t->dtype == dt);
	CHECK(t->ndim == ndim);
	for (uint32_t k = 0; k < ndim && k < t->ndim; k++)
		CHECK(t->shape[k] == shape[k]);
	CHECK(t->nchunks == 1);
	if (t->dtype != dt || t->ndim != ndim)
		fprintf(stderr, "  '%s': %s, %u dims\n", name,
			us_dtype_name(t->dtype), t->ndim);
	return t;
}

static void test_single_bin(void)
{
	static const struct { const char *name; enum us_dtype dt; } dts[] = {
		{ "dt.bf16", US_DT_BF16 }, { "dt.bool", US_DT_BOOL },
		{ "dt.f16", US_DT_F16 }, { "dt.f32", US_DT_F32 },
		{ "dt.f64", US_DT_F64 }, { "dt.f8_e4m3", US_DT_F8_E4M3 },
		{ "dt.f8_e5m2", US_DT_F8_E5M2 }, { "dt.i8", US_DT_I8 },
		{ "dt.i16", US_DT_I16 }, { "dt.i32", US_DT_I32 },
		{ "dt.i64", US_DT_I64 }, { "dt.u8", US_DT_U8 },
		{ "dt.u16", US_DT_U16 }, { "dt.u32", US_DT_U32 },
		{ "dt.u64", US_DT_U64 },
	};
	struct us_statedict *sd =
		open_ok(fixture_path("torch/single_bin/pytorch_model.bin"));
	const struct us_tensor *t, *off;

	if (!sd)
		return;
	CHECK(strcmp(sd->format, "torch") == 0);
	CHECK(sd->ntensors == 24);
	CHECK(sd->nfiles == 1);
	for (size_t i = 0; i < sizeof(dts) / sizeof(dts[0]); i++)
		expect(sd, dts[i].name, dts[i].dt, 2, 3, 5);
	expect(sd, "scalar", US_DT_F64, 0, 0, 0);
	expect(sd, "empty", US_DT_F32, 2, 0, 4);
	/* w.t(): the storage's strides, not a copy. */
	t = expect(sd, "strided.transposed", US_DT_F32, 2, 7, 5);
	CHECK(t && t->chunks[0].src.strides && t->chunks[0].src.strides[0] == 1 &&
	      t->chunks[0].src.strides[1] == 7);
	/* A view 10 elements into its storage; strides (8, 2). */
	off = expect(sd, "slice.offset", US_DT_F32, 2, 3, 4);
	t = expect(sd, "slice.strided", US_DT_F32, 2, 4, 3);
	/* ...and 10 elements into its storage: past the dt.* data, aligned. */
	CHECK(off && off->chunks[0].src.offset % 4 == 0 &&
	      (!off->chunks[0].src.strides ||
	       (off->chunks[0].src.strides[0] == 4 &&
		off->chunks[0].src.strides[1] == 1)));
	CHECK(t && t->chunks[0].src.strides && t->chunks[0].src.strides[0] == 8 &&
	      t->chunks[0].src.strides[1] == 2);
	/* One storage under two names: a declared tie, the first canonical. */
	t = expect(sd, "tied.b", US_DT_F32, 2, 4, 6);
	CHECK(t && t->tie_of && strcmp(t->tie_of->name, "tied.a") == 0);
	CHECK(t && t->nlinks == 2);
	us_sd_free(sd);
}

/* DDP(torch.compile(m)) keys, unwrapped; the embed/head pair shares one
 * storage. */
static void test_wrapped_names(void)
{
	struct us_statedict *sd = open_ok(fixture_path("torch/ddp_named_params.pt"));
	const struct us_tensor *t;

	if (!sd)
		return;
	CHECK(sd->ntensors == 20);
	t = expect(sd, "blocks.0.lin1.weight", US_DT_F32, 2, 13, 16);
	CHECK(t && strcmp(t->source_name, "module._orig_mod.blocks.0."
			  "_checkpoint_wrapped_module.lin1.weight") == 0);
	expect(sd, "pos", US_DT_I64, 1, 7, 0);
	t = expect(sd, "head.weight", US_DT_F32, 2, 37, 16);
	CHECK(t && t->tie_of && strcmp(t->tie_of->name, "embed.weight") == 0);
#ifndef NDEBUG
	CHECK(us_sd_check(sd) == NULL);
#endif
	us_sd_free(sd);
}

/* A training script's dict: the model under "model", the optimizer's
 * tensors and JSON beside it, rng_state and scalars left out. */
static void test_script_checkpoint(void)
{
	struct us_statedict *sd = open_ok(fixture_path("torch/script_rng/checkpoint.pt"));

	if (!sd)
		return;
	CHECK(us_sd_find(sd, "rng_state") == NULL);
	CHECK(us_sd_find(sd, "global_step") == NULL);
	CHECK(sd->optim && sd->optim->ntensors > 0);
	CHECK(sd->optim_json && strstr(sd->optim_json, "param_groups"));
	us_sd_free(sd);
}

/* A copy of single_bin's pytorch_model.bin cut to @keep bytes, or with
 * every @from made @to; opening it gives @want and a message that starts
 * with @prefix. */
static void damaged(long keep, const char *from, const char *to,
		    enum us_status want, const char *prefix)
{
	const char *d = tmpdir_new();
	char dir[4096], path[4200];
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	unsigned char *buf;
	size_t len = 0;
	enum us_status rc;
	struct us_dir srcdir = US_DIR_NONE;

	snprintf(dir, sizeof(dir), "%s", d);
	buf = fixture_slurp(fixture_path("torch/single_bin/pytorch_model.bin"), &len);
	CHECK(buf != NULL);
	if (buf && keep >= 0 && (size_t)keep < len)
		len = (size_t)keep;
	if (buf && from)
		CHECK(fixture_replace(buf, len, from, to) > 0);
	CHECK(buf && tmpdir_write(dir, "pytorch_model.bin", buf, len) == 0);
	free(buf);
	snprintf(path, sizeof(path), "%s/pytorch_model.bin", dir);
	rc = us_source_open(path, NULL, &sd, &srcdir, &err);
	CHECK(rc == want);
	CHECK(sd == NULL);
	CHECK(strncmp(err.msg, prefix, strlen(prefix)) == 0);
	if (rc != want || strncmp(err.msg, prefix, strlen(prefix)))
		fprintf(stderr, "  want %d '%s...', got %d '%s'\n", want, prefix,
			rc, err.msg);
	us_sd_free(sd);
	tmpdir_rm(dir);
}

static void test_refusals(void)
{
	/* No end of central directory. */
	damaged(2000, NULL, NULL, US_E_FORMAT, "pytorch_model.bin: ");
	damaged(0, NULL, NULL, US_E_FORMAT, "pytorch_model.bin: ");
	/* Not a zip at all: torch's legacy format is named. */
	damaged(-1, "PK\x03\x04", "XX\x03\x04", US_E_UNSUPPORTED,
		"pytorch_model.bin: not a zip: the legacy");
}

int main(void)
{
	RUN(test_single_bin);
	RUN(test_wrapped_names);
	RUN(test_script_checkpoint);
	RUN(test_refusals);
	TEST_MAIN_END();
}
