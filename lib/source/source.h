/*
 * source.h - turning SOURCE into a state dict.
 *
 * Each format is one reader that only describes chunks (model.h); this layer
 * detects the format, runs the reader, and finalizes (validates) the result.
 */
#ifndef US_SOURCE_H
#define US_SOURCE_H

#include <stdbool.h>

#include "../model.h"
#include "../names.h"
#include "../ties.h"
#include "../storage/remote.h"

/* --deepspeed-weights: which weights a DeepSpeed checkpoint serves. */
enum us_ds_weights {
	US_DS_WEIGHTS_FP32 = 0, /* the fp32 master weights (default) */
	US_DS_WEIGHTS_MODULE,   /* ZeRO-1/2: the 16-bit module state dict */
};

struct us_source_opts {
	const char *format; /* "auto" (or NULL), "safetensors", ... */
	struct us_names_opts names;
	enum us_ties_mode ties;
	bool progress;      /* report long work (confirming ties) on stderr */
	bool recipe_hint;   /* without --recipe: find the built-in recipe that
			     * would fit (sd->recipe_hint), for a note; it
			     * matches every name against every built-in */
	bool cast;          /* --dtype other than keep: present floats as... */
	enum us_dtype cast_to;
	enum us_ds_weights ds_weights;
	/* --recipe: NULL (names as stored), "auto", a built-in name or a
	 * recipe file (recipes/recipe.h). */
	const char *recipe;
	/* --overlay DIR: its config.json, when it has one, is the one recipes
	 * (head_dim) and ties (tie_word_embeddings) read instead of SOURCE's. */
	const char *overlay;
	/* A remote SOURCE's store options (storage/remote.h). */
	struct us_remote_opts remote;
};

/*
 * A reader.  @file is the checkpoint file when SOURCE is a file (then @d is
 * its directory), or NULL when SOURCE is the directory @d (local or remote:
 * storage.h).  probe() must only look at names and
 * headers; read() describes every tensor, opening the files it uses through
 * us_sd_open_file() and marking any other file it consumed (an index).
 * @opts (NULL: defaults) carries the options a format has (ds_weights).
 */
struct us_reader {
	const char *name;
	bool (*probe)(const struct us_dir *d, const char *file);
	enum us_status (*read)(struct us_statedict *sd, const struct us_dir *d,
			       const char *file, const struct us_source_opts *opts,
			       struct us_err *err);
};

extern const struct us_reader us_reader_safetensors;
extern const struct us_reader us_reader_torch;
extern const struct us_reader us_reader_dcp;
extern const struct us_reader us_reader_deepspeed;
extern const struct us_reader us_reader_ds_universal;

/*
 * us_source_open - open @path (a file or a directory), read it with the
 * reader @opts asks for (or the first whose probe accepts it) and return the
 * finalized state dict in *@out.  On failure *@out is NULL and @err says why.
 * @path may be a URL (us_remote_is_url: s3://, https://): the state dict
 * then owns the store (sd->remote), opened with @opts->remote.
 * *@dir_out receives SOURCE's directory (for passthrough; close it with
 * us_dir_close), or US_DIR_NONE when SOURCE is a single file; a remote
 * one refers to sd->remote and is valid while the state dict lives.
 */
enum us_status us_source_open(const char *path,
			      const struct us_source_opts *opts,
			      struct us_statedict **out, struct us_dir *dir_out,
			      struct us_err *err);

/* us_source_probe - does any reader's probe accept the directory @d
 * (names and headers only, as us_source_open picks its reader)? */
bool us_source_probe(const struct us_dir *d);

/* us_dir_any - does any entry name of @d satisfy @match?  (Probes.) */
bool us_dir_any(const struct us_dir *d, bool (*match)(const char *name));

#endif /* US_SOURCE_H */
