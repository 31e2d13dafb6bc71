/*
 * pt_prune.c - leaving out the directories the reader emptied (pt_prune.h).
 *
 * The consumed paths are sorted once, so "did this directory hold a
 * consumed file" is one binary search per directory: a universal DeepSpeed
 * checkpoint has a directory and three consumed files per parameter.
 */
#include "pt_prune.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Does a path in the sorted @v (@n) start with "@dir/"? */
static bool holds_any(const char *const *v, size_t n, const char *dir)
{
	size_t len = strlen(dir), lo = 0, hi = n;

	/* the first path not before "@dir/": '/' sorts before any name byte
	 * that could follow it in a sibling ("a/x" < "a0") */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = strncmp(v[mid], dir, len);

		if (r < 0 || (r == 0 && (unsigned char)v[mid][len] < '/'))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && !strncmp(v[lo], dir, len) && v[lo][len] == '/';
}

int us_pt_keep(const struct us_pt_list *pt, const struct us_statedict *sd,
	       bool *keep)
{
	size_t nc = sd ? sd->nconsumed : 0;
	const char **sorted = malloc((nc + 1) * sizeof(*sorted));
	bool *child_kept = calloc(pt->n + 1, sizeof(*child_kept));

	if (!sorted || !child_kept) {
		free(sorted);
		free(child_kept);
		return -1;
	}
	if (nc)
		memcpy(sorted, sd->consumed, nc * sizeof(*sorted));
	qsort(sorted, nc, sizeof(*sorted), cmp_str);
	/* children follow their parent: from the end, a directory has seen
	 * all of its entries by the time it is reached */
	for (size_t i = pt->n; i-- > 0;) {
		const struct us_pt_entry *e = &pt->v[i];

		keep[i] = !S_ISDIR(e->st.st_mode) || child_kept[i] ||
			  !holds_any(sorted, nc, e->relpath);
		if (keep[i] && e->parent != SIZE_MAX)
			child_kept[e->parent] = true;
	}
	free(sorted);
	free(child_kept);
	return 0;
}
