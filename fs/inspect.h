/* inspect.h - `unshardfs inspect [--json] SOURCE`: the resolved tensor table. */
#ifndef US_INSPECT_H
#define US_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"

/* us_inspect_print - one row per tensor: name, dtype, shape, bytes, chunk
 * count and source file(s); then, each after a blank line, the optimizer's
 * tensors (and optimizer.json's size) and the files a mount passes
 * through, read from SOURCE's directory @src (US_DIR_NONE: SOURCE is a file) and
 * the --overlay directory @overlay (NULL: none).  With a recipe, each row
 * ends "rule N <- SOURCE_NAME" and a line lists what it dropped.
 * --json: the same as {"format", "tensors", "recipe", "recipe_dropped",
 * "optimizer", "passthrough"}; a tensor has "recipe_rule" (null without
 * a recipe) and, with one, "source_names".
 * Returns 0, or -1 if writing (or listing SOURCE) failed. */
int us_inspect_print(const struct us_statedict *sd, const struct us_dir *src,
		     const char *overlay, bool json, FILE *out);

#endif /* US_INSPECT_H */
