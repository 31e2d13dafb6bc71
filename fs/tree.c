/* tree.c - building the static inode table. */
#include "tree.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct us_node *tree_add(struct us_tree *t, enum us_node_kind kind,
				const char *name, fuse_ino_t parent,
				const struct stat *st)
{
	struct us_node *n;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		void *p = realloc(t->nodes, cap * sizeof(*t->nodes));

		if (!p)
			return NULL;
		t->nodes = p;
		t->cap = cap;
	}
	n = &t->nodes[t->n++];
	memset(n, 0, sizeof(*n));
	n->kind = kind;
	n->name = name;
	n->parent = parent;
	n->st = *st;
	n->st.st_ino = (ino_t)t->n;
	return n;
}

/* Attributes of a file we serve: read-only, owned by whoever mounted. */
static struct stat file_stat(const struct stat *like, uint64_t size)
{
	struct stat st = *like;

	st.st_mode = S_IFREG | 0444;
	st.st_nlink = 1;
	st.st_size = (off_t)size;
	st.st_blksize = 1 << 20;
	st.st_blocks = (blkcnt_t)((size + 511) / 512);
	return st;
}

static struct stat dir_stat(const struct stat *like)
{
	struct stat st = *like;

	st.st_mode = S_IFDIR | 0555;
	st.st_nlink = 2;
	return st;
}

static int cmp_child(const void *a, const void *b, void *arg)
{
	const struct us_tree *t = arg;

	return strcmp(t->nodes[*(const fuse_ino_t *)a - 1].name,
		      t->nodes[*(const fuse_ino_t *)b - 1].name);
}

/* Fill every directory's sorted children array from the parent links. */
static int tree_link_children(struct us_tree *t)
{
	for (size_t i = 1; i < t->n; i++)
		t->nodes[t->nodes[i].parent - 1].nchildren++;
	for (size_t i = 0; i < t->n; i++) {
		struct us_node *d = &t->nodes[i];

		if (d->kind != US_NODE_DIR)
			continue;
		d->children = calloc(d->nchildren + 1, sizeof(*d->children));
		if (!d->children)
			return -1;
		d->nchildren = 0;
	}
	for (size_t i = 1; i < t->n; i++) {
		struct us_node *d = &t->nodes[t->nodes[i].parent - 1];

		d->children[d->nchildren++] = (fuse_ino_t)i + 1;
		if (t->nodes[i].kind == US_NODE_DIR)
			d->st.st_nlink++;
	}
	for (size_t i = 0; i < t->n; i++)
		if (t->nodes[i].kind == US_NODE_DIR && t->nodes[i].nchildren > 1)
			qsort_r(t->nodes[i].children, t->nodes[i].nchildren,
				sizeof(fuse_ino_t), cmp_child, t);
	return 0;
}

static bool is_view_name(struct us_view *const *views, size_t nviews,
			 const char *name)
{
	for (size_t i = 0; i < nviews; i++)
		if (strcmp(views[i]->name, name) == 0)
			return true;
	return false;
}

static int tree_add_passthrough(struct us_tree *t, const struct us_pt_list *pt,
				struct us_view *const *views, size_t nviews)
{
	/* pt entry i becomes node map[i]; parents precede children. */
	fuse_ino_t *map = calloc(pt->n + 1, sizeof(*map));

	if (!map)
		return -1;
	for (size_t i = 0; i < pt->n; i++) {
		const struct us_pt_entry *e = &pt->v[i];
		fuse_ino_t parent = e->parent == SIZE_MAX ? FUSE_ROOT_ID
							  : map[e->parent];
		struct us_node *n;
		struct stat st;

		if (!parent || (parent == FUSE_ROOT_ID &&
				is_view_name(views, nviews, e->name)))
			continue; /* shadowed by a view, or under a skipped dir */
		st = S_ISDIR(e->st.st_mode) ? dir_stat(&e->st)
					    : file_stat(&e->st, (uint64_t)e->st.st_size);
		n = tree_add(t, S_ISDIR(e->st.st_mode) ? US_NODE_DIR
			     : US_NODE_PASSTHROUGH, e->name, parent, &st);
		if (!n) {
			free(map);
			return -1;
		}
		n->relpath = e->relpath;
		n->src_st = e->st;
		map[i] = us_tree_ino(t, n);
		t->total_bytes += S_ISREG(e->st.st_mode) ? (uint64_t)e->st.st_size : 0;
	}
	free(map);
	return 0;
}

int us_tree_build(struct us_tree *t, struct us_view *const *views,
		  size_t nviews, const struct us_pt_list *pt, int srcfd,
		  const struct stat *root_st)
{
	struct stat rst = dir_stat(root_st);

	memset(t, 0, sizeof(*t));
	t->srcfd = srcfd;
	if (!tree_add(t, US_NODE_DIR, "", FUSE_ROOT_ID, &rst))
		return -1;
	for (size_t i = 0; i < nviews; i++) {
		struct stat st = file_stat(root_st, views[i]->size);
		struct us_node *n = tree_add(t, US_NODE_VIEW, views[i]->name,
					     FUSE_ROOT_ID, &st);

		if (!n)
			return -1;
		n->view = views[i];
		t->total_bytes += views[i]->size;
	}
	if (pt && tree_add_passthrough(t, pt, views, nviews) < 0)
		return -1;
	return tree_link_children(t);
}

void us_tree_free(struct us_tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->nodes[i].children);
	free(t->nodes);
	memset(t, 0, sizeof(*t));
}

struct us_node *us_tree_get(struct us_tree *t, fuse_ino_t ino)
{
	return ino >= 1 && ino <= t->n ? &t->nodes[ino - 1] : NULL;
}

struct us_node *us_tree_child(struct us_tree *t, const struct us_node *dir,
			      const char *name)
{
	size_t lo = 0, hi = dir->nchildren;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct us_node *c = &t->nodes[dir->children[mid] - 1];
		int r = strcmp(name, c->name);

		if (r == 0)
			return c;
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}
