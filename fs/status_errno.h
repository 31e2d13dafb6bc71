/*
 * status_errno.h - the one place a libunshard status becomes an errno: at
 * the FUSE boundary (ops.c) and in export's messages.  lib/ never speaks
 * errno (us_error.h); FUSE and strerror only do.
 */
#ifndef US_STATUS_ERRNO_H
#define US_STATUS_ERRNO_H

#include <errno.h>

#include "us_error.h"

/* A read fails only for I/O reasons (design.md: "then says EIO"), or for
 * want of memory; anything else on the read path is a bug, and EIO too. */
static inline int us_status_errno(enum us_status st)
{
	switch (st) {
	case US_OK:
		return 0;
	case US_E_NOMEM:
		return ENOMEM;
	default:
		return EIO;
	}
}

#endif /* US_STATUS_ERRNO_H */
