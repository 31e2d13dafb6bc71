/* opts.c - command-line parsing (no getopt: -o and positionals interleave). */
#include "opts.h"

#include <errno.h>
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
"                           ('_' for '-'; fstab's way to pass them)\n"
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
"\n"
"export options:\n"
"    --view=V               safetensors|bin: model.safetensors (or its shards)\n"
"                           or pytorch_model.bin (default: safetensors)\n"
"    --optimizer            also write optimizer.safetensors and\n"
"                           optimizer.json (OUT a directory; default: off)\n"
"    --force                replace output files that already exist\n"
"                           (default: refuse, exit status 1)\n"
"\n"
"exit status: 0 mounted (or inspect/export done), 1 usage error, 2 the\n"
"checkpoint cannot be served or written (one line on stderr:\n"
"unshardfs: <file>: <problem>)\n",
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

static bool one_of(const char *v, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(v, *allowed) == 0)
			return true;
	return false;
}

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

static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return false; /* strtoull takes " 5", "+5" and "-1" (as 2^64 - 1) */
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	for (size_t i = 0; i < sizeof(size_units) / sizeof(*size_units); i++)
		if (!strcasecmp(end, size_units[i].suffix))
			return !__builtin_mul_overflow((uint64_t)v,
						       size_units[i].unit, out);
	return false;
}

/* --dtype as this tool and as torch spell it (torch.bfloat16, "half"). */
static const char *dtype_name(const char *v)
{
	static const struct {
		const char *alias, *name;
	} aliases[] = {
		{"keep", "keep"},
		{"bf16", "bf16"}, {"bfloat16", "bf16"},
		{"f16", "f16"},   {"fp16", "f16"},  {"float16", "f16"}, {"half", "f16"},
		{"f32", "f32"},   {"fp32", "f32"},  {"float32", "f32"}, {"float", "f32"},
	};

	if (!strncmp(v, "torch.", 6))
		v += 6;
	for (size_t i = 0; i < sizeof(aliases) / sizeof(*aliases); i++)
		if (!strcmp(v, aliases[i].alias))
			return aliases[i].name;
	return NULL;
}

static bool is_device(const char *v)
{
	char *end;

	if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda"))
		return true;
	if (strncmp(v, "cuda:", 5) != 0 || v[5] < '0' || v[5] > '9')
		return false; /* digits only: strtoul takes "-1" */
	errno = 0;
	return strtoul(v + 5, &end, 10) <= 4096 && !errno && *end == '\0';
}

/* --name=value options; returns 1 if handled, 0 if not ours, -1 on error. */
static int parse_long(struct us_opts *o, const char *a)
{
	static const char *const formats[] = {"auto", "safetensors", "torch",
					      "dcp", "deepspeed",
					      "deepspeed-universal", NULL};
	static const char *const ties[] = {"auto", "declared", "off", "equal", NULL};
	static const char *const views[] = {"safetensors", "bin", NULL};
	static const char *const weights[] = {"fp32", "module", NULL};
	static const char *const on_off[] = {"on", "off", NULL};
	const char *v = strchr(a, '=');

	if (!strcmp(a, "--no-unwrap"))
		return o->no_unwrap = true, 1;
	if (!v)
		return 0;
	v++;
	if (!strncmp(a, "--format=", 9))
		return one_of(v, formats) ? (o->format = v, 1)
			: usage_error("unknown --format '%s'", v);
	if (!strncmp(a, "--dtype=", 8))
		return (o->dtype = dtype_name(v)) ? 1
			: usage_error("unknown --dtype '%s' (keep, bf16, f16, f32 or "
				      "torch's bfloat16, float16, float32)", v);
	if (!strncmp(a, "--ties=", 7))
		return one_of(v, ties) ? (o->ties = v, 1)
			: usage_error("unknown --ties '%s'", v);
	if (!strncmp(a, "--deepspeed-weights=", 20))
		return one_of(v, weights) ? (o->ds_weights = v, 1)
			: usage_error("unknown --deepspeed-weights '%s'", v);
	if (!strncmp(a, "--direct-io=", 12))
		return one_of(v, on_off) ? (o->direct_io = !strcmp(v, "on"), 1)
			: usage_error("unknown --direct-io '%s'", v);
	if (!strncmp(a, "--device=", 9))
		return is_device(v) ? (o->device = v, 1)
			: usage_error("unknown --device '%s'", v);
	if (!strncmp(a, "--view=", 7) && o->export_cmd)
		return one_of(v, views) ? (o->view = v, 1)
			: usage_error("unknown --view '%s'", v);
	if (!strncmp(a, "--max-shard-size=", 17))
		return parse_size(v, &o->max_shard_size) && o->max_shard_size
			? 1 : usage_error("bad --max-shard-size '%s'", v);
	if (!strncmp(a, "--cache-size=", 13))
		return parse_size(v, &o->cache_size) ? 1
			: usage_error("bad --cache-size '%s'", v);
	if (!strncmp(a, "--strip-prefix=", 15)) {
		if (o->nstrip == US_MAX_STRIP || !*v)
			return usage_error("bad or too many --strip-prefix '%s'", v);
		o->strip_prefix[o->nstrip++] = v;
		return 1;
	}
	return 0;
}

/* Options only mount(8), mount.fuse3 or systemd act on (fstab's fourth
 * field); libfuse would refuse them as unknown.  rw: the mount is read-only. */
static bool mount_only(const char *opt)
{
	static const char *const names[] = {"defaults", "auto", "noauto",
		"user", "nouser", "users", "owner", "group", "nofail", "_netdev",
		"rw", "ro", NULL};

	return one_of(opt, names) || !strncmp(opt, "x-", 2) ||
	       !strncmp(opt, "comment=", 8);
}

