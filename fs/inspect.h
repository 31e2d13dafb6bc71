/* inspect.h - `unshardfs inspect [--json] SOURCE`: the resolved tensor table. */
#ifndef US_INSPECT_H
#define US_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "model.h"

/* us_inspect_print - one row per tensor: name, dtype, shape, bytes, chunk
 * count and source file(s).  Returns 0, or -1 if writing failed. */
int us_inspect_print(const struct us_statedict *sd, bool json, FILE *out);

#endif /* US_INSPECT_H */
