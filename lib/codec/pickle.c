/*
 * pickle.c - the restricted pickle VM (see pickle.h).
 *
 * Each opcode creates at most one node, so memory grows at most linearly
 * with the input -- but by a factor of ~100 (a one-byte EMPTY_DICT costs a
 * node and a collection), and the value stack, mark stack and memo grow with
 * it too.  So every allocation is charged against a budget the caller gives
 * (charge()), checked before the memory is taken: a hostile pickle of nested
 * dicts, a memo flood or plain garbage is refused while it runs, never after
 * it has filled memory.  Any opcode that would need code to run (or
 * out-of-band buffers) is refused.
 */
#include "pickle.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct memo_slot {
	uint32_t key;
	bool used;
	struct us_pk *val;
};

struct vm {
	const unsigned char *p, *end;
	struct us_arena *a;
	struct us_pk **stack;
	size_t sp, scap;
	size_t *marks;
	size_t nmarks, mcap;
	struct memo_slot *memo;
	size_t memo_n, memo_cap; /* open addressing, power-of-two capacity */
	size_t spent, budget; /* bytes charged, and the bound on them */
	bool broke;           /* the budget ran out: every failure says so */
	enum us_status status; /* of the first failure, with its reason: */
	const char *why;
};

/* ---- allocation ----------------------------------------------------------- */

static const char over_budget[] =
	"its pickle needs more memory to load than the bound for its tensors "
	"allows (docs/hardening.md, \"Bounds\")";

/*
 * Record a failure and return its status.  Once the budget has run out,
 * every failure that follows (a NULL node, a refused push) is that one: a
 * refusal of the file (US_E_FORMAT), not the machine out of memory.
 */
static enum us_status fail(struct vm *vm, enum us_status status, const char *why)
{
	assert(status != US_OK);
	vm->status = vm->broke ? US_E_FORMAT : status;
	vm->why = vm->broke ? over_budget : why;
	return vm->status;
}

#define FAIL(vm, msg) fail((vm), US_E_FORMAT, (msg))
/* An allocation that failed below the budget: the machine's memory. */
#define NOMEM(vm) fail((vm), US_E_NOMEM, "out of memory")

/* Account for @n more bytes; false (and the failure recorded) past the
 * budget.  The budget bounds a hostile file, so passing it is a refusal. */
static bool charge(struct vm *vm, size_t n)
{
	if (n > vm->budget - vm->spent) {
		vm->broke = true;
		fail(vm, US_E_FORMAT, over_budget);
		return false;
	}
	vm->spent += n;
	return true;
}

static struct us_pk *node(struct vm *vm, enum us_pk_kind kind)
{
	struct us_pk *n = charge(vm, sizeof(*n)) ?
			  us_arena_alloc(vm->a, sizeof(*n)) : NULL;

	if (n)
		n->kind = kind;
	return n;
}

static enum us_status seq_push(struct vm *vm, struct us_pk_seq *s, struct us_pk *v)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4;
		struct us_pk **nv;

		if (cap > SIZE_MAX / sizeof(*nv) || !charge(vm, cap * sizeof(*nv)))
			return NOMEM(vm);
		nv = us_arena_calloc(vm->a, cap, sizeof(*nv));
		if (!nv)
			return NOMEM(vm);
		if (s->n)
			memcpy(nv, s->v, s->n * sizeof(*nv));
		s->v = nv;
		s->cap = cap;
	}
	s->v[s->n++] = v;
	return US_OK;
}

static struct us_pk_coll *coll_of(struct vm *vm, struct us_pk *n)
{
	if (!n->coll && charge(vm, sizeof(*n->coll)))
		n->coll = us_arena_alloc(vm->a, sizeof(*n->coll));
	return n->coll;
}

/*
 * A DICT always carries its (possibly empty) collection, so that callers may
 * follow p->coll of anything us_pk_is_dictlike() accepts.  (An empty dict,
 * `{"a": {}}`, used to be a DICT with coll == NULL: a NULL dereference in
 * every walker -- found by fuzz_torch.)
 */
static struct us_pk *dict_node(struct vm *vm)
{
	struct us_pk *d = node(vm, US_PK_DICT);

	return d && coll_of(vm, d) ? d : NULL;
}

/* ---- stacks --------------------------------------------------------------- */

