/* json.c - strict wrappers around cJSON. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_EXACT 9007199254740992.0 /* 2^53 */

static bool has_duplicate_keys(const cJSON *obj, int depth);

/* Keys are compared after sorting a pointer array, so this is n log n. */
static int cmp_key(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string,
		      (*(const cJSON *const *)b)->string);
}

static bool object_has_duplicates(const cJSON *obj)
{
	size_t n = 0, i = 0;
	const cJSON *c;
	const cJSON **v;
	bool dup = false;

	for (c = obj->child; c; c = c->next)
		n++;
	if (n < 2)
		return false;
	v = malloc(n * sizeof(*v));
	if (!v)
		return true; /* treated as a refusal; memory is the caller's limit */
	for (c = obj->child; c; c = c->next)
		v[i++] = c;
	qsort(v, n, sizeof(*v), cmp_key);
	for (i = 1; i < n && !dup; i++)
		dup = strcmp(v[i - 1]->string, v[i]->string) == 0;
	free(v);
	return dup;
}

static bool has_duplicate_keys(const cJSON *item, int depth)
{
	if (depth > 64)
		return true;
	if (cJSON_IsObject(item) && object_has_duplicates(item))
		return true;
	for (const cJSON *c = item->child; c; c = c->next)
		if (has_duplicate_keys(c, depth + 1))
			return true;
	return false;
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

cJSON *us_json_parse(const char *text, size_t len, const char **why)
{
	const char *end = NULL;
	cJSON *root;

	if (!us_utf8_valid((const unsigned char *)text, len)) {
		*why = "is not valid UTF-8";
		return NULL;
	}
	if (has_escaped_nul(text, len)) {
		*why = "contains an escaped NUL character";
		return NULL;
	}
	root = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (!root) {
		*why = "is not valid JSON";
		return NULL;
	}
	for (; end && end < text + len; end++) {
		if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
			*why = "has bytes after the JSON value";
			cJSON_Delete(root);
			return NULL;
		}
	}
	if (has_duplicate_keys(root, 0)) {
		*why = "has a duplicate key (or nests too deeply)";
		cJSON_Delete(root);
		return NULL;
	}
	return root;
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
