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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "bdi.h"
#include "capture.h"
#include "exit_watch.h"
#include "export.h"
#include "init_ext.h"
#include "inspect.h"
#include "mount_check.h"
#include "msg.h"
#include "ops.h"
#include "opts.h"
#include "pipe.h"
#include "redact.h"
#include "root_xattr.h"
#include "source/source.h"
#include "storage/remote.h"
#include "source_hint.h"
#include "tbuf.h"
#include "us_config.h"
#include "view/readahead.h"

#define EXIT_USAGE 1
#define EXIT_REFUSED 2

struct mount_state {
	struct us_statedict *sd;
	struct us_assembler *as; /* the mount's one: every view reads through it */
	struct us_dir src;       /* SOURCE's directory (US_DIR_NONE: a file) */
	struct us_view **views;  /* the root's rendered files */
	size_t nviews, capviews;
	struct us_view *raw;     /* tensors/: one raw view per tensor, one block */
	struct us_pt_list pt;
	struct us_tree tree;
	struct us_root_xattrs rootx; /* what a loader asks the root */
};

/* The root's template stat: SOURCE's own, or for a remote SOURCE a
 * read-only directory (tree.c makes its times the newest object's). */
static int source_root_stat(const char *source, const struct us_statedict *sd,
			    struct stat *st)
{
	if (!sd->remote)
		return stat(source, st);
	*st = (struct stat){ .st_mode = S_IFDIR | 0555, .st_nlink = 2,
			     .st_uid = getuid(), .st_gid = getgid() };
	return 0;
}

/* One line for @err, naming SOURCE as given (source_hint.h). */
static int refuse(const struct us_opts *o, const struct us_err *err)
{
	us_source_refusal(stderr, o->source, err, false);
	return err->status == US_E_USAGE ? EXIT_USAGE : EXIT_REFUSED;
}

/* SOURCE could not be read: when no reader even recognised it, the line
 * also says where a checkpoint is, if one is near. */
