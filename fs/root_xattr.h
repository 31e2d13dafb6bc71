/*
 * root_xattr.h - what the mount root says about itself, for a loader
 * (docs/loader.md): user.unshardfs.source (SOURCE's absolute path),
 * user.unshardfs.options (the canonical options, lib/source/canon.h) and
 * user.unshardfs.identity (the source files as recorded at mount); for a
 * remote SOURCE also user.unshardfs.remote_stats (the store's counters at
 * the time of the getxattr, storage/remote.h).
 */
#ifndef US_ROOT_XATTR_H
#define US_ROOT_XATTR_H

#include <stddef.h>

#include "source/source.h"

struct us_root_xattrs {
	char *source, *options;
	char identity[64];
	struct us_remote *remote; /* the state dict's store, or NULL */
};

/* Room us_root_xattr needs in @tmp for a value made on request. */
#define US_ROOT_XATTR_TMP 256

/* us_root_xattr_names - the names, NUL-separated, as listxattr answers
 * them (*@len bytes). */
const char *us_root_xattr_names(const struct us_root_xattrs *x, size_t *len);

/* us_root_xattrs_init - record what the mount of @source (as given) with
 * @so serves as @sd.  0, or -1 when out of memory. */
int us_root_xattrs_init(struct us_root_xattrs *x, const char *source,
			const struct us_source_opts *so,
			const struct us_statedict *sd);
void us_root_xattrs_free(struct us_root_xattrs *x);

/* us_root_xattr - the value of @name (*@len bytes, no NUL), or NULL when
 * the root has no such xattr.  A value made now (remote_stats) is written
 * into @tmp (US_ROOT_XATTR_TMP bytes), so threads never share it. */
const char *us_root_xattr(const struct us_root_xattrs *x, const char *name,
			  char *tmp, size_t *len);

#endif /* US_ROOT_XATTR_H */
