/*
 * zipdesc.h - checking a zip record against its data descriptor (the CRC
 * itself is crc32.h's).
 *
 * A zstd item of a DCP checkpoint has no checksum of its own (torch writes
 * the frame without one), and zstd passes raw literals through unchecked,
 * so a flipped byte can decode without error.  The torch.save archive
 * inside does carry a CRC-32 of every record in its data descriptors; the
 * read path checks the storage record's before serving a byte of it.
 */
#ifndef US_ZIPDESC_H
#define US_ZIPDESC_H

#include <stddef.h>
#include <stdint.h>

#include "../us_error.h"

/*
 * us_zip_desc_check - is @d (24 bytes) a data descriptor ("PK\x07\x08",
 * crc, sizes of 4 or 8 bytes) for a record of @size bytes whose CRC is
 * @crc?  A stored CRC of 0 means the writer did not compute one
 * (torch.serialization.config.save.compute_crc32 = False): sizes only.
 * US_OK, or US_E_FORMAT (no message: the caller knows which record).
 */
enum us_status us_zip_desc_check(const unsigned char d[24], uint64_t size,
				 uint32_t crc);

/* us_zip_desc_size - the record size a descriptor at @d states (either
 * form, told apart by both its size fields agreeing); US_E_FORMAT if it
 * is none. */
enum us_status us_zip_desc_size(const unsigned char d[24], uint64_t *size);

#endif /* US_ZIPDESC_H */
