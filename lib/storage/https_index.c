/*
 * https_index.c - the listing of an http(s):// SOURCE.
 *
 * A URL that does not end in '/' names one object: HEAD gives its size,
 * ETag and Last-Modified.  A URL that ends in '/' is a directory, which
 * HTTP cannot list: we HEAD the names a checkpoint directory is known to
 * hold, and when one is an index, GET it and HEAD each shard its
 * weight_map names.  Shard names come from a hostile document: absolute
 * paths, "..", "." and empty components are refused, since they would
 * reach outside the directory.
 */
#include "remote_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codec/json.h"
#include "../grow.h"

static const char *const well_known[] = {
	"model.safetensors.index.json", "pytorch_model.bin.index.json",
	"model.safetensors", "pytorch_model.bin", "config.json",
	"generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"special_tokens_map.json", "tokenizer.model", "vocab.json",
	"merges.txt",
};

enum us_status us_rm_list_add(struct us_rm_list *l, const char *key,
			      uint64_t size, const char *etag,
			      struct timespec mtime, const char *url)
{
	struct us_rm_object *o;

	if (l->n >= US_RM_MAX_OBJECTS)
		return US_E_FORMAT;
	US_TRY(US_GROW(l->o, l->cap, l->n));
	o = &l->o[l->n];
	memset(o, 0, sizeof(*o));
	o->pub.key = strdup(key);
	o->pub.etag = strdup(etag ? etag : "");
	o->url = strdup(url);
	if (!o->pub.key || !o->pub.etag || !o->url) {
		free((char *)o->pub.key);
		free((char *)o->pub.etag);
		free(o->url);
		return US_E_NOMEM;
	}
	o->pub.size = size;
	o->pub.mtime = mtime;
	/* A weak validator ("W/...") never matches If-Match (RFC 7232 uses
	 * strong comparison there): such objects are checked by the
	 * Content-Range total alone. */
	o->strong_etag = etag && etag[0] == '"';
	l->n++;
	return US_OK;
}

