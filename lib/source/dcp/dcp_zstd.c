/* dcp_zstd.c - walk a zstd DCP item's torch.save archive from its head. */
#include "dcp_zstd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/crc32.h"
#include "../../codec/le.h"
#include "../../codec/zframes.h"
#include "../../codec/zipdesc.h"
#include "../../codec/zstream.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_DESC 0x08074b50u
#define LOCAL_LEN 30u
#define FLAG_DESC 0x08u
#define STEP (64u << 10)

/* The decoded head of the item, grown on demand. */
struct head {
	struct us_zstream *z;
	unsigned char *buf;
	size_t len, cap;
	const char **why;
};

/* Decode until the head holds at least @n bytes (and up to STEP more). */
static int need(struct head *h, size_t n)
{
	while (h->len < n) {
		size_t want = n - h->len < STEP ? STEP : n - h->len;
		ssize_t got;

		if (n > US_DCP_ZSTD_HEAD_MAX)
			return *h->why = "the records before the tensor's storage "
					 "exceed 16 MiB", -1;
		if (h->len + want > US_DCP_ZSTD_HEAD_MAX)
			want = US_DCP_ZSTD_HEAD_MAX - h->len;
		if (h->len + want > h->cap) {
			unsigned char *b = realloc(h->buf, h->len + want);

			if (!b)
				return *h->why = "out of memory", -1;
			h->buf = b;
			h->cap = h->len + want;
		}
		got = us_zstream_read(h->z, h->buf + h->len, want);
		if (got < 0)
			return *h->why = "its zstd frame is corrupt or truncated", -1;
		h->len += (size_t)got;
		if ((size_t)got < want && h->len < n)
			return *h->why = "its archive ends inside its zip records", -1;
	}
	return 0;
}

/* A data descriptor at @q for a record of @size bytes?  Returns its length
 * (16, or 24 with zip64 sizes), 0 if there is none, -1 on error. */
static int descriptor_at(struct head *h, size_t q, uint64_t size)
{
	if (need(h, q + 16) < 0)
		return -1;
	if (us_le(h->buf + q, 4) != SIG_DESC)
		return 0;
	if (us_le(h->buf + q + 8, 4) == size && us_le(h->buf + q + 12, 4) == size) {
		/* Zero sizes read alike in both forms: the next signature tells. */
		if (size != 0 || need(h, q + 20) < 0 ||
		    us_le(h->buf + q + 16, 4) == SIG_LOCAL ||
		    us_le(h->buf + q + 16, 4) == SIG_CENTRAL)
			return 16;
	}
	if (need(h, q + 24) < 0)
		return -1;
	return us_le(h->buf + q + 8, 8) == size && us_le(h->buf + q + 16, 8) == size ? 24 : 0;
}

/* The end of a record whose data starts at @d and whose size only its
 * descriptor knows: search forward for a descriptor that counts back to @d. */
static int find_descriptor(struct head *h, size_t d, size_t *next)
{
	for (size_t q = d;; q++) {
		int n = descriptor_at(h, q, q - d);

		if (n < 0)
			return -1;
		if (n > 0) {
			*next = q + (size_t)n;
			return 0;
		}
	}
}

/* data.pkl: the pickle delimits itself; decode more until it loads. */
static int load_pickle(struct head *h, size_t d, struct us_arena *a,
		       struct us_pk **root, size_t *used)
{
	const char *pwhy = NULL;

	for (size_t want = d + STEP;; want *= 2) {
		if (need(h, d + 1) < 0)
			return -1;
		if (us_pickle_load(h->buf + d, h->len - d, a, root, used, &pwhy) == 0)
			return 0;
		if (us_zstream_done(h->z) || h->len >= US_DCP_ZSTD_HEAD_MAX)
			return *h->why = pwhy, -1;
		if (want > US_DCP_ZSTD_HEAD_MAX)
			want = US_DCP_ZSTD_HEAD_MAX;
		if (need(h, want) < 0)
			return -1;
	}
}

struct local {
	const char *record; /* the name after "<prefix>/" */
	size_t rlen;
	uint32_t flags;
	uint64_t size;      /* from the local header; 0 with FLAG_DESC */
	size_t data;        /* decoded offset of the record's data */
};

