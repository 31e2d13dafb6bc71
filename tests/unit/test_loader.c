/* test_loader.c - the loader API (lib/loader/unshardfs.h) and canon.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "harness.h"
#include "loader/unshardfs.h"
#include "source/canon.h"
#include "tmpdir.h"

#define BIG_ROWS 5ull
#define BIG_COLS (4ull << 20)
#define BIG (BIG_ROWS * BIG_COLS)

/* a: F32 [40, 3] at 0, b: F32 [2] at 480, m.big: U8 [5, 4 Mi] at 488. */
static const char *make_source(void)
{
	const char *dir = tmpdir_new();
	char json[512];

	snprintf(json, sizeof(json),
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[40,3],\"data_offsets\":[0,480]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[480,488]},"
		 "\"m.big\":{\"dtype\":\"U8\",\"shape\":[%llu,%llu],"
		 "\"data_offsets\":[488,%llu]}}",
		 BIG_ROWS, BIG_COLS, 488 + BIG);
	CHECK(tmpdir_write_st(dir, "model.safetensors", json, 488 + BIG) == 0);
	return dir;
}

/* Bytes [off, off + len) of the data section are (i & 255). */
static int data_ok(const unsigned char *p, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i] != ((off + i) & 255))
			return 0;
	return 1;
}

static void test_list_and_read(const char *dir)
{
	struct us_loader *ld;
	struct us_loader_tensor t;
	struct us_err err = {0};
	unsigned char buf[480], *big = malloc(BIG);
	long a;

	CHECK(us_loader_open(dir, NULL, &ld, &err) == US_OK);
	if (!ld || !big) {
		free(big);
		return;
	}
	CHECK(!us_loader_mounted(ld));
	CHECK(us_loader_count(ld) == 3);
	a = us_loader_find(ld, "a");
	CHECK(a == 0 && us_loader_find(ld, "zz") == -1);
	CHECK(us_loader_info(ld, 0, &t, &err) == US_OK);
	CHECK(!strcmp(t.name, "a") && !strcmp(t.dtype, "F32") && t.ndim == 2 &&
	      t.shape[0] == 40 && t.shape[1] == 3 && t.nbytes == 480 && t.tie == 0);
	CHECK(us_loader_info(ld, 3, &t, &err) == US_E_USAGE);
	CHECK(us_loader_read(ld, 0, 0, 40, buf, sizeof(buf), &err) == US_OK);
	CHECK(data_ok(buf, 0, 480));
	/* rows [10, 13): bytes [120, 156) of a */
	memset(buf, 0, sizeof(buf));
	CHECK(us_loader_read(ld, 0, 10, 13, buf, 36, &err) == US_OK);
	CHECK(data_ok(buf, 120, 36));
	CHECK(us_loader_read(ld, 0, 10, 13, buf, 35, &err) == US_E_USAGE);
	CHECK(us_loader_read(ld, 0, 3, 41, buf, sizeof(buf), &err) == US_E_USAGE);
	CHECK(strstr(err.msg, "a: rows [3, 41)") == err.msg);
	/* the big one, split over the threads, in one batch with b */
	{
		struct us_loader_req r[2] = {
			{ .tensor = 2, .off = 0, .len = BIG, .buf = big },
			{ .tensor = 1, .off = 0, .len = 8, .buf = buf },
		};

		CHECK(us_loader_read_many(ld, r, 2, &err) == US_OK);
		CHECK(data_ok(big, 488, BIG) && data_ok(buf, 480, 8));
		r[1].len = 9;
		CHECK(us_loader_read_many(ld, r, 2, &err) == US_E_USAGE);
	}
	/* a's one chunk: its box, and its bytes read as a chunk request */
	{
		const uint64_t *o = NULL, *sz = NULL;
		struct us_loader_req r = { .tensor = 0, .off = 12, .len = 24,
					   .buf = buf, .chunk = 1 };

		CHECK(us_loader_chunk(ld, 0, 0, &o, &sz) == 1);
		CHECK(o && sz && o[0] == 0 && o[1] == 0 && sz[0] == 40 && sz[1] == 3);
		CHECK(us_loader_chunk(ld, 99, 0, &o, &sz) == 0);
		memset(buf, 0, sizeof(buf));
		CHECK(us_loader_read_many(ld, &r, 1, &err) == US_OK);
		CHECK(data_ok(buf, 12, 24));
		r.chunk = 2;
		CHECK(us_loader_read_many(ld, &r, 1, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, "a: no chunk 1 (1 chunks)") == err.msg);
		r.chunk = 1;
		r.len = 480;
		CHECK(us_loader_read_many(ld, &r, 1, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, "outside its chunk 0's 480 bytes") != NULL);
	}
	/* columns [1, 3) of a's rows [5, 10): five runs of 8 bytes */
	{
		struct us_loader_slice sl = { .dim = 1, .start = 1, .stop = 3,
					      .outer0 = 5, .outer1 = 10 };
		int ok = 1;

		memset(buf, 0, sizeof(buf));
		CHECK(us_loader_read_slice(ld, 0, &sl, buf, 40, &err) == US_OK);
		for (uint64_t o = 0; o < 5; o++)
			ok &= data_ok(buf + o * 8, (5 + o) * 12 + 4, 8);
		CHECK(ok);
		CHECK(us_loader_read_slice(ld, 0, &sl, buf, 39, &err) == US_E_USAGE);
		sl.outer1 = 41;
		CHECK(us_loader_read_slice(ld, 0, &sl, buf, 480, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, "outer indices [5, 41): want outer0 <= "
			     "outer1 <= 40") != NULL);
		sl = (struct us_loader_slice){ .dim = 1, .start = 2, .stop = 1,
					       .outer1 = 1 };
		CHECK(us_loader_read_slice(ld, 0, &sl, buf, 480, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, "a: indices [2, 1) of dim 1: want start <= "
			     "stop <= 3") == err.msg);
		sl = (struct us_loader_slice){ .dim = 2, .stop = 1, .outer1 = 1 };
		CHECK(us_loader_read_slice(ld, 0, &sl, buf, 480, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, "a: no dim 2 (2 dims)") == err.msg);
	}
	/* rank 1 of 5 of m.big */
	CHECK(us_loader_read(ld, 2, 1, 2, big, BIG, &err) == US_OK);
	CHECK(data_ok(big, 488 + BIG_COLS, BIG_COLS));
	us_loader_close(ld);
	free(big);
}