static enum us_status push(struct vm *vm, struct us_pk *v)
{
	if (!v)
		return NOMEM(vm);
	if (vm->sp == vm->scap) {
		size_t cap = vm->scap ? vm->scap * 2 : 64;
		void *p;

		if (!charge(vm, (cap - vm->scap) * sizeof(*vm->stack)))
			return vm->status;
		p = realloc(vm->stack, cap * sizeof(*vm->stack));
		if (!p)
			return NOMEM(vm);
		vm->stack = p;
		vm->scap = cap;
	}
	vm->stack[vm->sp++] = v;
	return US_OK;
}

/* The top of the stack, which must not be a MARK (or below the last one). */
static struct us_pk *top(struct vm *vm)
{
	size_t floor = vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;

	return vm->sp > floor ? vm->stack[vm->sp - 1] : NULL;
}

static struct us_pk *pop(struct vm *vm)
{
	struct us_pk *v = top(vm);

	if (v)
		vm->sp--;
	return v;
}

static enum us_status push_mark(struct vm *vm)
{
	if (vm->nmarks == vm->mcap) {
		size_t cap = vm->mcap ? vm->mcap * 2 : 16;
		void *p;

		if (!charge(vm, (cap - vm->mcap) * sizeof(*vm->marks)))
			return vm->status;
		p = realloc(vm->marks, cap * sizeof(*vm->marks));
		if (!p)
			return NOMEM(vm);
		vm->marks = p;
		vm->mcap = cap;
	}
	vm->marks[vm->nmarks++] = vm->sp;
	return US_OK;
}

/* Pop to the last MARK: the items are stack[*from .. sp). */
static enum us_status pop_mark(struct vm *vm, size_t *from)
{
	if (!vm->nmarks)
		return FAIL(vm, "no MARK on the stack");
	*from = vm->marks[--vm->nmarks];
	return US_OK;
}

/* ---- memo ----------------------------------------------------------------- */

static struct memo_slot *memo_find(struct vm *vm, uint32_t key)
{
	size_t mask = vm->memo_cap - 1, i = (key * 2654435761u) & mask;

	while (vm->memo[i].used && vm->memo[i].key != key)
		i = (i + 1) & mask;
	return &vm->memo[i];
}

static enum us_status memo_put(struct vm *vm, uint32_t key, struct us_pk *v)
{
	struct memo_slot *s;

	if (!v)
		return FAIL(vm, "memo of an empty stack");
	if ((vm->memo_n + 1) * 2 > vm->memo_cap) {
		struct memo_slot *old = vm->memo;
		size_t ocap = vm->memo_cap;

		vm->memo_cap = ocap ? ocap * 2 : 256;
		if (!charge(vm, (vm->memo_cap - ocap) * sizeof(*vm->memo))) {
			vm->memo_cap = ocap;
			return vm->status;
		}
		vm->memo = calloc(vm->memo_cap, sizeof(*vm->memo));
		if (!vm->memo) {
			vm->memo = old;
			vm->memo_cap = ocap;
			return NOMEM(vm);
		}
		for (size_t i = 0; i < ocap; i++)
			if (old[i].used)
				*memo_find(vm, old[i].key) = old[i];
		free(old);
	}
	s = memo_find(vm, key);
	if (!s->used)
		vm->memo_n++;
	s->used = true;
	s->key = key;
	s->val = v;
	return US_OK;
}

static enum us_status memo_get(struct vm *vm, uint32_t key)
{
	struct memo_slot *s = vm->memo_cap ? memo_find(vm, key) : NULL;

	if (!s || !s->used)
		return FAIL(vm, "memo reference to an unset slot");
	return push(vm, s->val);
}

/* ---- reading the input ---------------------------------------------------- */

static enum us_status need(struct vm *vm, size_t n)
{
	return (size_t)(vm->end - vm->p) >= n ? US_OK : FAIL(vm, "truncated");
}

static uint64_t rd_le(struct vm *vm, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)vm->p[i] << (8 * i);
	vm->p += n;
	return v;
}

/* A string of @n bytes from the input, copied NUL-terminated. */
static enum us_status push_string(struct vm *vm, enum us_pk_kind kind, uint64_t n)
{
	struct us_pk *s;
	char *copy;

