/* zip.c - end records, zip64, central directory, local headers. */
#include "zip.h"

#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../io.h"
#include "le.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define EOCD_LEN 22u
#define LOC64_LEN 20u
#define EOCD64_LEN 56u
#define CENTRAL_LEN 46u
#define LOCAL_LEN 30u
#define MAX_COMMENT 65535u
#define MAX_CD (256ull << 20)

/* Read @n bytes at @off of the archive, @what for the message.  A failure
 * is the file's, not its format's: the caller checked the range against
 * the archive's size. */
static enum us_status rd(const struct us_zip *z, void *buf, size_t n,
			 uint64_t off, const char *what, struct us_err *err)
{
	if (us_file_pread(z->f, buf, n, z->base + off) != US_OK)
		return us_err_reason(err, US_E_IO, "cannot read %s: %s", what,
				     us_file_strerror(z->f));
	return US_OK;
}

/*
 * Find the classic end record.  torch writes no archive comment, so it is
 * the last 22 bytes: try that first, which keeps a mount from reading the
 * tail of the last tensor record (mount reads headers only).  Otherwise
 * scan back over a comment of up to 64 KiB.
 */
static enum us_status find_eocd(struct us_zip *z, unsigned char *tail,
				size_t tlen, uint64_t *eocd, struct us_err *err)
{
	uint64_t start = z->len - tlen;

	US_TRY(rd(z, tail + tlen - EOCD_LEN, EOCD_LEN, z->len - EOCD_LEN,
		  "its end record", err));
	if (us_le(tail + tlen - EOCD_LEN, 4) == SIG_EOCD &&
	    us_le(tail + tlen - EOCD_LEN + 20, 2) == 0) {
		*eocd = z->len - EOCD_LEN;
		return US_OK;
	}
	US_TRY(rd(z, tail, tlen, start, "its end record", err));
	for (size_t i = tlen - EOCD_LEN + 1; i-- > 0;) {
		if (us_le(tail + i, 4) == SIG_EOCD &&
		    i + EOCD_LEN + us_le(tail + i + 20, 2) == tlen) {
			*eocd = start + i;
			return US_OK;
		}
	}
	return us_err_reason(err, US_E_FORMAT, "not a zip archive (no end record)");
}

/* Zip64: the locator sits right before the classic end record. */
static enum us_status read_zip64(struct us_zip *z, uint64_t eocd,
				 uint64_t *count, uint64_t *cd_size,
				 uint64_t *cd_off, uint64_t *end,
				 struct us_err *err)
{
	unsigned char loc[LOC64_LEN], rec[EOCD64_LEN];
	uint64_t off;

	if (eocd < LOC64_LEN)
		return US_OK; /* no room for zip64: the classic values stand */
	US_TRY(rd(z, loc, LOC64_LEN, eocd - LOC64_LEN, "its zip64 end locator",
		  err));
	if (us_le(loc, 4) != SIG_LOC64)
		return US_OK; /* no zip64 */
	off = us_le(loc + 8, 8);
	if (off > eocd - LOC64_LEN || eocd - LOC64_LEN - off < EOCD64_LEN)
		return us_err_reason(err, US_E_FORMAT, "bad zip64 end record");
	US_TRY(rd(z, rec, EOCD64_LEN, off, "its zip64 end record", err));
	if (us_le(rec, 4) != SIG_EOCD64)
		return us_err_reason(err, US_E_FORMAT, "bad zip64 end record");
	*count = us_le(rec + 32, 8);
	*cd_size = us_le(rec + 40, 8);
	*cd_off = us_le(rec + 48, 8);
	*end = off;
	return US_OK;
}

/* Zip64 extended information: the 8-byte values of the fields that are
 * 0xFFFFFFFF in the fixed part, in the order size, csize, local offset;
 * false when the extra field is too short for them. */
