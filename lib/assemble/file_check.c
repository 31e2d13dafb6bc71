/* file_check.c - is a source file still the one recorded at mount? */
#include "exec.h"

#include <sys/stat.h>

#include "../io.h"

enum us_status us_file_check(const struct us_file *f)
{
	struct stat st, was = { .st_dev = f->dev, .st_ino = f->ino,
				.st_size = f->size, .st_mtim = f->mtime,
				.st_ctim = f->ctime };

	/* A failed fstat is as good as a changed file: nothing to serve. */
	if (fstat(f->fd, &st) < 0 || !us_same_file(&was, &st))
		return US_E_IO;
	return US_OK;
}
