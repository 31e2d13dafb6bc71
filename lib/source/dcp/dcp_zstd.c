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
	struct us_err *err; /* a reason without a path (dcp.c adds it) */
};

#define REFUSE(h, msg) us_err_reason((h)->err, US_E_FORMAT, "%s", (msg))

static const char head_too_big[] =
	"the records before the tensor's storage exceed 16 MiB";

/* A read of the stream failed (@rc): corrupt frames, the file, memory. */
static enum us_status stream_failed(struct head *h, enum us_status rc)
{
	if (rc == US_E_NOMEM)
		return us_err_reason(h->err, US_E_NOMEM, "out of memory");
	if (rc == US_E_IO)
		return us_err_reason(h->err, US_E_IO, "its zstd data cannot be read");
	return REFUSE(h, "its zstd frame is corrupt or truncated");
}

/* Decode until the head holds at least @n bytes (and up to STEP more). */
static enum us_status need(struct head *h, size_t n)
{
	while (h->len < n) {
		size_t want = n - h->len < STEP ? STEP : n - h->len, got;
		enum us_status rc;

		if (n > US_DCP_ZSTD_HEAD_MAX)
			return REFUSE(h, head_too_big);
		if (h->len + want > US_DCP_ZSTD_HEAD_MAX)
			want = US_DCP_ZSTD_HEAD_MAX - h->len;
		if (h->len + want > h->cap) {
			unsigned char *b = realloc(h->buf, h->len + want);

			if (!b)
				return us_err_reason(h->err, US_E_NOMEM,
						     "out of memory");
			h->buf = b;
			h->cap = h->len + want;
		}
		rc = us_zstream_read(h->z, h->buf + h->len, want, &got);
		if (rc != US_OK)
			return stream_failed(h, rc);
		h->len += got;
		if (got < want && h->len < n)
			return REFUSE(h, "its archive ends inside its zip records");
	}
	return US_OK;
}

/* A data descriptor at @q for a record of @size bytes?  *@dlen is its
 * length (16, or 24 with zip64 sizes), 0 if there is none. */
static enum us_status descriptor_at(struct head *h, size_t q, uint64_t size,
				    size_t *dlen)
{
	*dlen = 0;
	US_TRY(need(h, q + 16));
	if (us_le(h->buf + q, 4) != SIG_DESC)
		return US_OK;
	if (us_le(h->buf + q + 8, 4) == size && us_le(h->buf + q + 12, 4) == size) {
		/* Zero sizes read alike in both forms: the next signature tells. */
		if (size != 0) {
			*dlen = 16;
			return US_OK;
		}
		US_TRY(need(h, q + 20));
		if (us_le(h->buf + q + 16, 4) == SIG_LOCAL ||
		    us_le(h->buf + q + 16, 4) == SIG_CENTRAL) {
			*dlen = 16;
			return US_OK;
		}
	}
	US_TRY(need(h, q + 24));
	if (us_le(h->buf + q + 8, 8) == size && us_le(h->buf + q + 16, 8) == size)
		*dlen = 24;
	return US_OK;
}

/* The end of a record whose data starts at @d and whose size only its
 * descriptor knows: search forward for a descriptor that counts back to @d. */
static enum us_status find_descriptor(struct head *h, size_t d, size_t *next)
{
	for (size_t q = d;; q++) {
		size_t n;

		US_TRY(descriptor_at(h, q, q - d, &n));
		if (n > 0) {
			*next = q + n;
			return US_OK;
		}
	}
}

