/*
 * test_torchzip.c - the pytorch_model.bin view: its zip structure walked
 * by an independent reader (end records, zip64, central directory, local
 * headers, 64-byte data alignment, descriptors), its data bytes, its
 * determinism, reads in odd pieces, the zip64 layout past 4 GiB (over a
 * sparse file) and the refusal of a dtype torch cannot express.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/crc32.h"
#include "codec/zipw.h"
#include "file_fd.h"
#include "harness.h"
#include "view_read.h"
#include "source/source.h"
#include "tmpdir.h"
#include "view/view.h"

#define U32M 0xffffffffu

struct zent {
	char name[64];
	uint64_t lho, size, data;
	uint32_t crc;
};

struct zinfo {
	struct zent e[32];
	size_t n;
	uint64_t cd_off;
};

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

static bool rd(const struct us_view *v, uint64_t off, void *buf, size_t n)
{
	return view_read(v, buf, n, off) == (long long)n;
}

/* The end records: zip64 end, locator, classic end; returns the count. */
static bool walk_end(const struct us_view *v, struct zinfo *zi, uint64_t *n,
		     uint64_t *cd_size)
{
	unsigned char e[22], l[20], z[56];
	uint64_t z64 = v->size - 22 - 20 - 56;

	if (!rd(v, v->size - 22, e, 22) || !rd(v, v->size - 42, l, 20) ||
	    !rd(v, z64, z, 56))
		return false;
	CHECK(le(e, 4) == 0x06054b50 && le(e + 20, 2) == 0);
	CHECK(le(l, 4) == 0x07064b50 && le(l + 8, 8) == z64 && le(l + 16, 4) == 1);
	CHECK(le(z, 4) == 0x06064b50 && le(z + 4, 8) == 44);
	CHECK(le(z + 12, 2) == 0x031e && le(z + 14, 2) == 45);
	CHECK(le(z + 16, 8) == 0); /* disk numbers */
	*n = le(z + 24, 8);
	*cd_size = le(z + 40, 8);
	zi->cd_off = le(z + 48, 8);
	CHECK(le(z + 32, 8) == *n);
	CHECK(zi->cd_off + *cd_size == z64);
	CHECK(le(e + 8, 2) == (*n < 0xffff ? *n : 0xffff));
	CHECK(le(e + 12, 4) == (*cd_size < U32M ? *cd_size : U32M));
	CHECK(le(e + 16, 4) == (zi->cd_off < U32M ? zi->cd_off : U32M));
	return *n <= 32;
}

/* One central directory entry at @off; returns its length, 0 on error. */
static uint64_t walk_central(const struct us_view *v, uint64_t off,
			     struct zent *ze)
{
	unsigned char h[46], x[64];
	uint64_t nl, el, csize, usize, lho;
	const unsigned char *f = x + 4;

	if (!rd(v, off, h, 46) || le(h, 4) != 0x02014b50)
		return 0;
	nl = le(h + 28, 2);
	el = le(h + 30, 2);
	if (nl >= sizeof(ze->name) || el > sizeof(x) || le(h + 32, 2) ||
	    !rd(v, off + 46, ze->name, nl) || !rd(v, off + 46 + nl, x, el))
		return 0;
	ze->name[nl] = 0;
	CHECK(le(h + 10, 2) == 0 && le(h + 12, 4) == 0); /* stored, time 0 */
	ze->crc = (uint32_t)le(h + 16, 4);
	csize = le(h + 20, 4);
	usize = le(h + 24, 4);
	lho = le(h + 42, 4);
	CHECK(el == 0 || le(x, 2) == 1);
	if (usize == U32M) {
		usize = le(f, 8);
		csize = le(f + 8, 8);
		f += 16;
	}
	if (lho == U32M) {
		lho = le(f, 8);
		f += 8;
	}
	CHECK((uint64_t)(f - x) == (el ? el : 4));
	CHECK(csize == usize);
	CHECK(le(h + 8, 2) == (usize ? 0x0808 : 0x0800));
	ze->size = usize;
	ze->lho = lho;
	return 46 + nl + el;
}

/* The local header of @ze: name, zip64 field iff needed, "FB" padding
 * last, data on a 64-byte boundary; then the data descriptor.  Returns
 * where the next local header must start. */
