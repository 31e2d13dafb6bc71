/*
 * pickle.h - a restricted pickle virtual machine.
 *
 * It reads pickles of protocols 2 to 5 (and the few protocol-0/1 opcodes that
 * torch and DCP pickles still use) into plain values.  It never executes or
 * imports anything: a GLOBAL is recorded as a (module, name) pair, REDUCE and
 * NEWOBJ become "call" nodes holding the callable and its arguments, and BUILD
 * attaches state to them.  Readers then pattern-match the tree (torch's
 * _rebuild_tensor_v2, DCP's Metadata dataclasses, ...).  Every length, count
 * and memo index is checked against the input; nesting and node counts are
 * bounded, so a hostile pickle costs at most memory proportional to its size.
 */
#ifndef US_PICKLE_H
#define US_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../arena.h"
#include "../us_error.h"

enum us_pk_kind {
	US_PK_NONE,
	US_PK_BOOL,
	US_PK_INT,    /* fits int64 */
	US_PK_BIGINT, /* does not fit: the value is not kept */
	US_PK_FLOAT,
	US_PK_STR,    /* unicode, UTF-8 */
	US_PK_BYTES,  /* bytes, bytearray, protocol-0/1 byte strings */
	US_PK_TUPLE,
	US_PK_LIST,
	US_PK_SET,    /* set and frozenset */
	US_PK_DICT,
	US_PK_GLOBAL, /* module.name, never resolved */
	US_PK_CALL,   /* REDUCE(fn, args) or NEWOBJ(cls, args); may carry
		       * state (BUILD) and items (SETITEMS/APPENDS on it) */
	US_PK_PERSID, /* a persistent id (torch storages) */
	US_PK_MARK,   /* internal: the MARK on the stack */
};

struct us_pk;

struct us_pk_seq {
	struct us_pk **v;
	size_t n, cap;
};

/* The collection part of a node: a DICT's entries, and the items set or
 * appended on a CALL (an OrderedDict, a defaultdict, a list subclass). */
struct us_pk_coll {
	struct us_pk_seq keys, vals; /* keys[i] -> vals[i], insertion order */
	struct us_pk_seq items;      /* APPEND(S) on a CALL */
};

struct us_pk {
	enum us_pk_kind kind;
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *s; /* NUL-terminated; BYTES may hold NULs */
			size_t len;
		} str;
		struct us_pk_seq seq; /* TUPLE, LIST, SET */
		struct {
			const char *module, *name;
		} global;
		struct {
			struct us_pk *fn, *args, *state;
		} call;
		struct us_pk *persid;
	} u;
	struct us_pk_coll *coll; /* DICT, or a CALL given items; else NULL */
};

/*
 * us_pickle_load - run @len bytes of @data.  On success *@out is the value
 * at STOP, allocated in @arena, and *@used is the number of bytes consumed
 * (the pickle is self-delimiting; bytes after STOP are not read).  On failure
 * @err holds the reason, without a path (us_err_reason): US_E_FORMAT for a
 * malformed, truncated or unsupported pickle and for one past its memory
 * bound, US_E_NOMEM when an allocation below that bound failed.
 */
enum us_status us_pickle_load(const unsigned char *data, size_t len,
			      struct us_arena *arena, struct us_pk **out,
			      size_t *used, struct us_err *err);

/*
 * Memory a pickle may take to load (docs/hardening.md, "Bounds"): a fixed
 * base, plus US_PICKLE_BUDGET_PER_BYTE per input byte of a pickle whose size
 * is itself the tensor table (a DCP .metadata: tensors x chunks), plus
 * US_PICKLE_BUDGET_PER_RECORD per storage record a torch.save archive holds.
 * So memory at mount grows with the number of tensors, never with a
 * pickle's nesting, memo or garbage.  us_pickle_load uses
 * us_pickle_budget(len, 0).
 */
#define US_PICKLE_BUDGET_BASE (128u << 20)
#define US_PICKLE_BUDGET_PER_BYTE 32u
#define US_PICKLE_BUDGET_PER_RECORD (16u << 10)
size_t us_pickle_budget(size_t len, size_t nrecords);

/*
 * us_pickle_load_bounded - us_pickle_load, refused (while it runs, before
 * the memory is taken) once the VM's nodes, strings, stacks and memo would
 * take more than @budget bytes.
 */
enum us_status us_pickle_load_bounded(const unsigned char *data, size_t len,
				      struct us_arena *arena, size_t budget,
				      struct us_pk **out, size_t *used,
				      struct us_err *err);

/* Helpers for pattern matching. */
bool us_pk_is_global(const struct us_pk *p, const char *module, const char *name);
/* The name part of a GLOBAL (for "match classes by final name"). */
bool us_pk_global_named(const struct us_pk *p, const char *name);
bool us_pk_is_str(const struct us_pk *p, const char *s);
/* Dict lookup by string key, on a DICT or on the items of a CALL. */
struct us_pk *us_pk_dict_get(const struct us_pk *d, const char *key);
/* Element @i of a TUPLE or LIST, or NULL. */
struct us_pk *us_pk_at(const struct us_pk *t, size_t i);
size_t us_pk_len(const struct us_pk *t);
/* The dict-like part of @p: a DICT itself, or a CALL with items (OrderedDict). */
bool us_pk_is_dictlike(const struct us_pk *p);

#endif /* US_PICKLE_H */
