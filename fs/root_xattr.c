/* root_xattr.c - the mount root's user.unshardfs.* xattrs (root_xattr.h). */
#include "root_xattr.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/recipe.h"
#include "source/canon.h"

const char us_root_xattr_list[] = US_XATTR_ROOT_SOURCE "\0"
	US_XATTR_ROOT_OPTIONS "\0" US_XATTR_ROOT_IDENTITY;
const size_t us_root_xattr_list_len = sizeof(us_root_xattr_list);

/* @spec as the loader must see it: a recipe file or overlay directory
 * absolute (the loader runs in another directory), a built-in name as is.
 * NULL when unset; *@fail when a path cannot be resolved. */
static char *absolute(const char *spec, bool maybe_builtin, bool *fail)
{
	char *p;

	if (!spec)
		return NULL;
	if (maybe_builtin && (!strcmp(spec, "auto") || us_recipe_builtin_text(spec)))
		p = strdup(spec);
	else
		p = realpath(spec, NULL);
	*fail |= !p;
	return p;
}

int us_root_xattrs_init(struct us_root_xattrs *x, const char *source,
			const struct us_source_opts *so,
			const struct us_statedict *sd)
{
	struct us_source_opts abs = *so;
	bool fail = false;
	char *recipe = absolute(so->recipe, true, &fail);
	char *overlay = absolute(so->overlay, false, &fail);
	size_t n;

	abs.recipe = recipe;
	abs.overlay = overlay;
	n = us_source_opts_canon(&abs, NULL, 0);
	memset(x, 0, sizeof(*x));
	x->source = realpath(source, NULL); /* the loader may run elsewhere */
	x->options = malloc(n + 1);
	if (!fail && x->source && x->options)
		us_source_opts_canon(&abs, x->options, n + 1);
	free(recipe);
	free(overlay);
	if (fail || !x->source || !x->options) {
		us_root_xattrs_free(x);
		return -1;
	}
	us_sd_identity(sd, x->identity, sizeof(x->identity));
	return 0;
}

void us_root_xattrs_free(struct us_root_xattrs *x)
{
	free(x->source);
	free(x->options);
	x->source = x->options = NULL;
}

const char *us_root_xattr(const struct us_root_xattrs *x, const char *name,
			  size_t *len)
{
	const char *v = NULL;

	if (!x || !x->source)
		return NULL;
	if (!strcmp(name, US_XATTR_ROOT_SOURCE))
		v = x->source;
	else if (!strcmp(name, US_XATTR_ROOT_OPTIONS))
		v = x->options;
	else if (!strcmp(name, US_XATTR_ROOT_IDENTITY))
		v = x->identity;
	if (v)
		*len = strlen(v);
	return v;
}
