/*
 * path.h - paths named inside checkpoint metadata.
 *
 * An index's weight_map or DCP's relative_path names files with strings from
 * the checkpoint itself.  Such a string must stay inside SOURCE: it may not be
 * absolute, empty, or contain a ".." component (design.md).  Symlinks found
 * on disk are a different matter and are followed (hub cache snapshots).
 */
#ifndef US_PATH_H
#define US_PATH_H

#include <stdbool.h>
#include <stddef.h>

/* us_path_is_inside - true when @p is a relative path that cannot climb out. */
bool us_path_is_inside(const char *p);

/* us_path_has_suffix - true when @name ends with @suffix (and is longer). */
bool us_path_has_suffix(const char *name, const char *suffix);

#endif /* US_PATH_H */
