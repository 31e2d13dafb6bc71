/*
 * mount_root.h - is a path the root of a live unshardfs mount that this
 * process may believe?  (The trust model: mount_root.c, docs/loader.md.)
 */
#ifndef US_LOADER_MOUNT_ROOT_H
#define US_LOADER_MOUNT_ROOT_H

/* The filesystem type mountinfo lists for the daemon's mounts: FUSE's
 * "fuse." and the subtype fs/main.c mounts with. */
#define US_MOUNT_FSTYPE "fuse.unshardfs"

/*
 * us_mount_root_open - a descriptor (O_RDONLY | O_DIRECTORY, close-on-exec)
 * of @path when @path is the root of a live unshardfs mount made by this
 * user or by root; -1 for anything else, an ordinary file or directory
 * included (the caller treats @path as a SOURCE, and says what is wrong
 * with it when it cannot be opened).  Read the mount's xattrs through the
 * descriptor: the directory checked is the one read.
 */
int us_mount_root_open(const char *path);

#endif /* US_LOADER_MOUNT_ROOT_H */
