/*
 * tree.h - the inode table of a mount.
 *
 * The tree is built once at mount and never changes, so nodes are never
 * freed while mounted: inode number = index + 1 (FUSE_ROOT_ID is 1).  So no
 * lookup counts are kept: a forget has nothing to free (ops.c).  Should
 * nodes ever come and go, count lookups then, where they are read.
 *
 * Names and inodes are separate.  A directory holds a sorted array of
 * entries (name -> ino); a node holds what an inode has: kind, size, link
 * count, content.  Tied tensors are the reason: tensors/a and tensors/b are
 * two entries naming one node, which is what makes them hard links (same
 * st_ino, st_nlink 2, counted once by du, statfs, tar, rsync -H, cp -a).
 *
 * A node is kept small (no struct stat in it: attributes are computed by
 * us_tree_stat from a template stat), since tensors/ has one per tensor.
 */
#ifndef US_TREE_H
#define US_TREE_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stdint.h>
#include <sys/stat.h>

#include "model.h"
#include "source/passthrough.h"
#include "view/readahead.h"
#include "view/view.h"

struct us_root_xattrs; /* root_xattr.h */

/* The directory of raw tensor views; it shadows a SOURCE entry of that name. */
#define US_TENSORS_DIR "tensors"

enum us_node_kind {
	US_NODE_DIR,
	US_NODE_VIEW,        /* a file rendered from the state dict */
	US_NODE_TENSOR,      /* tensors/<name>: a raw view, maybe hard-linked */
	US_NODE_PASSTHROUGH, /* a SOURCE file served as is */
};

struct us_dirent {
	const char *name;
	fuse_ino_t ino;
};

struct us_node {
	enum us_node_kind kind;
	uint32_t nlink;          /* names of a file; 2 + subdirectories */
	fuse_ino_t parent;       /* directories: for ".." */
	uint64_t size;
	/* Owner, times and (passthrough) identity at mount: the source's stat
	 * for what we pass through; NULL (SOURCE's, t->root_st) for what we
	 * render. */
	const struct stat *like;
	union {
		struct {
			struct us_dirent *ents; /* sorted by name (strcmp) */
			size_t nents;
		} dir;                          /* US_NODE_DIR */
		const struct us_view *view;     /* US_NODE_VIEW, US_NODE_TENSOR */
		const char *relpath;            /* US_NODE_PASSTHROUGH: under src */
	} u;
};

/*
 * -o uid=N,gid=N,umask=M, as sshfs and ratarmount: one owner and one set of
 * permission bits for everything served, in place of SOURCE's.  With a
 * umask, directories are 0555 and files 0444 (and SOURCE's execute bits, a
 * passthrough script stays runnable), less the umask: the mount is
 * read-only whatever the umask grants.
 */
struct us_tree_owner {
	bool set_uid, set_gid, set_umask;
	uid_t uid;
	gid_t gid;
	mode_t umask;
};

struct us_tree {
	struct us_node *nodes;
	size_t n, cap;
	struct us_dirent *ents;  /* every directory's entries, in one block */
	size_t nents;
	char *names;             /* encoded tensor names that differ from t->name */
	struct stat root_st;     /* SOURCE's stat at mount, as new as its
				  * newest source file: the template */
	mode_t view_perm;        /* views and tensors/: read bits of all sources */
	const struct us_dir *src; /* SOURCE directory (not owned; US_DIR_NONE
				   * when SOURCE is one file) */
	uint64_t total_bytes;    /* for statfs: every inode counted once */
	uint64_t total_inodes;   /* for statfs: the nodes that have a name */
	struct us_readahead *ra; /* the views' sources read ahead, or NULL */
	struct us_assembler *as; /* where the views' tensor bytes come from */
	const struct us_root_xattrs *rootx; /* the root's xattrs, for a loader */
	bool direct_io;          /* --direct-io=on (ops.c, init_ext.h) */
	struct us_tree_owner owner; /* -o uid=,gid=,umask= (set after build) */
};

/*
 * us_tree_build - root directory, one file per view, tensors/ with one
 * entry per tensor of @sd (tied names on their canonical's node, whose
 * content is @raw[canonical index]; @raw is indexed like sd->tensors, may be
 * NULL for no tensors/), then the passthrough entries (a root name that a
 * view or tensors/ uses is left out: views win).  0, or -1 with errno set.
 */
int us_tree_build(struct us_tree *t, struct us_view *const *views,
		  size_t nviews, const struct us_statedict *sd,
		  const struct us_view *raw, const struct us_pt_list *pt,
		  const struct us_dir *src, const struct stat *root_st);
void us_tree_free(struct us_tree *t);

/* us_tree_get - the node of @ino, or NULL when it is not one of ours. */
struct us_node *us_tree_get(struct us_tree *t, fuse_ino_t ino);
/* us_tree_lookup - binary search of @name in directory @dir; 0 if absent. */
fuse_ino_t us_tree_lookup(const struct us_node *dir, const char *name);
/* us_tree_stat - the attributes of @ino (which must be one of ours). */
void us_tree_stat(const struct us_tree *t, fuse_ino_t ino, struct stat *st);

/*
 * us_tensor_file_name - the tensors/ file name of tensor @name: '%' is
 * written "%25" and '/' "%2F" (design.md); a name that is "." or ".." has
 * its dots written "%2E".  Writes at most @cap bytes with the NUL and
 * returns the length it needs without the NUL.
 */
size_t us_tensor_file_name(const char *name, char *buf, size_t cap);

static inline fuse_ino_t us_tree_ino(const struct us_tree *t,
				     const struct us_node *n)
{
	return (fuse_ino_t)(n - t->nodes) + 1;
}

#endif /* US_TREE_H */
