/*
 * test_storage.c - lib/storage: local directories and files, and the
 * directories synthesized from a remote store's key listing, down to a
 * whole remote SOURCE read by a reader and the assembler.
 *
 * The store is a fake of remote.h made here (objects in memory): this file
 * defines every remote.h function, so the linker takes none of the
 * library's (remote_stub.c, or the real client after merge) and the
 * storage layer is tested on its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "harness.h"
#include "source/canon.h"
#include "source/passthrough.h"
#include "source/source.h"
#include "storage/remote.h"
#include "storage/storage.h"
#include "tmpdir.h"

/* ---- the fake store ------------------------------------------------------ */

#define ST_HEADER "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,8],\"data_offsets\":[0,16]}}"

struct fake_obj {
	struct us_remote_object o;
	unsigned char *bytes;
};

struct us_remote {
	struct fake_obj *v;
	size_t n;
	bool single;
	char url[64];
	struct us_remote_stats st;
};

static int fakes_live; /* opened, not yet freed */

static void put_obj(struct us_remote *r, const char *key, const void *b,
		    size_t len)
{
	struct fake_obj *f = &r->v[r->n++];

	f->o.key = key;
	f->o.size = len;
	f->o.etag = "\"e1\"";
	f->o.mtime = (struct timespec){ 1700000000, 0 };
	f->bytes = malloc(len ? len : 1);
	memcpy(f->bytes, b, len);
}

/* model.safetensors: "w" U8 [2,8], bytes 0..15. */
static void put_safetensors(struct us_remote *r, const char *key)
{
	size_t hlen = strlen(ST_HEADER), pad = (8 - hlen % 8) % 8;
	unsigned char buf[256];
	uint64_t n = hlen + pad;

	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(n >> (8 * i));
	memcpy(buf + 8, ST_HEADER, hlen);
	memset(buf + 8 + hlen, ' ', pad);
	for (int i = 0; i < 16; i++)
		buf[8 + n + (size_t)i] = (unsigned char)i;
	put_obj(r, key, buf, 8 + n + 16);
}

bool us_remote_is_url(const char *s)
{
	return !strncmp(s, "s3://", 5) || !strncmp(s, "https://", 8) ||
	       !strncmp(s, "http://", 7);
}

/* s3://fake/dir: a directory listing; s3://fake/model.safetensors: one
 * object; anything else: no such bucket. */
enum us_status us_remote_open(const char *url, const struct us_remote_opts *o,
			      struct us_remote **out, struct us_err *err)
{
	struct us_remote *r;

	(void)o;
	*out = NULL;
	if (strcmp(url, "s3://fake/dir") && strcmp(url, "s3://fake/model.safetensors"))
		return us_err_set(err, US_E_IO, url, "no such bucket");
	r = calloc(1, sizeof(*r));
	r->v = calloc(8, sizeof(*r->v));
	snprintf(r->url, sizeof(r->url), "%s", url);
	if (!strcmp(url, "s3://fake/model.safetensors")) {
		r->single = true;
		put_safetensors(r, "model.safetensors");
	} else { /* sorted by strcmp, as remote.h promises */
		put_obj(r, "a.b", "ab", 2);
		put_obj(r, "config.json", "{}", 2);
		put_safetensors(r, "model.safetensors");
		put_obj(r, "sub/a.txt", "hello", 5);
		put_obj(r, "sub/deeper/b.txt", "b", 1);
	}
	fakes_live++;
	*out = r;
	return US_OK;
}

void us_remote_free(struct us_remote *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		free(r->v[i].bytes);
	free(r->v);
	free(r);
	fakes_live--;
}

size_t us_remote_count(const struct us_remote *r)
{
	return r->n;
}

const struct us_remote_object *us_remote_at(const struct us_remote *r, size_t i)
{
	return i < r->n ? &r->v[i].o : NULL;
}

size_t us_remote_lower_bound(const struct us_remote *r, const char *key)
{
	size_t i = 0;

	while (i < r->n && strcmp(r->v[i].o.key, key) < 0)
		i++;
	return i;
}

const struct us_remote_object *us_remote_find(const struct us_remote *r,
					      const char *key)
{
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->v[i].o.key, key))
			return &r->v[i].o;
	return NULL;
}

bool us_remote_single(const struct us_remote *r)
{
	return r->single;
}

const char *us_remote_url(const struct us_remote *r)
{
	return r->url;
}

enum us_status us_remote_read(struct us_remote *r,
			      const struct us_remote_object *o, void *buf,
			      size_t len, uint64_t off)
{
	const struct fake_obj *f = (const struct fake_obj *)o;

	r->st.requests++;
	r->st.bytes_read += len;
	if (off > o->size || len > o->size - off) {
		errno = EIO;
		return US_E_IO;
	}
	memcpy(buf, f->bytes + off, len);
	return US_OK;
}

void us_remote_get_stats(const struct us_remote *r, struct us_remote_stats *s)
{
	*s = r->st;
}

void us_remote_advise(struct us_remote *r, const struct us_remote_object *o,
		      uint64_t off, uint64_t len)
{
	(void)r, (void)o, (void)off, (void)len; /* a hint: the fake has it all */
}

