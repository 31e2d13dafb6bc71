/* opts.c - command-line parsing (no getopt: -o and positionals interleave). */
#include "opts.h"
#include "source/canon.h"

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_CACHE_SIZE (256ull << 20)

void us_opts_usage(FILE *out)
{
	fputs(
"usage: unshardfs [OPTIONS] SOURCE MOUNTPOINT\n"
"       unshardfs inspect [--json] [OPTIONS] SOURCE\n"
"       unshardfs export [OPTIONS] SOURCE OUT\n"
"\n"
"Mount a sharded training checkpoint SOURCE read-only at MOUNTPOINT as one\n"
"consolidated state dict (model.safetensors, pytorch_model.bin, tensors/),\n"
"with the checkpoint's other files passed through.  Unmount with:\n"
"fusermount3 -u MOUNTPOINT.  inspect prints the resolved tensor table;\n"
"export writes a view to OUT without FUSE: a file, '-' for stdout (not a\n"
"terminal), or a directory (an existing one, or OUT ending in '/'; always\n"
"with --max-shard-size or --optimizer): a complete loadable directory, the\n"
"view's own file name(s) and every file the mount passes through.\n"
"\n"
"general options:\n"
"    -h, --help             print this help and exit\n"
"    -V, --version          print the version and exit\n"
"    -q                     no progress messages (default: progress on a\n"
"                           terminal)\n"
"\n"
"mount options:\n"
"    -f                     stay in the foreground (default: daemonize and\n"
"                           log to syslog)\n"
"    -d                     FUSE debug output (implies -f)\n"
"    -o OPT[,OPT...]        FUSE/mount options (e.g. allow_other); the mount\n"
"                           is always read-only: rw is ignored, and so are\n"
"                           mount(8)-only options (defaults, auto, noauto,\n"
"                           user, users, nofail, _netdev, x-*, comment=*);\n"
"                           -o NAME=VALUE sets the option --NAME=VALUE below\n"
"                           ('_' for '-'; fstab's way to pass them); any\n"
"                           other option is an error\n"
"    -o uid=N,gid=N         owner (numeric ids) of every file and directory\n"
"                           served (default: as in SOURCE)\n"
"    -o umask=M             permission bits of everything served: 0555 for\n"
"                           directories, 0444 (and SOURCE's execute bits)\n"
"                           for files, less octal M (default: as in SOURCE,\n"
"                           without write bits)\n"
"    --views=LIST           which of safetensors,bin,tensors,optimizer\n"
"                           appear, comma-separated: model.safetensors (or\n"
"                           its shards), pytorch_model.bin, tensors/,\n"
"                           optimizer.safetensors and optimizer.json\n"
"                           (default: all)\n"
"    --direct-io=on|off     on: read() of the views goes straight into the\n"
"                           reader's buffer, past the FUSE page cache (large\n"
"                           reads: faster, less memory; small reads: each a\n"
"                           round trip), where the kernel still lets such\n"
"                           files be mapped shared (Linux 6.6+; otherwise\n"
"                           off) (default: off)\n"
"\n",
	      out);
	fputs(
"checkpoint options (mount, inspect and export; each --NAME=VALUE may also\n"
"be given as --NAME VALUE; SIZE: a byte count, with KB/MB/GB/TB for powers\n"
"of 1000 as save_pretrained reads \"5GB\", KiB/MiB/GiB/TiB or K/M/G/T for\n"
"powers of 1024, any case):\n"
"    --format=FMT           auto|safetensors|torch|dcp|deepspeed|\n"
"                           deepspeed-universal (default: auto)\n"
"    --no-unwrap            keep source names exactly (default: unwrap)\n"
"    --strip-prefix=P       remove P from the start of every name where it ends\n"
"                           on a '.' (repeatable, up to 16; default: none)\n"
"    --dtype=T              keep|bf16|f16|f32, or as torch names them\n"
"                           (bfloat16, float16, half, float32): cast the\n"
"                           model's floating tensors in every view, as\n"
"                           torch's .to() does; the\n"
"                           optimizer stays as stored (default: keep)\n"
"    --device=D             auto|cpu|cuda[:N] (default: auto)\n"
"    --cache-size=SIZE      bound on cached assembled data\n"
"                           (default: 256M)\n"
"    --ties=MODE            auto|declared|off|equal: auto links names the\n"
"                           checkpoint declares or evidences as one tensor;\n"
"                           equal also links any equal copies (risky: drops\n"
"                           distinct parameters that happen to match)\n"
"                           (default: auto)\n"
"    --deepspeed-weights=W  fp32|module: DeepSpeed's fp32 master weights, or\n"
"                           ZeRO-1/2's 16-bit module weights as saved\n"
"                           (default: fp32)\n"
"    --max-shard-size=SIZE  serve model-0000K-of-0000N.safetensors and\n"
"                           model.safetensors.index.json, shards of at most\n"
"                           SIZE bytes (a bigger tensor gets its own\n"
"                           shard) instead of model.safetensors (default: off)\n"
"    --recipe=R             NAME|FILE|auto: map a trainer's names and layouts\n"
"                           to Hugging Face's, lazily (built-in: torchtitan-\n"
"                           llama3, torchtitan-qwen3, torchtitan-deepseek-v3;\n"
"                           FILE: docs/recipes.md) (default: names as stored)\n"
"    --overlay=DIR          add DIR's files (config.json, tokenizer files) to\n"
"                           the passthrough files; they win over SOURCE's\n"
"                           files of the same name (mount, inspect; export\n"
"                           writes them into OUTDIR/)\n"
"\n",
	      out);
	fputs(
"remote SOURCE options (SOURCE s3://BUCKET[/PREFIX], or an http:// or\n"
"https:// URL of one file or of a directory's index; mount, inspect and\n"
"export; credentials as the AWS tools take them, never options):\n"
"    --endpoint-url=URL     an S3-compatible store's endpoint (default:\n"
"                           AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else\n"
"                           AWS's for the region)\n"
"    --region=R             the bucket's region (default: AWS_REGION,\n"
"                           AWS_DEFAULT_REGION, the profile's, us-east-1)\n"
"    --profile=P            the credentials/config profile (default:\n"
"                           AWS_PROFILE, else default)\n"
"    --addressing=A         auto|path|virtual: path-style URLs\n"
"                           (endpoint/BUCKET/KEY) or virtual-hosted ones\n"
"                           (BUCKET.endpoint/KEY) (default: auto, path-style\n"
"                           with --endpoint-url)\n"
"    --no-sign-request      anonymous requests, for public buckets (default:\n"
"                           signed)\n"
"    --block-size=SIZE      the unit fetched and cached (default: 8M)\n"
"    --cache-dir=DIR        keep fetched blocks in DIR across mounts\n"
"                           (default: memory only)\n"
"    --cache-dir-size=SIZE  bound on --cache-dir (default: 10G)\n"
"    --connections=N        parallel requests, 1 to 256 (default: 16)\n"
"    --retries=N            retries of a failed request, then EIO, 1 to 100\n"
"                           (default: 5)\n"
"    --timeout=S            seconds each try of a request may take, 1 to 3600\n"
"                           (default: 30)\n"
"\n"
"export options:\n"
"    --view=V               safetensors|bin: model.safetensors (or its shards)\n"
"                           or pytorch_model.bin (default: safetensors)\n"
"    --optimizer            also write optimizer.safetensors and\n"
"                           optimizer.json (OUT a directory; default: off)\n"
"    --force                replace output files that already exist\n"
"                           (default: refuse, exit status 1)\n"
"\n"
"exit status: 0 mounted (or inspect/export done), 1 usage error or the\n"
"mount failed, 2 the checkpoint cannot be served or written (one line on\n"
"stderr: unshardfs: <file>: <problem>)\n",
	      out);
}

