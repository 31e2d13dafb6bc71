/*
 * remote_dir.c - a remote store's listing seen as directories.
 *
 * The listing (remote.h) is sorted by strcmp, so every key under a prefix
 * lies in one run that a binary search finds: that is all a directory is.
 * A path is joined to the directory's prefix and normalised first ("." and
 * empty components dropped, ".." popped, never above the store's root), so
 * the names readers build ("./x", "sub/../y") mean what they mean locally.
 */
#include "remote_dir.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../grow.h"
#include "remote.h"

/* @prefix + @name as a key without a trailing '/', "" for the root;
 * malloc'ed, NULL with errno (ENOENT for a climb above the root). */
static char *join_key(const char *prefix, const char *name)
{
	size_t plen = strlen(prefix), nlen = strlen(name), o = 0;
	char *in = malloc(plen + nlen + 2), *out, *save = NULL, *c;

	out = malloc(plen + nlen + 2);
	if (!in || !out) {
		free(in);
		free(out);
		errno = ENOMEM;
		return NULL;
	}
	memcpy(in, prefix, plen);
	in[plen] = '/';
	memcpy(in + plen + 1, name, nlen + 1);
	for (c = strtok_r(in, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0)
			continue;
		if (strcmp(c, "..") == 0) {
			if (o == 0)
				goto enoent;
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--; /* the '/' before the popped component */
			continue;
		}
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, c, strlen(c));
		o += strlen(c);
	}
	out[o] = '\0';
	free(in);
	return out;
enoent:
	free(in);
	free(out);
	errno = ENOENT;
	return NULL;
}

static bool starts_with(const char *s, const char *p, size_t plen)
{
	return strncmp(s, p, plen) == 0;
}

/* Does some key start with @key + "/"?  (The root always is a directory.) */
static bool is_dir_key(const struct us_remote *r, const char *key)
{
	size_t len = strlen(key), i;
	char *p;
	bool yes;

	if (len == 0)
		return true;
	if (!(p = malloc(len + 2)))
		return false;
	memcpy(p, key, len);
	memcpy(p + len, "/", 2);
	i = us_remote_lower_bound(r, p);
	yes = i < us_remote_count(r) &&
	      starts_with(us_remote_at(r, i)->key, p, len + 1);
	free(p);
	return yes;
}

/* Is a proper leading part of @key an object (so @key names a path through
 * a file: ENOTDIR, as locally)? */
static bool through_file(const struct us_remote *r, const char *key)
{
	char *p = strdup(key), *s;
	bool yes = false;

	if (!p)
		return false;
	for (s = strchr(p, '/'); s && !yes; s = strchr(s + 1, '/')) {
		*s = '\0';
		yes = us_remote_find(r, p) != NULL;
		*s = '/';
	}
	free(p);
	return yes;
}

/* FNV-1a over the key: the same key gets the same inode on every mount. */
static ino_t key_ino(const char *key, bool dir)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *c = key; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ULL;
	if (dir)
		h = (h ^ '/') * 1099511628211ULL;
	return (ino_t)(h ? h : 1);
}

static void stat_object(const struct us_remote_object *o, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)o->size;
	st->st_ino = key_ino(o->key, false);
	st->st_mtim = o->mtime;
	st->st_ctim = o->mtime;
	st->st_atim = o->mtime;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((o->size + 511) / 512);
}

static void stat_dir(const char *key, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	st->st_ino = key_ino(key, true);
	st->st_blksize = 4096;
}

enum kind { NOT_THERE = -1, OBJECT = 1, DIRECTORY = 2 };

/* What @key is (*@o set for an object); NOT_THERE with errno. */
static enum kind classify(const struct us_remote *r, const char *key,
			  const struct us_remote_object **o)
{
	*o = key[0] ? us_remote_find(r, key) : NULL;
	if (*o)
		return OBJECT;
	if (is_dir_key(r, key))
		return DIRECTORY;
	errno = through_file(r, key) ? ENOTDIR : ENOENT;
	return NOT_THERE;
}

/* @name under @d: its kind, and its key in *@key (malloc'ed; NULL when
 * NOT_THERE, errno saying why). */
static enum kind lookup(const struct us_dir *d, const char *name, char **key,
			const struct us_remote_object **o)
{
	enum kind kind;

	*key = join_key(d->prefix, name);
	if (!*key)
		return NOT_THERE;
	kind = classify(d->remote, *key, o);
	if (kind == NOT_THERE) {
		free(*key);
		*key = NULL;
	}
	return kind;
}

int us_rdir_statat(const struct us_dir *d, const char *name, struct stat *st)
{
	const struct us_remote_object *o;
	char *key;
	enum kind kind = lookup(d, name, &key, &o);

	if (kind == OBJECT)
		stat_object(o, st);
	else if (kind == DIRECTORY)
		stat_dir(key, st);
	free(key);
	return kind == NOT_THERE ? -1 : 0;
}

int us_rdir_openat(const struct us_dir *d, const char *name,
		   struct us_dir *out)
{
	const struct us_remote_object *o;
	char *key;
	enum kind kind = lookup(d, name, &key, &o);
	int rc = -1;

	if (kind == OBJECT)
		errno = ENOTDIR;
	else if (kind == DIRECTORY)
		rc = us_dir_open_remote(d->remote, key, out);
	free(key);
	return rc;
}

enum us_status us_rdir_list(const struct us_dir *d, char ***names_out,
			    size_t *n_out)
{
	const struct us_remote *r = d->remote;
	size_t plen = strlen(d->prefix), n = 0, cap = 0;
	char **names = NULL;

	assert(plen == 0 || d->prefix[plen - 1] == '/');
	for (size_t i = us_remote_lower_bound(r, d->prefix);
	     i < us_remote_count(r); i++) {
		const char *k = us_remote_at(r, i)->key, *rest;
		size_t len;

		if (!starts_with(k, d->prefix, plen))
			break;
		rest = k + plen;
		len = strcspn(rest, "/"); /* the first component below */
		if (len == 0)
			continue; /* "a//b": no name to show */
		/* Keys sharing the last listed component are adjacent: the
		 * run is skipped without another copy. */
		if (n > 0 && strlen(names[n - 1]) == len &&
		    starts_with(rest, names[n - 1], len))
			continue;
		if (US_GROW(names, cap, n) != US_OK ||
		    !(names[n] = strndup(rest, len))) {
			us_dirlist_free(names, n);
			return US_E_NOMEM;
		}
		n++;
	}
	*n_out = n; /* us_dirlist sorts and drops the repeats */
	*names_out = names;
	return US_OK;
}

enum us_status us_rdir_file_open(const struct us_dir *d, const char *relpath,
				 struct us_file *f)
{
	const struct us_remote_object *o;
	char *key;
	enum kind kind = lookup(d, relpath, &key, &o);

	free(key);
	if (kind == NOT_THERE)
		return errno == ENOMEM ? US_E_NOMEM : US_E_IO; /* ENOENT, ... */
	if (kind == DIRECTORY)
		return US_E_FORMAT; /* a directory: not a regular file */
	f->fd = -1;
	f->remote = d->remote;
	f->obj = o;
	f->dev = 0;
	f->ino = key_ino(o->key, false);
	f->size = (off_t)o->size;
	f->mtime = o->mtime;
	f->ctime = o->mtime;
	return US_OK;
}