	if ((uint64_t)(vm->end - vm->p) < n)
		return FAIL(vm, "string runs past the end");
	s = node(vm, kind);
	if (!s || !charge(vm, (size_t)n + 1))
		return s ? vm->status : NOMEM(vm);
	copy = us_arena_strndup(vm->a, (const char *)vm->p, (size_t)n);
	if (!copy)
		return NOMEM(vm);
	s->u.str.s = copy;
	s->u.str.len = (size_t)n;
	vm->p += n;
	return push(vm, s);
}

static enum us_status push_int(struct vm *vm, int64_t v)
{
	struct us_pk *n = node(vm, US_PK_INT);

	if (n)
		n->u.i = v;
	return push(vm, n);
}

/* LONG1/LONG4: little-endian two's complement of @n bytes. */
static enum us_status push_long(struct vm *vm, uint64_t n)
{
	struct us_pk *v;
	uint64_t u = 0;

	if ((uint64_t)(vm->end - vm->p) < n)
		return FAIL(vm, "long runs past the end");
	if (n > 8) {
		vm->p += n;
		return push(vm, node(vm, US_PK_BIGINT));
	}
	for (unsigned i = 0; i < n; i++)
		u |= (uint64_t)vm->p[i] << (8 * i);
	if (n && n < 8 && (vm->p[n - 1] & 0x80))
		u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
	vm->p += n;
	v = node(vm, US_PK_INT);
	if (v)
		v->u.i = (int64_t)u;
	return push(vm, v);
}

/* Protocol-0 text line (INT, LONG, GLOBAL): up to '\n'. */
static enum us_status read_line(struct vm *vm, const char **s, size_t *len)
{
	const unsigned char *nl = memchr(vm->p, '\n', (size_t)(vm->end - vm->p));

	if (!nl)
		return FAIL(vm, "unterminated line");
	*s = (const char *)vm->p;
	*len = (size_t)(nl - vm->p);
	vm->p = nl + 1;
	return US_OK;
}

static enum us_status push_global(struct vm *vm, const char *mod, size_t mlen,
				  const char *name, size_t nlen)
{
	struct us_pk *g = node(vm, US_PK_GLOBAL);

	if (!g || !charge(vm, mlen + nlen + 2))
		return NOMEM(vm);
	g->u.global.module = us_arena_strndup(vm->a, mod, mlen);
	g->u.global.name = us_arena_strndup(vm->a, name, nlen);
	if (!g->u.global.module || !g->u.global.name)
		return NOMEM(vm);
	return push(vm, g);
}

/* ---- opcodes that build containers ---------------------------------------- */

static enum us_status make_seq(struct vm *vm, enum us_pk_kind kind, size_t from)
{
	struct us_pk *t = node(vm, kind);

	if (!t)
		return NOMEM(vm);
	for (size_t i = from; i < vm->sp; i++)
		US_TRY(seq_push(vm, &t->u.seq, vm->stack[i]));
	vm->sp = from;
	return push(vm, t);
}

static enum us_status tuple_n(struct vm *vm, size_t n)
{
	size_t floor = vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;

	if (vm->sp - floor < n)
		return FAIL(vm, "stack underflow");
	return make_seq(vm, US_PK_TUPLE, vm->sp - n);
}

/* SETITEM(S): pairs stack[from..sp) into the dict (or dict-like call) below. */
static enum us_status set_items(struct vm *vm, size_t from)
{
	struct us_pk *d;
	struct us_pk_coll *c;

	if ((vm->sp - from) % 2 || from == 0 ||
	    (vm->nmarks && vm->marks[vm->nmarks - 1] >= from))
		return FAIL(vm, "bad SETITEMS");
	d = vm->stack[from - 1];
	if (d->kind != US_PK_DICT && d->kind != US_PK_CALL)
		return FAIL(vm, "SETITEMS on something that is not a dict");
	c = coll_of(vm, d);
	if (!c)
		return NOMEM(vm);
	for (size_t i = from; i < vm->sp; i += 2) {
		US_TRY(seq_push(vm, &c->keys, vm->stack[i]));
		US_TRY(seq_push(vm, &c->vals, vm->stack[i + 1]));
	}
	vm->sp = from;
	return US_OK;
}

/* APPEND(S) / ADDITEMS: into the list, set or list-like call below. */
static enum us_status append_items(struct vm *vm, size_t from)
{
	struct us_pk *l;
	struct us_pk_seq *s;