static uint64_t walk_local(const struct us_view *v, struct zent *ze)
{
	unsigned char h[30], x[128], d[24];
	char name[64];
	uint64_t nl, el, pos = 0, desc;
	bool z64 = ze->size >= U32M || ze->lho >= U32M;

	if (!rd(v, ze->lho, h, 30) || le(h, 4) != 0x04034b50)
		return 0;
	nl = le(h + 26, 2);
	el = le(h + 28, 2);
	if (nl >= sizeof(name) || el > sizeof(x) ||
	    !rd(v, ze->lho + 30, name, nl) || !rd(v, ze->lho + 30 + nl, x, el))
		return 0;
	name[nl] = 0;
	CHECK(strcmp(name, ze->name) == 0);
	CHECK(le(h + 6, 2) == (ze->size ? 0x0808 : 0x0800));
	CHECK(le(h + 14, 4) == 0 && le(h + 18, 4) == 0 && le(h + 22, 4) == 0);
	if (z64) {
		CHECK(le(x, 2) == 1);
		pos = 4 + le(x + 2, 2);
		CHECK(pos == 4u + (ze->size >= U32M ? 16u : 0u) +
		      (ze->lho >= U32M ? 8u : 0u));
		if (ze->size >= U32M)
			CHECK(le(x + 4, 8) == ze->size);
		if (ze->lho >= U32M)
			CHECK(le(x + pos - 8, 8) == ze->lho);
	}
	CHECK(le(x + pos, 2) == 0x4246 && pos + 4 + le(x + pos + 2, 2) == el);
	for (uint64_t i = pos + 4; i < el; i++)
		CHECK(x[i] == 'Z');
	ze->data = ze->lho + 30 + nl + el;
	CHECK(ze->data % 64 == 0);
	if (!ze->size)
		return ze->data;
	desc = ze->data + ze->size;
	if (!rd(v, desc, d, z64 ? 24 : 16))
		return 0;
	CHECK(le(d, 4) == 0x08074b50 && le(d + 4, 4) == ze->crc);
	CHECK(le(d + 8, z64 ? 8 : 4) == ze->size);
	CHECK(le(d + (z64 ? 16 : 12), z64 ? 8 : 4) == ze->size);
	return desc + (z64 ? 24 : 16);
}

/* Walk the whole archive; records must follow each other with no gap. */
static bool walk(const struct us_view *v, struct zinfo *zi)
{
	uint64_t n, cd_size, off, next = 0;

	memset(zi, 0, sizeof(*zi));
	if (!walk_end(v, zi, &n, &cd_size))
		return false;
	off = zi->cd_off;
	for (zi->n = 0; zi->n < n; zi->n++) {
		uint64_t len = walk_central(v, off, &zi->e[zi->n]);

		CHECK(len != 0);
		if (!len)
			return false;
		off += len;
		CHECK(zi->e[zi->n].lho == next);
		next = walk_local(v, &zi->e[zi->n]);
		CHECK(next != 0);
		if (!next)
			return false;
	}
	CHECK(off == zi->cd_off + cd_size);
	CHECK(next == zi->cd_off);
	return true;
}

/* name, begin offset in the safetensors data buffer, bytes */
static const struct {
	const char *name;
	unsigned begin, len;
} small[] = {
	{"a", 0, 16}, {"b", 16, 3}, {"c", 19, 2}, {"d", 21, 0},
	{"e", 21, 6}, {"f", 27, 4}, {"g", 31, 8},
};

#define SMALL_JSON "{"                                                          \
	"\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"        \
	"\"b\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[16,19]},"          \
	"\"c\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[19,21]},"         \
	"\"d\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[21,21]},"       \
	"\"e\":{\"dtype\":\"U16\",\"shape\":[3],\"data_offsets\":[21,27]},"         \
	"\"f\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,1,1,2],\"data_offsets\":[27,31]}," \
	"\"g\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[31,39]}}"

struct opened {
	struct us_statedict *sd;
	struct us_view *v;
	struct us_dir srcdir;
};

static bool open_view(const char *path, struct opened *o)
{
	struct us_err err = {0};

	memset(o, 0, sizeof(*o));
	o->srcdir = US_DIR_NONE;
	if (us_source_open(path, NULL, &o->sd, &o->srcdir, &err) != US_OK ||
	    us_view_torch_new(o->sd, &o->v, &err) != US_OK) {
		fprintf(stderr, "  %s\n", err.msg);
		return false;
	}
	return true;
}

