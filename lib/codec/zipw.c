/* zipw.c - miniz's STORED zip layout, computed without the record data. */
#include "zipw.h"

#include "crc32.h"

#include <stdlib.h>
#include <string.h>

#include "../grow.h"
#include "../us_error.h"

#define SIG_LOCAL 0x04034b50u
#define SIG_DESC 0x08074b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define SIG_EOCD 0x06054b50u
#define LOCAL_SIZE 30
#define FLAG_DESC_UTF8 0x0808 /* bit 3: data descriptor; bit 11: UTF-8 */
#define FLAG_UTF8 0x0800
#define U32_MAX 0xffffffffu
#define U16_MAX 0xffffu
#define PAD_ID 0x4246 /* "FB": torch's padding field */
#define Z64_ID 0x0001

void us_zipw_init(struct us_zipw *z)
{
	memset(z, 0, sizeof(*z));
	us_sbuf_init(&z->meta);
	us_sbuf_init(&z->cd);
}

void us_zipw_free(struct us_zipw *z)
{
	us_sbuf_free(&z->meta);
	us_sbuf_free(&z->cd);
	free(z->segs);
	memset(z, 0, sizeof(*z));
}

static void le(struct us_sbuf *b, uint64_t v, unsigned n)
{
	char tmp[8];

	for (unsigned i = 0; i < n; i++)
		tmp[i] = (char)(v >> (8 * i));
	us_sbuf_putn(b, tmp, n);
}

static struct us_zipw_seg *new_seg(struct us_zipw *z)
{
	if (US_GROW(z->segs, z->segs_cap, z->nsegs) != US_OK) {
		z->oom = true;
		return NULL;
	}
	return &z->segs[z->nsegs++];
}

/* Account for the meta bytes appended since @mark: grow the last memory
 * segment when it ends where they start, else open a new one. */
static void meta_done(struct us_zipw *z, size_t mark)
{
	uint64_t n = z->meta.len - mark;
	struct us_zipw_seg *s = z->nsegs ? &z->segs[z->nsegs - 1] : NULL;

	if (z->meta.oom || !n)
		return;
	if (!s || s->ext) {
		s = new_seg(z);
		if (!s)
			return;
		s->off = z->size;
		s->len = 0;
		s->src = mark;
		s->ext = false;
	}
	s->len += n;
	z->size += n;
}

/* Payload bytes of the zip64 field a record needs (0: none): sizes when
 * the record is 4 GiB or more, the header offset when that is; miniz
 * decides local and central fields, and the descriptor width, alike. */
static unsigned z64_len(uint64_t size, uint64_t hdr_off)
{
	return (size >= U32_MAX ? 16 : 0) + (hdr_off >= U32_MAX ? 8 : 0);
}

/* The zip64 field of a local header, as miniz writes it: the size with a
 * compressed size of 0 (not yet known when miniz writes the header), then
 * the header offset. */
static void local_z64(struct us_sbuf *b, uint64_t size, uint64_t hdr_off)
{
	if (!z64_len(size, hdr_off))
		return;
	le(b, Z64_ID, 2);
	le(b, z64_len(size, hdr_off), 2);
	if (size >= U32_MAX) {
		le(b, size, 8);
		le(b, 0, 8);
	}
	if (hdr_off >= U32_MAX)
		le(b, hdr_off, 8);
}

/* Local header + name + extra, padded so that the data is aligned. */
static void local_header(struct us_zipw *z, const char *name, uint64_t size)
{
	struct us_sbuf *b = &z->meta;
	size_t nl = strlen(name), mark = b->len;
	uint64_t off = z->size;
	unsigned z64 = z64_len(size, off) ? 4 + z64_len(size, off) : 0;
	uint64_t end = off + LOCAL_SIZE + nl + z64 + 4;
	unsigned pad = (unsigned)((US_ZIPW_ALIGN - end % US_ZIPW_ALIGN) %
				  US_ZIPW_ALIGN);

	le(b, SIG_LOCAL, 4);
	le(b, 0, 2);                                   /* version needed */
	le(b, size ? FLAG_DESC_UTF8 : FLAG_UTF8, 2);
	le(b, 0, 2);                                   /* stored */
	le(b, 0, 4);                                   /* time, date */
	le(b, 0, 4);                                   /* crc */
	le(b, 0, 8);                                   /* sizes */
	le(b, nl, 2);
	le(b, z64 + 4 + pad, 2);
	us_sbuf_putn(b, name, nl);
	local_z64(b, size, off);
	le(b, PAD_ID, 2);
	le(b, pad, 2);
	for (unsigned i = 0; i < pad; i++)
		us_sbuf_putc(b, 'Z');
	meta_done(z, mark);
}

static void descriptor(struct us_zipw *z, uint64_t hdr_off, uint64_t size,
		       uint32_t crc)
{
	size_t mark = z->meta.len;
	unsigned w = z64_len(size, hdr_off) ? 8 : 4;

	if (!size)
		return;
	le(&z->meta, SIG_DESC, 4);
	le(&z->meta, crc, 4);
	le(&z->meta, size, w);
	le(&z->meta, size, w);
	meta_done(z, mark);
}

