/*
 * us-remote - the remote-storage client (lib/storage/remote.h) from the
 * command line, for tests and debugging:
 *
 *   us-remote [OPTIONS] ls URL               "key size etag" per object
 *   us-remote [OPTIONS] cat URL KEY [OFF LEN] the bytes, to stdout
 *
 * OPTIONS: --endpoint-url=U --region=R --profile=P --addressing=auto|path|
 * virtual --no-sign-request --block-size=N --cache-bytes=N --cache-dir=D
 * --cache-dir-size=N --connections=N --retries=N --timeout=S --chunk=N
 * (cat's read size; default 1 MiB) --threads=N (cat reads chunks from N
 * threads at once), --pause (after open, say "opened" on stderr and wait
 * for a line on stdin: a test changes the store meanwhile), --fork (after
 * open, go on in a child, as the daemon does after fuse_daemonize; says on
 * stderr if open left threads running, which a fork would lose).  The counters (us_remote_stats) go to stderr at exit.
 * Exit: 0 done, 1 usage, 2 the store refused or failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage/remote.h"

struct cli {
	struct us_remote_opts o;
	size_t chunk;
	unsigned threads;
	bool pause;
	bool fork;
};

static int usage(void)
{
	fprintf(stderr, "usage: us-remote [OPTIONS] ls URL\n"
			"       us-remote [OPTIONS] cat URL KEY [OFF LEN]\n");
	return 1;
}

static bool num(const char *s, uint64_t *v)
{
	char *e;

	errno = 0;
	unsigned long long x = strtoull(s, &e, 10);
	if (errno || e == s || *e || *s == '-')
		return false;
	*v = x;
	return true;
}

/* One option "--name=value" into @c; false when unknown or malformed. */
static bool option(struct cli *c, const char *a)
{
	const char *eq = strchr(a, '=');
	const char *v = eq ? eq + 1 : NULL;
	size_t n = eq ? (size_t)(eq - a) : strlen(a);
	uint64_t x = 0;

#define IS(name) (n == strlen(name) && strncmp(a, name, n) == 0)
	if (IS("--no-sign-request") && !v)
		return c->o.no_sign = true;
	if (IS("--pause") && !v)
		return c->pause = true;
	if (IS("--fork") && !v)
		return c->fork = true;
	if (!v)
		return false;
	if (IS("--endpoint-url"))
		return c->o.endpoint_url = v, true;
	if (IS("--region"))
		return c->o.region = v, true;
	if (IS("--profile"))
		return c->o.profile = v, true;
	if (IS("--cache-dir"))
		return c->o.cache_dir = v, true;
	if (IS("--addressing")) {
		if (strcmp(v, "path") == 0)
			c->o.addressing = US_ADDR_PATH;
		else if (strcmp(v, "virtual") == 0)
			c->o.addressing = US_ADDR_VIRTUAL;
		else if (strcmp(v, "auto") == 0)
			c->o.addressing = US_ADDR_AUTO;
		else
			return false;
		return true;
	}
	if (!num(v, &x))
		return false;
	if (IS("--block-size"))
		return c->o.block_size = x, true;
	if (IS("--cache-bytes"))
		return c->o.cache_bytes = x, true;
	if (IS("--cache-dir-size"))
		return c->o.cache_dir_size = x, true;
	if (IS("--connections"))
		return c->o.connections = (unsigned)x, true;
	if (IS("--retries"))
		return c->o.retries = (unsigned)x, true;
	if (IS("--timeout"))
		return c->o.timeout_s = (unsigned)x, true;
	if (IS("--chunk"))
		return x > 0 && x <= (64u << 20) && (c->chunk = (size_t)x, true);
	if (IS("--threads"))
		return x > 0 && x <= 64 && (c->threads = (unsigned)x, true);
#undef IS
	return false;
}

static void print_stats(const struct us_remote *r)
{
	struct us_remote_stats s;

	us_remote_get_stats(r, &s);
	fprintf(stderr,
		"stats: requests=%" PRIu64 " retries=%" PRIu64
		" bytes_fetched=%" PRIu64 " bytes_read=%" PRIu64
		" disk_hits=%" PRIu64 "\n",
		s.requests, s.retries, s.bytes_fetched, s.bytes_read,
		s.disk_hits);
}

/* The threads of this process (/proc/self/task), or -1. */
static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Go on in a child, as fuse_daemonize does; the parent returns its status
 * (true: we are the child). */
static bool fork_like_daemon(int *status)
{
	int n = count_threads(), st = 0;
	pid_t pid;

	if (n != 1)
		fprintf(stderr, "us-remote: %d threads at fork\n", n);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		return true;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		*status = 2;
	else
		*status = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
	return false;
}