__attribute__((format(printf, 1, 2)))
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("unshardfs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see unshardfs --help)\n", stderr);
	return -1;
}

/* The index of @v in the NULL-terminated @names, or -1. */
static int index_of(const char *v, const char *const *names)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(v, names[i]) == 0)
			return i;
	return -1;
}

const char *const us_format_names[] = {"auto", "safetensors", "torch", "dcp",
				       "deepspeed", "deepspeed-universal", NULL};

/*
 * Size suffixes, case-insensitive: KB/MB/GB/TB are powers of 1000, as
 * huggingface_hub and save_pretrained(max_shard_size="5GB") read them;
 * KiB/MiB/GiB/TiB and the bare K/M/G/T (dd, sort, --cache-size=256M) are
 * powers of 1024; a bare number is bytes.
 */
static const struct {
	const char *suffix;
	uint64_t unit;
} size_units[] = {
	{"", 1},
	{"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
	{"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
	{"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
	{"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
};

/* A decimal (or, @base 8, octal) number of digits only, at most @max:
 * strtoull alone takes " 5", "+5" and "-1" (as 2^64 - 1). */
static bool parse_number(const char *s, int base, uint64_t max, uint64_t *out,
			 const char **rest)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > (base == 8 ? '7' : '9'))
		return false;
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || end == s || v > max)
		return false;
	*out = v;
	if (rest)
		*rest = end;
	return rest || *end == '\0';
}

static bool parse_size(const char *s, uint64_t *out)
{
	const char *end;
	uint64_t v;

	if (!parse_number(s, 10, UINT64_MAX, &v, &end))
		return false;
	for (size_t i = 0; i < sizeof(size_units) / sizeof(*size_units); i++)
		if (!strcasecmp(end, size_units[i].suffix))
			return !__builtin_mul_overflow(v, size_units[i].unit, out);
	return false;
}

/* ---- one setter per option (the table below names them) ---------------- */

static int set_format(struct us_opts *o, const char *v)
{
	int f = index_of(v, us_format_names);

	if (f < 0)
		return usage_error("unknown --format '%s'", v);
	o->format = (enum us_format)f;
	return 0;
}

/* --dtype as this tool and as torch spell it (torch.bfloat16, "half"): the
 * words live in lib (source/canon.h), so the loader takes the same ones. */
static int set_dtype(struct us_opts *o, const char *v)
{
	if (us_cast_parse(v, &o->cast, &o->cast_to))
		return 0;
	return usage_error("unknown --dtype '%s' (keep, bf16, f16, f32 or "
			   "torch's bfloat16, float16, float32)", v);
}

/* auto, cpu, cuda or cuda:N, N in digits only and at most 4096. */
static int set_device(struct us_opts *o, const char *v)
{
	uint64_t n = 0;

	o->device_arg = v;
	if (!strcmp(v, "auto"))
		return o->device = US_DEVICE_AUTO, 0;
	if (!strcmp(v, "cpu"))
		return o->device = US_DEVICE_CPU, 0;
	if (strcmp(v, "cuda") != 0 &&
	    (strncmp(v, "cuda:", 5) != 0 || !parse_number(v + 5, 10, 4096, &n, NULL)))
		return usage_error("unknown --device '%s'", v);
	o->device = US_DEVICE_CUDA;
	o->cuda_index = (int)n;
	return 0;
}

static int set_ties(struct us_opts *o, const char *v)
{
	return us_ties_mode_parse(v, &o->ties) ? 0
		: usage_error("unknown --ties '%s'", v);
}

static int set_ds_weights(struct us_opts *o, const char *v)
{
	return us_ds_weights_parse(v, &o->ds_weights) ? 0
		: usage_error("unknown --deepspeed-weights '%s'", v);
}

static int set_direct_io(struct us_opts *o, const char *v)
{
	static const char *const names[] = {"off", "on", NULL};
	int on = index_of(v, names);

	if (on < 0)
		return usage_error("unknown --direct-io '%s'", v);
	o->direct_io = on;
	return 0;
}

static int set_view(struct us_opts *o, const char *v)
{
	static const char *const names[] = {"safetensors", "bin", NULL};
	int view = index_of(v, names);

	if (view < 0)
		return usage_error("unknown --view '%s'", v);
	o->view = view ? US_EXPORT_BIN : US_EXPORT_SAFETENSORS;
	return 0;
}

/* The --views names, in the order of the US_VIEW_* bits. */
static const char *const view_names[] = {"safetensors", "bin", "tensors",
					 "optimizer", NULL};

/* --views=LIST: comma-separated view_names. */
static int set_views(struct us_opts *o, const char *v)
{
	static const char valid[] = "safetensors, bin, tensors, optimizer";
	char one[32];

	o->views = 0;
	o->views_open = true; /* -o views=a,b: b comes as its own item */
	for (const char *p = v;; p++) {
		size_t n = strcspn(p, ",");
		int bit;

		if (n >= sizeof(one))
			n = sizeof(one) - 1;
		memcpy(one, p, n);
		one[n] = '\0';
		bit = index_of(one, view_names);
		if (bit < 0)
			return usage_error("unknown view '%s' in --views=%s "
					   "(valid: %s)", one, v, valid);
		o->views |= 1u << bit;
		p += strcspn(p, ",");
		if (!*p)
			return 0;
	}
}

static int set_max_shard_size(struct us_opts *o, const char *v)
{
	return parse_size(v, &o->max_shard_size) && o->max_shard_size ? 0
		: usage_error("bad --max-shard-size '%s'", v);
}

static int set_cache_size(struct us_opts *o, const char *v)
{
	return parse_size(v, &o->cache_size) ? 0
		: usage_error("bad --cache-size '%s'", v);
}

static int set_recipe(struct us_opts *o, const char *v)
{
	if (!*v)
		return usage_error("bad --recipe '' (NAME, FILE or auto)");
	o->recipe = v;
	return 0;
}

static int set_overlay(struct us_opts *o, const char *v)
{
	if (!*v)
		return usage_error("bad --overlay '' (a directory)");
	o->overlay = v;
	return 0;
}

/* ---- a remote SOURCE's store (remote.h's struct us_remote_opts) -------- */

/* A non-empty string kept as given: --endpoint-url, --region, --profile,
 * --cache-dir.  @name for the message. */
static int set_text(const char **field, const char *name, const char *v)
{
	if (!*v)
		return usage_error("bad --%s ''", name);
	*field = v;
	return 0;
}

static int set_endpoint_url(struct us_opts *o, const char *v)
{
	if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0)
		return usage_error("bad --endpoint-url '%s' (http://HOST[:PORT] "
				   "or https://...)", v);
	o->remote.endpoint_url = v;
	return 0;
}