static bool central_zip64(const unsigned char *extra, size_t elen,
			  uint64_t *size, uint64_t *csize, uint64_t *loff)
{
	uint64_t *fields[3] = {size, csize, loff};

	while (elen >= 4) {
		size_t id = us_le(extra, 2), dlen = us_le(extra + 2, 2), pos = 4;

		if (dlen > elen - 4)
			return false;
		if (id == 1) {
			for (int f = 0; f < 3; f++) {
				if (*fields[f] != 0xFFFFFFFFu)
					continue;
				if (pos + 8 > 4 + dlen)
					return false;
				*fields[f] = us_le(extra + pos, 8);
				pos += 8;
			}
			return true;
		}
		extra += 4 + dlen;
		elen -= 4 + dlen;
	}
	return true;
}

static enum us_status parse_central(struct us_zip *z, const unsigned char *cd,
				    uint64_t cd_size, uint64_t count,
				    struct us_arena *a, struct us_err *err)
{
	uint64_t pos = 0;

	for (uint64_t i = 0; i < count; i++) {
		struct us_zip_entry *e = &z->v[i];
		const unsigned char *h = cd + pos;
		uint64_t nlen, elen, clen, csize;

		if (cd_size - pos < CENTRAL_LEN || us_le(h, 4) != SIG_CENTRAL)
			return us_err_reason(err, US_E_FORMAT, "bad central directory entry");
		nlen = us_le(h + 28, 2);
		elen = us_le(h + 30, 2);
		clen = us_le(h + 32, 2);
		if (cd_size - pos - CENTRAL_LEN < nlen + elen + clen)
			return us_err_reason(err, US_E_FORMAT, "central directory entry runs past its end");
		if (us_le(h + 10, 2) != 0)
			return us_err_reason(err, US_E_FORMAT, "compressed zip entry (torch writes stored entries)");
		csize = us_le(h + 20, 4);
		e->size = us_le(h + 24, 4);
		e->local_off = us_le(h + 42, 4);
		if (!central_zip64(h + CENTRAL_LEN + nlen, elen, &e->size, &csize,
				   &e->local_off) || csize != e->size)
			return us_err_reason(err, US_E_FORMAT, "bad zip64 sizes in the central directory");
		e->name = us_arena_strndup(a, (const char *)h + CENTRAL_LEN, nlen);
		if (!e->name)
			return us_err_reason(err, US_E_NOMEM, "out of memory");
		if (strlen(e->name) != nlen) /* a NUL inside the name */
			return us_err_reason(err, US_E_FORMAT, "bad zip entry name");
		pos += CENTRAL_LEN + nlen + elen + clen;
	}
	return US_OK;
}

static enum us_status set_prefix(struct us_zip *z, struct us_arena *a,
				 struct us_err *err)
{
	const char *slash;

	if (z->n == 0)
		return us_err_reason(err, US_E_FORMAT, "empty zip archive");
	slash = strchr(z->v[0].name, '/');
	if (!slash)
		return us_err_reason(err, US_E_FORMAT,
				     "zip records are not under one folder");
	z->prefix = us_arena_strndup(a, z->v[0].name, (size_t)(slash - z->v[0].name));
	return z->prefix ? US_OK : us_err_reason(err, US_E_NOMEM, "out of memory");
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct us_zip_entry *)a)->name,
		      ((const struct us_zip_entry *)b)->name);
}

static int cmp_local_off(const void *a, const void *b)
{
	uint64_t x = ((const struct us_zip_entry *)a)->local_off;
	uint64_t y = ((const struct us_zip_entry *)b)->local_off;

	return x < y ? -1 : x > y;
}

/* Does @e's local header (of its central name's length) and data fit
 * before @e->limit?  The local name must be the central one, so its length
 * is known before the local header is read; its extra field is not. */
static bool fits_limit(const struct us_zip_entry *e, uint64_t extra)
{
	uint64_t room;

	if (e->limit < e->local_off)
		return false;
	room = e->limit - e->local_off;
	return room >= LOCAL_LEN + strlen(e->name) + extra &&
	       room - LOCAL_LEN - strlen(e->name) - extra >= e->size;
}