static void central_entry(struct us_zipw *z, const char *name,
			  uint64_t hdr_off, uint64_t size, uint32_t crc)
{
	struct us_sbuf *b = &z->cd;
	size_t nl = strlen(name);
	bool big = size >= U32_MAX, far = hdr_off >= U32_MAX;
	unsigned n = z64_len(size, hdr_off);

	le(b, SIG_CENTRAL, 4);
	le(b, 0, 2);                                   /* version made by */
	le(b, 0, 2);                                   /* version needed */
	le(b, size ? FLAG_DESC_UTF8 : FLAG_UTF8, 2);
	le(b, 0, 2);                                   /* stored */
	le(b, 0, 4);                                   /* time, date */
	le(b, crc, 4);
	le(b, big ? U32_MAX : size, 4);
	le(b, big ? U32_MAX : size, 4);
	le(b, nl, 2);
	le(b, n ? 4 + n : 0, 2);
	le(b, 0, 2);                                   /* comment */
	le(b, 0, 2);                                   /* disk */
	le(b, 0, 2);                                   /* internal attrs */
	le(b, 0, 4);                                   /* external attrs */
	le(b, far ? U32_MAX : hdr_off, 4);
	us_sbuf_putn(b, name, nl);
	if (!n)
		return;
	le(b, Z64_ID, 2);
	le(b, n, 2);
	if (big) {
		le(b, size, 8);
		le(b, size, 8);
	}
	if (far)
		le(b, hdr_off, 8);
}

void us_zipw_add_mem(struct us_zipw *z, const char *name, const void *data,
		     size_t len)
{
	uint64_t hdr_off = z->size;
	uint32_t crc = us_crc32(0, data, len);
	size_t mark;

	local_header(z, name, len);
	mark = z->meta.len;
	us_sbuf_putn(&z->meta, data, len);
	meta_done(z, mark);
	descriptor(z, hdr_off, len, crc);
	central_entry(z, name, hdr_off, len, crc);
	z->nentries++;
}

uint64_t us_zipw_add_ext(struct us_zipw *z, const char *name, uint64_t len,
			 uint64_t tag)
{
	uint64_t hdr_off = z->size, data_off;
	struct us_zipw_seg *s;

	local_header(z, name, len);
	data_off = z->size;
	if (len) {
		s = new_seg(z);
		if (s) {
			s->off = z->size;
			s->len = len;
			s->src = tag;
			s->ext = true;
			z->size += len;
		}
	}
	descriptor(z, hdr_off, len, 0);
	central_entry(z, name, hdr_off, len, 0);
	z->nentries++;
	return data_off;
}

static void end_records(struct us_zipw *z, uint64_t cd_off, uint64_t cd_size)
{
	struct us_sbuf *b = &z->meta;
	uint64_t eocd64_off = z->size;
	size_t mark = b->len;

	le(b, SIG_EOCD64, 4);
	le(b, 44, 8);                                  /* size of the rest */
	le(b, 0x031e, 2);                              /* made by: unix, 3.0 */
	le(b, 45, 2);                                  /* needed: zip64 */
	le(b, 0, 4);                                   /* this disk */
	le(b, 0, 4);                                   /* disk of the cd */
	le(b, z->nentries, 8);
	le(b, z->nentries, 8);
	le(b, cd_size, 8);
	le(b, cd_off, 8);
	le(b, SIG_LOC64, 4);
	le(b, 0, 4);                                   /* disk of eocd64 */
	le(b, eocd64_off, 8);
	le(b, 1, 4);                                   /* disks */
	le(b, SIG_EOCD, 4);
	le(b, 0, 4);                                   /* disks */
	le(b, z->nentries < U16_MAX ? z->nentries : U16_MAX, 2);
	le(b, z->nentries < U16_MAX ? z->nentries : U16_MAX, 2);
	le(b, cd_size < U32_MAX ? cd_size : U32_MAX, 4);
	le(b, cd_off < U32_MAX ? cd_off : U32_MAX, 4);
	le(b, 0, 2);                                   /* comment */
	meta_done(z, mark);
}

enum us_status us_zipw_finish(struct us_zipw *z)
{
	uint64_t cd_off = z->size, cd_size = z->cd.len;
	size_t mark = z->meta.len;

	if (z->cd.oom)
		return US_E_NOMEM;
	us_sbuf_putn(&z->meta, z->cd.p, z->cd.len);
	meta_done(z, mark);
	us_sbuf_free(&z->cd);
	end_records(z, cd_off, cd_size);
	return z->oom || z->meta.oom ? US_E_NOMEM : US_OK;
}

size_t us_zipw_find(const struct us_zipw *z, uint64_t off)
{
	size_t lo = 0, hi = z->nsegs;

	/* The last segment that starts at or before @off. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (z->segs[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}