static int set_region(struct us_opts *o, const char *v)
{
	return set_text(&o->remote.region, "region", v);
}

static int set_profile(struct us_opts *o, const char *v)
{
	return set_text(&o->remote.profile, "profile", v);
}

static int set_cache_dir(struct us_opts *o, const char *v)
{
	return set_text(&o->remote.cache_dir, "cache-dir", v);
}

static int set_addressing(struct us_opts *o, const char *v)
{
	if (!us_addressing_parse(v, &o->remote.addressing))
		return usage_error("unknown --addressing '%s' (auto, path or "
				   "virtual)", v);
	return 0;
}

static int set_block_size(struct us_opts *o, const char *v)
{
	return parse_size(v, &o->remote.block_size) && o->remote.block_size
		? 0 : usage_error("bad --block-size '%s'", v);
}

static int set_cache_dir_size(struct us_opts *o, const char *v)
{
	return parse_size(v, &o->remote.cache_dir_size) ? 0
		: usage_error("bad --cache-dir-size '%s'", v);
}

/* A count in [@min, @max] into *@out: --connections, --retries, --timeout. */
static int set_count(unsigned *out, const char *name, const char *v,
		     uint64_t min, uint64_t max)
{
	uint64_t n;

	if (!parse_number(v, 10, max, &n, NULL) || n < min)
		return usage_error("bad --%s '%s' (%llu to %llu)", name, v,
				   (unsigned long long)min,
				   (unsigned long long)max);
	*out = (unsigned)n;
	return 0;
}

