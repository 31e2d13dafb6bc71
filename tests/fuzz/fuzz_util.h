/*
 * fuzz_util.h - helpers shared by the libFuzzer targets (header-only, so
 * each target stays one translation unit).
 *
 * Inputs reach the readers through a memfd (the same pread path as a real
 * file) and, for whole-reader targets, through /proc/self/fd/N.  When a
 * reader accepts an input, every view is rendered and read back: all
 * validation happens at mount (design.md), so a read that fails on an
 * accepted input is a bug, and the target aborts.
 */
#ifndef US_FUZZ_UTIL_H
#define US_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/source.h"
#include "view/view.h"

/* A memfd holding @data; aborts on failure (not the input's fault). */
static inline int fuzz_memfd(const void *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);

	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	return fd;
}

/* Read a whole view back in 64 KiB steps; it must never fail. */
static inline void fuzz_read_view(struct us_view *v)
{
	static char buf[1 << 16];

	for (uint64_t off = 0; off < v->size; off += sizeof(buf))
		if (us_view_read(v, buf, sizeof(buf), off) < 0)
			abort(); /* validated at mount: reads cannot fail */
	us_view_free(v);
}

/* model.safetensors, pytorch_model.bin and every tensors/<name>. */
static inline void fuzz_read_views(const struct us_statedict *sd)
{
	struct us_view *v = NULL;

	if (us_view_safetensors_new(sd, &v, NULL) == US_OK)
		fuzz_read_view(v);
	v = NULL;
	if (us_view_torch_new(sd, &v, NULL) == US_OK)
		fuzz_read_view(v);
	for (size_t i = 0; i < sd->ntensors; i++) {
		v = NULL;
		if (us_view_raw_new(sd, &sd->tensors[i], &v, NULL) == US_OK)
			fuzz_read_view(v);
	}
}

/* Write @len bytes of @data to @dir/@name (replacing it). */
static inline void fuzz_put(const char *dir, const char *name,
			    const void *data, size_t len)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || (len && write(fd, data, len) != (ssize_t)len))
		abort();
	close(fd);
}

/* Copy the fixture file @src (relative to US_FUZZ_FIXTURES) to @dir/@name. */
static inline void fuzz_copy_fixture(const char *src, const char *dir,
				     const char *name)
{
	char path[1024];
	struct stat st;
	void *buf;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", US_FUZZ_FIXTURES, src);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "fuzz: cannot open fixture %s\n", path);
		abort();
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || read(fd, buf, (size_t)st.st_size) != st.st_size)
		abort();
	close(fd);
	fuzz_put(dir, name, buf, (size_t)st.st_size);
	free(buf);
}

/* A fresh temporary directory under $TMPDIR. */
static inline void fuzz_tmpdir(char *dir, size_t len, const char *tag)
{
	snprintf(dir, len, "%s/us-fuzz-%s-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag);
	if (!mkdtemp(dir))
		abort();
}

#endif /* US_FUZZ_UTIL_H */
