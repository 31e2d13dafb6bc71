/*
 * msg.h - where the daemon's messages go.
 *
 * Until the mount daemonizes, every message is one line on stderr
 * ("unshardfs: ..."), as design.md's refusal contract wants.  A daemonized
 * mount has no stderr (fuse_daemonize points it at /dev/null), so from then
 * on messages, libfuse's own included, go to syslog as
 * openlog("unshardfs", LOG_PID, LOG_DAEMON).
 */
#ifndef US_MSG_H
#define US_MSG_H

/* us_msg_use_syslog - send every later message to syslog. */
void us_msg_use_syslog(void);

/* us_msg - one message at syslog priority @prio (LOG_ERR, LOG_INFO, ...). */
__attribute__((format(printf, 2, 3)))
void us_msg(int prio, const char *fmt, ...);

#endif /* US_MSG_H */
