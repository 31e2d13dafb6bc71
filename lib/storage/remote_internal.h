/*
 * remote_internal.h - the pieces of the remote-storage client (remote.h),
 * one concern per file, exposed to each other and to the unit tests
 * (tests/unit/test_remote_parse.c).  Nothing outside lib/storage includes it.
 *
 *   s3_url.c       s3:// URLs, endpoints, addressing, RFC 3986 encoding
 *   s3_creds.c     credentials and region, as the AWS tools take them
 *   s3_xml.c       ListObjectsV2 pages and error bodies (a bounded scanner),
 *                  dates, Content-Range
 *   sigv4.c        AWS Signature Version 4 (OpenSSL HMAC-SHA256)
 *   http.c         a pool of curl handles, one request with bounded retries
 *   block_cache.c  aligned blocks in memory: LRU, in-flight dedup
 *   disk_cache.c   --cache-dir: blocks on disk, named by identity
 *   https_index.c  https:// objects and directories with an index
 *   remote.c       open, listing, reads, prefetch
 *
 * Every length, count and offset that arrives from the network is hostile:
 * each parser here checks it against its bound before use.
 */
#ifndef US_REMOTE_INTERNAL_H
#define US_REMOTE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../num.h"
#include "../us_error.h"
#include "remote.h"

/* Bounds on what the network may make us hold. */
#define US_RM_MAX_OBJECTS 1000000u         /* objects in one listing */
#define US_RM_MAX_LIST_BODY (16u << 20)    /* one ListObjectsV2 page */
#define US_RM_MAX_ERR_BODY (64u << 10)     /* an error response body */
#define US_RM_MAX_INDEX_BODY (64u << 20)   /* an https index JSON */
#define US_RM_MAX_KEY 1024u                /* S3's own limit on key bytes */
#define US_RM_MAX_ETAG 256u
#define US_RM_MAX_BLOCK (1ull << 30)       /* --block-size ceiling */

/* ---------------------------------------------------------------- s3_url.c */

/* An s3:// URL taken apart: bucket, and prefix without leading or trailing
 * '/' ("" for the whole bucket); dir_slash when the URL ended in '/'. */
struct us_s3_loc {
	char *bucket;
	char *prefix;
	bool dir_slash;
};

/* us_s3_parse - take @url ("s3://BUCKET[/PREFIX]") apart; US_E_USAGE with
 * one line when it is not a valid s3 URL (no bucket, empty or "."/".."
 * components in the prefix). */
enum us_status us_s3_parse(const char *url, struct us_s3_loc *loc,
			   struct us_err *err);
void us_s3_loc_free(struct us_s3_loc *loc);

/* An endpoint: "scheme://host[:port]" plus an optional base path. */
struct us_endpoint {
	char *scheme;   /* "http" or "https" */
	char *hostport; /* "host" or "host:port", as the Host header says it */
	char *base;     /* "" or "/base" (no trailing '/') */
	bool path_style;
};

/*
 * us_s3_endpoint - the endpoint for @bucket: @endpoint_url, else
 * AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's for @region;
 * addressing AUTO is path-style when an endpoint URL was given (or the
 * bucket is not a DNS label), else virtual-hosted.
 */
enum us_status us_s3_endpoint(const char *endpoint_url, const char *region,
			      enum us_addressing addr, const char *bucket,
			      struct us_endpoint *ep, struct us_err *err);
void us_endpoint_free(struct us_endpoint *ep);

/* us_s3_object_url - the request URL of @key ("" for the bucket) with
 * @query (already encoded, or NULL); NULL when out of memory. */
char *us_s3_object_url(const struct us_endpoint *ep, const char *bucket,
		       const char *key, const char *query);

/* us_uri_encode - RFC 3986: unreserved bytes kept, '/' kept when
 * @keep_slash, everything else %XX (upper case).  NULL on ENOMEM. */
char *us_uri_encode(const char *s, size_t n, bool keep_slash);
/* us_uri_decode - %XX decoded; NULL when malformed or it decodes a NUL. */
char *us_uri_decode(const char *s, size_t n);

