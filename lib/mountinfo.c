/*
 * mountinfo.c - parsing /proc/self/mountinfo (mountinfo.h).
 *
 * A line is "id parent major:minor root mountpoint options [optional...] -
 * fstype source superoptions", fields separated by one space; a space, tab,
 * newline or backslash inside a field is written \ooo.
 */
#include "mountinfo.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Undo mountinfo's \ooo escapes in place. */
static void unescape_octal(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = '\0';
}

/* Field @f, unescaped, into @dst (@cap bytes); false when it does not fit. */
static bool field(char *f, char *dst, size_t cap)
{
	unescape_octal(f);
	if (strlen(f) >= cap)
		return false;
	strcpy(dst, f);
	return true;
}

/* The user_id= of a FUSE superblock's options @opts ("ro,user_id=0,..."),
 * or -1: mountinfo prints it as a decimal uid. */
static long long fuse_user_id(char *opts)
{
	char *save = NULL;

	for (char *o = strtok_r(opts, ",", &save); o;
	     o = strtok_r(NULL, ",", &save)) {
		char *end;
		long long v;

		if (strncmp(o, "user_id=", 8) != 0 || !o[8])
			continue;
		errno = 0;
		v = strtoll(o + 8, &end, 10);
		return errno || *end || v < 0 ? -1 : v;
	}
	return -1;
}

int us_mountinfo_parse(char *line, struct us_mountinfo *m)
{
	char *save = NULL, *f[5], *t, *type, *super;

	line[strcspn(line, "\n")] = '\0';
	/* id parent major:minor root mountpoint */
	for (int i = 0; i < 5; i++)
		if (!(f[i] = strtok_r(i ? NULL : line, " ", &save)))
			return -1;
	if (sscanf(f[2], "%u:%u", &m->major, &m->minor) != 2)
		return -1;
	if (!field(f[3], m->root, sizeof(m->root)) ||
	    !field(f[4], m->mnt, sizeof(m->mnt)))
		return -1;
	/* options, then optional fields up to the lone "-" */
	do {
		t = strtok_r(NULL, " ", &save);
	} while (t && strcmp(t, "-") != 0);
	type = t ? strtok_r(NULL, " ", &save) : NULL;
	if (!type || !strtok_r(NULL, " ", &save)) /* the source */
		return -1;
	super = strtok_r(NULL, " ", &save);
	if (!field(type, m->fstype, sizeof(m->fstype)))
		return -1;
	m->user_id = super ? fuse_user_id(super) : -1;
	return 0;
}

int us_mountinfo_find(const char *file, const char *abs_mnt,
		      struct us_mountinfo *m)
{
	FILE *f = fopen(file ? file : "/proc/self/mountinfo", "re");
	struct us_mountinfo cur;
	char *line = NULL;
	size_t cap = 0;
	int found = -1;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		if (us_mountinfo_parse(line, &cur) == 0 &&
		    strcmp(cur.mnt, abs_mnt) == 0) {
			*m = cur;
			found = 0;
		}
	}
	free(line);
	fclose(f);
	return found;
}

int us_mountinfo_dev(const char *abs_mnt, unsigned *maj, unsigned *min)
{
	struct us_mountinfo m;

	if (us_mountinfo_find(NULL, abs_mnt, &m) < 0)
		return -1;
	*maj = m.major;
	*min = m.minor;
	return 0;
}
