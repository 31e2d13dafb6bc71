/*
 * tree.c - building the static inode table.
 *
 * Nodes are added first, each name as a (parent, name, ino) link; once all
 * are in, the links are sorted by (parent, name) and become one block of
 * directory entries, each directory owning a slice of it.  That is what lets
 * several names share one node (tied tensors) while every other node has
 * exactly one.
 */
#include "tree.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"
#include "pt_prune.h"

struct link {
	fuse_ino_t parent;
	struct us_dirent ent;
};

struct builder {
	struct us_tree *t;
	struct link *links;
	size_t n, cap;
};

static bool newer(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec > b->tv_sec ||
	       (a->tv_sec == b->tv_sec && a->tv_nsec > b->tv_nsec);
}

static struct us_node *tree_add(struct us_tree *t, enum us_node_kind kind,
				const struct stat *like, uint64_t size)
{
	struct us_node *n;

	if (US_GROW(t->nodes, t->cap, t->n) != US_OK)
		return NULL;
	n = &t->nodes[t->n++];
	memset(n, 0, sizeof(*n));
	n->kind = kind;
	n->like = like;
	n->size = size;
	n->nlink = kind == US_NODE_DIR ? 2 : 0; /* files: one per link */
	return n;
}

/* Give @ino the name @name in directory @parent. */
static int link_add(struct builder *b, fuse_ino_t parent, const char *name,
		    fuse_ino_t ino)
{
	struct us_node *n = &b->t->nodes[ino - 1];

	if (US_GROW(b->links, b->cap, b->n) != US_OK)
		return -1;
	b->links[b->n++] = (struct link){ parent, { name, ino } };
	if (n->kind == US_NODE_DIR)
		n->parent = parent;
	else
		n->nlink++;
	return 0;
}

static int cmp_link(const void *a, const void *b)
{
	const struct link *x = a, *y = b;

	if (x->parent != y->parent)
		return x->parent < y->parent ? -1 : 1;
	return strcmp(x->ent.name, y->ent.name);
}

/* Sort the links into t->ents and give each directory its slice. */
static int tree_link_dirs(struct builder *b)
{
	struct us_tree *t = b->t;

	qsort(b->links, b->n, sizeof(*b->links), cmp_link);
	t->ents = calloc(b->n + 1, sizeof(*t->ents));
	if (!t->ents)
		return -1;
	t->nents = b->n;
	for (size_t i = 0; i < b->n; i++) {
		struct us_node *d = &t->nodes[b->links[i].parent - 1];

		t->ents[i] = b->links[i].ent;
		if (!d->u.dir.ents)
			d->u.dir.ents = &t->ents[i];
		d->u.dir.nents++;
		if (t->nodes[b->links[i].ent.ino - 1].kind == US_NODE_DIR)
			d->nlink++;
	}
	return 0;
}

static bool root_name_taken(struct us_view *const *views, size_t nviews,
			    bool tensors, const char *name)
{
	if (tensors && strcmp(name, US_TENSORS_DIR) == 0)
		return true;
	for (size_t i = 0; i < nviews; i++)
		if (strcmp(views[i]->name, name) == 0)
			return true;
	return false;
}

static int tree_add_passthrough(struct builder *b, const struct us_pt_list *pt,
				const struct us_statedict *sd,
				struct us_view *const *views, size_t nviews,
				bool tensors)
{
	/* pt entry i becomes node map[i]; parents precede children. */
	fuse_ino_t *map = calloc(pt->n + 1, sizeof(*map));
	bool *keep = calloc(pt->n + 1, sizeof(*keep));
	int rc = 0;

	if (!map || !keep || us_pt_keep(pt, sd, keep) < 0) {
		free(map);
		free(keep);
		return -1;
	}
	for (size_t i = 0; i < pt->n && rc == 0; i++) {
		const struct us_pt_entry *e = &pt->v[i];
		fuse_ino_t parent = e->parent == SIZE_MAX ? FUSE_ROOT_ID
							  : map[e->parent];
		bool dir = S_ISDIR(e->st.st_mode);
		struct us_node *n;

		if (!parent || !keep[i] || (parent == FUSE_ROOT_ID &&
				root_name_taken(views, nviews, tensors, e->name)))
			continue; /* shadowed by a view, emptied by the reader
				   * (pt_prune.h), or under a skipped dir */
		n = tree_add(b->t, dir ? US_NODE_DIR : US_NODE_PASSTHROUGH,
			     &e->st, dir ? 0 : (uint64_t)e->st.st_size);
		if (!n) {
			rc = -1;
			break;
		}
		if (!dir)
			n->u.relpath = e->relpath;
		map[i] = us_tree_ino(b->t, n);
		rc = link_add(b, parent, e->name, map[i]);
	}
	free(map);
	free(keep);
	return rc;
}

