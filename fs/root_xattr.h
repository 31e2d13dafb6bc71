/*
 * root_xattr.h - what the mount root says about itself, for a loader
 * (docs/loader.md): user.unshardfs.source (SOURCE's absolute path),
 * user.unshardfs.options (the canonical options, lib/source/canon.h) and
 * user.unshardfs.identity (the source files as recorded at mount).
 */
#ifndef US_ROOT_XATTR_H
#define US_ROOT_XATTR_H

#include <stddef.h>

#include "source/source.h"

struct us_root_xattrs {
	char *source, *options;
	char identity[64];
};

/* The names, NUL-separated, as listxattr answers them. */
extern const char us_root_xattr_list[];
extern const size_t us_root_xattr_list_len;

/* us_root_xattrs_init - record what the mount of @source (as given) with
 * @so serves as @sd.  0, or -1 when out of memory. */
int us_root_xattrs_init(struct us_root_xattrs *x, const char *source,
			const struct us_source_opts *so,
			const struct us_statedict *sd);
void us_root_xattrs_free(struct us_root_xattrs *x);

/* us_root_xattr - the value of @name (*@len bytes, no NUL), or NULL when
 * the root has no such xattr. */
const char *us_root_xattr(const struct us_root_xattrs *x, const char *name,
			  size_t *len);

#endif /* US_ROOT_XATTR_H */