static int set_connections(struct us_opts *o, const char *v)
{
	return set_count(&o->remote.connections, "connections", v, 1, 256);
}

/* At least 1: remote.h reads 0 as its default (5), so --retries=0 would
 * quietly mean five. */
static int set_retries(struct us_opts *o, const char *v)
{
	return set_count(&o->remote.retries, "retries", v, 1, 100);
}

static int set_timeout(struct us_opts *o, const char *v)
{
	return set_count(&o->remote.timeout_s, "timeout", v, 1, 3600);
}

static int set_strip_prefix(struct us_opts *o, const char *v)
{
	if (o->nstrip == US_MAX_STRIP || !*v)
		return usage_error("bad or too many --strip-prefix '%s'", v);
	o->strip_prefix[o->nstrip++] = v;
	return 0;
}

/* uid= and gid=: a number, as sshfs and ratarmount take them (a name
 * would need NSS in a daemon that may run from fstab before it is up). */
static int set_uid(struct us_opts *o, const char *v)
{
	uint64_t n;

	if (!parse_number(v, 10, (uid_t)-2, &n, NULL))
		return usage_error("bad -o uid=%s (a numeric user id)", v);
	o->uid = (uid_t)n;
	o->set_uid = true;
	return 0;
}

static int set_gid(struct us_opts *o, const char *v)
{
	uint64_t n;

	if (!parse_number(v, 10, (gid_t)-2, &n, NULL))
		return usage_error("bad -o gid=%s (a numeric group id)", v);
	o->gid = (gid_t)n;
	o->set_gid = true;
	return 0;
}

