/*
 * storage.h - where SOURCE's bytes come from: local files, or the objects of
 * a remote store read by HTTP range requests (remote.h: S3, https).
 *
 * Readers, the passthrough scan and the views never touch a descriptor or a
 * URL themselves: they name files relative to a struct us_dir and read them
 * with us_file_pread.  The directory calls behave like their POSIX models
 * (openat, fstatat, readdir: 0 or -1 with errno) so that a reader reads the
 * same against either store; a remote store is a sorted key listing made at
 * mount, its "directories" the key prefixes ending in '/'.
 *
 * Local files keep their descriptor (us_file.fd >= 0) for the zero-copy
 * paths (splice, read-ahead); a remote file has fd -1 and is read only
 * through us_file_pread, which the remote store serves from its block cache.
 */
#ifndef US_STORAGE_H
#define US_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../us_error.h"

struct us_remote;        /* remote.h */
struct us_remote_object; /* remote.h */
struct us_file;          /* model.h */

/* A directory of SOURCE (or of --overlay). */
struct us_dir {
	int fd;                   /* local: an O_PATH descriptor; -1 remote */
	struct us_remote *remote; /* remote: the store (not owned); NULL local */
	char *prefix;             /* remote: "" or "a/b/", owned; NULL local */
};

#define US_DIR_NONE ((struct us_dir){ .fd = -1 })

/* us_dir_is_open - does @d name a directory (local or remote)? */
static inline bool us_dir_is_open(const struct us_dir *d)
{
	return d && (d->fd >= 0 || d->remote);
}

/*
 * Every call below that takes a directory also takes NULL for the current
 * directory (local), and a name or relpath that is absolute always names a
 * local file whatever @d is (--overlay's files are opened that way).
 */

/* us_dir_open_path - the local directory @path (open(2) O_PATH). 0 / -1. */
int us_dir_open_path(const char *path, struct us_dir *out);
/* us_dir_open_remote - the root of @r's listing (or of @prefix in it). */
int us_dir_open_remote(struct us_remote *r, const char *prefix,
		       struct us_dir *out);
/* us_dir_openat - the subdirectory @name (may hold '/') of @d. 0 / -1. */
int us_dir_openat(const struct us_dir *d, const char *name,
		  struct us_dir *out);
void us_dir_close(struct us_dir *d);

/*
 * us_dir_statat - fstatat(2) of @name under @d; @flags 0 or
 * AT_SYMLINK_NOFOLLOW.  A remote object is a regular file of its size,
 * mode 0444, its Last-Modified as mtime and ctime, a stable st_ino from its
 * key; a remote prefix is a directory (0555).  Remote stores have no links.
 */
int us_dir_statat(const struct us_dir *d, const char *name, struct stat *st,
		  int flags);

/* us_dir_exists - does @name under @d exist (symlinks followed), as
 * faccessat(F_OK) answers? */
bool us_dir_exists(const struct us_dir *d, const char *name);

/* us_dirlist - the sorted entry names of @d (without . and ..). */
enum us_status us_dirlist(const struct us_dir *d, char ***names, size_t *n);
void us_dirlist_free(char **names, size_t n);

/*
 * us_file_open - open the regular file @relpath under @d into @f (its
 * descriptor or remote object, and its identity as recorded now; relpath
 * left to the caller).  US_E_IO with errno when it cannot be opened,
 * US_E_FORMAT when it is not a regular file (a FIFO cannot hang us: local
 * files are opened O_NONBLOCK).  Close with us_file_close.
 */
enum us_status us_file_open(const struct us_dir *d, const char *relpath,
			    struct us_file *f);
void us_file_close(struct us_file *f);

/* us_file_open_fd - @f for the open local file @fd (a test's memfd, a
 * fuzzer's input), its identity recorded now; @f owns @fd on US_OK (closed
 * by us_file_close).  US_E_FORMAT when it is not a regular file, US_E_IO
 * when fstat fails. */
enum us_status us_file_open_fd(int fd, struct us_file *f);

/*
 * us_file_pread - exactly @len bytes at @off of @f into @buf: US_OK, or
 * US_E_IO with errno set (EIO when the file ends early, or when a remote
 * object changed since mount or could not be fetched within its retries;
 * EBADF, as pread says, for an @f with neither a descriptor nor a store).
 */
enum us_status us_file_pread(const struct us_file *f, void *buf, size_t len,
			     uint64_t off);

/* us_file_strerror - why the last failed read of @f failed, in words:
 * strerror(errno) for a local file, the store's reason for a remote one
 * ("KEY: bytes A-B: HTTP 503").  Valid until this thread's next call. */
const char *us_file_strerror(const struct us_file *f);

/* us_file_preadv - the bytes at @off of @f, consecutive, into the @n
 * buffers of @iov (n <= IOV_MAX; modified), as us_file_pread: one preadv
 * of a local file, a copy per buffer of a remote one. */
struct iovec;
enum us_status us_file_preadv(const struct us_file *f, struct iovec *iov,
			      int n, uint64_t off);

/* us_file_advise - bytes [@off, @off + @len) of @f will be read soon (a
 * reader about to parse many small records): a remote file fetches them
 * ahead in parallel (us_remote_advise); a local one needs nothing, the page
 * cache and the kernel's read-ahead serve it.  A hint: nothing fails. */
void us_file_advise(const struct us_file *f, uint64_t off, uint64_t len);

/* us_dir_advise - the file @relpath under @d is about to be opened and its
 * headers read: a remote one fetches its first @head and last @tail bytes
 * ahead, in parallel with the files before it (a reader that opens shard
 * after shard: an index's, DeepSpeed's ranks).  Nothing for local files,
 * nor for one that is not there.  A hint: nothing fails. */
void us_dir_advise(const struct us_dir *d, const char *relpath, uint64_t head,
		   uint64_t tail);
/* What readers advise at each end of a file they are about to parse. */
#define US_ADVISE_EDGE (64u << 10)

/* us_file_check - US_OK while @f still has the identity recorded when it
 * was opened, else US_E_IO.  (Remote objects: every range request carries
 * If-Match with the ETag, so the store answers this on each read.) */
enum us_status us_file_check(const struct us_file *f);

#endif /* US_STORAGE_H */