/* The local header at @pos; its prefix must be @prefix's (set by the first). */
static int read_local(struct head *h, size_t pos, size_t *plen, struct local *l)
{
	const unsigned char *p;
	const char *name, *slash;
	size_t nlen, elen;

	if (need(h, pos + LOCAL_LEN) < 0)
		return -1;
	p = h->buf + pos;
	if (us_le(p, 4) != SIG_LOCAL)
		return *h->why = "no zip record where one should start", -1;
	if (us_le(p + 8, 2) != 0)
		return *h->why = "compressed zip entry (torch writes stored entries)", -1;
	nlen = us_le(p + 26, 2);
	elen = us_le(p + 28, 2);
	if (need(h, pos + LOCAL_LEN + nlen + elen) < 0)
		return -1;
	p = h->buf + pos; /* need() may have moved the buffer */
	name = (const char *)p + LOCAL_LEN;
	slash = memchr(name, '/', nlen);
	if (!slash)
		return *h->why = "zip records are not under one folder", -1;
	if (*plen == 0)
		*plen = (size_t)(slash - name) + 1;
	else if ((size_t)(slash - name) + 1 != *plen ||
		 memcmp(name, h->buf + LOCAL_LEN, *plen) != 0)
		return *h->why = "zip records are not under one folder", -1;
	l->record = name + *plen;
	l->rlen = nlen - *plen;
	l->flags = (uint32_t)us_le(p + 6, 2);
	l->size = us_le(p + 22, 4);
	l->data = pos + LOCAL_LEN + nlen + elen;
	return 0;
}

static bool is_record(const struct local *l, const char *name)
{
	return l->rlen == strlen(name) && !memcmp(l->record, name, l->rlen);
}

/* Where the record after @l starts, given its data size. */
static int record_end(struct head *h, const struct local *l, uint64_t size,
		      size_t *next)
{
	int n;

	if (!(l->flags & FLAG_DESC)) {
		if (l->size > US_DCP_ZSTD_HEAD_MAX)
			return *h->why = "the records before the tensor's storage "
					 "exceed 16 MiB", -1;
		*next = l->data + (size_t)l->size;
		return 0;
	}
	if (size == UINT64_MAX)
		return find_descriptor(h, l->data, next);
	n = descriptor_at(h, l->data + (size_t)size, size);
	if (n <= 0)
		return n < 0 ? -1 : (*h->why = "data.pkl is not followed by its "
					       "data descriptor", -1);
	*next = l->data + (size_t)size + (size_t)n;
	return 0;
}

/* The storage record's size in bytes. */
static int storage_bytes(const struct us_torch_tensor *tt, uint64_t *bytes,
			 const char **why)
{
	uint64_t isz = us_dtype_bits(tt->dtype) / 8;

	if (tt->untyped) {
		*bytes = tt->storage_numel;
		return 0;
	}
	if (!isz || __builtin_mul_overflow(tt->storage_numel, isz, bytes))
		return *why = "tensor storage size overflows", -1;
	return 0;
}

static int walk(struct head *h, struct us_arena *a, struct us_dcp_zitem *out)
{
	char key[512];
	struct us_pk *root;
	struct local l;
	size_t pos = 0, plen = 0, used, next;
	uint64_t bytes;
	int m;

	if (read_local(h, pos, &plen, &l) < 0)
		return -1;
	if (!is_record(&l, "data.pkl"))
		return *h->why = "data.pkl is not its first zip record", -1;
	if (load_pickle(h, l.data, a, &root, &used) < 0)
		return -1;
	m = us_torch_match(root, &out->tt, h->why);
	if (m <= 0)
		return m < 0 ? -1 : (*h->why = "item is not a tensor", -1);
	if (snprintf(key, sizeof(key), "data/%s", out->tt.storage_key) >=
	    (int)sizeof(key))
		return *h->why = "storage key too long", -1;
	if (storage_bytes(&out->tt, &bytes, h->why) < 0)
		return -1;
	for (uint64_t sz = used;; sz = UINT64_MAX) {
		if (record_end(h, &l, sz, &next) < 0)
			return -1;
		pos = next;
		if (read_local(h, pos, &plen, &l) < 0)
			return -1;
		if (is_record(&l, key))
			break;
	}
	/* Its data descriptor (crc, sizes) is what reads check the decoded
	 * record against: torch always writes one. */
	if (!(l.flags & FLAG_DESC))
		return *h->why = "tensor storage record has no data descriptor "
				 "(not written by torch.save)", -1;
	if (us_torch_span_fits(&out->tt, bytes, h->why) < 0)
		return -1;
	out->data = l.data;
	out->bytes = bytes;
	/* The record, then its descriptor: 16 bytes, or 24 with 8-byte sizes;
	 * in a torch archive, more records or the central directory follow,
	 * so 24 decoded bytes after the record always exist. */
	if (__builtin_add_overflow((uint64_t)l.data, bytes, &out->served) ||
	    __builtin_add_overflow(out->served, (uint64_t)US_DCP_ZSTD_DESC, &out->served) ||
	    __builtin_mul_overflow(out->tt.storage_offset,
				   (uint64_t)(us_dtype_bits(out->tt.dtype) / 8),
				   &out->first) ||
	    __builtin_add_overflow(out->first, (uint64_t)l.data, &out->first))
		return *h->why = "tensor offset overflows", -1;
	return 0;
}