/* hugepages: the same bytes, into fresh memory whose start is not page
 * aligned (the advice covers only the aligned interior) and into memory
 * already written (populating keeps nothing but the pread's bytes). */
static void test_hugepages(const char *dir)
{
	struct us_loader_opts o = { .hugepages = true, .threads = 2 };
	size_t cap = BIG + (8u << 20);
	char *m = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char *big = (unsigned char *)m + 4097;
	struct us_loader *ld;
	struct us_err err = {0};
	struct us_loader_req r = { .tensor = 2, .len = BIG, .buf = big };

	CHECK(m != MAP_FAILED);
	CHECK(us_loader_open(dir, &o, &ld, &err) == US_OK);
	if (!ld || m == MAP_FAILED)
		return;
	CHECK(us_loader_read_many(ld, &r, 1, &err) == US_OK);
	CHECK(data_ok(big, 488, BIG));
	memset(big, 0xab, BIG);
	r.off = 1000;
	r.len = BIG - 1000;
	CHECK(us_loader_read_many(ld, &r, 1, &err) == US_OK);
	CHECK(data_ok(big, 1488, BIG - 1000));
	CHECK(big[BIG - 1000] == 0xab);
	us_loader_close(ld);
	munmap(m, cap);
}

static void test_options(const char *dir)
{
	const char *strip[] = { "m." };
	struct us_loader_opts o = { .dtype = "bf16", .strip_prefix = strip,
				    .nstrip = 1, .threads = 2 };
	struct us_loader *ld;
	struct us_loader_tensor t;
	struct us_err err = {0};

	CHECK(us_loader_open(dir, &o, &ld, &err) == US_OK);
	if (!ld)
		return;
	CHECK(us_loader_find(ld, "big") >= 0);
	CHECK(us_loader_info(ld, (size_t)us_loader_find(ld, "a"), &t, &err) == US_OK);
	CHECK(!strcmp(t.dtype, "BF16") && t.nbytes == 240);
	CHECK(!strcmp(us_loader_options(ld), "format=auto,no-unwrap=no,"
		      "strip-prefix=m.,dtype=bf16,ties=auto,deepspeed-weights=fp32"));
	us_loader_close(ld);
	o.dtype = "f8";
	CHECK(us_loader_open(dir, &o, &ld, &err) == US_E_USAGE && !ld);
	CHECK(strstr(err.msg, "unknown dtype 'f8'") != NULL);
	o = (struct us_loader_opts){ .format = "dcp" };
	CHECK(us_loader_open(dir, &o, &ld, &err) != US_OK && !ld);
	CHECK(us_loader_open("/nonexistent/x", NULL, &ld, &err) == US_E_IO);
}