static int set_umask(struct us_opts *o, const char *v)
{
	uint64_t n;

	if (!parse_number(v, 8, 0777, &n, NULL))
		return usage_error("bad -o umask=%s (octal, 000 to 777)", v);
	o->umask = (mode_t)n;
	o->set_umask = true;
	return 0;
}

/*
 * Every long option, once: its setter when it takes a value (then
 * --NAME=VALUE, --NAME VALUE and -o NAME=VALUE all reach it) or the flag it
 * sets, and where it may appear.  -o only: the fstab/sshfs way (uid=,
 * gid=, umask=).
 */
enum {
	AT_MOUNT = 1u << 0,
	AT_INSPECT = 1u << 1,
	AT_EXPORT = 1u << 2,
	AT_ALL = AT_MOUNT | AT_INSPECT | AT_EXPORT,
	DASH_O_ONLY = 1u << 3, /* -o NAME=VALUE, never --NAME */
	NOT_DASH_O = 1u << 4,  /* --NAME only */
};

/* A valued option calls its setter; a flag (no value) sets the bool at
 * this offset of struct us_opts. */
#define SET(fn) fn, 0
#define FLAG(field) NULL, offsetof(struct us_opts, field)

static const struct opt_def {
	const char *name; /* without the "--" */
	unsigned where;
	int (*set)(struct us_opts *o, const char *v); /* NULL: a flag */
	size_t flag;
} opt_table[] = {
	{"format", AT_ALL, SET(set_format)},
	{"no-unwrap", AT_ALL, FLAG(no_unwrap)},
	{"strip-prefix", AT_ALL, SET(set_strip_prefix)},
	{"dtype", AT_ALL, SET(set_dtype)},
	{"device", AT_ALL, SET(set_device)},
	{"cache-size", AT_ALL, SET(set_cache_size)},
	{"ties", AT_ALL, SET(set_ties)},
	{"deepspeed-weights", AT_ALL, SET(set_ds_weights)},
	{"max-shard-size", AT_ALL, SET(set_max_shard_size)},
	{"direct-io", AT_ALL, SET(set_direct_io)},
	{"recipe", AT_ALL, SET(set_recipe)},
	{"overlay", AT_ALL, SET(set_overlay)},
	{"endpoint-url", AT_ALL, SET(set_endpoint_url)},
	{"region", AT_ALL, SET(set_region)},
	{"profile", AT_ALL, SET(set_profile)},
	{"addressing", AT_ALL, SET(set_addressing)},
	{"no-sign-request", AT_ALL, FLAG(remote.no_sign)},
	{"block-size", AT_ALL, SET(set_block_size)},
	{"cache-dir", AT_ALL, SET(set_cache_dir)},
	{"cache-dir-size", AT_ALL, SET(set_cache_dir_size)},
	{"connections", AT_ALL, SET(set_connections)},
	{"retries", AT_ALL, SET(set_retries)},
	{"timeout", AT_ALL, SET(set_timeout)},
	{"views", AT_MOUNT, SET(set_views)},
	{"view", AT_EXPORT, SET(set_view)},
	{"uid", AT_MOUNT | DASH_O_ONLY, SET(set_uid)},
	{"gid", AT_MOUNT | DASH_O_ONLY, SET(set_gid)},
	{"umask", AT_MOUNT | DASH_O_ONLY, SET(set_umask)},
	{"help", AT_ALL | NOT_DASH_O, FLAG(help)},
	{"version", AT_ALL | NOT_DASH_O, FLAG(version)},
	{"json", AT_INSPECT | NOT_DASH_O, FLAG(json)},
	{"force", AT_EXPORT | NOT_DASH_O, FLAG(force)},
	{"optimizer", AT_EXPORT | NOT_DASH_O, FLAG(optimizer)},
};

