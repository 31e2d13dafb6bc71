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
#include <sys/types.h>

#include "dtype.h"
#include "source/source.h"
#include "ties.h"

#define US_MAX_STRIP 16
#define US_MAX_FUSE_OPTS 64
#define US_OPT_STORE 8192

/*
 * -o options that only mount(8), mount.fuse3 or systemd read (fstab's
 * defaults, noauto, nofail, _netdev, x-systemd.*, ...) are dropped, and rw
 * is dropped because the mount is always read-only; an unshardfs option may
 * be given as -o NAME=VALUE (format=dcp, max_shard_size=2G, no_unwrap, ...),
 * the only way an fstab line can pass one, and uid=, gid=, umask= are ours
 * alone.  What libfuse accepts goes to FUSE; anything else is a usage error
 * here, before libfuse could print its own two-line complaint.
 */

/* --format, in the order of us_format_names (what the readers are called). */
enum us_format {
	US_FORMAT_AUTO,
	US_FORMAT_SAFETENSORS,
	US_FORMAT_TORCH,
	US_FORMAT_DCP,
	US_FORMAT_DEEPSPEED,
	US_FORMAT_DS_UNIVERSAL,
};
extern const char *const us_format_names[]; /* "auto", "safetensors", ... */

/* --device: auto and cpu both assemble on the CPU (main.c says why). */
enum us_device {
	US_DEVICE_AUTO,
	US_DEVICE_CPU,
	US_DEVICE_CUDA,  /* on device us_opts.cuda_index */
};

/* export --view: the one view written. */
enum us_export_view {
	US_EXPORT_SAFETENSORS,
	US_EXPORT_BIN,
};

/* --views=LIST: which views a mount shows, as a set of bits. */
enum {
	US_VIEW_SAFETENSORS = 1u << 0, /* model.safetensors (or its shards) */
	US_VIEW_BIN = 1u << 1,         /* pytorch_model.bin */
	US_VIEW_TENSORS = 1u << 2,     /* tensors/ */
	US_VIEW_OPTIMIZER = 1u << 3,   /* optimizer.safetensors, optimizer.json */
	US_VIEWS_ALL = (1u << 4) - 1,
};

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
	enum us_export_view view;  /* export --view */
	unsigned views;            /* mount --views: US_VIEW_* bits */
	bool views_open;           /* parsing: the last -o item was views= */
	bool force;                /* export --force: replace existing files */
	bool optimizer;            /* export --optimizer: optimizer.* too */
	uint64_t max_shard_size;   /* 0: one model.safetensors */
	const char *fuse_opts[US_MAX_FUSE_OPTS]; /* one FUSE option each */
	size_t nfuse_opts;
	const char *allow_other;   /* -o allow_other or allow_root, or NULL */
	char store[US_OPT_STORE];  /* split -o items point in here */
	size_t nstore;
	enum us_format format;
	bool no_unwrap;
	const char *strip_prefix[US_MAX_STRIP];
	size_t nstrip;
	bool cast;                 /* --dtype other than keep: to cast_to */
	enum us_dtype cast_to;
	enum us_device device;
	int cuda_index;            /* --device=cuda:N (cuda alone: 0) */
	const char *device_arg;    /* --device as given, for messages */
	uint64_t cache_size;
	enum us_ties_mode ties;
	enum us_ds_weights ds_weights; /* --deepspeed-weights */
	bool direct_io;            /* --direct-io=on: read() past the page cache */
	const char *recipe;        /* --recipe: NULL, "auto", NAME or FILE */
	const char *overlay;       /* --overlay DIR, or NULL */
	/* --endpoint-url, --region, ...: a remote SOURCE's store (0/NULL:
	 * remote.h's defaults) */
	struct us_remote_opts remote;
	/* -o uid=N,gid=N,umask=M: owner and mode bits of every file served */
	bool set_uid, set_gid, set_umask;
	uid_t uid;
	gid_t gid;
	mode_t umask;
};

/*
 * us_opts_parse - fill @o from argv.  Returns 0, or -1 after printing one
 * line "unshardfs: ..." on stderr (a usage error: exit status 1).
 */
int us_opts_parse(struct us_opts *o, int argc, char **argv);

/* us_opts_usage - the --help text, FUSE style, every option with its default. */
void us_opts_usage(FILE *out);

#endif /* US_OPTS_H */
