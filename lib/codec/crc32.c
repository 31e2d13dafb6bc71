/* crc32.c - table-driven CRC-32 (slice-by-4) and zlib's GF(2) algebra. */
#include "crc32.h"

#include <pthread.h>

#define POLY 0xedb88320u

static uint32_t table[4][256];
static uint32_t x2n[32]; /* x^(2^k) mod the polynomial */
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* a * b mod the polynomial (reflected bit order), as zlib's multmodp. */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;

	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

static void init(void)
{
	uint32_t p = 1u << 30; /* x^1 */

	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 4; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^
				      table[0][table[t - 1][i] & 0xff];
	x2n[0] = p;
	for (int k = 1; k < 32; k++)
		x2n[k] = p = multmodp(p, p);
}

uint32_t us_crc32(uint32_t crc, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	pthread_once(&once, init);
	crc = ~crc;
	for (; n >= 4; n -= 4, p += 4) {
		crc ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 |
		       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
		crc = table[3][crc & 0xff] ^ table[2][(crc >> 8) & 0xff] ^
		      table[1][(crc >> 16) & 0xff] ^ table[0][crc >> 24];
	}
	while (n--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

/* x^(n * 2^k) mod the polynomial. */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
	uint32_t p = 1u << 31; /* x^0 */

	while (n) {
		if (n & 1)
			p = multmodp(x2n[k & 31], p);
		n >>= 1;
		k++;
	}
	return p;
}

/* crc(A||B) = x^(8|B|) * crc(A) ^ crc(B), so crc(B) is one XOR away. */
uint32_t us_crc32_suffix(uint32_t crc_ab, uint32_t crc_a, uint64_t len_b)
{
	pthread_once(&once, init);
	return crc_ab ^ multmodp(x2nmodp(len_b, 3), crc_a);
}
