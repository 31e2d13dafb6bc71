/*
 * export.c - writing views to disk (export.h).
 *
 * One piece at a time: read EXPORT_PIECE bytes of the view into one buffer,
 * write them out, repeat.  4 MiB is large enough that a contiguous tensor
 * run is one pread and one write, and small enough to be the whole of the
 * memory export adds to --cache-size.
 */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "msg.h"
#include "progress.h"
#include "source/source.h" /* us_dirlist */
#include "status_errno.h"

#define EXPORT_PIECE (4u << 20)
#define EXIT_USAGE 1
#define EXIT_FAILED 2

struct out_file {
	const struct us_view *v;
	char *path;  /* the final name; NULL for stdout */
	char *tmp;   /* "<path>.tmp.<pid>" while it is being written */
	int fd;
	bool direct; /* OUT is a device or a FIFO: written in place */
};

static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
}

/* SIGINT, SIGTERM, SIGHUP set @caught: the write loop stops at the next
 * piece and the temporaries are removed before the signal is re-raised. */
static void catch_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

static void die_of_caught_signal(void)
{
	if (!caught)
		return;
	signal(caught, SIG_DFL);
	raise(caught);
}

static char *join(const char *a, const char *sep, const char *b)
{
	size_t n = strlen(a) + strlen(sep) + strlen(b) + 1;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s%s%s", a, sep, b);
	return p;
}

static void files_free(struct out_file *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (f[i].fd >= 0 && (f[i].path || f[i].direct))
			close(f[i].fd);
		if (f[i].tmp)
			unlink(f[i].tmp); /* still there only when not renamed */
		free(f[i].path);
		free(f[i].tmp);
	}
	free(f);
}

/* Is OUT a directory the views go into?  Made when sharding asks for one. */
static int out_is_dir(const struct us_opts *o, bool *dir)
{
	struct stat st;

	if (stat(o->out, &st) == 0) {
		*dir = S_ISDIR(st.st_mode);
		if (o->max_shard_size && !*dir) {
			us_msg(LOG_ERR, "%s: --max-shard-size writes several "
			       "files: OUT must be a directory", o->out);
			return EXIT_USAGE;
		}
		return 0;
	}
	/* "new/" names a directory to make, as for several files */
	*dir = o->max_shard_size != 0 || o->out[strlen(o->out) - 1] == '/';
	if (*dir && mkdir(o->out, 0777) < 0) {
		us_msg(LOG_ERR, "%s: %s", o->out, strerror(errno));
		return EXIT_FAILED;
	}
	return 0;
}

static int open_tmp(struct out_file *f)
{
	char pid[32];

	snprintf(pid, sizeof(pid), ".tmp.%ld", (long)getpid());
	f->tmp = join(f->path, "", pid);
	if (!f->tmp) {
		us_msg(LOG_ERR, "%s: out of memory", f->path);
		return EXIT_FAILED;
	}
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (f->fd < 0) {
		us_msg(LOG_ERR, "%s: %s", f->path, strerror(errno));
		free(f->tmp);
		f->tmp = NULL;
		return EXIT_FAILED;
	}
	return 0;
}

/*
 * OUT a file: an existing device or FIFO (/dev/null, a pipe) is written in
 * place -- replacing it by a rename would put a regular file where the
 * device was; a symlink's target is what gets replaced, not the link.
 */
static int plan_one(const char *out, struct out_file *f)
{
	struct stat st;

	if (stat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
		f->path = strdup(out);
		f->direct = true;
		f->fd = f->path ? open(out, O_WRONLY | O_CLOEXEC) : -1;
		if (f->fd < 0) {
			us_msg(LOG_ERR, "%s: %s", out, strerror(f->path ? errno : ENOMEM));
			return EXIT_FAILED;
		}
		return 0;
	}
	f->path = realpath(out, NULL); /* through a symlink to its file */
	if (!f->path)
		f->path = strdup(out);
	if (!f->path) {
		us_msg(LOG_ERR, "%s: out of memory", out);
		return EXIT_FAILED;
	}
	return open_tmp(f);
}

/* Name every output and open its temporary (stdout: no name, no temp). */
static int plan_files(const struct us_opts *o, struct us_view *const *views,
		      size_t n, struct out_file *f)
{
	bool dir = false;
	int rc;

	for (size_t i = 0; i < n; i++)
		f[i] = (struct out_file){ .v = views[i], .fd = -1 };
	if (!strcmp(o->out, "-")) {
		if (n != 1 || o->max_shard_size) {
			us_msg(LOG_ERR, "-: a sharded view is several files: "
			       "OUT must be a directory");
			return EXIT_USAGE;
		}
		f[0].fd = STDOUT_FILENO;
		return 0;
	}
	if ((rc = out_is_dir(o, &dir)) != 0)
		return rc;
	if (!dir && n == 1)
		return plan_one(o->out, &f[0]);
	for (size_t i = 0; i < n; i++) {
		f[i].path = dir ? join(o->out, "/", views[i]->name)
				: strdup(o->out);
		if (!f[i].path) {
			us_msg(LOG_ERR, "%s: out of memory", o->out);
			return EXIT_FAILED;
		}
		if ((rc = open_tmp(&f[i])) != 0)
			return rc;
	}
	return 0;
}

static int write_full(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);

		if (w < 0 && errno == EINTR && !caught)
			continue;
		if (w < 0)
			return -errno;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

