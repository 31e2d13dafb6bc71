/* root_xattr.c - the mount root's user.unshardfs.* xattrs (root_xattr.h). */
#include "root_xattr.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "source/canon.h"

#define X_SOURCE "user.unshardfs.source"
#define X_OPTIONS "user.unshardfs.options"
#define X_IDENTITY "user.unshardfs.identity"

const char us_root_xattr_list[] = X_SOURCE "\0" X_OPTIONS "\0" X_IDENTITY;
const size_t us_root_xattr_list_len = sizeof(us_root_xattr_list);

int us_root_xattrs_init(struct us_root_xattrs *x, const char *source,
			const struct us_source_opts *so,
			const struct us_statedict *sd)
{
	size_t n = us_source_opts_canon(so, NULL, 0);

	memset(x, 0, sizeof(*x));
	x->source = realpath(source, NULL); /* the loader may run elsewhere */
	x->options = malloc(n + 1);
	if (!x->source || !x->options) {
		us_root_xattrs_free(x);
		return -1;
	}
	us_source_opts_canon(so, x->options, n + 1);
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
	if (!strcmp(name, X_SOURCE))
		v = x->source;
	else if (!strcmp(name, X_OPTIONS))
		v = x->options;
	else if (!strcmp(name, X_IDENTITY))
		v = x->identity;
	if (v)
		*len = strlen(v);
	return v;
}