size_t us_tensor_file_name(const char *name, char *buf, size_t cap)
{
	bool dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
	size_t n = 0;

	for (const char *p = name; *p; p++) {
		const char *esc = *p == '%' ? "%25" : *p == '/' ? "%2F"
				  : dots ? "%2E" : NULL;
		size_t k = esc ? 3 : 1;

		if (n + k < cap)
			memcpy(buf + n, esc ? esc : p, k);
		n += k;
	}
	if (cap)
		buf[n < cap ? n : cap - 1] = '\0';
	return n;
}

/*
 * The node that holds tensor @i: its tie group's canonical.  ties.c keeps
 * tie_of pointing at an untied member of sd->tensors; anything else would be
 * a bug there, and serving the name on its own node is the safe answer.
 */
static size_t canonical_of(const struct us_statedict *sd, size_t i)
{
	const struct us_tensor *c = sd->tensors[i].tie_of;

	if (!c || c < sd->tensors || c >= sd->tensors + sd->ntensors ||
	    c->tie_of)
		return i;
	return (size_t)(c - sd->tensors);
}

/* A tensor name that cannot be a directory entry is left out of tensors/
 * (it is still in model.safetensors): empty, or too long once encoded. */
static bool tensor_name_fits(size_t enc_len)
{
	return enc_len > 0 && enc_len <= NAME_MAX;
}

/*
 * Encoded names that differ from the tensor name go in one block, t->names;
 * the others point at the tensor name itself (encoding only ever grows a
 * name, so "same length" means "unchanged").  names[i] is NULL when tensor
 * i gets no entry.
 */
static int tensor_names(struct us_tree *t, const struct us_statedict *sd,
			const char **names)
{
	size_t pool = 0, pos = 0;

	for (size_t i = 0; i < sd->ntensors; i++) {
		const char *name = sd->tensors[i].name;
		size_t enc = us_tensor_file_name(name, NULL, 0);

		if (tensor_name_fits(enc) && enc != strlen(name))
			pool += enc + 1;
	}
	t->names = malloc(pool + 1);
	if (!t->names)
		return -1;
	for (size_t i = 0; i < sd->ntensors; i++) {
		const char *name = sd->tensors[i].name;
		size_t enc = us_tensor_file_name(name, NULL, 0);

		names[i] = NULL;
		if (!tensor_name_fits(enc))
			continue;
		if (enc == strlen(name)) {
			names[i] = name;
			continue;
		}
		names[i] = t->names + pos;
		pos += us_tensor_file_name(name, t->names + pos, pool - pos) + 1;
	}
	return 0;
}

/* tensors/: a node per canonical tensor, an entry per name.  A tied name's
 * entry names its canonical's node: one inode, st_nlink = its names. */
static int tree_add_tensors(struct builder *b, const struct us_statedict *sd,
			    const struct us_view *raw)
{
	struct us_tree *t = b->t;
	struct us_node *d = tree_add(t, US_NODE_DIR, NULL, 0);
	fuse_ino_t dir = d ? us_tree_ino(t, d) : 0;
	fuse_ino_t *ino = calloc(sd->ntensors + 1, sizeof(*ino));
	const char **names = calloc(sd->ntensors + 1, sizeof(*names));
	int rc = -1;

	if (!d || !ino || !names || link_add(b, FUSE_ROOT_ID, US_TENSORS_DIR, dir))
		goto out;
	if (tensor_names(t, sd, names) < 0)
		goto out;
	for (size_t i = 0; i < sd->ntensors; i++) {
		struct us_node *n;

		if (canonical_of(sd, i) != i)
			continue;
		n = tree_add(t, US_NODE_TENSOR, NULL, raw[i].size);
		if (!n)
			goto out;
		n->u.view = &raw[i];
		ino[i] = us_tree_ino(t, n);
	}
	for (size_t i = 0; i < sd->ntensors; i++)
		if (names[i] && link_add(b, dir, names[i],
					 ino[canonical_of(sd, i)]) < 0)
			goto out;
	rc = 0;
out:
	free(ino);
	free(names);
	return rc;
}

/* statfs and du count inodes, not names: a tied tensor counts once. */
/* statfs's totals: bytes and inodes of what has a name (a tensor whose
 * name cannot be a file name has a node and no link). */
static void tree_totals(struct us_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		if (!t->nodes[i].nlink)
			continue;
		t->total_inodes++;
		if (t->nodes[i].kind != US_NODE_DIR)
			t->total_bytes += t->nodes[i].size;
	}
}

/* Size both arrays for everything up front: with 100k tensors, doubling
 * would leave up to half of each unused for the life of the mount. */
static int tree_reserve(struct builder *b, size_t nviews,
			const struct us_statedict *sd, const struct us_pt_list *pt)
{
	size_t n = 2 + nviews + (sd ? sd->ntensors : 0) + (pt ? pt->n : 0);

	b->t->nodes = calloc(n, sizeof(*b->t->nodes));
	b->links = calloc(n, sizeof(*b->links));
	if (!b->t->nodes || !b->links)
		return -1;
	b->t->cap = n;
	b->cap = n;
	return 0;
}

