/*
 * test_zip.c - the torch.save zip reader (lib/codec/zip.c): archives built
 * here byte by byte, then damaged one field at a time.  Each refusal is
 * US_E_FORMAT with its own reason; a file that cannot be read is US_E_IO
 * and a failed allocation US_E_NOMEM, never "not a zip archive".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h"
#include "codec/zip.h"
#include "failmalloc.h"
#include "file_fd.h"
#include "harness.h"

#define MAXREC 4

/* An archive as torch writes it: stored records under one folder, their
 * local headers, the central directory, the end record. */
struct zbuf {
	unsigned char b[4096];
	size_t n;
	size_t local[MAXREC];   /* offset of each local header */
	size_t central[MAXREC]; /* offset of each central entry */
	size_t eocd;
};

static void put(struct zbuf *z, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		z->b[z->n++] = (unsigned char)(v >> (8 * i));
}

static void put_str(struct zbuf *z, const char *s)
{
	memcpy(z->b + z->n, s, strlen(s));
	z->n += strlen(s);
}

/* Records @names[i] holding @datas[i], after @lead bytes of padding (an
 * archive inside a file, as DCP items are; offsets stay the archive's). */
static void build(struct zbuf *z, size_t lead, int n, const char *const *names,
		  const char *const *datas)
{
	size_t cd;

	memset(z, 0, sizeof(*z));
	z->n = lead;
	for (int i = 0; i < n; i++) {
		z->local[i] = z->n;
		put(z, 0x04034b50, 4);
		put(z, 20, 2);                     /* version */
		put(z, 0, 2);                      /* flags */
		put(z, 0, 2);                      /* stored */
		put(z, 0, 4);                      /* time, date */
		put(z, 0, 4);                      /* crc (unchecked here) */
		put(z, strlen(datas[i]), 4);
		put(z, strlen(datas[i]), 4);
		put(z, strlen(names[i]), 2);
		put(z, 0, 2);                      /* extra */
		put_str(z, names[i]);
		put_str(z, datas[i]);
	}
	cd = z->n;
	for (int i = 0; i < n; i++) {
		z->central[i] = z->n;
		put(z, 0x02014b50, 4);
		put(z, 20, 2);
		put(z, 20, 2);
		put(z, 0, 2);                      /* flags */
		put(z, 0, 2);                      /* stored */
		put(z, 0, 4);
		put(z, 0, 4);                      /* crc */
		put(z, strlen(datas[i]), 4);
		put(z, strlen(datas[i]), 4);
		put(z, strlen(names[i]), 2);
		put(z, 0, 2);                      /* extra */
		put(z, 0, 2);                      /* comment */
		put(z, 0, 4);                      /* disk, internal attrs */
		put(z, 0, 4);                      /* external attrs */
		put(z, z->local[i] - lead, 4);
		put_str(z, names[i]);
	}
	z->eocd = z->n;
	put(z, 0x06054b50, 4);
	put(z, 0, 4);
	put(z, n, 2);
	put(z, n, 2);
	put(z, z->n - 12 - cd, 4);               /* cd size: up to the eocd */
	put(z, cd - lead, 4);
	put(z, 0, 2);
}

static void build2(struct zbuf *z)
{
	static const char *const names[] = { "arch/data.pkl", "arch/data/0" };
	static const char *const datas[] = { "PICKLE", "0123456789" };

	build(z, 0, 2, names, datas);
}

/* build2, with the zip64 end record and its locator before the classic
 * end record, whose fields then say "see zip64" (as torch writes archives
 * past 4 GiB or 65535 records).  Leaves z->eocd at the zip64 end record. */
static void build64(struct zbuf *z)
{
	size_t cd, e64;

	build2(z);
	cd = z->central[0];
	z->n = e64 = z->eocd;
	put(z, 0x06064b50, 4);
	put(z, 44, 8);                  /* size of the rest of the record */
	put(z, 45, 2);
	put(z, 45, 2);
	put(z, 0, 8);                   /* disks */
	put(z, 2, 8);                   /* entries on this disk, in all */
	put(z, 2, 8);
	put(z, e64 - cd, 8);
	put(z, cd, 8);
	put(z, 0x07064b50, 4);          /* the locator */
	put(z, 0, 4);
	put(z, e64, 8);
	put(z, 1, 4);
	put(z, 0x06054b50, 4);          /* the classic end record */
	put(z, 0, 4);
	put(z, 0xFFFF, 2);
	put(z, 0xFFFF, 2);
	put(z, 0xFFFFFFFF, 4);
	put(z, 0xFFFFFFFF, 4);
	put(z, 0, 2);
	z->eocd = e64;
}

