/*
 * fuzz_deepspeed.c - libFuzzer target: the DeepSpeed ZeRO reader
 * (lib/source/deepspeed/ds_zero.c, ds_flat.c, ds_common.c) over copies of
 * the fixtures z2_2rank (ZeRO-2) and z3_2rank (ZeRO-3).  Byte 0 picks the
 * file the rest of the input replaces (slots[], the order make_seeds.py
 * writes seeds in) and, with bit 7, --deepspeed-weights=module.  "latest"
 * names the tag directory, so it must never lead outside SOURCE.  An
 * accepted checkpoint has every view read back, the optimizer's included.
 */
#include "fuzz_util.h"

#define Z2 "deepspeed/z2_2rank"
#define Z3 "deepspeed/z3_2rank"
#define T "global_step2/"

static const struct fuzz_slot slots[] = {
	{ Z2, "latest" },
	{ Z2, T "mp_rank_00_model_states.pt" },
	{ Z2, T "zero_pp_rank_0_mp_rank_00_optim_states.pt" },
	{ Z2, T "zero_pp_rank_1_mp_rank_00_optim_states.pt" },
	{ Z3, T "zero_pp_rank_0_mp_rank_00_model_states.pt" },
	{ Z3, T "zero_pp_rank_1_mp_rank_00_model_states.pt" },
	{ Z3, T "zero_pp_rank_0_mp_rank_00_optim_states.pt" },
};

static struct fuzz_slots ds = {
	.v = slots, .n = sizeof(slots) / sizeof(slots[0])
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_source_opts opts = { .format = "deepspeed" };

	if (size && (data[0] & 0x80))
		opts.ds_weights = US_DS_WEIGHTS_MODULE;
	fuzz_slots_run(&ds, &opts, data, size);
	return 0;
}
