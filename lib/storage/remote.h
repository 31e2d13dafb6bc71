/*
 * remote.h - a SOURCE in object storage: an S3 bucket prefix (AWS or any
 * S3-compatible store), an https:// directory with an index, or one https://
 * object, read by HTTP range requests (libcurl).
 *
 * At open: credentials and region as the AWS tools take them, the listing
 * (ListObjectsV2 under the prefix; for https, HEAD of the named object or of
 * an index and the shards it names), and each object's identity (size, ETag,
 * Last-Modified).  After that the listing never changes: every range GET
 * carries If-Match with the recorded ETag, so an object rewritten after
 * mount makes the reads that need it fail (EIO), never mixes bytes.
 *
 * Reads go through a bounded cache of aligned blocks (block_size), shared
 * by all threads, with sequential detection and parallel prefetch, an
 * optional on-disk block cache that survives remounts, bounded retries with
 * backoff on 5xx, resets and timeouts, and a pool of keep-alive connections.
 * Everything here is thread-safe after us_remote_open returns.
 */
#ifndef US_REMOTE_H
#define US_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../us_error.h"

enum us_addressing {
	US_ADDR_AUTO = 0, /* path-style with --endpoint-url, else virtual-hosted */
	US_ADDR_PATH,     /* https://endpoint/BUCKET/KEY */
	US_ADDR_VIRTUAL,  /* https://BUCKET.endpoint/KEY */
};

/* Options (0 / NULL: the default in brackets). */
struct us_remote_opts {
	const char *endpoint_url; /* --endpoint-url [AWS_ENDPOINT_URL_S3,
				   * AWS_ENDPOINT_URL, AWS's for the region] */
	const char *region;       /* --region [AWS_REGION, AWS_DEFAULT_REGION,
				   * the profile's region, us-east-1] */
	const char *profile;      /* --profile [AWS_PROFILE, "default"] */
	enum us_addressing addressing; /* --addressing=auto|path|virtual */
	bool no_sign;             /* --no-sign-request: anonymous requests */
	uint64_t block_size;      /* --block-size [8 MiB]: fetch unit */
	uint64_t cache_bytes;     /* memory for cached blocks [256 MiB] */
	const char *cache_dir;    /* --cache-dir [none]: on-disk block cache */
	uint64_t cache_dir_size;  /* --cache-dir-size [10 GiB] */
	unsigned connections;     /* --connections [16]: parallel requests */
	unsigned retries;         /* --retries [5]: per request, then EIO */
	unsigned timeout_s;       /* --timeout [30]: per request, seconds */
	/* The caller says what it reads next (us_remote_advise: the daemon's
	 * views know their next source ranges): no read-ahead of byte runs,
	 * which cannot see where a tensor's bytes end and run on into the
	 * next item (a DCP shard's Adam moments after a weight). */
	bool hinted_readahead;
};

/* One object of the listing. */
struct us_remote_object {
	const char *key;   /* relative to the SOURCE prefix: "a.safetensors",
			    * "sub/b.json" (never empty, never starts '/') */
	uint64_t size;
	const char *etag;  /* as the store sent it, quotes included */
	struct timespec mtime; /* Last-Modified */
};

/* Counters since open (benchmarks, tests: bytes fetched vs bytes read). */
struct us_remote_stats {
	uint64_t requests;      /* HTTP requests sent, retries included */
	uint64_t retries;
	uint64_t bytes_fetched; /* body bytes received from the store */
	uint64_t bytes_read;    /* bytes callers asked us_remote_read for */
	uint64_t disk_hits;     /* blocks served by --cache-dir */
};

struct us_remote;

/* us_remote_is_url - is @source a remote SOURCE (s3://, http://, https://)? */
bool us_remote_is_url(const char *source);

/*
 * us_remote_open - connect to @url and take its listing.  Failure: one line
 * in @err naming the URL or the object and what is wrong (no credentials, no
 * such bucket, access denied, nothing under the prefix, unreachable within
 * the retries), US_E_USAGE for a malformed URL or options, US_E_IO for the
 * rest.  @o may be NULL (defaults).
 */
enum us_status us_remote_open(const char *url, const struct us_remote_opts *o,
			      struct us_remote **out, struct us_err *err);
void us_remote_free(struct us_remote *r);

/* The listing, sorted by key (strcmp).  us_remote_single: @url named one
 * object (a file SOURCE), the listing's only entry. */
size_t us_remote_count(const struct us_remote *r);
const struct us_remote_object *us_remote_at(const struct us_remote *r,
					    size_t i);
/* us_remote_lower_bound: the first index whose key is >= @key (the count
 * when none); us_remote_find: the object named @key exactly, or NULL. */
size_t us_remote_lower_bound(const struct us_remote *r, const char *key);
const struct us_remote_object *us_remote_find(const struct us_remote *r,
					      const char *key);
bool us_remote_single(const struct us_remote *r);
/* The URL as given, normalised (for messages, xattrs, the loader). */
const char *us_remote_url(const struct us_remote *r);

/*
 * us_remote_read - exactly @len bytes at @off of @o into @buf.  US_OK, or
 * US_E_IO with errno EIO when the range passes the object's end, the
 * object changed since open (412 to If-Match), or the store did not answer
 * within the retries; the failure is this call's only (the next may work).
 */
enum us_status us_remote_read(struct us_remote *r,
			      const struct us_remote_object *o, void *buf,
			      size_t len, uint64_t off);

/*
 * us_remote_advise - bytes [@off, @off + @len) of @o will be read soon: the
 * small pages holding them are fetched ahead, in parallel, as far as the
 * prefetch queue and the cache allow (readers of many small records at
 * mount: DCP's item archives).  A hint: nothing fails.
 */
void us_remote_advise(struct us_remote *r, const struct us_remote_object *o,
		      uint64_t off, uint64_t len);

void us_remote_get_stats(const struct us_remote *r, struct us_remote_stats *s);

/* us_remote_last_error - why the last failed read failed ("KEY: bytes
 * A-B: the object changed since open ..."), "" if none did; for us-remote
 * and logs (the reads themselves only say EIO). */
void us_remote_last_error(struct us_remote *r, char *buf, size_t n);

/*
 * us_remote_quiesce - a fork comes (the daemon's fuse_daemonize): stop the
 * prefetch workers that reading the SOURCE at mount started (advice), give
 * the jobs nobody took back unfetched, and let the workers start again on
 * the next need, in whichever process that is.  Threads do not survive a
 * fork: without this a background mount's child queued read-ahead for
 * workers it did not have, and readers waited on those blocks for ever.
 */
void us_remote_quiesce(struct us_remote *r);

#endif /* US_REMOTE_H */
