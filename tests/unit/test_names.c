/* test_names.c - unwrapping rules of design.md, and collisions. */
#include <string.h>

#include "harness.h"
#include "names.h"
#include "source/source.h"
#include "tmpdir.h"

static int same(const char *src, const struct us_names_opts *o, const char *want)
{
	char out[256];

	us_unwrap_name(src, o, out);
	if (strcmp(out, want) != 0)
		fprintf(stderr, "  '%s' -> '%s', want '%s'\n", src, out, want);
	return strcmp(out, want) == 0;
}

static void test_wrappers(void)
{
	CHECK(same("module.encoder.weight", NULL, "encoder.weight"));
	CHECK(same("module.module.encoder.weight", NULL, "encoder.weight"));
	CHECK(same("encoder.module.weight", NULL, "encoder.module.weight"));
	CHECK(same("_orig_mod.layers.0._fsdp_wrapped_module.w", NULL, "layers.0.w"));
	CHECK(same("layers.0._checkpoint_wrapped_module.mlp.w", NULL, "layers.0.mlp.w"));
	CHECK(same("_forward_module._fpw_module.x", NULL, "x"));
	CHECK(same("modules.x", NULL, "modules.x"));
	CHECK(same("x._orig_modx.y", NULL, "x._orig_modx.y"));
	CHECK(same("module", NULL, "module"));
	CHECK(same("a..b", NULL, "a..b"));
	CHECK(same(".w", NULL, ".w"));
	CHECK(same("..w", NULL, "..w"));
	CHECK(same("module..w", NULL, ".w"));
	CHECK(same("_orig_mod..w", NULL, ".w"));
}

static void test_options(void)
{
	const char *p1[] = {"model."};
	const char *p2[] = {"backbone"};
	struct us_names_opts keep = { .no_unwrap = true };
	struct us_names_opts s1 = { .strip_prefix = p1, .nstrip = 1 };
	struct us_names_opts s2 = { .strip_prefix = p2, .nstrip = 1 };

	CHECK(same("module._orig_mod.x", &keep, "module._orig_mod.x"));
	CHECK(same("module.model.x", &s1, "x"));
	CHECK(same("backbone.x", &s2, "x"));
	CHECK(same("backbones.x", &s2, "backbones.x"));
	CHECK(same("model.", &s1, "model."));
}

static void test_collision(void)
{
	const char *d = tmpdir_new();
	char path[4200];
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	struct us_dir srcdir = US_DIR_NONE;

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(tmpdir_write_st(d, "m.safetensors",
		"{\"module.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		"\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2) == 0);
	CHECK(us_source_open(path, NULL, &sd, &srcdir, &err) == US_E_FORMAT);
	CHECK(strstr(err.msg, "'module.w'") && strstr(err.msg, "'w'"));
	CHECK(strncmp(err.msg, "m.safetensors: ", 15) == 0);
	{
		struct us_source_opts o = { .names = { .no_unwrap = true } };

		CHECK(us_source_open(path, &o, &sd, &srcdir, &err) == US_OK);
		us_sd_free(sd);
	}
	tmpdir_rm(d);
}

/* One list of container keys for both readers (torch.c, dcp.c). */
static void test_containers(void)
{
	CHECK(us_is_model_container("model") && us_is_model_container("net"));
	CHECK(us_is_model_container("state_dict") && us_is_model_container("module"));
	CHECK(us_is_model_container("model_state_dict"));
	CHECK(!us_is_model_container("models") && !us_is_model_container(""));
	CHECK(!us_is_model_container("optimizer") && us_is_optimizer_container("optimizer_0"));
}

int main(void)
{
	RUN(test_wrappers);
	RUN(test_options);
	RUN(test_collision);
	RUN(test_containers);
	TEST_MAIN_END();
}
