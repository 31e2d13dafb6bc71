/* test_mountinfo.c - lib/mountinfo.c: fields, escapes, FUSE's user_id, and
 * the topmost of stacked mounts. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mountinfo.h"
#include "tmpdir.h"

static void test_parse_fuse_line(void)
{
	char line[] = "45 27 0:40 / /tmp/m\\0401 ro,nosuid,relatime shared:1 "
		      "master:2 - fuse.unshardfs /src ro,user_id=1000,"
		      "group_id=1000,default_permissions\n";
	struct us_mountinfo m;

	CHECK(us_mountinfo_parse(line, &m) == 0);
	CHECK(m.major == 0 && m.minor == 40);
	CHECK(strcmp(m.root, "/") == 0);
	CHECK(strcmp(m.mnt, "/tmp/m 1") == 0);
	CHECK(strcmp(m.fstype, "fuse.unshardfs") == 0);
	CHECK(m.user_id == 1000);
}

static void test_parse_other_lines(void)
{
	char ext4[] = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw,errors=remount-ro";
	char bind[] = "50 22 8:1 /srv/x /mnt/x rw - ext4 /dev/sda1 rw";
	char bad_uid[] = "51 22 0:41 / /mnt/f rw - fuse.unshardfs s ro,user_id=-3";
	char junk[] = "not a mountinfo line";
	char no_dash[] = "1 2 3:4 / /x rw shared:1";
	struct us_mountinfo m;

	CHECK(us_mountinfo_parse(ext4, &m) == 0);
	CHECK(strcmp(m.fstype, "ext4") == 0 && m.user_id == -1);
	CHECK(us_mountinfo_parse(bind, &m) == 0);
	CHECK(strcmp(m.root, "/srv/x") == 0 && strcmp(m.mnt, "/mnt/x") == 0);
	CHECK(us_mountinfo_parse(bad_uid, &m) == 0 && m.user_id == -1);
	CHECK(us_mountinfo_parse(junk, &m) == -1);
	CHECK(us_mountinfo_parse(no_dash, &m) == -1);
}

static void test_find_topmost(void)
{
	const char *dir = tmpdir_new();
	static const char text[] =
		"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
		"30 22 0:40 / /mnt rw - fuse.unshardfs a ro,user_id=0\n"
		"31 30 0:41 / /mnt rw - fuse.other b ro,user_id=7\n";
	char path[4096];
	struct us_mountinfo m;

	CHECK(tmpdir_write(dir, "mountinfo", text, sizeof(text) - 1) == 0);
	snprintf(path, sizeof(path), "%s/mountinfo", dir);
	CHECK(us_mountinfo_find(path, "/mnt", &m) == 0);
	CHECK(m.minor == 41 && strcmp(m.fstype, "fuse.other") == 0 &&
	      m.user_id == 7);
	CHECK(us_mountinfo_find(path, "/nowhere", &m) == -1);
	CHECK(us_mountinfo_find("/nonexistent/mountinfo", "/", &m) == -1);
	tmpdir_rm(dir);
}

int main(void)
{
	RUN(test_parse_fuse_line);
	RUN(test_parse_other_lines);
	RUN(test_find_topmost);
	TEST_MAIN_END();
}
