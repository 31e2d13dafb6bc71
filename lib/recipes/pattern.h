/* pattern.h - name patterns with "{name}" captures (recipe.h). */
#ifndef US_RECIPE_PATTERN_H
#define US_RECIPE_PATTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"

/* A capture's value: a run of digits inside the matched name. */
struct us_capture {
	const char *s;
	size_t len;
};

/*
 * us_pattern_compile - parse @text into @p (@text is copied).  US_E_FORMAT,
 * with the reason in @why (us_err_reason: no path), for an unclosed brace,
 * an empty or repeated capture name, two captures with nothing between
 * them, or a capture followed by a digit (a capture is a run of digits:
 * what follows must end it); US_E_NOMEM.
 */
enum us_status us_pattern_compile(const char *text, struct us_pattern *p,
				  struct us_err *why);
void us_pattern_free(struct us_pattern *p);

/* us_pattern_match - does @name match @p?  Fills caps[0..ncaps). */
bool us_pattern_match(const struct us_pattern *p, const char *name,
		      struct us_capture *caps);

/* us_pattern_cap - index of capture @name in @p, or -1. */
int us_pattern_cap(const struct us_pattern *p, const char *name);

/*
 * us_pattern_format - write @to with its captures taken from @from's
 * values @caps, and the capture named @var (NULL: none) as the number @idx,
 * into @out (@cap bytes).  False when it does not fit.
 */
bool us_pattern_format(const struct us_pattern *to, const struct us_pattern *from,
		       const struct us_capture *caps, const char *var,
		       unsigned long long idx, char *out, size_t cap);

/*
 * us_capture_add - the capture @c's value plus @n, written in decimal into
 * @buf (@cap bytes, 21 or more) and pointed at by *@out: the capture a
 * rule's "offset" gives the target.  False when the value or the sum does
 * not fit 64 bits.
 */
bool us_capture_add(const struct us_capture *c, uint64_t n, char *buf,
		    size_t cap, struct us_capture *out);

/*
 * us_rule_input - which input pattern of rule @r @name matches: 0 for
 * "from", k + 1 for a concat's k-th further input, -1 for none.  Fills
 * @caps as us_pattern_match does.
 */
int us_rule_input(const struct us_recipe_rule *r, const char *name,
		  struct us_capture *caps);

/* us_rule_input_pattern - input @k of @r (as us_rule_input numbers them). */
const struct us_pattern *us_rule_input_pattern(const struct us_recipe_rule *r,
					       size_t k);

#endif /* US_RECIPE_PATTERN_H */