/*
 * Small items are decoded to their end: the frame must decode cleanly and
 * the storage record match its descriptor's CRC-32, so corruption anywhere
 * in them is a refusal now rather than EIO later.  Larger ones stop at the
 * head; reads check them (assemble/zitem.h).
 */
static int verify(struct head *h, struct us_dcp_zitem *out)
{
	uint32_t crc;

	if (out->served > US_DCP_ZSTD_VERIFY)
		return 0;
	if (need(h, US_DCP_ZSTD_VERIFY + 1) < 0 && !us_zstream_done(h->z))
		return -1;
	if (!us_zstream_done(h->z))
		return 0; /* long after all */
	if (h->len < out->served)
		return *h->why = "its archive ends inside its tensor's storage", -1;
	crc = us_crc32(0, h->buf + out->data, (size_t)out->bytes);
	if (us_zip_desc_check(h->buf + out->data + out->bytes, out->bytes, crc) < 0)
		return *h->why = "its tensor's storage fails the CRC-32 of its "
				 "data descriptor: the item is corrupt", -1;
	out->verified = true;
	return 0;
}

/*
 * The frames must be able to decode to what the zip records promise: a
 * read needs out->served bytes (and the whole frames are the whole
 * archive, at least that long).  With declared content sizes the bound is
 * exact; without (torch's writers), raw and RLE blocks count exactly and
 * compressed ones at most 128 KiB each.
 */
static int frames_hold(const struct us_zframes *zf, const struct us_dcp_zitem *out,
		       const char **why)
{
	if (zf->max_size < out->served)
		return *why = "its zstd frames decode to fewer bytes than its zip "
			      "records need: the item is truncated", -1;
	return 0;
}

int us_dcp_zstd_item(int fd, uint64_t off, uint64_t len, struct us_arena *a,
		     struct us_dcp_zitem *out, const char **why)
{
	struct head h = { .why = why };
	struct us_zframes zf;
	int rc;

	memset(out, 0, sizeof(*out));
	out->bad_at = UINT64_MAX;
	/* Every frame and block header first: structural damage anywhere in
	 * the item is a refusal now, not EIO at read time (zframes.h). */
	if (us_zframes_walk(fd, off, len, &zf, why) < 0) {
		out->bad_at = zf.bad_at;
		return -1;
	}
	h.z = us_zstream_open(fd, off, len);
	if (!h.z)
		return *why = "out of memory", -1;
	rc = walk(&h, a, out);
	if (rc == 0)
		rc = frames_hold(&zf, out, why);
	if (rc == 0)
		rc = verify(&h, out);
	us_zstream_close(h.z);
	free(h.buf);
	return rc;
}

/* Decode the rest of the item, which must end within the head limit. */
static int decode_to_end(struct head *h)
{
	unsigned char buf[4096];
	uint64_t n = h->len;

	while (!us_zstream_done(h->z)) {
		ssize_t got = us_zstream_read(h->z, buf, sizeof(buf));

		if (got < 0)
			return *h->why = "its zstd frame is corrupt or truncated", -1;
		n += (uint64_t)got;
		if (n > US_DCP_ZSTD_HEAD_MAX)
			return *h->why = "it decodes to more than 16 MiB", -1;
	}
	return 0;
}

static int value_walk(struct head *h, struct us_arena *a, struct us_pk **root)
{
	struct local l;
	size_t plen = 0, used, next;

	if (read_local(h, 0, &plen, &l) < 0)
		return -1;
	if (!is_record(&l, "data.pkl"))
		return *h->why = "data.pkl is not its first zip record", -1;
	if (load_pickle(h, l.data, a, root, &used) < 0 ||
	    record_end(h, &l, used, &next) < 0)
		return -1;
	return decode_to_end(h);
}

int us_dcp_zstd_value(int fd, uint64_t off, uint64_t len, struct us_arena *a,
		      struct us_pk **root, const char **why)
{
	struct head h = { .why = why };
	struct us_zframes zf;
	int rc;

	if (us_zframes_walk(fd, off, len, &zf, why) < 0)
		return -1;
	h.z = us_zstream_open(fd, off, len);
	if (!h.z)
		return *why = "out of memory", -1;
	rc = value_walk(&h, a, root);
	us_zstream_close(h.z);
	free(h.buf);
	return rc;
}
