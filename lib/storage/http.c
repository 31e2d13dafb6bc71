/*
 * http.c - one HTTP request with bounded retries, over a pool of curl easy
 * handles.
 *
 * Each handle keeps its own keep-alive connections (curl_easy_reset keeps
 * them), so a request that takes a free handle reuses a warm connection; a
 * CURLSH shares the DNS cache and TLS sessions between handles.  At most
 * `connections` handles exist: a thread that finds none free waits.
 * Nothing here starts a thread: the daemon forks after open.
 */
#include "remote_internal.h"

#include "curl_dl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct us_http {
	const struct us_creds *creds;
	unsigned retries, timeout_s;
	struct us_rm_counters *ctr;
	CURLSH *share;
	pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	CURL **free_h;
	unsigned nfree, created, max;
	/* The certificates to trust (trust()), read once at us_http_new:
	 * getenv per request would race a setenv in the caller. */
	char *ca_file, *ca_dir;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;
static char load_why[256]; /* why libcurl could not be loaded */

static void global_init(void)
{
	if (!us_curl_load(load_why, sizeof(load_why)))
		global_rc = CURLE_FAILED_INIT;
	else
		global_rc = curl_global_init(CURL_GLOBAL_ALL);
}

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *u)
{
	struct us_http *x = u;

	(void)h;
	(void)a;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&x->share_mu[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *u)
{
	struct us_http *x = u;

	(void)h;
	if ((unsigned)d < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&x->share_mu[d]);
}

/*
 * The certificates to trust, as the tools users already configure say:
 * AWS_CA_BUNDLE (the AWS CLI and SDKs), CURL_CA_BUNDLE (curl), SSL_CERT_FILE
 * and SSL_CERT_DIR (OpenSSL).  libcurl itself reads none of them, and a
 * private S3-compatible store behind an internal CA is common.  Unset: the
 * system's bundle, as libcurl was built to use.  False when out of memory.
 */
static bool trust_from_env(struct us_http *h)
{
	static const char *const files[] = { "AWS_CA_BUNDLE", "CURL_CA_BUNDLE",
					      "SSL_CERT_FILE" };
	const char *dir = getenv("SSL_CERT_DIR");

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *f = getenv(files[i]);

		if (f && *f) {
			if (!(h->ca_file = strdup(f)))
				return false;
			break;
		}
	}
	return !(dir && *dir) || (h->ca_dir = strdup(dir)) != NULL;
}

/* What trust_from_env found, on one handle (libcurl copies the strings). */
static void trust(const struct us_http *h, CURL *c)
{
	if (h->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
	if (h->ca_dir)
		curl_easy_setopt(c, CURLOPT_CAPATH, h->ca_dir);
}

enum us_status us_http_new(const struct us_http_cfg *cfg, struct us_http **out,
			   struct us_err *err)
{
	struct us_http *h;

	pthread_once(&global_once, global_init);
	if (load_why[0])
		return us_err_set(err, US_E_UNSUPPORTED, "libcurl", "%s", load_why);
	if (global_rc != CURLE_OK)
		return us_err_set(err, US_E_IO, "libcurl", "cannot initialise: %s",
				  curl_easy_strerror(global_rc));
	h = calloc(1, sizeof(*h));
	if (!h)
		return us_err_set(err, US_E_NOMEM, "libcurl", "out of memory");
	h->creds = cfg->creds;
	h->retries = cfg->retries;
	h->timeout_s = cfg->timeout_s;
	h->ctr = cfg->ctr;
	h->max = cfg->connections ? cfg->connections : 1;
	/* First, so that us_http_free may destroy them on every path. */
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&h->share_mu[i], NULL);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cv, NULL);
	h->free_h = calloc(h->max, sizeof(*h->free_h));
	h->share = curl_share_init();
	if (!h->free_h || !h->share || !trust_from_env(h)) {
		us_http_free(h);
		return us_err_set(err, US_E_NOMEM, "libcurl", "out of memory");
	}
	curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(h->share, CURLSHOPT_USERDATA, h);
	curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	*out = h;
	return US_OK;
}

void us_http_free(struct us_http *h)
{
	if (!h)
		return;
	/* Every handle is back: the caller frees only when no read runs. */
	assert(h->nfree == h->created);
	for (unsigned i = 0; i < h->nfree; i++)
		curl_easy_cleanup(h->free_h[i]);
	free(h->free_h);
	if (h->share)
		curl_share_cleanup(h->share);
	for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&h->share_mu[i]);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h->ca_file);
	free(h->ca_dir);
	free(h);
}

