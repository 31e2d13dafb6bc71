/*
 * pipe.c - pipe-max-size, read once, and the request and reply sizes that
 * follow from it (pipe.h says why they matter).
 */
#include "pipe.h"

#include <pthread.h>
#include <stdio.h>

static size_t pipe_max = 1u << 20;
static pthread_once_t pipe_max_once = PTHREAD_ONCE_INIT;

static void pipe_max_read(void)
{
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
	unsigned long v;

	if (f && fscanf(f, "%lu", &v) == 1)
		pipe_max = v;
	if (f)
		fclose(f);
}

/* The pipe libfuse needs for @size bytes in @nsegs segments, and a page of
 * slack for the reply header. */
static size_t pipe_need(size_t size, size_t nsegs)
{
	return size + (nsegs + 3) * 4096;
}

bool us_fits_pipe(size_t size, size_t nsegs)
{
	pthread_once(&pipe_max_once, pipe_max_read);
	return pipe_need(size, nsegs) <= pipe_max;
}

unsigned us_max_read(void)
{
	size_t slack = pipe_need(0, US_SPLICE_SEGS), b = 128u << 10;

	pthread_once(&pipe_max_once, pipe_max_read);
	if (pipe_max > slack + b)
		b = pipe_max - slack;
	b -= b % 4096; /* whole pages */
	return b > (1u << 20) ? 1u << 20 : (unsigned)b;
}

unsigned us_read_ahead_kb(void)
{
	return US_READ_AHEAD_REQS * (us_max_read() / 1024);
}
