/*
 * us_error.h - the one status enum of libunshard, and the message that
 * travels with it.
 *
 * Every fallible function returns an enum us_status (0 on success, a negative
 * value otherwise) and, when the caller passed a struct us_err, fills it with
 * one line "<path>: <what is wrong>" where <path> is relative to SOURCE.
 * The daemon prints it as "unshardfs: <line>" (design.md, Interface contract).
 */
#ifndef US_ERROR_H
#define US_ERROR_H

#include <stddef.h>

enum us_status {
	US_OK = 0,
	US_E_NOMEM = -1,       /* out of memory */
	US_E_IO = -2,          /* a source file could not be read */
	US_E_FORMAT = -3,      /* the checkpoint is malformed: refuse it */
	US_E_UNSUPPORTED = -4, /* well-formed, but not something we can serve */
	US_E_USAGE = -5,       /* the caller asked for something meaningless */
};

#define US_ERR_MSG_MAX 1024

struct us_err {
	enum us_status status;
	char msg[US_ERR_MSG_MAX];
};

/*
 * us_err_set - record a failure and return @status, so that callers can write
 * "return us_err_set(err, US_E_FORMAT, path, "...", ...);".  @err may be NULL.
 * Control characters in the result are replaced so the message stays one line.
 */
enum us_status us_err_set(struct us_err *err, enum us_status status,
			  const char *path, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * us_err_reason - record a failure whose message is a bare reason, with no
 * "<path>: " in front: the codecs (lib/codec) parse bytes and do not know
 * which file they came from.  The reader that called one adds the path and
 * keeps the kind: us_err_set(err, r.status, path, "header %s", r.msg).
 * Returns @status; @err may be NULL.
 */
enum us_status us_err_reason(struct us_err *err, enum us_status status,
			     const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* us_status_str - a short word for @status ("malformed", "I/O error", ...). */
const char *us_status_str(enum us_status status);

/* Propagate a failure: evaluate @expr once, return it if it is not US_OK. */
#define US_TRY(expr)                                  \
	do {                                          \
		enum us_status us_try_rc_ = (expr);   \
		if (us_try_rc_ != US_OK)              \
			return us_try_rc_;            \
	} while (0)

#endif /* US_ERROR_H */