/* Overwrite @bytes little-endian bytes at @off. */
static void poke(struct zbuf *z, size_t off, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		z->b[off + i] = (unsigned char)(v >> (8 * i));
}

static int memfd_of(const void *p, size_t n)
{
	int fd = memfd_create("zip", MFD_CLOEXEC);

	if (fd < 0 || write(fd, p, n) != (ssize_t)n)
		abort();
	return fd;
}

struct opened {
	struct us_arena a;
	struct us_zip zip;
	struct us_err err;
	enum us_status st;
	int fd;
	struct us_file file; /* over fd, for us_zip_open */
};

/* us_zip_open of @z's bytes [@base, end) as they would be in a file. */
static void open_at(struct opened *o, const struct zbuf *z, size_t base)
{
	us_arena_init(&o->a);
	o->fd = memfd_of(z->b, z->n);
	o->err.msg[0] = '\0';
	o->st = us_zip_open(&o->zip, us_test_file(&o->file, o->fd), base, z->n - base, &o->a, &o->err);
}

static void close_opened(struct opened *o)
{
	close(o->fd);
	us_arena_free(&o->a);
}

static bool says(const struct us_err *err, enum us_status st,
		 enum us_status want, const char *word)
{
	bool ok = st == want && err->status == want && strstr(err->msg, word);

	if (!ok)
		fprintf(stderr, "  status %d, reason '%s', wanted %d '%s'\n", st,
			err->msg, want, word);
	return ok;
}

/* Is @z refused at open, as US_E_FORMAT with @word in the reason? */
static bool open_refused(const struct zbuf *z, const char *word)
{
	struct opened o;
	bool ok;

	open_at(&o, z, 0);
	ok = says(&o.err, o.st, US_E_FORMAT, word);
	close_opened(&o);
	return ok;
}

/* Is @z opened, and the data of @record refused, as @word says? */
static bool data_refused(const struct zbuf *z, const char *record,
			 const char *word)
{
	struct opened o;
	const struct us_zip_entry *e;
	uint64_t off;
	bool ok;

	open_at(&o, z, 0);
	e = o.st == US_OK ? us_zip_find(&o.zip, record) : NULL;
	ok = e && says(&o.err, us_zip_data(&o.zip, e, &off, &o.err),
		       US_E_FORMAT, word);
	close_opened(&o);
	return ok;
}

static void test_valid(void)
{
	static const char *const names[] = { "arch/data.pkl", "arch/data/0",
					      "arch/version" };
	static const char *const datas[] = { "PICKLE", "0123456789", "3\n" };
	struct zbuf z;
	struct opened o;
	const struct us_zip_entry *e;
	uint64_t off = 0;

	/* an archive at byte 100 of its file, as a DCP item is */
	build(&z, 100, 3, names, datas);
	open_at(&o, &z, 100);
	CHECK(o.st == US_OK);
	CHECK(o.zip.n == 3 && !strcmp(o.zip.prefix, "arch"));
	CHECK(o.zip.cd_off == z.central[0] - 100);
	e = us_zip_find(&o.zip, "data/0");
	CHECK(e && e->size == 10 && e->local_off == z.local[1] - 100);
	CHECK(e && us_zip_data(&o.zip, e, &off, &o.err) == US_OK);
	CHECK(!memcmp(z.b + 100 + off, "0123456789", 10));
	e = us_zip_find(&o.zip, "data.pkl");
	CHECK(e && us_zip_data(&o.zip, e, &off, &o.err) == US_OK &&
	      !memcmp(z.b + 100 + off, "PICKLE", 6));
	/* names are matched whole, under the prefix */
	CHECK(us_zip_find(&o.zip, "data.pk") == NULL);
	CHECK(us_zip_find(&o.zip, "data.pkl2") == NULL);
	CHECK(us_zip_find(&o.zip, "arch/data.pkl") == NULL);
	CHECK(us_zip_find(&o.zip, "") == NULL);
	CHECK(us_zip_find(&o.zip, "version") != NULL);
	close_opened(&o);
}

