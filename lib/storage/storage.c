/*
 * storage.c - storage.h: local directories and files by their POSIX calls,
 * remote ones by remote_dir.c and remote.h.
 *
 * Local files keep their descriptor for the zero-copy paths (splice,
 * read-ahead), and identity is what fstat says; a remote object's identity
 * is its size and ETag, which the store checks on every range request.
 */
#include "storage.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../grow.h"
#include "../io.h"
#include "../model.h"
#include "remote.h"
#include "remote_dir.h"

/* A NULL @d is the current directory; an absolute name is always local. */
static bool is_remote(const struct us_dir *d, const char *name)
{
	return d && d->remote && name[0] != '/';
}

static int local_fd(const struct us_dir *d)
{
	return d && d->fd >= 0 ? d->fd : (d ? -1 : AT_FDCWD);
}

int us_dir_open_path(const char *path, struct us_dir *out)
{
	*out = US_DIR_NONE;
	out->fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return out->fd < 0 ? -1 : 0;
}

int us_dir_open_remote(struct us_remote *r, const char *prefix,
		       struct us_dir *out)
{
	size_t len = prefix ? strlen(prefix) : 0;
	bool slash = len > 0 && prefix[len - 1] != '/';

	*out = US_DIR_NONE;
	if (!(out->prefix = malloc(len + slash + 1))) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(out->prefix, prefix ? prefix : "", len);
	if (slash)
		out->prefix[len++] = '/';
	out->prefix[len] = '\0';
	out->remote = r;
	return 0;
}

int us_dir_openat(const struct us_dir *d, const char *name,
		  struct us_dir *out)
{
	if (is_remote(d, name))
		return us_rdir_openat(d, name, out);
	*out = US_DIR_NONE;
	out->fd = openat(local_fd(d), name, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return out->fd < 0 ? -1 : 0;
}

void us_dir_close(struct us_dir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	free(d->prefix);
	*d = US_DIR_NONE;
}

int us_dir_statat(const struct us_dir *d, const char *name, struct stat *st,
		  int flags)
{
	if (is_remote(d, name))
		return us_rdir_statat(d, name, st);
	/* An O_PATH descriptor with "" would need AT_EMPTY_PATH: "." works. */
	return fstatat(local_fd(d), name[0] ? name : ".", st, flags);
}

bool us_dir_exists(const struct us_dir *d, const char *name)
{
	struct stat st;

	if (is_remote(d, name))
		return us_rdir_statat(d, name, &st) == 0;
	return faccessat(local_fd(d), name, F_OK, 0) == 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sort and drop repeats.  A remote listing has them: a name can be both an
 * object and a prefix ("a" and "a/x"), and keys sharing a first component
 * need not be adjacent ("a.b" sorts between "a" and "a/x").  A local one
 * has none, and is only sorted. */
static size_t sort_unique(char **names, size_t n)
{
	size_t o = 0;

	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (o > 0 && strcmp(names[o - 1], names[i]) == 0) {
			free(names[i]);
			continue;
		}
		names[o++] = names[i];
	}
	return o;
}

void us_dirlist_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static enum us_status local_list(int dirfd, char ***names_out, size_t *n_out)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	enum us_status rc;
	int fd;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return US_E_IO;
	d = fdopendir(fd); /* allocates its buffer: ENOMEM is memory */
	if (!d) {
		rc = errno == ENOMEM ? US_E_NOMEM : US_E_IO;
		close(fd);
		return rc;
	}
	/* readdir's NULL is the end only with errno untouched: a listing
	 * cut short by an error would silently hide files. */
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (US_GROW(names, cap, n) != US_OK ||
		    !(names[n] = strdup(de->d_name)))
			goto nomem;
		n++;
	}
	if (errno) {
		rc = errno == ENOMEM ? US_E_NOMEM : US_E_IO;
		closedir(d);
		us_dirlist_free(names, n);
		return rc;
	}
	closedir(d);
	*names_out = names;
	*n_out = n;
	return US_OK;
nomem:
	closedir(d);
	us_dirlist_free(names, n);
	return US_E_NOMEM;
}

enum us_status us_dirlist(const struct us_dir *d, char ***names, size_t *n)
{
	enum us_status rc;

