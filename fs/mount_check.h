/*
 * mount_check.h - why a mount cannot happen, found before SOURCE is read.
 *
 * Each check that fails prints one line "unshardfs: <path>: <what is
 * wrong> (<the remedy>)" and the mount exits 1: the mount point (missing,
 * not a directory, already mounted, or left stale by a daemon that was
 * killed), /dev/fuse this user may not open, and allow_other that
 * /etc/fuse.conf does not allow a user.  What only the kernel or
 * fusermount3 can tell is caught when mounting (capture.h).
 */
#ifndef US_MOUNT_CHECK_H
#define US_MOUNT_CHECK_H

#include <stdbool.h>

/* us_check_mountpoint - 0, or -1 after the one line. */
int us_check_mountpoint(const char *mnt);

/* us_check_fuse_access - may this process mount through /dev/fuse, with
 * @allow_other ("allow_other" or "allow_root", which a user may only ask
 * for by /etc/fuse.conf's leave) unless NULL?  0, or -1 after the line. */
int us_check_fuse_access(const char *allow_other);

/*
 * us_mount_remedy - what to do about a mount failure that libfuse or
 * fusermount3 described as @why (capture.h): " (...)" to append, or "".
 */
const char *us_mount_remedy(const char *why);

#endif /* US_MOUNT_CHECK_H */
