/* error.c - formatting of the one-line refusal messages. */
#include "us_error.h"

#include <stdarg.h>
#include <stdio.h>

/* Format @fmt after the first @n bytes of err->msg, already written. */
__attribute__((format(printf, 3, 0)))
static void err_vformat(struct us_err *err, size_t n, const char *fmt, va_list ap)
{
	vsnprintf(err->msg + n, sizeof(err->msg) - n, fmt, ap);
	/* Names come from hostile files: keep the message on one line. */
	for (char *p = err->msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

enum us_status us_err_set(struct us_err *err, enum us_status status,
			  const char *path, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!err)
		return status;
	err->status = status;
	n = snprintf(err->msg, sizeof(err->msg), "%s: ", path ? path : ".");
	if (n < 0 || (size_t)n >= sizeof(err->msg))
		n = 0;
	va_start(ap, fmt);
	err_vformat(err, (size_t)n, fmt, ap);
	va_end(ap);
	return status;
}

enum us_status us_err_reason(struct us_err *err, enum us_status status,
			     const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return status;
	err->status = status;
	va_start(ap, fmt);
	err_vformat(err, 0, fmt, ap);
	va_end(ap);
	return status;
}

const char *us_status_str(enum us_status status)
{
	switch (status) {
	case US_OK: return "ok";
	case US_E_NOMEM: return "out of memory";
	case US_E_IO: return "I/O error";
	case US_E_FORMAT: return "malformed checkpoint";
	case US_E_UNSUPPORTED: return "unsupported checkpoint";
	case US_E_USAGE: return "usage error";
	}
	return "unknown error";
}
