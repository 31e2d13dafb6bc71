/*
 * source_hint.c - naming SOURCE as given, and suggesting the checkpoint a
 * user most likely meant (source_hint.h).  Only names and headers are
 * looked at, through the readers' own probes, so a hint never claims a
 * checkpoint the mount would not find.
 */
#include "source_hint.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "redact.h"
#include "source/source.h"

#define HINT_NAMES 3 /* subdirectories named before "and N more" */

/* Is @name under @d a directory that a reader recognises? */
static bool sub_probes(const struct us_dir *d, const char *name)
{
	struct us_dir sub;
	bool yes;

	if (us_dir_openat(d, name, &sub) < 0)
		return false;
	yes = us_source_probe(&sub);
	us_dir_close(&sub);
	return yes;
}

bool us_source_recognised(const char *path)
{
	/* A remote SOURCE gets no hint: its listing is the store's, and
	 * hints are about local folders (hub caches, runs). */
	return us_remote_is_url(path) || sub_probes(NULL, path);
}

/* The revision refs/main names, when it is a snapshot directory. */
static bool hub_main(const struct us_dir *repo, char *rev, size_t cap)
{
	struct us_file f;
	size_t n;
	char path[160];

	if (us_file_open(repo, "refs/main", &f) != US_OK)
		return false;
	n = (uint64_t)f.size < cap - 1 ? (size_t)f.size : cap - 1;
	if (n == 0 || us_file_pread(&f, rev, n, 0) != US_OK) {
		us_file_close(&f);
		return false;
	}
	us_file_close(&f);
	rev[n] = '\0';
	rev[strcspn(rev, " \t\r\n/")] = '\0';
	snprintf(path, sizeof(path), "snapshots/%s", rev);
	return *rev && sub_probes(repo, path);
}

/* A hub cache repository (models--org--name/ with snapshots/): mount a
 * snapshot, the one refs/main names when it is a checkpoint. */
static bool hint_hub(const struct us_dir *d, const char *source, char *buf,
		     size_t cap)
{
	struct us_dir snaps;
	char rev[128];
	char **names;
	size_t n, found = SIZE_MAX;

	if (us_dir_openat(d, "snapshots", &snaps) < 0)
		return false;
	if (hub_main(d, rev, sizeof(rev))) {
		us_dir_close(&snaps);
		snprintf(buf, cap, "; it is a Hugging Face cache repository: "
			 "mount its snapshot %s/snapshots/%s", source, rev);
		return true;
	}
	if (us_dirlist(&snaps, &names, &n) != US_OK) {
		us_dir_close(&snaps);
		return false;
	}
	for (size_t i = 0; i < n && found == SIZE_MAX; i++)
		if (sub_probes(&snaps, names[i]))
			found = i;
	if (found != SIZE_MAX)
		snprintf(buf, cap, "; it is a Hugging Face cache repository: "
			 "mount a snapshot, e.g. %s/snapshots/%s", source,
			 names[found]);
	us_dirlist_free(names, n);
	us_dir_close(&snaps);
	return found != SIZE_MAX;
}

/* Checkpoints one level down (a run's checkpoint-500/, checkpoint-1000/):
 * name a few of them. */
static bool hint_subdirs(const struct us_dir *d, const char *source,
			 char *buf, size_t cap)
{
	char **names;
	size_t n, hits = 0, pos;
	const char *sep = source[strlen(source) - 1] == '/' ? "" : "/";

	if (us_dirlist(d, &names, &n) != US_OK)
		return false;
	pos = (size_t)snprintf(buf, cap, "; checkpoints are in its "
			       "subdirectories, mount one:");
	for (size_t i = 0; i < n; i++) {
		if (!sub_probes(d, names[i]))
			continue;
		if (hits++ < HINT_NAMES && pos < cap)
			pos += (size_t)snprintf(buf + pos, cap - pos, "%s %s%s%s",
						hits > 1 ? "," : "", source, sep,
						names[i]);
	}
	if (hits > HINT_NAMES && pos < cap)
		snprintf(buf + pos, cap - pos, " and %zu more",
			 hits - HINT_NAMES);
	us_dirlist_free(names, n);
	return hits > 0;
}

static void find_hint(const char *source, char *buf, size_t cap)
{
	struct us_dir d;

	buf[0] = '\0';
	if (us_remote_is_url(source) || us_dir_open_path(source, &d) < 0)
		return;
	if (!hint_hub(&d, source, buf, cap) && !hint_subdirs(&d, source, buf, cap))
		buf[0] = '\0';
	us_dir_close(&d);
}

void us_source_refusal(FILE *out, const char *source, const struct us_err *err,
		       bool hint)
{
	char more[1024] = "", shown[1024];
	const char *msg = err->msg; /* redacted by us_err_set */

	if (hint)
		find_hint(source, more, sizeof(more));
	source = us_redact(source, shown, sizeof(shown));
	/* "." is SOURCE itself: say it as the user did */
	if (msg[0] == '.' && msg[1] == ':' && msg[2] == ' ')
		fprintf(out, "unshardfs: %s: %s%s\n", source, msg + 3, more);
	else
		fprintf(out, "unshardfs: %s%s\n", msg, more);
}
