/* idnames.c - a sorted table of parameter ids to names (idnames.h). */
#include "idnames.h"

#include <stdlib.h>

#include "../codec/json.h"
#include "../grow.h"

enum us_status us_idnames_add(struct us_idnames *t, int64_t id, const char *name)
{
	US_TRY(US_GROW(t->v, t->cap, t->n));
	t->v[t->n] = (struct us_idname){ .id = id, .seq = t->n, .name = name };
	t->n++;
	return US_OK;
}

static int cmp_idname(const void *a, const void *b)
{
	const struct us_idname *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

void us_idnames_sort(struct us_idnames *t)
{
	if (t->n > 1)
		qsort(t->v, t->n, sizeof(*t->v), cmp_idname);
}

const char *us_idnames_get(const struct us_idnames *t, int64_t id)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) { /* the first entry with v[i].id >= id */
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->n && t->v[lo].id == id ? t->v[lo].name : NULL;
}

void us_idnames_free(struct us_idnames *t)
{
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

enum us_status us_idnames_name_params(cJSON *groups,
				      const struct us_idnames *t)
{
	cJSON *g;

	cJSON_ArrayForEach(g, groups) {
		cJSON *list = cJSON_GetObjectItemCaseSensitive(g, "params");
		cJSON *x = cJSON_IsArray(list) ? list->child : NULL, *next, *s;

		for (; x; x = next) {
			int64_t id;
			const char *name;

			next = x->next;
			name = us_json_i64(x, &id) ? us_idnames_get(t, id) : NULL;
			if (!name)
				continue;
			/* replacing by pointer allocates nothing */
			if (!(s = cJSON_CreateString(name)))
				return US_E_NOMEM;
			cJSON_ReplaceItemViaPointer(list, x, s);
		}
	}
	return US_OK;
}
