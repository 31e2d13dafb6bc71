/*
 * test_readahead.c - read-ahead of a view's sources (view/readahead.c):
 * a sequential run of reads brings the next US_RA_WINDOW bytes of the
 * source into the page cache, also through a --dtype=bf16 cast (twice the
 * view's bytes); reads that do not continue each other, or a run shorter
 * than four requests, bring nothing.  Residency is checked with
 * mincore(2) on the source file after posix_fadvise(DONTNEED) evicted it
 * (skipped where that cannot evict: tmpfs).
 */
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "harness.h"
#include "source/source.h"
#include "tmpdir.h"
#include "view/readahead.h"
#include "view/view.h"

#define MIB (1u << 20)
#define DLEN (24u * MIB)
#define HDR "{\"w\":{\"dtype\":\"F32\",\"shape\":[6291456]," \
	    "\"data_offsets\":[0,25165824]}}"

static char path[4200];
static const struct us_view *v; /* the tensor's raw view */
static struct us_readahead *ra;
static uint64_t scale;           /* source bytes per view byte */

/* Pages of [@off, @off + @len) of the source file in the page cache. */
static size_t resident(uint64_t off, uint64_t len)
{
	int fd = open(path, O_RDONLY);
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = 0;
	unsigned char *vec = malloc(len / pg + 1);
	void *m = mmap(NULL, (size_t)(off + len), PROT_READ, MAP_SHARED, fd, 0);

	if (m != MAP_FAILED && vec &&
	    mincore((char *)m + off, (size_t)len, vec) == 0)
		for (size_t i = 0; i < len / pg; i++)
			n += vec[i] & 1;
	if (m != MAP_FAILED)
		munmap(m, (size_t)(off + len));
	free(vec);
	close(fd);
	return n;
}

static void evict(void)
{
	int fd = open(path, O_RDONLY);

	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static void test_ahead(void)
{
	size_t pages = (size_t)(DLEN - 10 * MIB) / (size_t)sysconf(_SC_PAGESIZE);

	CHECK(v->size * scale == DLEN);
	evict();
	CHECK(resident(10 * MIB, DLEN - 10 * MIB) < pages / 8);
	/* A run of three 1 MiB reads: not yet four requests' worth. */
	for (uint64_t off = 0; off < 3 * MIB; off += MIB)
		us_readahead_after(ra, v, off, MIB);
	CHECK(resident(10 * MIB, DLEN - 10 * MIB) < pages / 8);
	/* Two more: the rest of the source (within the window) is read. */
	for (uint64_t off = 3 * MIB; off < 5 * MIB; off += MIB)
		us_readahead_after(ra, v, off, MIB);
	CHECK(resident(10 * MIB, DLEN - 10 * MIB) == pages);
}

static void test_scattered(void)
{
	static const uint64_t at[] = { 20, 2, 14, 7, 22, 0, 11, 17 };
	size_t pages = (size_t)DLEN / (size_t)sysconf(_SC_PAGESIZE);

	evict();
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		us_readahead_after(ra, v, at[i] * MIB / scale, MIB / scale);
	CHECK(resident(0, DLEN) < pages / 8);
	us_readahead_after(NULL, v, 0, MIB); /* no read-ahead: nothing */
}

/* Open the file (cast to bf16 when @cast), run both tests on its view. */
static void run_all(bool cast)
{
	struct us_source_opts so = { .cast = cast, .cast_to = US_DT_BF16 };
	struct us_statedict *sd = NULL;
	struct us_view *raw = NULL;
	struct us_err err = {0};
	struct us_dir srcdir = US_DIR_NONE;

	CHECK(us_source_open(path, &so, &sd, &srcdir, &err) == US_OK);
	CHECK(sd && us_view_raw_array_new(sd, &raw, &err) == US_OK);
	ra = sd ? us_readahead_new(sd) : NULL;
	CHECK(ra != NULL);
	if (raw && ra) {
		v = &raw[0];
		scale = cast ? 2 : 1;
		fprintf(stderr, "%s:\n", cast ? "cast to bf16" : "as stored");
		RUN(test_ahead);
		RUN(test_scattered);
	}
	us_readahead_free(ra);
	us_view_raw_array_free(raw);
	us_sd_free(sd);
	us_dir_close(&srcdir);
}

int main(void)
{
	const char *dir = tmpdir_new();
	struct statfs fs;

	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	CHECK(tmpdir_write_st(dir, "m.safetensors", HDR, DLEN) == 0);
	if (statfs(dir, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
		fprintf(stderr, "skip: %s is tmpfs (DONTNEED cannot evict)\n", dir);
	} else {
		run_all(false);
		run_all(true);
	}
	tmpdir_rm(dir);
	TEST_MAIN_END();
}
