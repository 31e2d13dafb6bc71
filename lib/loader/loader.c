/*
 * loader.c - open a SOURCE, or the SOURCE behind a mount root, as the daemon
 * would, and describe its tensors (unshardfs.h).  Reading is loader_read.c.
 */
#include "loader_impl.h"

#include "cpus.h"
#include "mount_root.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>


/* The remote store options of @lo into @r. */
static enum us_status remote_from_user(const struct us_loader_opts *lo,
				       struct us_remote_opts *r,
				       struct us_err *err)
{
	r->endpoint_url = lo->endpoint_url;
	r->region = lo->region;
	r->profile = lo->profile;
	r->no_sign = lo->no_sign_request;
	r->cache_dir = lo->cache_dir;
	r->block_size = lo->block_size;
	r->cache_dir_size = lo->cache_dir_size;
	r->connections = lo->connections;
	r->retries = lo->retries;
	r->timeout_s = lo->timeout_s;
	r->cache_bytes = lo->cache_size; /* one bound, as the daemon's */
	if (!lo->addressing || us_addressing_parse(lo->addressing, &r->addressing))
		return US_OK;
	return us_err_set(err, US_E_USAGE, "options", "unknown addressing "
			  "'%s' (auto, path, virtual)", lo->addressing);
}

/* The command-line words of @lo into @c (unset fields: the defaults). */
static enum us_status opts_from_user(const struct us_loader_opts *lo,
				     struct us_canon_opts *c, struct us_err *err)
{
	us_canon_opts_init(c);
	if (!lo)
		return US_OK;
	c->so.format = lo->format;
	c->so.recipe = lo->recipe;
	c->so.overlay = lo->overlay;
	c->so.names.no_unwrap = lo->no_unwrap;
	if (lo->nstrip > US_CANON_MAX_STRIP)
		return us_err_set(err, US_E_USAGE, "options", "more than %d "
				  "strip prefixes", US_CANON_MAX_STRIP);
	for (size_t i = 0; i < lo->nstrip; i++) {
		if (!lo->strip_prefix[i] || !*lo->strip_prefix[i])
			return us_err_set(err, US_E_USAGE, "options",
					  "an empty strip prefix");
		c->strip[i] = lo->strip_prefix[i];
	}
	c->so.names.nstrip = lo->nstrip;
	US_TRY(remote_from_user(lo, &c->so.remote, err));
	if (lo->dtype && !us_cast_parse(lo->dtype, &c->so.cast, &c->so.cast_to))
		return us_err_set(err, US_E_USAGE, "options", "unknown dtype "
				  "'%s' (keep, bf16, f16, f32)", lo->dtype);
	if (lo->ties && !us_ties_mode_parse(lo->ties, &c->so.ties))
		return us_err_set(err, US_E_USAGE, "options", "unknown ties "
				  "'%s' (auto, declared, off, equal)", lo->ties);
	if (lo->deepspeed_weights &&
	    !us_ds_weights_parse(lo->deepspeed_weights, &c->so.ds_weights))
		return us_err_set(err, US_E_USAGE, "options", "unknown "
				  "deepspeed_weights '%s' (fp32, module)",
				  lo->deepspeed_weights);
	return US_OK;
}

static bool opts_given(const struct us_loader_opts *lo)
{
	return lo && (lo->format || lo->no_unwrap || lo->nstrip || lo->dtype ||
		      lo->ties || lo->deepspeed_weights || lo->recipe ||
		      lo->overlay || lo->endpoint_url || lo->region ||
		      lo->profile || lo->addressing || lo->no_sign_request ||
		      lo->cache_dir || lo->block_size || lo->cache_dir_size ||
		      lo->connections || lo->retries || lo->timeout_s);
}

/* The value of xattr @name of the directory @fd (a trusted mount root:
 * mount_root.c), malloc'ed and NUL-terminated, or NULL with errno set
 * (ENODATA: not there). */
static char *get_xattr(int fd, const char *name)
{
	for (int tries = 0; tries < 4; tries++) {
		ssize_t n = fgetxattr(fd, name, NULL, 0), m;
		char *v;

		if (n < 0)
			return NULL;
		v = malloc((size_t)n + 1);
		if (!v)
			return errno = ENOMEM, NULL;
		m = fgetxattr(fd, name, v, (size_t)n);
		if (m >= 0 && m <= n) {
			v[m] = '\0';
			return v;
		}
		free(v);
		if (m < 0 && errno != ERANGE)
			return NULL;
	}
	return errno = ERANGE, NULL;
}

/* What the mount root @path (open as @fd) says about itself, into @ld and
 * @c. */
