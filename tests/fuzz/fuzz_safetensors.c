/*
 * fuzz_safetensors.c - libFuzzer target: the input is one safetensors file.
 * It goes through the real reader (from a memfd, so through the same pread
 * path) and, when accepted, the whole model.safetensors view is rendered
 * and read back.
 */
#include "fuzz_util.h"

static void read_view(const struct us_statedict *sd)
{
	struct us_view *v = NULL;

	if (us_view_safetensors_new(sd, &v, NULL) != US_OK)
		return;
	fuzz_read_view(v); /* reads it all back, and frees it */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_source_opts opts = { .format = "safetensors" };
	struct us_statedict *sd = NULL;
	struct us_err err = { 0 };
	char path[64];
	struct us_dir srcdir = US_DIR_NONE;

	fuzz_memfd_path(data, size, path, sizeof(path));
	if (us_source_open(path, &opts, &sd, &srcdir, &err) == US_OK) {
		read_view(sd);
		us_sd_free(sd);
	} else if (!err.msg[0]) {
		abort(); /* a refusal must say why */
	}
	return 0;
}
