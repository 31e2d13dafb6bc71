/* inspect.h - `unshardfs inspect [--json] SOURCE`: the resolved tensor table. */
#ifndef US_INSPECT_H
#define US_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"

/* us_inspect_print - one row per tensor: name, dtype, shape, bytes, chunk
 * count and source file(s); then, each after a blank line, the optimizer's
 * tensors (and optimizer.json's size) and the files a mount passes
 * through, read from SOURCE's directory @srcfd (-1: SOURCE is a file).
 * --json: the same as {"format", "tensors", "optimizer", "passthrough"}.
 * Returns 0, or -1 if writing (or listing SOURCE) failed. */
int us_inspect_print(const struct us_statedict *sd, int srcfd, bool json,
		     FILE *out);

#endif /* US_INSPECT_H */
