/*
 * opts.h - the command line of design.md's interface contract.
 *
 *   unshardfs [OPTIONS] SOURCE MOUNTPOINT
 *   unshardfs inspect [--json] SOURCE
 *   unshardfs export [OPTIONS] SOURCE OUT
 */
#ifndef US_OPTS_H
#define US_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define US_MAX_STRIP 16
#define US_MAX_FUSE_OPTS 64
#define US_OPT_STORE 8192

/*
 * -o options that only mount(8), mount.fuse3 or systemd read (fstab's
 * defaults, noauto, nofail, _netdev, x-systemd.*, ...) are dropped, and rw
 * is dropped because the mount is always read-only; an unshardfs option may
 * be given as -o NAME=VALUE (format=dcp, max_shard_size=2G, no_unwrap, ...),
 * the only way an fstab line can pass one.  Everything else goes to FUSE.
 */

struct us_opts {
	bool inspect;      /* the inspect subcommand */
	bool export_cmd;   /* the export subcommand */
	bool json;         /* inspect --json */
	bool foreground;   /* -f */
	bool debug;        /* -d */
	bool quiet;        /* -q */
	bool help, version;
	const char *source, *mountpoint;
	const char *out;           /* export: a file, a directory or "-" */
	const char *view;          /* export: safetensors|bin */
	bool force;                /* export --force: replace existing files */
	bool optimizer;            /* export --optimizer: optimizer.* too */
	uint64_t max_shard_size;   /* 0: one model.safetensors */
	const char *fuse_opts[US_MAX_FUSE_OPTS]; /* one FUSE option each */
	size_t nfuse_opts;
	char store[US_OPT_STORE];  /* split -o items point in here */
	size_t nstore;
	const char *format;        /* auto|safetensors|torch|dcp|deepspeed|
				    * deepspeed-universal */
	bool no_unwrap;
	const char *strip_prefix[US_MAX_STRIP];
	size_t nstrip;
	const char *dtype;         /* keep|bf16|f16|f32 */
	const char *device;        /* auto|cpu|cuda[:N] */
	uint64_t cache_size;
	const char *ties;          /* auto|declared|off */
	const char *ds_weights;    /* --deepspeed-weights: fp32|module */
	bool direct_io;            /* --direct-io=on: read() past the page cache */
};

/*
 * us_opts_parse - fill @o from argv.  Returns 0, or -1 after printing one
 * line "unshardfs: ..." on stderr (a usage error: exit status 1).
 */
int us_opts_parse(struct us_opts *o, int argc, char **argv);

/* us_opts_usage - the --help text, FUSE style, every option with its default. */
void us_opts_usage(FILE *out);

#endif /* US_OPTS_H */
