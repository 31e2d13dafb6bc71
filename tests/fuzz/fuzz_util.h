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

#include <dirent.h>
#include <errno.h>
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

/*
 * Is @st, returned by a codec for input held in memory, an honest refusal?
 * It must be what @err records, say why, and be about the input: a memfd
 * cannot fail to read, and a fuzzer's inputs are far below every memory
 * bound, so US_E_IO or US_E_NOMEM would be a kind relabelled on the way.
 */
static inline int fuzz_refusal_ok(enum us_status st, const struct us_err *err)
{
	return st == err->status && err->msg[0] &&
	       (st == US_E_FORMAT || st == US_E_UNSUPPORTED);
}

/* A memfd holding @data; aborts on failure (not the input's fault). */
static inline int fuzz_memfd(const void *data, size_t size)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);

	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	return fd;
}

/*
 * Put @data in the one memfd the whole run reuses and return its
 * /proc/self/fd path in @path: what a reader opens as a file.  (A fresh
 * memfd per input cost a memfd_create and a close every time.)
 */
static inline void fuzz_memfd_path(const void *data, size_t size,
				   char *path, size_t len)
{
	static int fd = -1;

	if (fd < 0)
		fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, 0) < 0 ||
	    (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
	snprintf(path, len, "/proc/self/fd/%d", fd);
}

/* Read a whole view back in 64 KiB steps; it must never fail.  A fresh
 * assembler each time: its cache names files by index, and every input is
 * a new file table. */
static inline void fuzz_read_view(struct us_view *v)
{
	static char buf[1 << 16];
	struct us_assembler *as;
	size_t n;

	if (us_assembler_new(NULL, &as, NULL) != US_OK)
		abort();
	for (uint64_t off = 0; off < v->size; off += sizeof(buf))
		if (us_view_read(as, v, buf, sizeof(buf), off, &n) != US_OK)
			abort(); /* validated at mount: reads cannot fail */
	us_assembler_free(as);
	us_view_free(v);
}

/* model.safetensors, optimizer.safetensors, pytorch_model.bin and every
 * tensors/<name>. */
