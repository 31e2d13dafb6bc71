/* io.h - reading source files: whole ranges, with EINTR and short reads handled. */
#ifndef US_IO_H
#define US_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "us_error.h"

/*
 * us_pread_exact - read exactly @len bytes at @off into @buf.  US_OK, or
 * US_E_IO with errno saying why (EIO when the file ends early), for a
 * message; the read path (assemble/) only passes the status on.
 */
enum us_status us_pread_exact(int fd, void *buf, size_t len, uint64_t off);

/*
 * us_preadv_exact - read exactly the bytes of @iov[0..@n) (n <= IOV_MAX),
 * consecutive in the file from @off, as us_pread_exact does one buffer.
 * @iov is modified (a short read resumes inside it).
 */
struct iovec;
enum us_status us_preadv_exact(int fd, struct iovec *iov, int n, uint64_t off);

/*
 * us_read_small - the whole of the regular file @name (relative to @d, or
 * the current directory when @d is NULL; storage.h) when it is at most @max
 * bytes: malloc'ed, NUL-terminated, in *@text (*@len bytes).  Opened with
 * O_NONBLOCK, so a FIFO under that name cannot hang a mount.  US_OK with
 * *@text NULL when it cannot be opened (errno says why: absent is not an
 * error for every caller); US_E_FORMAT for something other than a regular
 * file, or one over @max; US_E_NOMEM; US_E_IO when reading it fails.
 */
struct us_dir;
enum us_status us_read_small(const struct us_dir *d, const char *name,
			     uint64_t max, char **text, size_t *len);

/*
 * us_same_file - is @now (a fresh fstat) still the file @was recorded at mount?
 * Device, inode, size, mtime and ctime must all match: an in-place rewrite can
 * restore the mtime (utime, rsync --inplace -t), but every write and every
 * utime moves the ctime, which user space cannot set back.
 */
bool us_same_file(const struct stat *was, const struct stat *now);

#endif /* US_IO_H */
