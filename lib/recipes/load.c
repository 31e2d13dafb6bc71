/* load.c - a recipe by built-in name or from a JSON file (recipe.h). */
#include "recipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "../io.h"

/* A recipe is a few KiB of rules; far bigger is not one. */
#define MAX_RECIPE (16u << 20)

static enum us_status read_file(const char *path, char **text, size_t *len,
				struct us_err *err)
{
	enum us_status rc = us_read_small(NULL, path, MAX_RECIPE, text, len);

	if (rc == US_OK && !*text)
		return us_err_set(err, US_E_USAGE, path, "not a built-in recipe (%s, "
				  "%s, %s) and cannot be opened: %s",
				  us_recipe_builtin_names[0], us_recipe_builtin_names[1],
				  us_recipe_builtin_names[2], strerror(errno));
	if (rc == US_E_FORMAT)
		return us_err_set(err, US_E_USAGE, path,
				  "a recipe must be a regular file under 16 MiB");
	if (rc == US_E_NOMEM)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	if (rc != US_OK)
		return us_err_set(err, US_E_USAGE, path, "cannot be read");
	return US_OK;
}

enum us_status us_recipe_load(const char *spec, struct us_recipe **out,
			      struct us_err *err)
{
	const char *text = us_recipe_builtin_text(spec);
	char *file = NULL;
	size_t len = 0;
	enum us_status rc;

	if (text)
		return us_recipe_parse(text, strlen(text), spec, out, err);
	US_TRY(read_file(spec, &file, &len, err));
	rc = us_recipe_parse(file, len, spec, out, err);
	free(file);
	return rc;
}
