/* s3_url.c - s3:// URLs, endpoints and addressing, RFC 3986 encoding. */
#include "remote_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

char *us_uri_encode(const char *s, size_t n, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out, *o;

	if (n > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(3 * n + 1);
	if (!out)
		return NULL;
	o = out;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (unreserved(c) || (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *us_uri_decode(const char *s, size_t n)
{
	char *out = malloc(n + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			*o++ = s[i];
			continue;
		}
		if (n - i < 3)
			goto bad;
		int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
			goto bad;
		*o++ = (char)(hi << 4 | lo);
		i += 2;
	}
	*o = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

bool us_rel_key_ok(const char *k)
{
	const char *p = k;

	if (!*k)
		return false;
	for (;;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);

		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!e)
			return true;
		p = e + 1;
	}
}

static bool bucket_ok(const char *b, size_t n)
{
	/* Lenient on purpose: legacy buckets and other stores allow upper
	 * case and '_'; what matters is that it cannot alter the URL. */
	if (n < 1 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!unreserved((unsigned char)b[i]))
			return false;
	return true;
}

enum us_status us_s3_parse(const char *url, struct us_s3_loc *loc,
			   struct us_err *err)
{
	const char *b, *slash;
	size_t blen, plen;

	memset(loc, 0, sizeof(*loc));
	if (strncmp(url, "s3://", 5) != 0)
		return us_err_set(err, US_E_USAGE, url, "not an s3:// URL");
	b = url + 5;
	slash = strchr(b, '/');
	blen = slash ? (size_t)(slash - b) : strlen(b);
	if (!bucket_ok(b, blen))
		return us_err_set(err, US_E_USAGE, url,
				  "no valid bucket name after s3://");
	loc->bucket = strndup(b, blen);
	loc->prefix = strdup(slash ? slash + 1 : "");
	if (!loc->bucket || !loc->prefix)
		goto nomem;
	plen = strlen(loc->prefix);
	loc->dir_slash = slash && (plen == 0 || loc->prefix[plen - 1] == '/');
	if (plen && loc->prefix[plen - 1] == '/')
		loc->prefix[--plen] = '\0';
	/* "s3://b//" left "/" and then "": an empty component too. */
	if (plen > US_RM_MAX_KEY) {
		us_s3_loc_free(loc);
		return us_err_set(err, US_E_USAGE, url, "the prefix is %zu bytes "
				  "long: S3 keys are at most %u", plen,
				  US_RM_MAX_KEY);
	}
	if ((plen == 0 && slash && slash[1]) ||
	    (plen && !us_rel_key_ok(loc->prefix)))
		goto bad_prefix;
	return US_OK;
bad_prefix:
	us_s3_loc_free(loc);
	return us_err_set(err, US_E_USAGE, url,
			  "the prefix has an empty, '.' or '..' component");
nomem:
	us_s3_loc_free(loc);
	return us_err_set(err, US_E_NOMEM, url, "out of memory");
}

void us_s3_loc_free(struct us_s3_loc *loc)
{
	free(loc->bucket);
	free(loc->prefix);
	memset(loc, 0, sizeof(*loc));
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* A bucket that can be a DNS label of a TLS certificate's wildcard. */
static bool bucket_dns_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') ||
		      (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
			return false;
	return true;
}

static enum us_status split_endpoint(const char *u, struct us_endpoint *ep,
				     struct us_err *err)
{
	const char *h, *p;
	size_t blen;

	if (strncmp(u, "https://", 8) == 0) {
		ep->scheme = strdup("https");
		h = u + 8;
	} else if (strncmp(u, "http://", 7) == 0) {
		ep->scheme = strdup("http");
		h = u + 7;
	} else {
		return us_err_set(err, US_E_USAGE, u,
				  "the endpoint URL must start http:// or https://");
	}
	p = strchr(h, '/');
	if (p == h || !*h || strpbrk(h, "?#@ ") != NULL)
		return us_err_set(err, US_E_USAGE, u,
				  "not an endpoint URL (scheme://host[:port][/path])");
	ep->hostport = p ? strndup(h, (size_t)(p - h)) : strdup(h);
	blen = p ? strlen(p) : 0;
	while (blen && p[blen - 1] == '/')
		blen--;
	ep->base = blen ? strndup(p, blen) : strdup("");
	if (!ep->scheme || !ep->hostport || !ep->base)
		return us_err_set(err, US_E_NOMEM, u, "out of memory");
	return US_OK;
}

/* Host headers leave out the scheme's default port (curl does too). */
static void drop_default_port(struct us_endpoint *ep)
{
	size_t n = strlen(ep->hostport);
	const char *def = strcmp(ep->scheme, "https") == 0 ? ":443" : ":80";
	size_t dn = strlen(def);

	if (n > dn && strcmp(ep->hostport + n - dn, def) == 0)
		ep->hostport[n - dn] = '\0';
}

enum us_status us_s3_endpoint(const char *endpoint_url, const char *region,
			      enum us_addressing addr, const char *bucket,
			      struct us_endpoint *ep, struct us_err *err)
{
	const char *u = endpoint_url;
	char aws[256];
	enum us_status rc;

	memset(ep, 0, sizeof(*ep));
	if (!u || !*u)
		u = env_nonempty("AWS_ENDPOINT_URL_S3");
	if (!u)
		u = env_nonempty("AWS_ENDPOINT_URL");
	bool given = u != NULL;
	if (!u) {
		int n = snprintf(aws, sizeof(aws), "https://s3.%s.amazonaws.com",
				 region);
		if (n < 0 || (size_t)n >= sizeof(aws))
			return us_err_set(err, US_E_USAGE, region,
					  "region name too long");
		u = aws;
	}
	rc = split_endpoint(u, ep, err);
	if (rc != US_OK) {
		us_endpoint_free(ep);
		return rc;
	}
	drop_default_port(ep);
	if (addr == US_ADDR_PATH)
		ep->path_style = true;
	else if (addr == US_ADDR_VIRTUAL)
		ep->path_style = false;
	else
		ep->path_style = given || !bucket_dns_ok(bucket);
	return US_OK;
}

void us_endpoint_free(struct us_endpoint *ep)
{
	free(ep->scheme);
	free(ep->hostport);
	free(ep->base);
	memset(ep, 0, sizeof(*ep));
}

char *us_s3_object_url(const struct us_endpoint *ep, const char *bucket,
		       const char *key, const char *query)
{
	char *ek = us_uri_encode(key, strlen(key), true);
	char *out = NULL;
	int n;

	if (!ek)
		return NULL;
	/* Path-style lists the bucket as "/bucket" (as the SDKs do), and an
	 * object as "/bucket/key"; virtual-hosted has "/" and "/key". */
	if (ep->path_style)
		n = asprintf(&out, "%s://%s%s/%s%s%s%s%s", ep->scheme,
			     ep->hostport, ep->base, bucket, *key ? "/" : "",
			     ek, query ? "?" : "", query ? query : "");
	else
		n = asprintf(&out, "%s://%s.%s%s/%s%s%s", ep->scheme, bucket,
			     ep->hostport, ep->base, ek, query ? "?" : "",
			     query ? query : "");
	free(ek);
	return n < 0 ? NULL : out;
}

/* The origin of @url into @o (scheme://host:port, lower case, the port
 * always written); false when it has none we would follow. */
static bool origin(const char *url, char *o, size_t cap)
{
	const char *auth = strstr(url, "://");
	size_t slen, alen;
	const char *port;
	bool https;

	if (!auth)
		return false;
	slen = (size_t)(auth - url);
	https = slen == 5 && strncasecmp(url, "https", 5) == 0;
	if (!https && !(slen == 4 && strncasecmp(url, "http", 4) == 0))
		return false;
	auth += 3;
	alen = strcspn(auth, "/?#");
	if (!alen || memchr(auth, '@', alen))
		return false;
	/* the last ':' after any IPv6 literal's ']' starts the port */
	port = NULL;
	for (size_t i = alen; i-- > 0 && auth[i] != ']';)
		if (auth[i] == ':') {
			port = auth + i;
			break;
		}
	size_t hlen = port ? (size_t)(port - auth) : alen;
	int n = snprintf(o, cap, "%s://%.*s:%.*s", https ? "https" : "http",
			 (int)hlen, auth,
			 port ? (int)(alen - hlen - 1) : (https ? 3 : 2),
			 port ? port + 1 : (https ? "443" : "80"));
	if (n < 0 || (size_t)n >= cap)
		return false;
	for (char *c = o; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	return true;
}

bool us_same_origin(const char *a, const char *b)
{
	char oa[600], ob[600];

	return origin(a, oa, sizeof(oa)) && origin(b, ob, sizeof(ob)) &&
	       strcmp(oa, ob) == 0;
}
