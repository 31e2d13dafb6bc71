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

/* us_json_u64 - the exact non-negative integer value of @item. */
bool us_json_u64(const cJSON *item, uint64_t *out);

/* us_json_i64 - the exact integer value of @item, within +-2^53. */
bool us_json_i64(const cJSON *item, int64_t *out);

/* us_utf8_valid - true when @len bytes at @s are well-formed UTF-8. */
bool us_utf8_valid(const unsigned char *s, size_t len);

#endif /* US_JSON_H */
