/*
 * mountinfo.c - parsing /proc/self/mountinfo (mountinfo.h).  Only the
 * fields the daemon needs: major:minor and the mount point.
 */
#include "mountinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
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

int us_mountinfo_dev(const char *abs_mnt, unsigned *maj, unsigned *min)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	int found = -1;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		char dir[4096];
		unsigned a, b;

		/* id parent major:minor root mountpoint ... */
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, dir) != 3)
			continue;
		unescape_octal(dir);
		if (strcmp(dir, abs_mnt) == 0) {
			*maj = a;
			*min = b;
			found = 0;
		}
	}
	free(line);
	fclose(f);
	return found;
}
