/* gather.c - the bounded pool of gather buffers (gather.h). */
#include "gather.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>

#include "../cpus.h"

struct us_gather_pool {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	struct us_gather *free; /* allocated, not in use */
	unsigned made, max;     /* allocated so far; the bound */
};

struct us_gather_pool *us_gather_pool_new(void)
{
	struct us_gather_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (pthread_mutex_init(&p->lock, NULL) != 0) {
		free(p);
		return NULL;
	}
	if (pthread_cond_init(&p->freed, NULL) != 0) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		return NULL;
	}
	p->max = us_online_cpus(2, 16);
	return p;
}

static void gather_free(struct us_gather *g)
{
	free(g->span);
	free(g->ops);
	free(g);
}

void us_gather_pool_free(struct us_gather_pool *p)
{
	if (!p)
		return;
	while (p->free) {
		struct us_gather *g = p->free;

		p->free = g->next;
		gather_free(g);
	}
	pthread_cond_destroy(&p->freed);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static struct us_gather *gather_alloc(void)
{
	struct us_gather *g = calloc(1, sizeof(*g));

	if (g) {
		g->span = malloc(US_GATHER_BUF);
		g->ops = malloc(US_GATHER_OPS * sizeof(*g->ops));
	}
	if (g && (!g->span || !g->ops)) {
		gather_free(g);
		g = NULL;
	}
	return g;
}

struct us_gather *us_gather_take(struct us_gather_pool *p)
{
	struct us_gather *g = NULL;

	pthread_mutex_lock(&p->lock);
	while (!p->free && p->made >= p->max)
		pthread_cond_wait(&p->freed, &p->lock);
	if (p->free) {
		g = p->free;
		p->free = g->next;
	} else {
		p->made++; /* reserved: allocate outside the lock */
	}
	pthread_mutex_unlock(&p->lock);
	if (g)
		return g;
	g = gather_alloc();
	if (!g) {
		pthread_mutex_lock(&p->lock);
		p->made--;
		pthread_cond_signal(&p->freed);
		pthread_mutex_unlock(&p->lock);
	}
	return g;
}

void us_gather_give(struct us_gather_pool *p, struct us_gather *g)
{
	if (!g)
		return;
	assert(g->n == 0); /* the reader flushed what it queued */
	pthread_mutex_lock(&p->lock);
	g->next = p->free;
	p->free = g;
	pthread_cond_signal(&p->freed);
	pthread_mutex_unlock(&p->lock);
}
