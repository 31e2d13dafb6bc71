/*
 * mount_check.c - the checks of mount_check.h, each with the remedy a user
 * can act on (the kernel's and fusermount3's own words name none).
 */
#include "mount_check.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define FUSE_DEV "/dev/fuse"
#define FUSE_CONF "/etc/fuse.conf"

/* Is @mnt the root of a mounted FUSE filesystem?  Mounting again there
 * would stack silently on a live mount. */
static bool is_fuse_mount(const char *mnt)
{
	struct statfs sf;
	struct stat st, up;
	char parent[PATH_MAX];

	if (statfs(mnt, &sf) < 0 || sf.f_type != 0x65735546 /* FUSE */)
		return false;
	if (snprintf(parent, sizeof(parent), "%s/..", mnt) >= (int)sizeof(parent) ||
	    stat(mnt, &st) < 0 || stat(parent, &up) < 0)
		return true; /* inside FUSE and cannot tell: still not ours to stack */
	return st.st_dev != up.st_dev || st.st_ino == up.st_ino;
}

/* Is @mnt a FUSE mount whose daemon is gone?  statfs always asks the
 * daemon, where stat may be answered from attributes the kernel cached. */
static bool is_stale(const char *mnt)
{
	struct statfs sf;
	struct stat st;

	return (stat(mnt, &st) < 0 && errno == ENOTCONN) ||
	       (statfs(mnt, &sf) < 0 && errno == ENOTCONN);
}

int us_check_mountpoint(const char *mnt)
{
	struct stat st;

	if (is_stale(mnt)) {
		/* the daemon of a mount there died (kill -9, a crash): the
		 * kernel keeps the dead mount until it is unmounted */
		fprintf(stderr, "unshardfs: %s: mountpoint is a stale FUSE "
			"mount (%s: its daemon is gone); fusermount3 -u %s "
			"clears it\n", mnt, strerror(ENOTCONN), mnt);
		return -1;
	}
	if (stat(mnt, &st) < 0) {
		fprintf(stderr, "unshardfs: %s: mountpoint: %s\n", mnt,
			strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "unshardfs: %s: mountpoint is not a directory\n",
			mnt);
		return -1;
	}
	if (is_fuse_mount(mnt)) {
		fprintf(stderr, "unshardfs: %s: mountpoint is busy: a FUSE "
			"filesystem is already mounted there (fusermount3 -u %s)\n",
			mnt, mnt);
		return -1;
	}
	return 0;
}

/* "crw-rw---- root:fuse", for the message: who may open the device. */
static void describe_dev(const struct stat *st, char *buf, size_t cap)
{
	struct group *g = getgrgid(st->st_gid);
	char gid[16];

	snprintf(gid, sizeof(gid), "%u", (unsigned)st->st_gid);
	snprintf(buf, cap, "mode %04o, group %s", (unsigned)(st->st_mode & 07777),
		 g ? g->gr_name : gid);
}

static int check_dev(void)
{
	struct stat st;
	char who[96];
	int e;

	if (access(FUSE_DEV, R_OK | W_OK) == 0)
		return 0;
	e = errno;
	if (e == ENOENT || stat(FUSE_DEV, &st) < 0) {
		fprintf(stderr, "unshardfs: %s: no FUSE device (load the fuse "
			"module: modprobe fuse; in a container, start it with "
			"--device %s)\n", FUSE_DEV, FUSE_DEV);
		return -1;
	}
	describe_dev(&st, who, sizeof(who));
	fprintf(stderr, "unshardfs: %s: %s: this user may not use FUSE (%s; "
		"add the user to the group that owns it, often 'fuse', and log "
		"in again, or have root make it read-write for all, as most "
		"systems ship it: chmod 0666 %s)\n", FUSE_DEV, strerror(e), who,
		FUSE_DEV);
	return -1;
}

/* Does /etc/fuse.conf have a line user_allow_other (fusermount3 reads it
 * so: the first word of a line, # starting a comment)? */
static bool conf_allows_other(void)
{
	FILE *f = fopen(FUSE_CONF, "r");
	char line[256];
	bool yes = false;

	if (!f)
		return false;
	while (!yes && fgets(line, sizeof(line), f)) {
		char word[32];

		yes = sscanf(line, " %31[^# \t\n]", word) == 1 &&
		      !strcmp(word, "user_allow_other");
	}
	fclose(f);
	return yes;
}

int us_check_fuse_access(const char *allow_other)
{
	if (check_dev() < 0)
		return -1;
	if (allow_other && geteuid() != 0 && !conf_allows_other()) {
		fprintf(stderr, "unshardfs: %s: -o %s is for root unless %s "
			"has the line user_allow_other (add it as root, or mount "
			"without %s)\n", FUSE_CONF, allow_other, FUSE_CONF,
			allow_other);
		return -1;
	}
	return 0;
}

/* The failures the checks above cannot see coming, by the words libfuse,
 * fusermount3 or the kernel use for them. */
const char *us_mount_remedy(const char *why)
{
	static const struct {
		const char *says, *remedy;
	} remedies[] = {
		{"user_allow_other", " (add the line user_allow_other to "
		 FUSE_CONF " as root, or mount without allow_other)"},
		{"Transport endpoint is not connected", " (a stale FUSE mount: "
		 "fusermount3 -u MOUNTPOINT clears it)"},
		{FUSE_DEV, " (this user needs read-write access to " FUSE_DEV
		 ": the group that owns it, often 'fuse')"},
		{"Operation not permitted", " (mounting needs root, or a "
		 "setuid-root fusermount3 on PATH; in a container, "
		 "CAP_SYS_ADMIN and --device " FUSE_DEV ")"},
		{"Device or resource busy", " (something is mounted there "
		 "already: fusermount3 -u MOUNTPOINT)"},
	};

	for (size_t i = 0; i < sizeof(remedies) / sizeof(*remedies); i++)
		if (strstr(why, remedies[i].says))
			return remedies[i].remedy;
	return "";
}
