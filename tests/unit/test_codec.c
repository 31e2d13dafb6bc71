/* test_codec.c - JSON parsing limits, UTF-8, escaping, metadata paths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "codec/json.h"
#include "codec/jsonw.h"
#include "codec/pickle.h"
#include "codec/pk2json.h"
#include "harness.h"
#include "path.h"

static cJSON *parse(const char *s, const char **why)
{
	static struct us_err err;
	cJSON *j;

	*why = us_json_parse(s, strlen(s), &j, &err) == US_OK ? NULL : err.msg;
	return j;
}

static void test_json_strict(void)
{
	const char *why = NULL;
	cJSON *j;

	j = parse("{\"a\": 1}   \n", &why);
	CHECK(j != NULL);
	cJSON_Delete(j);
	CHECK(parse("{\"a\": 1} x", &why) == NULL);
	CHECK(parse("{\"a\": 1, \"a\": 2}", &why) == NULL);
	CHECK(parse("{\"b\": {\"a\": 1, \"a\": 2}}", &why) == NULL);
	CHECK(parse("{\"a\\u0000b\": 1}", &why) == NULL);
	j = parse("{\"a\\\\u0000b\": 1}", &why); /* an escaped backslash: fine */
	CHECK(j != NULL);
	cJSON_Delete(j);
	{
		struct us_err err;
		cJSON *cut = (cJSON *)1;

		/* @len, not the NUL, ends the text */
		CHECK(us_json_parse("{\"a\":1}", 3, &cut, &err) == US_E_FORMAT);
		CHECK(cut == NULL && !strcmp(err.msg, "is not valid JSON"));
	}
}

static void test_json_u64(void)
{
	const char *why;
	cJSON *j = parse("[0, 7, 9007199254740992, 9007199254740993e3, -1, 1.5, \"3\"]", &why);
	uint64_t v = 0;

	CHECK(j != NULL);
	CHECK(us_json_u64(cJSON_GetArrayItem(j, 0), &v) && v == 0);
	CHECK(us_json_u64(cJSON_GetArrayItem(j, 1), &v) && v == 7);
	CHECK(us_json_u64(cJSON_GetArrayItem(j, 2), &v) && v == 9007199254740992ull);
	CHECK(!us_json_u64(cJSON_GetArrayItem(j, 3), &v));
	CHECK(!us_json_u64(cJSON_GetArrayItem(j, 4), &v));
	CHECK(!us_json_u64(cJSON_GetArrayItem(j, 5), &v));
	CHECK(!us_json_u64(cJSON_GetArrayItem(j, 6), &v));
	cJSON_Delete(j);
}

static void test_utf8(void)
{
	CHECK(us_utf8_valid((const unsigned char *)"abc", 3));
	CHECK(us_utf8_valid((const unsigned char *)"\xc3\xa9", 2));
	CHECK(us_utf8_valid((const unsigned char *)"\xf0\x9f\x98\x80", 4));
	CHECK(!us_utf8_valid((const unsigned char *)"\xc3", 1));
	CHECK(!us_utf8_valid((const unsigned char *)"\xc0\x80", 2)); /* overlong */
	CHECK(!us_utf8_valid((const unsigned char *)"\xed\xa0\x80", 3)); /* surrogate */
	CHECK(!us_utf8_valid((const unsigned char *)"\xff", 1));
	CHECK(!us_utf8_valid((const unsigned char *)"a\0b", 3));
}

static void test_jsonw_escape(void)
{
	struct us_sbuf b;

	us_sbuf_init(&b);
	us_sbuf_json_str(&b, "a\"b\\c\n\x01\x7f\xc3\xa9/");
	us_sbuf_putc(&b, '\0');
	CHECK(!b.oom);
	CHECK(strcmp(b.p, "\"a\\\"b\\\\c\\n\\u0001\x7f\xc3\xa9/\"") == 0);
	us_sbuf_free(&b);
	us_sbuf_init(&b);
	us_sbuf_u64(&b, 0);
	us_sbuf_putc(&b, ' ');
	us_sbuf_u64(&b, UINT64_MAX);
	us_sbuf_putc(&b, '\0');
	CHECK(strcmp(b.p, "0 18446744073709551615") == 0);
	us_sbuf_free(&b);
}

