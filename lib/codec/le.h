/* le.h - little-endian integers in byte buffers (zip, zip descriptors, zstd
 * frame and block headers: every on-disk integer these formats hold). */
#ifndef US_LE_H
#define US_LE_H

#include <stdint.h>

/* us_le - the @n-byte (n <= 8) little-endian unsigned integer at @p. */
static inline uint64_t us_le(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif /* US_LE_H */
