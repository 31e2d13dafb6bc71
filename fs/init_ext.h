/*
 * init_ext.h - INIT flags newer than the libfuse we build against.
 *
 * Debian 12's libfuse 3.14 answers the kernel's INIT with the capabilities
 * it knows, and FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6) is not
 * one of them.  Without it a file opened direct_io cannot be mapped shared
 * (safetensors' mmap fails with ENODEV), so every file had to go through
 * the FUSE page cache: each byte allocated and copied once more than a
 * plain read of the shards does.  With --direct-io=on this module routes
 * the session's device I/O through libfuse's custom-io hooks, sees the
 * kernel's INIT request, and adds the flag to the reply when the kernel
 * offered it; without, nothing here runs.
 */
#ifndef US_INIT_EXT_H
#define US_INIT_EXT_H

#include <stdbool.h>

#include "tree.h" /* FUSE_USE_VERSION, then fuse_lowlevel.h */

/*
 * us_init_ext_install - call after fuse_session_mount(), before the loop:
 * from then on @se reads and writes its device through the hooks (plain
 * read, writev and splice otherwise).  Returns 0, or -errno when libfuse
 * refused the hooks (the session then works as before, without the flag).
 */
int us_init_ext_install(struct fuse_session *se);

/* us_init_ext_offered - the kernel's INIT offered FUSE_DIRECT_IO_ALLOW_MMAP
 * (true from the init callback on, when the hooks are installed). */
bool us_init_ext_offered(void);

/*
 * us_init_ext_mmap_direct - true once the kernel has accepted
 * FUSE_DIRECT_IO_ALLOW_MMAP: files may be opened direct_io (read() served
 * straight into the reader's pages) and still be mapped shared.
 */
bool us_init_ext_mmap_direct(void);

#endif /* US_INIT_EXT_H */
