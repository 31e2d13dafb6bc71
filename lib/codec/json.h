/*
 * json.h - cJSON with the checks a hostile header needs.
 *
 * cJSON stores numbers as doubles.  Sizes and offsets must be exact, so a
 * number is accepted as an integer only when it is integral and at most 2^53
 * (where doubles are exact); larger values cannot occur in a real checkpoint
 * (8 PiB) and are refused rather than rounded.
 */
#ifndef US_JSON_H
#define US_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "../us_error.h"

/*
 * us_json_parse - parse @len bytes of @text (not NUL-terminated).  Only JSON
 * whitespace may follow the value; duplicate keys in any object are refused.
 * US_OK with the tree in *@out (the caller's to cJSON_Delete); else *@out
 * is NULL and @err holds a reason without a path that reads after the
 * document's name ("is not valid JSON"): US_E_FORMAT, or US_E_NOMEM.
 */
enum us_status us_json_parse(const char *text, size_t len, cJSON **out,
			     struct us_err *err);

/*
 * The memory a parse may take (cJSON's nodes and strings, estimated from
 * the text before anything is built): us_json_parse allows 32 MiB plus 10
 * times the text (a real safetensors header takes about 8 times, an index
 * 3 times); past that the document is refused without being parsed.  A
 * value of 2 bytes ("0,") would otherwise cost 40 times its text.
 * US_JSON_TIGHT is for documents that are only lists of names (an https
 * index, fetched from a server).
 */
#define US_JSON_BUDGET(len) (((size_t)32 << 20) + 10 * (size_t)(len))
#define US_JSON_TIGHT(len) (((size_t)16 << 20) + 4 * (size_t)(len))

/* us_json_parse_budget - us_json_parse with at most @budget bytes for the
 * tree; over it, US_E_FORMAT and nothing is allocated. */
enum us_status us_json_parse_budget(const char *text, size_t len,
				    size_t budget, cJSON **out,
				    struct us_err *err);

/* us_json_u64 - the exact non-negative integer value of @item. */
bool us_json_u64(const cJSON *item, uint64_t *out);

/* us_json_i64 - the exact integer value of @item, within +-2^53. */
bool us_json_i64(const cJSON *item, int64_t *out);

/* us_utf8_valid - true when @len bytes at @s are well-formed UTF-8. */
bool us_utf8_valid(const unsigned char *s, size_t len);

#endif /* US_JSON_H */
