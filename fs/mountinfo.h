/*
 * mountinfo.h - finding a mount in /proc/self/mountinfo.
 *
 * The daemon needs the device number of its own mount to reach its bdi in
 * sysfs (bdi.c); mountinfo is the one place that names it by mount point.
 */
#ifndef US_MOUNTINFO_H
#define US_MOUNTINFO_H

/*
 * us_mountinfo_dev - the device (major:minor) of the mount on @abs_mnt
 * (absolute, as mountinfo lists it; the last, topmost, one when several are
 * stacked).  0, or -1 when it is not listed or mountinfo cannot be read.
 */
int us_mountinfo_dev(const char *abs_mnt, unsigned *maj, unsigned *min);

#endif /* US_MOUNTINFO_H */
