/* exit_watch.c - poke the mount when a signal's exit went unnoticed. */
#include "exit_watch.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>

/* How often the flag is looked at, and how long the loop may take to end
 * on its own once it is set (it normally does within milliseconds). */
#define POLL_MS 200
#define GRACE_POLLS 5

struct us_exit_watch {
	struct fuse_session *se;
	char *mnt;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool done; /* the loop returned: leave the session alone */
};

static struct timespec in_ms(long ms)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* After a poll period: -1 once the loop is done, else whether the session
 * is told to exit (read under the lock, so never after loop_done). */
static int poll_exit(struct us_exit_watch *w)
{
	struct timespec t = in_ms(POLL_MS);
	int r;

	pthread_mutex_lock(&w->lock);
	if (!w->done)
		pthread_cond_timedwait(&w->cv, &w->lock, &t);
	r = w->done ? -1 : fuse_session_exited(w->se);
	pthread_mutex_unlock(&w->lock);
	return r;
}

static void *watch(void *arg)
{
	struct us_exit_watch *w = arg;
	struct statfs st;
	int r, seen = 0;

	while ((r = poll_exit(w)) >= 0) {
		if (r && ++seen > GRACE_POLLS) {
			/* Still looping: a request wakes a worker, which ends the
			 * loop.  If the loop ends anyway, the session's close
			 * answers this request (ENOTCONN). */
			statfs(w->mnt, &st);
			break;
		}
	}
	return NULL;
}

struct us_exit_watch *us_exit_watch_start(struct fuse_session *se,
					  const char *abs_mnt)
{
	struct us_exit_watch *w = calloc(1, sizeof(*w));
	sigset_t all, old;
	int rc;

	if (!w || !abs_mnt || !(w->mnt = strdup(abs_mnt))) {
		free(w);
		return NULL;
	}
	w->se = se;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cv, NULL);
	/* Signals stay with the main thread, as libfuse expects. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&w->thread, NULL, watch, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		pthread_cond_destroy(&w->cv);
		pthread_mutex_destroy(&w->lock);
		free(w->mnt);
		free(w);
		return NULL;
	}
	return w;
}

void us_exit_watch_loop_done(struct us_exit_watch *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->lock);
}

void us_exit_watch_stop(struct us_exit_watch *w)
{
	if (!w)
		return;
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->lock);
	free(w->mnt);
	free(w);
}