/* us_same_origin - do URLs @a and @b name the same scheme, host and port
 * (an absent port is the scheme's default; case-insensitive)?  A URL with
 * userinfo, or that is not http(s)://, is nobody's origin: false. */
bool us_same_origin(const char *a, const char *b);

/* us_rel_key_ok - is @k a key that path semantics can serve: non-empty, no
 * leading or trailing '/', no empty, "." or ".." component? */
bool us_rel_key_ok(const char *k);

/* -------------------------------------------------------------- s3_creds.c */

struct us_creds {
	char *key_id; /* NULL: anonymous */
	char *secret;
	char *token;  /* session token or NULL */
	char *region; /* always set */
	char *source; /* where they came from, for messages ("environment",
		       * "profile default in ~/.aws/credentials") */
};

/* us_creds_resolve - credentials and region for @o (see remote.h).  With
 * no_sign, key_id stays NULL.  US_E_USAGE: a named profile (an option) that
 * has no keys; US_E_IO: no credentials anywhere (remote.h's "the rest"). */
enum us_status us_creds_resolve(const struct us_remote_opts *o,
				struct us_creds *c, struct us_err *err);
void us_creds_free(struct us_creds *c);

/* us_ini_get - the value of @name in section [@section] of the INI file at
 * @path: 1 found (*@out malloc'd), 0 not found (or no such file), -1 the
 * file cannot be read. */
int us_ini_get(const char *path, const char *section, const char *name,
	       char **out);

/* ---------------------------------------------------------------- s3_xml.c */

/* One ListObjectsV2 page. Keys are full keys (prefix included), decoded. */
struct us_list_entry {
	char *key;
	uint64_t size;
	char *etag;
	struct timespec mtime;
};

struct us_list_page {
	struct us_list_entry *e;
	size_t n, cap;
	bool truncated;
	char *next_token; /* NextContinuationToken, decoded; NULL if none */
};

/* us_s3_parse_list - append the objects of the ListObjectsV2 body
 * @body[0..@len) to @pg (which may hold earlier pages' entries) and set
 * truncated / next_token; at most @max_total entries in all.  US_E_FORMAT
 * with a reason (us_err_reason) for anything malformed. */
enum us_status us_s3_parse_list(const char *body, size_t len,
				struct us_list_page *pg, size_t max_total,
				struct us_err *err);
void us_list_page_free(struct us_list_page *pg);

/* us_s3_parse_error - Code and Message of an S3 error body, decoded and
 * truncated to fit; "" when absent. */
void us_s3_parse_error(const char *body, size_t len, char *code, size_t ncode,
		       char *msg, size_t nmsg);

/* us_xml_decode - @s[0..@n) with the five XML entities and &#N; / &#xH;
 * decoded (as UTF-8); NULL when malformed (unknown entity, NUL, a code
 * point that is not a character). */
char *us_xml_decode(const char *s, size_t n);

/* us_parse_iso8601 - "2024-01-31T12:34:56[.fff]Z" (or +hh:mm) into @ts. */
bool us_parse_iso8601(const char *s, size_t n, struct timespec *ts);
/* us_parse_http_date - RFC 7231 IMF-fixdate ("Sun, 06 Nov 1994 08:49:37
 * GMT") into @ts. */
bool us_parse_http_date(const char *s, struct timespec *ts);
/* us_parse_content_range - "bytes START-END/TOTAL" (TOTAL may not be '*'
 * here: we need it to check the object's identity). */
bool us_parse_content_range(const char *s, uint64_t *start, uint64_t *end,
			    uint64_t *total);

/* ----------------------------------------------------------------- sigv4.c */

struct us_sigv4_in {
	const char *method;
	const char *hostport;  /* the Host header's value */
	const char *path;      /* encoded path, as sent ("/b/k%20x") */
	const char *query;     /* encoded query without '?', or NULL */
	const char *range;     /* signed when set (the AWS examples do) */
	const char *key_id, *secret, *token, *region, *service;
	time_t now;
};

/* The headers a signed request carries, each "Name: value". */
struct us_sigv4_out {
	char date[64];
	char sha256[96];
	char token[4096 + 32];
	char auth[1024];
};

