/*
 * test_safetensors.c - the safetensors reader's validation (every refusal
 * names the offending file) and the model.safetensors view's bytes.
 */
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include "cjson/cJSON.h"
#include "harness.h"
#include "view_read.h"
#include "source/source.h"
#include "tmpdir.h"
#include "view/view.h"

#define T_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}"
#define T_B "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[16,19]}"

/* Open @path; expect @want, and a message starting with @prefix. */
static void expect_open(const char *path, enum us_status want, const char *prefix)
{
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	struct us_dir srcdir = US_DIR_NONE;
	enum us_status rc = us_source_open(path, NULL, &sd, &srcdir, &err);

	CHECK(rc == want);
	if (rc != want || (prefix && strncmp(err.msg, prefix, strlen(prefix))))
		fprintf(stderr, "  %s: got %d '%s'\n", path, rc, err.msg);
	if (prefix)
		CHECK(strncmp(err.msg, prefix, strlen(prefix)) == 0);
	us_dir_close(&srcdir);
	us_sd_free(sd);
}

static void bad_file(const char *json, size_t dlen, enum us_status want)
{
	const char *d = tmpdir_new();
	char path[4200];

	CHECK(tmpdir_write_st(d, "m.safetensors", json, dlen) == 0);
	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	expect_open(path, want, "m.safetensors: ");
	tmpdir_rm(d);
}

static void test_refusals(void)
{
	bad_file("{" T_A "," T_B "}", 18, US_E_FORMAT);  /* truncated data */
	bad_file("{" T_A "," T_B "}", 20, US_E_FORMAT);  /* trailing byte */
	bad_file("{" T_A "}", 15, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, US_E_FORMAT); /* hole */
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, US_E_FORMAT); /* overlap */
	bad_file("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, US_E_UNSUPPORTED);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, US_E_FORMAT);
	bad_file("{" T_A "," T_A "}", 16, US_E_FORMAT);  /* duplicate key */
	bad_file("{\"__metadata__\":{\"x\":1}," T_A "}", 16, US_E_FORMAT);
	bad_file("{\"a\": nonsense}", 0, US_E_FORMAT);
	bad_file("[1,2]", 0, US_E_FORMAT);
	bad_file("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", 1, US_E_FORMAT);
}

