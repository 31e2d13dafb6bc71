/* json.c - strict wrappers around cJSON. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_EXACT 9007199254740992.0 /* 2^53 */

static const char dup_key[] = "has a duplicate key (or nests too deeply)";

/* Keys are compared after sorting a pointer array, so this is n log n. */
static int cmp_key(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string,
		      (*(const cJSON *const *)b)->string);
}

static enum us_status object_unique(const cJSON *obj, struct us_err *err)
{
	size_t n = 0, i = 0;
	const cJSON *c;
	const cJSON **v;
	bool dup = false;

	for (c = obj->child; c; c = c->next)
		n++;
	if (n < 2)
		return US_OK;
	v = malloc(n * sizeof(*v));
	if (!v)
		return us_err_reason(err, US_E_NOMEM, "out of memory");
	for (c = obj->child; c; c = c->next)
		v[i++] = c;
	qsort(v, n, sizeof(*v), cmp_key);
	for (i = 1; i < n && !dup; i++)
		dup = strcmp(v[i - 1]->string, v[i]->string) == 0;
	free(v);
	return dup ? us_err_reason(err, US_E_FORMAT, "%s", dup_key) : US_OK;
}

/* No object under @item repeats a key, and none nests past 64 levels. */
static enum us_status keys_unique(const cJSON *item, int depth,
				  struct us_err *err)
{
	if (depth > 64)
		return us_err_reason(err, US_E_FORMAT, "%s", dup_key);
	if (cJSON_IsObject(item))
		US_TRY(object_unique(item, err));
	for (const cJSON *c = item->child; c; c = c->next)
		US_TRY(keys_unique(c, depth + 1, err));
	return US_OK;
}

/* cJSON decodes "\u0000" into a C string that silently ends there: refuse it. */
static bool has_escaped_nul(const char *text, size_t len)
{
	for (size_t i = 0; i + 6 <= len; i++) {
		size_t bs = 0;

		if (memcmp(text + i, "\\u0000", 6) != 0)
			continue;
		while (bs < i && text[i - 1 - bs] == '\\')
			bs++;
		if (bs % 2 == 0)
			return true;
	}
	return false;
}

/* Only JSON whitespace may follow the value cJSON parsed up to @end. */
static bool only_space_after(const char *end, const char *stop)
{
	for (; end && end < stop; end++)
		if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
			return false;
	return true;
}

/*
 * What cJSON takes, per allocation: a node is a 64-byte struct in its own
 * malloc chunk (80 bytes with the chunk header); a string (an object key
 * or a string value) a chunk of at least 32 bytes.  Numbers, true, false
 * and null allocate nothing past their node.
 */
#define NODE_COST 80u
#define STR_COST 32u

/* One past the string that opens at @p (a '"'), or @end if unterminated. */
static const char *string_end(const char *p, const char *end)
{
	for (p++; p < end; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return end;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/*
 * What cJSON would allocate to parse @text: one pass that counts values
 * and strings, without building anything.  It is an estimate within a few
 * bytes a string (malloc rounding), and it is linear: a 2-byte value
 * ("0,") costs 40 times its text, so the cost is what must be bounded,
 * not the length.
 */
static size_t parse_cost(const char *text, size_t len)
{
	const char *p = text, *end = text + len;
	size_t cost = 0;

	while (p < end) {
		char c = *p;

		if (c == '"') {
			const char *q = string_end(p, end);
			cost += STR_COST + (size_t)(q - p);
			p = skip_ws(q, end);
			if (p == end || *p != ':')
				cost += NODE_COST; /* a value, not a key */
			continue;
		}
		if (c == '{' || c == '[' || c == '-' || (c >= '0' && c <= '9') ||
		    c == 't' || c == 'f' || c == 'n') {
			cost += NODE_COST;
			/* The rest of a number or literal is not another value. */
			for (p++; p < end && ((*p >= '0' && *p <= '9') ||
					      (*p >= 'a' && *p <= 'z') || *p == '.' ||
					      *p == '+' || *p == '-' || *p == 'E');
			     p++)
				;
			continue;
		}
		p++;
	}
	return cost;
}

enum us_status us_json_parse(const char *text, size_t len, cJSON **out,
			     struct us_err *err)
{
	return us_json_parse_budget(text, len, US_JSON_BUDGET(len), out, err);
}

enum us_status us_json_parse_budget(const char *text, size_t len,
				    size_t budget, cJSON **out,
				    struct us_err *err)
{
	const char *end = NULL;
	enum us_status st;
	size_t cost;
	cJSON *root;

	*out = NULL;
	if (!us_utf8_valid((const unsigned char *)text, len))
		return us_err_reason(err, US_E_FORMAT, "is not valid UTF-8");
	cost = parse_cost(text, len);
	if (cost > budget)
		return us_err_reason(err, US_E_FORMAT,
				     "would take %zu MiB of memory to parse, over "
				     "the %zu MiB allowed for %zu bytes of JSON "
				     "(too many small values)",
				     cost >> 20, budget >> 20, len);
	if (has_escaped_nul(text, len))
		return us_err_reason(err, US_E_FORMAT,
				     "contains an escaped NUL character");
	/* cJSON says NULL for bad syntax and for a failed allocation alike:
	 * this is the one refusal whose kind cannot be told. */
	root = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (!root)
		return us_err_reason(err, US_E_FORMAT, "is not valid JSON");
	st = only_space_after(end, text + len) ? keys_unique(root, 0, err) :
	     us_err_reason(err, US_E_FORMAT, "has bytes after the JSON value");
	if (st != US_OK) {
		cJSON_Delete(root);
		return st;
	}
	*out = root;
	return US_OK;
}

bool us_json_u64(const cJSON *item, uint64_t *out)
{
	double v;

	if (!cJSON_IsNumber(item))
		return false;
	v = item->valuedouble;
	if (!(v >= 0.0) || v > JSON_MAX_EXACT || floor(v) != v)
		return false;
	*out = (uint64_t)v;
	return true;
}

bool us_json_i64(const cJSON *item, int64_t *out)
{
	double v;

	if (!cJSON_IsNumber(item))
		return false;
	v = item->valuedouble;
	if (!(v >= -JSON_MAX_EXACT && v <= JSON_MAX_EXACT) || floor(v) != v)
		return false;
	*out = (int64_t)v;
	return true;
}

bool us_utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			if (c == 0)
				return false; /* cJSON would stop at a NUL */
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
		else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
		else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
		else return false;
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		/* Overlong forms, surrogates and values past U+10FFFF. */
		if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
		    (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		i += n + 1;
	}
	return true;
}