static enum us_status read_mount(struct us_loader *ld, const char *path,
				 int fd, const struct us_loader_opts *lo,
				 struct us_canon_opts *c, char **identity,
				 struct us_err *err)
{
	char *opts = get_xattr(fd, US_XATTR_ROOT_OPTIONS);
	enum us_status rc;

	*identity = get_xattr(fd, US_XATTR_ROOT_IDENTITY);
	if (!opts || !*identity) {
		rc = us_err_set(err, US_E_IO, path, "an unshardfs mount that "
				"does not say its %s: %s", opts ? "identity"
				: "options", strerror(errno));
		goto out;
	}
	rc = us_source_opts_decode(opts, c, err);
	if (rc == US_OK && opts_given(lo)) {
		struct us_canon_opts mine;
		char want[sizeof(ld->options)];

		rc = opts_from_user(lo, &mine, err);
		us_source_opts_canon(&mine.so, want, sizeof(want));
		if (rc == US_OK && strcmp(want, opts) != 0)
			rc = us_err_set(err, US_E_USAGE, path, "mounted with "
					"options %s, not %s (pass SOURCE %s "
					"itself to choose options)", opts, want,
					ld->source);
	}
out:
	free(opts);
	return rc;
}

/* A refusal of the mount's SOURCE, said about the mount. */
static enum us_status mount_refusal(const char *path, const char *source,
				    const struct us_err *why, struct us_err *err)
{
	if (why->status == US_E_IO && strstr(why->msg, "ermission denied"))
		return us_err_set(err, US_E_IO, path, "the mount's SOURCE %s is "
				  "not readable by this process (%s)", source,
				  why->msg);
	return us_err_set(err, why->status, path, "the mount's SOURCE %s: %s",
			  source, why->msg);
}

static bool readable(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return false;
	return access(path, S_ISDIR(st.st_mode) ? R_OK | X_OK : R_OK) == 0;
}

/* Build the state dict (the daemon's us_source_open, the same options) and
 * check a mount's identity against it. */
static enum us_status open_sd(struct us_loader *ld, const char *path,
			      struct us_canon_opts *c, const char *identity,
			      struct us_err *err)
{
	struct us_err why = {0};
	struct us_dir dir;
	char now[64];

	us_source_opts_canon(&c->so, ld->options, sizeof(ld->options));
	/* The daemon may read what this process may not: say that, rather
	 * than what a reader makes of a directory it cannot list. */
	if (ld->mounted && !us_remote_is_url(ld->source) &&
	    !readable(ld->source))
		return us_err_set(err, US_E_IO, path, "the mount's SOURCE %s is "
				  "not readable by this process: %s", ld->source,
				  strerror(errno));
	if (us_source_open(ld->source, &c->so, &ld->sd, &dir, &why) != US_OK)
		return ld->mounted ? mount_refusal(path, ld->source, &why, err)
				   : (*err = why, why.status);
	us_dir_close(&dir);
	if (!identity)
		return US_OK;
	us_sd_identity(ld->sd, now, sizeof(now));
	if (strcmp(now, identity) != 0)
		return us_err_set(err, US_E_IO, path, "SOURCE %s changed since "
				  "it was mounted (its files are not the ones "
				  "the mount serves): remount it, or load "
				  "SOURCE itself", ld->source);
	return US_OK;
}

static unsigned default_threads(const struct us_loader_opts *lo)
{
	if (lo && lo->threads)
		return lo->threads < US_LOADER_MAX_THREADS ? lo->threads : US_LOADER_MAX_THREADS;
	return us_online_cpus(1, US_LOADER_MAX_THREADS);
}

/* @path as a SOURCE: a URL as given, anything local resolved. */
static enum us_status plain_source(struct us_loader *ld, const char *path,
				   struct us_err *err)
{
	/* A URL names no mount (and no local file): the store itself. */
	if (us_remote_is_url(path))
		ld->source = strdup(path);
	else if (!(ld->source = realpath(path, NULL)) && errno != ENOMEM)
		return us_err_set(err, US_E_IO, path, "cannot access SOURCE: %s",
				  strerror(errno));
	if (!ld->source)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	return US_OK;
}

/* The options, and for a mount root its SOURCE and identity: only a live
 * unshardfs mount of this user or root is believed (mount_root.c); any
 * other path is a SOURCE, whatever xattrs it carries. */
static enum us_status resolve(struct us_loader *ld, const char *path,
			      const struct us_loader_opts *lo,
			      struct us_canon_opts *c, char **identity,
			      struct us_err *err)
{
	int fd = us_remote_is_url(path) ? -1 : us_mount_root_open(path);
	enum us_status rc;

