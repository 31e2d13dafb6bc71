/*
 * disk_cache.c - --cache-dir: fetched blocks kept on disk across mounts.
 *
 * A block's file is named by the SHA-256 of its identity (store, key, ETag,
 * block size, index): an object rewritten in the store has a new ETag, so a
 * name can never hold stale bytes, and nothing needs invalidating.  Files
 * are written to a temporary name and renamed (a crash leaves a whole block
 * or none).  Past the size bound, the oldest files (by mtime, which a hit
 * refreshes) are removed.
 *
 * Nothing read back is trusted (docs/remote.md, "--cache-dir"): the
 * directory must be the user's own and writable by nobody else (as ssh
 * wants ~/.ssh), and a block is served only from a regular file of the
 * user's, not writable by others, of the right size, whose header holds the
 * SHA-256 of its name and bytes.  Anything else is a miss, fetched again.
 *
 * A block file: HDR_LEN bytes of header, then the block's bytes.
 *   0  "usdc"       magic
 *   4  version      FORMAT_VERSION; version 1 was the bare bytes (a size
 *                   mismatch now: a miss, replaced when fetched again)
 *   5  3 zero bytes
 *   8  u64 LE       the block's length
 *  16  32 bytes     SHA-256 of the name (with its NUL), the length, the bytes
 */
#include "remote_internal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include "../codec/le.h"
#include "../codec/sha256.h"
#include "../io.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_LEN 48
#define FORMAT_VERSION 2
static const char MAGIC[4] = { 'u', 's', 'd', 'c' };

struct us_dcache {
	char *dir;
	int dfd;
	uid_t uid; /* whose files are trusted: the daemon's effective user */
	uint64_t bound;
	pthread_mutex_t mu; /* held, and eviction */
	uint64_t held;      /* bytes of the block files, headers included */
	unsigned tmp_seq;
};

static bool is_block_name(const char *n)
{
	if (strlen(n) != 64)
		return false;
	for (int i = 0; i < 64; i++)
		if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	return true;
}

/* The size of the regular file @name holds, else 0: what held counts. */
static uint64_t held_size(const struct us_dcache *d, const char *name)
{
	struct stat st;

	if (fstatat(d->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(st.st_mode))
		return 0;
	return (uint64_t)st.st_size;
}

static void held_sub(struct us_dcache *d, uint64_t n)
{
	pthread_mutex_lock(&d->mu);
	d->held -= n < d->held ? n : d->held;
	pthread_mutex_unlock(&d->mu);
}

/* Sum the blocks' sizes; remove temporaries a crash left. */
static uint64_t scan_held(struct us_dcache *d)
{
	/* Not dup(): a dup shares the directory offset with d->dfd. */
	int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	uint64_t sum = 0;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, ".tmp-", 5) == 0) {
			unlinkat(d->dfd, e->d_name, 0);
			continue;
		}
		if (is_block_name(e->d_name))
			sum += held_size(d, e->d_name);
	}
	closedir(dir);
	return sum;
}

static int mkdir_p(const char *path)
{
	char *p = strdup(path);
	int rc = 0;

	if (!p)
		return -1;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0700) != 0 && errno != EEXIST)
			rc = -1;
		*s = '/';
	}
	if (mkdir(p, 0700) != 0 && errno != EEXIST)
		rc = -1;
	free(p);
	return rc;
}

/* Refuse a directory someone else could plant blocks in (or empty, or
 * replace our files in): another user's, or writable by group or others. */
static enum us_status check_dir(const struct us_dcache *d, struct us_err *err)
{
	struct stat st;

	if (fstat(d->dfd, &st) != 0)
		return us_err_set(err, US_E_IO, d->dir,
				  "cannot use the cache directory: %s",
				  strerror(errno));
	if (st.st_uid != d->uid)
		return us_err_set(err, US_E_IO, d->dir,
				  "the cache directory belongs to uid %u, not to "
				  "this user (uid %u): give --cache-dir a "
				  "directory of your own",
				  (unsigned)st.st_uid, (unsigned)d->uid);
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return us_err_set(err, US_E_IO, d->dir,
				  "the cache directory is writable by %s (mode "
				  "%04o): refused, others could plant blocks; "
				  "chmod go-w it",
				  st.st_mode & S_IWOTH ? "others" : "its group",
				  (unsigned)(st.st_mode & 07777));
	return US_OK;
}

