/* transform.h - one rule's transforms on one source tensor (recipe.h). */
#ifndef US_RECIPE_TRANSFORM_H
#define US_RECIPE_TRANSFORM_H

#include "layout.h"
#include "recipe.h"

/* Where a refusal about rule @rule (1-based) of recipe @recipe points. */
struct us_rule_ref {
	const char *recipe;
	size_t rule;
};

/*
 * us_rule_layout - the layout of output @idx (the split index; 0 without a
 * split) of rule @r applied to @t: split, slice, permute, in that order.
 * @head_dim is config.json's (0: none) for a rope permute that defers to
 * it.  A transform that does not fit @t's shape is a refusal naming the
 * rule and the tensor.
 */
enum us_status us_rule_layout(const struct us_recipe_rule *r,
			      struct us_rule_ref ref, const struct us_tensor *t,
			      uint64_t idx, uint64_t head_dim,
			      struct us_layout *l, struct us_err *err);

/* us_rule_check - refuse, before any output is made, a rule whose
 * transforms cannot fit @t (so a split's count is known to be sane). */
enum us_status us_rule_check(const struct us_recipe_rule *r,
			     struct us_rule_ref ref, const struct us_tensor *t,
			     uint64_t head_dim, struct us_err *err);

/*
 * us_concat_layout - the layout of concat rule @r's output from its @n
 * inputs @in (in the rule's order): their chunks joined along the dim.
 * Inputs whose dtypes differ, whose ndim lacks the dim, or whose shapes
 * disagree off it are a refusal naming the rule and both tensors.
 */
enum us_status us_concat_layout(const struct us_recipe_rule *r,
				struct us_rule_ref ref,
				const struct us_tensor *const *in, size_t n,
				struct us_layout *l, struct us_err *err);

#endif /* US_RECIPE_TRANSFORM_H */
