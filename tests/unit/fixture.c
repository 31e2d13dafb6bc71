/* fixture.c - paths to and damaged copies of tests/fixtures. */
#include "fixture.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/source.h"
#include "tmpdir.h"

struct us_statedict *fixture_open(const char *path)
{
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	struct us_dir srcdir = US_DIR_NONE;

	if (us_source_open(path, NULL, &sd, &srcdir, &err) != US_OK)
		fprintf(stderr, "  %s: %s\n", path, err.msg);
	us_dir_close(&srcdir);
	return sd;
}

const char *fixture_path(const char *rel)
{
	static char path[4096];
	const char *base = getenv("US_FIXTURES");

	if (!base) {
		fprintf(stderr, "US_FIXTURES is not set: run through meson test\n");
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s", base, rel);
	return path;
}

unsigned char *fixture_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int fixture_copy_dir(const char *rel, const char *dst)
{
	char src[4096], file[8192];
	struct dirent *e;
	int rc = 0;
	DIR *d;

	snprintf(src, sizeof(src), "%s", fixture_path(rel));
	d = opendir(src);
	if (!d)
		return -1;
	while (rc == 0 && (e = readdir(d))) {
		struct stat st;
		unsigned char *buf;
		size_t len;

		snprintf(file, sizeof(file), "%s/%s", src, e->d_name);
		if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		buf = fixture_slurp(file, &len);
		rc = buf ? tmpdir_write(dst, e->d_name, buf, len) : -1;
		free(buf);
	}
	closedir(d);
	return rc;
}

size_t fixture_replace(unsigned char *buf, size_t len, const char *from,
		       const char *to)
{
	size_t n = strlen(from), count = 0;

	for (size_t i = 0; n && i + n <= len; i++) {
		if (memcmp(buf + i, from, n) == 0) {
			memcpy(buf + i, to, n);
			count++;
		}
	}
	return count;
}