enum us_status us_dcache_open(const char *dir, uint64_t bytes,
			      struct us_dcache **out, struct us_err *err)
{
	struct us_dcache *d;
	enum us_status rc;

	if (mkdir_p(dir) != 0)
		return us_err_set(err, US_E_USAGE, dir,
				  "cannot create the cache directory: %s",
				  strerror(errno));
	d = calloc(1, sizeof(*d));
	if (!d)
		return us_err_set(err, US_E_NOMEM, dir, "out of memory");
	d->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d->dir = strdup(dir);
	d->uid = geteuid();
	if (d->dfd < 0 || !d->dir || faccessat(d->dfd, ".", W_OK, 0) != 0) {
		int e = errno;
		us_dcache_free(d);
		return us_err_set(err, US_E_USAGE, dir,
				  "cannot use the cache directory: %s",
				  strerror(e));
	}
	pthread_mutex_init(&d->mu, NULL);
	rc = check_dir(d, err);
	if (rc != US_OK) {
		us_dcache_free(d);
		return rc;
	}
	d->bound = bytes;
	d->held = scan_held(d);
	*out = d;
	return US_OK;
}

void us_dcache_free(struct us_dcache *d)
{
	if (!d)
		return;
	if (d->dfd >= 0) {
		close(d->dfd);
		pthread_mutex_destroy(&d->mu);
	}
	free(d->dir);
	free(d);
}

void us_dcache_name(const char *store, const char *key, const char *etag,
		    uint64_t block_size, uint64_t blk, char out[65])
{
	static const char hx[] = "0123456789abcdef";
	unsigned char h[32];
	char nums[64];
	struct us_sha256 s;

	/* NUL separators: no two identities give one byte string. */
	snprintf(nums, sizeof(nums), "%llu:%llu",
		 (unsigned long long)block_size, (unsigned long long)blk);
	us_sha256_init(&s);
	us_sha256_update(&s, store, strlen(store) + 1);
	us_sha256_update(&s, key, strlen(key) + 1);
	us_sha256_update(&s, etag, strlen(etag) + 1);
	us_sha256_update(&s, nums, strlen(nums) + 1);
	us_sha256_final(&s, h);
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hx[h[i] >> 4];
		out[2 * i + 1] = hx[h[i] & 15];
	}
	out[64] = '\0';
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* The checksum of block @name: the name is the hash of the block's
 * identity, so a block's bytes check only under their own identity (a
 * block copied to another name is a miss there). */
static void block_sum(const char *name, const char *buf, size_t len,
		      unsigned char out[32])
{
	unsigned char n8[8];
	struct us_sha256 s;

	put_le64(n8, len);
	us_sha256_init(&s);
	us_sha256_update(&s, name, strlen(name) + 1);
	us_sha256_update(&s, n8, 8);
	us_sha256_update(&s, buf, len);
	us_sha256_final(&s, out);
}

static void make_header(unsigned char h[HDR_LEN], const char *name,
			const char *buf, size_t len)
{
	memset(h, 0, HDR_LEN);
	memcpy(h, MAGIC, 4);
	h[4] = FORMAT_VERSION;
	put_le64(h + 8, len);
	block_sum(name, buf, len, h + 16);
}

/* Does header @h (of the file @name, whose @len bytes are @buf) vouch for
 * those bytes? */
static bool header_ok(const unsigned char h[HDR_LEN], const char *name,
		      const char *buf, size_t len)
{
	unsigned char sum[32];

	if (memcmp(h, MAGIC, 4) != 0 || h[4] != FORMAT_VERSION || h[5] ||
	    h[6] || h[7] || us_le(h + 8, 8) != len)
		return false;
	block_sum(name, buf, len, sum);
	return memcmp(sum, h + 16, 32) == 0;
}

/* Remove the bad entry @name, if it is still the one @st describes and is
 * ours: else every read of the block would look at it again.  Another
 * user's file is left alone (the block's next put renames over it). */
