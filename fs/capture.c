/* capture.c - fd 2 into a memory file while mounting (capture.h). */
#include "capture.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void us_capture_begin(struct us_capture *c)
{
	c->saved = -1;
	c->fd = memfd_create("unshardfs-mount-messages", MFD_CLOEXEC);
	if (c->fd < 0)
		return;
	fflush(stderr);
	c->saved = dup(STDERR_FILENO);
	if (c->saved < 0 || dup2(c->fd, STDERR_FILENO) < 0) {
		if (c->saved >= 0)
			close(c->saved);
		close(c->fd);
		c->saved = c->fd = -1;
	}
}

/* Drop a "fuse: " or "fusermount3: " at the start of @s. */
static const char *unprefixed(const char *s)
{
	static const char *const prefixes[] = {"fuse: ", "fusermount3: ",
					       "fusermount: "};

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(*prefixes); i++)
		if (!strncmp(s, prefixes[i], strlen(prefixes[i])))
			return s + strlen(prefixes[i]);
	return s;
}

/* The lines of @text (@n bytes, NUL-terminated) as one, in @why. */
static void one_line(char *text, char *why, size_t cap)
{
	size_t pos = 0;

	why[0] = '\0';
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		int k = snprintf(why + pos, cap - pos, "%s%s", pos ? "; " : "",
				 unprefixed(line));

		if (k < 0 || (size_t)k >= cap - pos)
			return;
		pos += (size_t)k;
	}
}

void us_capture_end(struct us_capture *c, bool replay, char *why, size_t cap)
{
	char text[2048];
	ssize_t n = 0;

	if (why && cap)
		why[0] = '\0';
	if (c->saved < 0)
		return;
	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	n = pread(c->fd, text, sizeof(text) - 1, 0);
	close(c->fd);
	c->saved = c->fd = -1;
	if (n <= 0)
		return;
	text[n] = '\0';
	if (replay)
		fputs(text, stderr);
	else if (why && cap)
		one_line(text, why, cap);
}
