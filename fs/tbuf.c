/* tbuf.c - per-thread reply buffers (tbuf.h). */
#include "tbuf.h"

#include <pthread.h>
#include <stdlib.h>

struct thread_buf {
	char *p;
	size_t cap;
};

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;

static void tbuf_free(void *v)
{
	struct thread_buf *b = v;

	free(b->p);
	free(b);
}

static void tbuf_key_init(void)
{
	if (pthread_key_create(&tbuf_key, tbuf_free) != 0)
		abort(); /* only EAGAIN/ENOMEM at start-up: nothing to serve */
}

static struct thread_buf *tbuf_get(void)
{
	struct thread_buf *b;

	pthread_once(&tbuf_once, tbuf_key_init);
	b = pthread_getspecific(tbuf_key);
	if (b)
		return b;
	b = calloc(1, sizeof(*b));
	if (!b || pthread_setspecific(tbuf_key, b) != 0) {
		free(b);
		return NULL;
	}
	return b;
}

char *us_thread_buf(size_t size)
{
	struct thread_buf *b = tbuf_get();

	if (!b)
		return NULL;
	if (size > b->cap) {
		char *p = realloc(b->p, size);

		if (!p)
			return NULL;
		b->p = p;
		b->cap = size;
	}
	return b->p ? b->p : (b->p = malloc(1));
}
