/* pklw.c - protocol 2 pickle opcodes, encoded as CPython's Pickler does. */
#include "pklw.h"

#include <string.h>

#define OP_PROTO 0x80
#define OP_GLOBAL 0x63
#define OP_BINUNICODE 0x58
#define OP_BININT 0x4a
#define OP_BININT1 0x4b
#define OP_BININT2 0x4d
#define OP_LONG1 0x8a
#define OP_BINPUT 0x71
#define OP_LONG_BINPUT 0x72
#define OP_BINGET 0x68
#define OP_LONG_BINGET 0x6a

static void put_byte(struct us_pklw *w, unsigned v)
{
	us_sbuf_putc(&w->b, (char)(unsigned char)v);
}

/* @n bytes of @v, little-endian. */
static void put_le(struct us_pklw *w, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		put_byte(w, (unsigned)(v >> (8 * i)) & 0xff);
}

void us_pklw_init(struct us_pklw *w)
{
	us_sbuf_init(&w->b);
	w->memo = 0;
	put_byte(w, OP_PROTO);
	put_byte(w, 2);
}

void us_pklw_op(struct us_pklw *w, enum us_pkw_op op)
{
	put_byte(w, (unsigned)op);
}

void us_pklw_global(struct us_pklw *w, const char *module, const char *name)
{
	put_byte(w, OP_GLOBAL);
	us_sbuf_puts(&w->b, module);
	us_sbuf_putc(&w->b, '\n');
	us_sbuf_puts(&w->b, name);
	us_sbuf_putc(&w->b, '\n');
}

void us_pklw_str(struct us_pklw *w, const char *s)
{
	size_t n = strlen(s);

	/* A name longer than 4 GiB cannot come from any source reader. */
	if (n > UINT32_MAX) {
		w->b.oom = true;
		return;
	}
	put_byte(w, OP_BINUNICODE);
	put_le(w, n, 4);
	us_sbuf_putn(&w->b, s, n);
}

void us_pklw_uint(struct us_pklw *w, uint64_t v)
{
	unsigned n = 0;

	if (v <= 0xff) {
		put_byte(w, OP_BININT1);
		put_le(w, v, 1);
	} else if (v <= 0xffff) {
		put_byte(w, OP_BININT2);
		put_le(w, v, 2);
	} else if (v <= 0x7fffffff) {
		put_byte(w, OP_BININT);
		put_le(w, v, 4);
	} else {
		/* Python: (bit_length >> 3) + 1 bytes, so the sign bit is 0. */
		for (uint64_t x = v; x; x >>= 1)
			n++;
		n = (n >> 3) + 1;
		put_byte(w, OP_LONG1);
		put_byte(w, n);
		put_le(w, v, n > 8 ? 8 : n);
		if (n > 8)
			put_byte(w, 0);
	}
}

uint32_t us_pklw_put(struct us_pklw *w)
{
	uint32_t idx = w->memo++;

	if (idx < 256) {
		put_byte(w, OP_BINPUT);
		put_le(w, idx, 1);
	} else {
		put_byte(w, OP_LONG_BINPUT);
		put_le(w, idx, 4);
	}
	return idx;
}

void us_pklw_get(struct us_pklw *w, uint32_t idx)
{
	if (idx < 256) {
		put_byte(w, OP_BINGET);
		put_le(w, idx, 1);
	} else {
		put_byte(w, OP_LONG_BINGET);
		put_le(w, idx, 4);
	}
}

void us_pklw_tuple(struct us_pklw *w, uint32_t n)
{
	static const enum us_pkw_op small[] = {
		US_PKW_EMPTY_TUPLE, US_PKW_TUPLE1, US_PKW_TUPLE2, US_PKW_TUPLE3,
	};

	us_pklw_op(w, n <= 3 ? small[n] : US_PKW_TUPLE);
	if (n)
		us_pklw_put(w);
}