static void test_zip64(void)
{
	struct zbuf z;
	struct opened o;

	build64(&z);
	open_at(&o, &z, 0);
	CHECK(o.st == US_OK && o.zip.n == 2 && o.zip.cd_off == z.central[0]);
	CHECK(us_zip_find(&o.zip, "data/0") != NULL);
	close_opened(&o);
	build64(&z);
	poke(&z, z.eocd, 0x12345678, 4); /* the locator points at no record */
	CHECK(open_refused(&z, "bad zip64 end record"));
	build64(&z);
	poke(&z, z.eocd + 56 + 8, z.eocd + 1, 8); /* the record runs into it */
	CHECK(open_refused(&z, "bad zip64 end record"));
	build64(&z);
	poke(&z, z.eocd + 40, 1u << 30, 8); /* a cd larger than the archive */
	CHECK(open_refused(&z, "central directory out of range"));
}

static void test_truncated(void)
{
	struct zbuf z;

	build2(&z);
	z.n = 21; /* shorter than an end record */
	CHECK(open_refused(&z, "not a zip archive (no end record)"));
	build2(&z);
	z.n -= 5; /* the end record cut */
	CHECK(open_refused(&z, "not a zip archive (no end record)"));
	build2(&z);
	memset(z.b + z.eocd, 'x', 4); /* no end record signature */
	CHECK(open_refused(&z, "not a zip archive (no end record)"));
	build2(&z);
	poke(&z, z.eocd + 16, z.central[0] + 1, 4); /* cd past the end record */
	CHECK(open_refused(&z, "central directory out of range"));
	build2(&z);
	poke(&z, z.eocd + 10, 9, 2); /* more entries than the cd can hold */
	CHECK(open_refused(&z, "central directory out of range"));
	build2(&z);
	poke(&z, z.central[1], 0x12345678, 4); /* not a central entry */
	CHECK(open_refused(&z, "bad central directory entry"));
}

static void test_refusals(void)
{
	static const char *const dup[] = { "arch/a", "arch/a" };
	static const char *const flat[] = { "data.pkl", "arch/x" };
	static const char *const datas[] = { "1", "2" };
	struct zbuf z;

	build2(&z);
	poke(&z, z.central[1] + 10, 8, 2); /* deflate */
	CHECK(open_refused(&z, "compressed zip entry"));
	build2(&z);
	poke(&z, z.central[0] + 24, 7, 4); /* size differs from csize */
	CHECK(open_refused(&z, "bad zip64 sizes in the central directory"));
	build2(&z);
	z.b[z.central[1] + 46 + 2] = '\0'; /* a NUL inside a name */
	CHECK(open_refused(&z, "bad zip entry name"));
	build(&z, 0, 2, dup, datas);
	CHECK(open_refused(&z, "two zip records have one name"));
	build(&z, 0, 2, flat, datas);
	CHECK(open_refused(&z, "zip records are not under one folder"));
	build(&z, 0, 0, NULL, NULL);
	CHECK(open_refused(&z, "empty zip archive"));
}

/* Records that alias or overlap: two tensors would share bytes (and look
 * like a tie), so the central directory alone refuses them. */
static void test_aliased(void)
{
	struct zbuf z;

	build2(&z);
	poke(&z, z.central[1] + 42, z.local[0], 4); /* both at one header */
	CHECK(open_refused(&z, "two zip records share one local header"));
	build2(&z);
	/* data.pkl's size runs into data/0's local header */
	poke(&z, z.central[0] + 20, 7, 4);
	poke(&z, z.central[0] + 24, 7, 4);
	CHECK(open_refused(&z, "runs into the next record or the central directory"));
	build2(&z);
	/* the last record's size runs into the central directory */
	poke(&z, z.central[1] + 20, 11, 4);
	poke(&z, z.central[1] + 24, 11, 4);
	CHECK(open_refused(&z, "runs into the next record or the central directory"));
	build2(&z);
	poke(&z, z.central[1] + 42, z.central[0] + 1, 4); /* inside the cd */
	CHECK(open_refused(&z, "runs into the next record or the central directory"));
}

