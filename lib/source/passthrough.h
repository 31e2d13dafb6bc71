/*
 * passthrough.h - the files of SOURCE that are not part of the checkpoint
 * (config.json, tokenizer files, ...), served as they are.
 *
 * The scan follows symlinks (a hub cache snapshot is all symlinks into
 * ../../blobs), skips what the reader consumed, dangling links and special
 * files, and guards against directory loops.
 */
#ifndef US_PASSTHROUGH_H
#define US_PASSTHROUGH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "../model.h"

struct us_pt_entry {
	char *relpath;  /* relative to SOURCE */
	const char *name; /* the last component of relpath */
	size_t parent;  /* index of the parent directory entry, or SIZE_MAX
			 * for SOURCE itself */
	struct stat st; /* stat() of the target, symlinks followed */
};

struct us_pt_list {
	struct us_pt_entry *v;
	size_t n, cap;
};

/* us_pt_scan - list the passthrough tree of the directory @dir (local or
 * remote).  Parents always come before their children. */
enum us_status us_pt_scan(const struct us_dir *dir,
			  const struct us_statedict *sd, struct us_pt_list *out,
			  struct us_err *err);
void us_pt_free(struct us_pt_list *l);

/*
 * us_pt_overlay - add the regular files (symlinks followed) directly in
 * @dir to @l as top-level entries (--overlay).  Their relpath is absolute
 * (us_file_open opens it locally, whatever SOURCE is), and an overlay file
 * replaces a SOURCE file of the same name: the user added it on purpose
 * (an HF config.json beside a trainer's own).  Subdirectories are not
 * walked: an overlay is a flat config directory.
 */
enum us_status us_pt_overlay(const char *dir, struct us_pt_list *l,
			     struct us_err *err);

/*
 * us_pt_collect - what a mount of @sd passes through: SOURCE's tree when
 * SOURCE is the directory @src (US_DIR_NONE: one file, nothing beside it), then
 * the files of @overlay (NULL: none).  The mount, export and inspect all
 * list it so.  On failure @l is freed.
 */
enum us_status us_pt_collect(const struct us_dir *src,
			     const struct us_statedict *sd,
			     const char *overlay, struct us_pt_list *l,
			     struct us_err *err);

#endif /* US_PASSTHROUGH_H */
