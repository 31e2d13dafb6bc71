/*
 * test_model.c - us_sd_check (debug builds) finds each invariant broken
 * behind finalize's back, and none in a state dict finalize accepted.
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "file_fd.h"
#include "harness.h"
#include "model.h"
#include "tmpdir.h"

#ifndef NDEBUG
/* A 64-byte file and a finalized state dict: "a" (4x4 u8) in two row
 * halves at bytes 0 and 8, "b" (2 x f32) at byte 16. */
static struct us_statedict *make(const char *dir)
{
	static const uint64_t sa[2] = { 4, 4 }, sb[1] = { 2 };
	unsigned char bytes[64] = {0};
	struct us_statedict *sd = us_sd_new();
	struct us_tensor *t;
	struct us_err err = {0};
	uint32_t f = 0;
	int dfd;

	CHECK(tmpdir_write(dir, "x.bin", bytes, sizeof(bytes)) == 0);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(us_sd_open_file(sd, US_TEST_DIR(dfd), "x.bin", &f, &err) == US_OK);
	close(dfd);
	t = us_sd_add_tensor(sd, "a", US_DT_U8, 2, sa, 2, "x.bin", &err);
	for (uint32_t i = 0; t && i < 2; i++) {
		((uint64_t *)t->chunks[i].offsets)[0] = 2 * i;
		((uint64_t *)t->chunks[i].sizes)[0] = 2;
		((uint64_t *)t->chunks[i].sizes)[1] = 4;
		t->chunks[i].src.file = f;
		t->chunks[i].src.offset = 8 * i;
	}
	CHECK(us_sd_add_whole_tensor(sd, "b", US_DT_F32, 1, sb, f, 16, &err));
	CHECK(us_sd_finalize(sd, &err) == US_OK);
	CHECK(us_sd_check(sd) == NULL);
	return sd;
}

static void expect_broken(struct us_statedict *sd, const char *what)
{
	const char *bad = us_sd_check(sd);

	CHECK(bad != NULL);
	if (!bad)
		fprintf(stderr, "  not caught: %s\n", what);
	us_sd_free(sd);
}

static void test_check(void)
{
	const char *d = tmpdir_new();
	char dir[4096];
	struct us_statedict *sd;
	struct us_tensor *a;

	snprintf(dir, sizeof(dir), "%s", d);
	/* Rows 1 and 3 swapped for an overlap: volumes still sum to numel. */
	sd = make(dir);
	((uint64_t *)sd->tensors[0].chunks[1].offsets)[0] = 1;
	expect_broken(sd, "overlap and gap of equal volume");
	sd = make(dir);
	((uint64_t *)sd->tensors[0].chunks[1].offsets)[1] = 1;
	expect_broken(sd, "box outside the tensor");
	sd = make(dir);
	sd->tensors[0].chunks[1].src.offset = 57;
	expect_broken(sd, "extent past the end of the file");
	sd = make(dir);
	a = &sd->tensors[0];
	a->chunks[0].src.strides = (const int64_t[]){ 4, (int64_t)1 << 62 };
	expect_broken(sd, "strides whose span overflows");
	sd = make(dir);
	sd->tensors[1].nbytes = 4;
	expect_broken(sd, "nbytes not matching shape and dtype");
	sd = make(dir);
	sd->tensors[0].name = "c";
	expect_broken(sd, "names out of order");
	sd = make(dir);
	sd->tensors[1].tie_of = &sd->tensors[0];
	sd->tensors[0].nlinks = sd->tensors[1].nlinks = 2;
	expect_broken(sd, "a tie between different shapes");
	sd = make(dir);
	sd->tensors[0].chunks[0].src.file = 7;
	expect_broken(sd, "an extent of no file");
	tmpdir_rm(dir);
}
#endif

int main(void)
{
#ifndef NDEBUG
	RUN(test_check);
#endif
	TEST_MAIN_END();
}