static inline void fuzz_read_views(const struct us_statedict *sd)
{
	struct us_view *v = NULL;

	if (us_view_safetensors_new(sd, &v, NULL) == US_OK)
		fuzz_read_view(v);
	v = NULL;
	if (sd->optim && sd->optim->ntensors &&
	    us_view_safetensors_named(sd->optim, "optimizer.safetensors", &v,
				      NULL) == US_OK)
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

/* Copy the fixture directory @src (relative to US_FUZZ_FIXTURES) to @dst,
 * which is created, with everything below it. */
static inline void fuzz_copy_tree(const char *src, const char *dst)
{
	char path[1024], sub_src[1024], sub_dst[1024];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%s", US_FUZZ_FIXTURES, src);
	d = opendir(path);
	if (!d || (mkdir(dst, 0755) < 0 && errno != EEXIST)) {
		fprintf(stderr, "fuzz: cannot copy fixture %s\n", path);
		abort();
	}
	while ((e = readdir(d))) {
		struct stat st;

		if (e->d_name[0] == '.' && (!e->d_name[1] ||
		    (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		snprintf(sub_src, sizeof(sub_src), "%s/%s", src, e->d_name);
		snprintf(sub_dst, sizeof(sub_dst), "%s/%s", dst, e->d_name);
		snprintf(path, sizeof(path), "%s/%s", US_FUZZ_FIXTURES, sub_src);
		if (stat(path, &st) < 0)
			abort();
		if (S_ISDIR(st.st_mode))
			fuzz_copy_tree(sub_src, sub_dst);
		else
			fuzz_copy_fixture(sub_src, dst, e->d_name);
	}
	closedir(d);
}

/* The whole content of @path (malloc'd; *@len its size); aborts on failure. */
static inline void *fuzz_slurp(const char *path, size_t *len)
{
	struct stat st;
	void *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0)
		abort();
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || read(fd, buf, (size_t)st.st_size) != st.st_size)
		abort();
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

/* A path that no accepted mount may have opened: absolute or with "..". */
static inline void fuzz_check_inside(const struct us_statedict *sd)
{
	for (size_t i = 0; i < sd->nfiles; i++)
		if (strstr(sd->files[i].relpath, "..") ||
		    sd->files[i].relpath[0] == '/')
			abort(); /* a path outside SOURCE was opened */
}

/* A fresh temporary directory under $TMPDIR. */
static inline void fuzz_tmpdir(char *dir, size_t len, const char *tag)
{
	snprintf(dir, len, "%s/us-fuzz-%s-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag);
	if (!mkdtemp(dir))
		abort();
}

/*
 * Multi-file checkpoints (DeepSpeed): copies of fixture directories are
 * made once, and the input's first byte picks a slot -- one file of one
 * copy -- that the rest of the input replaces for one mount; the file is
 * put back afterwards.  make_seeds.py writes seeds in the same slot order.
 */
struct fuzz_slot {
	const char *fixture; /* relative to US_FUZZ_FIXTURES */
	const char *file;    /* relative to the fixture */
};

struct fuzz_slots {
	const struct fuzz_slot *v;
	size_t n;
	char dir[256];
	void **orig;
	size_t *len;
};

/* The copy of slot @i's fixture: "a/b" is copied to <dir>/a_b. */
static inline const char *fuzz_slot_root(const struct fuzz_slots *s,
					 size_t i, char *buf, size_t len)
{
	size_t at = (size_t)snprintf(buf, len, "%s/", s->dir);

	snprintf(buf + at, len - at, "%s", s->v[i].fixture);
	for (char *c = buf + at; *c; c++)
		if (*c == '/')
			*c = '_';
	return buf;
}

static inline void fuzz_slots_setup(struct fuzz_slots *s, const char *tag)
{
	char root[512], path[1024];

	fuzz_tmpdir(s->dir, sizeof(s->dir), tag);
	s->orig = calloc(s->n, sizeof(*s->orig));
	s->len = calloc(s->n, sizeof(*s->len));
	if (!s->orig || !s->len)
		abort();
	for (size_t i = 0; i < s->n; i++) {
		fuzz_slot_root(s, i, root, sizeof(root));
		if (access(root, F_OK) < 0)
			fuzz_copy_tree(s->v[i].fixture, root);
		snprintf(path, sizeof(path), "%s/%s", root, s->v[i].file);
		s->orig[i] = fuzz_slurp(path, &s->len[i]);
	}
}

/*
 * Mount the input with @opts: byte 0 picks the slot, the rest replaces its
 * file.  An accepted mount must stay inside its directory and read back.
 */
static inline void fuzz_slots_run(struct fuzz_slots *s,
				  const struct us_source_opts *opts,
				  const uint8_t *data, size_t size)
{
	struct us_statedict *sd = NULL;
	struct us_err err;
	char root[512];
	size_t i;
	struct us_dir srcdir = US_DIR_NONE;

	if (size == 0)
		return;
	if (!s->orig)
		fuzz_slots_setup(s, "ds");
	i = (data[0] & 0x7f) % s->n;
	fuzz_slot_root(s, i, root, sizeof(root));
	fuzz_put(root, s->v[i].file, data + 1, size - 1);
	if (us_source_open(root, opts, &sd, &srcdir, &err) == US_OK) {
		fuzz_check_inside(sd);
		fuzz_read_views(sd);
		us_dir_close(&srcdir);
		us_sd_free(sd);
	} else if (!err.msg[0]) {
		abort(); /* a refusal must say why */
	}
	fuzz_put(root, s->v[i].file, s->orig[i], s->len[i]);
}

#endif /* US_FUZZ_UTIL_H */
