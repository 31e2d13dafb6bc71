/*
 * fuzz_pickle.c - libFuzzer target: the input is a pickle.  It runs through
 * the restricted VM (us_pickle_load); a value that loads is then converted
 * to JSON (us_pk_to_json_budget, what optimizer.json is made of) and printed, and
 * matched as a tensor rebuild (us_torch_match) at the root and one level
 * down, which is what the torch and DCP readers do with it.  Nothing may
 * crash, hang, leak or grow past memory proportional to the input.
 */
#include <stdint.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "fuzz_util.h"

#include "arena.h"
#include "codec/pickle.h"
#include "codec/pk2json.h"
#include "codec/torchpkl.h"

static void match(const struct us_pk *p)
{
	struct us_torch_tensor t;
	struct us_err err = { .msg = "" };
	enum us_status st;
	bool found;

	st = us_torch_match(p, &t, &found, &err);
	if (st != US_OK && !fuzz_refusal_ok(st, &err))
		abort(); /* a refusal must say why, and be the input's */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_arena a;
	struct us_pk *root = NULL;
	struct us_err err = { .msg = "" };
	enum us_status st;
	size_t used = 0;

	us_arena_init(&a);
	st = us_pickle_load(data, size, &a, &root, &used, &err);
	if (st == US_OK) {
		/* The readers' budget is US_PK_JSON_BUDGET (2^20 values, ~0.4 s
		 * under ASan); a memo DAG reaches any budget in ~100 bytes, so
		 * a smaller one tests the same paths without making such
		 * inputs -- and every mutation of them -- 64 times slower. */
		size_t budget = (size_t)1 << 14;
		cJSON *j;
		char *text;

		if (!root || used == 0 || used > size)
			abort();
		j = us_pk_to_json_budget(root, &budget);
		text = j ? cJSON_PrintUnformatted(j) : NULL;
		free(text);
		cJSON_Delete(j);
		match(root);
		if (us_pk_is_dictlike(root))
			for (size_t i = 0; i < root->coll->vals.n; i++)
				match(root->coll->vals.v[i]);
		for (size_t i = 0; i < us_pk_len(root); i++)
			match(us_pk_at(root, i));
	} else if (!fuzz_refusal_ok(st, &err)) {
		abort();
	}
	us_arena_free(&a);
	return 0;
}
