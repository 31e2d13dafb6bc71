/* assembler.c - the context object of assemble.h: its making and freeing. */
#include "assembler.h"

#include <stdlib.h>

#include "cuda.h"

enum us_status us_assembler_new(const struct us_assembler_opts *opts,
				struct us_assembler **out, struct us_err *err)
{
	static const struct us_assembler_opts defaults = {
		.cache_size = US_ASSEMBLER_CACHE_DEFAULT,
		.executor = US_EXEC_CPU,
	};
	struct us_assembler *as = calloc(1, sizeof(*as));

	if (!opts)
		opts = &defaults;
	if (as) {
		as->cache = us_cache_new(opts->cache_size);
		as->zitems = us_zitem_pool_new();
		as->gathers = us_gather_pool_new();
	}
	if (!as || !as->cache || !as->zitems || !as->gathers) {
		us_assembler_free(as);
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	as->executor = opts->executor;
	as->device = opts->device;
	*out = as;
	return US_OK;
}

void us_assembler_free(struct us_assembler *as)
{
	if (!as)
		return;
	us_gather_pool_free(as->gathers);
	us_zitem_pool_free(as->zitems);
	us_cache_free(as->cache);
	free(as);
}

int us_assemble_device_count(const char **why)
{
	return us_cuda_device_count(why);
}

int us_assemble_probe(char *why, size_t whylen)
{
	return us_cuda_probe(why, whylen);
}
