/*
 * disk_cache.c - --cache-dir: fetched blocks kept on disk across mounts.
 *
 * A block's file is named by the SHA-256 of its identity (store, key, ETag,
 * block size, index): an object rewritten in the store has a new ETag, so a
 * name can never hold stale bytes, and nothing needs invalidating.  Files
 * are written to a temporary name and renamed (a crash leaves a whole block
 * or none), and a read checks the length.  Past the size bound, the oldest
 * files (by mtime, which a hit refreshes) are removed.
 */
#include "remote_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include "../codec/sha256.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct us_dcache {
	char *dir;
	int dfd;
	uint64_t bound;
	pthread_mutex_t mu; /* held, and eviction */
	uint64_t held;
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

/* Sum the blocks' sizes; remove temporaries a crash left. */
static uint64_t scan_held(struct us_dcache *d)
{
	/* Not dup(): a dup shares the directory offset with d->dfd. */
	int fd = openat(d->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	uint64_t sum = 0;
	struct stat st;

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
		if (is_block_name(e->d_name) &&
		    fstatat(d->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			sum += (uint64_t)st.st_size;
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

enum us_status us_dcache_open(const char *dir, uint64_t bytes,
			      struct us_dcache **out, struct us_err *err)
{
	struct us_dcache *d;

	if (mkdir_p(dir) != 0)
		return us_err_set(err, US_E_USAGE, dir,
				  "cannot create the cache directory: %s",
				  strerror(errno));
	d = calloc(1, sizeof(*d));
	if (!d)
		return us_err_set(err, US_E_NOMEM, dir, "out of memory");
	d->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d->dir = strdup(dir);
	if (d->dfd < 0 || !d->dir || faccessat(d->dfd, ".", W_OK, 0) != 0) {
		int e = errno;
		us_dcache_free(d);
		return us_err_set(err, US_E_USAGE, dir,
				  "cannot use the cache directory: %s",
				  strerror(e));
	}
	pthread_mutex_init(&d->mu, NULL);
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

bool us_dcache_get(struct us_dcache *d, const char *name, char *buf,
		   size_t len)
{
	int fd = openat(d->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	size_t got = 0;

	if (fd < 0)
		return false;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != len)
		goto miss;
	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto miss;
		got += (size_t)n;
	}
	futimens(fd, NULL); /* recently used: evicted last */
	close(fd);
	return true;
miss:
	close(fd);
	return false;
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
		    fstatat(d->dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
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
	qsort(v, n, sizeof(*v), aged_cmp);
	for (size_t i = 0; i < n && sum > d->bound / 10 * 9; i++)
		if (unlinkat(d->dfd, v[i].name, 0) == 0)
			sum -= v[i].size;
	d->held = sum;
	free(v);
}

void us_dcache_put(struct us_dcache *d, const char *name, const char *buf,
		   size_t len)
{
	char tmp[96];
	size_t done = 0;
	int fd;

	if (len > d->bound)
		return;
	pthread_mutex_lock(&d->mu);
	snprintf(tmp, sizeof(tmp), ".tmp-%ld-%u", (long)getpid(), d->tmp_seq++);
	pthread_mutex_unlock(&d->mu);
	fd = openat(d->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	while (done < len) {
		ssize_t n = write(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	if (close(fd) != 0 || done != len ||
	    renameat(d->dfd, tmp, d->dfd, name) != 0) {
		unlinkat(d->dfd, tmp, 0);
		return;
	}
	pthread_mutex_lock(&d->mu);
	d->held += len;
	if (d->held > d->bound)
		evict(d);
	pthread_mutex_unlock(&d->mu);
}