/*
 * The views' template: SOURCE's stat, made as new as the newest of @sd's
 * files (an in-place rewrite of a shard changes its mtime, not the
 * directory's, and rsync or cp -u must see the view change), with the
 * read bits every source file grants (a view shows bytes of all of them).
 */
static void derive_stat(const struct us_statedict *sd, struct stat *st,
			mode_t *view_perm)
{
	*view_perm = 0444;
	for (size_t i = 0; sd && i < sd->nfiles; i++) {
		const struct us_file *uf = &sd->files[i];
		/* A remote object: read-only, times as recorded at open. */
		struct stat f = { .st_mode = S_IFREG | 0444,
				  .st_mtim = uf->mtime, .st_ctim = uf->ctime };

		if (uf->fd >= 0 && fstat(uf->fd, &f) < 0)
			continue;
		*view_perm &= f.st_mode;
		if (newer(&f.st_mtim, &st->st_mtim))
			st->st_mtim = f.st_mtim;
		if (newer(&f.st_ctim, &st->st_ctim))
			st->st_ctim = f.st_ctim;
	}
}

int us_tree_build(struct us_tree *t, struct us_view *const *views,
		  size_t nviews, const struct us_statedict *sd,
		  const struct us_view *raw, const struct us_pt_list *pt,
		  const struct us_dir *src, const struct stat *root_st)
{
	struct builder b = { .t = t };
	bool tensors = sd && raw;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	t->src = src;
	t->root_st = *root_st;
	derive_stat(sd, &t->root_st, &t->view_perm);
	if (tree_reserve(&b, nviews, tensors ? sd : NULL, pt) < 0 ||
	    !tree_add(t, US_NODE_DIR, NULL, 0))
		goto out;
	t->nodes[0].parent = FUSE_ROOT_ID;
	for (size_t i = 0; i < nviews; i++) {
		struct us_node *n = tree_add(t, US_NODE_VIEW, NULL,
					     views[i]->size);

		if (!n)
			goto out;
		n->u.view = views[i];
		if (link_add(&b, FUSE_ROOT_ID, views[i]->name, us_tree_ino(t, n)))
			goto out;
	}
	if (tensors && tree_add_tensors(&b, sd, raw) < 0)
		goto out;
	if (pt && tree_add_passthrough(&b, pt, sd, views, nviews, tensors) < 0)
		goto out;
	if (tree_link_dirs(&b) < 0)
		goto out;
	tree_totals(t);
	rc = 0;
out:
	free(b.links);
	if (rc < 0)
		errno = ENOMEM; /* allocation is all that can fail */
	return rc;
}

void us_tree_free(struct us_tree *t)
{
	free(t->nodes);
	free(t->ents);
	free(t->names);
	memset(t, 0, sizeof(*t));
}

struct us_node *us_tree_get(struct us_tree *t, fuse_ino_t ino)
{
	return ino >= 1 && ino <= t->n ? &t->nodes[ino - 1] : NULL;
}

fuse_ino_t us_tree_lookup(const struct us_node *dir, const char *name)
{
	size_t lo = 0, hi = dir->u.dir.nents;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = strcmp(name, dir->u.dir.ents[mid].name);

		if (r == 0)
			return dir->u.dir.ents[mid].ino;
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* -o uid=,gid=,umask=: applied last, over what SOURCE says. */
static void apply_owner(const struct us_tree_owner *o, struct stat *st)
{
	if (o->set_uid)
		st->st_uid = o->uid;
	if (o->set_gid)
		st->st_gid = o->gid;
	if (o->set_umask) {
		mode_t perm = S_ISDIR(st->st_mode) ? 0555
			      : 0444 | (st->st_mode & 0111);

		st->st_mode = (st->st_mode & S_IFMT) | (perm & ~o->umask);
	}
}

void us_tree_stat(const struct us_tree *t, fuse_ino_t ino, struct stat *st)
{
	const struct us_node *n = &t->nodes[ino - 1];

	*st = n->like ? *n->like : t->root_st;
	st->st_ino = (ino_t)ino;
	st->st_nlink = n->nlink;
	/* Read-only: the write bits go, the rest of the mode stays (the
	 * mount has default_permissions, so the kernel enforces it).  A view
	 * or tensor file has its sources' read bits (derive_stat). */
	if (n->kind == US_NODE_DIR) {
		/* a directory of our own (the root, tensors/) may take its
		 * bits from a file SOURCE: whoever may read may search */
		mode_t m = st->st_mode & 0555;

		st->st_mode = S_IFDIR | (n->like ? m : m | (m & 0444) >> 2);
		apply_owner(&t->owner, st);
		return;
	}
	st->st_mode = S_IFREG | (n->like ? st->st_mode & 0555 : t->view_perm);
	st->st_size = (off_t)n->size;
	st->st_blksize = 1 << 20;
	st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
	apply_owner(&t->owner, st);
}
