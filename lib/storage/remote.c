/*
 * remote.c - a remote SOURCE (remote.h): open, the listing, reads.
 *
 * Reads are served in aligned blocks of block_size through the shared
 * block cache (block_cache.c).  A block is fetched by one range GET that
 * carries If-Match with the ETag recorded at open, and is accepted only
 * when the 206's Content-Range says exactly the range we asked for out of
 * the size we recorded, with a body of exactly that length: a rewritten
 * object gets 412 or a different total and the read fails (EIO); bytes of
 * two versions are never mixed, because every block of a read comes from
 * the one recorded version.
 *
 * Threads: us_remote_open starts none.  The prefetch workers start on the
 * first need (advice at mount, a read that looks sequential, a read of many
 * blocks); the daemon stops them before it forks (us_remote_quiesce), and
 * they start again in the child.
 */
#include "remote_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEF_BLOCK (8ull << 20)
#define DEF_CACHE (256ull << 20)
#define DEF_DISK (10ull << 30)
#define DEF_CONNS 16u
#define DEF_RETRIES 5u
#define DEF_TIMEOUT 30u
#define MAX_CONNS 256u
#define MAX_RETRIES 100u /* docs/remote.md, fs/opts.c: 1 to 100 */
#define MAX_PAGES (US_RM_MAX_OBJECTS / 1000u + 16u)
#define QUEUE_CAP 256u
/* Reads smaller than this, in no run of at least as much, fetch only the
 * SMALL_PAGE-aligned pages they touch (us_remote_read). */
#define SMALL_READ (256u << 10)
#define SMALL_PAGE (16u << 10)
/* How far past a run's end a read may start and still continue it. */
#define RUN_SLACK (64u << 10)
/* Small pages share the block cache: their keys have the top bit set. */
#define PAGE_KEY (1ull << 63)
/* Consecutive absent pages are fetched by one request, up to this many. */
#define RUN_MAX (SMALL_READ / SMALL_PAGE)

/* One request's worth: a block, or a run of consecutive small pages. */
struct job {
	size_t obj;
	unsigned n;
	struct us_block *b[RUN_MAX];
};

struct us_remote {
	char *url;
	bool single, s3;
	struct us_s3_loc loc;
	struct us_endpoint ep;
	struct us_creds creds;
	struct us_rm_list list;
	struct us_http *http;
	struct us_bcache *bc;
	struct us_dcache *dc;
	uint64_t block_size;
	unsigned connections, depth, retries;
	bool hinted; /* opts.hinted_readahead: no read-ahead of byte runs */
	struct us_rm_counters ctr;
	pthread_mutex_t emu;     /* last_err */
	char last_err[512];

	/* The prefetch pool, started lazily (see the top). */
	pthread_mutex_t pmu;
	pthread_cond_t pcv;
	_Atomic bool started;
	bool stopping;
	pthread_t *workers;
	unsigned nworkers;
	struct job q[QUEUE_CAP];
	size_t qhead, qlen;
};

bool us_remote_is_url(const char *source)
{
	return source && (strncmp(source, "s3://", 5) == 0 ||
			  strncmp(source, "https://", 8) == 0 ||
			  strncmp(source, "http://", 7) == 0);
}

/* ------------------------------------------------------------- options */

static enum us_status take_opts(struct us_remote *r,
				const struct us_remote_opts *o,
				struct us_remote_opts *out, struct us_err *err)
{
	*out = *o;
	if (!out->block_size)
		out->block_size = DEF_BLOCK;
	if (!out->cache_bytes)
		out->cache_bytes = DEF_CACHE;
	if (!out->cache_dir_size)
		out->cache_dir_size = DEF_DISK;
	if (!out->connections)
		out->connections = DEF_CONNS;
	if (!o->retries)
		out->retries = DEF_RETRIES;
	if (!out->timeout_s)
		out->timeout_s = DEF_TIMEOUT;
	if (out->block_size < 4096 || out->block_size > US_RM_MAX_BLOCK)
		return us_err_set(err, US_E_USAGE, r->url,
				  "--block-size must be from 4 KiB to 1 GiB");
	if (out->connections > MAX_CONNS)
		return us_err_set(err, US_E_USAGE, r->url,
				  "--connections must be at most %u", MAX_CONNS);
	if (out->retries > MAX_RETRIES)
		return us_err_set(err, US_E_USAGE, r->url,
				  "--retries must be at most %u", MAX_RETRIES);
	r->block_size = out->block_size;
	r->hinted = out->hinted_readahead;
	r->connections = out->connections;
	r->retries = out->retries;
	uint64_t fit = out->cache_bytes / out->block_size;
	r->depth = (unsigned)(fit / 4 < out->connections ? fit / 4
							 : out->connections);
	return US_OK;
}

/* ------------------------------------------------------------- S3 errors */

/* Does @text hold @secret, or 12 bytes of it in a row (a server may echo
 * a credential it was sent, whole or cut, in its error message)? */
static bool holds_secret(const char *text, const char *secret)
{
	size_t n = secret ? strlen(secret) : 0, w = n < 12 ? n : 12;

	for (size_t i = 0; w && i + w <= n; i++)
		if (memmem(text, strlen(text), secret + i, w))
			return true;
	return false;
}

