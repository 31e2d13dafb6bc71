/*
 * test_raw.c - the tensors/<name> view: its bytes are the tensor's bytes in
 * the source, for several dtypes and shapes (scalar and empty included),
 * whole and in pieces; and its xattr values.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "view_read.h"
#include "source/source.h"
#include "tmpdir.h"
#include "view/view.h"

/* Data bytes of a tmpdir_write_st file are (position in data) & 255. */
#define HDR "{" \
	"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}," \
	"\"c\":{\"dtype\":\"F64\",\"shape\":[3,1],\"data_offsets\":[24,48]}," \
	"\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[48,50]}," \
	"\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[50,50]}," \
	"\"x/y%z\":{\"dtype\":\"I8\",\"shape\":[5],\"data_offsets\":[50,55]}," \
	"\"big\":{\"dtype\":\"U8\",\"shape\":[3,100],\"data_offsets\":[55,355]}}"
#define DLEN 355

struct want {
	const char *name, *dtype, *shape;
	uint64_t begin, end;
};

static const struct want wants[] = {
	{ "a", "F32", "2,3", 0, 24 },
	{ "c", "F64", "3,1", 24, 48 },
	{ "s", "BF16", "", 48, 50 },
	{ "e", "F32", "0,4", 50, 50 },
	{ "x/y%z", "I8", "5", 50, 55 },
	{ "big", "U8", "3,100", 55, 355 },
};

static struct us_statedict *open_st(const char *dir, struct us_dir *srcdir)
{
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	char path[4200];

	snprintf(path, sizeof(path), "%s/m.safetensors", dir);
	if (us_source_open(path, NULL, &sd, srcdir, &err) != US_OK)
		fprintf(stderr, "  open: %s\n", err.msg);
	return sd;
}

/* The whole view and every (offset, length) piece of it, against the
 * source's bytes; a read past the end gives 0 bytes. */
static void check_bytes(const struct us_view *v, const struct want *w)
{
	unsigned char got[400], expect[400];
	uint64_t n = w->end - w->begin;
	int bad = 0;

	CHECK(v->size == n);
	for (uint64_t i = 0; i < n; i++)
		expect[i] = (unsigned char)((w->begin + i) & 255);
	for (uint64_t off = 0; off <= n; off += (n > 40 ? 13 : 1)) {
		for (uint64_t len = 0; off + len <= n; len += (n > 40 ? 29 : 1)) {
			memset(got, 0xEE, sizeof(got));
			if (view_read(v, (char *)got, len, off) != (long long)len ||
			    memcmp(got, expect + off, len) != 0 || got[len] != 0xEE)
				bad++;
		}
	}
	CHECK(bad == 0);
	CHECK(view_read(v, (char *)got, 8, n) == 0);
	CHECK(view_read(v, (char *)got, sizeof(got), 0) == (long long)n);
}

static void check_xattr(const struct us_view *v, const char *name,
			const char *want)
{
	struct us_sbuf b;
	int rc;

	us_sbuf_init(&b);
	rc = us_view_raw_xattr(v, name, &b);
	CHECK(rc == 0);
	CHECK(b.len == strlen(want) && (b.len == 0 || memcmp(b.p, want, b.len) == 0));
	if (rc != 0 || b.len != strlen(want) || (b.len && memcmp(b.p, want, b.len)))
		fprintf(stderr, "  %s: got '%.*s', want '%s'\n", name,
			(int)b.len, b.p ? b.p : "", want);
	us_sbuf_free(&b);
}

static void test_bytes_and_xattrs(void)
{
	const char *d = tmpdir_new();
	struct us_statedict *sd;
	struct us_dir srcdir = US_DIR_NONE;

	CHECK(tmpdir_write_st(d, "m.safetensors", HDR, DLEN) == 0);
	sd = open_st(d, &srcdir);
	CHECK(sd != NULL);
	for (size_t i = 0; sd && i < sizeof(wants) / sizeof(wants[0]); i++) {
		const struct us_tensor *t = us_sd_find(sd, wants[i].name);
		struct us_view *v = NULL;
		struct us_err err = {0};

		CHECK(t != NULL);
		if (!t || us_view_raw_new(sd, t, &v, &err) != US_OK) {
			CHECK(0);
			continue;
		}
		CHECK(strcmp(v->name, wants[i].name) == 0);
		CHECK(us_view_raw_tensor(v) == t);
		check_bytes(v, &wants[i]);
		check_xattr(v, US_XATTR_DTYPE, wants[i].dtype);
		check_xattr(v, US_XATTR_SHAPE, wants[i].shape);
		check_xattr(v, US_XATTR_SOURCE, "m.safetensors");
		us_view_free(v);
	}
	us_dir_close(&srcdir);
	us_sd_free(sd);
	tmpdir_rm(d);
}

/* The one-block array: indexed like sd->tensors, same bytes. */
static void test_array(void)
{
	const char *d = tmpdir_new();
	struct us_view *raw = NULL;
	struct us_err err = {0};
	struct us_statedict *sd;
	struct us_dir srcdir = US_DIR_NONE;

	CHECK(tmpdir_write_st(d, "m.safetensors", HDR, DLEN) == 0);
	sd = open_st(d, &srcdir);
	CHECK(sd != NULL);
	if (sd && us_view_raw_array_new(sd, &raw, &err) == US_OK) {
		for (size_t i = 0; i < sizeof(wants) / sizeof(wants[0]); i++) {
			const struct us_tensor *t = us_sd_find(sd, wants[i].name);
			size_t k = t ? (size_t)(t - sd->tensors) : 0;

			CHECK(t && us_view_raw_tensor(&raw[k]) == t);
			if (t)
				check_bytes(&raw[k], &wants[i]);
		}
	} else {
		CHECK(0);
	}
	us_view_raw_array_free(raw);
	us_dir_close(&srcdir);
	us_sd_free(sd);
	tmpdir_rm(d);
}