/*
 * The records, in local header order, must each end before the next one
 * starts, and the last before the central directory: an aliased record
 * (two central entries, one local header) or a size running into the next
 * record is refused here, from the central directory alone, and each
 * entry learns its limit for us_zip_data.  Leaves @z->v in that order.
 */
static enum us_status check_layout(struct us_zip *z, struct us_err *err)
{
	qsort(z->v, z->n, sizeof(*z->v), cmp_local_off);
	for (size_t i = 0; i < z->n; i++) {
		struct us_zip_entry *e = &z->v[i];

		if (i + 1 < z->n && z->v[i + 1].local_off == e->local_off)
			return us_err_reason(err, US_E_FORMAT,
					     "two zip records share one local "
					     "header (an aliased central "
					     "directory entry)");
		e->limit = i + 1 < z->n ? z->v[i + 1].local_off : z->cd_off;
		if (e->limit > z->cd_off)
			e->limit = z->cd_off;
		if (!fits_limit(e, 0))
			return us_err_reason(err, US_E_FORMAT,
					     "a zip record's size runs into the "
					     "next record or the central "
					     "directory");
	}
	return US_OK;
}

/* After the sort by name: one name, one record (a second one would be
 * found or not depending on the sort). */
static enum us_status check_unique(const struct us_zip *z, struct us_err *err)
{
	for (size_t i = 1; i < z->n; i++)
		if (strcmp(z->v[i - 1].name, z->v[i].name) == 0)
			return us_err_reason(err, US_E_FORMAT,
					     "two zip records have one name");
	return US_OK;
}

/* The central directory, read whole (at most MAX_CD bytes) and parsed. */
static enum us_status read_central(struct us_zip *z, uint64_t cd_size,
				   uint64_t count, struct us_arena *a,
				   struct us_err *err)
{
	unsigned char *cd;
	enum us_status st;

	z->v = us_arena_calloc(a, (size_t)count + 1, sizeof(*z->v));
	cd = malloc((size_t)cd_size + 1);
	if (!z->v || !cd) {
		free(cd);
		return us_err_reason(err, US_E_NOMEM, "out of memory");
	}
	st = rd(z, cd, (size_t)cd_size, z->cd_off, "the central directory", err);
	if (st == US_OK)
		st = parse_central(z, cd, cd_size, count, a, err);
	free(cd);
	z->n = (size_t)count;
	return st;
}

enum us_status us_zip_open(struct us_zip *z, const struct us_file *f,
			   uint64_t base,
			   uint64_t len, struct us_arena *a, struct us_err *err)
{
	unsigned char tail[EOCD_LEN + MAX_COMMENT];
	uint64_t eocd = 0, count, cd_size, cd_off, end;
	size_t tlen = len < sizeof(tail) ? (size_t)len : sizeof(tail);

	memset(z, 0, sizeof(*z));
	z->f = f;
	z->base = base;
	z->len = len;
	if (len < EOCD_LEN)
		return us_err_reason(err, US_E_FORMAT,
				     "not a zip archive (no end record)");
	US_TRY(find_eocd(z, tail, tlen, &eocd, err));
	count = us_le(tail + (eocd - (len - tlen)) + 10, 2);
	cd_size = us_le(tail + (eocd - (len - tlen)) + 12, 4);
	cd_off = us_le(tail + (eocd - (len - tlen)) + 16, 4);
	end = eocd;
	US_TRY(read_zip64(z, eocd, &count, &cd_size, &cd_off, &end, err));
	if (cd_off > end || cd_size > end - cd_off || cd_size > MAX_CD ||
	    count > cd_size / CENTRAL_LEN)
		return us_err_reason(err, US_E_FORMAT,
				     "central directory out of range");
	z->cd_off = cd_off;
	US_TRY(read_central(z, cd_size, count, a, err));
	US_TRY(set_prefix(z, a, err));
	US_TRY(check_layout(z, err));
	/* Sorted for us_zip_find; the prefix came from the first entry. */
	qsort(z->v, z->n, sizeof(*z->v), cmp_entry);
	return check_unique(z, err);
}

