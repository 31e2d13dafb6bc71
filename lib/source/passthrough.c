/* passthrough.c - walking SOURCE for the files the views do not replace. */
#include "passthrough.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../grow.h"
#include "source.h"

#define PT_MAX_DEPTH 32

void us_pt_free(struct us_pt_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].relpath);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static enum us_status pt_push(struct us_pt_list *l, const char *relpath,
			      size_t parent, const struct stat *st)
{
	struct us_pt_entry *e;
	const char *slash;

	US_TRY(US_GROW(l->v, l->cap, l->n));
	e = &l->v[l->n];
	e->relpath = strdup(relpath);
	if (!e->relpath)
		return US_E_NOMEM;
	slash = strrchr(e->relpath, '/');
	e->name = slash ? slash + 1 : e->relpath;
	e->parent = parent;
	e->st = *st;
	l->n++;
	return US_OK;
}

/* True if directory @st is @dir_idx or one of its ancestors (a link loop). */
static bool pt_is_ancestor(const struct us_pt_list *l, size_t dir_idx,
			   const struct stat *st, const struct stat *root)
{
	for (size_t i = dir_idx; i != SIZE_MAX; i = l->v[i].parent)
		if (l->v[i].st.st_dev == st->st_dev &&
		    l->v[i].st.st_ino == st->st_ino)
			return true;
	return root->st_dev == st->st_dev && root->st_ino == st->st_ino;
}

static enum us_status pt_walk(const struct us_dir *dir,
			      const struct us_statedict *sd,
			      struct us_pt_list *l, const char *prefix,
			      size_t parent, const struct stat *root, int depth)
{
	enum us_status rc = US_OK;
	char **names;
	size_t n;
	char *path;
	struct us_dir sub;

	if (depth > PT_MAX_DEPTH)
		return US_OK;
	if (us_dir_openat(dir, *prefix ? prefix : ".", &sub) < 0)
		return US_OK; /* unreadable directory: nothing to pass through */
	rc = us_dirlist(&sub, &names, &n);
	us_dir_close(&sub);
	if (rc != US_OK)
		return rc == US_E_NOMEM ? rc : US_OK;
	for (size_t i = 0; rc == US_OK && i < n; i++) {
		struct stat st;

		if (asprintf(&path, "%s%s%s", prefix, *prefix ? "/" : "",
			     names[i]) < 0) {
			rc = US_E_NOMEM;
			break;
		}
		if (us_dir_statat(dir, path, &st, 0) == 0 &&
		    !us_sd_is_consumed(sd, path)) {
			if (S_ISREG(st.st_mode)) {
				rc = pt_push(l, path, parent, &st);
			} else if (S_ISDIR(st.st_mode) &&
				   !pt_is_ancestor(l, parent, &st, root)) {
				rc = pt_push(l, path, parent, &st);
				if (rc == US_OK)
					rc = pt_walk(dir, sd, l, path,
						     l->n - 1, root, depth + 1);
			}
		}
		free(path);
	}
	us_dirlist_free(names, n);
	return rc;
}

enum us_status us_pt_scan(const struct us_dir *dir,
			  const struct us_statedict *sd,
			  struct us_pt_list *out, struct us_err *err)
{
	struct stat root;
	enum us_status rc;

	memset(out, 0, sizeof(*out));
	if (us_dir_statat(dir, ".", &root, 0) < 0)
		return us_err_set(err, US_E_IO, ".", "cannot stat SOURCE");
	rc = pt_walk(dir, sd, out, "", SIZE_MAX, &root, 0);
	if (rc != US_OK) {
		us_pt_free(out);
		return us_err_set(err, rc, ".", "cannot list SOURCE: %s",
				  us_status_str(rc));
	}
	return US_OK;
}

enum us_status us_pt_collect(const struct us_dir *src,
			     const struct us_statedict *sd,
			     const char *overlay, struct us_pt_list *l,
			     struct us_err *err)
{
	enum us_status rc = US_OK;

	if (us_dir_is_open(src))
		rc = us_pt_scan(src, sd, l, err);
	if (rc == US_OK && overlay)
		rc = us_pt_overlay(overlay, l, err);
	if (rc != US_OK)
		us_pt_free(l);
	return rc;
}
