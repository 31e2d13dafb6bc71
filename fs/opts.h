/*
 * opts.h - the command line of design.md's interface contract.
 *
 *   unshardfs [OPTIONS] SOURCE MOUNTPOINT
 *   unshardfs inspect [--json] SOURCE
 */
#ifndef US_OPTS_H
#define US_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define US_MAX_STRIP 16

struct us_opts {
	bool inspect;      /* the inspect subcommand */
	bool json;         /* inspect --json */
	bool foreground;   /* -f */
	bool debug;        /* -d */
	bool quiet;        /* -q */
	bool help, version;
	const char *source, *mountpoint;
	const char *fuse_opts[64]; /* each -o argument, in order */
	size_t nfuse_opts;
	const char *format;        /* auto|safetensors|torch|dcp|deepspeed */
	bool no_unwrap;
	const char *strip_prefix[US_MAX_STRIP];
	size_t nstrip;
	const char *dtype;         /* keep|bf16|f16|f32 */
	const char *device;        /* auto|cpu|cuda[:N] */
	uint64_t cache_size;
	const char *ties;          /* auto|declared|off */
};

/*
 * us_opts_parse - fill @o from argv.  Returns 0, or -1 after printing one
 * line "unshardfs: ..." on stderr (a usage error: exit status 1).
 */
int us_opts_parse(struct us_opts *o, int argc, char **argv);

/* us_opts_usage - the --help text, FUSE style, every option with its default. */
void us_opts_usage(FILE *out);

#endif /* US_OPTS_H */