static void close_view(struct opened *o)
{
	us_view_free(o->v);
	us_sd_free(o->sd);
	us_dir_close(&o->srcdir);
}

static char *read_all(const struct us_view *v)
{
	char *buf = malloc(v->size + 1);

	if (buf && view_read(v, buf, v->size, 0) != (long long)v->size) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Does @buf (@n bytes) contain the whole string @s?  The length comes from
 * strlen so that a check cannot search a prefix of what it names. */
static bool has(const char *buf, size_t n, const char *s)
{
	return memmem(buf, n, s, strlen(s)) != NULL;
}

static void check_small_records(const struct zinfo *zi, const char *buf)
{
	static const char *names[] = {
		"archive/data.pkl", "archive/byteorder", "archive/data/0",
		"archive/data/1", "archive/data/2", "archive/data/3",
		"archive/data/4", "archive/data/5", "archive/data/6",
		"archive/version",
	};
	const struct zent *pkl = &zi->e[0];

	CHECK(zi->n == 10);
	for (size_t i = 0; i < zi->n && i < 10; i++)
		CHECK(strcmp(zi->e[i].name, names[i]) == 0);
	CHECK(zi->e[1].size == 6 && memcmp(buf + zi->e[1].data, "little", 6) == 0);
	CHECK(zi->e[9].size == 2 && memcmp(buf + zi->e[9].data, "3\n", 2) == 0);
	/* Records built at mount carry their real CRC; tensor data has 0. */
	for (size_t i = 0; i < 10; i += (i == 1 ? 8 : 1))
		CHECK(zi->e[i].crc == us_crc32(0, buf + zi->e[i].data,
						zi->e[i].size));
	CHECK(memcmp(buf + pkl->data, "\x80\x02", 2) == 0);
	CHECK(buf[pkl->data + pkl->size - 1] == '.');
	/* uint16 has no typed storage class: those tensors need v3. */
	CHECK(has(buf + pkl->data, pkl->size, "ctorch._utils\n_rebuild_tensor_v3\n"));
	CHECK(has(buf + pkl->data, pkl->size, "ctorch\nuint16\n"));
	CHECK(has(buf + pkl->data, pkl->size, "ctorch\nComplexFloatStorage\n"));
	/* data/k is tensor k in name order: value = source data offset & 255. */
	for (size_t k = 0; k < 7; k++) {
		const struct zent *e = &zi->e[2 + k];

		CHECK(e->crc == 0 && e->size == small[k].len);
		for (unsigned j = 0; j < e->size; j++)
			CHECK((unsigned char)buf[e->data + j] ==
			      ((small[k].begin + j) & 255));
	}
}

/* Reading in odd-sized pieces gives the same bytes as one read. */
static void check_pieces(const struct us_view *v, const char *whole)
{
	static const size_t sizes[] = {1, 3, 7, 13, 64, 1000, 4097};
	char *buf = malloc(v->size);

	for (size_t s = 0; buf && s < sizeof(sizes) / sizeof(*sizes); s++) {
		uint64_t off = 0;

		while (off < v->size) {
			long long n = view_read(v, buf + off, sizes[s], off);

			CHECK(n > 0);
			if (n <= 0)
				break;
			off += (uint64_t)n;
		}
		CHECK(memcmp(buf, whole, v->size) == 0);
	}
	CHECK(view_read(v, buf, 10, v->size) == 0);
	free(buf);
}

static void test_small(void)
{
	const char *d = tmpdir_new();
	struct opened a, b;
	struct zinfo zi;
	char path[4200], *ba = NULL, *bb = NULL;

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(tmpdir_write_st(d, "m.safetensors", SMALL_JSON, 39) == 0);
	CHECK(open_view(path, &a));
	CHECK(open_view(path, &b));
	if (!a.v || !b.v)
		goto out;
	CHECK(strcmp(a.v->name, "pytorch_model.bin") == 0);
	ba = read_all(a.v);
	bb = read_all(b.v);
	CHECK(ba && bb);
	if (!ba || !bb)
		goto out;
	CHECK(a.v->size == b.v->size && memcmp(ba, bb, a.v->size) == 0);
	CHECK(walk(a.v, &zi));
	check_small_records(&zi, ba);
	check_pieces(a.v, ba);
out:
	free(ba);
	free(bb);
	close_view(&a);
	close_view(&b);
	tmpdir_rm(d);
}

static void test_refuses_f4(void)
{
	const char *d = tmpdir_new();
	struct us_statedict *sd = NULL;
	struct us_view *v = NULL;
	struct us_err err = {0};
	char path[4200];
	struct us_dir srcdir = US_DIR_NONE;
	const char *want = "m.safetensors: tensor 'q' has dtype F4";

	snprintf(path, sizeof(path), "%s/m.safetensors", d);
	CHECK(tmpdir_write_st(d, "m.safetensors", "{"
			      "\"p\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
			      "\"q\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[4,5]}}", 5) == 0);
	CHECK(us_source_open(path, NULL, &sd, &srcdir, &err) == US_OK);
	CHECK(sd && us_view_torch_new(sd, &v, &err) == US_E_UNSUPPORTED);
	CHECK(v == NULL && strncmp(err.msg, want, strlen(want)) == 0);
	us_sd_free(sd);
	us_dir_close(&srcdir);
	tmpdir_rm(d);
}

/* A sparse 4 GiB + tensor: zip64 sizes for it, zip64 offsets after it. */
#define BIG (UINT64_C(1) << 32) + 100

static struct us_statedict *big_statedict(const char *dir)
{
	static const uint64_t s4[] = {4}, sbig[] = {BIG}, s7[] = {7};
	struct us_statedict *sd = us_sd_new();
	struct us_err err = {0};
	char path[4200];
	unsigned char bytes[16];
	uint32_t f;
	int fd, dfd;
	bool ok;

	snprintf(path, sizeof(path), "%s/big.bin", dir);
	fd = open(path, O_CREAT | O_RDWR, 0600);
	for (int i = 0; i < 16; i++)
		bytes[i] = (unsigned char)(0xa0 + i);
	ok = fd >= 0 && ftruncate(fd, 16 + BIG + 14) == 0 &&
	     pwrite(fd, bytes, 16, 0) == 16 && pwrite(fd, bytes, 14, 16 + BIG) == 14;
	if (fd >= 0)
		close(fd);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	ok = ok && sd && dfd >= 0 &&
	     us_sd_open_file(sd, US_TEST_DIR(dfd), "big.bin", &f, &err) == US_OK &&
	     us_sd_add_whole_tensor(sd, "a", US_DT_F32, 1, s4, f, 0, &err) &&
	     us_sd_add_whole_tensor(sd, "big", US_DT_U8, 1, sbig, f, 16, &err) &&
	     us_sd_add_whole_tensor(sd, "c", US_DT_I16, 1, s7, f, 16 + BIG, &err) &&
	     us_sd_finalize(sd, &err) == US_OK;
	if (dfd >= 0)
		close(dfd);
	if (!ok) {
		fprintf(stderr, "  big state dict: %s\n", err.msg);
		us_sd_free(sd);
		return NULL;
	}
	return sd;
}

static void test_zip64(void)
{
	const char *d = tmpdir_new();
	struct us_statedict *sd = big_statedict(d);
	struct us_view *v = NULL;
	struct us_err err = {0};
	struct zinfo zi;
	unsigned char c[14];

	CHECK(sd && us_view_torch_new(sd, &v, &err) == US_OK);
	if (!v)
		goto out;
	CHECK(walk(v, &zi));
	CHECK(zi.n == 6);
	if (zi.n != 6)
		goto out;
	CHECK(strcmp(zi.e[3].name, "archive/data/1") == 0);
	CHECK(zi.e[3].size == BIG && zi.e[3].lho < U32M); /* zip64 sizes */
	CHECK(zi.e[4].lho >= U32M && zi.e[4].size == 14);  /* zip64 offset */
	CHECK(zi.cd_off >= U32M);
	CHECK(zi.e[4].lho == zi.e[3].data + BIG + 24);     /* u64 descriptor */
	CHECK(rd(v, zi.e[4].data, c, 14));
	for (int i = 0; i < 14; i++)
		CHECK(c[i] == 0xa0 + i);
	CHECK(rd(v, zi.e[3].data + BIG - 2, c, 4));
	CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0x50 && c[3] == 0x4b);
out:
	us_view_free(v);
	us_sd_free(sd);
	tmpdir_rm(d);
}

int main(void)
{
	RUN(test_small);
	RUN(test_refuses_f4);
	RUN(test_zip64);
	TEST_MAIN_END();
}
