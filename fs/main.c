/*
 * main.c - unshardfs: parse the command line, read SOURCE, build the views
 * and the tree, then mount and serve until unmounted.
 *
 * Everything that can refuse the checkpoint happens before the mount, so a
 * refusal leaves nothing mounted and exits 2 with one line on stderr.
 * `inspect` and `export` share the same preparation and stop before FUSE.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <sys/vfs.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "assemble/cuda.h"
#include "exit_watch.h"
#include "export.h"
#include "init_ext.h"
#include "inspect.h"
#include "msg.h"
#include "ops.h"
#include "opts.h"
#include "source/source.h"
#include "us_config.h"
#include "view/readahead.h"

#define EXIT_USAGE 1
#define EXIT_REFUSED 2

struct mount_state {
	struct us_statedict *sd;
	int srcfd;
	struct us_view **views;  /* the root's rendered files */
	size_t nviews, capviews;
	struct us_view *raw;     /* tensors/: one raw view per tensor, one block */
	struct us_pt_list pt;
	struct us_tree tree;
};

static int refuse(const struct us_err *err)
{
	fprintf(stderr, "unshardfs: %s\n", err->msg);
	return err->status == US_E_USAGE ? EXIT_USAGE : EXIT_REFUSED;
}

static void mount_state_free(struct mount_state *m)
{
	us_readahead_free(m->tree.ra);
	us_tree_free(&m->tree);
	us_pt_free(&m->pt);
	for (size_t i = 0; i < m->nviews; i++)
		us_view_free(m->views[i]);
	free(m->views);
	us_view_raw_array_free(m->raw);
	if (m->srcfd >= 0)
		close(m->srcfd);
	us_sd_free(m->sd);
}

/* Make room for @more views: the sharded view has one per shard. */
static enum us_status views_reserve(struct mount_state *m, size_t more,
				    struct us_err *err)
{
	void *p;

	if (m->nviews + more <= m->capviews)
		return US_OK;
	p = realloc(m->views, (m->nviews + more) * sizeof(*m->views));
	if (!p)
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	m->views = p;
	m->capviews = m->nviews + more;
	return US_OK;
}

static enum us_status add_view(struct mount_state *m, struct us_view *v,
			       struct us_err *err)
{
	if (views_reserve(m, 1, err) != US_OK) {
		us_view_free(v);
		return err->status;
	}
	m->views[m->nviews++] = v;
	return US_OK;
}

/* model.safetensors, or its shards and index under --max-shard-size. */
static enum us_status add_model_views(struct mount_state *m, uint64_t max_shard,
				      struct us_err *err)
{
	struct us_view **v, *one;
	size_t n;

	if (!max_shard) {
		US_TRY(us_view_safetensors_new(m->sd, &one, err));
		return add_view(m, one, err);
	}
	US_TRY(us_view_safetensors_sharded(m->sd, max_shard, &v, &n, err));
	if (views_reserve(m, n, err) != US_OK) {
		for (size_t i = 0; i < n; i++)
			us_view_free(v[i]);
		free(v);
		return err->status;
	}
	memcpy(m->views + m->nviews, v, n * sizeof(*v));
	m->nviews += n;
	free(v);
	return US_OK;
}

/* The files at the mount root that render the state dict; export builds
 * only the one view it writes. */
static enum us_status add_views(struct mount_state *m, const struct us_opts *o,
				struct us_err *err)
{
	const struct us_statedict *opt = m->sd->optim;
	struct us_view *v;
	bool bin_only = o->export_cmd && !strcmp(o->view, "bin");

	if (!bin_only)
		US_TRY(add_model_views(m, o->max_shard_size, err));
	if (o->export_cmd && !bin_only)
		return US_OK;
	if (us_view_torch_new(m->sd, &v, err) == US_OK) {
		US_TRY(add_view(m, v, err));
	} else if (o->export_cmd || err->status != US_E_UNSUPPORTED) {
		return err->status;
	} else {
		/* A dtype torch.save cannot express (F4, F6): the other views
		 * still serve the checkpoint; say why this one is missing. */
		us_msg(LOG_WARNING, "no pytorch_model.bin: %s", err->msg);
	}
	if (o->export_cmd)
		return US_OK;
	if (opt && opt->ntensors) {
		US_TRY(us_view_safetensors_named(opt, "optimizer.safetensors",
						 &v, err));
		US_TRY(add_view(m, v, err));
	}
	if (m->sd->optim_json) {
		US_TRY(us_view_text_new("optimizer.json", m->sd->optim_json,
					&v, err));
		US_TRY(add_view(m, v, err));
	}
	return US_OK;
}

/* Every source file stays open for the life of the mount, and a DeepSpeed
 * universal checkpoint has three per parameter: past the usual soft limit
 * of 1024 for a large model.  The hard limit is ours to take. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/*
 * --device: cuda[:N] as asked (checked by check_device).  auto is the CPU:
 * on an H200 the device never beat the CPU end to end (docs/gpu-results.txt:
 * 0.5-0.75 GB/s with a round trip per 1 MiB block, against 1.0-2.9 GB/s for
 * the vectorised CPU casts), so there is no plan to switch on.
 */