static CURL *handle_get(struct us_http *h)
{
	CURL *c = NULL;

	pthread_mutex_lock(&h->mu);
	while (!h->nfree && h->created >= h->max)
		pthread_cond_wait(&h->cv, &h->mu);
	if (h->nfree) {
		c = h->free_h[--h->nfree];
	} else {
		c = curl_easy_init();
		if (c)
			h->created++;
	}
	pthread_mutex_unlock(&h->mu);
	return c;
}

static void handle_put(struct us_http *h, CURL *c)
{
	pthread_mutex_lock(&h->mu);
	h->free_h[h->nfree++] = c;
	pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

/* One attempt's state, for the callbacks. */
struct attempt {
	const struct us_http_req *q;
	struct us_http_resp *p;
	CURL *c;
	size_t cap;
	bool error_body; /* a non-2xx reply to a range GET: keep its body */
	struct us_rm_counters *ctr;
};

static void header_value(const char *v, size_t n, char *dst, size_t dn)
{
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= dn)
		n = dn - 1; /* cut: a value this long fails validation anyway */
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static bool header_is(const char *l, size_t n, const char *name, size_t *vo)
{
	size_t k = strlen(name);

	if (n <= k || strncasecmp(l, name, k) != 0 || l[k] != ':')
		return false;
	*vo = k + 1;
	return true;
}

static size_t on_header(char *l, size_t sz, size_t nm, void *u)
{
	struct attempt *a = u;
	struct us_http_resp *p = a->p;
	size_t n = sz * nm, vo;
	char cl[32];

	if (n >= 5 && memcmp(l, "HTTP/", 5) == 0) {
		/* A new header block (after a redirect or 100): forget the
		 * previous one's fields. */
		p->etag[0] = p->last_modified[0] = p->content_range[0] = '\0';
		p->bucket_region[0] = '\0';
		p->has_length = false;
	} else if (header_is(l, n, "etag", &vo)) {
		header_value(l + vo, n - vo, p->etag, sizeof(p->etag));
	} else if (header_is(l, n, "last-modified", &vo)) {
		header_value(l + vo, n - vo, p->last_modified,
			     sizeof(p->last_modified));
	} else if (header_is(l, n, "content-range", &vo)) {
		header_value(l + vo, n - vo, p->content_range,
			     sizeof(p->content_range));
	} else if (header_is(l, n, "x-amz-bucket-region", &vo)) {
		header_value(l + vo, n - vo, p->bucket_region,
			     sizeof(p->bucket_region));
	} else if (header_is(l, n, "content-length", &vo)) {
		header_value(l + vo, n - vo, cl, sizeof(cl));
		p->has_length = us_parse_u64(cl, strlen(cl), &p->content_length);
	}
	return n;
}

static bool keep_body(struct attempt *a, const char *d, size_t n)
{
	struct us_http_resp *p = a->p;
	size_t max = a->error_body ? US_RM_MAX_ERR_BODY : a->q->max_body;

	if (n > max - p->len) {
		p->too_long = true;
		return false;
	}
	if (p->len + n + 1 > a->cap) {
		size_t cap = a->cap ? a->cap : 16384;
		while (cap < p->len + n + 1)
			cap *= 2;
		char *b = realloc(p->body, cap);
		if (!b)
			return false;
		p->body = b;
		a->cap = cap;
	}
	memcpy(p->body + p->len, d, n);
	p->len += n;
	p->body[p->len] = '\0';
	return true;
}

static size_t on_body(char *d, size_t sz, size_t nm, void *u)
{
	struct attempt *a = u;
	struct us_http_resp *p = a->p;
	size_t n = sz * nm;
	long st = 0;

	if (a->q->dst && !a->error_body && p->len == 0) {
		curl_easy_getinfo(a->c, CURLINFO_RESPONSE_CODE, &st);
		if (st < 200 || st > 299)
			a->error_body = true;
	}
	if (a->ctr)
		atomic_fetch_add(&a->ctr->bytes_fetched, n);
	if (!a->q->dst || a->error_body)
		return keep_body(a, d, n) ? n : 0;
	if (n > a->q->dst_len - p->len) {
		p->too_long = true;
		return 0;
	}
	memcpy(a->q->dst + p->len, d, n);
	p->len += n;
	return n;
}

unsigned us_backoff_ms(unsigned attempt, unsigned rnd)
{
	unsigned ms = attempt >= 5 ? 2000 : 100u << attempt;

	if (ms > 2000)
		ms = 2000;
	/* Jitter in [ms/2, ms]: clients that failed together do not retry
	 * together. */
	return ms / 2 + rnd % (ms / 2 + 1);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Text that may go into a request line or a header: no control byte.
 * Values come from servers (an ETag from a listing) and from files anyone
 * may have written (~/.aws): CR LF in one would be a header or a request
 * of the writer's choosing, sent with the user's Authorization. */
static bool request_text_ok(const char *v)
{
	for (; *v; v++)
		if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
			return false;
	return true;
}

/* The host, path and query of @url ("scheme://hostport/path?query");
 * false when one does not fit. */
static bool split_url(const char *url, char *host, size_t hn, char *path,
		      size_t pn, const char **query)
{
	const char *h = strstr(url, "://");
	const char *p, *q;

	h = h ? h + 3 : url;
	p = strchr(h, '/');
	if (!p)
		p = h + strlen(h);
	q = strchr(p, '?');
	size_t pl = q ? (size_t)(q - p) : strlen(p);
	if ((size_t)(p - h) >= hn || pl + 2 > pn)
		return false;
	snprintf(host, hn, "%.*s", (int)(p - h), h);
	snprintf(path, pn, "%.*s", (int)pl, p);
	if (!pl)
		strcpy(path, "/");
	*query = q ? q + 1 : NULL;
	return true;
}

static bool sign(struct us_http *h, const struct us_http_req *q,
		 struct curl_slist **hl)
{
	char host[512], path[8192], hosthdr[600];
	struct us_sigv4_out out;
	struct us_sigv4_in in = { 0 };
	struct curl_slist *t;

	if (!split_url(q->url, host, sizeof(host), path, sizeof(path),
		       &in.query))
		return false;
	in.method = q->method;
	in.hostport = host;
	in.path = path;
	in.key_id = h->creds->key_id;
	in.secret = h->creds->secret;
	in.token = h->creds->token;
	in.region = h->creds->region;
	in.service = "s3";
	in.now = time(NULL);
	if (!request_text_ok(in.key_id) || !request_text_ok(in.region) ||
	    (in.token && !request_text_ok(in.token)) || !us_sigv4_sign(&in, &out))
		return false;
	/* The Host we signed is the Host we send. */
	snprintf(hosthdr, sizeof(hosthdr), "Host: %s", host);
	const char *hs[] = { hosthdr, out.date, out.sha256, out.auth,
			     out.token[0] ? out.token : NULL };
	for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
		if (!hs[i])
			continue;
		t = curl_slist_append(*hl, hs[i]);
		if (!t)
			return false;
		*hl = t;
	}
	return true;
}

static bool add_header(struct curl_slist **hl, const char *name,
		       const char *v)
{
	char line[512];
	struct curl_slist *t;

	if (!v)
		return true;
	if (!request_text_ok(v))
		return false;
	if (snprintf(line, sizeof(line), "%s: %s", name, v) >= (int)sizeof(line))
		return false;
	t = curl_slist_append(*hl, line);
	if (t)
		*hl = t;
	return t != NULL;
}

static void setup(struct us_http *h, CURL *c, const struct us_http_req *q,
		  struct attempt *a, struct curl_slist *hl, char *errbuf)
{
	long t = h->timeout_s ? (long)h->timeout_s : 30;

	curl_easy_reset(c); /* keeps the connections alive */
	curl_easy_setopt(c, CURLOPT_URL, q->url);
	curl_easy_setopt(c, CURLOPT_SHARE, h->share);
	curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	trust(h, c);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	/* --timeout is what docs/remote.md says: the limit of each try, all
	 * of it (connect, wait, body).  A server that trickles bytes cannot
	 * stretch one (a low-speed limit alone lets 2 KiB/s go on forever). */
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, t);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, t);
	/* Redirects are ours to check (us_http_do): curl follows none. */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
	if (strcmp(q->method, "HEAD") == 0)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
}

