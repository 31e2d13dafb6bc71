/*
 * fuzz_index.c - libFuzzer target: the input is a model.safetensors.index.json
 * beside two small valid shards.  Paths that climb out must be refused; a
 * mount that is accepted must read back cleanly.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/source.h"

static char dir[256];

static void put(const char *name, const void *data, size_t len)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		abort();
	close(fd);
}

static void setup(void)
{
	static const char s1[] = "\x40\0\0\0\0\0\0\0{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}      "
				 "\x01\x02\x03\x04\x05\x06\x07\x08";
	static const char s2[] = "\x40\0\0\0\0\0\0\0{\"b\":{\"dtype\":\"U8\",\"shape\":[3,1],\"data_offsets\":[0,3]}}     "
				 "\x01\x02\x03";

	snprintf(dir, sizeof(dir), "%s/us-fuzz-index-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		abort();
	put("s1.safetensors", s1, sizeof(s1) - 1);
	put("s2.safetensors", s2, sizeof(s2) - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_statedict *sd = NULL;
	struct us_err err;
	struct us_dir srcdir = US_DIR_NONE;

	if (!dir[0])
		setup();
	put("model.safetensors.index.json", data, size);
	if (us_source_open(dir, NULL, &sd, &srcdir, &err) == US_OK) {
		for (size_t i = 0; i < sd->nfiles; i++)
			if (strstr(sd->files[i].relpath, ".."))
				abort(); /* a path outside SOURCE was opened */
		us_sd_free(sd);
		us_dir_close(&srcdir);
	}
	return 0;
}
