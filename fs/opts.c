/* opts.c - command-line parsing (no getopt: -o and positionals interleave). */
#include "opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CACHE_SIZE (256ull << 20)

void us_opts_usage(FILE *out)
{
	fputs(
"usage: unshardfs [OPTIONS] SOURCE MOUNTPOINT\n"
"       unshardfs inspect [--json] SOURCE\n"
"\n"
"Mount a sharded training checkpoint SOURCE read-only at MOUNTPOINT as one\n"
"consolidated state dict (model.safetensors), with the checkpoint's other\n"
"files passed through.  Unmount with: fusermount3 -u MOUNTPOINT\n"
"\n"
"options:\n"
"    -h, --help             print this help and exit\n"
"    -V, --version          print the version and exit\n"
"    -f                     stay in the foreground (default: daemonize)\n"
"    -d                     FUSE debug output (implies -f)\n"
"    -q                     no progress messages\n"
"    -o OPT[,OPT...]        FUSE/mount options (e.g. allow_other); the mount\n"
"                           is always read-only\n"
"    --format=FMT           auto|safetensors|torch|dcp|deepspeed (default: auto;\n"
"                           this version reads safetensors)\n"
"    --no-unwrap            keep source names exactly (default: unwrap)\n"
"    --strip-prefix=P       remove P from the start of every name (repeatable)\n"
"    --dtype=T              keep|bf16|f16|f32 (default: keep; only keep so far)\n"
"    --device=D             auto|cpu|cuda[:N] (default: auto)\n"
"    --cache-size=BYTES     bound on cached assembled data, K/M/G suffixes\n"
"                           (default: 256M)\n"
"    --ties=MODE            auto|declared|off (default: auto)\n"
"\n"
"exit status: 0 mounted (or inspect done), 1 usage error, 2 the checkpoint\n"
"cannot be served (one line on stderr: unshardfs: <file>: <problem>)\n",
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

static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return false;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case '\0': break;
	default: return false;
	}
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

static bool is_device(const char *v)
{
	char *end;

	if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda"))
		return true;
	if (strncmp(v, "cuda:", 5) != 0 || !v[5])
		return false;
	strtoul(v + 5, &end, 10);
	return *end == '\0';
}

/* --name=value options; returns 1 if handled, 0 if not ours, -1 on error. */
static int parse_long(struct us_opts *o, const char *a)
{
	static const char *const formats[] = {"auto", "safetensors", "torch",
					      "dcp", "deepspeed", NULL};
	static const char *const dtypes[] = {"keep", "bf16", "f16", "f32", NULL};
	static const char *const ties[] = {"auto", "declared", "off", NULL};
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
		return one_of(v, dtypes) ? (o->dtype = v, 1)
			: usage_error("unknown --dtype '%s'", v);
	if (!strncmp(a, "--ties=", 7))
		return one_of(v, ties) ? (o->ties = v, 1)
			: usage_error("unknown --ties '%s'", v);
	if (!strncmp(a, "--device=", 9))
		return is_device(v) ? (o->device = v, 1)
			: usage_error("unknown --device '%s'", v);
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

static int add_fuse_opt(struct us_opts *o, const char *v)
{
	if (!v)
		return usage_error("%s needs an argument", "-o");
	if (o->nfuse_opts == sizeof(o->fuse_opts) / sizeof(o->fuse_opts[0]))
		return usage_error("too many %s options", "-o");
	o->fuse_opts[o->nfuse_opts++] = v;
	return 0;
}

static int parse_short(struct us_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i];

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
	o->cache_size = DEFAULT_CACHE_SIZE;
}

/* Options this version parses but cannot honour yet are refused, not ignored. */
static int check_implemented(const struct us_opts *o)
{
	if (strcmp(o->dtype, "keep") != 0)
		return usage_error("--dtype=%s is not implemented yet", o->dtype);
	return 0;
}

int us_opts_parse(struct us_opts *o, int argc, char **argv)
{
	int i = 1, rc;

	set_defaults(o);
	if (argc > 1 && !strcmp(argv[1], "inspect")) {
		o->inspect = true;
		i = 2;
	}
	for (; i < argc; i++) {
		const char *a = argv[i];

		if (a[0] == '-' && a[1] == '-' && a[2] && (rc = parse_long(o, a)) != 0) {
			if (rc < 0)
				return -1;
		} else if (a[0] == '-' && a[1]) {
			if (parse_short(o, argc, argv, &i) < 0)
				return -1;
		} else if (!o->source) {
			o->source = a;
		} else if (!o->mountpoint && !o->inspect) {
			o->mountpoint = a;
		} else {
			return usage_error("unexpected argument '%s'", a);
		}
	}
	if (o->help || o->version)
		return 0;
	if (!o->source || (!o->inspect && !o->mountpoint))
		return usage_error("%s", o->inspect ?
				   "usage: unshardfs inspect [--json] SOURCE" :
				   "usage: unshardfs [OPTIONS] SOURCE MOUNTPOINT");
	return check_implemented(o);
}
