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
#include "source/passthrough.h"
#include "grow.h"
#include "source/source.h" /* us_dirlist */
#include "status_errno.h"

#define EXPORT_PIECE (4u << 20)
#define EXIT_USAGE 1
#define EXIT_FAILED 2

struct out_file {
	const struct us_view *v; /* the bytes: a rendered view, or */
	const char *src;         /* a passthrough file, relative to SOURCE */
	uint64_t size;           /* expected, for the progress total */
	char *path;  /* the final name; NULL for stdout */
	char *tmp;   /* "<path>.tmp.<pid>" while it is being written */
	int fd;
	bool direct; /* OUT is a device or a FIFO: written in place */
};

/* One export: every file it writes, in the order they are published. */
struct export {
	const struct us_opts *o;
	struct us_assembler *as;  /* reads the views' tensors */
	const struct us_dir *src; /* SOURCE's directory, or US_DIR_NONE */
	struct out_file *f;
	size_t n, cap;
	size_t model_at, nmodel;  /* f[model_at..]: the model's view(s) */
	struct us_view *own[2];   /* optimizer views made here, freed here */
	size_t nown;
	struct us_pt_list pt;
	bool *pt_keep;            /* pt entry i is written (not shadowed) */
	bool *pt_used;            /* directory entry i has a file below it */
	bool dir;                 /* OUT is a directory */
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

/* OUT/@name, without doubling the '/' of "OUTDIR/". */
static char *out_path(const struct export *x, const char *name)
{
	const char *out = x->o->out;

	return join(out, out[strlen(out) - 1] == '/' ? "" : "/", name);
}

static void export_free(struct export *x)
{
	for (size_t i = 0; i < x->n; i++) {
		struct out_file *f = &x->f[i];

		if (f->fd >= 0 && (f->path || f->direct))
			close(f->fd);
		if (f->tmp)
			unlink(f->tmp); /* still there only when not renamed */
		free(f->path);
		free(f->tmp);
	}
	free(x->f);
	for (size_t i = 0; i < x->nown; i++)
		us_view_free(x->own[i]);
	us_pt_free(&x->pt);
	free(x->pt_keep);
}

/* Append one output; @path is taken over (freed with the export). */
static int add_file(struct export *x, char *path, const struct us_view *v,
		    const char *src, uint64_t size)
{
	if (!path && x->dir) {
		us_msg(LOG_ERR, "%s: out of memory", x->o->out);
		return EXIT_FAILED;
	}
	if (US_GROW(x->f, x->cap, x->n) != US_OK) {
		free(path);
		us_msg(LOG_ERR, "%s: out of memory", x->o->out);
		return EXIT_FAILED;
	}
	x->f[x->n++] = (struct out_file){ .v = v, .src = src, .size = size,
					  .path = path, .fd = -1 };
	return 0;
}

/* The option that makes OUT several files (NULL: none). */
static const char *several_files(const struct us_opts *o)
{
	if (o->max_shard_size)
		return "--max-shard-size";
	return o->optimizer ? "--optimizer" : o->overlay ? "--overlay" : NULL;
}

/* Is OUT a directory?  An existing one, "new/", or any OUT when sharding:
 * several files only make sense as a directory. */
static int out_is_dir(const struct us_opts *o, bool *dir)
{
	struct stat st;

	if (stat(o->out, &st) == 0) {
		*dir = S_ISDIR(st.st_mode);
		if (several_files(o) && !*dir) {
			us_msg(LOG_ERR, "%s: %s writes several files: OUT must "
			       "be a directory", o->out, several_files(o));
			return EXIT_USAGE;
		}
		return 0;
	}
	*dir = several_files(o) || o->out[strlen(o->out) - 1] == '/';
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

/* Binary on a terminal is garbage on the screen and a stuck terminal:
 * refused, as gzip and zstd refuse it. */
static int refuse_tty(int fd, const char *shown_as)
{
	if (!isatty(fd))
		return 0;
	us_msg(LOG_ERR, "%s: %s a terminal: binary output is not written to "
	       "one (redirect it to a file or a pipe)", shown_as,
	       strcmp(shown_as, "-") ? "is" : "standard output is");
	return EXIT_USAGE;
}

/*
 * OUT a file: an existing device or FIFO (/dev/null, a pipe) is written in
 * place -- replacing it by a rename would put a regular file where the
 * device was; a symlink's target is what gets replaced, not the link.
 */
static int plan_one(struct export *x, const struct us_view *v)
{
	const char *out = x->o->out;
	struct out_file *f;
	struct stat st;
	char *path;

	if (stat(out, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (add_file(x, strdup(out), v, NULL, v->size) != 0)
			return EXIT_FAILED;
		f = &x->f[x->n - 1];
		f->direct = true;
		f->fd = f->path ? open(out, O_WRONLY | O_CLOEXEC) : -1;
		if (f->fd < 0) {
			us_msg(LOG_ERR, "%s: %s", out, strerror(f->path ? errno : ENOMEM));
			return EXIT_FAILED;
		}
		return refuse_tty(f->fd, out);
	}
	path = realpath(out, NULL); /* through a symlink to its file */
	if (!path)
		path = strdup(out);
	if (!path) {
		us_msg(LOG_ERR, "%s: out of memory", out);
		return EXIT_FAILED;
	}
	return add_file(x, path, v, NULL, v->size);
}

static int plan_stdout(struct export *x, struct us_view *const *views, size_t n)
{
	if (n != 1 || x->o->max_shard_size || x->o->optimizer) {
		us_msg(LOG_ERR, "-: %s writes several files: OUT must be a "
		       "directory", x->o->optimizer ? "--optimizer" :
		       "a sharded view");
		return EXIT_USAGE;
	}
	if (add_file(x, NULL, views[0], NULL, views[0]->size) != 0)
		return EXIT_FAILED;
	x->f[0].fd = STDOUT_FILENO;
	return refuse_tty(STDOUT_FILENO, "-");
}

/* The root names a mount fills from the state dict: a source file of one
 * of those names is hidden there (fs/tree.c) and is not copied here either
 * (a stale model.safetensors beside new shards would be what loads). */
static bool shadowed(const char *name, struct us_view *const *views, size_t n)
{
	static const char *const mount_names[] = {"model.safetensors",
		"model.safetensors.index.json", "pytorch_model.bin",
		"optimizer.safetensors", "optimizer.json", "tensors", NULL};

	for (const char *const *m = mount_names; *m; m++)
		if (!strcmp(name, *m))
			return true;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(name, views[i]->name))
			return true;
	return false;
}

static void mark_visible(const struct us_pt_list *pt, struct us_view *const *views,
			 size_t n, bool *keep)
{
	for (size_t i = 0; i < pt->n; i++) {
		const struct us_pt_entry *e = &pt->v[i];

		keep[i] = e->parent == SIZE_MAX ? !shadowed(e->name, views, n)
						: keep[e->parent];
	}
}

void us_pt_mark_visible(const struct us_pt_list *pt, bool *keep)
{
	mark_visible(pt, NULL, 0, keep);
}

/* A directory is made only when a file goes in it: an Accelerate
 * checkpoint's pytorch_model_fsdp_0/ holds nothing but checkpoint shards. */
static void mark_parents_used(struct export *x, size_t i)
{
	for (; i != SIZE_MAX && !x->pt_used[i]; i = x->pt.v[i].parent)
		x->pt_used[i] = true;
}

/* Every file the mount passes through (config.json, tokenizer files, ...),
 * at its relative path: what from_pretrained needs besides the weights. */
static int plan_passthrough(struct export *x, const struct us_statedict *sd,
			    struct us_view *const *views, size_t n)
{
	struct us_err err = {0};

	/* The same files as the mount's (an overlay file replacing SOURCE's),
	 * so the directory written loads as the mount does.  A bad --overlay
	 * is a usage error. */
	if (us_pt_collect(x->src, sd, x->o->overlay, &x->pt, &err) != US_OK) {
		us_msg(LOG_ERR, "%s", err.msg);
		return err.status == US_E_USAGE ? EXIT_USAGE : EXIT_FAILED;
	}
	x->pt_keep = calloc(2 * (x->pt.n + 1), sizeof(*x->pt_keep));
	x->pt_used = x->pt_keep ? x->pt_keep + x->pt.n + 1 : NULL;
	if (!x->pt_keep) {
		us_msg(LOG_ERR, "%s: out of memory", x->o->out);
		return EXIT_FAILED;
	}
	mark_visible(&x->pt, views, n, x->pt_keep);
	for (size_t i = 0; i < x->pt.n; i++) {
		const struct us_pt_entry *e = &x->pt.v[i];

		if (!x->pt_keep[i] || S_ISDIR(e->st.st_mode))
			continue;
		/* an overlay entry's relpath is absolute: it goes in OUT/ */
		if (add_file(x, out_path(x, e->relpath[0] == '/' ? e->name
								  : e->relpath),
			     NULL, e->relpath,
			     (uint64_t)e->st.st_size) != 0)
			return EXIT_FAILED;
		mark_parents_used(x, e->parent);
	}
	return 0;
}

/* optimizer.safetensors and optimizer.json, as the mount serves them. */
static int plan_optimizer(struct export *x, const struct us_statedict *sd)
{
	const struct us_statedict *opt = sd->optim;
	struct us_err err = {0};

	if (!(opt && opt->ntensors) && !sd->optim_json) {
		us_msg(LOG_ERR, ".: --optimizer: this checkpoint has no optimizer "
		       "state");
		return EXIT_FAILED;
	}
	if (us_view_optimizer_new(sd, x->own, &x->nown, &err) != US_OK)
		return us_msg(LOG_ERR, "%s", err.msg), EXIT_FAILED;
	for (size_t i = 0; i < x->nown; i++)
		if (add_file(x, out_path(x, x->own[i]->name), x->own[i],
			     NULL, x->own[i]->size) != 0)
			return EXIT_FAILED;
	return 0;
}

/*
 * A directory: the passthrough files, the optimizer's, then the model's
 * (the sharded set's index last), so the file a loader looks for first is
 * the last to appear.
 */
static int plan_dir(struct export *x, const struct us_statedict *sd,
		    struct us_view *const *views, size_t n)
{
	int rc;

	if ((rc = plan_passthrough(x, sd, views, n)) != 0)
		return rc;
	if (x->o->optimizer && (rc = plan_optimizer(x, sd)) != 0)
		return rc;
	x->model_at = x->n;
	x->nmodel = n;
	for (size_t i = 0; i < n; i++)
		if ((rc = add_file(x, out_path(x, views[i]->name),
				   views[i], NULL, views[i]->size)) != 0)
			return rc;
	return 0;
}

/* Name every output.  Nothing is created yet. */
static int plan_files(struct export *x, const struct us_statedict *sd,
		      struct us_view *const *views, size_t n)
{
	int rc;

	if ((rc = strcmp(x->o->out, "-") ? out_is_dir(x->o, &x->dir) : 0) != 0)
		return rc;
	if (x->dir)
		return plan_dir(x, sd, views, n);
	/* stdout has no place for config files: dropping them silently
	 * would not write the model directory asked for. */
	if (x->o->overlay) {
		us_msg(LOG_ERR, "%s: --overlay writes several files: OUT must be "
		       "a directory", x->o->out);
		return EXIT_USAGE;
	}
	if (!strcmp(x->o->out, "-"))
		return plan_stdout(x, views, n);
	x->nmodel = n;
	if (n == 1)
		return plan_one(x, views[0]);
	us_msg(LOG_ERR, "%s: a sharded view is several files: OUT must be a "
	       "directory", x->o->out);
	return EXIT_USAGE;
}

/* An export never silently replaces what is there: checked for every
 * name before the first byte is written, so a refusal leaves OUT as it
 * was. */
static int refuse_existing(const struct export *x)
{
	struct stat st;

	if (x->o->force)
		return 0;
	for (size_t i = 0; i < x->n; i++) {
		const struct out_file *f = &x->f[i];

		if (f->path && !f->direct && lstat(f->path, &st) == 0) {
			us_msg(LOG_ERR, "%s: already exists (--force replaces it)",
			       f->path);
			return EXIT_USAGE;
		}
	}
	return 0;
}

static int make_dir(const char *path)
{
	struct stat st;

	if (mkdir(path, 0777) == 0 || (errno == EEXIST && stat(path, &st) == 0 &&
					S_ISDIR(st.st_mode)))
		return 0;
	us_msg(LOG_ERR, "%s: %s", path, strerror(errno == EEXIST ? ENOTDIR : errno));
	return EXIT_FAILED;
}

/* OUT itself, then the passthrough tree's directories (parents first). */
static int make_dirs(const struct export *x)
{
	int rc;

	if (!x->dir || (rc = make_dir(x->o->out)) != 0)
		return x->dir ? rc : 0;
	for (size_t i = 0; i < x->pt.n; i++) {
		const struct us_pt_entry *e = &x->pt.v[i];
		char *path;

		if (!x->pt_used[i])
			continue;
		path = out_path(x, e->relpath);
		rc = path ? make_dir(path) : EXIT_FAILED;
		free(path);
		if (rc != 0)
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

static int write_piece(struct out_file *f, const char *buf, size_t len,
		       struct us_progress *p)
{
	int rc = write_full(f->fd, buf, len);

	if (rc < 0) {
		us_msg(LOG_ERR, "%s: %s", shown(f), strerror(-rc));
		return EXIT_FAILED;
	}
	us_progress_add(p, len);
	return 0;
}

static int write_view(struct us_assembler *as, struct out_file *f, char *buf,
		      struct us_progress *p)
{
	const struct us_view *v = f->v;

	for (uint64_t off = 0; off < v->size;) {
		enum us_status st;
		size_t got;

		if (caught)
			return EXIT_FAILED;
		st = us_view_read(as, v, buf, EXPORT_PIECE, off, &got);
		if (st != US_OK || got == 0) {
			us_msg(LOG_ERR, "%s: reading the checkpoint failed: %s",
			       v->name,
			       strerror(st != US_OK ? us_status_errno(st) : EIO));
			return EXIT_FAILED;
		}
		if (write_piece(f, buf, (size_t)got, p) != 0)
			return EXIT_FAILED;
		off += (uint64_t)got;
	}
	return 0;
}

/* A passthrough file, copied as it is now (to its size when opened; an
 * overlay file's absolute path opens locally, whatever SOURCE is). */
static int write_copy(struct out_file *f, const struct us_dir *src, char *buf,
		      struct us_progress *p)
{
	struct us_file in;
	uint64_t off = 0;
	enum us_status st = us_file_open(src, f->src, &in);
	int rc = 0;

	if (st != US_OK) {
		us_msg(LOG_ERR, "%s: %s", f->src, st == US_E_IO ? strerror(errno)
				: "not a regular file");
		return EXIT_FAILED;
	}
	while (rc == 0 && !caught && off < (uint64_t)in.size) {
		size_t n = (uint64_t)in.size - off < EXPORT_PIECE
				   ? (size_t)((uint64_t)in.size - off)
				   : EXPORT_PIECE;

		if (us_file_pread(&in, buf, n, off) != US_OK) {
			us_msg(LOG_ERR, "%s: %s", f->src, strerror(errno));
			rc = EXIT_FAILED;
			break;
		}
		rc = write_piece(f, buf, n, p);
		off += n;
	}
	us_file_close(&in);
	return caught ? EXIT_FAILED : rc;
}

/* Durable before visible: fsync the data and close; the rename comes when
 * every file is written. */
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

/* One file to its temporary (one descriptor open at a time, however many
 * tokenizer files there are). */
static int write_one(const struct export *x, struct out_file *f, char *buf,
		     struct us_progress *p)
{
	int rc;

	if (f->fd < 0 && (rc = open_tmp(f)) != 0)
		return rc;
	rc = f->v ? write_view(x->as, f, buf, p) : write_copy(f, x->src, buf, p);
	if (rc == 0 && f->path)
		rc = finish_one(f);
	return rc;
}

static char *parent_of(const char *path)
{
	char *dir = strdup(path);
	char *slash = dir ? strrchr(dir, '/') : NULL;

	if (slash)
		slash[slash == dir] = '\0';
	else if (dir)
		strcpy(dir, ".");
	return dir;
}

/* The renames themselves reach the disk only with the directory's fsync. */
static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Each parent once: the files of one directory are renamed together. */
static void sync_parents(const struct out_file *f, size_t n)
{
	char *last = NULL;

	for (size_t i = 0; i < n; i++) {
		char *dir = f[i].direct ? NULL : parent_of(f[i].path);

		if (dir && (!last || strcmp(dir, last) != 0)) {
			sync_dir(dir);
			free(last);
			last = dir;
		} else {
			free(dir);
		}
	}
	free(last);
}

/* In order: the sharded set's index is last, so it names only shards that
 * are already in place. */
static int publish(struct out_file *f, size_t n)
{
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
	sync_parents(f, n);
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
				size_t n, size_t model_at)
{
	const char *first = strrchr(f[model_at].path, '/') + 1, *ext;
	size_t stem, s2;
	char **names;
	size_t nn;
	struct us_dir out;

	if (!shard_name(first, &stem) || !(ext = strrchr(first, '.')))
		return;
	if (us_dir_open_path(o->out, &out) < 0)
		return;
	if (us_dirlist(&out, &names, &nn) == US_OK) {
		for (size_t i = 0; i < nn; i++)
			if (shard_name(names[i], &s2) && s2 == stem &&
			    !strncmp(names[i], first, stem) &&
			    !strcmp(strrchr(names[i], '.'), ext) &&
			    !written(f, n, names[i]))
				unlinkat(out.fd, names[i], 0);
		us_dirlist_free(names, nn);
	}
	us_dir_close(&out);
}

static uint64_t total_size(const struct export *x)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < x->n; i++)
		sum += x->f[i].size;
	return sum;
}

/* Plan every name, refuse before anything is written, then write. */
static int run(struct export *x, const struct us_statedict *sd,
	       struct us_view *const *views, size_t n, char *buf)
{
	struct us_progress p;
	int rc;

	if ((rc = plan_files(x, sd, views, n)) != 0 ||
	    (rc = refuse_existing(x)) != 0 || (rc = make_dirs(x)) != 0)
		return rc;
	us_progress_start(&p, !x->o->quiet && isatty(STDERR_FILENO),
			  total_size(x));
	for (size_t i = 0; i < x->n && rc == 0; i++)
		rc = write_one(x, &x->f[i], buf, &p);
	if (rc == 0 && x->f[0].path)
		rc = publish(x->f, x->n);
	if (rc == 0 && x->nmodel > 1)
		remove_stale_shards(x->o, x->f, x->n, x->model_at);
	if (rc == 0)
		us_progress_end(&p);
	else if (p.on)
		fputc('\n', stderr);
	return rc;
}

int us_export(const struct us_opts *o, struct us_assembler *as,
	      const struct us_statedict *sd, const struct us_dir *src,
	      struct us_view *const *views, size_t n)
{
	struct export x = { .o = o, .as = as, .src = src };
	char *buf = malloc(EXPORT_PIECE);
	int rc = EXIT_FAILED;

	if (!buf || !n)
		us_msg(LOG_ERR, "%s: out of memory", o->out);
	else {
		catch_signals();
		rc = run(&x, sd, views, n, buf);
	}
	export_free(&x);
	free(buf);
	die_of_caught_signal();
	return rc;
}
