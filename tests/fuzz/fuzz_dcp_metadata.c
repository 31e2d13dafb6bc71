/*
 * fuzz_dcp_metadata.c - libFuzzer target: the input is a DCP .metadata
 * pickle, written into a directory beside the two valid .distcp files of
 * tests/fixtures/torch/fsdp2_2rank, which is then mounted through the whole
 * DCP reader (us_source_open).  Chunk grids, storage_data, relative_path
 * (which must never leave the directory), transforms, dtypes and the item
 * archives they point into are all under the fuzzer's control.  An accepted
 * input has every view rendered and read back.
 */
#include "fuzz_util.h"

static char dir[256];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_source_opts opts = { .format = "dcp" };
	struct us_statedict *sd = NULL;
	struct us_err err;
	struct us_dir srcdir = US_DIR_NONE;

	if (!dir[0]) {
		fuzz_tmpdir(dir, sizeof(dir), "dcp");
		fuzz_copy_fixture("torch/fsdp2_2rank/__0_0.distcp", dir, "__0_0.distcp");
		fuzz_copy_fixture("torch/fsdp2_2rank/__1_0.distcp", dir, "__1_0.distcp");
	}
	fuzz_put(dir, ".metadata", data, size);
	if (us_source_open(dir, &opts, &sd, &srcdir, &err) == US_OK) {
		fuzz_check_inside(sd);
		fuzz_read_views(sd);
		us_sd_free(sd);
		us_dir_close(&srcdir);
	} else if (!err.msg[0]) {
		abort();
	}
	return 0;
}
