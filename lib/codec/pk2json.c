/* pk2json.c - converting plain pickle values to cJSON. */
#include "pk2json.h"

#include <stdio.h>

#define MAX_DEPTH 64

static cJSON *convert(const struct us_pk *p, int depth, size_t *budget);

static cJSON *convert_seq(const struct us_pk_seq *s, int depth, size_t *budget)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; a && i < s->n && *budget; i++) {
		cJSON *v = convert(s->v[i], depth + 1, budget);

		if (!v || !cJSON_AddItemToArray(a, v)) {
			cJSON_Delete(v);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

static cJSON *convert_dict(const struct us_pk *p, int depth, size_t *budget)
{
	cJSON *o = cJSON_CreateObject();
	char key[32];

	for (size_t i = 0; o && p->coll && i < p->coll->keys.n && *budget; i++) {
		const struct us_pk *k = p->coll->keys.v[i];
		const char *name = k->kind == US_PK_STR ? k->u.str.s : key;
		cJSON *v;

		if (k->kind == US_PK_INT)
			snprintf(key, sizeof(key), "%lld", (long long)k->u.i);
		else if (k->kind != US_PK_STR)
			continue;
		v = convert(p->coll->vals.v[i], depth + 1, budget);
		cJSON_DeleteItemFromObjectCaseSensitive(o, name); /* last wins */
		if (!v || !cJSON_AddItemToObject(o, name, v)) {
			cJSON_Delete(v);
			cJSON_Delete(o);
			return NULL;
		}
	}
	return o;
}

static cJSON *convert(const struct us_pk *p, int depth, size_t *budget)
{
	/* The depth bound alone still allows 2^64 values through shared
	 * (memoized) nodes: the budget bounds the total.  Every node made
	 * costs one, nulls included, and containers end where it runs out:
	 * a list that holds itself 20 times used to turn 2^20 values into
	 * 20 * 2^20 nulls past the depth bound (found by fuzz_pickle). */
	if (*budget == 0)
		return cJSON_CreateNull();
	--*budget;
	if (!p || depth > MAX_DEPTH)
		return cJSON_CreateNull();
	switch (p->kind) {
	case US_PK_BOOL: return cJSON_CreateBool(p->u.b);
	case US_PK_INT: return cJSON_CreateNumber((double)p->u.i);
	case US_PK_FLOAT: return cJSON_CreateNumber(p->u.f);
	case US_PK_STR: return cJSON_CreateString(p->u.str.s);
	case US_PK_TUPLE: case US_PK_LIST: return convert_seq(&p->u.seq, depth, budget);
	case US_PK_DICT: return convert_dict(p, depth, budget);
	case US_PK_CALL:
		return us_pk_is_dictlike(p) ? convert_dict(p, depth, budget) : cJSON_CreateNull();
	default: return cJSON_CreateNull();
	}
}

cJSON *us_pk_to_json_budget(const struct us_pk *p, size_t *budget)
{
	return convert(p, 0, budget);
}

cJSON *us_pk_to_json(const struct us_pk *p)
{
	size_t budget = US_PK_JSON_BUDGET;

	return convert(p, 0, &budget);
}