static bool retryable_status(long st)
{
	return st >= 500 || st == 408 || st == 429;
}

static bool is_redirect(long st)
{
	return st == 301 || st == 302 || st == 303 || st == 307 || st == 308;
}

/* A 3xx answer's Location (absolute, as curl resolves it) into @p. */
static void redirect_target(CURL *c, struct us_http_resp *p)
{
	char *to = NULL;

	if (!is_redirect(p->status) ||
	    curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &to) != CURLE_OK || !to)
		return;
	snprintf(p->location, sizeof(p->location), "%s", to);
}

/* One attempt: true when a response came (p->status set). */
static bool attempt_once(struct us_http *h, CURL *c, const struct us_http_req *q,
			 struct us_http_resp *p)
{
	char errbuf[CURL_ERROR_SIZE] = "";
	struct curl_slist *hl = NULL;
	struct attempt a = { .q = q, .p = p, .c = c, .ctr = h->ctr };
	CURLcode cc;

	free(p->body);
	memset(p, 0, sizeof(*p));
	if (!request_text_ok(q->url)) {
		snprintf(p->transport, sizeof(p->transport),
			 "the URL holds a control byte (not sent)");
		return false;
	}
	if (!add_header(&hl, "Range", q->range) ||
	    !add_header(&hl, "If-Match", q->if_match) ||
	    !add_header(&hl, "If-Unmodified-Since", q->if_unmodified_since) ||
	    !add_header(&hl, "Expect", "") ||
	    (h->creds && h->creds->key_id && !sign(h, q, &hl))) {
		snprintf(p->transport, sizeof(p->transport),
			 "cannot build the request (a header value holds a "
			 "control byte, or is too long: not sent)");
		curl_slist_free_all(hl);
		return false;
	}
	setup(h, c, q, &a, hl, errbuf);
	if (h->ctr)
		atomic_fetch_add(&h->ctr->requests, 1);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &p->status);
	curl_slist_free_all(hl);
	if (cc == CURLE_OK) {
		redirect_target(c, p);
		return true;
	}
	/* A body over its bound is an answer (cut): the caller says what
	 * was too long, rather than "cannot reach". */
	if (cc == CURLE_WRITE_ERROR && p->too_long && p->status)
		return true;
	if (cc == CURLE_WRITE_ERROR && p->too_long)
		snprintf(p->transport, sizeof(p->transport),
			 "the response is longer than asked for");
	else
		snprintf(p->transport, sizeof(p->transport), "%s",
			 errbuf[0] ? errbuf : curl_easy_strerror(cc));
	p->status = 0;
	return false;
}

