/* ops.h - the FUSE low-level operations of a mount. */
#ifndef US_OPS_H
#define US_OPS_H

#include "tree.h"

/* Attribute and entry timeouts: the tree never changes while mounted. */
#define US_TIMEOUT 86400.0

extern const struct fuse_lowlevel_ops us_fuse_ops;

#endif /* US_OPS_H */