	if (from == 0 || (vm->nmarks && vm->marks[vm->nmarks - 1] >= from))
		return FAIL(vm, "bad APPENDS");
	l = vm->stack[from - 1];
	if (l->kind == US_PK_LIST || l->kind == US_PK_SET)
		s = &l->u.seq;
	else if (l->kind == US_PK_CALL && coll_of(vm, l))
		s = &l->coll->items;
	else
		return FAIL(vm, "APPENDS on something that is not a list");
	for (size_t i = from; i < vm->sp; i++)
		US_TRY(seq_push(vm, s, vm->stack[i]));
	vm->sp = from;
	return US_OK;
}

static enum us_status op_call(struct vm *vm)
{
	struct us_pk *args = pop(vm), *fn = pop(vm), *c;

	if (!args || !fn || args->kind != US_PK_TUPLE)
		return FAIL(vm, "REDUCE/NEWOBJ without callable and argument tuple");
	c = node(vm, US_PK_CALL);
	if (!c)
		return NOMEM(vm);
	c->u.call.fn = fn;
	c->u.call.args = args;
	return push(vm, c);
}

static enum us_status op_build(struct vm *vm)
{
	struct us_pk *state = pop(vm), *obj = top(vm);

	if (!state || !obj)
		return FAIL(vm, "BUILD without object and state");
	if (obj->kind == US_PK_CALL)
		obj->u.call.state = state;
	/* BUILD on anything else (a global) is state we have no use for. */
	return US_OK;
}

static enum us_status op_stack_global(struct vm *vm)
{
	struct us_pk *name = pop(vm), *mod = pop(vm);

	if (!name || !mod || name->kind != US_PK_STR || mod->kind != US_PK_STR)
		return FAIL(vm, "STACK_GLOBAL needs two strings");
	return push_global(vm, mod->u.str.s, mod->u.str.len, name->u.str.s,
			   name->u.str.len);
}

static enum us_status op_text_global(struct vm *vm)
{
	const char *mod, *name;
	size_t ml, nl;

	US_TRY(read_line(vm, &mod, &ml));
	US_TRY(read_line(vm, &name, &nl));
	return push_global(vm, mod, ml, name, nl);
}

static enum us_status op_text_int(struct vm *vm, bool is_long)
{
	const char *s;
	size_t len;
	char buf[32], *end;
	long long v;

	US_TRY(read_line(vm, &s, &len));
	if (is_long && len && s[len - 1] == 'L')
		len--;
	if (len == 0 || len >= sizeof(buf))
		return len ? push(vm, node(vm, US_PK_BIGINT)) : FAIL(vm, "bad INT");
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (!is_long && (!strcmp(buf, "00") || !strcmp(buf, "01"))) {
		struct us_pk *b = node(vm, US_PK_BOOL);

		if (b)
			b->u.b = buf[1] == '1';
		return push(vm, b);
	}
	v = strtoll(buf, &end, 10);
	if (*end)
		return FAIL(vm, "bad INT");
	return push_int(vm, v);
}

static enum us_status op_binfloat(struct vm *vm)
{
	struct us_pk *f;
	uint64_t bits = 0;

	US_TRY(need(vm, 8));
	for (int i = 0; i < 8; i++) /* big-endian */
		bits = bits << 8 | vm->p[i];
	vm->p += 8;
	f = node(vm, US_PK_FLOAT);
	if (f)
		memcpy(&f->u.f, &bits, sizeof(f->u.f));
	return push(vm, f);
}

static enum us_status push_bool(struct vm *vm, bool b)
{
	struct us_pk *n = node(vm, US_PK_BOOL);

	if (n)
		n->u.b = b;
	return push(vm, n);
}

static enum us_status op_persid(struct vm *vm)
{
	struct us_pk *id = pop(vm), *n;

	if (!id)
		return FAIL(vm, "BINPERSID on an empty stack");
	n = node(vm, US_PK_PERSID);
	if (n)
		n->u.persid = id;
	return push(vm, n);
}

/* ---- the dispatch loop ---------------------------------------------------- */

/* Opcodes with a little-endian length or index operand of @n bytes. */
static enum us_status op_sized(struct vm *vm, unsigned char op, unsigned n)
{
	uint64_t v;