void us_remote_last_error(struct us_remote *r, char *buf, size_t n)
{
	(void)r;
	snprintf(buf, n, "fake: bytes out of range");
}

/* ---- local ------------------------------------------------------------- */

static void test_local(void)
{
	const char *d = tmpdir_new();
	struct us_dir dir, sub;
	struct us_file f;
	struct stat st;
	char **names, buf[8] = "", path[4200];
	size_t n;

	CHECK(tmpdir_write(d, "b.txt", "0123456789", 10) == 0);
	CHECK(tmpdir_write(d, "a.txt", "x", 1) == 0);
	snprintf(path, sizeof(path), "%s/sub", d);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/fifo", d);
	CHECK(mkfifo(path, 0644) == 0);
	CHECK(us_dir_open_path(d, &dir) == 0 && dir.fd >= 0 && !dir.remote);
	CHECK(us_dirlist(&dir, &names, &n) == US_OK && n == 4 &&
	      !strcmp(names[0], "a.txt") && !strcmp(names[3], "sub"));
	us_dirlist_free(names, n);
	CHECK(us_dir_statat(&dir, "b.txt", &st, 0) == 0 && st.st_size == 10);
	CHECK(us_dir_statat(&dir, "nope", &st, 0) < 0 && errno == ENOENT);
	CHECK(us_dir_exists(&dir, "sub") && !us_dir_exists(&dir, "nope"));
	CHECK(us_dir_openat(&dir, "sub", &sub) == 0);
	us_dir_close(&sub);
	CHECK(us_dir_openat(&dir, "b.txt", &sub) < 0 && errno == ENOTDIR);
	/* a file: its descriptor, its identity, exact reads */
	CHECK(us_file_open(&dir, "b.txt", &f) == US_OK && f.fd >= 0 &&
	      !f.remote && f.size == 10);
	CHECK(us_file_pread(&f, buf, 4, 3) == US_OK && !memcmp(buf, "3456", 4));
	CHECK(us_file_pread(&f, buf, 4, 8) == US_E_IO && errno == EIO);
	CHECK(us_file_check(&f) == US_OK);
	CHECK(tmpdir_write(d, "b.txt", "012345678", 9) == 0); /* rewritten */
	CHECK(us_file_check(&f) == US_E_IO);
	us_file_close(&f);
	CHECK(f.fd == -1);
	/* a FIFO is refused, never waited on; a directory is no file */
	CHECK(us_file_open(&dir, "fifo", &f) == US_E_FORMAT);
	CHECK(us_file_open(&dir, "sub", &f) == US_E_FORMAT);
	CHECK(us_file_open(&dir, "nope", &f) == US_E_IO && errno == ENOENT);
	/* NULL: the current directory */
	snprintf(path, sizeof(path), "%s/a.txt", d);
	CHECK(us_file_open(NULL, path, &f) == US_OK && f.size == 1);
	us_file_close(&f);
	CHECK(us_file_open_fd(open(path, O_RDONLY), &f) == US_OK && f.size == 1);
	us_file_close(&f);
	us_dir_close(&dir);
	CHECK(dir.fd == -1 && !us_dir_is_open(&dir));
	tmpdir_rm(d);
}

/* ---- remote directories -------------------------------------------------- */

static bool names_are(char **names, size_t n, const char *const *want,
		      size_t nwant)
{
	if (n != nwant)
		return false;
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], want[i]))
			return false;
	return true;
}