static unsigned command_of(const struct us_opts *o)
{
	return o->inspect ? AT_INSPECT : o->export_cmd ? AT_EXPORT : AT_MOUNT;
}

/* Apply entry @d with value @v (NULL for a flag): 0 or -1. */
static int opt_apply(struct us_opts *o, const struct opt_def *d, const char *v)
{
	if (d->set)
		return d->set(o, v);
	*(bool *)((char *)o + d->flag) = true;
	return 0;
}

/* The entry named @name (@len bytes) for this command and form, or NULL. */
static const struct opt_def *opt_find(const struct us_opts *o, const char *name,
				      size_t len, bool dash_o)
{
	for (size_t i = 0; i < sizeof(opt_table) / sizeof(*opt_table); i++) {
		const struct opt_def *d = &opt_table[i];

		if (strlen(d->name) != len || strncmp(d->name, name, len) != 0)
			continue;
		if (!(d->where & command_of(o)) ||
		    (d->where & (dash_o ? NOT_DASH_O : DASH_O_ONLY)))
			return NULL;
		return d;
	}
	return NULL;
}

/* A long option @a ("--NAME", "--NAME=VALUE"), the next argument being its
 * value in the "--NAME VALUE" form.  0, 1 when it is not ours, -1 after a
 * usage error. */
static int parse_long(struct us_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *eq = strchr(a, '=');
	size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
	const struct opt_def *d = opt_find(o, a + 2, len, false);

	if (!d)
		return 1;
	if (!d->set) /* a flag */
		return eq ? usage_error("--%s takes no value", d->name)
			  : opt_apply(o, d, NULL);
	if (eq)
		return opt_apply(o, d, eq + 1);
	if (*i + 1 >= argc)
		return usage_error("%s needs a value", a);
	return opt_apply(o, d, argv[++*i]);
}

/* Options only mount(8), mount.fuse3 or systemd act on (fstab's fourth
 * field); libfuse would refuse them as unknown.  rw: the mount is read-only. */
static bool mount_only(const char *opt)
{
	static const char *const names[] = {"defaults", "auto", "noauto",
		"user", "nouser", "users", "owner", "group", "nofail", "_netdev",
		"rw", "ro", NULL};

	return index_of(opt, names) >= 0 || !strncmp(opt, "x-", 2) ||
	       !strncmp(opt, "comment=", 8);
}

