/*
 * pk2json.h - plain pickle values as JSON, for optimizer.json.
 *
 * None, bools, ints, floats, strings, lists and tuples (arrays), and dicts
 * with string or int keys (objects) convert; anything else (an opaque
 * global or call, bytes, a big int) becomes null, never an error: the
 * non-tensor optimizer state is informative, not something we can execute.
 */
#ifndef US_PK2JSON_H
#define US_PK2JSON_H

#include <cjson/cJSON.h>

#include "pickle.h"

/* A new cJSON tree for @p (NULL only when out of memory). */
cJSON *us_pk_to_json(const struct us_pk *p);

#endif /* US_PK2JSON_H */
