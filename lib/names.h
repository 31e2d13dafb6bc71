/*
 * names.h - unwrapping: the names every view shows (design.md, "Names").
 *
 * Training wrappers leak into state-dict keys.  By default every wrapper
 * segment (_fsdp_wrapped_module, _checkpoint_wrapped_module, _orig_mod,
 * _forward_module, _fpw_module) is removed wherever it occurs, and leading
 * "module" segments (DDP, DataParallel, DeepSpeed) are removed; then each
 * --strip-prefix is applied.  Only whole dot-separated segments go, so a
 * name never gains ".." or a trailing dot; a name that would become empty
 * is kept as it was.
 *
 * The container rule (a top-level "model"/"state_dict" key) is not applied
 * here: only readers that see nested containers (torch.save, DCP) know
 * whether a leading segment is a container or a real module name.
 */
#ifndef US_NAMES_H
#define US_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "model.h"

struct us_names_opts {
	bool no_unwrap;
	const char *const *strip_prefix;
	size_t nstrip;
};

/*
 * us_unwrap_name - the unwrapped form of @src, written to @out (at least
 * strlen(@src) + 1 bytes).
 */
void us_unwrap_name(const char *src, const struct us_names_opts *o, char *out);

/* us_names_apply_optim - unwrap optimizer names "state.<param>.<slot>":
 * the <param> part is unwrapped as a model name would be. */
enum us_status us_names_apply_optim(struct us_statedict *sd,
				    const struct us_names_opts *o,
				    struct us_err *err);

/* us_is_model_container - a top-level key that holds the model itself
 * (state_dict, model_state_dict, model, module, net): the one list both the
 * torch.save and the DCP reader use for the container rule. */
bool us_is_model_container(const char *key);

/* us_is_optimizer_container - a top-level key whose subtree is optimizer
 * state (optim, optimizer, optimizer_N, ...), never part of the model. */
bool us_is_optimizer_container(const char *key);

struct cJSON;

/* us_unwrap_json_groups - unwrap, in place, the "params" and "param_names"
 * lists of each of an optimizer's JSON param @groups. */
enum us_status us_unwrap_json_groups(struct cJSON *groups,
				     const struct us_names_opts *o);

/* us_unwrap_json_optim_keys - unwrap the <param> of every
 * "state.<param>.<slot>" key of the JSON object @obj (optimizer scalars). */
enum us_status us_unwrap_json_optim_keys(struct cJSON *obj,
					 const struct us_names_opts *o);

/* us_names_apply - unwrap every tensor's name (as its reader set it, after
 * the container rule).  Collisions
 * are found by us_sd_finalize(), which names both source keys. */
enum us_status us_names_apply(struct us_statedict *sd,
			      const struct us_names_opts *o,
			      struct us_err *err);

#endif /* US_NAMES_H */
