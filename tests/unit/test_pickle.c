/*
 * test_pickle.c - the restricted pickle VM (lib/codec/pickle.c): the values
 * it builds, each kind of refusal, its memory bound, and the kind of every
 * failure: a malformed or over-bound pickle is US_E_FORMAT, an allocation
 * that fails below the bound is US_E_NOMEM.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "codec/pickle.h"
#include "failmalloc.h"
#include "harness.h"

/* A pickle literal: the bytes of a string constant, without its NUL. */
#define PK(s) (const unsigned char *)(s), sizeof(s) - 1

struct run {
	struct us_arena a;
	struct us_pk *root;
	size_t used;
	struct us_err err;
	enum us_status st;
};

static void run_bounded(struct run *r, const unsigned char *pk, size_t len,
			size_t budget)
{
	us_arena_init(&r->a);
	r->root = NULL;
	r->used = 0;
	r->err.status = US_OK;
	r->err.msg[0] = '\0';
	r->st = us_pickle_load_bounded(pk, len, &r->a, budget, &r->root,
				       &r->used, &r->err);
}

static void run(struct run *r, const unsigned char *pk, size_t len)
{
	run_bounded(r, pk, len, us_pickle_budget(len, 0));
}

static void done(struct run *r)
{
	us_arena_free(&r->a);
}

/* Does @pk fail as US_E_FORMAT with a reason (and only a reason: no path)
 * that contains @word? */
static bool refused(const unsigned char *pk, size_t len, const char *word)
{
	struct run r;
	bool ok;

	run(&r, pk, len);
	ok = r.st == US_E_FORMAT && r.err.status == US_E_FORMAT &&
	     strstr(r.err.msg, word) && strncmp(r.err.msg, ".: ", 3) != 0;
	if (!ok)
		fprintf(stderr, "  status %d, reason '%s', wanted '%s'\n", r.st,
			r.err.msg, word);
	done(&r);
	return ok;
}

static bool is_int(const struct us_pk *p, int64_t v)
{
	return p && p->kind == US_PK_INT && p->u.i == v;
}

/* pickle.dumps({'a': 1, 'b': [1.5, None, True], 'c': b'xy', 'd': -70000,
 * 'e': 2**70}, protocol=4): FRAME, MEMOIZE, SETITEMS, APPENDS, BINFLOAT,
 * SHORT_BINBYTES, BININT, LONG1. */
#define PROTO4 \
	"\x80\x04\x95\x3f\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61" \
	"\x94\x4b\x01\x8c\x01\x62\x94\x5d\x94\x28\x47\x3f\xf8\x00\x00\x00\x00" \
	"\x00\x00\x4e\x88\x65\x8c\x01\x63\x94\x43\x02\x78\x79\x94\x8c\x01\x64" \
	"\x94\x4a\x90\xee\xfe\xff\x8c\x01\x65\x94\x8a\x09\x00\x00\x00\x00\x00" \
	"\x00\x00\x00\x40\x75\x2e"

static void test_values(void)
{
	struct run r;
	const struct us_pk *b, *c;

	run(&r, PK(PROTO4 "trailing bytes are not read"));
	CHECK(r.st == US_OK);
	CHECK(r.used == sizeof(PROTO4) - 1);
	CHECK(r.root && r.root->kind == US_PK_DICT && r.root->coll->keys.n == 5);
	CHECK(is_int(us_pk_dict_get(r.root, "a"), 1));
	b = us_pk_dict_get(r.root, "b");
	CHECK(b && b->kind == US_PK_LIST && us_pk_len(b) == 3);
	CHECK(us_pk_at(b, 0) && us_pk_at(b, 0)->kind == US_PK_FLOAT &&
	      us_pk_at(b, 0)->u.f == 1.5);
	CHECK(us_pk_at(b, 1) && us_pk_at(b, 1)->kind == US_PK_NONE);
	CHECK(us_pk_at(b, 2) && us_pk_at(b, 2)->kind == US_PK_BOOL &&
	      us_pk_at(b, 2)->u.b);
	c = us_pk_dict_get(r.root, "c");
	CHECK(c && c->kind == US_PK_BYTES && c->u.str.len == 2 &&
	      !memcmp(c->u.str.s, "xy", 2));
	CHECK(is_int(us_pk_dict_get(r.root, "d"), -70000));
	CHECK(us_pk_dict_get(r.root, "e") &&
	      us_pk_dict_get(r.root, "e")->kind == US_PK_BIGINT);
	CHECK(us_pk_dict_get(r.root, "zz") == NULL);
	done(&r);
}