	if (fd >= 0) {
		/* A mount that will not tell this process (fs/root_xattr.c
		 * answers only its owner and root) is read as what it serves. */
		ld->source = get_xattr(fd, US_XATTR_ROOT_SOURCE);
		ld->mounted = ld->source != NULL;
	}
	if (ld->mounted)
		rc = read_mount(ld, path, fd, lo, c, identity, err);
	else
		rc = plain_source(ld, path, err);
	if (fd >= 0)
		close(fd);
	if (rc != US_OK || ld->mounted)
		return rc;
	return opts_from_user(lo, c, err);
}

static enum us_status loader_init(struct us_loader *ld, const char *path,
				  const struct us_loader_opts *lo,
				  struct us_err *err)
{
	struct us_assembler_opts ao = { .cache_size = US_ASSEMBLER_CACHE_DEFAULT };
	struct us_canon_opts c;
	char *identity = NULL;
	enum us_status rc;

	rc = resolve(ld, path, lo, &c, &identity, err);
	if (rc == US_OK)
		rc = open_sd(ld, path, &c, identity, err);
	free(identity);
	if (rc != US_OK)
		return rc;
	if (lo && lo->cache_size)
		ao.cache_size = lo->cache_size;
	ld->threads = default_threads(lo);
	ld->hugepages = lo && lo->hugepages;
	return us_assembler_new(&ao, &ld->as, err);
}

enum us_status us_loader_open(const char *path,
			      const struct us_loader_opts *opts,
			      struct us_loader **out, struct us_err *err)
{
	struct us_loader *ld;
	enum us_status rc;

	if (!out || !path)
		return us_err_set(err, US_E_USAGE, ".", "no %s",
				  out ? "path" : "place for the loader");
	*out = NULL;
	ld = calloc(1, sizeof(*ld));
	if (!ld)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	rc = loader_init(ld, path, opts, err);
	if (rc != US_OK) {
		us_loader_close(ld);
		return rc;
	}
	*out = ld;
	return US_OK;
}

void us_loader_close(struct us_loader *ld)
{
	if (!ld)
		return;
	us_assembler_free(ld->as);
	us_sd_free(ld->sd);
	free(ld->source);
	free(ld);
}

/* The accessors answer a NULL loader (a caller's use after close, through
 * a binding that cleared its handle) as an empty one, rather than crash. */
const char *us_loader_source(const struct us_loader *ld)
{
	return ld ? ld->source : NULL;
}

const char *us_loader_options(const struct us_loader *ld)
{
	return ld ? ld->options : NULL;
}

bool us_loader_mounted(const struct us_loader *ld)
{
	return ld && ld->mounted;
}

size_t us_loader_count(const struct us_loader *ld)
{
	return ld ? ld->sd->ntensors : 0;
}

const struct us_tensor *us_ld_tensor(const struct us_loader *ld, size_t i,
				     struct us_err *err)
{
	if (!ld) {
		us_err_set(err, US_E_USAGE, ".", "no loader (closed?)");
		return NULL;
	}
	if (i < ld->sd->ntensors)
		return &ld->sd->tensors[i];
	us_err_set(err, US_E_USAGE, ".", "no tensor %zu (%zu tensors)", i,
		   ld->sd->ntensors);
	return NULL;
}

enum us_status us_loader_info(const struct us_loader *ld, size_t i,
			      struct us_loader_tensor *out, struct us_err *err)
{
	const struct us_tensor *t = us_ld_tensor(ld, i, err);

	if (!t)
		return US_E_USAGE;
	if (!out)
		return us_err_set(err, US_E_USAGE, t->name, "no place for its "
				  "description");
	*out = (struct us_loader_tensor){
		.name = t->name, .dtype = us_dtype_name(t->dtype),
		.ndim = t->ndim, .shape = t->shape, .nbytes = t->nbytes,
		.tie = t->tie_of ? (size_t)(t->tie_of - ld->sd->tensors) : i,
	};
	return US_OK;
}

uint32_t us_loader_chunk(const struct us_loader *ld, size_t i, uint32_t k,
			 const uint64_t **offsets, const uint64_t **sizes)
{
	const struct us_tensor *t;

	if (!ld || i >= ld->sd->ntensors)
		return 0;
	t = &ld->sd->tensors[i];
	if (k < t->nchunks && offsets && sizes) {
		*offsets = t->chunks[k].offsets;
		*sizes = t->chunks[k].sizes;
	}
	return t->nchunks;
}

long us_loader_find(const struct us_loader *ld, const char *name)
{
	const struct us_tensor *t = ld && name ? us_sd_find(ld->sd, name) : NULL;

	return t ? (long)(t - ld->sd->tensors) : -1;
}
