/* error.c - formatting of the one-line refusal messages. */
#include "us_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "redact.h"

/* A path longer than this is shown as its head, "...", and its tail (the
 * file name, what a user needs most), so that the reason still fits. */
#define PATH_SHOWN (US_ERR_MSG_MAX / 2)
#define PATH_HEAD 96

/* Format @fmt after the first @n bytes of @text, already written, then put
 * the whole line, redacted, into err->msg. */
__attribute__((format(printf, 4, 0)))
static void err_vformat(struct us_err *err, char *text, size_t n,
			const char *fmt, va_list ap)
{
	vsnprintf(text + n, US_ERR_MSG_MAX - n, fmt, ap);
	/* URLs may carry credentials (redact.h): never in a message. */
	us_redact(text, err->msg, sizeof(err->msg));
	/* Names come from hostile files: keep the message on one line. */
	for (char *p = err->msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* "<path>: " into @text (US_ERR_MSG_MAX bytes); its length. */
static size_t put_path(char *text, const char *path)
{
	size_t len = strlen(path);
	int n;

	if (len <= PATH_SHOWN)
		n = snprintf(text, US_ERR_MSG_MAX, "%s: ", path);
	else
		n = snprintf(text, US_ERR_MSG_MAX, "%.*s...%s: ", PATH_HEAD,
			     path, path + len - (PATH_SHOWN - PATH_HEAD - 3));
	return n < 0 ? 0 : (size_t)n;
}

enum us_status us_err_set(struct us_err *err, enum us_status status,
			  const char *path, const char *fmt, ...)
{
	char text[US_ERR_MSG_MAX];
	va_list ap;
	size_t n;

	if (!err)
		return status;
	err->status = status;
	n = put_path(text, path ? path : ".");
	va_start(ap, fmt);
	err_vformat(err, text, n, fmt, ap);
	va_end(ap);
	return status;
}

enum us_status us_err_reason(struct us_err *err, enum us_status status,
			     const char *fmt, ...)
{
	char text[US_ERR_MSG_MAX];
	va_list ap;

	if (!err)
		return status;
	err->status = status;
	va_start(ap, fmt);
	err_vformat(err, text, 0, fmt, ap);
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