	US_TRY(need(vm, n));
	v = rd_le(vm, n);
	switch (op) {
	case 'J': return push_int(vm, (int32_t)(uint32_t)v);   /* BININT */
	case 'K': case 'M': return push_int(vm, (int64_t)v);   /* BININT1/2 */
	case 'h': case 'j': return memo_get(vm, (uint32_t)v);  /* BINGET */
	case 'q': case 'r': return memo_put(vm, (uint32_t)v, top(vm)); /* BINPUT */
	case 'U': case 'T': case 'C': case 'B': case 0x8e: case 0x96:
		return push_string(vm, US_PK_BYTES, v);
	case 'X': case 0x8c: case 0x8d:
		return push_string(vm, US_PK_STR, v);
	case 0x8a: case 0x8b:
		return push_long(vm, v);
	case 0x95: return US_OK;                               /* FRAME */
	}
	return FAIL(vm, "internal: unknown sized opcode");
}

static unsigned operand_size(unsigned char op)
{
	switch (op) {
	case 'K': case 'h': case 'q': case 'U': case 'C': case 0x8a: case 0x8c:
		return 1;
	case 'M':
		return 2;
	case 'J': case 'j': case 'r': case 'T': case 'B': case 'X': case 0x8b:
		return 4;
	case 0x8d: case 0x8e: case 0x95: case 0x96:
		return 8;
	}
	return 0;
}

static enum us_status step(struct vm *vm, unsigned char op)
{
	size_t from;
	unsigned n = operand_size(op);

	if (n)
		return op_sized(vm, op, n);
	switch (op) {
	case 0x80: /* PROTO */
		US_TRY(need(vm, 1));
		return vm->p++[0] <= 5 ? US_OK : FAIL(vm, "pickle protocol above 5");
	case '(': return push_mark(vm);
	case '0': return pop(vm) ? US_OK : FAIL(vm, "POP on an empty stack");
	case '1': US_TRY(pop_mark(vm, &from)); vm->sp = from; return US_OK;
	case '2': return top(vm) ? push(vm, top(vm)) : FAIL(vm, "DUP on an empty stack");
	case 'N': return push(vm, node(vm, US_PK_NONE));
	case 0x88: return push_bool(vm, true);
	case 0x89: return push_bool(vm, false);
	case 'I': return op_text_int(vm, false);
	case 'L': return op_text_int(vm, true);
	case 'G': return op_binfloat(vm);
	case ')': return push(vm, node(vm, US_PK_TUPLE));
	case ']': return push(vm, node(vm, US_PK_LIST));
	case '}': return push(vm, dict_node(vm));
	case 0x8f: return push(vm, node(vm, US_PK_SET));
	case 't': US_TRY(pop_mark(vm, &from)); return make_seq(vm, US_PK_TUPLE, from);
	case 'l': US_TRY(pop_mark(vm, &from)); return make_seq(vm, US_PK_LIST, from);
	case 0x91: US_TRY(pop_mark(vm, &from)); return make_seq(vm, US_PK_SET, from);
	case 'd':
		US_TRY(pop_mark(vm, &from));
		US_TRY(push(vm, dict_node(vm)));
		/* Move the dict (just pushed) below its items, then set them.
		 * (This used to drop the last item -- sp-- after the move -- so
		 * every protocol-0 dict with items was refused or truncated.) */
		{
			struct us_pk *d = vm->stack[vm->sp - 1];

			memmove(vm->stack + from + 1, vm->stack + from,
				(vm->sp - 1 - from) * sizeof(*vm->stack));
			vm->stack[from] = d;
		}
		return set_items(vm, from + 1);
	case 0x85: return tuple_n(vm, 1);
	case 0x86: return tuple_n(vm, 2);
	case 0x87: return tuple_n(vm, 3);
	case 's': return vm->sp >= 2 ? set_items(vm, vm->sp - 2) : FAIL(vm, "bad SETITEM");
	case 'u': US_TRY(pop_mark(vm, &from)); return set_items(vm, from);
	case 'a': return vm->sp >= 1 ? append_items(vm, vm->sp - 1) : FAIL(vm, "bad APPEND");
	case 'e': case 0x90:
		US_TRY(pop_mark(vm, &from));
		return append_items(vm, from);
	case 'c': return op_text_global(vm);
	case 0x93: return op_stack_global(vm);
	case 'R': case 0x81: return op_call(vm);
	case 0x92: /* NEWOBJ_EX: cls, args, kwargs -> drop kwargs */
		return pop(vm) ? op_call(vm) : FAIL(vm, "bad NEWOBJ_EX");
	case 'b': return op_build(vm);
	case 'Q': return op_persid(vm);
	case 0x94: return memo_put(vm, (uint32_t)vm->memo_n, top(vm)); /* MEMOIZE */
	}
	return FAIL(vm, "unsupported pickle opcode");
}

