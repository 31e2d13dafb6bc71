/* overlay.c - --overlay DIR's files as passthrough entries (passthrough.h). */
#include "passthrough.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../grow.h"
#include "source.h"

/* The top-level entry of @l named @name, or SIZE_MAX. */
static size_t top_entry(const struct us_pt_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].parent == SIZE_MAX && !strcmp(l->v[i].name, name))
			return i;
	return SIZE_MAX;
}

static enum us_status put(struct us_pt_list *l, const char *path,
			  const struct stat *st)
{
	const char *name = strrchr(path, '/') + 1;
	size_t i = top_entry(l, name);
	struct us_pt_entry *e;
	char *copy = strdup(path);

	if (!copy)
		return US_E_NOMEM;
	if (i == SIZE_MAX) {
		if (US_GROW(l->v, l->cap, l->n) != US_OK) {
			free(copy);
			return US_E_NOMEM;
		}
		i = l->n++;
	} else if (S_ISDIR(l->v[i].st.st_mode)) {
		free(copy); /* a SOURCE directory of that name: keep it */
		return US_OK;
	} else {
		free(l->v[i].relpath);
	}
	e = &l->v[i];
	e->relpath = copy;
	e->name = strrchr(copy, '/') + 1;
	e->parent = SIZE_MAX;
	e->st = *st;
	return US_OK;
}

enum us_status us_pt_overlay(const char *dir, struct us_pt_list *l,
			     struct us_err *err)
{
	char abs[PATH_MAX], *path;
	enum us_status rc;
	char **names;
	size_t n;
	struct us_dir d;

	if (!realpath(dir, abs) || us_dir_open_path(abs, &d) < 0)
		return us_err_set(err, US_E_USAGE, dir, "--overlay: cannot open "
				  "the directory: %s", strerror(errno));
	rc = us_dirlist(&d, &names, &n);
	if (rc != US_OK) {
		us_dir_close(&d);
		return us_err_set(err, rc, dir, "--overlay: cannot list: %s",
				  us_status_str(rc));
	}
	for (size_t i = 0; rc == US_OK && i < n; i++) {
		struct stat st;

		if (us_dir_statat(&d, names[i], &st, 0) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (asprintf(&path, "%s/%s", strcmp(abs, "/") ? abs : "", names[i]) < 0) {
			rc = US_E_NOMEM;
			break;
		}
		rc = put(l, path, &st);
		free(path);
	}
	us_dirlist_free(names, n);
	us_dir_close(&d);
	if (rc != US_OK)
		return us_err_set(err, rc, dir, "--overlay: out of memory");
	return US_OK;
}
