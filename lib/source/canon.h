/*
 * canon.h - what a mount tells a loader: the checkpoint options as one
 * canonical string, and the identity of the source files (docs/loader.md).
 *
 * The daemon and the loader both build their state dict with
 * us_source_open(); these functions are the only way options and file
 * identities travel between them, so the two cannot read SOURCE
 * differently.  The value parsers (--dtype, --deepspeed-weights) live here
 * too, so the command line and the loader accept the same words.
 *
 * The canonical string names every us_source_opts field that changes
 * names or bytes, always all of them, always in this order, values in one
 * spelling; strip-prefix appears once per prefix (none: absent), then
 * recipe= and overlay= only when given, then a remote SOURCE's store
 * options that were set (endpoint-url=, region=, profile=, addressing=,
 * no-sign-request=yes, block-size=, remote-cache-size=, cache-dir=,
 * cache-dir-size=, connections=, retries=, timeout=; never credentials):
 *
 *   format=auto,no-unwrap=no,strip-prefix=model.,dtype=keep,ties=auto,
 *   deepspeed-weights=fp32
 *
 * In a value, '%', ',', '=' and bytes below 0x20 or 0x7f and above are
 * written %XX.  Equal options give equal strings, byte for byte.  A field
 * added to us_source_opts that changes names or bytes must be added here
 * (a loader refuses a key it does not know rather than ignore it).
 */
#ifndef US_CANON_H
#define US_CANON_H

#include <stdbool.h>
#include <stddef.h>

#include "source.h"

/* The mount root's xattrs, read by the loader (fs/root_xattr.c answers):
 * SOURCE's absolute path (the name a tensors/ file uses for its sources),
 * the canonical options, the identity of the source files. */
#define US_XATTR_ROOT_SOURCE "user.unshardfs.source"
#define US_XATTR_ROOT_OPTIONS "user.unshardfs.options"
#define US_XATTR_ROOT_IDENTITY "user.unshardfs.identity"
/* Only on the root of a remote SOURCE's mount: the store's counters. */
#define US_XATTR_ROOT_REMOTE_STATS "user.unshardfs.remote_stats"

#define US_CANON_MAX_STRIP 16

/* us_cast_parse - --dtype: keep, bf16, f16, f32 or torch's names for them
 * (bfloat16, float16, half, float32, float; "torch." in front allowed). */
bool us_cast_parse(const char *v, bool *cast, enum us_dtype *to);
/* us_ds_weights_parse - --deepspeed-weights: fp32 or module. */
bool us_ds_weights_parse(const char *v, enum us_ds_weights *out);
/* us_addressing_parse - --addressing: auto, path or virtual. */
bool us_addressing_parse(const char *v, enum us_addressing *out);

/*
 * us_source_opts_canon - the canonical string of @o in @buf (@cap bytes
 * with the NUL).  Returns the length it needs without the NUL (as
 * snprintf: larger than @cap - 1 means it was cut).
 */
size_t us_source_opts_canon(const struct us_source_opts *o, char *buf,
			    size_t cap);

/* Decoded options, with the room their strings point into. */
struct us_canon_opts {
	struct us_source_opts so;
	const char *strip[US_CANON_MAX_STRIP];
	char store[4096];
};

/* us_canon_opts_init - the defaults every option takes when unset. */
void us_canon_opts_init(struct us_canon_opts *c);

/*
 * us_source_opts_decode - parse the canonical string @s into @out.
 * US_E_UNSUPPORTED for a key this library does not know (a newer daemon's
 * option), US_E_FORMAT for anything else that is not canonical; @err names
 * the item as "options: ...".
 */
enum us_status us_source_opts_decode(const char *s, struct us_canon_opts *out,
				     struct us_err *err);

/*
 * us_sd_identity - "v1:<nfiles>:<hash>" of the identity recorded for
 * every file of @sd (relpath, device, inode, size, mtime, ctime: what a
 * read checks, model.h): equal only when a fresh open of SOURCE finds the
 * same files unchanged.  @cap >= 40.
 */
void us_sd_identity(const struct us_statedict *sd, char *buf, size_t cap);

#endif /* US_CANON_H */
