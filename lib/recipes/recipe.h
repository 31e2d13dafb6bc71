/*
 * recipe.h - map a trainer's tensor names and layouts to Hugging Face's.
 *
 * A recipe is a list of rules (docs/recipes.md).  Each rule matches source
 * names by a pattern with captures ("layers.{i}.attention.wo.weight") and
 * either drops the tensor (a rope cache: reported by inspect, never silent)
 * or produces one or more tensors named by a target pattern, through a
 * fixed set of layout transforms applied in this order:
 *   split   one tensor per index along a dim (stacked MoE experts),
 *           the index a capture of the target ("{e}"), the dim removed;
 *   slice   a range along a dim;
 *   permute an index permutation along a dim: an explicit order, or the
 *           RoPE row reorder of torchtitan's to_hf (Meta's interleaved
 *           pairs -> Hugging Face's halves) per head of head_dim rows;
 *   cast    present the tensor as another float dtype (reads convert).
 * or, instead of split/slice/permute, concatenates several source tensors
 * (one per "from" pattern, all with the same captures) along a dim:
 *   concat  the inputs' chunks, shifted along the dim, as one tensor.
 * A rule's "offset" adds a number to captures as the target name is
 * written (layer k of one block list is layer N + k of the other).
 * Every transform is a rewrite of the chunk list (model.h): new boxes,
 * offsets and strides over the same source extents.  No tensor byte is
 * read at mount or held in memory, and the views serve the result through
 * the read path they already have.
 *
 * Applied by the source layer after the reader (and aliases, names) and
 * before finalize, so every invariant check runs on what is served.
 */
#ifndef US_RECIPE_H
#define US_RECIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../model.h"

#define US_RECIPE_MAX_CAPS 8

/*
 * An offset: the target's capture @cap is written as its value plus @n, or
 * plus the integer config.json gives for @config (the number of main
 * layers, "num_hidden_layers", that DeepSeek-V3's multi-token-prediction
 * layers are numbered after).
 */
struct us_offset {
	uint32_t cap;            /* index in the rule's from.caps */
	uint64_t n;
	char *config;            /* config.json's key, or NULL: n */
};

/* A pattern: literal text and "{name}" captures (each matches [0-9]+). */
struct us_pattern {
	char *text;
	uint32_t ncaps;
	char *caps[US_RECIPE_MAX_CAPS];
};

struct us_recipe_rule {
	struct us_pattern from, to;
	bool drop;               /* the tensor is not served (inspect lists it) */
	bool required;           /* the recipe fits only if this rule matches */
	bool has_split;
	uint32_t split_dim;
	char *split_var;         /* the target capture that takes the index */
	bool has_slice;
	uint32_t slice_dim;
	uint64_t slice_start, slice_stop;
	bool has_permute;
	uint32_t perm_dim;
	uint64_t *order;         /* explicit permutation (norder entries), or */
	size_t norder;
	bool rope;               /* interleaved -> halves per head */
	uint64_t head_dim;       /* 0 with rope: from config.json */
	bool has_cast;
	enum us_dtype cast;
	bool has_concat;
	uint32_t cat_dim;
	struct us_pattern *cat_from; /* the inputs after "from", in order */
	size_t ncat;
	struct us_offset offset[US_RECIPE_MAX_CAPS]; /* of "to"'s captures */
	uint32_t noffset;
};

struct us_recipe {
	char *name;              /* the built-in's name, or the file as given */
	struct us_recipe_rule *rules;
	size_t nrules;
};

/*
 * us_recipe_parse - parse and validate the JSON text of a recipe.  @name is
 * how messages call it (the file as the user gave it).  A broken recipe is
 * refused as a malformed input (US_E_FORMAT, exit status 2, as a broken
 * checkpoint is): "<name>: rule N: <what is wrong>".
 */
enum us_status us_recipe_parse(const char *text, size_t len, const char *name,
			       struct us_recipe **out, struct us_err *err);

/* us_recipe_load - us_recipe_parse of the built-in @spec, or of the file
 * @spec when no built-in has that name. */
enum us_status us_recipe_load(const char *spec, struct us_recipe **out,
			      struct us_err *err);

void us_recipe_free(struct us_recipe *r);

/* The built-in recipes: names and JSON texts (builtin.c). */
extern const char *const us_recipe_builtin_names[];
const char *us_recipe_builtin_text(const char *name);

/*
 * us_recipe_fits - does @r fit the tensor names of @sd: every name matched
 * by some rule, and every required rule matching some name?
 */
bool us_recipe_fits(const struct us_recipe *r, const struct us_statedict *sd);

/*
 * us_recipe_auto - the one built-in recipe that fits @sd, in *@name (NULL
 * when none does).  Several fitting is a refusal that names them.
 */
enum us_status us_recipe_auto(const struct us_statedict *sd, const char **name,
			      struct us_err *err);

/*
 * us_recipe_apply - rewrite the (unfinalized) @sd by @r.  @cfg is the
 * directory whose config.json gives what a rule leaves to it (head_dim, an
 * offset), NULL for none.  A source name no rule matches, a transform that
 * does not fit a tensor's shape, two rules making one name, an offset
 * config.json does not give: a one-line refusal.
 * Casts are recorded on sd (recipe_cast) and applied after finalize by
 * us_recipe_present (ties are found on the stored bytes).
 */
enum us_status us_recipe_apply(struct us_statedict *sd,
			       const struct us_recipe *r, const struct us_dir *cfg,
			       struct us_err *err);
/* us_recipe_present - apply the casts us_recipe_apply recorded. */
void us_recipe_present(struct us_statedict *sd);

#endif /* US_RECIPE_H */