/*
 * What libfuse 3's fuse_session_new accepts (its fuse_ll_opts and
 * fuse_mount_opts); "NAME=" takes a value.  Anything else it would refuse
 * with two lines of its own, after SOURCE was read: we refuse it first.
 */
static bool fuse_known(const char *opt)
{
	static const char *const names[] = {"debug", "allow_root",
		"allow_other", "blkdev", "auto_unmount", "default_permissions",
		"suid", "nosuid", "dev", "nodev", "exec", "noexec", "async",
		"sync", "dirsync", "atime", "noatime", NULL};
	static const char *const valued[] = {"fsname=", "subtype=",
		"max_read=", "blksize=", "context=", "fscontext=", "defcontext=",
		"rootcontext=", "user=", NULL};

	if (index_of(opt, names) >= 0)
		return true;
	for (size_t i = 0; valued[i]; i++)
		if (!strncmp(opt, valued[i], strlen(valued[i])) &&
		    opt[strlen(valued[i])])
			return true;
	return false;
}

/* -o NAME[=VALUE] naming one of our options ('_' for '-', so fstab can
 * write max_shard_size=2G): 0 handled, 1 not ours, -1 a usage error. */
static int unshardfs_opt(struct us_opts *o, const char *item)
{
	const char *eq = strchr(item, '=');
	size_t len = eq ? (size_t)(eq - item) : strlen(item);
	char name[64];
	const struct opt_def *d;

	if (len >= sizeof(name))
		return 1;
	for (size_t i = 0; i < len; i++)
		name[i] = item[i] == '_' ? '-' : item[i];
	d = opt_find(o, name, len, true);
	if (!d)
		return 1;
	if (!d->set != !eq)
		return usage_error(d->set ? "-o %s needs a value (-o %s=...)"
				   : "-o %s takes no value", d->name, d->name);
	return opt_apply(o, d, eq ? eq + 1 : NULL);
}

/* Copy @s (@n bytes) and a NUL into o->store; NULL when it is full. */
static char *store(struct us_opts *o, const char *s, size_t n)
{
	char *p = o->store + o->nstore;

	if (o->nstore + n + 1 > sizeof(o->store))
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	o->nstore += n + 1;
	return p;
}

/*
 * -o splits on commas, so "-o views=safetensors,tensors" arrives as
 * "views=safetensors" and then "tensors": a bare view name right after a
 * views= item continues its list (no FUSE option has such a name).
 */
static bool more_views(struct us_opts *o, const char *opt)
{
	int bit = index_of(opt, view_names);

	if (!o->views_open || bit < 0)
		return o->views_open = false;
	o->views |= 1u << bit;
	return true;
}

/* Our options take libfuse's "\," for a comma inside an -o item. */
static void unescape_commas(char *s)
{
	char *d = s;

	for (; *s; s++)
		if (!(s[0] == '\\' && s[1] == ','))
			*d++ = *s;
	*d = '\0';
}

static int add_one_fuse_opt(struct us_opts *o, const char *item, size_t n)
{
	char *opt = store(o, item, n);
	char *ours = store(o, item, n);
	int rc;

	if (!opt || !ours)
		return usage_error("%s options too long", "-o");
	if (!*opt || mount_only(opt) || more_views(o, opt))
		return 0;
	unescape_commas(ours);
	rc = unshardfs_opt(o, ours);
	if (rc <= 0)
		return rc;
	if (!fuse_known(opt))
		return usage_error("unknown -o option '%s'", opt);
	if (o->nfuse_opts == US_MAX_FUSE_OPTS)
		return usage_error("too many %s options", "-o");
	if (!strcmp(opt, "allow_other") || !strcmp(opt, "allow_root"))
		o->allow_other = opt; /* fusermount3 wants user_allow_other */
	o->fuse_opts[o->nfuse_opts++] = opt;
	return 0;
}

