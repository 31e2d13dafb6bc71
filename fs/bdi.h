/*
 * bdi.h - raising the mount's read-ahead in sysfs.
 *
 * The kernel's 128 KiB read-ahead splits loaders' large sequential reads
 * into small FUSE requests; root can raise the mount's bdi read_ahead_kb
 * (/sys/class/bdi/MAJ:MIN/read_ahead_kb).  Others cannot, and nothing
 * happens for them (docs/benchmarks.md gives the command).
 */
#ifndef US_BDI_H
#define US_BDI_H

/*
 * us_raise_read_ahead - make the mount on @abs_mnt (absolute, as
 * /proc/self/mountinfo lists it) raise its bdi read_ahead_kb to @kb, when
 * lower, at the first open (us_bdi_apply says why then).  Call right after
 * fuse_session_mount(): it reads mountinfo, which needs no FUSE request.
 */
void us_raise_read_ahead(const char *abs_mnt, unsigned kb);

/*
 * us_bdi_apply - write the read-ahead found by us_raise_read_ahead, once
 * per process, whoever calls first (the open handler, before it replies).
 */
void us_bdi_apply(void);

#endif /* US_BDI_H */
