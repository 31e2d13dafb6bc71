/* msg.c - messages on stderr, or in syslog once daemonized (msg.h). */
#define FUSE_USE_VERSION 312
#include "msg.h"

#include <fuse_log.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <syslog.h>

#include "redact.h"

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
	char text[2048], shown[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	/* A SOURCE URL may carry credentials: the log is for everyone. */
	us_redact(text, shown, sizeof(shown));
	if (use_syslog)
		syslog(prio, "%s", shown);
	else
		fprintf(stderr, "unshardfs: %s\n", shown);
}