/* x = [1]; pickle.dumps([x, x], protocol=4): BINGET gives the same node. */
static void test_memo_shares(void)
{
	struct run r;

	run(&r, PK("\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00\x5d\x94\x28"
		   "\x5d\x94\x4b\x01\x61\x68\x01\x65\x2e"));
	CHECK(r.st == US_OK && us_pk_len(r.root) == 2);
	CHECK(us_pk_at(r.root, 0) && us_pk_at(r.root, 0) == us_pk_at(r.root, 1));
	CHECK(is_int(us_pk_at(us_pk_at(r.root, 0), 0), 1));
	done(&r);
}

/* The protocol-0/1 opcodes torch and DCP pickles use: MARK ... DICT (which
 * once dropped its last item), GLOBAL, REDUCE, BUILD, BINPERSID, TUPLE3. */
static void test_old_opcodes(void)
{
	struct run r;
	const struct us_pk *call, *pid;

	run(&r, PK("(K\x01K\x02K\x03K\x04" "d."));
	CHECK(r.st == US_OK && r.root && r.root->kind == US_PK_DICT);
	CHECK(r.root && r.root->coll->keys.n == 2 &&
	      is_int(r.root->coll->keys.v[1], 3) && is_int(r.root->coll->vals.v[1], 4));
	done(&r);

	run(&r, PK("ctorch._utils\n_rebuild_tensor_v2\n)R}b."));
	CHECK(r.st == US_OK);
	call = r.root;
	CHECK(call && call->kind == US_PK_CALL &&
	      us_pk_is_global(call->u.call.fn, "torch._utils", "_rebuild_tensor_v2"));
	CHECK(call && call->u.call.args && call->u.call.args->kind == US_PK_TUPLE);
	CHECK(call && call->u.call.state && call->u.call.state->kind == US_PK_DICT);
	done(&r);

	run(&r, PK("X\x07\x00\x00\x00storageK\x05\x86Q."));
	pid = r.root;
	CHECK(r.st == US_OK && pid && pid->kind == US_PK_PERSID &&
	      us_pk_len(pid->u.persid) == 2 &&
	      us_pk_is_str(us_pk_at(pid->u.persid, 0), "storage"));
	done(&r);

	run(&r, PK("\x80\x02K\x01K\x02K\x03\x87q\x00."));
	CHECK(r.st == US_OK && r.root && r.root->kind == US_PK_TUPLE &&
	      us_pk_len(r.root) == 3 && is_int(us_pk_at(r.root, 2), 3));
	done(&r);
}

/* Truncated input, in each of the places it can end. */
static void test_truncated(void)
{
	CHECK(refused(PK(""), "no STOP opcode: truncated"));
	CHECK(refused(PK("\x80\x02K\x01"), "no STOP opcode: truncated"));
	CHECK(refused(PK("\x80"), "truncated"));      /* PROTO's operand */
	CHECK(refused(PK("J\x01\x02"), "truncated")); /* BININT's */
	CHECK(refused(PK("X\x05\x00\x00\x00" "abc."), "string runs past the end"));
	CHECK(refused(PK("\x8a\x09\x01."), "long runs past the end"));
	CHECK(refused(PK("cmodule_without_newline"), "unterminated line"));
	/* a proto4 pickle cut anywhere before its STOP */
	for (size_t n = 0; n + 1 < sizeof(PROTO4) - 1; n++) {
		struct run r;

		run(&r, (const unsigned char *)PROTO4, n);
		CHECK(r.st == US_E_FORMAT && r.err.msg[0]);
		done(&r);
	}
}

