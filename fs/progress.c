/* progress.c - the export progress bar (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "1.5 GiB": at most 4 significant characters, binary units. */
static void human(char *buf, size_t cap, double bytes)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;

	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
}

static void draw(const struct us_progress *p, double t)
{
	double el = t - p->start, rate = el > 0 ? (double)p->done / el : 0;
	char done[32], total[32], speed[32], eta[32] = "--:--";
	int pct = p->total ? (int)(100.0 * (double)p->done / (double)p->total)
			   : 100;

	human(done, sizeof(done), (double)p->done);
	human(total, sizeof(total), (double)p->total);
	human(speed, sizeof(speed), rate);
	if (rate > 0) {
		unsigned long s = (unsigned long)((double)(p->total - p->done) / rate);

		snprintf(eta, sizeof(eta), "%lu:%02lu:%02lu", s / 3600,
			 s / 60 % 60, s % 60);
	}
	/* \033[K clears what a longer earlier line left behind. */
	fprintf(stderr, "\r%s / %s  %3d%%  %s/s  ETA %s\033[K", done, total,
		pct, speed, eta);
}

void us_progress_start(struct us_progress *p, bool on, uint64_t total)
{
	p->on = on;
	p->total = total;
	p->done = 0;
	p->start = p->last_draw = now();
}

void us_progress_add(struct us_progress *p, uint64_t n)
{
	double t;

	p->done += n;
	if (!p->on)
		return;
	t = now();
	if (t - p->last_draw < 0.25)
		return;
	p->last_draw = t;
	draw(p, t);
}

void us_progress_end(struct us_progress *p)
{
	if (!p->on)
		return;
	draw(p, now());
	fputc('\n', stderr);
}