static int do_ls(struct us_remote *r)
{
	for (size_t i = 0; i < us_remote_count(r); i++) {
		const struct us_remote_object *o = us_remote_at(r, i);
		printf("%s %" PRIu64 " %s\n", o->key, o->size, o->etag);
	}
	return 0;
}

/* cat with threads: each reads chunks i, i+T, ... into its slot of a
 * shared buffer of T chunks per round, written in order. */
struct round {
	struct us_remote *r;
	const struct us_remote_object *o;
	char *buf;
	size_t chunk;
	uint64_t off, end;
	unsigned i, n;
	int rc;
};

static void *reader(void *arg)
{
	struct round *w = arg;
	uint64_t at = w->off + (uint64_t)w->i * w->chunk;

	w->rc = 0;
	if (at >= w->end)
		return NULL;
	size_t len = (size_t)(w->end - at < w->chunk ? w->end - at : w->chunk);
	if (us_remote_read(w->r, w->o, w->buf + (size_t)w->i * w->chunk, len,
			   at) != 0)
		w->rc = -1;
	return NULL;
}

static int do_cat(struct us_remote *r, const struct us_remote_object *o,
		  uint64_t off, uint64_t len, const struct cli *c)
{
	unsigned t = c->threads ? c->threads : 1;
	char *buf = malloc(c->chunk * t);
	struct round w[64];
	pthread_t th[64];
	bool started[64];
	uint64_t end = off + len;
	int rc = 0;

	if (!buf || end < off)
		return 2;
	while (off < end && rc == 0) {
		for (unsigned i = 0; i < t; i++) {
			w[i] = (struct round){ r, o, buf, c->chunk, off, end, i,
					       t, 0 };
			started[i] = pthread_create(&th[i], NULL, reader,
						    &w[i]) == 0;
			if (!started[i])
				reader(&w[i]);
		}
		for (unsigned i = 0; i < t; i++) {
			if (started[i])
				pthread_join(th[i], NULL);
			if (w[i].rc)
				rc = 2;
		}
		uint64_t n = end - off < (uint64_t)c->chunk * t
				     ? end - off : (uint64_t)c->chunk * t;
		if (rc == 0 && fwrite(buf, 1, (size_t)n, stdout) != n)
			rc = 2;
		off += n;
	}
	if (rc) {
		char why[512];
		us_remote_last_error(r, why, sizeof(why));
		fprintf(stderr, "us-remote: %s: read failed at or after %" PRIu64
				": %s (%s)\n", o->key, off, strerror(EIO),
			why[0] ? why : "past the end");
	}
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	struct cli c = { .chunk = 1u << 20 };
	struct us_err err = { 0 };
	struct us_remote *r = NULL;
	int i = 1, rc;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++)
		if (!option(&c, argv[i])) {
			fprintf(stderr, "us-remote: bad option %s\n", argv[i]);
			return usage();
		}
	if (argc - i < 2)
		return usage();
	const char *cmd = argv[i], *url = argv[i + 1];
	bool ls = strcmp(cmd, "ls") == 0;
	if (!ls && !(strcmp(cmd, "cat") == 0 &&
		     (argc - i == 3 || argc - i == 5)))
		return usage();
	if (!ls && argc - i != 3 && argc - i != 5)
		return usage();
	if (us_remote_open(url, &c.o, &r, &err) != 0) {
		fprintf(stderr, "us-remote: %s\n", err.msg);
		return err.status == US_E_USAGE ? 1 : 2;
	}
	if (c.fork && !fork_like_daemon(&rc)) {
		us_remote_free(r);
		return rc;
	}
	if (c.pause) {
		char line[16];
		fprintf(stderr, "opened\n");
		if (!fgets(line, sizeof(line), stdin))
			line[0] = '\0';
	}
	if (ls) {
		rc = do_ls(r);
	} else {
		const struct us_remote_object *o = us_remote_find(r, argv[i + 2]);
		uint64_t off = 0, len = o ? o->size : 0;
		if (argc - i == 5 && (!num(argv[i + 3], &off) ||
				      !num(argv[i + 4], &len))) {
			us_remote_free(r);
			return usage();
		}
		if (!o) {
			fprintf(stderr, "us-remote: %s: no such key in %s\n",
				argv[i + 2], us_remote_url(r));
			rc = 2;
		} else {
			rc = do_cat(r, o, off, len, &c);
		}
	}
	fflush(stdout);
	print_stats(r);
	us_remote_free(r);
	return rc;
}