/* data.pkl: the pickle delimits itself; decode more until it loads. */
static enum us_status load_pickle(struct head *h, size_t d, struct us_arena *a,
				  struct us_pk **root, size_t *used)
{
	for (size_t want = d + STEP;; want *= 2) {
		enum us_status st;

		US_TRY(need(h, d + 1));
		st = us_pickle_load(h->buf + d, h->len - d, a, root, used, h->err);
		/* A refusal may only mean "decode more"; memory will not come
		 * back with more input. */
		if (st == US_OK || st == US_E_NOMEM)
			return st;
		if (us_zstream_done(h->z) || h->len >= US_DCP_ZSTD_HEAD_MAX)
			return st;
		if (want > US_DCP_ZSTD_HEAD_MAX)
			want = US_DCP_ZSTD_HEAD_MAX;
		US_TRY(need(h, want));
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
static enum us_status read_local(struct head *h, size_t pos, size_t *plen,
				 struct local *l)
{
	const unsigned char *p;
	const char *name, *slash;
	size_t nlen, elen;

	US_TRY(need(h, pos + LOCAL_LEN));
	p = h->buf + pos;
	if (us_le(p, 4) != SIG_LOCAL)
		return REFUSE(h, "no zip record where one should start");
	if (us_le(p + 8, 2) != 0)
		return REFUSE(h, "compressed zip entry (torch writes stored entries)");
	nlen = us_le(p + 26, 2);
	elen = us_le(p + 28, 2);
	US_TRY(need(h, pos + LOCAL_LEN + nlen + elen));
	p = h->buf + pos; /* need() may have moved the buffer */
	name = (const char *)p + LOCAL_LEN;
	slash = memchr(name, '/', nlen);
	if (!slash)
		return REFUSE(h, "zip records are not under one folder");
	if (*plen == 0)
		*plen = (size_t)(slash - name) + 1;
	else if ((size_t)(slash - name) + 1 != *plen ||
		 memcmp(name, h->buf + LOCAL_LEN, *plen) != 0)
		return REFUSE(h, "zip records are not under one folder");
	l->record = name + *plen;
	l->rlen = nlen - *plen;
	l->flags = (uint32_t)us_le(p + 6, 2);
	l->size = us_le(p + 22, 4);
	l->data = pos + LOCAL_LEN + nlen + elen;
	return US_OK;
}

static bool is_record(const struct local *l, const char *name)
{
	return l->rlen == strlen(name) && !memcmp(l->record, name, l->rlen);
}

/* Where the record after @l starts, given its data size. */
static enum us_status record_end(struct head *h, const struct local *l,
				 uint64_t size, size_t *next)
{
	size_t n;

	if (!(l->flags & FLAG_DESC)) {
		if (l->size > US_DCP_ZSTD_HEAD_MAX)
			return REFUSE(h, head_too_big);
		*next = l->data + (size_t)l->size;
		return US_OK;
	}
	if (size == UINT64_MAX)
		return find_descriptor(h, l->data, next);
	US_TRY(descriptor_at(h, l->data + (size_t)size, size, &n));
	if (n == 0)
		return REFUSE(h, "data.pkl is not followed by its data descriptor");
	*next = l->data + (size_t)size + n;
	return US_OK;
}

/* The storage record's size in bytes. */
static enum us_status storage_bytes(struct head *h,
				    const struct us_torch_tensor *tt,
				    uint64_t *bytes)
{
	uint64_t isz = us_dtype_bits(tt->dtype) / 8;

	if (tt->untyped) {
		*bytes = tt->storage_numel;
		return US_OK;
	}
	if (!isz || __builtin_mul_overflow(tt->storage_numel, isz, bytes))
		return REFUSE(h, "tensor storage size overflows");
	return US_OK;
}

/* data.pkl, which must be the first record, loaded: *@l is its local
 * header, *@plen the length of the records' folder prefix. */
static enum us_status head_pickle(struct head *h, struct us_arena *a,
				  size_t *plen, struct local *l,
				  struct us_pk **root, size_t *used)
{
	US_TRY(read_local(h, 0, plen, l));
	if (!is_record(l, "data.pkl"))
		return REFUSE(h, "data.pkl is not its first zip record");
	return load_pickle(h, l->data, a, root, used);
}

static enum us_status walk(struct head *h, struct us_arena *a,
			   struct us_dcp_zitem *out)
{
	char key[512];
	struct us_pk *root;
	struct local l;
	size_t pos = 0, plen = 0, used, next;
	uint64_t bytes = 0;
	bool found;

	US_TRY(head_pickle(h, a, &plen, &l, &root, &used));
	US_TRY(us_torch_match(root, &out->tt, &found, h->err));
	if (!found)
		return REFUSE(h, "item is not a tensor");
	if (snprintf(key, sizeof(key), "data/%s", out->tt.storage_key) >=
	    (int)sizeof(key))
		return REFUSE(h, "storage key too long");
	US_TRY(storage_bytes(h, &out->tt, &bytes));
	for (uint64_t sz = used;; sz = UINT64_MAX) {
		US_TRY(record_end(h, &l, sz, &next));
		pos = next;
		US_TRY(read_local(h, pos, &plen, &l));
		if (is_record(&l, key))
			break;
	}
	/* Its data descriptor (crc, sizes) is what reads check the decoded
	 * record against: torch always writes one. */
	if (!(l.flags & FLAG_DESC))
		return REFUSE(h, "tensor storage record has no data descriptor "
			      "(not written by torch.save)");
	US_TRY(us_torch_span_fits(&out->tt, bytes, h->err));
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
		return REFUSE(h, "tensor offset overflows");
	return US_OK;
}

/*
 * Small items are decoded to their end: the frame must decode cleanly and
 * the storage record match its descriptor's CRC-32, so corruption anywhere
 * in them is a refusal now rather than EIO later.  Larger ones stop at the
 * head; reads check them (assemble/zitem.h).
 */
static enum us_status verify(struct head *h, struct us_dcp_zitem *out)
{
	enum us_status st;
	uint32_t crc;

	if (out->served > US_DCP_ZSTD_VERIFY)
		return US_OK;
	/* A short item ends first ("ends inside its zip records"): the
	 * checks below say what that means; any other failure stands. */
	st = need(h, US_DCP_ZSTD_VERIFY + 1);
	if (st != US_OK && (st != US_E_FORMAT || !us_zstream_done(h->z)))
		return st;
	if (!us_zstream_done(h->z))
		return US_OK; /* long after all */
	if (h->len < out->served)
		return REFUSE(h, "its archive ends inside its tensor's storage");
	crc = us_crc32(0, h->buf + out->data, (size_t)out->bytes);
	if (us_zip_desc_check(h->buf + out->data + out->bytes, out->bytes, crc) != US_OK)
		return REFUSE(h, "its tensor's storage fails the CRC-32 of its "
			      "data descriptor: the item is corrupt");
	out->verified = true;
	return US_OK;
}

/*
 * The frames must be able to decode to what the zip records promise: a
 * read needs out->served bytes (and the whole frames are the whole
 * archive, at least that long).  With declared content sizes the bound is
 * exact; without (torch's writers), raw and RLE blocks count exactly and
 * compressed ones at most 128 KiB each.
 */
static enum us_status frames_hold(struct head *h, const struct us_zframes *zf,
				  const struct us_dcp_zitem *out)
{
	if (zf->max_size < out->served)
		return REFUSE(h, "its zstd frames decode to fewer bytes than its "
			      "zip records need: the item is truncated");
	return US_OK;
}

/* The stream of the frames at [@off, @off + @len), for @h. */
static enum us_status head_open(struct head *h, const struct us_file *f,
				uint64_t off,
				uint64_t len)
{
	h->z = us_zstream_open(f, off, len);
	return h->z ? US_OK : us_err_reason(h->err, US_E_NOMEM, "out of memory");
}

static void head_close(struct head *h)
{
	us_zstream_close(h->z);
	free(h->buf);
}

enum us_status us_dcp_zstd_item(const struct us_file *f, uint64_t off,
				uint64_t len,
				struct us_arena *a, struct us_dcp_zitem *out,
				struct us_err *err)
{
	struct head h = { .err = err };
	struct us_zframes zf;
	enum us_status st;

	memset(out, 0, sizeof(*out));
	out->bad_at = UINT64_MAX;
	/* Every frame and block header first: structural damage anywhere in
	 * the item is a refusal now, not EIO at read time (zframes.h). */
	st = us_zframes_walk(f, off, len, &zf, err);
	if (st != US_OK) {
		out->bad_at = zf.bad_at;
		return st;
	}
	US_TRY(head_open(&h, f, off, len));
	st = walk(&h, a, out);
	if (st == US_OK)
		st = frames_hold(&h, &zf, out);
	if (st == US_OK)
		st = verify(&h, out);
	head_close(&h);
	return st;
}

/* Decode the rest of the item, which must end within the head limit. */
static enum us_status decode_to_end(struct head *h)
{
	unsigned char buf[4096];
	uint64_t n = h->len;

	while (!us_zstream_done(h->z)) {
		size_t got;
		enum us_status rc = us_zstream_read(h->z, buf, sizeof(buf), &got);

		if (rc != US_OK)
			return stream_failed(h, rc);
		n += (uint64_t)got;
		if (n > US_DCP_ZSTD_HEAD_MAX)
			return REFUSE(h, "it decodes to more than 16 MiB");
	}
	return US_OK;
}

static enum us_status value_walk(struct head *h, struct us_arena *a,
				 struct us_pk **root)
{
	struct local l;
	size_t plen = 0, used, next;

	US_TRY(head_pickle(h, a, &plen, &l, root, &used));
	US_TRY(record_end(h, &l, used, &next));
	return decode_to_end(h);
}

enum us_status us_dcp_zstd_value(const struct us_file *f, uint64_t off,
				 uint64_t len,
				 struct us_arena *a, struct us_pk **root,
				 struct us_err *err)
{
	struct head h = { .err = err };
	struct us_zframes zf;
	enum us_status st;

	US_TRY(us_zframes_walk(f, off, len, &zf, err));
	US_TRY(head_open(&h, f, off, len));
	st = value_walk(&h, a, root);
	head_close(&h);
	return st;
}