static void test_header_lengths(void)
{
	const char *d = tmpdir_new();
	unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
	unsigned char past[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
	unsigned char lim[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000001 */
	char path[4200];

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(tmpdir_write(d, "m.safetensors", huge, sizeof(huge)) == 0);
	expect_open(path, US_E_FORMAT, "m.safetensors: its 8-byte header length");
	CHECK(tmpdir_write(d, "m.safetensors", past, sizeof(past)) == 0);
	expect_open(path, US_E_FORMAT, "m.safetensors: its 8-byte header length");
	CHECK(tmpdir_write(d, "m.safetensors", lim, sizeof(lim)) == 0);
	expect_open(path, US_E_FORMAT, "m.safetensors: its 8-byte header length");
	CHECK(tmpdir_write(d, "m.safetensors", "abc", 3) == 0);
	expect_open(path, US_E_FORMAT, "m.safetensors: ");
	tmpdir_rm(d);
}

static void test_index_refusals(void)
{
	const char *d = tmpdir_new();
	char dir[4200];

	snprintf(dir, sizeof(dir), "%s", d);
	CHECK(tmpdir_write_st(dir, "s1.safetensors", "{" T_A "}", 16) == 0);
	tmpdir_write(dir, "model.safetensors.index.json",
		     "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", 41);
	expect_open(dir, US_E_FORMAT, "model.safetensors.index.json: ");
	tmpdir_write(dir, "model.safetensors.index.json",
		     "{\"weight_map\":{\"a\":\"/tmp/s1.safetensors\"}}", 43);
	expect_open(dir, US_E_FORMAT, "model.safetensors.index.json: ");
	tmpdir_write(dir, "model.safetensors.index.json",
		     "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}", 58);
	expect_open(dir, US_E_IO, "s2.safetensors: ");
	CHECK(tmpdir_write_st(dir, "s2.safetensors", "{" T_A "}", 16) == 0);
	expect_open(dir, US_E_FORMAT, NULL); /* 'a' in both shards */
	CHECK(tmpdir_write_st(dir, "s2.safetensors",
			      "{\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3) == 0);
	expect_open(dir, US_OK, NULL);
	tmpdir_write(dir, "model.safetensors.index.json",
		     "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}", 58);
	expect_open(dir, US_E_FORMAT, "model.safetensors.index.json: ");
	tmpdir_write(dir, "model.safetensors.index.json", "{\"weight_map\":[]}", 17);
	expect_open(dir, US_E_FORMAT, "model.safetensors.index.json: ");
	tmpdir_rm(d);
}

static void test_noindex_dir(void)
{
	const char *d = tmpdir_new();
	char dir[4200];

	snprintf(dir, sizeof(dir), "%s", d);
	expect_open(dir, US_E_FORMAT, ".: ");
	CHECK(tmpdir_write_st(dir, "x.safetensors", "{" T_A "}", 16) == 0);
	CHECK(tmpdir_write_st(dir, "y.safetensors", "{" T_A "}", 16) == 0);
	expect_open(dir, US_E_FORMAT, NULL);
	CHECK(tmpdir_write_st(dir, "y.safetensors",
			      "{\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,2]}}", 2) == 0);
	expect_open(dir, US_OK, NULL);
	tmpdir_rm(d);
}

/* The view: writer order, aligned offsets, format=pt, bytes from the sources. */
static void test_view_bytes(void)
{
	const char *d = tmpdir_new();
	struct us_statedict *sd = NULL;
	struct us_view *v = NULL;
	struct us_err err = {0};
	char path[4200], buf[512];
	struct us_dir srcdir = US_DIR_NONE;
	uint64_t hlen = 0;
	cJSON *h, *e;

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(tmpdir_write_st(d, "m.safetensors", "{\"__metadata__\":{\"k\":\"v\"},"
			      "\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[0,3]},"
			      "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[3,19]}}", 19) == 0);
	CHECK(us_source_open(path, NULL, &sd, &srcdir, &err) == US_OK);
	CHECK(sd && us_view_safetensors_new(sd, &v, &err) == US_OK);
	if (!v)
		goto out;
	CHECK(v->size < sizeof(buf));
	CHECK(view_read(v, buf, sizeof(buf), 0) == (long long)v->size);
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | (unsigned char)buf[i];
	CHECK((8 + hlen) % 8 == 0 && 8 + hlen + 19 == v->size);
	h = cJSON_ParseWithLength(buf + 8, hlen);
	CHECK(h != NULL);
	CHECK(strncmp(buf + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"a\":", 36) == 0);
	e = cJSON_GetObjectItem(cJSON_GetObjectItem(h, "b"), "data_offsets");
	CHECK(e && cJSON_GetArrayItem(e, 0)->valueint == 16);
	/* a's bytes were source bytes 3..18, b's 0..2 (value = source offset). */
	CHECK((unsigned char)buf[8 + hlen] == 3 && (unsigned char)buf[8 + hlen + 15] == 18);
	CHECK((unsigned char)buf[8 + hlen + 16] == 0 && (unsigned char)buf[8 + hlen + 18] == 2);
	CHECK(view_read(v, buf, 5, v->size - 2) == 2);
	CHECK(view_read(v, buf, 5, v->size) == 0);
	cJSON_Delete(h);
out:
	us_view_free(v);
	us_sd_free(sd);
	tmpdir_rm(d);
}

int main(void)
{
	RUN(test_refusals);
	RUN(test_header_lengths);
	RUN(test_index_refusals);
	RUN(test_noindex_dir);
	RUN(test_view_bytes);
	TEST_MAIN_END();
}