enum us_status us_pickle_load(const unsigned char *data, size_t len,
			      struct us_arena *arena, struct us_pk **out,
			      size_t *used, struct us_err *err)
{
	return us_pickle_load_bounded(data, len, arena, us_pickle_budget(len, 0),
				      out, used, err);
}

size_t us_pickle_budget(size_t len, size_t nrecords)
{
	size_t b = US_PICKLE_BUDGET_BASE, x;

	/* saturating: past the address space, the allocator refuses first */
	if (__builtin_mul_overflow(len, (size_t)US_PICKLE_BUDGET_PER_BYTE, &x) ||
	    __builtin_add_overflow(b, x, &b) ||
	    __builtin_mul_overflow(nrecords, (size_t)US_PICKLE_BUDGET_PER_RECORD, &x) ||
	    __builtin_add_overflow(b, x, &b))
		return SIZE_MAX;
	return b;
}

/* Run opcodes up to STOP; US_OK with the one value left on the stack. */
static enum us_status run(struct vm *vm)
{
	while (vm->p < vm->end) {
		unsigned char op = *vm->p++;

		if (op == '.') /* STOP */
			return vm->sp == 1 && !vm->nmarks ? US_OK :
			       FAIL(vm, "STOP with a stack that is not one value");
		US_TRY(step(vm, op));
	}
	return FAIL(vm, "no STOP opcode: truncated");
}

enum us_status us_pickle_load_bounded(const unsigned char *data, size_t len,
				      struct us_arena *arena, size_t budget,
				      struct us_pk **out, size_t *used,
				      struct us_err *err)
{
	struct vm vm = { .p = data, .end = data + len, .a = arena,
			 .budget = budget };
	enum us_status rc = run(&vm);

	if (rc == US_OK) {
		*out = vm.stack[0];
		*used = (size_t)(vm.p - data);
	} else {
		assert(vm.why && rc == vm.status);
		us_err_reason(err, rc, "%s", vm.why);
	}
	free(vm.stack);
	free(vm.marks);
	free(vm.memo);
	return rc;
}

/* ---- pattern-matching helpers --------------------------------------------- */

bool us_pk_is_global(const struct us_pk *p, const char *module, const char *name)
{
	return p && p->kind == US_PK_GLOBAL && !strcmp(p->u.global.module, module) &&
	       !strcmp(p->u.global.name, name);
}

bool us_pk_global_named(const struct us_pk *p, const char *name)
{
	return p && p->kind == US_PK_GLOBAL && !strcmp(p->u.global.name, name);
}

bool us_pk_is_str(const struct us_pk *p, const char *s)
{
	return p && p->kind == US_PK_STR && strlen(s) == p->u.str.len &&
	       !memcmp(p->u.str.s, s, p->u.str.len);
}

bool us_pk_is_dictlike(const struct us_pk *p)
{
	return p && (p->kind == US_PK_DICT || (p->kind == US_PK_CALL && p->coll &&
					       p->coll->keys.n));
}

struct us_pk *us_pk_dict_get(const struct us_pk *d, const char *key)
{
	if (!d || !d->coll)
		return NULL;
	for (size_t i = d->coll->keys.n; i-- > 0;)
		if (us_pk_is_str(d->coll->keys.v[i], key))
			return d->coll->vals.v[i];
	return NULL;
}

size_t us_pk_len(const struct us_pk *t)
{
	return t && (t->kind == US_PK_TUPLE || t->kind == US_PK_LIST) ? t->u.seq.n : 0;
}

struct us_pk *us_pk_at(const struct us_pk *t, size_t i)
{
	return i < us_pk_len(t) ? t->u.seq.v[i] : NULL;
}
