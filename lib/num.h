/*
 * num.h - decimal numbers in text: HTTP headers, S3 XML, the canonical
 * options string.  One parser, so that every field refuses the same
 * things: no sign, no space, no overflow.
 */
#ifndef US_NUM_H
#define US_NUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* us_parse_u64 - all of @s[0..@n) as a decimal uint64 without overflow
 * (at least one digit, nothing else). */
bool us_parse_u64(const char *s, size_t n, uint64_t *v);

#endif /* US_NUM_H */
