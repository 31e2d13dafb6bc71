/*
 * jsonw.h - a growable byte buffer with JSON string escaping.
 *
 * Escaping matches serde_json (what the safetensors writer uses): '"' and
 * '\\', \b \f \n \r \t, other control bytes as \u00xx in lower-case hex, and
 * everything else (UTF-8 included) written as is.
 */
#ifndef US_JSONW_H
#define US_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct us_sbuf {
	char *p;
	size_t len, cap;
	bool oom; /* sticky: set once an append failed */
};

void us_sbuf_init(struct us_sbuf *b);
void us_sbuf_free(struct us_sbuf *b);
void us_sbuf_putn(struct us_sbuf *b, const char *s, size_t n);
void us_sbuf_puts(struct us_sbuf *b, const char *s);
void us_sbuf_putc(struct us_sbuf *b, char c);
void us_sbuf_u64(struct us_sbuf *b, uint64_t v);
/* us_sbuf_json_str - append @s as a quoted, escaped JSON string. */
void us_sbuf_json_str(struct us_sbuf *b, const char *s);

#endif /* US_JSONW_H */