/* Unknown names, and views that are not raw, have no xattrs. */
static void test_xattr_refusals(void)
{
	const char *d = tmpdir_new();
	struct us_view *st = NULL, *v = NULL;
	struct us_err err = {0};
	struct us_statedict *sd;
	struct us_sbuf b;
	struct us_dir srcdir = US_DIR_NONE;

	CHECK(tmpdir_write_st(d, "m.safetensors", HDR, DLEN) == 0);
	sd = open_st(d, &srcdir);
	CHECK(sd != NULL);
	if (sd && us_view_safetensors_new(sd, &st, &err) == US_OK &&
	    us_view_raw_new(sd, us_sd_find(sd, "a"), &v, &err) == US_OK) {
		us_sbuf_init(&b);
		CHECK(us_view_raw_tensor(st) == NULL);
		CHECK(us_view_raw_xattr(st, US_XATTR_DTYPE, &b) == US_E_USAGE);
		CHECK(us_view_raw_xattr(v, "user.unshardfs.nope", &b) == US_E_USAGE);
		CHECK(us_view_raw_xattr(v, "user.unshardfs", &b) == US_E_USAGE);
		CHECK(b.len == 0);
		us_sbuf_free(&b);
	} else {
		CHECK(0);
	}
	CHECK(us_raw_xattr_list_len == sizeof(US_XATTR_DTYPE) +
	      sizeof(US_XATTR_SHAPE) + sizeof(US_XATTR_SOURCE));
	CHECK(strcmp(us_raw_xattr_list, US_XATTR_DTYPE) == 0);
	us_view_free(st);
	us_view_free(v);
	us_dir_close(&srcdir);
	us_sd_free(sd);
	tmpdir_rm(d);
}

/* A tensor in two row chunks from two files: bytes in row-major order, and
 * the source names both files and the chunk count. */
static void test_two_chunks(void)
{
	const char *d = tmpdir_new();
	const uint64_t shape[2] = {2, 8};
	unsigned char f0[8], f1[16], got[16];
	struct us_statedict *sd = us_sd_new();
	struct us_err err = {0};
	struct us_view *v = NULL;
	struct us_tensor *t;
	uint32_t i0 = 0, i1 = 0;
	struct us_dir dir = US_DIR_NONE;

	for (int i = 0; i < 8; i++)
		f0[i] = (unsigned char)i;
	for (int i = 0; i < 16; i++)
		f1[i] = (unsigned char)(100 + i);
	CHECK(tmpdir_write(d, "__0_0.distcp", f0, sizeof(f0)) == 0);
	CHECK(tmpdir_write(d, "__1_0.distcp", f1, sizeof(f1)) == 0);
	CHECK(us_dir_open_path(d, &dir) == 0);
	CHECK(us_sd_open_file(sd, &dir, "__0_0.distcp", &i0, &err) == US_OK);
	CHECK(us_sd_open_file(sd, &dir, "__1_0.distcp", &i1, &err) == US_OK);
	t = us_sd_add_tensor(sd, "w", US_DT_U8, 2, shape, 2, "test", &err);
	CHECK(t != NULL);
	if (t) {
		((uint64_t *)t->chunks[0].sizes)[0] = 1;
		((uint64_t *)t->chunks[0].sizes)[1] = 8;
		t->chunks[0].src.file = i0;
		t->chunks[0].src.dtype = US_DT_U8;
		((uint64_t *)t->chunks[1].offsets)[0] = 1;
		((uint64_t *)t->chunks[1].sizes)[0] = 1;
		((uint64_t *)t->chunks[1].sizes)[1] = 8;
		t->chunks[1].src.file = i1;
		t->chunks[1].src.offset = 8;
		t->chunks[1].src.dtype = US_DT_U8;
	}
	CHECK(us_sd_finalize(sd, &err) == US_OK);
	t = (struct us_tensor *)us_sd_find(sd, "w");
	if (t && us_view_raw_new(sd, t, &v, &err) == US_OK) {
		CHECK(view_read(v, (char *)got, 16, 0) == 16);
		CHECK(memcmp(got, f0, 8) == 0 && memcmp(got + 8, f1 + 8, 8) == 0);
		CHECK(view_read(v, (char *)got, 4, 6) == 4);
		CHECK(got[0] == 6 && got[1] == 7 && got[2] == 108 && got[3] == 109);
		check_xattr(v, US_XATTR_SOURCE, "__0_0.distcp,__1_0.distcp (2 chunks)");
		check_xattr(v, US_XATTR_SHAPE, "2,8");
		check_xattr(v, US_XATTR_DTYPE, "U8");
	} else {
		CHECK(0);
	}
	us_view_free(v);
	us_sd_free(sd);
	us_dir_close(&dir);
	tmpdir_rm(d);
}

int main(void)
{
	RUN(test_bytes_and_xattrs);
	RUN(test_array);
	RUN(test_xattr_refusals);
	RUN(test_two_chunks);
	TEST_MAIN_END();
}
