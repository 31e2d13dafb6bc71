/* tbuf.c - the reply buffers' bounded pool (tbuf.h). */
#include "tbuf.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpus.h"

#define MAX_BUFS 16u

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct us_rbuf *free; /* most recently given back first */
	unsigned live, max;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0 };

void us_rbuf_limit(unsigned max)
{
	pthread_mutex_lock(&pool.mu);
	pool.max = max > MAX_BUFS ? MAX_BUFS : max; /* 0: take_any's default */
	pthread_mutex_unlock(&pool.mu);
}

/* A free buffer, or a new one while under the limit, or wait for one. */
static struct us_rbuf *take_any(void)
{
	struct us_rbuf *b = NULL;

	pthread_mutex_lock(&pool.mu);
	if (!pool.max) /* the default: one per online CPU */
		pool.max = us_online_cpus(2, MAX_BUFS);
	while (!pool.free && pool.live >= pool.max)
		pthread_cond_wait(&pool.cv, &pool.mu);
	if (pool.free) {
		b = pool.free;
		pool.free = b->next;
	} else if ((b = calloc(1, sizeof(*b))) != NULL) {
		pool.live++;
	}
	pthread_mutex_unlock(&pool.mu);
	return b;
}

struct us_rbuf *us_rbuf_take(size_t size)
{
	struct us_rbuf *b = take_any();

	if (!b)
		return NULL;
	if (size > b->cap || !b->p) {
		char *p = realloc(b->p, size ? size : 1);

		if (!p) {
			us_rbuf_give(b);
			return NULL;
		}
		b->p = p;
		b->cap = size;
	}
	return b;
}

void us_rbuf_give(struct us_rbuf *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&pool.mu);
	assert(pool.live > 0);
	b->next = pool.free;
	pool.free = b;
	pthread_cond_signal(&pool.cv);
	pthread_mutex_unlock(&pool.mu);
}
