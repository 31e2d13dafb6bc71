/*
 * mount_root.c - which directories the loader believes about themselves
 * (mount_root.h).
 *
 * Trust model.  A mount root's user.unshardfs.* xattrs tell the loader what
 * to open instead of the path it was given: another SOURCE, with options
 * that may name a remote store's endpoint, where the user's signed requests
 * (and session token) would go.  But xattrs are data: tar --xattrs, rsync
 * -X, cp -a and shared folders carry them onto plain directories, and
 * anyone who can write a directory can set user.* ones.  So they are read
 * only from a directory that is provably the root of a live unshardfs mount
 * whose daemon runs as this user or as root -- someone who can already
 * read and write whatever this process can:
 *   - fstatfs says FUSE (FUSE_SUPER_MAGIC): a live FUSE mount, not a copy;
 *   - mountinfo lists a mount on exactly this directory (the kernel's path
 *     of the descriptor) whose type is fuse.unshardfs, whose root is the
 *     filesystem's root (not a bind of a subdirectory), and whose device is
 *     the directory's: the entry describes this very directory;
 *   - that mount's FUSE user_id= (the uid of the process that mounted it,
 *     which the kernel records and the daemon cannot choose) is ours or 0.
 * Everything else -- a plain directory with planted xattrs, a subdirectory
 * of a mount, another user's mount -- is an ordinary path whose xattrs are
 * ignored.  The check runs before anything is opened or contacted, and the
 * xattrs are then read through the same descriptor.  What is still trusted
 * is the daemon's answers; the loader verifies that the mount's SOURCE has
 * not changed since (loader.c's identity check).
 */
#include "mount_root.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "mountinfo.h"

#define US_FUSE_SUPER_MAGIC 0x65735546

/* A mount made by @uid: ours, or root's (root can read our files anyway). */
static bool owner_trusted(long long uid)
{
	return uid == 0 || uid == (long long)getuid();
}

/* The path the kernel gives @fd's directory, into @out (PATH_MAX bytes). */
static bool fd_path(int fd, char *out)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, out, PATH_MAX - 1);
	if (n <= 0 || n >= PATH_MAX - 1)
		return false;
	out[n] = '\0';
	return out[0] == '/'; /* not "(unreachable)/...": outside our root */
}

/* Is @fd's directory the root of a live unshardfs mount made by us or root? */
static bool is_trusted_root(int fd)
{
	struct us_mountinfo m;
	char at[PATH_MAX];
	struct statfs sf;
	struct stat st;

	if (fstatfs(fd, &sf) < 0 || sf.f_type != US_FUSE_SUPER_MAGIC)
		return false;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || !fd_path(fd, at))
		return false;
	if (us_mountinfo_find(NULL, at, &m) < 0)
		return false;
	return strcmp(m.fstype, US_MOUNT_FSTYPE) == 0 &&
	       strcmp(m.root, "/") == 0 &&
	       makedev(m.major, m.minor) == st.st_dev &&
	       owner_trusted(m.user_id);
}

int us_mount_root_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (is_trusted_root(fd))
		return fd;
	close(fd);
	return -1;
}
