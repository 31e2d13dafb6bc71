/* builtin.c - the built-in recipes: torchtitan 0.3.0's state_dict_adapter
 * to_hf for its Llama 3, Qwen3 and DeepSeek-V3 models, as recipe JSON
 * (docs/recipes.md), kept as JSON in lib/recipes/builtin/ and embedded at
 * build time (tools/embed_recipes.py).  Written from the adapters'
 * from_hf_map by hand;
 * tests/integration/test_recipes.py compares every byte with to_hf itself.
 * What to_hf does that a recipe does not: it drops lm_head.weight when
 * enable_weight_tying is set -- here the tie machinery (ties.h) links it
 * instead, on config.json's evidence, so safetensors stores it once.
 * DeepSeek-V3's MTP layers, numbered after the main layers, take their
 * offset from config.json's num_hidden_layers ("offset", recipe.h). */
#include "recipe.h"

#include <stddef.h>
#include <string.h>

/* The recipes' JSON, one string each, and US_RECIPE_BUILTINS: X(name,
 * text) per recipe in the order listed in lib/meson.build. */
#include "recipes_builtin.h"

#define X(name, text) name,
const char *const us_recipe_builtin_names[] = { US_RECIPE_BUILTINS NULL };
#undef X
#define X(name, text) text,
static const char *const texts[] = { US_RECIPE_BUILTINS };
#undef X

const char *us_recipe_builtin_text(const char *name)
{
	for (size_t i = 0; us_recipe_builtin_names[i]; i++)
		if (strcmp(us_recipe_builtin_names[i], name) == 0)
			return texts[i];
	return NULL;
}
