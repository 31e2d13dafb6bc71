/* io.h - reading source files: whole ranges, with EINTR and short reads handled. */
#ifndef US_IO_H
#define US_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * us_pread_full - read exactly @len bytes at @off into @buf.
 * Returns 0, or a negative errno (-EIO when the file ends early).
 */
int us_pread_full(int fd, void *buf, size_t len, uint64_t off);

#endif /* US_IO_H */
