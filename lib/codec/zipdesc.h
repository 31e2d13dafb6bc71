/*
 * zipdesc.h - checking a zip record against its data descriptor: a fast
 * CRC-32 (zlib's), taking a prefix off a CRC, and the descriptor's fields.
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

/* us_crc32_fast - continue @crc (0 to start) over @n bytes at @p: the
 * value of zipw.h's bitwise us_crc32, several times faster (reads check
 * whole storage records with it). */
uint32_t us_crc32_fast(uint32_t crc, const void *p, size_t n);

/*
 * us_crc32_suffix - the CRC of B from the CRC of A||B (@crc_ab), the CRC
 * of A (@crc_a) and B's length: what a stream that only learns where B
 * starts after passing it needs.  (zlib's crc32_combine, solved for B.)
 */
uint32_t us_crc32_suffix(uint32_t crc_ab, uint32_t crc_a, uint64_t len_b);

/*
 * us_zip_desc_check - is @d (24 bytes) a data descriptor ("PK\x07\x08",
 * crc, sizes of 4 or 8 bytes) for a record of @size bytes whose CRC is
 * @crc?  A stored CRC of 0 means the writer did not compute one
 * (torch.serialization.config.save.compute_crc32 = False): sizes only.
 * Returns 0, or -1.
 */
int us_zip_desc_check(const unsigned char d[24], uint64_t size, uint32_t crc);

/* us_zip_desc_size - the record size a descriptor at @d states (either
 * form, told apart by both its size fields agreeing); -1 if it is none. */
int us_zip_desc_size(const unsigned char d[24], uint64_t *size);

#endif /* US_ZIPDESC_H */
