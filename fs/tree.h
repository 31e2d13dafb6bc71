/*
 * tree.h - the inode table of a mount.
 *
 * The tree is built once at mount and never changes, so nodes are never
 * freed while mounted: inode number = index + 1 (FUSE_ROOT_ID is 1).  Lookup
 * counts are still kept honestly (incremented on every entry reply, dropped
 * by forget) so that the discipline holds when later nodes come and go, and
 * so that tests can check it.
 */
#ifndef US_TREE_H
#define US_TREE_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>

#include "model.h"
#include "source/passthrough.h"
#include "view/view.h"

enum us_node_kind {
	US_NODE_DIR,
	US_NODE_VIEW,        /* a file rendered from the state dict */
	US_NODE_PASSTHROUGH, /* a SOURCE file served as is */
};

struct us_node {
	enum us_node_kind kind;
	const char *name;
	fuse_ino_t parent;
	struct stat st;          /* st_ino is ours; the rest is served as is */
	fuse_ino_t *children;    /* directories: sorted by name */
	size_t nchildren;
	const struct us_view *view;  /* US_NODE_VIEW */
	const char *relpath;     /* US_NODE_PASSTHROUGH: under srcfd */
	struct stat src_st;      /* US_NODE_PASSTHROUGH: identity at mount */
	_Atomic uint64_t nlookup;
};

struct us_tree {
	struct us_node *nodes;
	size_t n, cap;
	int srcfd;               /* SOURCE directory, or -1 */
	uint64_t total_bytes;    /* for statfs */
};

/*
 * us_tree_build - root directory, one file per view, and the passthrough
 * entries (a passthrough name that a view uses is left out: views win).
 */
int us_tree_build(struct us_tree *t, struct us_view *const *views,
		  size_t nviews, const struct us_pt_list *pt, int srcfd,
		  const struct stat *root_st);
void us_tree_free(struct us_tree *t);

/* us_tree_get - the node of @ino, or NULL when it is not one of ours. */
struct us_node *us_tree_get(struct us_tree *t, fuse_ino_t ino);
/* us_tree_child - binary search of @name in directory @dir. */
struct us_node *us_tree_child(struct us_tree *t, const struct us_node *dir,
			      const char *name);

static inline fuse_ino_t us_tree_ino(const struct us_tree *t,
				     const struct us_node *n)
{
	return (fuse_ino_t)(n - t->nodes) + 1;
}

#endif /* US_TREE_H */