static _Thread_local unsigned jitter_seed;

#define MAX_HOPS 5

/*
 * May a request for @q go on to @p->location?  Only an unsigned one (a
 * signature is for one host and path, and the Authorization header must
 * travel nowhere else), only to the origin the user gave, and only a few
 * times.  Else false, with the reason in p->transport.
 */
static bool may_follow(const struct us_http *h, const struct us_http_req *q,
		       struct us_http_resp *p, unsigned hops)
{
	const char *why = NULL;

	if (!p->location[0])
		return false; /* a 3xx without a Location: the caller's answer */
	if (h->creds && h->creds->key_id)
		why = "a signed request is never redirected";
	else if (!us_same_origin(q->url, p->location))
		why = "unshardfs follows redirects only to the same scheme, "
		      "host and port";
	else if (hops >= MAX_HOPS)
		why = "too many redirects";
	if (!why)
		return true;
	snprintf(p->transport, sizeof(p->transport), "HTTP %ld redirect to %.160s "
		 "refused: %s", p->status, p->location, why);
	p->status = 0;
	return false;
}

/* Tries of @q (its retries), into @p: true when an answer came. */
static bool tries(struct us_http *h, CURL *c, const struct us_http_req *q,
		  struct us_http_resp *p)
{
	bool got = false;

	if (!jitter_seed)
		jitter_seed = (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&got;
	for (unsigned i = 0;; i++) {
		got = attempt_once(h, c, q, p);
		bool short_body = got && q->dst && p->status == 206 &&
				  p->len != q->dst_len;
		bool again = !got ? !p->too_long
				  : retryable_status(p->status) || short_body;
		if (!again || i >= h->retries)
			break;
		if (h->ctr)
			atomic_fetch_add(&h->ctr->retries, 1);
		sleep_ms(us_backoff_ms(i, (unsigned)rand_r(&jitter_seed)));
	}
	return got;
}

enum us_status us_http_do(struct us_http *h, const struct us_http_req *q,
			  struct us_http_resp *p)
{
	CURL *c = handle_get(h);
	struct us_http_req hop = *q;
	char *url = NULL;
	bool got = false;

	memset(p, 0, sizeof(*p));
	if (!c) {
		snprintf(p->transport, sizeof(p->transport), "out of memory");
		return US_E_IO;
	}
	for (unsigned hops = 0;; hops++) {
		got = tries(h, c, &hop, p);
		if (!got || !is_redirect(p->status) || !may_follow(h, q, p, hops))
			break;
		free(url);
		if (!(url = strdup(p->location))) {
			snprintf(p->transport, sizeof(p->transport), "out of memory");
			got = false;
			break;
		}
		hop.url = url;
	}
	got = got && p->status != 0;
	free(url);
	handle_put(h, c);
	return got ? US_OK : US_E_IO;
}

void us_http_resp_free(struct us_http_resp *p)
{
	free(p->body);
	p->body = NULL;
}
