/*
 * bdi.c - the one sysfs write of the daemon: the mount's read_ahead_kb.
 *
 * The kernel sets the bdi's read_ahead_kb from the FUSE_INIT reply (the
 * minimum of its 128 KiB default and ours), so it can only be raised after
 * INIT.  A file's window is taken from the bdi right after its FUSE_OPEN is
 * answered, so the first open raises it, before replying: deterministic for
 * every file opened.  The device is found at mount (lib/mountinfo.c).
 */
#include "bdi.h"

#include <pthread.h>
#include <stdio.h>

#include "mountinfo.h"

static char ra_path[64];
static unsigned ra_kb;
static pthread_once_t ra_once = PTHREAD_ONCE_INIT;

void us_raise_read_ahead(const char *abs_mnt, unsigned kb)
{
	unsigned maj, min;

	if (us_mountinfo_dev(abs_mnt, &maj, &min) < 0)
		return;
	snprintf(ra_path, sizeof(ra_path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 maj, min);
	ra_kb = kb;
}

static void ra_write(void)
{
	unsigned cur = 0;
	FILE *f;

	if (!ra_path[0])
		return;
	f = fopen(ra_path, "r+");
	if (!f)
		return; /* not root: docs/benchmarks.md gives the command */
	if (fscanf(f, "%u", &cur) == 1 && cur < ra_kb) {
		rewind(f);
		fprintf(f, "%u\n", ra_kb);
	}
	fclose(f);
}

void us_bdi_apply(void)
{
	pthread_once(&ra_once, ra_write);
}
