/*
 * exit_watch.h - make sure a signal ends the FUSE loop.
 *
 * libfuse 3.14's signal handler only sets the session's exit flag; the
 * main thread of fuse_session_loop_mt notices it when the signal interrupts
 * its sem_wait.  A signal handled just after the main thread checked the
 * flag and before it blocked is lost: the loop then waits for the next
 * FUSE request, forever on an idle mount (a likely cause of a daemon seen
 * once still there 15 s after SIGINT, on a loaded machine).  A watcher
 * thread that finds the flag set and the loop still running a while later
 * sends the mount one request (statfs); the worker that answers it ends
 * the loop.
 */
#ifndef US_EXIT_WATCH_H
#define US_EXIT_WATCH_H

#include "tree.h" /* FUSE_USE_VERSION, then fuse_lowlevel.h */

struct us_exit_watch;

/* us_exit_watch_start - watch @se, mounted on @abs_mnt (copied), from a
 * new thread (after fuse_daemonize: a fork keeps no threads); NULL if none
 * could be started: the loop then runs unwatched. */
struct us_exit_watch *us_exit_watch_start(struct fuse_session *se,
					  const char *abs_mnt);

/* us_exit_watch_loop_done - the loop returned: from now on the watcher
 * neither looks at the session nor sends a request.  Call it before the
 * session is unmounted or destroyed. */
void us_exit_watch_loop_done(struct us_exit_watch *w);

/* us_exit_watch_stop - join and free the watcher (NULL is fine); after
 * fuse_session_destroy, which ends a request the watcher may have sent. */
void us_exit_watch_stop(struct us_exit_watch *w);

#endif /* US_EXIT_WATCH_H */
