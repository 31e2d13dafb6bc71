/*
 * export.h - `unshardfs export`: the views a mount would serve, written to
 * disk without FUSE.
 *
 * The bytes are the mount's bytes: the same views (lib/view) read through
 * the same us_view_read, in fixed pieces (EXPORT_PIECE), so memory stays at
 * one piece plus --cache-size however big the checkpoint is.  Each file is
 * written to "<final>.tmp.<pid>", fsync'd, and renamed only when every file
 * of the set is complete (the sharded set's index last), so a reader never
 * sees a partial file under the final name; a failure, SIGINT, SIGTERM or
 * SIGHUP removes the temporaries.
 */
#ifndef US_EXPORT_H
#define US_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "opts.h"
#include "view/view.h"

/*
 * us_export - write @views (@n of them, in order; the model's) to o->out:
 * "-" is stdout (one view only, never a terminal); a directory (an existing
 * one, OUT ending in '/', or any OUT with --max-shard-size or --optimizer;
 * made if missing) gets a complete loadable directory: each view under its
 * own name, every file a mount of @sd would pass through (read from
 * SOURCE's directory @src, US_DIR_NONE when SOURCE is one file) and, with
 * --optimizer, optimizer.safetensors and optimizer.json; anything else is
 * the one view's file.  Tensors are read through @as.  An output name that exists is refused unless
 * --force, before anything is written.  Progress on stderr when it is a
 * terminal and not -q.  Returns the exit status: 0, 1 (usage: OUT cannot
 * take this view set, exists, or is a terminal) or 2 (a read or write
 * failed; one line on stderr).  After a caught signal it cleans up and
 * dies of that signal.
 */
int us_export(const struct us_opts *o, struct us_assembler *as,
	      const struct us_statedict *sd, const struct us_dir *src,
	      struct us_view *const *views, size_t n);

/*
 * us_pt_mark_visible - @keep[i] (an array of @pt->n) says whether the
 * passthrough entry i shows beside the views: a root name a mount serves
 * from the state dict (model.safetensors, tensors, ...) hides the source
 * file, and a hidden directory everything below it.  What inspect lists.
 */
struct us_pt_list;
void us_pt_mark_visible(const struct us_pt_list *pt, bool *keep);

#endif /* US_EXPORT_H */