static enum us_status s3_fail(const struct us_remote *r, const char *what,
			      const struct us_http_resp *p, struct us_err *err)
{
	char code[128], msg[256];
	const char *src = r->creds.source ? r->creds.source : "no credentials";

	us_s3_parse_error(p->body, p->len, code, sizeof(code), msg, sizeof(msg));
	/* The server's words are shown; a credential in them never is. */
	if (holds_secret(msg, r->creds.token) || holds_secret(msg, r->creds.secret))
		snprintf(msg, sizeof(msg), "(the server's message quoted a "
			 "credential: not shown)");
	if (holds_secret(code, r->creds.token) || holds_secret(code, r->creds.secret))
		snprintf(code, sizeof(code), "(not shown)");
	if (strcmp(code, "NoSuchBucket") == 0)
		return us_err_set(err, US_E_IO, what, "no such bucket: %s",
				  r->loc.bucket);
	if (strcmp(code, "InvalidAccessKeyId") == 0)
		return us_err_set(err, US_E_IO, what,
				  "the store does not know access key ID %s "
				  "(InvalidAccessKeyId; keys from %s)",
				  r->creds.key_id ? r->creds.key_id : "-", src);
	if (strcmp(code, "SignatureDoesNotMatch") == 0)
		return us_err_set(err, US_E_IO, what,
				  "the signature does not match "
				  "(SignatureDoesNotMatch): wrong secret key for "
				  "access key ID %s (keys from %s)",
				  r->creds.key_id ? r->creds.key_id : "-", src);
	if (strcmp(code, "ExpiredToken") == 0)
		return us_err_set(err, US_E_IO, what,
				  "the session token has expired (keys from %s)",
				  src);
	if (p->bucket_region[0] && (p->status == 301 || p->status == 400))
		return us_err_set(err, US_E_IO, what,
				  "the bucket is in region %s: use --region=%s",
				  p->bucket_region, p->bucket_region);
	if (strcmp(code, "AccessDenied") == 0 || p->status == 403)
		return us_err_set(err, US_E_IO, what,
				  "access denied (AccessDenied, HTTP 403; keys from %s)",
				  r->creds.key_id ? src : "--no-sign-request");
	if (strcmp(code, "NoSuchKey") == 0 || p->status == 404)
		return us_err_set(err, US_E_IO, what, "not found (HTTP 404)");
	return us_err_set(err, US_E_IO, what, "HTTP %ld%s%s%s%s", p->status,
			  code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
}

/* ------------------------------------------------------------- listing */

static char *list_query(const char *lp, const char *token)
{
	char *ep = us_uri_encode(lp, strlen(lp), false);
	char *et = token ? us_uri_encode(token, strlen(token), false) : NULL;
	char *q = NULL;

	/* In sorted order already, as the signature canonicalises it. */
	if (ep && (!token || et) &&
	    asprintf(&q, "%s%s%slist-type=2%s%s", token ? "continuation-token=" : "",
		     token ? et : "", token ? "&" : "", *lp ? "&prefix=" : "",
		     *lp ? ep : "") < 0)
		q = NULL;
	free(ep);
	free(et);
	return q;
}

static enum us_status list_page(struct us_remote *r, const char *lp,
				struct us_list_page *pg, struct us_err *err)
{
	char *q = list_query(lp, pg->next_token), *url = NULL;
	struct us_http_resp p = { 0 };
	struct us_err why = { 0 };
	enum us_status rc;

	url = q ? us_s3_object_url(&r->ep, r->loc.bucket, "", q) : NULL;
	free(q);
	if (!url)
		return us_err_set(err, US_E_NOMEM, r->url, "out of memory");
	struct us_http_req req = { .method = "GET", .url = url,
				   .max_body = US_RM_MAX_LIST_BODY };
	if (us_http_do(r->http, &req, &p) != US_OK) {
		rc = us_err_set(err, US_E_IO, r->url,
				"cannot reach %s://%s after %u retries: %s",
				r->ep.scheme, r->ep.hostport, r->retries,
				p.transport);
	} else if (p.too_long && p.status == 200) {
		rc = us_err_set(err, US_E_IO, r->url,
				"a listing page is over %u MiB",
				US_RM_MAX_LIST_BODY >> 20);
	} else if (p.status != 200) {
		rc = s3_fail(r, r->url, &p, err);
	} else {
		rc = us_s3_parse_list(p.body ? p.body : "", p.len, pg,
				      US_RM_MAX_OBJECTS, &why);
		if (rc != US_OK)
			us_err_set(err, rc, r->url, "ListObjectsV2: %s", why.msg);
	}
	us_http_resp_free(&p);
	free(url);
	return rc;
}

/*
 * Keys under the prefix that path semantics cannot serve are skipped, not
 * refused: "sub/" is the console's directory marker and "a//b" or ".."
 * components would alias or climb; one such key must not make the rest of
 * a bucket unreadable.  A key outside the prefix (a broken server) too.
 */
static enum us_status take_entries(struct us_remote *r, const char *lp,
				   struct us_list_page *pg, struct us_err *err)
{
	size_t lpn = strlen(lp);

	for (size_t i = 0; i < pg->n; i++) {
		const struct us_list_entry *e = &pg->e[i];
		if (strncmp(e->key, lp, lpn) != 0 || !us_rel_key_ok(e->key + lpn))
			continue;
		char *url = us_s3_object_url(&r->ep, r->loc.bucket, e->key, NULL);
		enum us_status rc = url ? us_rm_list_add(&r->list, e->key + lpn,
							 e->size, e->etag,
							 e->mtime, url)
					: US_E_NOMEM;
		free(url);
		if (rc != US_OK)
			return us_err_set(err, rc, r->url, "%s",
					  rc == US_E_NOMEM ? "out of memory"
							   : "too many objects");
	}
	return US_OK;
}

static enum us_status list_prefix(struct us_remote *r, const char *lp,
				  struct us_err *err)
{
	struct us_list_page pg = { 0 };
	enum us_status rc = US_OK;
	unsigned pages = 0;

	do {
		if (++pages > MAX_PAGES) {
			rc = us_err_set(err, US_E_IO, r->url,
					"the listing does not end (over %u pages)",
					MAX_PAGES);
			break;
		}
		rc = list_page(r, lp, &pg, err);
	} while (rc == US_OK && pg.truncated);
	if (rc == US_OK)
		rc = take_entries(r, lp, &pg, err);
	us_list_page_free(&pg);
	return rc;
}

/* s3://b/KEY naming one object: HEAD it. */
static enum us_status head_single(struct us_remote *r, bool *found,
				  struct us_err *err)
{
	char *url = us_s3_object_url(&r->ep, r->loc.bucket, r->loc.prefix, NULL);
	const char *base = strrchr(r->loc.prefix, '/');
	struct us_http_req q = { .method = "HEAD", .url = url };
	struct us_http_resp p = { 0 };
	enum us_status rc = US_OK;
	struct timespec mt = { 0, 0 };

	*found = false;
	if (!url)
		return us_err_set(err, US_E_NOMEM, r->url, "out of memory");
	if (us_http_do(r->http, &q, &p) != US_OK) {
		rc = us_err_set(err, US_E_IO, r->url, "cannot reach %s://%s: %s",
				r->ep.scheme, r->ep.hostport, p.transport);
	} else if (p.status == 200) {
		if (!p.has_length || p.content_length > (uint64_t)INT64_MAX)
			rc = us_err_set(err, US_E_IO, r->url,
					"HEAD gave no valid Content-Length");
		else if (p.last_modified[0])
			us_parse_http_date(p.last_modified, &mt);
		if (rc == US_OK)
			rc = us_rm_list_add(&r->list, base ? base + 1 : r->loc.prefix,
					    p.content_length, p.etag, mt, url);
		if (rc == US_E_NOMEM)
			us_err_set(err, rc, r->url, "out of memory");
		*found = rc == US_OK;
	} else if (p.status != 404) {
		rc = s3_fail(r, r->url, &p, err);
	}
	us_http_resp_free(&p);
	free(url);
	return rc;
}

static enum us_status s3_listing(struct us_remote *r, struct us_err *err)
{
	char *lp = NULL;
	bool found = false;
	enum us_status rc;

	if (*r->loc.prefix && asprintf(&lp, "%s/", r->loc.prefix) < 0)
		return us_err_set(err, US_E_NOMEM, r->url, "out of memory");
	rc = list_prefix(r, lp ? lp : "", err);
	free(lp);
	if (rc == US_OK && r->list.n == 0 && *r->loc.prefix && !r->loc.dir_slash) {
		rc = head_single(r, &found, err);
		r->single = found;
	}
	if (rc == US_OK && r->list.n == 0)
		rc = us_err_set(err, US_E_IO, r->url, "nothing under %s", r->url);
	return rc;
}

static int obj_cmp(const void *a, const void *b)
{
	const struct us_rm_object *x = a, *y = b;

	return strcmp(x->pub.key, y->pub.key);
}

/* ------------------------------------------------------------- open/free */

/* A store cannot list one key twice; a broken one could (and then
 * us_remote_find would pick either). */
static enum us_status check_unique(const struct us_remote *r,
				   struct us_err *err)
{
	for (size_t i = 1; i < r->list.n; i++)
		if (strcmp(r->list.o[i - 1].pub.key, r->list.o[i].pub.key) == 0)
			return us_err_set(err, US_E_IO, r->url,
					  "the listing names %s twice",
					  r->list.o[i].pub.key);
	return US_OK;
}

static enum us_status normalise_url(struct us_remote *r, const char *url,
				    struct us_err *err)
{
	if (strncmp(url, "s3://", 5) == 0) {
		r->s3 = true;
		US_TRY(us_s3_parse(url, &r->loc, err));
		if (asprintf(&r->url, "s3://%s%s%s%s", r->loc.bucket,
			     *r->loc.prefix || r->loc.dir_slash ? "/" : "",
			     r->loc.prefix,
			     *r->loc.prefix && r->loc.dir_slash ? "/" : "") < 0)
			r->url = NULL;
	} else {
		r->url = strdup(url);
	}
	if (!r->url)
		return us_err_set(err, US_E_NOMEM, url, "out of memory");
	return US_OK;
}

static enum us_status open_store(struct us_remote *r,
				 const struct us_remote_opts *o,
				 struct us_err *err)
{
	struct us_http_cfg hc = { .connections = o->connections,
				  .retries = o->retries,
				  .timeout_s = o->timeout_s, .ctr = &r->ctr };

	if (r->s3) {
		US_TRY(us_creds_resolve(o, &r->creds, err));
		US_TRY(us_s3_endpoint(o->endpoint_url, r->creds.region,
				      o->addressing, r->loc.bucket, &r->ep, err));
		hc.creds = &r->creds;
	}
	US_TRY(us_http_new(&hc, &r->http, err));
	if (r->s3)
		return s3_listing(r, err);
	return us_https_list(r->http, r->url, &r->list, &r->single, err);
}

enum us_status us_remote_open(const char *url, const struct us_remote_opts *o,
			      struct us_remote **out, struct us_err *err)
{
	static const struct us_remote_opts none;
	struct us_remote_opts opts;
	struct us_remote *r;
	enum us_status rc;

	*out = NULL;
	if (!us_remote_is_url(url))
		return us_err_set(err, US_E_USAGE, url ? url : "(null)",
				  "not an s3://, https:// or http:// URL");
	r = calloc(1, sizeof(*r));
	if (!r)
		return us_err_set(err, US_E_NOMEM, url, "out of memory");
	pthread_mutex_init(&r->pmu, NULL);
	pthread_cond_init(&r->pcv, NULL);
	pthread_mutex_init(&r->emu, NULL);
	rc = normalise_url(r, url, err);
	if (rc == US_OK)
		rc = take_opts(r, o ? o : &none, &opts, err);
	if (rc == US_OK && opts.cache_dir && *opts.cache_dir)
		rc = us_dcache_open(opts.cache_dir, opts.cache_dir_size, &r->dc,
				    err);
	if (rc == US_OK)
		rc = open_store(r, &opts, err);
	if (rc == US_OK) {
		r->bc = us_bcache_new(opts.cache_bytes);
		if (!r->bc)
			rc = us_err_set(err, US_E_NOMEM, r->url, "out of memory");
	}
	if (rc != US_OK) {
		us_remote_free(r);
		return rc;
	}
	qsort(r->list.o, r->list.n, sizeof(*r->list.o), obj_cmp);
	rc = check_unique(r, err);
	if (rc != US_OK) {
		us_remote_free(r);
		return rc;
	}
	*out = r;
	return US_OK;
}

/* Stop the workers; the jobs nobody took end unfetched, to be looked for
 * again by the next reader (a fork comes; at the end there is none). */
static void pool_stop(struct us_remote *r)
{
	pthread_mutex_lock(&r->pmu);
	r->stopping = true;
	pthread_cond_broadcast(&r->pcv);
	pthread_mutex_unlock(&r->pmu);
	for (unsigned i = 0; i < r->nworkers; i++)
		pthread_join(r->workers[i], NULL);
	free(r->workers);
	r->workers = NULL;
	r->nworkers = 0;
	for (; r->qlen; r->qlen--, r->qhead = (r->qhead + 1) % QUEUE_CAP) {
		const struct job *j = &r->q[r->qhead];

		for (unsigned k = 0; k < j->n; k++) {
			us_bcache_abandon(r->bc, j->b[k]);
			us_bcache_put(r->bc, j->b[k]);
		}
	}
}

void us_remote_free(struct us_remote *r)
{
	if (!r)
		return;
	pool_stop(r);
	us_bcache_free(r->bc);
	us_dcache_free(r->dc);
	us_http_free(r->http);
	for (size_t i = 0; i < r->list.n; i++) {
		free((char *)r->list.o[i].pub.key);
		free((char *)r->list.o[i].pub.etag);
		free(r->list.o[i].url);
	}
	free(r->list.o);
	us_creds_free(&r->creds);
	us_endpoint_free(&r->ep);
	us_s3_loc_free(&r->loc);
	pthread_mutex_destroy(&r->pmu);
	pthread_cond_destroy(&r->pcv);
	pthread_mutex_destroy(&r->emu);
	free(r->url);
	free(r);
}

size_t us_remote_count(const struct us_remote *r)
{
	return r->list.n;
}

const struct us_remote_object *us_remote_at(const struct us_remote *r, size_t i)
{
	return i < r->list.n ? &r->list.o[i].pub : NULL;
}

size_t us_remote_lower_bound(const struct us_remote *r, const char *key)
{
	size_t lo = 0, hi = r->list.n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (strcmp(r->list.o[mid].pub.key, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct us_remote_object *us_remote_find(const struct us_remote *r,
					      const char *key)
{
	size_t i = us_remote_lower_bound(r, key);

	return i < r->list.n && strcmp(r->list.o[i].pub.key, key) == 0
		       ? &r->list.o[i].pub : NULL;
}

bool us_remote_single(const struct us_remote *r)
{
	return r->single;
}

const char *us_remote_url(const struct us_remote *r)
{
	return r->url;
}

void us_remote_get_stats(const struct us_remote *r, struct us_remote_stats *s)
{
	struct us_rm_counters *c = (struct us_rm_counters *)&r->ctr;

	s->requests = atomic_load(&c->requests);
	s->retries = atomic_load(&c->retries);
	s->bytes_fetched = atomic_load(&c->bytes_fetched);
	s->bytes_read = atomic_load(&c->bytes_read);
	s->disk_hits = atomic_load(&c->disk_hits);
}

/* ------------------------------------------------------------- fetching */

/* Is @p the answer to "bytes=@start-(@start+@len-1)" of object @o?  NULL
 * if so, else why not (in @why). */
static const char *range_reply_bad(const struct us_rm_object *o,
				   const struct us_http_resp *p, uint64_t start,
				   size_t len, char *why, size_t nwhy)
{
	uint64_t s, e, total;
	struct timespec lm;

	if (p->status == 412)
		return "the object changed since open (HTTP 412 to the precondition)";
	if (p->too_long)
		return "the response is longer than asked for";
	/* A changed ETag in the reply is a changed object, If-Match or not. */
	if ((p->status == 200 || p->status == 206) && p->etag[0] &&
	    o->pub.etag[0] && strcmp(p->etag, o->pub.etag) != 0)
		return "the object changed since open (another ETag)";
	/* Without a strong ETag the recorded date is the identity, sent as
	 * If-Unmodified-Since, which a server may ignore: a reply must carry
	 * its own Last-Modified, and it must still be that date (a reply
	 * without one could be any version). */
	if ((p->status == 200 || p->status == 206) && !o->strong_etag &&
	    o->pub.mtime.tv_sec && !p->last_modified[0])
		return "the reply has no Last-Modified (the object has no "
		       "ETag: without one, its version cannot be checked)";
	if ((p->status == 200 || p->status == 206) && !o->strong_etag &&
	    o->pub.mtime.tv_sec &&
	    (!us_parse_http_date(p->last_modified, &lm) ||
	     lm.tv_sec != o->pub.mtime.tv_sec))
		return "the object changed since open (another Last-Modified)";
	if (p->status == 200) { /* Range ignored: only the whole object will do */
		if (start == 0 && len == o->pub.size && p->len == len &&
		    (!p->has_length || p->content_length == o->pub.size))
			return NULL;
		return "the server ignored the Range header";
	}
	if (p->status != 206) {
		snprintf(why, nwhy, "HTTP %ld", p->status);
		return why;
	}
	if (p->len != len) {
		snprintf(why, nwhy, "%zu of %zu bytes, after the retries", p->len,
			 len);
		return why;
	}
	if (!us_parse_content_range(p->content_range, &s, &e, &total) ||
	    s != start || e != start + len - 1) {
		snprintf(why, nwhy, "Content-Range \"%s\" is not the range asked for",
			 p->content_range);
		return why;
	}
	if (total != o->pub.size)
		return "the object changed since open (another size)";
	return NULL;
}

/* Keep why a read failed, for us_remote_last_error. */
static void read_failed(struct us_remote *r, const struct us_rm_object *o,
			uint64_t start, size_t len, const char *why)
{
	pthread_mutex_lock(&r->emu);
	snprintf(r->last_err, sizeof(r->last_err), "%s: bytes %llu-%llu: %s",
		 o->pub.key, (unsigned long long)start,
		 (unsigned long long)(start + len - 1), why);
	pthread_mutex_unlock(&r->emu);
}

void us_remote_last_error(struct us_remote *r, char *buf, size_t n)
{
	pthread_mutex_lock(&r->emu);
	snprintf(buf, n, "%s", r->last_err);
	pthread_mutex_unlock(&r->emu);
}

static bool disk_name(const struct us_remote *r, const struct us_rm_object *o,
		      uint64_t blk, char name[65])
{
	char id[US_RM_MAX_ETAG + 64];

	/* Without an ETag or a date, nothing tells versions apart. */
	if (!r->dc || (!o->pub.etag[0] && !o->pub.mtime.tv_sec))
		return false;
	snprintf(id, sizeof(id), "%s|%llu|%lld.%09ld", o->pub.etag,
		 (unsigned long long)o->pub.size, (long long)o->pub.mtime.tv_sec,
		 o->pub.mtime.tv_nsec);
	us_dcache_name("", o->url, id, r->block_size, blk, name);
	return true;
}

/* Without a strong ETag (an https server that sends none, or a weak one),
 * the recorded Last-Modified is the precondition instead: the server
 * answers 412 if the object changed after it. */
static const char *unmodified_since(const struct us_rm_object *o,
				    char date[64])
{
	static const char days[] = "SunMonTueWedThuFriSat";
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	struct tm tm;

	/* Not strftime: %a and %b follow the locale, HTTP wants English. */
	if (o->strong_etag || !o->pub.mtime.tv_sec ||
	    !gmtime_r(&o->pub.mtime.tv_sec, &tm))
		return NULL;
	snprintf(date, 64, "%.3s, %02d %.3s %04d %02d:%02d:%02d GMT",
		 days + 3 * tm.tm_wday, tm.tm_mday, months + 3 * tm.tm_mon,
		 tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
	return date;
}

/* GET bytes [@start, @start + @len) of object @idx into @dst, checked
 * against the recorded identity; false (EIO) when they cannot be had. */
static bool fetch_range(struct us_remote *r, size_t idx, uint64_t start,
			size_t len, char *dst)
{
	const struct us_rm_object *o = &r->list.o[idx];
	char range[64], date[64], why[160];
	struct us_http_resp p = { 0 };

	assert(len > 0 && start < o->pub.size && len <= o->pub.size - start);
	snprintf(range, sizeof(range), "bytes=%llu-%llu",
		 (unsigned long long)start,
		 (unsigned long long)(start + len - 1));
	struct us_http_req q = { .method = "GET", .url = o->url, .range = range,
				 .if_match = o->strong_etag ? o->pub.etag : NULL,
				 .if_unmodified_since = unmodified_since(o, date),
				 .dst = dst, .dst_len = len };
	const char *bad = us_http_do(r->http, &q, &p) != US_OK
				  ? p.transport
				  : range_reply_bad(o, &p, start, len, why,
						    sizeof(why));
	if (bad)
		read_failed(r, o, start, len, bad);
	us_http_resp_free(&p);
	return !bad;
}

/* Fetch block @blk of object @idx: malloc'd bytes, or NULL (EIO). */
static char *fetch_block(struct us_remote *r, size_t idx, uint64_t blk,
			 size_t *len)
{
	const struct us_rm_object *o = &r->list.o[idx];
	uint64_t start = blk * r->block_size;
	char name[65];
	bool named;

	assert(start < o->pub.size);
	*len = (size_t)(o->pub.size - start < r->block_size
				? o->pub.size - start : r->block_size);
	char *data = malloc(*len);
	if (!data)
		return NULL;
	named = disk_name(r, o, blk, name);
	if (named && us_dcache_get(r->dc, name, data, *len)) {
		atomic_fetch_add(&r->ctr.disk_hits, 1);
		return data;
	}
	if (!fetch_range(r, idx, start, *len, data)) {
		free(data);
		return NULL;
	}
	if (named)
		us_dcache_put(r->dc, name, data, *len);
	return data;
}

/* The bytes of small page @pg (PAGE_KEY | index) of object @idx. */
static size_t page_len(const struct us_remote *r, size_t idx, uint64_t pg)
{
	const struct us_rm_object *o = &r->list.o[idx];
	uint64_t start = (pg & ~PAGE_KEY) * SMALL_PAGE;

	assert(start < o->pub.size);
	return (size_t)(o->pub.size - start < SMALL_PAGE ? o->pub.size - start
							  : SMALL_PAGE);
}

/*
 * Fill the claimed pages @b[0..@n) (consecutive, of object @idx) with one
 * request, each page then its own allocation (each leaves the cache on its
 * own).  Failure fails them all.
 */
static bool fill_pages(struct us_remote *r, size_t idx, struct us_block **b,
		       unsigned n)
{
	uint64_t start = (b[0]->blk & ~PAGE_KEY) * SMALL_PAGE;
	size_t total = 0, at = 0;
	char *all;
	bool ok;

	for (unsigned k = 0; k < n; k++) {
		assert(b[k]->obj == idx && b[k]->blk == b[0]->blk + k);
		total += page_len(r, idx, b[k]->blk);
	}
	all = malloc(total);
	ok = all && fetch_range(r, idx, start, total, all);
	for (unsigned k = 0; k < n; k++) {
		size_t len = page_len(r, idx, b[k]->blk);
		char *data = ok ? malloc(len) : NULL;

		if (data)
			memcpy(data, all + at, len);
		ok = ok && data;
		us_bcache_done(r->bc, b[k], data, data ? len : 0);
		at += len;
	}
	free(all);
	return ok;
}

/* Fill the block or small pages claimed in @j. */
static bool fill(struct us_remote *r, const struct job *j)
{
	size_t len = 0;
	char *data;

	if (j->b[0]->blk & PAGE_KEY)
		return fill_pages(r, j->obj, (struct us_block **)j->b, j->n);
	assert(j->n == 1);
	data = fetch_block(r, j->obj, j->b[0]->blk, &len);
	us_bcache_done(r->bc, j->b[0], data, len);
	return data != NULL;
}

/* ------------------------------------------------------------- prefetch */

static void *worker(void *arg)
{
	struct us_remote *r = arg;
	struct job j;

	for (;;) {
		pthread_mutex_lock(&r->pmu);
		while (!r->qlen && !r->stopping)
			pthread_cond_wait(&r->pcv, &r->pmu);
		if (r->stopping) {
			pthread_mutex_unlock(&r->pmu);
			return NULL;
		}
		j = r->q[r->qhead];
		r->qhead = (r->qhead + 1) % QUEUE_CAP;
		r->qlen--;
		pthread_mutex_unlock(&r->pmu);
		fill(r, &j);
		for (unsigned k = 0; k < j.n; k++)
			us_bcache_put(r->bc, j.b[k]);
	}
}

/* Start the workers on first need; without them, reads still work. */
static void pool_start(struct us_remote *r)
{
	if (atomic_load(&r->started))
		return;
	pthread_mutex_lock(&r->pmu);
	if (!atomic_load(&r->started) && !r->stopping && r->depth) {
		/* One connection fewer than the pool: a reader that misses
		 * never waits behind a full set of prefetches. */
		unsigned n = r->connections > 1 ? r->connections - 1 : 1;
		r->workers = calloc(n, sizeof(*r->workers));
		for (unsigned i = 0; r->workers && i < n; i++) {
			if (pthread_create(&r->workers[i], NULL, worker, r) != 0)
				break;
			r->nworkers++;
		}
	}
	atomic_store(&r->started, true);
	pthread_mutex_unlock(&r->pmu);
}

/* Queue job @j (its claims made) for the workers; when it cannot be
 * queued, give the claims back. */
static void queue_job(struct us_remote *r, const struct job *j)
{
	bool queued = false;

	pthread_mutex_lock(&r->pmu);
	if (r->qlen < QUEUE_CAP && r->nworkers && !r->stopping) {
		r->q[(r->qhead + r->qlen) % QUEUE_CAP] = *j;
		r->qlen++;
		queued = true;
		pthread_cond_signal(&r->pcv);
	}
	pthread_mutex_unlock(&r->pmu);
	for (unsigned k = 0; !queued && k < j->n; k++) {
		us_bcache_abandon(r->bc, j->b[k]);
		us_bcache_put(r->bc, j->b[k]);
	}
}

/* Prefetch block @blk of object @idx, unless present or in flight. */
static void enqueue(struct us_remote *r, size_t idx, uint64_t blk)
{
	struct job j = { .obj = idx, .n = 1 };

	if (us_bcache_get(r->bc, idx, blk, true, &j.b[0]) != 1)
		return; /* present, in flight, or no memory */
	queue_job(r, &j);
}

/* Fetch @j's run of pages: by the workers (@queue), or now, here (false:
 * that fetch failed). */
static bool start_run(struct us_remote *r, const struct job *j, bool queue)
{
	bool ok;

	if (queue) {
		queue_job(r, j);
		return true;
	}
	ok = fill(r, j);
	for (unsigned k = 0; k < j->n; k++)
		us_bcache_put(r->bc, j->b[k]);
	return ok;
}

/*
 * Claim the absent small pages @p0..@p1 of object @idx and fetch each run
 * of consecutive ones with one request (at most RUN_MAX pages): the records
 * around a DCP item's edges, or a pickle read at mount, cost a request, not
 * one per page.  Pages present or in flight are left to their fetch.
 * false: a fetch made here (not @queue) failed, after its retries; the
 * caller's read fails with it rather than try again.
 */
static bool fetch_pages(struct us_remote *r, size_t idx, uint64_t p0,
			uint64_t p1, bool queue)
{
	struct job j = { .obj = idx, .n = 0 };

	for (uint64_t p = p0; p <= p1; p++) {
		bool claimed = us_bcache_get(r->bc, idx, PAGE_KEY | p, true,
					     &j.b[j.n]) == 1;

		if (claimed)
			j.n++;
		/* a run ends before a page already there, or when full */
		if (j.n && (!claimed || j.n == RUN_MAX)) {
			if (!start_run(r, &j, queue))
				return false;
			j.n = 0;
		}
	}
	return j.n == 0 || start_run(r, &j, queue);
}

/*
 * Sequential detection, per object, in bytes: a read that starts at most
 * RUN_SLACK past the end of the current run, and not more than two blocks
 * behind it (FUSE threads deliver the kernel's read-ahead slightly out of
 * order), continues the run; any other starts a new one.  A run counts the
 * bytes it has read, so scattered small reads (the optimizer's scalars
 * read at mount, one per parameter, across a whole shard) never look
 * sequential however many blocks they touch.  Racy between threads by
 * design: a hint.  Returns the run's bytes, this read included.
 */
static uint64_t note_read(struct us_remote *r, size_t idx, uint64_t off,
			  size_t len)
{
	struct us_rm_object *o = &r->list.o[idx];
	uint64_t end = atomic_load(&o->run_end), to = off + len;

	if (end == 0 || off > end + RUN_SLACK ||
	    to + 2 * r->block_size < end) {
		atomic_store(&o->run_end, to);
		atomic_store(&o->run_bytes, len);
		return len;
	}
	while (to > end && !atomic_compare_exchange_weak(&o->run_end, &end, to))
		;
	return atomic_fetch_add(&o->run_bytes, len) + len;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Blocks [@from, @to] of object @idx for the workers, started on first use
 * (none when @from > @to). */
static void enqueue_range(struct us_remote *r, size_t idx, uint64_t from,
			  uint64_t to)
{
	if (from > to)
		return;
	pool_start(r);
	for (uint64_t b = from; b <= to; b++)
		enqueue(r, idx, b);
}

/* A run of a block's worth: fetch the next `depth` blocks after @last. */
static void prefetch_after(struct us_remote *r, size_t idx, uint64_t last)
{
	const struct us_rm_object *o = &r->list.o[idx];
	uint64_t nblocks = (o->pub.size + r->block_size - 1) / r->block_size;

	if (r->depth && nblocks)
		enqueue_range(r, idx, last + 1,
			      min_u64(last + r->depth, nblocks - 1));
}

/* ------------------------------------------------------------- reads */

/*
 * A read of many blocks (the loader reads whole tensors) needs them all
 * now: while this thread fetches @blk, the workers fetch the next `depth`
 * of this read, a window that moves with the loop so that the cache never
 * holds more of one read ahead than it can keep.  (A read of several small
 * pages fetched them already, one request per run: fetch_pages.)
 */
static void ahead_in_read(struct us_remote *r, size_t idx, uint64_t blk,
			  uint64_t last)
{
	if (r->depth)
		enqueue_range(r, idx, blk + 1, min_u64(last, blk + r->depth));
}

/*
 * The block, referenced, or NULL (EIO).  A block whose fetch failed in
 * another thread (a prefetch, or a reader of the same block) fails this
 * read too: that fetch already made its 1 + retries tries, and trying again
 * here would multiply the time a dead store takes to answer EIO by the
 * number of FUSE requests waiting on the block (the kernel itself retries
 * a failed read-ahead once, synchronously, so a read's bound is twice one
 * fetch's: docs/remote.md).
 */
static struct us_block *get_block(struct us_remote *r, size_t idx,
				  uint64_t blk)
{
	struct us_block *b;
	int rc = us_bcache_get(r->bc, idx, blk, false, &b);

	if (rc == 1) { /* ours to fetch */
		struct job j = { .obj = idx, .n = 1, .b = { b } };

		if (fill(r, &j))
			return b;
		us_bcache_put(r->bc, b);
		return NULL;
	}
	if (rc == US_OK)
		return b;
	us_bcache_put(r->bc, b);
	return NULL;
}

/*
 * Copy [@off, @off + @len) of object @idx into @buf from the cache's units
 * of @unit bytes (blocks, or small pages: @key PAGE_KEY), each fetched by
 * the first reader that misses it; while each block is fetched, the
 * workers fetch the read's next ones (ahead_in_read).  false: EIO.
 */
static bool copy_units(struct us_remote *r, size_t idx, char *buf, size_t len,
		       uint64_t off, uint64_t unit, uint64_t key)
{
	uint64_t first = off / unit, last = (off + len - 1) / unit;
	char *dst = buf;

	for (uint64_t u = first; u <= last; u++) {
		struct us_block *b;
		uint64_t ustart = u * unit, from, to;

		if (!key)
			ahead_in_read(r, idx, u, last);
		if (!(b = get_block(r, idx, key | u)))
			return false;
		from = off > ustart ? off - ustart : 0;
		to = off + len - ustart < b->len ? off + len - ustart : b->len;
		assert(from < to && to <= b->len);
		memcpy(dst, b->data + from, (size_t)(to - from));
		dst += to - from;
		us_bcache_put(r->bc, b);
	}
	assert(dst == buf + len);
	return true;
}

void us_remote_quiesce(struct us_remote *r)
{
	pool_stop(r);
	pthread_mutex_lock(&r->pmu);
	r->stopping = false;
	atomic_store(&r->started, false);
	pthread_mutex_unlock(&r->pmu);
}

void us_remote_advise(struct us_remote *r, const struct us_remote_object *o,
		      uint64_t off, uint64_t len)
{
	const struct us_rm_object *ro = (const struct us_rm_object *)o;
	size_t idx = (size_t)(ro - r->list.o);

	assert(idx < r->list.n && &r->list.o[idx].pub == o);
	if (len == 0 || off >= o->size || !r->depth)
		return;
	if (len > o->size - off)
		len = o->size - off;
	if (len < SMALL_READ) { /* records: the small pages holding them */
		pool_start(r);
		(void)fetch_pages(r, idx, off / SMALL_PAGE,
				  (off + len - 1) / SMALL_PAGE, true);
		return;
	}
	/* a view's next source bytes: the blocks holding them, as far as
	 * the read-ahead depth reaches (the cache must keep them) */
	uint64_t b0 = off / r->block_size, b1 = (off + len - 1) / r->block_size;

	enqueue_range(r, idx, b0, min_u64(b1, b0 + r->depth - 1));
}

/* Are blocks @first..@last all absent from the cache? */
static bool none_cached(struct us_remote *r, size_t idx, uint64_t first,
			uint64_t last)
{
	for (uint64_t b = first; b <= last; b++)
		if (us_bcache_has(r->bc, idx, b))
			return false;
	return true;
}

enum us_status us_remote_read(struct us_remote *r,
			      const struct us_remote_object *o, void *buf,
			      size_t len, uint64_t off)
{
	const struct us_rm_object *ro = (const struct us_rm_object *)o;
	size_t idx = (size_t)(ro - r->list.o);
	uint64_t bs = r->block_size, run;

	assert(idx < r->list.n && &r->list.o[idx].pub == o);
	atomic_fetch_add(&r->ctr.bytes_read, len);
	if (off > o->size || len > o->size - off) {
		errno = EIO;
		return US_E_IO;
	}
	if (len == 0)
		return US_OK;
	uint64_t first = off / bs, last = (off + len - 1) / bs;
	bool ok;

	run = note_read(r, idx, off, len);
	/*
	 * A small read outside any run, of blocks not in the cache: the small
	 * pages it touches (SMALL_PAGE), through the cache, not whole blocks.
	 * Metadata read at mount (a safetensors header, the zip records around
	 * a DCP item, a pickled scalar) would otherwise fetch a block (8 MiB)
	 * per few bytes: a DCP checkpoint's items, an archive every few MiB of
	 * each shard, fetched every block of the shards.  Pages are cached
	 * because those reads cluster: one item's end records and the next
	 * one's header share a page.
	 */
	if (run < SMALL_READ && none_cached(r, idx, first, last)) {
		/* the absent pages, one request per run of them, then the copy */
		ok = fetch_pages(r, idx, off / SMALL_PAGE,
				 (off + len - 1) / SMALL_PAGE, false) &&
		     copy_units(r, idx, buf, len, off, SMALL_PAGE, PAGE_KEY);
	} else {
		/* A run already a block long before this read: read ahead of
		 * it.  (One long read is no run: its own blocks are fetched in
		 * parallel by ahead_in_read, nothing past it.) */
		if (run - len >= bs && !r->hinted)
			prefetch_after(r, idx, last);
		ok = copy_units(r, idx, buf, len, off, bs, 0);
	}
	if (!ok) {
		errno = EIO;
		return US_E_IO;
	}
	return US_OK;
}
