/*
 * mountinfo.h - finding a mount in /proc/self/mountinfo (proc(5)).
 *
 * mountinfo is the one place that names a mount by its mount point together
 * with its device, its filesystem type and its superblock's options.  The
 * daemon needs the device of its own mount to reach its bdi in sysfs
 * (fs/bdi.c); the loader needs the type and the FUSE owner to decide whether
 * a path is the root of a live unshardfs mount it may trust
 * (loader/mount_root.c).
 */
#ifndef US_MOUNTINFO_H
#define US_MOUNTINFO_H

#include <limits.h>

/* One line of mountinfo, the fields someone here uses, unescaped. */
struct us_mountinfo {
	unsigned major, minor;   /* the st_dev of every file on the mount */
	char root[PATH_MAX];     /* the filesystem's directory mounted here
				  * ("/": all of it; else a bind mount) */
	char mnt[PATH_MAX];      /* the mount point, absolute */
	char fstype[64];         /* "ext4", "fuse.unshardfs" (FUSE: subtype) */
	long long user_id;       /* FUSE's user_id= superblock option: who
				  * mounted it; -1 when there is none */
};

/*
 * us_mountinfo_parse - @line (one line of mountinfo, its newline optional;
 * it is modified) into @m.  0, or -1 when it is not a mountinfo line or a
 * field does not fit @m.
 */
int us_mountinfo_parse(char *line, struct us_mountinfo *m);

/*
 * us_mountinfo_find - the entry of the mount on @abs_mnt (absolute, as
 * mountinfo lists it) in the mountinfo file @file (NULL: this process's,
 * /proc/self/mountinfo) into @m: the last one listed, the topmost, when
 * several are stacked.  0, or -1 when it is not listed or @file cannot be
 * read.
 */
int us_mountinfo_find(const char *file, const char *abs_mnt,
		      struct us_mountinfo *m);

/*
 * us_mountinfo_dev - the device (major:minor) of the mount on @abs_mnt (as
 * us_mountinfo_find).  0, or -1 when it is not listed or mountinfo cannot be
 * read.
 */
int us_mountinfo_dev(const char *abs_mnt, unsigned *maj, unsigned *min);

#endif /* US_MOUNTINFO_H */