/* Split one -o argument on commas (libfuse's "\,"-escapes are not split). */
static int add_fuse_opt(struct us_opts *o, const char *v)
{
	const char *p;

	if (!v)
		return usage_error("%s needs an argument", "-o");
	if (o->export_cmd || o->inspect)
		return usage_error("%s is a mount option", "-o");
	o->views_open = false;
	for (p = v; ; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			continue;
		}
		if (*p != ',' && *p)
			continue;
		if (add_one_fuse_opt(o, v, (size_t)(p - v)) < 0)
			return -1;
		if (!*p)
			return 0;
		v = p + 1;
	}
}

static int parse_short(struct us_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i];

	if ((!strcmp(a, "-f") || !strcmp(a, "-d")) && (o->export_cmd || o->inspect))
		return usage_error("%s is a mount option", a);
	if (!strcmp(a, "-f"))
		return o->foreground = true, 0;
	if (!strcmp(a, "-d"))
		return o->debug = o->foreground = true, 0;
	if (!strcmp(a, "-q"))
		return o->quiet = true, 0;
	if (!strcmp(a, "-h"))
		return o->help = true, 0;
	if (!strcmp(a, "-V"))
		return o->version = true, 0;
	if (!strcmp(a, "-o"))
		return add_fuse_opt(o, *i + 1 < argc ? argv[++*i] : NULL);
	if (!strncmp(a, "-o", 2))
		return add_fuse_opt(o, a + 2);
	return usage_error("unknown option '%s'", a);
}

static void set_defaults(struct us_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->format = US_FORMAT_AUTO;
	o->device = US_DEVICE_AUTO;
	o->device_arg = "auto";
	o->ties = US_TIES_AUTO;
	o->ds_weights = US_DS_WEIGHTS_FP32;
	o->view = US_EXPORT_SAFETENSORS;
	o->views = US_VIEWS_ALL;
	o->cache_size = DEFAULT_CACHE_SIZE;
}

/* SOURCE, then MOUNTPOINT (mount) or OUT (export). */
static int positional(struct us_opts *o, const char *a)
{
	if (!o->source)
		o->source = a;
	else if (!o->mountpoint && !o->inspect && !o->export_cmd)
		o->mountpoint = a;
	else if (!o->out && o->export_cmd)
		o->out = a;
	else
		return usage_error("unexpected argument '%s'", a);
	return 0;
}

static int check_complete(const struct us_opts *o)
{
	if (o->help || o->version)
		return 0;
	if (o->inspect && !o->source)
		return usage_error("usage: unshardfs inspect [--json] SOURCE");
	if (o->export_cmd && (!o->source || !o->out))
		return usage_error("usage: unshardfs export [OPTIONS] SOURCE OUT");
	if (!o->inspect && !o->export_cmd && (!o->source || !o->mountpoint))
		return usage_error("usage: unshardfs [OPTIONS] SOURCE MOUNTPOINT");
	if (o->max_shard_size && o->view != US_EXPORT_SAFETENSORS)
		return usage_error("--max-shard-size shards the safetensors view, "
				   "not --view=bin");
	return 0;
}

int us_opts_parse(struct us_opts *o, int argc, char **argv)
{
	int i = 1, rc;

	set_defaults(o);
	if (argc > 1 && !strcmp(argv[1], "inspect")) {
		o->inspect = true;
		i = 2;
	} else if (argc > 1 && !strcmp(argv[1], "export")) {
		o->export_cmd = true;
		i = 2;
	}
	for (; i < argc; i++) {
		const char *a = argv[i];

		if (a[0] == '-' && a[1] == '-' && a[2] &&
		    (rc = parse_long(o, argc, argv, &i)) <= 0) {
			if (rc < 0)
				return -1;
		} else if (a[0] == '-' && a[1]) {
			if (parse_short(o, argc, argv, &i) < 0)
				return -1;
		} else if (positional(o, a) < 0) {
			return -1;
		}
	}
	return check_complete(o);
}