/* Copy @s (@n bytes) and a NUL into o->store; NULL when it is full. */
static char *store(struct us_opts *o, const char *prefix, const char *s,
		   size_t n)
{
	size_t plen = strlen(prefix);
	char *p = o->store + o->nstore;

	if (o->nstore + plen + n + 1 > sizeof(o->store))
		return NULL;
	memcpy(p, prefix, plen);
	memcpy(p + plen, s, n);
	p[plen + n] = '\0';
	o->nstore += plen + n + 1;
	return p;
}

/* -o NAME[=VALUE] naming one of our long options: 1 handled, 0 not ours,
 * -1 a usage error. */
static int unshardfs_opt(struct us_opts *o, const char *item)
{
	char *opt = store(o, "--", item, strlen(item));
	int rc;

	if (!opt)
		return usage_error("%s options too long", "-o");
	for (char *p = opt + 2; *p && *p != '='; p++)
		if (*p == '_')
			*p = '-';
	if (!strcmp(opt, "--view") || !strncmp(opt, "--view=", 7))
		rc = 0; /* export only */
	else
		rc = parse_long(o, opt);
	if (rc == 0)
		o->nstore -= strlen(opt) + 1; /* not ours: give it back */
	return rc;
}

static int add_one_fuse_opt(struct us_opts *o, const char *item, size_t n)
{
	char *opt = store(o, "", item, n);
	int rc;

	if (!opt)
		return usage_error("%s options too long", "-o");
	if (!*opt || mount_only(opt))
		return 0;
	rc = unshardfs_opt(o, opt);
	if (rc != 0)
		return rc < 0 ? -1 : 0;
	if (o->nfuse_opts == US_MAX_FUSE_OPTS)
		return usage_error("too many %s options", "-o");
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
	if (!strcmp(a, "-h") || !strcmp(a, "--help"))
		return o->help = true, 0;
	if (!strcmp(a, "-V") || !strcmp(a, "--version"))
		return o->version = true, 0;
	if (!strcmp(a, "--json") && o->inspect)
		return o->json = true, 0;
	if (!strcmp(a, "--force") && o->export_cmd)
		return o->force = true, 0;
	if (!strcmp(a, "--optimizer") && o->export_cmd)
		return o->optimizer = true, 0;
	if (!strcmp(a, "-o"))
		return add_fuse_opt(o, *i + 1 < argc ? argv[++*i] : NULL);
	if (!strncmp(a, "-o", 2))
		return add_fuse_opt(o, a + 2);
	return usage_error("unknown option '%s'", a);
}

static void set_defaults(struct us_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->format = "auto";
	o->dtype = "keep";
	o->device = "auto";
	o->ties = "auto";
	o->ds_weights = "fp32";
	o->view = "safetensors";
	o->cache_size = DEFAULT_CACHE_SIZE;
}

/*
 * "--name value" for an option that takes a value: the getopt_long form of
 * "--name=value".  Returns the joined option in o->store, @a itself when it
 * is not such an option, NULL (after a usage error) when the value is
 * missing or the store is full.
 */
static const char *joined(struct us_opts *o, int argc, char **argv, int *i)
{
	static const char *const valued[] = {"--format", "--dtype", "--ties",
		"--deepspeed-weights", "--direct-io", "--device", "--view",
		"--max-shard-size", "--cache-size", "--strip-prefix", NULL};
	const char *a = argv[*i];
	char buf[4096], *opt;
	int n;

	if (!one_of(a, valued) || (!strcmp(a, "--view") && !o->export_cmd))
		return a;
	if (*i + 1 >= argc) {
		usage_error("%s needs a value", a);
		return NULL;
	}
	n = snprintf(buf, sizeof(buf), "%s=%s", a, argv[*i + 1]);
	opt = n > 0 && (size_t)n < sizeof(buf) ? store(o, "", buf, (size_t)n) : NULL;
	if (!opt) {
		usage_error("%s: arguments too long", a);
		return NULL;
	}
	++*i;
	return opt;
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

		if (a[0] == '-' && a[1] == '-' && a[2] && !(a = joined(o, argc, argv, &i)))
			return -1;
		if (a[0] == '-' && a[1] == '-' && a[2] && (rc = parse_long(o, a)) != 0) {
			if (rc < 0)
				return -1;
		} else if (a[0] == '-' && a[1]) {
			if (parse_short(o, argc, argv, &i) < 0)
				return -1;
		} else if (!o->source) {
			o->source = a;
		} else if (!o->mountpoint && !o->inspect && !o->export_cmd) {
			o->mountpoint = a;
		} else if (!o->out && o->export_cmd) {
			o->out = a;
		} else {
			return usage_error("unexpected argument '%s'", a);
		}
	}
	if (o->help || o->version)
		return 0;
	if (o->inspect && !o->source)
		return usage_error("usage: unshardfs inspect [--json] SOURCE");
	if (o->export_cmd && (!o->source || !o->out))
		return usage_error("usage: unshardfs export [OPTIONS] SOURCE OUT");
	if (!o->inspect && !o->export_cmd && (!o->source || !o->mountpoint))
		return usage_error("usage: unshardfs [OPTIONS] SOURCE MOUNTPOINT");
	if (o->max_shard_size && strcmp(o->view, "safetensors") != 0)
		return usage_error("--max-shard-size shards the safetensors view, "
				   "not --view=%s", o->view);
	return 0;
}
