/*
 * pklw.h - a pickle writer for the opcodes torch.load(weights_only=True)
 * accepts, nothing more.
 *
 * It writes protocol 2 exactly as CPython's pickle.Pickler does (same integer
 * encodings, BINPUT/LONG_BINPUT and BINGET/LONG_BINGET by memo index), so a
 * generated data.pkl can be compared byte for byte with torch.save's.  The
 * opcode set is closed by construction: enum us_pkw_op lists the only bare
 * opcodes callers may emit; strings, integers, globals and memo operations
 * have their own functions.  No FRAME, MEMOIZE, SHORT_BINUNICODE, BINBYTES
 * or STACK_GLOBAL can come out of here (formats.md).
 */
#ifndef US_PKLW_H
#define US_PKLW_H

#include <stdint.h>

#include "jsonw.h"

/* Bare opcodes (the byte is the value). */
enum us_pkw_op {
	US_PKW_MARK = 0x28,
	US_PKW_EMPTY_TUPLE = 0x29,
	US_PKW_STOP = 0x2e,
	US_PKW_BINPERSID = 0x51,
	US_PKW_REDUCE = 0x52,
	US_PKW_SETITEM = 0x73,
	US_PKW_TUPLE = 0x74,
	US_PKW_SETITEMS = 0x75,
	US_PKW_EMPTY_DICT = 0x7d,
	US_PKW_TUPLE1 = 0x85,
	US_PKW_TUPLE2 = 0x86,
	US_PKW_TUPLE3 = 0x87,
	US_PKW_NEWTRUE = 0x88,
	US_PKW_NEWFALSE = 0x89,
};

struct us_pklw {
	struct us_sbuf b; /* the pickle so far; b.oom is sticky */
	uint32_t memo;    /* the next memo index BINPUT will use */
};

/* us_pklw_init - start a pickle: PROTO 2.  Free with us_sbuf_free(&w->b). */
void us_pklw_init(struct us_pklw *w);
/* us_pklw_op - one bare opcode from the list above. */
void us_pklw_op(struct us_pklw *w, enum us_pkw_op op);
/* us_pklw_global - GLOBAL "module\nname\n" (protocol 2 has no STACK_GLOBAL). */
void us_pklw_global(struct us_pklw *w, const char *module, const char *name);
/* us_pklw_str - a str as BINUNICODE: u32 length, then the UTF-8 bytes. */
void us_pklw_str(struct us_pklw *w, const char *s);
/* us_pklw_uint - a non-negative int as pickle.Pickler writes it: BININT1,
 * BININT2, BININT, or LONG1 with the shortest two's-complement encoding
 * (always for values >= 2^31). */
void us_pklw_uint(struct us_pklw *w, uint64_t v);
/* us_pklw_put - memoize the object on top of the stack (BINPUT, or
 * LONG_BINPUT past 255); returns its memo index. */
uint32_t us_pklw_put(struct us_pklw *w);
/* us_pklw_get - push memo entry @idx (BINGET, or LONG_BINGET past 255). */
void us_pklw_get(struct us_pklw *w, uint32_t idx);
/* us_pklw_tuple - build a tuple of the @n items just pushed, as Pickler
 * does: EMPTY_TUPLE, TUPLE1-3, or (after a MARK the caller pushed before
 * the items when @n > 3) TUPLE.  Non-empty tuples are memoized. */
void us_pklw_tuple(struct us_pklw *w, uint32_t n);

#endif /* US_PKLW_H */
