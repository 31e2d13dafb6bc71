/*
 * fuzz_ds_universal.c - libFuzzer target: the DeepSpeed universal
 * checkpoint reader (lib/source/deepspeed/ds_universal.c, ds_common.c) over copies of
 * the fixtures uc_z3_2rank (from ZeRO-3: flat tensors, frozen parameters
 * from fp32.pt) and uc_z2_3rank_bf16 (from ZeRO-2: {"param": ...} dicts).
 * Byte 0 picks the file the rest of the input replaces (slots[], the order
 * make_seeds.py writes seeds in) and, with bit 7,
 * --deepspeed-weights=module.  "latest_universal" names the folder, so it
 * must never lead outside SOURCE.  An accepted checkpoint has every view
 * read back, the optimizer's included.
 */
#include "fuzz_util.h"

#define Z3 "deepspeed/uc_z3_2rank"
#define Z2 "deepspeed/uc_z2_3rank_bf16"
#define U "global_step2_universal/"

static const struct fuzz_slot slots[] = {
	{ Z3, "latest_universal" },
	{ Z3, U "zero_pp_rank_0_mp_rank_00_model_states.pt" },
	{ Z3, U "zero/optimizer_state.pt" },
	{ Z3, U "zero/body.weight/fp32.pt" },
	{ Z3, U "zero/body.weight/exp_avg.pt" },
	{ Z3, U "zero/frozen.bias/fp32.pt" },
	{ Z2, U "mp_rank_00_model_states.pt" },
	{ Z2, U "zero/optimizer_state.pt" },
	{ Z2, U "zero/cube/fp32.pt" },
	{ Z2, U "zero/cube/exp_avg_sq.pt" },
};

static struct fuzz_slots uc = {
	.v = slots, .n = sizeof(slots) / sizeof(slots[0])
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_source_opts opts = { .format = "deepspeed-universal" };

	if (size && (data[0] & 0x80))
		opts.ds_weights = US_DS_WEIGHTS_MODULE;
	fuzz_slots_run(&uc, &opts, data, size);
	return 0;
}
