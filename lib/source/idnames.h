/*
 * idnames.h - parameter ids to names, for optimizer state.
 *
 * A torch optimizer's state_dict keys its state by parameter position; its
 * param_groups list the ids ("params") and, since torch 2.6, beside them the
 * names ("param_names").  Looking a name up by scanning the groups for each
 * state entry is quadratic in the parameter count (10^5 parameters: 10^10
 * steps at mount), so the readers build this table once.
 */
#ifndef US_IDNAMES_H
#define US_IDNAMES_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "../us_error.h"

struct us_idname {
	int64_t id;
	size_t seq;       /* insertion order: the first of equal ids wins */
	const char *name; /* borrowed: outlives the table */
};

struct us_idnames {
	struct us_idname *v;
	size_t n, cap;
};

/* us_idnames_add - append; US_OK or US_E_NOMEM. */
enum us_status us_idnames_add(struct us_idnames *t, int64_t id, const char *name);
/* us_idnames_sort - call once after the last add, before any get. */
void us_idnames_sort(struct us_idnames *t);
/* us_idnames_get - the name first added for @id, or NULL. */
const char *us_idnames_get(const struct us_idnames *t, int64_t id);
void us_idnames_free(struct us_idnames *t);

/* us_idnames_name_params - in each of the JSON param @groups, replace the
 * ids of "params" that @t names by their names.  The lists are walked by
 * pointer: indexing a cJSON array is linear (10^5 ids: 10^10 steps). */
enum us_status us_idnames_name_params(cJSON *groups,
				      const struct us_idnames *t);

#endif /* US_IDNAMES_H */