static bool has_control(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/*
 * The object's identity from a reply's ETag and Last-Modified.  Reads
 * afterwards must be able to tell if the object changed (remote.c sends
 * If-Match with a strong ETag, else If-Unmodified-Since with the date, and
 * checks the reply's): with neither, a rewrite at the same size would be
 * served mixed, so such an object is refused.  A weak ETag ("W/...")
 * never matches If-Match (RFC 7232 compares strongly there).  An empty
 * object needs none: no read of it ever reaches the server.  A value
 * with a control byte is refused: it would go back out in a header.
 */
static enum us_status take_validators(const struct us_http_resp *p,
				      const char *what, uint64_t size, char *etag,
				      size_t netag, struct timespec *mtime,
				      struct us_err *err)
{
	bool strong = p->etag[0] == '"';

	if (has_control(p->etag) || has_control(p->last_modified))
		return us_err_set(err, US_E_IO, what, "the server's ETag or "
				  "Last-Modified holds a control character");
	if (strlen(p->etag) >= netag)
		return us_err_set(err, US_E_IO, what, "the ETag is over %zu bytes",
				  netag - 1);
	snprintf(etag, netag, "%s", p->etag);
	mtime->tv_sec = 0;
	mtime->tv_nsec = 0;
	/* Unparsable: no date, so no If-Unmodified-Since either. */
	if (p->last_modified[0] && !us_parse_http_date(p->last_modified, mtime))
		mtime->tv_sec = 0;
	if (!strong && mtime->tv_sec == 0 && size > 0)
		return us_err_set(err, US_E_IO, what,
				  "the server gives neither ETag nor Last-Modified%s: "
				  "unshardfs cannot tell if it changes",
				  p->etag[0] ? " (only a weak ETag)" : "");
	return US_OK;
}

static enum us_status status_error(long st, const char *what, const char *m,
				   struct us_err *err)
{
	if (st == 404 || st == 410)
		return us_err_set(err, US_E_IO, what, "no such object (HTTP %ld)",
				  st);
	if (st == 401 || st == 403)
		return us_err_set(err, US_E_IO, what, "access denied (HTTP %ld)",
				  st);
	return us_err_set(err, US_E_IO, what, "HTTP %ld to %s", st, m);
}

/*
 * The size from a one-byte range GET: for servers that refuse HEAD (a
 * presigned URL is signed for GET only; some servers answer 405).  The
 * Content-Range total is the size; a 416 whose Content-Range gives a total
 * of 0 is an empty object.
 */
static enum us_status probe_by_range(struct us_http *h, const char *url,
				     const char *what, uint64_t *size,
				     char *etag, size_t netag,
				     struct timespec *mtime, long *status,
				     struct us_err *err)
{
	char one;
	struct us_http_req q = { .method = "GET", .url = url,
				 .range = "bytes=0-0", .dst = &one, .dst_len = 1 };
	struct us_http_resp p;
	uint64_t a, b;
	enum us_status rc = US_OK;

	if (us_http_do(h, &q, &p) != US_OK) {
		rc = us_err_set(err, US_E_IO, what, "%s", p.transport);
	} else if (p.too_long) {
		rc = us_err_set(err, US_E_IO, what,
				"the server does not answer range requests");
	} else if (p.status == 416 && strcmp(p.content_range, "bytes */0") == 0) {
		*size = 0;
	} else if (p.status != 206) {
		rc = status_error(p.status, what, "a range GET", err);
	} else if (!us_parse_content_range(p.content_range, &a, &b, size) ||
		   a != 0 || b != 0 || *size > (uint64_t)INT64_MAX) {
		rc = us_err_set(err, US_E_IO, what,
				"no valid Content-Range for bytes=0-0");
	}
	*status = p.status;
	if (rc == US_OK)
		rc = take_validators(&p, what, *size, etag, netag, mtime, err);
	us_http_resp_free(&p);
	return rc;
}

enum us_status us_http_head_object(struct us_http *h, const char *url,
				   const char *what, uint64_t *size,
				   char *etag, size_t netag,
				   struct timespec *mtime, long *status,
				   struct us_err *err)
{
	struct us_http_req q = { .method = "HEAD", .url = url };
	struct us_http_resp p;

	*status = 0;
	if (us_http_do(h, &q, &p) != US_OK) {
		enum us_status rc = us_err_set(err, US_E_IO, what,
					       "cannot reach the server: %s",
					       p.transport);
		us_http_resp_free(&p);
		return rc;
	}
	us_http_resp_free(&p);
	*status = p.status;
	if (p.status == 403 || p.status == 405 || p.status == 501)
		return probe_by_range(h, url, what, size, etag, netag, mtime,
				      status, err);
	if (p.status != 200)
		return status_error(p.status, what, "HEAD", err);
	if (!p.has_length || p.content_length > (uint64_t)INT64_MAX)
		return us_err_set(err, US_E_IO, what,
				  "the server sent no valid Content-Length");
	*size = p.content_length;
	return take_validators(&p, what, *size, etag, netag, mtime, err);
}

/* "http://h/a/b/model.safetensors" -> "model.safetensors", decoded. */
static enum us_status last_component(const char *url, char **out,
				     struct us_err *err)
{
	const char *q = strpbrk(url, "?#");
	size_t n = q ? (size_t)(q - url) : strlen(url);
	const char *s = url + n;

	while (s > url && s[-1] != '/')
		s--;
	*out = us_uri_decode(s, (size_t)(url + n - s));
	if (!*out || !us_rel_key_ok(*out) || strchr(*out, '/')) {
		free(*out);
		*out = NULL;
		return us_err_set(err, US_E_USAGE, url,
				  "the URL does not end in a file name");
	}
	return US_OK;
}

/* HEAD @url and list it as @key. */
static enum us_status head_into(struct us_http *h, const char *url,
				const char *key, struct us_rm_list *l,
				struct us_err *err)
{
	char etag[US_RM_MAX_ETAG];
	struct timespec mt;
	uint64_t size;
	long st;
	enum us_status rc;

	rc = us_http_head_object(h, url, url, &size, etag, sizeof(etag), &mt,
				 &st, err);
	if (rc != US_OK)
		return rc;
	rc = us_rm_list_add(l, key, size, etag, mt, url);
	if (rc != US_OK)
		return us_err_set(err, rc, url, "out of memory");
	return US_OK;
}

static bool shard_name_ok(const char *s)
{
	return *s && s[0] != '/' && strlen(s) <= US_RM_MAX_KEY &&
	       !strchr(s, '\\') && !has_control(s) && us_rel_key_ok(s);
}

static void names_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort @v and drop its repeats; the count left.  A weight_map names each
 * shard once per tensor: 10^5 tensors, so n log n, not n^2. */
static size_t sort_unique(const char **v, size_t n)
{
	size_t k = 0;

	if (n)
		qsort(v, n, sizeof(*v), cmp_str);
	for (size_t i = 0; i < n; i++)
		if (k == 0 || strcmp(v[k - 1], v[i]) != 0)
			v[k++] = v[i];
	return k;
}

/* The weight_map's values, each checked, as pointers into @wm. */
static enum us_status shard_values(const cJSON *wm, const char ***out,
				   size_t *n, struct us_err *err)
{
	const char **v = NULL;
	size_t cnt = 0, cap = 0;
	const cJSON *it;

	cJSON_ArrayForEach(it, wm) {
		if (!cJSON_IsString(it) || !shard_name_ok(it->valuestring)) {
			free(v);
			return us_err_reason(err, US_E_FORMAT,
					     "weight_map names an unsafe shard path "
					     "(absolute, '..', '.' or empty component, "
					     "or a control character)");
		}
		if (US_GROW(v, cap, cnt) != US_OK) {
			free(v);
			return us_err_reason(err, US_E_NOMEM, "out of memory");
		}
		v[cnt++] = it->valuestring;
	}
	*out = v;
	*n = cnt;
	return US_OK;
}

enum us_status us_https_index_names(const char *json, size_t len,
				    char ***names, size_t *n,
				    struct us_err *err)
{
	cJSON *doc = NULL, *wm;
	const char **vals = NULL;
	char **v = NULL;
	size_t cnt = 0;
	enum us_status rc = us_json_parse_budget(json, len, US_JSON_TIGHT(len),
						 &doc, err);

	*names = NULL;
	*n = 0;
	if (rc != US_OK)
		return rc;
	wm = cJSON_GetObjectItemCaseSensitive(doc, "weight_map");
	if (!cJSON_IsObject(wm)) {
		rc = us_err_reason(err, US_E_FORMAT, "has no weight_map object");
		goto out;
	}
	rc = shard_values(wm, &vals, &cnt, err);
	if (rc != US_OK)
		goto out;
	cnt = sort_unique(vals, cnt);
	if (cnt > 100000) {
		rc = us_err_reason(err, US_E_FORMAT,
				   "names %zu shards (at most 100000)", cnt);
		goto out;
	}
	v = calloc(cnt ? cnt : 1, sizeof(*v));
	for (size_t i = 0; v && i < cnt; i++)
		if (!(v[i] = strdup(vals[i]))) {
			names_free(v, i);
			v = NULL;
		}
	if (!v) {
		rc = us_err_reason(err, US_E_NOMEM, "out of memory");
		goto out;
	}
	*names = v;
	*n = cnt;
out:
	free(vals);
	cJSON_Delete(doc);
	return rc;
}

static enum us_status get_body(struct us_http *h, const char *url,
			       struct us_http_resp *p, struct us_err *err)
{
	struct us_http_req q = { .method = "GET", .url = url,
				 .max_body = US_RM_MAX_INDEX_BODY };

	if (us_http_do(h, &q, p) != US_OK)
		return us_err_set(err, US_E_IO, url, "cannot reach the server: %s",
				  p->transport);
	if (p->too_long)
		return us_err_set(err, US_E_IO, url, "the index is over %u MiB",
				  US_RM_MAX_INDEX_BODY >> 20);
	if (p->status != 200)
		return us_err_set(err, US_E_IO, url, "HTTP %ld to GET", p->status);
	return US_OK;
}

/* The keys listed so far, sorted, for listed(): a second index's 10^5
 * shards are looked up in the first's by bsearch, not one by one. */
static const char **sorted_keys(const struct us_rm_list *l)
{
	const char **k = malloc((l->n ? l->n : 1) * sizeof(*k));

	for (size_t i = 0; k && i < l->n; i++)
		k[i] = l->o[i].pub.key;
	if (k && l->n)
		qsort(k, l->n, sizeof(*k), cmp_str);
	return k;
}

static bool listed(const char **keys, size_t n, const char *key)
{
	return bsearch(&key, keys, n, sizeof(*keys), cmp_str) != NULL;
}

/* GET the index at @url (already listed) and HEAD each of its shards. */
static enum us_status add_shards(struct us_http *h, const char *base,
				 const char *url, struct us_rm_list *l,
				 struct us_err *err)
{
	struct us_http_resp p;
	struct us_err why = { 0 };
	char **names = NULL, *su = NULL, *enc;
	const char **keys = NULL;
	size_t n = 0, nkeys = l->n;
	enum us_status rc = get_body(h, url, &p, err);

	if (rc != US_OK)
		goto out;
	rc = us_https_index_names(p.body ? p.body : "", p.len, &names, &n, &why);
	if (rc != US_OK) {
		us_err_set(err, rc, url, "%s", why.msg);
		goto out;
	}
	/* Shards are distinct (us_https_index_names): only the names listed
	 * before this index can repeat one. */
	keys = sorted_keys(l);
	if (!keys) {
		rc = us_err_set(err, US_E_NOMEM, url, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && rc == US_OK; i++) {
		if (listed(keys, nkeys, names[i]))
			continue;
		enc = us_uri_encode(names[i], strlen(names[i]), true);
		if (!enc || asprintf(&su, "%s%s", base, enc) < 0) {
			free(enc);
			rc = us_err_set(err, US_E_NOMEM, url, "out of memory");
			break;
		}
		free(enc);
		rc = head_into(h, su, names[i], l, err);
		free(su);
	}
out:
	free(keys);
	names_free(names, n);
	us_http_resp_free(&p);
	return rc;
}

static enum us_status list_directory(struct us_http *h, const char *url,
				     struct us_rm_list *l, struct us_err *err)
{
	static const size_t nwk = sizeof(well_known) / sizeof(well_known[0]);
	enum us_status rc = US_OK;
	char *u = NULL;
	bool idx[2] = { false, false }, denied = false;

	for (size_t i = 0; i < nwk; i++) {
		char etag[US_RM_MAX_ETAG];
		struct timespec mt;
		uint64_t size;
		long st;

		if (asprintf(&u, "%s%s", url, well_known[i]) < 0)
			return us_err_set(err, US_E_NOMEM, url, "out of memory");
		rc = us_http_head_object(h, u, u, &size, etag, sizeof(etag),
					 &mt, &st, err);
		/* Only a clear "not there" is skipped: a server that cannot
		 * be reached must not look like an empty directory.  403
		 * counts as absent: a public S3 bucket answers 403 for a
		 * key that does not exist. */
		if (rc != US_OK && (st == 404 || st == 410 || st == 403)) {
			denied |= st == 403;
			free(u);
			rc = US_OK;
			continue;
		}
		if (rc == US_OK && us_rm_list_add(l, well_known[i], size, etag,
						  mt, u) != US_OK)
			rc = us_err_set(err, US_E_NOMEM, url, "out of memory");
		free(u);
		if (rc != US_OK)
			return rc;
		if (i < 2)
			idx[i] = true;
	}
	for (size_t i = 0; i < 2 && rc == US_OK; i++) {
		if (!idx[i])
			continue;
		if (asprintf(&u, "%s%s", url, well_known[i]) < 0)
			return us_err_set(err, US_E_NOMEM, url, "out of memory");
		rc = add_shards(h, url, u, l, err);
		free(u);
	}
	if (rc == US_OK && l->n == 0)
		return us_err_set(err, US_E_IO, url,
				  "no index or known checkpoint file here%s "
				  "(an https:// directory cannot be listed: "
				  "name the object, or serve an index)",
				  denied ? " (or access denied)" : "");
	return rc;
}

/* Is @port (@n bytes) a decimal port number, 1..65535? */
static bool port_ok(const char *port, size_t n)
{
	unsigned long v = 0;

	if (n == 0 || n > 5)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (port[i] < '0' || port[i] > '9')
			return false;
		v = v * 10 + (unsigned long)(port[i] - '0');
	}
	return v >= 1 && v <= 65535;
}

/*
 * A malformed http(s) URL is the user's mistake (exit status 1), not a
 * server that cannot be reached: it needs a host, an optional numeric port,
 * and a path.  Credentials in the URL are refused, never sent.
 */
static enum us_status check_url(const char *url, struct us_err *err)
{
	const char *auth = strstr(url, "://") + 3; /* us_remote_is_url */
	size_t alen = strcspn(auth, "/?#");
	const char *colon, *end = auth + alen;

	if (memchr(auth, '@', alen))
		return us_err_set(err, US_E_USAGE, url, "a URL with user:password@ "
				  "is not a SOURCE (credentials are never sent)");
	if (*auth == '[') { /* an IPv6 literal */
		const char *close = memchr(auth, ']', alen);

		colon = close && close + 1 < end && close[1] == ':' ? close + 1 : NULL;
		if (!close || close == auth + 1 || (close + 1 < end && !colon))
			return us_err_set(err, US_E_USAGE, url, "the host is not a "
					  "valid [IPv6] address");
	} else {
		colon = memchr(auth, ':', alen);
		if ((colon ? colon : end) == auth)
			return us_err_set(err, US_E_USAGE, url, "the URL names no host");
	}
	if (colon && !port_ok(colon + 1, (size_t)(end - colon - 1)))
		return us_err_set(err, US_E_USAGE, url, "the port is not a number "
				  "from 1 to 65535");
	if (*end != '/')
		return us_err_set(err, US_E_USAGE, url, "the URL names no object or "
				  "directory (http(s)://HOST/PATH/FILE or .../DIR/)");
	return US_OK;
}

enum us_status us_https_list(struct us_http *h, const char *url,
			     struct us_rm_list *l, bool *single,
			     struct us_err *err)
{
	size_t n = strlen(url);
	char *key;
	enum us_status rc;

	*single = false;
	US_TRY(check_url(url, err));
	/* A query names one object (a presigned URL); a fragment is never
	 * sent, so it cannot be what the user meant. */
	if (strchr(url, '#'))
		return us_err_set(err, US_E_USAGE, url,
				  "a URL with a #fragment is not a SOURCE");
	if (n && url[n - 1] == '/')
		return list_directory(h, url, l, err);
	if (strchr(url, '?') && strchr(url, '?')[-1] == '/')
		return us_err_set(err, US_E_USAGE, url,
				  "a directory URL cannot carry a query "
				  "(its files' URLs would not)");
	US_TRY(last_component(url, &key, err));
	rc = head_into(h, url, key, l, err);
	free(key);
	*single = rc == US_OK;
	return rc;
}