static void set_device(const char *device)
{
	if (!strncmp(device, "cuda", 4))
		us_assemble_set_device(device[4] == ':' ? atoi(device + 5) : 0);
	else
		us_assemble_set_device(-1);
}

/* Read SOURCE and build everything the mount serves.  0 or an exit status. */
static int prepare(const struct us_opts *o, struct mount_state *m)
{
	struct us_source_opts so = {
		.format = o->format,
		.names = { .no_unwrap = o->no_unwrap,
			   .strip_prefix = o->strip_prefix,
			   .nstrip = o->nstrip },
		.progress = !o->quiet && isatty(STDERR_FILENO),
	};
	struct us_err err = {0};
	struct stat root;

	memset(m, 0, sizeof(*m));
	m->srcfd = -1;
	raise_nofile();
	us_ties_mode_parse(o->ties, &so.ties); /* validated by us_opts_parse */
	so.cast = strcmp(o->dtype, "keep") != 0;
	so.cast_to = !strcmp(o->dtype, "bf16") ? US_DT_BF16 :
		     !strcmp(o->dtype, "f16") ? US_DT_F16 : US_DT_F32;
	so.ds_weights = !strcmp(o->ds_weights, "module") ? US_DS_WEIGHTS_MODULE :
			US_DS_WEIGHTS_FP32;
	if (us_source_open(o->source, &so, &m->sd, &m->srcfd, &err) != US_OK)
		return refuse(&err);
	if (o->inspect)
		return 0;
	set_device(o->device);
	if (us_assemble_init(o->cache_size) < 0) {
		us_err_set(&err, US_E_NOMEM, ".", "out of memory");
		return refuse(&err);
	}
	if (add_views(m, o, &err) != US_OK)
		return refuse(&err);
	if (o->export_cmd)
		return 0;
	if (us_view_raw_array_new(m->sd, &m->raw, &err) != US_OK)
		return refuse(&err);
	if (m->srcfd >= 0 && us_pt_scan(m->srcfd, m->sd, &m->pt, &err) != US_OK)
		return refuse(&err);
	if (stat(o->source, &root) < 0 ||
	    us_tree_build(&m->tree, m->views, m->nviews, m->sd, m->raw, &m->pt,
			  m->srcfd, &root) < 0) {
		us_err_set(&err, US_E_NOMEM, ".", "cannot build the tree: %s",
			   strerror(errno ? errno : ENOMEM));
		return refuse(&err);
	}
	m->tree.ra = us_readahead_new(m->sd); /* NULL: reads go without */
	m->tree.direct_io = o->direct_io;
	return 0;
}

/* Is @mnt the root of a mounted FUSE filesystem?  Mounting again there
 * would stack silently on a live (or dead, after kill -9) mount. */
static bool is_fuse_mount(const char *mnt)
{
	struct statfs sf;
	struct stat st, up;
	char parent[PATH_MAX];

	if (statfs(mnt, &sf) < 0 || sf.f_type != 0x65735546 /* FUSE */)
		return false;
	if (snprintf(parent, sizeof(parent), "%s/..", mnt) >= (int)sizeof(parent) ||
	    stat(mnt, &st) < 0 || stat(parent, &up) < 0)
		return true; /* inside FUSE and cannot tell: still not ours to stack */
	return st.st_dev != up.st_dev || st.st_ino == up.st_ino;
}

static int check_mountpoint(const char *mnt)
{
	struct stat st;

	if (stat(mnt, &st) < 0) {
		fprintf(stderr, "unshardfs: %s: mountpoint: %s\n", mnt,
			strerror(errno));
		return EXIT_USAGE;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "unshardfs: %s: mountpoint is not a directory\n",
			mnt);
		return EXIT_USAGE;
	}
	if (is_fuse_mount(mnt)) {
		fprintf(stderr, "unshardfs: %s: mountpoint is busy: a FUSE "
			"filesystem is already mounted there (fusermount3 -u %s)\n",
			mnt, mnt);
		return EXIT_USAGE;
	}
	return 0;
}

/* --device=cuda[:N] is a demand: refuse it when there is no such device.
 * auto falls back to the CPU silently (design.md). */
static int check_device(const char *device)
{
	char why[120];
	int ndev, want = 0;

	if (strncmp(device, "cuda", 4) != 0)
		return 0;
	if (device[4] == ':')
		want = atoi(device + 5);
	ndev = us_cuda_probe(why, sizeof(why)); /* this process stays CUDA-free */
	if (want < ndev)
		return 0;
	fprintf(stderr, "unshardfs: --device=%s: %s (%d CUDA device%s)\n",
		device, ndev ? "no such device" : why, ndev, ndev == 1 ? "" : "s");
	return -1;
}