static void test_paths(void)
{
	CHECK(us_path_is_inside("model-00001-of-00002.safetensors"));
	CHECK(us_path_is_inside("sub/dir/x.safetensors"));
	CHECK(us_path_is_inside("..x/y"));
	CHECK(!us_path_is_inside("../x.safetensors"));
	CHECK(!us_path_is_inside("a/../../x"));
	CHECK(!us_path_is_inside("a/.."));
	CHECK(!us_path_is_inside("/etc/passwd"));
	CHECK(!us_path_is_inside(""));
	CHECK(us_path_has_suffix("a.safetensors", ".safetensors"));
	CHECK(!us_path_has_suffix(".safetensors", ".safetensors"));
}

static size_t json_nodes(const cJSON *j)
{
	size_t n = 1;

	for (const cJSON *c = j->child; c; c = c->next)
		n += json_nodes(c);
	return n;
}

/* A list that holds itself 20 times (found by fuzz_pickle: 2^20 values
 * made 20 * 2^20 nulls past the depth bound, 10 s and 700 MiB): the budget
 * bounds every node made, nulls included. */
static void test_pk2json_budget(void)
{
	unsigned char pk[64] = "\x80\x02]q\x00(";
	size_t len = 6, used = 0, budget = 1000;
	struct us_pk *root = NULL;
	struct us_err why;
	struct us_arena a;
	cJSON *j;

	for (int i = 0; i < 20; i++) {
		pk[len++] = 'h';
		pk[len++] = 0;
	}
	pk[len++] = 'e';
	pk[len++] = '.';
	us_arena_init(&a);
	CHECK(us_pickle_load(pk, len, &a, &root, &used, &why) == US_OK);
	j = us_pk_to_json_budget(root, &budget);
	CHECK(j != NULL && budget == 0);
	CHECK(j && json_nodes(j) <= 1000);
	cJSON_Delete(j);
	j = us_pk_to_json_budget(root, &budget); /* spent: one null */
	CHECK(j && cJSON_IsNull(j));
	cJSON_Delete(j);
	us_arena_free(&a);
}

/* Nested one-key dicts ({"a": {"a": ...}}): refused while the VM runs once
 * its nodes would pass the budget, loaded under a larger one. */
static void test_pickle_budget(void)
{
	enum { LEVELS = 20000 };
	unsigned char *pk = malloc(2 + LEVELS * 8 + 2 + LEVELS + 1);
	size_t len = 0, used = 0;
	struct us_pk *root = NULL;
	struct us_err why;
	struct us_arena a;

	CHECK(pk != NULL);
	if (!pk)
		return;
	pk[len++] = 0x80;
	pk[len++] = 2;
	for (int i = 0; i < LEVELS; i++) {
		memcpy(pk + len, "}X\1\0\0\0a", 7);
		len += 7;
	}
	pk[len++] = 'N';
	memset(pk + len, 's', LEVELS);
	len += LEVELS;
	pk[len++] = '.';
	us_arena_init(&a);
	/* a refusal of the file, not the machine out of memory */
	CHECK(us_pickle_load_bounded(pk, len, &a, 1 << 20, &root, &used, &why) ==
	      US_E_FORMAT);
	CHECK(strstr(why.msg, "bound"));
	CHECK(a.used < (2u << 20)); /* refused before the memory was taken */
	us_arena_free(&a);
	us_arena_init(&a);
	CHECK(us_pickle_load_bounded(pk, len, &a, 64u << 20, &root, &used, &why) ==
	      US_OK);
	CHECK(used == len && root && root->kind == US_PK_DICT);
	us_arena_free(&a);
	CHECK(us_pickle_budget(SIZE_MAX, 0) == SIZE_MAX); /* saturates */
	CHECK(us_pickle_budget(0, 2) == US_PICKLE_BUDGET_BASE +
					    2 * US_PICKLE_BUDGET_PER_RECORD);
	free(pk);
}

int main(void)
{
	RUN(test_json_strict);
	RUN(test_json_u64);
	RUN(test_utf8);
	RUN(test_jsonw_escape);
	RUN(test_paths);
	RUN(test_pk2json_budget);
	RUN(test_pickle_budget);
	TEST_MAIN_END();
}
