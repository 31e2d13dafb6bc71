/* file_fd.h - storage.h's structs over a test's own descriptors: a struct
 * us_file over a memfd (for the codecs), a struct us_dir over a directory
 * descriptor.  The test keeps the descriptor: nothing here closes it. */
#ifndef US_TEST_FILE_FD_H
#define US_TEST_FILE_FD_H

#include "model.h"

static inline const struct us_file *us_test_file(struct us_file *f, int fd)
{
	*f = (struct us_file){ .fd = fd };
	return f;
}

/* The local directory @fd, borrowed (never us_dir_close it). */
#define US_TEST_DIR(dirfd) (&(struct us_dir){ .fd = (dirfd) })

#endif /* US_TEST_FILE_FD_H */