	*names = NULL;
	*n = 0;
	rc = d && d->remote ? us_rdir_list(d, names, n)
			    : local_list(local_fd(d), names, n);
	if (rc == US_OK)
		*n = sort_unique(*names, *n);
	return rc;
}

static enum us_status local_open(const struct us_dir *d, const char *relpath,
				 struct us_file *f)
{
	/* O_NONBLOCK: a FIFO named like a shard would otherwise block the
	 * mount forever in open(2); us_file_open_fd refuses it.  (No effect
	 * on regular files.) */
	int fd = openat(local_fd(d), relpath, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	enum us_status rc;
	int e;

	if (fd < 0)
		return US_E_IO;
	rc = us_file_open_fd(fd, f);
	if (rc != US_OK) {
		e = errno;
		close(fd);
		errno = e;
	}
	return rc;
}

enum us_status us_file_open(const struct us_dir *d, const char *relpath,
			    struct us_file *f)
{
	if (is_remote(d, relpath))
		return us_rdir_file_open(d, relpath, f);
	return local_open(d, relpath, f);
}

enum us_status us_file_open_fd(int fd, struct us_file *f)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return US_E_IO;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		return US_E_FORMAT;
	}
	f->fd = fd;
	f->remote = NULL;
	f->obj = NULL;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->size = st.st_size;
	f->mtime = st.st_mtim;
	f->ctime = st.st_ctim;
	return US_OK;
}

void us_file_close(struct us_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	f->remote = NULL;
	f->obj = NULL;
}

enum us_status us_file_pread(const struct us_file *f, void *buf, size_t len,
			     uint64_t off)
{
	if (f->fd >= 0 || !f->remote) /* fd -1 alone: EBADF, as pread says */
		return us_pread_exact(f->fd, buf, len, off);
	assert(f->obj);
	return us_remote_read(f->remote, f->obj, buf, len, off);
}

enum us_status us_file_preadv(const struct us_file *f, struct iovec *iov,
			      int n, uint64_t off)
{
	if (f->fd >= 0 || !f->remote)
		return us_preadv_exact(f->fd, iov, n, off);
	/* a remote object's bytes are copied from its cached blocks anyway */
	for (int i = 0; i < n; i++) {
		US_TRY(us_remote_read(f->remote, f->obj, iov[i].iov_base,
				      iov[i].iov_len, off));
		off += iov[i].iov_len;
	}
	return US_OK;
}

const char *us_file_strerror(const struct us_file *f)
{
	static _Thread_local char why[512];
	int e = errno;

	if (f->fd >= 0 || !f->remote)
		return strerror(e);
	/* "Input/output error" says nothing of a store: its own words do */
	us_remote_last_error(f->remote, why, sizeof(why));
	return why[0] ? why : strerror(e);
}

void us_file_advise(const struct us_file *f, uint64_t off, uint64_t len)
{
	if (f->fd < 0 && f->remote)
		us_remote_advise(f->remote, f->obj, off, len);
}

void us_dir_advise(const struct us_dir *d, const char *relpath, uint64_t head,
		   uint64_t tail)
{
	struct us_file f;

	if (!is_remote(d, relpath) || us_rdir_file_open(d, relpath, &f) != US_OK)
		return; /* local, or not there: the reader says so in its turn */
	us_file_advise(&f, 0, head < (uint64_t)f.size ? head : (uint64_t)f.size);
	if ((uint64_t)f.size > head)
		us_file_advise(&f, (uint64_t)f.size > tail ? (uint64_t)f.size - tail : 0,
			       tail);
	us_file_close(&f);
}

enum us_status us_file_check(const struct us_file *f)
{
	struct stat st, was = { .st_dev = f->dev, .st_ino = f->ino,
				.st_size = f->size, .st_mtim = f->mtime,
				.st_ctim = f->ctime };

	/* A remote object: If-Match on every range request does this. */
	if (f->fd < 0)
		return f->remote ? US_OK : US_E_IO;
	/* A failed fstat is as good as a changed file: nothing to serve. */
	if (fstat(f->fd, &st) < 0 || !us_same_file(&was, &st))
		return US_E_IO;
	return US_OK;
}
