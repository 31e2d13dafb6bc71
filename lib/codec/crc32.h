/* crc32.h - the CRC-32 of zip records (one implementation for the zip
 * writer and for checking zstd items against their data descriptors). */
#ifndef US_CRC32_H
#define US_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* us_crc32 - the zip CRC-32 of @n bytes at @p, continuing from @crc (0 to
 * start).  Slice-by-4 tables: reads check whole storage records with it. */
uint32_t us_crc32(uint32_t crc, const void *p, size_t n);

/*
 * us_crc32_suffix - the CRC of B from the CRC of A||B (@crc_ab), the CRC
 * of A (@crc_a) and B's length: what a stream that only learns where B
 * starts after passing it needs.  (zlib's crc32_combine, solved for B.)
 */
uint32_t us_crc32_suffix(uint32_t crc_ab, uint32_t crc_a, uint64_t len_b);

#endif /* US_CRC32_H */