/* us_sigv4_sign - sign an empty-body request; false if a field is too long
 * for the fixed buffers or OpenSSL fails. */
bool us_sigv4_sign(const struct us_sigv4_in *in, struct us_sigv4_out *out);

/* ------------------------------------------------------------------ http.c */

/* Counters shared by the client (remote.h's us_remote_stats). */
struct us_rm_counters {
	_Atomic uint64_t requests, retries, bytes_fetched, bytes_read,
		disk_hits;
};

struct us_http;

struct us_http_cfg {
	const struct us_creds *creds; /* NULL or no key_id: unsigned */
	unsigned connections, retries, timeout_s;
	struct us_rm_counters *ctr;
};

enum us_status us_http_new(const struct us_http_cfg *cfg, struct us_http **out,
			   struct us_err *err);
void us_http_free(struct us_http *h);

struct us_http_req {
	const char *method;   /* "GET" or "HEAD" */
	const char *url;      /* scheme://hostport/path[?query], encoded */
	const char *range;    /* "bytes=A-B" or NULL */
	const char *if_match; /* ETag or NULL */
	const char *if_unmodified_since; /* IMF-fixdate or NULL */
	char *dst;            /* range GET: exactly dst_len bytes expected */
	size_t dst_len;
	size_t max_body;      /* otherwise: the body is kept, up to this */
};

struct us_http_resp {
	long status;          /* 0: no response (transport failure) */
	char *body;           /* malloc'd, NUL-terminated (dst == NULL) */
	size_t len;           /* body bytes (kept, or written into dst) */
	bool too_long;        /* the body passed its bound (and was cut) */
	bool has_length;
	uint64_t content_length;
	char etag[US_RM_MAX_ETAG];
	char last_modified[64];
	char content_range[96];
	char bucket_region[64];
	char transport[256];  /* the last transport error, in words */
	char location[2048];  /* a 3xx answer's Location, resolved by curl */
};

/*
 * us_http_do - send @q, retrying transport failures, 5xx, 408, 429 and
 * short range bodies up to the configured count with exponential backoff
 * and jitter.  US_OK when a final response arrived (any status: the caller
 * interprets it; a body over its bound arrives cut, with too_long set),
 * US_E_IO when none did (@p->transport says why).
 *
 * Requests go only where the caller's URL says.  A redirect is followed
 * only by an unsigned request, only to the same scheme, host and port
 * (never another host, never https to http), at most 5 times; any other
 * redirect fails the request, naming where it pointed.  A header value or
 * URL holding a control byte (CR or LF would end the header and start
 * another, or a second request: smuggling) is never sent: US_E_IO.
 * @p is the caller's: us_http_resp_free releases its body.
 */
enum us_status us_http_do(struct us_http *h, const struct us_http_req *q,
			  struct us_http_resp *p);
void us_http_resp_free(struct us_http_resp *p);

/* us_backoff_ms - the wait before retry @attempt (0-based): 100 ms
 * doubling, capped at 2 s, with jitter in [half, full]. */
unsigned us_backoff_ms(unsigned attempt, unsigned rnd);

/* ----------------------------------------------------------- block_cache.c */

struct us_bcache;

/* A cached block: data[0..len) of block @blk of object @obj. */
struct us_block {
	size_t obj;
	uint64_t blk;
	char *data;
	size_t len;
	/* private to block_cache.c */
	int state;
	unsigned refs;
	bool linked;
	struct us_block *hnext, *lprev, *lnext;
};

struct us_bcache *us_bcache_new(uint64_t bytes);
void us_bcache_free(struct us_bcache *c);

/*
 * us_bcache_get - the block (@obj, @blk), referenced: *@b is ready (US_OK),
 * or the caller must fill it (return 1: it was absent, the caller now owns
 * the in-flight entry and must call us_bcache_done), or it failed in another
 * thread's fetch (US_E_IO).  When @claim_only, an entry already present
 * (ready or in flight) returns 0 with *@b NULL: prefetch uses this.
 */
int us_bcache_get(struct us_bcache *c, size_t obj, uint64_t blk,
		  bool claim_only, struct us_block **b);
