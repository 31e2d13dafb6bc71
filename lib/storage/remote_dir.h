/*
 * remote_dir.h - directories synthesized from a remote store's sorted key
 * listing (private to lib/storage: storage.c dispatches here for a remote
 * struct us_dir).  A key is a regular file; a prefix "name/" that some key
 * starts with is a directory.  Same return conventions as storage.h.
 */
#ifndef US_REMOTE_DIR_H
#define US_REMOTE_DIR_H

#include <sys/stat.h>

#include "../model.h"
#include "storage.h"

int us_rdir_openat(const struct us_dir *d, const char *name,
		   struct us_dir *out);
int us_rdir_statat(const struct us_dir *d, const char *name, struct stat *st);
/* The names of one level below @d, unsorted, with repeats: us_dirlist sorts
 * them and drops the repeats. */
enum us_status us_rdir_list(const struct us_dir *d, char ***names, size_t *n);
enum us_status us_rdir_file_open(const struct us_dir *d, const char *relpath,
				 struct us_file *f);

#endif /* US_REMOTE_DIR_H */
