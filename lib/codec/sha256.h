/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): what SigV4
 * signing and the disk cache's block names need, without linking a crypto
 * library into every mount (a local SOURCE never signs anything).
 */
#ifndef US_SHA256_H
#define US_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct us_sha256 {
	uint32_t h[8];
	uint64_t len;           /* bytes hashed so far */
	unsigned char buf[64];  /* the block being filled */
	size_t nbuf;
};

void us_sha256_init(struct us_sha256 *s);
void us_sha256_update(struct us_sha256 *s, const void *data, size_t n);
void us_sha256_final(struct us_sha256 *s, unsigned char out[32]);
/* us_sha256 - the digest of @n bytes at @data, in one call. */
void us_sha256(const void *data, size_t n, unsigned char out[32]);
/* us_hmac_sha256 - HMAC-SHA256 of @msg (@mn bytes) under @key (@kn). */
void us_hmac_sha256(const void *key, size_t kn, const void *msg, size_t mn,
		    unsigned char out[32]);

#endif /* US_SHA256_H */
