/*
 * source_hint.h - a refusal of SOURCE as the user can act on it.
 *
 * libunshard names the offending file relative to SOURCE, and SOURCE itself
 * as ".": on the command line that reads as the current directory, so the
 * line names SOURCE as the user typed it instead.  When SOURCE holds no
 * checkpoint but the likely intended one is near (a Hugging Face cache
 * repository's snapshot, checkpoints in subdirectories), the line says where.
 */
#ifndef US_SOURCE_HINT_H
#define US_SOURCE_HINT_H

#include <stdbool.h>
#include <stdio.h>

#include "us_error.h"

/*
 * us_source_refusal - print @err as the one refusal line for SOURCE
 * @source: "unshardfs: <path>: <what is wrong>[; <hint>]".  A hint is
 * looked for only when @hint is set (no reader recognised SOURCE).
 */
void us_source_refusal(FILE *out, const char *source, const struct us_err *err,
		       bool hint);

/* us_source_recognised - does any reader's probe accept the directory
 * @path?  (false for a file, or one that cannot be opened.) */
bool us_source_recognised(const char *path);

#endif /* US_SOURCE_HINT_H */