/* us_bcache_done - the fetch of @b (claimed by us_bcache_get) ended: with
 * @data (malloc'd, @len bytes: the cache owns it) or failed (data NULL). */
void us_bcache_done(struct us_bcache *c, struct us_block *b, char *data,
		    size_t len);
/* us_bcache_abandon - give back a claim never fetched (a prefetch that
 * could not be queued): threads waiting on it look again, not fail. */
void us_bcache_abandon(struct us_bcache *c, struct us_block *b);
void us_bcache_put(struct us_bcache *c, struct us_block *b);
/* us_bcache_has - is (@obj, @blk) present (ready or in flight)? */
bool us_bcache_has(struct us_bcache *c, size_t obj, uint64_t blk);

/* ------------------------------------------------------------ disk_cache.c */

struct us_dcache;

/* us_dcache_open - the block cache in @dir (created 0700 if absent), bounded
 * by @bytes (block files, headers included); one line in @err when it cannot
 * be created or used (US_E_USAGE), or is another user's or writable by group
 * or others (US_E_IO: refused, others could plant blocks). */
enum us_status us_dcache_open(const char *dir, uint64_t bytes,
			      struct us_dcache **out, struct us_err *err);
void us_dcache_free(struct us_dcache *d);
/* us_dcache_name - the file name for a block: hex SHA-256 of its identity
 * (endpoint, bucket, key, ETag, block size, block index); @out has 65 bytes. */
void us_dcache_name(const char *store, const char *key, const char *etag,
		    uint64_t block_size, uint64_t blk, char out[65]);
/* us_dcache_get - read block @name into @buf: true only when its file is a
 * regular file of ours nobody else can write, holding @len bytes whose
 * checksum (keyed by @name) matches.  Anything else is a miss (a bad file of
 * ours removed); @buf's bytes are then undefined. */
bool us_dcache_get(struct us_dcache *d, const char *name, char *buf,
		   size_t len);
/* us_dcache_put - store @buf under @name with its checksum (temp file 0600
 * + rename), then evict oldest-first past the bound.  Failures only cost
 * the cache. */
void us_dcache_put(struct us_dcache *d, const char *name, const char *buf,
		   size_t len);

/* ---------------------------------------------------------------- remote.c */

/* ----------------------------------------------------------- https_index.c */

/* The private view of one object of the listing. */
struct us_rm_object {
	struct us_remote_object pub;
	char *url;        /* request URL */
	bool strong_etag; /* If-Match usable (not W/ nor absent) */
	/* Sequential detection (remote.c note_read): one past the furthest
	 * byte the current run reached, and the bytes the run has read. */
	_Atomic uint64_t run_end;
	_Atomic uint64_t run_bytes;
};

struct us_rm_list {
	struct us_rm_object *o;
	size_t n, cap;
};

/* us_rm_list_add - append an object (all strings copied). */
enum us_status us_rm_list_add(struct us_rm_list *l, const char *key,
			      uint64_t size, const char *etag,
			      struct timespec mtime, const char *url);

/* us_https_list - the listing of an http(s) @url: one object, or a
 * directory ('/'-terminated) of well-known names and an index's shards.
 * *@single when @url named one object. */
enum us_status us_https_list(struct us_http *h, const char *url,
			     struct us_rm_list *l, bool *single,
			     struct us_err *err);

/* us_https_index_names - the distinct shard names of an index JSON's
 * weight_map, each checked (no "..", absolute or empty components).
 * *@names is a malloc'd array of malloc'd strings. */
enum us_status us_https_index_names(const char *json, size_t len,
				    char ***names, size_t *n,
				    struct us_err *err);

/* us_http_head_object - HEAD @url into @size / @etag / @mtime; US_E_IO with
 * a line naming @what for a status other than 200. */
enum us_status us_http_head_object(struct us_http *h, const char *url,
				   const char *what, uint64_t *size,
				   char *etag, size_t netag,
				   struct timespec *mtime, long *status,
				   struct us_err *err);

#endif /* US_REMOTE_INTERNAL_H */