static const char *shown(const struct out_file *f)
{
	return f->path ? f->path : "-";
}

static int write_one(struct us_assembler *as, struct out_file *f, char *buf,
		     struct us_progress *p)
{
	const struct us_view *v = f->v;

	for (uint64_t off = 0; off < v->size;) {
		size_t got;
		enum us_status st;
		int rc;

		if (caught)
			return EXIT_FAILED;
		st = us_view_read(as, v, buf, EXPORT_PIECE, off, &got);
		if (st != US_OK || got == 0) {
			us_msg(LOG_ERR, "%s: reading the checkpoint failed: %s",
			       v->name,
			       strerror(st != US_OK ? us_status_errno(st) : EIO));
			return EXIT_FAILED;
		}
		rc = write_full(f->fd, buf, (size_t)got);
		if (rc < 0) {
			us_msg(LOG_ERR, "%s: %s", shown(f), strerror(-rc));
			return EXIT_FAILED;
		}
		off += (uint64_t)got;
		us_progress_add(p, (uint64_t)got);
	}
	return 0;
}

/* Durable before visible: fsync the data, close, and only then rename. */
static int finish_one(struct out_file *f)
{
	int fd = f->fd;

	f->fd = -1;
	if ((!f->direct && fsync(fd) < 0) || close(fd) < 0) {
		us_msg(LOG_ERR, "%s: %s", f->path, strerror(errno));
		return EXIT_FAILED;
	}
	return 0;
}

/* The renames themselves reach the disk only with the directory's fsync. */
static void sync_parent(const char *path)
{
	char *dir = strdup(path);
	char *slash = dir ? strrchr(dir, '/') : NULL;
	int fd;

	if (!dir)
		return;
	if (slash)
		slash[slash == dir] = '\0';
	fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(dir);
}

static int publish(struct out_file *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (finish_one(&f[i]) != 0)
			return EXIT_FAILED;
	/* In order: the sharded set's index is last, so it names only shards
	 * that are already in place. */
	for (size_t i = 0; i < n; i++) {
		if (f[i].direct)
			continue; /* written in place */
		if (rename(f[i].tmp, f[i].path) < 0) {
			us_msg(LOG_ERR, "%s: %s", f[i].path, strerror(errno));
			return EXIT_FAILED;
		}
		free(f[i].tmp);
		f[i].tmp = NULL;
	}
	sync_parent(f[n - 1].path);
	return 0;
}

/* "<stem>-NNNNN-of-NNNNN<ext>": a shard name as save_pretrained writes it;
 * *@stem_len is the length of <stem>. */
static bool shard_name(const char *name, size_t *stem_len)
{
	const char *of = strstr(name, "-of-");

	if (!of || of - name < 6 || of[-6] != '-')
		return false;
	for (int i = 1; i <= 5; i++)
		if (of[-i] < '0' || of[-i] > '9' || of[4 + i - 1] < '0' || of[4 + i - 1] > '9')
			return false;
	*stem_len = (size_t)(of - 6 - name);
	return of[9] == '.';
}

static bool written(const struct out_file *f, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(strrchr(f[i].path, '/') + 1, name))
			return true;
	return false;
}

/*
 * As save_pretrained cleans its folder: shards of an earlier export into
 * this directory (same stem and suffix, another count) would sit beside
 * the new set under names no index lists -- or, worse, the ones it lists.
 */
static void remove_stale_shards(const struct us_opts *o, const struct out_file *f,
				size_t n)
{
	const char *first = strrchr(f[0].path, '/') + 1, *ext;
	size_t stem, s2;
	char **names;
	size_t nn;
	int dfd;

	if (!shard_name(first, &stem) || !(ext = strrchr(first, '.')))
		return;
	dfd = open(o->out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	if (us_dirlist(dfd, &names, &nn) == US_OK) {
		for (size_t i = 0; i < nn; i++)
			if (shard_name(names[i], &s2) && s2 == stem &&
			    !strncmp(names[i], first, stem) &&
			    !strcmp(strrchr(names[i], '.'), ext) &&
			    !written(f, n, names[i]))
				unlinkat(dfd, names[i], 0);
		us_dirlist_free(names, nn);
	}
	close(dfd);
}

static uint64_t total_size(struct us_view *const *views, size_t n)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += views[i]->size;
	return sum;
}

int us_export(const struct us_opts *o, struct us_assembler *as,
	      struct us_view *const *views, size_t n)
{
	struct out_file *f = calloc(n + 1, sizeof(*f));
	char *buf = malloc(EXPORT_PIECE);
	struct us_progress p;
	int rc = EXIT_FAILED;

	if (!f || !buf || !n) {
		us_msg(LOG_ERR, "%s: out of memory", o->out);
		goto out;
	}
	catch_signals();
	rc = plan_files(o, views, n, f);
	if (rc != 0)
		goto out;
	us_progress_start(&p, !o->quiet && isatty(STDERR_FILENO),
			  total_size(views, n));
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = write_one(as, &f[i], buf, &p);
	if (rc == 0 && f[0].path)
		rc = publish(f, n);
	if (rc == 0 && n > 1)
		remove_stale_shards(o, f, n);
	if (rc == 0)
		us_progress_end(&p);
	else if (p.on)
		fputc('\n', stderr);
out:
	if (f)
		files_free(f, n);
	free(buf);
	die_of_caught_signal();
	return rc;
}
