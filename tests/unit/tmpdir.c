/* tmpdir.c - scratch files for unit tests. */
#include "tmpdir.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tmpdir_new(void)
{
	static char path[4096];
	const char *base = getenv("TMPDIR");

	snprintf(path, sizeof(path), "%s/us-unit-XXXXXX", base ? base : "/tmp");
	return mkdtemp(path);
}

int tmpdir_write(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f)
		return -1;
	rc = fwrite(data, 1, len, f) == len ? 0 : -1;
	return fclose(f) == 0 ? rc : -1;
}

int tmpdir_write_st(const char *dir, const char *name, const char *json,
		    size_t dlen)
{
	size_t hlen = strlen(json), pad = (8 - hlen % 8) % 8, total;
	unsigned char *buf;
	uint64_t n = hlen + pad;
	int rc;

	total = 8 + n + dlen;
	buf = malloc(total);
	if (!buf)
		return -1;
	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(n >> (8 * i));
	memcpy(buf + 8, json, hlen);
	memset(buf + 8 + hlen, ' ', pad);
	for (size_t i = 0; i < dlen; i++)
		buf[8 + n + i] = (unsigned char)i;
	rc = tmpdir_write(dir, name, buf, total);
	free(buf);
	return rc;
}

void tmpdir_rm(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}
