/*
 * zip.h - the zip reader for torch.save archives (a .bin/.pt file, or one
 * item of a DCP .distcp file, which is an archive embedded at an offset).
 *
 * Only what torch writes is accepted: STORED entries (compressed size =
 * size), zip64 where needed.  A record's data offset is taken from its LOCAL
 * header (30 + name length + extra length), whose extra field differs from
 * the central directory's (formats.md).  Local headers are read lazily, only
 * for the records a reader asks for.  Offsets are relative to the archive.
 *
 * Records may not overlap: the central directory must not point two names
 * at one local header (an alias: two tensors would silently share bytes,
 * and look like a tie), nor give a record a size that runs into the next
 * record or the central directory; a record's local header must carry its
 * central entry's name (and method and sizes, where it states them).
 * torch's own reader and CPython's zipfile refuse such archives too.
 */
#ifndef US_ZIP_H
#define US_ZIP_H

#include <stdbool.h>
#include <stdint.h>

#include "../arena.h"
#include "../storage/storage.h"
#include "../us_error.h"

struct us_zip_entry {
	const char *name;
	uint64_t size;      /* stored = uncompressed size */
	uint64_t local_off; /* offset of the local header */
	uint64_t limit;     /* the next record's local header, or the central
			     * directory: this record's header and data end
			     * by it (us_zip_open checks what the central
			     * directory says, us_zip_data the local header) */
};

struct us_zip {
	const struct us_file *f; /* not owned */
	uint64_t base, len;  /* the archive is bytes [base, base + len) of f */
	uint64_t cd_off;     /* the central directory: data must end before it */
	struct us_zip_entry *v;
	size_t n;
	const char *prefix;  /* before the first '/' of the first entry */
};

/*
 * us_zip_open - read the end records and the central directory of the
 * archive at [@base, @base + @len) of @f, a range the caller has checked
 * against the file.  On failure @err holds the reason without a path
 * (us_err_reason): US_E_FORMAT for a malformed archive, US_E_IO when bytes
 * of the range cannot be read, US_E_NOMEM.
 */
enum us_status us_zip_open(struct us_zip *z, const struct us_file *f,
			   uint64_t base,
			   uint64_t len, struct us_arena *arena,
			   struct us_err *err);

/* us_zip_find - the entry "<prefix>/<record>", or NULL. */
const struct us_zip_entry *us_zip_find(const struct us_zip *z, const char *record);

/*
 * us_zip_data - the offset (relative to the archive) of @e's data, from its
 * local header, checked to carry @e's name, method and sizes and to end,
 * with its data, by @e->limit (so before the next record and the central
 * directory).  Fails as us_zip_open does.
 */
enum us_status us_zip_data(const struct us_zip *z, const struct us_zip_entry *e,
			   uint64_t *off, struct us_err *err);

#endif /* US_ZIP_H */