/* The local header is read only for the records asked for, and must agree
 * with the central entry. */
static void test_local_header(void)
{
	struct zbuf z;

	build2(&z);
	z.b[z.local[1] + 30 + 5] = 'X'; /* "arch/Xata/0" */
	CHECK(data_refused(&z, "data/0", "names another record"));
	build2(&z);
	poke(&z, z.local[1] + 8, 8, 2);
	CHECK(data_refused(&z, "data/0", "says it is compressed"));
	build2(&z);
	poke(&z, z.local[1] + 22, 3, 4);
	CHECK(data_refused(&z, "data/0", "give different sizes"));
	build2(&z);
	poke(&z, z.local[0], 0x12345678, 4);
	CHECK(data_refused(&z, "data.pkl", "bad local zip header"));
	build2(&z);
	poke(&z, z.local[1] + 28, 4, 2); /* an extra field pushes data into the cd */
	CHECK(data_refused(&z, "data/0", "zip record data runs into"));
}

/* A file that cannot be read (or ends before what was recorded of it: the
 * file changed after it was sized) is US_E_IO, whatever the zip says. */
static void test_io(void)
{
	struct zbuf z;
	struct opened o;
	const struct us_zip_entry *e;
	uint64_t off;

	build2(&z);
	us_arena_init(&o.a);
	o.fd = memfd_of(z.b, z.n);
	o.st = us_zip_open(&o.zip, us_test_file(&o.file, o.fd), 0, z.n + 100, &o.a, &o.err);
	CHECK(says(&o.err, o.st, US_E_IO, "cannot read its end record"));
	close_opened(&o);

	us_arena_init(&o.a);
	o.st = us_zip_open(&o.zip, us_test_file(&o.file, -1), 0, z.n, &o.a, &o.err);
	CHECK(says(&o.err, o.st, US_E_IO, "Bad file descriptor"));
	us_arena_free(&o.a);

	/* opened, then truncated under it: the local header is gone */
	open_at(&o, &z, 0);
	CHECK(o.st == US_OK);
	CHECK(ftruncate(o.fd, (off_t)z.local[1] + 4) == 0);
	e = us_zip_find(&o.zip, "data/0");
	CHECK(e && says(&o.err, us_zip_data(&o.zip, e, &off, &o.err), US_E_IO,
			"cannot read a zip record's local header"));
	close_opened(&o);
}

/* Every allocation fails in turn: US_E_NOMEM each time, nothing leaks. */
static void test_nomem(void)
{
	struct zbuf z;
	bool finished = false;
	long failed = 0; /* loads that met a failed allocation */

	build2(&z);
	for (long n = 0; n < 1000 && !finished; n++) {
		struct opened o;
		const struct us_zip_entry *e;
		uint64_t off;

		us_arena_init(&o.a);
		o.fd = memfd_of(z.b, z.n);
		us_fail_after(n);
		o.st = us_zip_open(&o.zip, us_test_file(&o.file, o.fd), 0, z.n, &o.a, &o.err);
		e = o.st == US_OK ? us_zip_find(&o.zip, "data/0") : NULL;
		if (e)
			o.st = us_zip_data(&o.zip, e, &off, &o.err);
		us_fail_off();
		if (!us_fail_hit()) {
			CHECK(o.st == US_OK && e);
			finished = true;
		} else {
			failed++;
			CHECK(says(&o.err, o.st, US_E_NOMEM, "out of memory"));
		}
		close_opened(&o);
	}
	CHECK(finished);
	CHECK(failed > 0); /* the allocations were wrapped: it tested something */
}

int main(void)
{
	RUN(test_valid);
	RUN(test_zip64);
	RUN(test_truncated);
	RUN(test_refusals);
	RUN(test_aliased);
	RUN(test_local_header);
	RUN(test_io);
	RUN(test_nomem);
	TEST_MAIN_END();
}
