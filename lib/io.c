/* io.c - pread loops (the local half of storage.h's us_file_pread). */
#include "io.h"

#include "model.h"
#include "storage/storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

enum us_status us_pread_exact(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;

	if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off) {
		errno = EINVAL;
		return US_E_IO;
	}
	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return US_E_IO; /* errno says why */
		}
		if (n == 0) {
			errno = EIO; /* the file is shorter than recorded */
			return US_E_IO;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return US_OK;
}

enum us_status us_preadv_exact(int fd, struct iovec *iov, int n, uint64_t off)
{
	uint64_t total = 0;

	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (off > (uint64_t)INT64_MAX || total > (uint64_t)INT64_MAX - off) {
		errno = EINVAL;
		return US_E_IO;
	}
	while (n > 0) {
		ssize_t got = preadv(fd, iov, n, (off_t)off);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return US_E_IO; /* errno says why */
		}
		if (got == 0) {
			errno = EIO; /* the file is shorter than recorded */
			return US_E_IO;
		}
		off += (uint64_t)got;
		/* skip what was filled; resume inside a partly filled buffer */
		while (n > 0 && (size_t)got >= iov->iov_len) {
			got -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + got;
			iov->iov_len -= (size_t)got;
		}
	}
	return US_OK;
}

/* The open file @f of us_read_small, checked and read whole. */
static enum us_status read_whole(const struct us_file *f, uint64_t max,
				 char **text, size_t *len)
{
	enum us_status rc;

	if ((uint64_t)f->size > max)
		return US_E_FORMAT;
	if (!(*text = malloc((size_t)f->size + 1)))
		return US_E_NOMEM;
	rc = us_file_pread(f, *text, (size_t)f->size, 0);
	if (rc != US_OK) {
		free(*text);
		*text = NULL;
		return rc;
	}
	(*text)[f->size] = '\0';
	*len = (size_t)f->size;
	return US_OK;
}

enum us_status us_read_small(const struct us_dir *d, const char *name,
			     uint64_t max, char **text, size_t *len)
{
	struct us_file f;
	enum us_status rc;

	*text = NULL;
	*len = 0;
	rc = us_file_open(d, name, &f);
	if (rc == US_E_IO)
		return US_OK; /* errno says why */
	if (rc != US_OK)
		return rc;
	rc = read_whole(&f, max, text, len);
	us_file_close(&f);
	return rc;
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

bool us_same_file(const struct stat *was, const struct stat *now)
{
	return was->st_dev == now->st_dev && was->st_ino == now->st_ino &&
	       was->st_size == now->st_size &&
	       same_time(&was->st_mtim, &now->st_mtim) &&
	       same_time(&was->st_ctim, &now->st_ctim);
}
