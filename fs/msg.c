/* msg.c - messages on stderr, or in syslog once daemonized (msg.h). */
#define FUSE_USE_VERSION 312
#include "msg.h"

#include <fuse_log.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <syslog.h>

static bool use_syslog;

/* fuse_log_level values are syslog's priorities, LOG_EMERG..LOG_DEBUG. */
static void fuse_to_syslog(enum fuse_log_level level, const char *fmt,
			   va_list ap)
{
	vsyslog((int)level, fmt, ap);
}

void us_msg_use_syslog(void)
{
	openlog("unshardfs", LOG_PID, LOG_DAEMON);
	fuse_set_log_func(fuse_to_syslog);
	use_syslog = true;
}

void us_msg(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (use_syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		fputs("unshardfs: ", stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	}
	va_end(ap);
}
