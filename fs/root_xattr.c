/* root_xattr.c - the mount root's user.unshardfs.* xattrs (root_xattr.h). */
#include "root_xattr.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/recipe.h"
#include "source/canon.h"

#include <stdio.h>

#include "storage/remote.h"

/* Listed in this order; the last only for a remote SOURCE. */
static const char names_list[] = US_XATTR_ROOT_SOURCE "\0"
	US_XATTR_ROOT_OPTIONS "\0" US_XATTR_ROOT_IDENTITY "\0"
	US_XATTR_ROOT_REMOTE_STATS;

const char *us_root_xattr_names(const struct us_root_xattrs *x, size_t *len)
{
	*len = sizeof(names_list);
	if (!x->remote)
		*len -= sizeof(US_XATTR_ROOT_REMOTE_STATS);
	return names_list;
}

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
	/* --cache-dir need not exist yet (the store makes it): as given then */
	char *cache_dir = so->remote.cache_dir ? realpath(so->remote.cache_dir,
							  NULL) : NULL;
	size_t n;

	abs.recipe = recipe;
	abs.overlay = overlay;
	if (cache_dir)
		abs.remote.cache_dir = cache_dir;
	n = us_source_opts_canon(&abs, NULL, 0);
	memset(x, 0, sizeof(*x));
	/* The loader may run elsewhere: a path absolute, a URL as given
	 * (normalised by the store; it names no local file). */
	x->remote = sd->remote;
	x->source = sd->remote ? strdup(us_remote_url(sd->remote))
			       : realpath(source, NULL);
	x->options = malloc(n + 1);
	if (!fail && x->source && x->options)
		us_source_opts_canon(&abs, x->options, n + 1);
	free(recipe);
	free(overlay);
	free(cache_dir);
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

/* "requests=N retries=N bytes_fetched=N bytes_read=N disk_hits=N" now. */
static const char *remote_stats(const struct us_root_xattrs *x, char *tmp)
{
	struct us_remote_stats st;

	us_remote_get_stats(x->remote, &st);
	snprintf(tmp, US_ROOT_XATTR_TMP, "requests=%llu retries=%llu "
		 "bytes_fetched=%llu bytes_read=%llu disk_hits=%llu",
		 (unsigned long long)st.requests, (unsigned long long)st.retries,
		 (unsigned long long)st.bytes_fetched,
		 (unsigned long long)st.bytes_read,
		 (unsigned long long)st.disk_hits);
	return tmp;
}

const char *us_root_xattr(const struct us_root_xattrs *x, const char *name,
			  char *tmp, size_t *len)
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
	else if (x->remote && !strcmp(name, US_XATTR_ROOT_REMOTE_STATS))
		v = remote_stats(x, tmp);
	if (v)
		*len = strlen(v);
	return v;
}