static void test_remote_dirs(void)
{
	static const char *const root_names[] = {"a.b", "config.json",
						 "model.safetensors", "sub"};
	static const char *const sub_names[] = {"a.txt", "deeper"};
	struct us_remote *r;
	struct us_dir dir, sub;
	struct us_file f;
	struct stat st, st2;
	char **names, buf[8] = "";
	size_t n;

	CHECK(us_remote_open("s3://fake/dir", NULL, &r, NULL) == US_OK);
	CHECK(us_dir_open_remote(r, "", &dir) == 0 && us_dir_is_open(&dir) &&
	      dir.fd == -1);
	CHECK(us_dirlist(&dir, &names, &n) == US_OK &&
	      names_are(names, n, root_names, 4));
	us_dirlist_free(names, n);
	CHECK(us_dir_statat(&dir, "sub", &st, 0) == 0 &&
	      st.st_mode == (S_IFDIR | 0555));
	CHECK(us_dir_statat(&dir, "sub/a.txt", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	      st.st_mode == (S_IFREG | 0444) && st.st_size == 5 &&
	      st.st_nlink == 1 && st.st_mtim.tv_sec == 1700000000 &&
	      st.st_ctim.tv_sec == 1700000000);
	CHECK(us_dir_statat(&dir, "./sub/../sub/a.txt", &st2, 0) == 0 &&
	      st2.st_ino == st.st_ino && st.st_ino != 0);
	CHECK(us_dir_statat(&dir, ".", &st, 0) == 0 && S_ISDIR(st.st_mode));
	CHECK(us_dir_statat(&dir, "nope", &st, 0) < 0 && errno == ENOENT);
	CHECK(us_dir_statat(&dir, "su", &st, 0) < 0 && errno == ENOENT);
	CHECK(us_dir_statat(&dir, "..", &st, 0) < 0 && errno == ENOENT);
	CHECK(us_dir_statat(&dir, "config.json/x", &st, 0) < 0 &&
	      errno == ENOTDIR);
	CHECK(us_dir_exists(&dir, "sub/deeper") && !us_dir_exists(&dir, "x"));
	/* a subdirectory: its own listing, files relative to it */
	CHECK(us_dir_openat(&dir, "sub", &sub) == 0 &&
	      !strcmp(sub.prefix, "sub/"));
	CHECK(us_dirlist(&sub, &names, &n) == US_OK &&
	      names_are(names, n, sub_names, 2));
	us_dirlist_free(names, n);
	CHECK(us_file_open(&sub, "a.txt", &f) == US_OK && f.fd == -1 &&
	      f.remote == r && f.obj && !strcmp(f.obj->key, "sub/a.txt") &&
	      f.size == 5);
	CHECK(us_file_pread(&f, buf, 3, 1) == US_OK && !memcmp(buf, "ell", 3));
	CHECK(us_file_pread(&f, buf, 3, 4) == US_E_IO);
	CHECK(us_file_check(&f) == US_OK); /* the store's If-Match does it */
	us_file_close(&f);
	us_dir_close(&sub);
	CHECK(us_dir_openat(&dir, "config.json", &sub) < 0 && errno == ENOTDIR);
	CHECK(us_dir_openat(&dir, "nope", &sub) < 0 && errno == ENOENT);
	CHECK(us_file_open(&dir, "sub", &f) == US_E_FORMAT);
	CHECK(us_file_open(&dir, "nope", &f) == US_E_IO && errno == ENOENT);
	/* an absolute path is local whatever the directory (--overlay) */
	CHECK(us_file_open(&dir, "/proc/self/stat", &f) == US_OK && f.fd >= 0);
	us_file_close(&f);
	us_dir_close(&dir);
	us_remote_free(r);
}

/* ---- a remote SOURCE through a reader -------------------------------------- */

static void check_tensor(const struct us_statedict *sd)
{
	const struct us_tensor *t = us_sd_find(sd, "w");
	struct us_assembler *as = NULL;
	struct us_seg segv[4];
	struct us_segs segs = { .v = segv, .cap = 4 };
	unsigned char got[16];
	bool ok = true;

	CHECK(t != NULL);
	if (!t || us_assembler_new(NULL, &as, NULL) != US_OK)
		return;
	CHECK(us_tensor_read(as, sd, t, got, 16, 0) == US_OK);
	for (int i = 0; i < 16; i++)
		ok &= got[i] == i;
	CHECK(ok);
	CHECK(us_tensor_read(as, sd, t, got, 3, 7) == US_OK && got[0] == 7);
	/* no descriptor to splice: the executor's work */
	CHECK(us_tensor_map(sd, t, &segs, 16, 0) == US_OK && segs.overflow);
	us_assembler_free(as);
}

static void test_remote_source(void)
{
	struct us_source_opts so = { .ties = US_TIES_AUTO };
	struct us_statedict *sd;
	struct us_pt_list pt;
	struct us_dir dir;
	struct us_err err = {0};
	char id[64];

	CHECK(us_source_open("s3://fake/dir", &so, &sd, &dir, &err) == US_OK);
	if (!sd)
		return;
	CHECK(sd->remote && dir.remote == sd->remote && !strcmp(dir.prefix, ""));
	CHECK(sd->nfiles == 1 && sd->files[0].fd == -1 && sd->files[0].obj);
	check_tensor(sd);
	/* passthrough: everything but the consumed weights */
	CHECK(us_pt_scan(&dir, sd, &pt, &err) == US_OK);
	CHECK(pt.n == 6); /* a.b config.json sub sub/a.txt sub/deeper sub/deeper/b.txt */
	for (size_t i = 0; i < pt.n; i++)
		CHECK(strcmp(pt.v[i].relpath, "model.safetensors") != 0);
	us_pt_free(&pt);
	us_sd_identity(sd, id, sizeof(id));
	CHECK(!strncmp(id, "v1:1:", 5));
	us_dir_close(&dir);
	us_sd_free(sd);
	CHECK(fakes_live == 0); /* the state dict owned the store */

	/* one object: SOURCE is that file, no directory beside it */
	CHECK(us_source_open("s3://fake/model.safetensors", &so, &sd, &dir,
			     &err) == US_OK);
	CHECK(!us_dir_is_open(&dir));
	if (sd)
		check_tensor(sd);
	us_sd_free(sd);
	CHECK(fakes_live == 0);

	/* the store's refusal is the open's */
	CHECK(us_source_open("s3://nobucket/x", &so, &sd, &dir, &err) == US_E_IO &&
	      !sd && strstr(err.msg, "no such bucket"));
	CHECK(fakes_live == 0);
}

int main(void)
{
	RUN(test_local);
	RUN(test_remote_dirs);
	RUN(test_remote_source);
	TEST_MAIN_END();
}
