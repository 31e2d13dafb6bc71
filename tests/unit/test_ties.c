/*
 * test_ties.c - tie groups: declared by shared bytes, proven by comparison,
 * never for a near-tie (one byte different) or for constant tensors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "source/source.h"
#include "ties.h"
#include "tmpdir.h"

/* Five F32 [64,64] tensors: a and b equal, c = a with one byte flipped,
 * z1 and z2 all zeros; plus "alias" declared as a drop of a. */
#define N 4096
static const char *write_fixture(char *path, size_t len)
{
	static char json[1024];
	static float data[5][N];
	const char *d = tmpdir_new();
	unsigned char hdr[8], *file;
	size_t hlen, total;
	int n;

	for (int i = 0; i < N; i++)
		data[0][i] = data[1][i] = data[2][i] = (float)i * 0.5f;
	((unsigned char *)data[2])[N * 2] ^= 1;
	n = snprintf(json, sizeof(json),
		     "{\"__metadata__\":{\"format\":\"pt\",\"alias\":\"a\"},"
		     "\"a\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[0,%d]},"
		     "\"b\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[%d,%d]},"
		     "\"c\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[%d,%d]},"
		     "\"z1\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[%d,%d]},"
		     "\"z2\":{\"dtype\":\"F32\",\"shape\":[64,64],\"data_offsets\":[%d,%d]}}",
		     N * 4, N * 4, 2 * N * 4, 2 * N * 4, 3 * N * 4, 3 * N * 4,
		     4 * N * 4, 4 * N * 4, 5 * N * 4);
	while (n % 8)
		json[n++] = ' ';
	json[n] = '\0';
	hlen = (size_t)n;
	total = 8 + hlen + sizeof(data);
	file = malloc(total);
	for (int i = 0; i < 8; i++)
		hdr[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(file, hdr, 8);
	memcpy(file + 8, json, hlen);
	memcpy(file + 8 + hlen, data, sizeof(data));
	tmpdir_write(d, "m.safetensors", file, total);
	free(file);
	snprintf(path, len, "%s/m.safetensors", d);
	return d;
}

static const struct us_tensor *get(const struct us_statedict *sd, const char *n)
{
	return us_sd_find(sd, n);
}

static void test_declared_and_proven(void)
{
	char path[4200];
	const char *d = write_fixture(path, sizeof(path));
	struct us_source_opts o = { .ties = US_TIES_OFF };
	struct us_statedict *sd = NULL;
	struct us_err err = {0};
	int dirfd = -1;

	CHECK(us_source_open(path, &o, &sd, &dirfd, &err) == US_OK);
	if (!sd)
		goto out;
	CHECK(sd->ntensors == 6); /* the alias became a tensor */
	CHECK(get(sd, "alias")->tie_of == NULL); /* ties off */
	/* declared only: the alias shares a's bytes; b is a separate copy */
	CHECK(us_ties_detect(sd, US_TIES_DECLARED, false, &err) == US_OK);
	CHECK(get(sd, "alias")->tie_of == get(sd, "a"));
	CHECK(get(sd, "b")->tie_of == NULL);
	CHECK(get(sd, "a")->nlinks == 2);
	/* proven: as a DCP reader would ask for */
	for (size_t i = 0; i < sd->ntensors; i++) {
		sd->tensors[i].tie_of = NULL;
		sd->tensors[i].nlinks = 1;
	}
	sd->prove_ties = true;
	CHECK(us_ties_detect(sd, US_TIES_AUTO, false, &err) == US_OK);
	CHECK(get(sd, "b")->tie_of == get(sd, "a"));
	CHECK(get(sd, "alias")->tie_of == get(sd, "a"));
	CHECK(get(sd, "a")->tie_of == NULL && get(sd, "a")->nlinks == 3);
	CHECK(get(sd, "c")->tie_of == NULL && get(sd, "c")->nlinks == 1);
	CHECK(get(sd, "z1")->tie_of == NULL && get(sd, "z2")->tie_of == NULL);
out:
	us_sd_free(sd);
	tmpdir_rm(d);
}

static void test_mode_parse(void)
{
	enum us_ties_mode m;

	CHECK(us_ties_mode_parse("declared", &m) && m == US_TIES_DECLARED);
	CHECK(us_ties_mode_parse("off", &m) && m == US_TIES_OFF);
	CHECK(!us_ties_mode_parse("sometimes", &m));
}

int main(void)
{
	RUN(test_declared_and_proven);
	RUN(test_mode_parse);
	TEST_MAIN_END();
}