static void test_bad_opcodes(void)
{
	CHECK(refused(PK("\xff."), "unsupported pickle opcode"));
	CHECK(refused(PK("\x80\x06N."), "pickle protocol above 5"));
	CHECK(refused(PK("i__main__\nf\n."), "unsupported pickle opcode")); /* INST */
	CHECK(refused(PK("NN."), "STOP with a stack that is not one value"));
	CHECK(refused(PK("(N."), "STOP with a stack that is not one value"));
	CHECK(refused(PK("0."), "POP on an empty stack"));
	CHECK(refused(PK("Nt."), "no MARK on the stack"));
	CHECK(refused(PK("h\x07."), "memo reference to an unset slot"));
	CHECK(refused(PK("NNR."), "REDUCE/NEWOBJ without callable"));
	CHECK(refused(PK("K\x01K\x02K\x03s."), "SETITEMS on something that is not a dict"));
	CHECK(refused(PK("K\x01K\x02" "a."), "APPENDS on something that is not a list"));
	CHECK(refused(PK("K\x01K\x02\x93."), "STACK_GLOBAL needs two strings"));
	CHECK(refused(PK("IXY\n."), "bad INT"));
}

/*
 * The memory bound, for three shapes a hostile pickle can take: nesting
 * (lists in lists, no recursion in the VM but a node each), a mark flood
 * and a memo flood.  Each is refused while it runs -- the arena stays near
 * the bound -- and as US_E_FORMAT: the file is refused, the machine is not
 * out of memory (a NULL node under the bound would say US_E_NOMEM).
 */
static void test_budget(void)
{
	enum { N = 100000 };
	unsigned char *pk = malloc(N * 6 + 16);
	size_t budget = 256u << 10;
	struct run r;
	size_t len;

	CHECK(pk != NULL);
	if (!pk)
		return;
	for (int shape = 0; shape < 3; shape++) {
		len = 0;
		pk[len++] = 0x80;
		pk[len++] = 4;
		for (int i = 0; i < N; i++) {
			if (shape == 0) {        /* ]( ... nested EMPTY_LISTs */
				pk[len++] = ']';
			} else if (shape == 1) { /* MARK MARK MARK ... */
				pk[len++] = '(';
			} else {                 /* N MEMOIZE 0 ... distinct slots */
				pk[len++] = 'N';
				pk[len++] = 0x94;
				pk[len++] = '0';
			}
		}
		pk[len++] = 'N';
		pk[len++] = '.';
		run_bounded(&r, pk, len, budget);
		CHECK(r.st == US_E_FORMAT && strstr(r.err.msg, "bound"));
		CHECK(r.a.used <= budget);
		done(&r);
		/* under the default bound for its size it runs to its end:
		 * a stack of N values or marks is no one value; the memo
		 * flood is a valid pickle */
		run(&r, pk, len);
		if (shape == 2)
			CHECK(r.st == US_OK && r.root && r.root->kind == US_PK_NONE);
		else
			CHECK(r.st == US_E_FORMAT && strstr(r.err.msg, "not one value"));
		done(&r);
	}
	free(pk);
}

/*
 * Every allocation of a load fails in turn: each failure is US_E_NOMEM,
 * "out of memory", and nothing leaks (ASan's leak check runs at exit).
 * Past the last allocation the load succeeds, with the same value.
 */
static void test_nomem(void)
{
	bool finished = false;
	long failed = 0; /* loads that met a failed allocation */

	for (long n = 0; n < 10000 && !finished; n++) {
		struct run r;

		us_arena_init(&r.a);
		us_fail_after(n);
		r.st = us_pickle_load(PK(PROTO4), &r.a, &r.root, &r.used, &r.err);
		us_fail_off();
		if (!us_fail_hit()) {
			CHECK(r.st == US_OK && r.root && r.root->coll->keys.n == 5);
			finished = true;
		} else {
			failed++;
			CHECK(r.st == US_E_NOMEM && r.err.status == US_E_NOMEM &&
			      !strcmp(r.err.msg, "out of memory"));
		}
		us_arena_free(&r.a);
	}
	CHECK(finished);
	CHECK(failed > 0); /* the allocations were wrapped: it tested something */
}

int main(void)
{
	RUN(test_values);
	RUN(test_memo_shares);
	RUN(test_old_opcodes);
	RUN(test_truncated);
	RUN(test_bad_opcodes);
	RUN(test_budget);
	RUN(test_nomem);
	TEST_MAIN_END();
}