static int refuse_source(const struct us_opts *o, const struct us_err *err)
{
	bool hint = o->format == US_FORMAT_AUTO && err->status == US_E_FORMAT &&
		    !us_source_recognised(o->source);

	us_source_refusal(stderr, o->source, err, hint);
	return EXIT_REFUSED;
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
	us_dir_close(&m->src); /* before the state dict: it may use its store */
	us_assembler_free(m->as);
	us_root_xattrs_free(&m->rootx);
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

/* The files at the mount root that render the state dict, those --views
 * asks for; export builds only the one view it writes. */
static enum us_status add_views(struct mount_state *m, const struct us_opts *o,
				struct us_err *err)
{
	struct us_view *v, *ov[2];
	size_t nov;
	bool bin_only = o->export_cmd && o->view == US_EXPORT_BIN;

	if (o->export_cmd ? !bin_only : (o->views & US_VIEW_SAFETENSORS))
		US_TRY(add_model_views(m, o->max_shard_size, err));
	if (o->export_cmd && !bin_only)
		return US_OK;
	if (!o->export_cmd && !(o->views & US_VIEW_BIN)) {
		/* --views without bin: nothing to render */
	} else if (us_view_torch_new(m->sd, &v, err) == US_OK) {
		US_TRY(add_view(m, v, err));
	} else if (o->export_cmd || err->status != US_E_UNSUPPORTED) {
		return err->status;
	} else {
		/* A dtype torch.save cannot express (F4, F6): the other views
		 * still serve the checkpoint; say why this one is missing. */
		us_msg(LOG_WARNING, "no pytorch_model.bin: %s", err->msg);
	}
	if (o->export_cmd || !(o->views & US_VIEW_OPTIMIZER))
		return US_OK;
	US_TRY(us_view_optimizer_new(m->sd, ov, &nov, err));
	for (size_t i = 0; i < nov; i++) {
		if (add_view(m, ov[i], err) != US_OK) {
			while (++i < nov) /* add_view freed ov[i] */
				us_view_free(ov[i]);
			return err->status;
		}
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
 * The mount's assembler (assemble.h): --cache-size bounds its cache, and
 * --device says where it casts: cuda[:N] as asked (checked by
 * check_device).  auto is the CPU:
 * on an H200 the device never beat the CPU end to end (docs/gpu-results.txt:
 * 0.5-0.75 GB/s with a round trip per 1 MiB block, against 1.0-2.9 GB/s for
 * the vectorised CPU casts), so there is no plan to switch on.
 */
static enum us_status new_assembler(const struct us_opts *o,
				    struct us_assembler **as, struct us_err *err)
{
	struct us_assembler_opts ao = { .cache_size = o->cache_size,
					.executor = US_EXEC_CPU };

	if (o->device == US_DEVICE_CUDA) {
		ao.executor = US_EXEC_CUDA;
		ao.device = o->cuda_index;
	}
	return us_assembler_new(&ao, as, err);
}

/* Read SOURCE and build everything the mount serves.  0 or an exit status. */
static int prepare(const struct us_opts *o, struct mount_state *m)
{
	struct us_source_opts so = {
		.format = us_format_names[o->format],
		.names = { .no_unwrap = o->no_unwrap,
			   .strip_prefix = o->strip_prefix,
			   .nstrip = o->nstrip },
		.progress = !o->quiet && isatty(STDERR_FILENO),
		.recipe_hint = !o->quiet, /* printed below, or not looked for */
	};
	struct us_err err = {0};
	struct stat root;

	memset(m, 0, sizeof(*m));
	m->src = US_DIR_NONE;
	raise_nofile();
	so.ties = o->ties;
	so.cast = o->cast;
	so.cast_to = o->cast_to;
	so.ds_weights = o->ds_weights;
	so.recipe = o->recipe;
	so.overlay = o->overlay;
	so.remote = o->remote;
	/* --cache-size bounds fetched blocks too (design.md: memory is
	 * --cache-size plus fixed buffers, whatever the checkpoint). */
	if (us_remote_is_url(o->source)) {
		so.remote.cache_bytes = o->cache_size;
		/* a mount's views name the next source bytes they read
		 * (view/readahead.c); inspect and export have no such hint */
		so.remote.hinted_readahead = !o->inspect && !o->export_cmd;
	}
	if (us_source_open(o->source, &so, &m->sd, &m->src, &err) != US_OK)
		return err.status == US_E_USAGE ? refuse(o, &err)
						: refuse_source(o, &err);
	if (m->sd->recipe_hint)
		fprintf(stderr, "unshardfs: note: the tensor names fit the built-in "
			"recipe %s: --recipe=%s serves Hugging Face's names and "
			"layouts\n", m->sd->recipe_hint, m->sd->recipe_hint);
	if (o->inspect)
		return 0;
	if (new_assembler(o, &m->as, &err) != US_OK)
		return refuse(o, &err);
	if (add_views(m, o, &err) != US_OK)
		return refuse(o, &err);
	if (o->export_cmd)
		return 0;
	if ((o->views & US_VIEW_TENSORS) &&
	    us_view_raw_array_new(m->sd, &m->raw, &err) != US_OK)
		return refuse(o, &err);
	if (us_pt_collect(&m->src, m->sd, o->overlay, &m->pt, &err) != US_OK)
		return refuse(o, &err);
	if (source_root_stat(o->source, m->sd, &root) < 0 ||
	    us_tree_build(&m->tree, m->views, m->nviews, m->sd, m->raw, &m->pt,
			  &m->src, &root) < 0) {
		us_err_set(&err, US_E_NOMEM, ".", "cannot build the tree: %s",
			   strerror(errno ? errno : ENOMEM));
		return refuse(o, &err);
	}
	if (us_root_xattrs_init(&m->rootx, o->source, &so, m->sd) < 0) {
		us_err_set(&err, US_E_NOMEM, ".", "out of memory");
		return refuse(o, &err);
	}
	m->tree.rootx = &m->rootx;
	m->tree.ra = us_readahead_new(m->sd); /* NULL: reads go without */
	m->tree.as = m->as;
	m->tree.direct_io = o->direct_io;
	m->tree.owner = (struct us_tree_owner){
		.set_uid = o->set_uid, .set_gid = o->set_gid,
		.set_umask = o->set_umask,
		.uid = o->uid, .gid = o->gid, .umask = o->umask,
	};
	return 0;
}

/* --device=cuda[:N] is a demand: refuse it when there is no such device.
 * auto falls back to the CPU silently (design.md). */
/*
 * Why there is no CUDA device, in plain words: without an NVIDIA driver the
 * CUDA runtime says "driver version is insufficient", which reads as a
 * broken install rather than a machine without a GPU.  "" when the
 * runtime's own reason says nothing more than "no device".
 */
static const char *no_device_reason(const char *why)
{
	if (!US_HAVE_CUDA)
		return "";
	if (access("/proc/driver/nvidia/version", F_OK) != 0)
		return "no NVIDIA driver is loaded";
	return why && strcmp(why, "no CUDA device") != 0 ? why : "";
}

static int check_device(const struct us_opts *o)
{
	char why[120];
	const char *r;
	int ndev;

	if (o->device != US_DEVICE_CUDA)
		return 0;
	ndev = us_assemble_probe(why, sizeof(why)); /* this process stays CUDA-free */
	if (o->cuda_index < ndev)
		return 0;
	r = no_device_reason(why);
	if (ndev)
		fprintf(stderr, "unshardfs: --device=%s: no such device (%d CUDA "
			"device%s)\n", o->device_arg, ndev, ndev == 1 ? "" : "s");
	else
		fprintf(stderr, "unshardfs: --device=%s: no CUDA device%s%s\n",
			o->device_arg, *r ? ": " : "", *r ? r : "");
	return -1;
}

/* fsname shows in mount(8), df and /proc/mounts, to every local user: a
 * URL without its userinfo and query (a presigned URL's signature and
 * token, redact.h).  libfuse splits options on commas. */
static void add_mount_opts(struct fuse_args *args, const struct us_opts *o)
{
	char opt[4096], shown[3072];
	bool url = us_remote_is_url(o->source);
	char *abs = url ? NULL : realpath(o->source, NULL); /* cwd-free */
	const char *src = url ? us_url_public(o->source, shown, sizeof(shown))
			      : abs ? abs : o->source;

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

/* One line for a failed mount: what libfuse and fusermount3 said
 * (capture.h), and the remedy where the words are known. */
static void mount_failed(const struct us_opts *o, struct us_capture *cap)
{
	char why[1024];

	us_capture_end(cap, false, why, sizeof(why));
	fprintf(stderr, "unshardfs: %s: cannot mount: %s%s\n", o->mountpoint,
		why[0] ? why : "libfuse gave no reason", us_mount_remedy(why));
}

static int serve(const struct us_opts *o, struct mount_state *m)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg = NULL;
	struct us_exit_watch *watch = NULL;
	struct fuse_session *se;
	struct us_capture cap;
	char *absmnt = realpath(o->mountpoint, NULL); /* before it is mounted */
	int rc = EXIT_USAGE;

	fuse_opt_add_arg(&args, "unshardfs");
	add_mount_opts(&args, o);
	us_capture_begin(&cap);
	se = fuse_session_new(&args, &us_fuse_ops, sizeof(us_fuse_ops), &m->tree);
	if (!se) {
		mount_failed(o, &cap);
		goto out_args;
	}
	if (fuse_set_signal_handlers(se) != 0) {
		mount_failed(o, &cap);
		goto out_session;
	}
	/* The absolute path: libfuse unmounts by this path at exit, after the
	 * daemon has changed directory. */
	if (fuse_session_mount(se, absmnt ? absmnt : o->mountpoint) != 0) {
		mount_failed(o, &cap);
		goto out_signals;
	}
	us_capture_end(&cap, true, NULL, 0);
	if (m->tree.direct_io && us_init_ext_install(se) != 0) {
		us_msg(LOG_WARNING, "%s: --direct-io: cannot hook the FUSE "
		       "device; reads go through the page cache", o->mountpoint);
		m->tree.direct_io = false;
	}
	if (absmnt)
		us_raise_read_ahead(absmnt, us_read_ahead_kb());
	/* threads do not survive the fork: the remote store's workers,
	 * started by advice while SOURCE was read, start again after it */
	if (m->sd->remote)
		us_remote_quiesce(m->sd->remote);
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
	/* a remote SOURCE's buffered reads wait on the network (tbuf.h):
	 * as many buffers as FUSE threads (libfuse's max_threads: 10) */
	us_rbuf_limit(m->sd->remote ? 16 : 0);
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

/*
 * No GPU is the common case, not an error: say "no CUDA device" plainly.
 * Without any NVIDIA driver the CUDA runtime answers "CUDA driver version
 * is insufficient for CUDA runtime version", which reads as a fault to fix;
 * its words are kept only when a driver is loaded and still refuses.
 */
static void print_version(void)
{
	const char *why = NULL, *r;
	int ndev = us_assemble_device_count(&why);

	printf("unshardfs %s (libfuse %s; CUDA executor %s; ", US_VERSION,
	       fuse_pkgversion(), US_HAVE_CUDA ? "built" : "not built");
	r = no_device_reason(why);
	if (ndev)
		printf("%d CUDA device%s)\n", ndev, ndev == 1 ? "" : "s");
	else
		printf("no CUDA device%s%s)\n", *r ? ": " : "", r);
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
	if (o.version)
		return print_version(), 0;
	if (check_device(&o) != 0)
		return EXIT_USAGE;
	if (!o.inspect && !o.export_cmd &&
	    (us_check_mountpoint(o.mountpoint) < 0 ||
	     us_check_fuse_access(o.allow_other) < 0))
		return EXIT_USAGE;
	rc = prepare(&o, &m);
	if (rc == 0 && o.inspect)
		rc = us_inspect_print(m.sd, &m.src, o.overlay, o.json, stdout) < 0 ?
		     EXIT_REFUSED : 0;
	else if (rc == 0 && o.export_cmd)
		rc = us_export(&o, m.as, m.sd, &m.src, m.views, m.nviews);
	else if (rc == 0)
		rc = serve(&o, &m);
	mount_state_free(&m);
	return rc;
}
