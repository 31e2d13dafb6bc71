/* jsonw.c - appending to a buffer; out of memory is sticky and checked once. */
#include "jsonw.h"

#include <stdlib.h>
#include <string.h>

void us_sbuf_init(struct us_sbuf *b)
{
	memset(b, 0, sizeof(*b));
}

void us_sbuf_free(struct us_sbuf *b)
{
	free(b->p);
	us_sbuf_init(b);
}

static bool sbuf_reserve(struct us_sbuf *b, size_t n)
{
	size_t cap;
	char *p;

	if (b->oom)
		return false;
	if (n <= b->cap - b->len)
		return true;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n) {
		if (cap > SIZE_MAX / 2) {
			b->oom = true;
			return false;
		}
		cap *= 2;
	}
	p = realloc(b->p, cap);
	if (!p) {
		b->oom = true;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void us_sbuf_putn(struct us_sbuf *b, const char *s, size_t n)
{
	if (n == 0)
		return; /* b->p may still be NULL: no memcpy(NULL, ..., 0) */
	if (!sbuf_reserve(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void us_sbuf_puts(struct us_sbuf *b, const char *s)
{
	us_sbuf_putn(b, s, strlen(s));
}

void us_sbuf_putc(struct us_sbuf *b, char c)
{
	us_sbuf_putn(b, &c, 1);
}

void us_sbuf_u64(struct us_sbuf *b, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	us_sbuf_putn(b, tmp + i, sizeof(tmp) - i);
}

void us_sbuf_json_str(struct us_sbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	us_sbuf_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};

		switch (c) {
		case '"': us_sbuf_putn(b, "\\\"", 2); break;
		case '\\': us_sbuf_putn(b, "\\\\", 2); break;
		case '\b': us_sbuf_putn(b, "\\b", 2); break;
		case '\f': us_sbuf_putn(b, "\\f", 2); break;
		case '\n': us_sbuf_putn(b, "\\n", 2); break;
		case '\r': us_sbuf_putn(b, "\\r", 2); break;
		case '\t': us_sbuf_putn(b, "\\t", 2); break;
		default:
			if (c < 0x20)
				us_sbuf_putn(b, esc, 6);
			else
				us_sbuf_putc(b, (char)c);
		}
	}
	us_sbuf_putc(b, '"');
}