/* The record a us_zip_find looks for: "<prefix>/<record>", in two parts. */
struct find_key {
	const char *prefix, *record;
};

/* strcmp(@key's name, @e's name), without building the name (so that a
 * lookup cannot fail for want of memory and be taken for "no record"). */
static int cmp_find(const void *key, const void *e)
{
	const struct find_key *k = key;
	const unsigned char *n = (const unsigned char *)
				 ((const struct us_zip_entry *)e)->name;
	const char *part[3] = { k->prefix, "/", k->record };

	for (int i = 0; i < 3; i++)
		for (const unsigned char *p = (const unsigned char *)part[i]; *p;
		     p++, n++)
			if (*p != *n)
				return *p < *n ? -1 : 1;
	return *n ? -1 : 0;
}

const struct us_zip_entry *us_zip_find(const struct us_zip *z, const char *record)
{
	struct find_key key = { z->prefix, record };

	return bsearch(&key, z->v, z->n, sizeof(*z->v), cmp_find);
}

/* A local header's size field agrees with the central @want when it states
 * one: 0 under a data descriptor (flag bit 3, torch's way) and 0xFFFFFFFF
 * (the value is in the zip64 extra field) state none. */
static bool local_size_ok(uint64_t local, uint64_t want, bool descriptor)
{
	if (local == 0xFFFFFFFFu || (descriptor && local == 0))
		return true;
	return local == want;
}

/* @e's local header @h (its fixed part and name) against its central entry. */
static enum us_status check_local(const struct us_zip_entry *e,
				  const unsigned char *h, struct us_err *err)
{
	size_t nlen = strlen(e->name);
	bool descriptor = us_le(h + 6, 2) & 0x8;

	if (us_le(h + 8, 2) != 0)
		return us_err_reason(err, US_E_FORMAT, "a zip record's local "
				     "header says it is compressed, its "
				     "central entry stored");
	if (us_le(h + 26, 2) != nlen || memcmp(h + LOCAL_LEN, e->name, nlen) != 0)
		return us_err_reason(err, US_E_FORMAT, "a zip record's local "
				     "header names another record (central "
				     "directory and local headers disagree)");
	if (!local_size_ok(us_le(h + 18, 4), e->size, descriptor) ||
	    !local_size_ok(us_le(h + 22, 4), e->size, descriptor))
		return us_err_reason(err, US_E_FORMAT, "a zip record's local "
				     "header and central entry give different "
				     "sizes");
	return US_OK;
}

/* The local header, read: its signature, fields and extra field's end. */
static enum us_status local_data(const struct us_zip_entry *e,
				 const unsigned char *h, uint64_t *off,
				 struct us_err *err)
{
	size_t nlen = strlen(e->name);

	if (us_le(h, 4) != SIG_LOCAL)
		return us_err_reason(err, US_E_FORMAT, "bad local zip header");
	US_TRY(check_local(e, h, err));
	if (!fits_limit(e, us_le(h + 28, 2)))
		return us_err_reason(err, US_E_FORMAT, "zip record data runs "
				     "into the next record or the central "
				     "directory");
	*off = e->local_off + LOCAL_LEN + nlen + us_le(h + 28, 2);
	return US_OK;
}

enum us_status us_zip_data(const struct us_zip *z, const struct us_zip_entry *e,
			   uint64_t *off, struct us_err *err)
{
	size_t nlen = strlen(e->name);
	unsigned char *h;
	enum us_status st;

	assert(e->limit <= z->cd_off);
	if (!fits_limit(e, 0))
		return us_err_reason(err, US_E_FORMAT, "bad local zip header");
	h = malloc(LOCAL_LEN + nlen);
	if (!h)
		return us_err_reason(err, US_E_NOMEM, "out of memory");
	/* fits_limit: the header lies before the central directory */
	st = rd(z, h, LOCAL_LEN + nlen, e->local_off,
		"a zip record's local header", err);
	if (st == US_OK)
		st = local_data(e, h, off, err);
	free(h);
	return st;
}
