/*
 * fuzz_torch.c - libFuzzer target: the input is one torch.save file
 * (.bin/.pt), mounted through the whole torch reader (us_source_open with
 * format "torch", from a memfd as /proc/self/fd/N): zip, data.pkl, tensor
 * matching, extents, names, finalize.  An accepted input has every view
 * rendered and read back.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_source_opts opts = { .format = "torch" };
	struct us_statedict *sd = NULL;
	struct us_err err;
	char path[64];
	struct us_dir srcdir = US_DIR_NONE;

	fuzz_memfd_path(data, size, path, sizeof(path));
	if (us_source_open(path, &opts, &sd, &srcdir, &err) == US_OK) {
		fuzz_read_views(sd);
		us_sd_free(sd);
	} else if (!err.msg[0]) {
		abort(); /* a refusal must say why */
	}
	return 0;
}