/* A remote SOURCE's store options: only those set, round trip. */
static void test_canon_remote(void)
{
	struct us_source_opts so = { .ties = US_TIES_AUTO, .remote = {
		.endpoint_url = "http://127.0.0.1:9000", .region = "eu-west-1",
		.addressing = US_ADDR_PATH, .no_sign = true,
		.block_size = 1 << 20, .retries = 2, .cache_dir = "/var/c" } };
	struct us_canon_opts c;
	struct us_err err = {0};
	char a[512], b[512];

	us_source_opts_canon(&so, a, sizeof(a));
	CHECK(strstr(a, ",endpoint-url=http://127.0.0.1:9000,region=eu-west-1,"
		      "addressing=path,no-sign-request=yes,block-size=1048576,"
		      "cache-dir=/var/c,retries=2") != NULL);
	CHECK(!strstr(a, "profile") && !strstr(a, "timeout"));
	CHECK(us_source_opts_decode(a, &c, &err) == US_OK);
	CHECK(c.so.remote.endpoint_url &&
	      !strcmp(c.so.remote.endpoint_url, "http://127.0.0.1:9000") &&
	      c.so.remote.addressing == US_ADDR_PATH && c.so.remote.no_sign &&
	      c.so.remote.block_size == 1 << 20 && c.so.remote.retries == 2 &&
	      !c.so.remote.profile && !c.so.remote.timeout_s);
	us_source_opts_canon(&c.so, b, sizeof(b));
	CHECK(!strcmp(a, b));
	CHECK(us_source_opts_decode("addressing=sideways", &c, &err) ==
	      US_E_FORMAT);
	CHECK(us_source_opts_decode("retries=-1", &c, &err) == US_E_FORMAT);
	CHECK(us_source_opts_decode("no-sign-request=no", &c, &err) ==
	      US_E_FORMAT);
	/* a local SOURCE's string is what it always was */
	so.remote = (struct us_remote_opts){0};
	us_source_opts_canon(&so, a, sizeof(a));
	CHECK(!strcmp(a, "format=auto,no-unwrap=no,dtype=keep,ties=auto,"
		      "deepspeed-weights=fp32"));
}

static void test_canon(void)
{
	const char *strip[] = { "a,b=%c", "x." };
	struct us_source_opts so = { .format = "dcp", .names = { .no_unwrap = true,
		.strip_prefix = strip, .nstrip = 2 }, .ties = US_TIES_OFF,
		.cast = true, .cast_to = US_DT_F16, .ds_weights = US_DS_WEIGHTS_MODULE };
	struct us_canon_opts c;
	struct us_err err = {0};
	char a[512], b[512];

	CHECK(us_source_opts_canon(&so, a, sizeof(a)) == strlen(a));
	CHECK(!strcmp(a, "format=dcp,no-unwrap=yes,strip-prefix=a%2Cb%3D%25c,"
		      "strip-prefix=x.,dtype=f16,ties=off,deepspeed-weights=module"));
	CHECK(us_source_opts_decode(a, &c, &err) == US_OK);
	CHECK(c.so.names.nstrip == 2 && !strcmp(c.strip[0], "a,b=%c"));
	us_source_opts_canon(&c.so, b, sizeof(b));
	CHECK(!strcmp(a, b));
	CHECK(us_source_opts_canon(&so, a, 10) > 9 && strlen(a) == 9);
	CHECK(us_source_opts_decode("format=auto,unknown-knob=1", &c, &err) ==
	      US_E_UNSUPPORTED);
	CHECK(strstr(err.msg, "'unknown-knob'") != NULL);
	/* recipe and overlay only when given; the overlay is absolute */
	so.recipe = "torchtitan-llama3";
	so.overlay = "/ckpt/hf";
	us_source_opts_canon(&so, a, sizeof(a));
	CHECK(strstr(a, ",recipe=torchtitan-llama3,overlay=/ckpt/hf") != NULL);
	CHECK(us_source_opts_decode(a, &c, &err) == US_OK &&
	      !strcmp(c.so.recipe, "torchtitan-llama3") &&
	      !strcmp(c.so.overlay, "/ckpt/hf"));
	CHECK(us_source_opts_decode("overlay=hf", &c, &err) == US_E_FORMAT);
	CHECK(us_source_opts_decode("dtype=f8", &c, &err) == US_E_FORMAT);
	CHECK(us_source_opts_decode("format", &c, &err) == US_E_FORMAT);
	CHECK(us_source_opts_decode("format=%4", &c, &err) == US_E_FORMAT);
	CHECK(us_source_opts_decode("", &c, &err) == US_OK);
	test_canon_remote();
}

static void test_identity(const char *dir)
{
	struct us_source_opts so = { .ties = US_TIES_AUTO };
	struct us_statedict *sd;
	struct us_err err = {0};
	char before[64], after[64], path[4200];
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 12345, 0 } };
	struct us_dir srcdir;

	CHECK(us_source_open(dir, &so, &sd, &srcdir, &err) == US_OK);
	if (!sd)
		return;
	us_sd_identity(sd, before, sizeof(before));
	CHECK(!strncmp(before, "v1:1:", 5));
	us_sd_free(sd);
	us_dir_close(&srcdir);
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
	CHECK(us_source_open(dir, &so, &sd, &srcdir, &err) == US_OK);
	if (!sd)
		return;
	us_sd_identity(sd, after, sizeof(after));
	CHECK(strcmp(before, after) != 0);
	us_sd_free(sd);
	us_dir_close(&srcdir);
}

int main(void)
{
	const char *dir = make_source();
	char keep[4096];

	snprintf(keep, sizeof(keep), "%s", dir);
	RUN(test_canon);
	test_list_and_read(keep);
	fprintf(stderr, "ran test_list_and_read\n");
	test_hugepages(keep);
	fprintf(stderr, "ran test_hugepages\n");
	test_options(keep);
	fprintf(stderr, "ran test_options\n");
	test_identity(keep);
	fprintf(stderr, "ran test_identity\n");
	tmpdir_rm(keep);
	TEST_MAIN_END();
}