/* fsname shows in mount(8) and df; libfuse splits options on commas. */
static void add_mount_opts(struct fuse_args *args, const struct us_opts *o)
{
	char opt[4096];
	char *abs = realpath(o->source, NULL); /* not as typed: cwd-free */
	const char *src = abs ? abs : o->source;

	if (strpbrk(src, ", \t\n\\") || strlen(src) > 3000)
		src = "unshardfs";
	snprintf(opt, sizeof(opt), "ro,default_permissions,subtype=unshardfs,"
		 "max_read=%u,fsname=%s", us_max_read(), src);
	free(abs);
	fuse_opt_add_arg(args, "-o");
	fuse_opt_add_arg(args, opt);
	for (size_t i = 0; i < o->nfuse_opts; i++) {
		fuse_opt_add_arg(args, "-o");
		fuse_opt_add_arg(args, o->fuse_opts[i]);
	}
	if (o->debug)
		fuse_opt_add_arg(args, "-d");
}

static int serve(const struct us_opts *o, struct mount_state *m)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg = NULL;
	struct us_exit_watch *watch = NULL;
	struct fuse_session *se;
	char *absmnt = realpath(o->mountpoint, NULL); /* before it is mounted */
	int rc = EXIT_USAGE;

	fuse_opt_add_arg(&args, "unshardfs");
	add_mount_opts(&args, o);
	se = fuse_session_new(&args, &us_fuse_ops, sizeof(us_fuse_ops), &m->tree);
	if (!se)
		goto out_args;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	/* The absolute path: libfuse unmounts by this path at exit, after the
	 * daemon has changed directory. */
	if (fuse_session_mount(se, absmnt ? absmnt : o->mountpoint) != 0) {
		fprintf(stderr, "unshardfs: %s: cannot mount (busy, or no "
			"permission to use /dev/fuse?)\n", o->mountpoint);
		goto out_signals;
	}
	if (m->tree.direct_io && us_init_ext_install(se) != 0) {
		us_msg(LOG_WARNING, "%s: --direct-io: cannot hook the FUSE "
		       "device; reads go through the page cache", o->mountpoint);
		m->tree.direct_io = false;
	}
	if (absmnt)
		us_raise_read_ahead(absmnt, us_read_ahead_kb());
	fuse_daemonize(o->foreground);
	if (!o->foreground) {
		us_msg_use_syslog(); /* stderr is /dev/null from here on */
		us_msg(LOG_INFO, "serving %s at %s", o->source,
		       absmnt ? absmnt : o->mountpoint);
	}
	cfg = fuse_loop_cfg_create();
	if (!cfg)
		goto out_unmount;
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_idle_threads(cfg, 16);
	watch = us_exit_watch_start(se, absmnt);
	rc = fuse_session_loop_mt(se, cfg);
	us_exit_watch_loop_done(watch);
	/* libfuse reports the signal that ended the loop: SIGTERM, SIGINT and
	 * SIGHUP are the clean way to unmount, not a failure.  So is an
	 * unmount (fusermount3 -u) that aborts the connection while a worker
	 * is reading the device: -ECONNABORTED or -ENODEV, not an error. */
	rc = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP ||
	     rc == -ECONNABORTED || rc == -ENODEV ? 0 : EXIT_REFUSED;
	if (rc != 0)
		us_msg(LOG_ERR, "%s: the FUSE session failed", o->mountpoint);
	fuse_loop_cfg_destroy(cfg);
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
	us_exit_watch_stop(watch); /* after: the close answers its request */
out_args:
	fuse_opt_free_args(&args);
	free(absmnt);
	return rc;
}

int main(int argc, char **argv)
{
	struct mount_state m;
	struct us_opts o;
	int rc;

	/* Large transient buffers (a reply, a bounce buffer of libfuse's)
	 * are mapped and unmapped each time: glibc's default threshold grows
	 * after the first free and then keeps them in per-thread arenas, which
	 * made the daemon's RSS grow with the number of FUSE threads. */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	if (us_opts_parse(&o, argc, argv) < 0)
		return EXIT_USAGE;
	if (o.help) {
		us_opts_usage(stdout);
		return 0;
	}
	if (o.version) {
		const char *why = NULL;
		int ndev = us_cuda_device_count(&why);

		printf("unshardfs %s (libfuse %s; CUDA executor %s; %d CUDA "
		       "device%s%s%s)\n", US_VERSION, fuse_pkgversion(),
		       US_HAVE_CUDA ? "built" : "not built", ndev,
		       ndev == 1 ? "" : "s", ndev ? "" : ": ", ndev ? "" : why);
		return 0;
	}
	if (check_device(o.device) != 0)
		return EXIT_USAGE;
	if (!o.inspect && !o.export_cmd &&
	    (rc = check_mountpoint(o.mountpoint)) != 0)
		return rc;
	rc = prepare(&o, &m);
	if (rc == 0 && o.inspect) {
		rc = us_inspect_print(m.sd, o.json, stdout) < 0 ? EXIT_REFUSED : 0;
		/* Every exit 2 says why in one line (tests/faultinject found
		 * this one silent: an allocation failing while rows are made). */
		if (rc)
			fprintf(stderr, "unshardfs: .: cannot print the tensor "
				"table: out of memory or a write error\n");
	} else if (rc == 0 && o.export_cmd)
		rc = us_export(&o, m.views, m.nviews);
	else if (rc == 0)
		rc = serve(&o, &m);
	mount_state_free(&m);
	return rc;
}
