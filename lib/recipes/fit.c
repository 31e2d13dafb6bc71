/* fit.c - which recipe a checkpoint's names fit (recipe.h): --recipe=auto,
 * and the hint a mount without --recipe prints. */
#include "recipe.h"

#include <stdlib.h>
#include <string.h>

#include "pattern.h"

bool us_recipe_fits(const struct us_recipe *r, const struct us_statedict *sd)
{
	struct us_capture caps[US_RECIPE_MAX_CAPS];
	bool *hit = calloc(r->nrules ? r->nrules : 1, sizeof(*hit));
	bool fits = hit != NULL && sd->ntensors > 0;

	for (size_t t = 0; fits && t < sd->ntensors; t++) {
		bool any = false;

		for (size_t i = 0; i < r->nrules; i++)
			if (us_rule_input(&r->rules[i], sd->tensors[t].name, caps) >= 0)
				any = hit[i] = true;
		fits = any;
	}
	for (size_t i = 0; fits && i < r->nrules; i++)
		fits = !r->rules[i].required || hit[i];
	free(hit);
	return fits;
}

enum us_status us_recipe_auto(const struct us_statedict *sd, const char **name,
			      struct us_err *err)
{
	const char *found[8];
	size_t n = 0;

	*name = NULL;
	for (size_t i = 0; us_recipe_builtin_names[i] && n < 8; i++) {
		struct us_recipe *r;

		US_TRY(us_recipe_load(us_recipe_builtin_names[i], &r, err));
		if (us_recipe_fits(r, sd))
			found[n++] = us_recipe_builtin_names[i];
		us_recipe_free(r);
	}
	if (n > 1)
		return us_err_set(err, US_E_USAGE, ".", "--recipe=auto: several "
				  "built-in recipes fit (%s, %s%s): choose one with "
				  "--recipe=NAME", found[0], found[1],
				  n > 2 ? ", ..." : "");
	if (n == 1)
		*name = found[0];
	return US_OK;
}
