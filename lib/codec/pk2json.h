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

/*
 * us_pk_to_json_budget - the same, making at most *@budget JSON values
 * (each one made, null included, decrements it; where it runs out the value
 * is null and the lists and objects around it end early).  A pickle's
 * memo lets a few hundred bytes describe a DAG whose tree is exponentially
 * large ({"a": x, "b": x} nested 64 deep), so a walk that follows it needs
 * a bound; callers converting several values of one checkpoint share one
 * budget.  us_pk_to_json uses a fresh US_PK_JSON_BUDGET.
 */
#define US_PK_JSON_BUDGET ((size_t)1 << 20)
cJSON *us_pk_to_json_budget(const struct us_pk *p, size_t *budget);

#endif /* US_PK2JSON_H */