static void drop(struct us_dcache *d, const char *name, const struct stat *st)
{
	struct stat now;

	if (st->st_uid != d->uid || S_ISDIR(st->st_mode) ||
	    fstatat(d->dfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
	    now.st_ino != st->st_ino || now.st_dev != st->st_dev)
		return;
	if (unlinkat(d->dfd, name, 0) == 0 && S_ISREG(now.st_mode))
		held_sub(d, (uint64_t)now.st_size);
}

/* Open block file @name if it may be read: never through a link, never
 * waiting (a FIFO would block open() for ever), and only a regular file of
 * ours that nobody else can write, of a @len-byte block's size.  -1 for a
 * miss; *@st is what was found. */
static int open_block(struct us_dcache *d, const char *name, size_t len,
		      struct stat *st)
{
	int fd = openat(d->dfd, name,
			O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		/* a symlink (ELOOP), a socket (ENXIO), ... */
		if (errno != ENOENT &&
		    fstatat(d->dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0)
			drop(d, name, st);
		return -1;
	}
	if (fstat(fd, st) != 0) {
		close(fd);
		return -1;
	}
	if (!S_ISREG(st->st_mode) || st->st_uid != d->uid ||
	    (st->st_mode & (S_IWGRP | S_IWOTH)) ||
	    (uint64_t)st->st_size != (uint64_t)len + HDR_LEN) {
		close(fd);
		drop(d, name, st);
		return -1;
	}
	return fd;
}

bool us_dcache_get(struct us_dcache *d, const char *name, char *buf,
		   size_t len)
{
	unsigned char h[HDR_LEN];
	struct stat st;
	int fd = open_block(d, name, len, &st);
	bool ok;

	if (fd < 0)
		return false;
	ok = us_pread_exact(fd, h, HDR_LEN, 0) == US_OK &&
	     us_pread_exact(fd, buf, len, HDR_LEN) == US_OK &&
	     header_ok(h, name, buf, len);
	if (ok)
		futimens(fd, NULL); /* recently used: evicted last */
	close(fd);
	if (!ok)
		drop(d, name, &st);
	return ok;
}

struct aged {
	char name[65];
	struct timespec mtime;
	uint64_t size;
};

static int aged_cmp(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Remove the oldest blocks until 90% of the bound is held (so that not
 * every put scans).  Called with d->mu held. */
static void evict(struct us_dcache *d)
{
	/* Not dup(): a dup shares the directory offset with d->dfd. */
	int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct aged *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	struct stat st;
	uint64_t sum = 0;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(dir))) {
		if (!is_block_name(e->d_name) ||
		    fstatat(d->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			size_t nc = cap ? 2 * cap : 256;
			struct aged *t = realloc(v, nc * sizeof(*v));
			if (!t)
				break;
			v = t;
			cap = nc;
		}
		memcpy(v[n].name, e->d_name, 65);
		v[n].mtime = st.st_mtim;
		v[n].size = (uint64_t)st.st_size;
		sum += v[n].size;
		n++;
	}
	closedir(dir);
	if (n)
		qsort(v, n, sizeof(*v), aged_cmp);
	for (size_t i = 0; i < n && sum > d->bound / 10 * 9; i++)
		if (unlinkat(d->dfd, v[i].name, 0) == 0)
			sum -= v[i].size;
	d->held = sum;
	free(v);
}

static bool write_all(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, (const char *)buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		done += (size_t)n;
	}
	return true;
}

void us_dcache_put(struct us_dcache *d, const char *name, const char *buf,
		   size_t len)
{
	uint64_t total = (uint64_t)len + HDR_LEN, old;
	unsigned char h[HDR_LEN];
	char tmp[96];
	bool ok;
	int fd;

	assert(is_block_name(name));
	if (total > d->bound)
		return;
	pthread_mutex_lock(&d->mu);
	snprintf(tmp, sizeof(tmp), ".tmp-%ld-%u", (long)getpid(), d->tmp_seq++);
	pthread_mutex_unlock(&d->mu);
	/* 0600 whatever the umask: only ever narrower, never group/other. */
	fd = openat(d->dfd, tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	make_header(h, name, buf, len);
	ok = write_all(fd, h, HDR_LEN) && write_all(fd, buf, len);
	if (close(fd) != 0)
		ok = false;
	old = held_size(d, name); /* a bad file of another user's, replaced */
	if (!ok || renameat(d->dfd, tmp, d->dfd, name) != 0) {
		unlinkat(d->dfd, tmp, 0);
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->held -= old < d->held ? old : d->held;
	d->held += total;
	if (d->held > d->bound)
		evict(d);
	pthread_mutex_unlock(&d->mu);
}
