/*
 * s3_xml.c - the few XML documents S3 sends us (ListObjectsV2 pages, error
 * bodies), HTTP dates and Content-Range.
 *
 * Not a general XML parser: a bounded scanner that finds <Tag>text</Tag>
 * inside a span.  That is enough because these documents are flat records
 * of text elements, and it keeps every access inside [p, end): nothing is
 * trusted to be NUL-terminated, no length is trusted at all.
 */
#include "remote_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grow.h"

/* A span of the document. */
struct span {
	const char *p, *end;
};

static const char *find_mem(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);

	while ((size_t)(end - p) >= n) {
		const char *q = memchr(p, s[0], (size_t)(end - p) - n + 1);
		if (!q)
			return NULL;
		if (memcmp(q, s, n) == 0)
			return q;
		p = q + 1;
	}
	return NULL;
}

/*
 * Find the first element <@tag> (or <@tag attr...>) in @in; its content in
 * *@out, and in->p moved past its end tag.  A self-closing <tag/> has empty
 * content.  False when absent or unterminated.
 */
static bool xml_elem(struct span *in, const char *tag, struct span *out)
{
	size_t tn = strlen(tag);
	const char *p = in->p;

	for (;;) {
		const char *lt = memchr(p, '<', (size_t)(in->end - p));
		if (!lt || (size_t)(in->end - lt) < tn + 2)
			return false;
		p = lt + 1;
		if (memcmp(p, tag, tn) != 0)
			continue;
		char c = p[tn];
		if (c != '>' && c != ' ' && c != '/' && c != '\t' && c != '\n' &&
		    c != '\r')
			continue;
		const char *gt = memchr(p, '>', (size_t)(in->end - p));
		if (!gt)
			return false;
		if (gt[-1] == '/') {
			out->p = out->end = gt;
			in->p = gt + 1;
			return true;
		}
		char close[80];
		if (tn + 4 > sizeof(close))
			return false;
		snprintf(close, sizeof(close), "</%s>", tag);
		const char *ce = find_mem(gt + 1, in->end, close);
		if (!ce)
			return false;
		out->p = gt + 1;
		out->end = ce;
		in->p = ce + tn + 3;
		return true;
	}
}

/* Append the UTF-8 of code point @cp at *@o. */
static bool put_utf8(char **o, unsigned long cp)
{
	unsigned char *u = (unsigned char *)*o;

	if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return false;
	if (cp < 0x80) {
		*u++ = (unsigned char)cp;
	} else if (cp < 0x800) {
		*u++ = (unsigned char)(0xC0 | cp >> 6);
		*u++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*u++ = (unsigned char)(0xE0 | cp >> 12);
		*u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		*u++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else {
		*u++ = (unsigned char)(0xF0 | cp >> 18);
		*u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		*u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		*u++ = (unsigned char)(0x80 | (cp & 0x3F));
	}
	*o = (char *)u;
	return true;
}

/* Decode the numeric reference "#123" / "#x7B" of @n bytes. */
static bool char_ref(const char *s, size_t n, unsigned long *cp)
{
	bool hexa = n > 1 && (s[1] == 'x' || s[1] == 'X');
	size_t i = hexa ? 2 : 1;
	unsigned long v = 0;

	if (i >= n || n - i > 8)
		return false;
	for (; i < n; i++) {
		int d;
		char c = s[i];
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (hexa && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (hexa && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return false;
		v = v * (hexa ? 16 : 10) + (unsigned long)d;
	}
	*cp = v;
	return true;
}

char *us_xml_decode(const char *s, size_t n)
{
	static const struct { const char *name; char c; } ents[] = {
		{ "amp", '&' }, { "lt", '<' }, { "gt", '>' },
		{ "quot", '"' }, { "apos", '\'' },
	};
	/* A reference never decodes longer than itself ("&#1;" is 4 bytes,
	 * at most 1 of UTF-8; "&#x10FFFF;" 10 for 4). */
	char *out = malloc(n + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\0')
			goto bad;
		if (s[i] != '&') {
			*o++ = s[i];
			continue;
		}
		const char *semi = memchr(s + i, ';', n - i);
		if (!semi || semi - (s + i) > 12)
			goto bad;
		const char *name = s + i + 1;
		size_t nl = (size_t)(semi - name);
		unsigned long cp;
		bool ok = false;
		if (nl && name[0] == '#') {
			ok = char_ref(name, nl, &cp) && put_utf8(&o, cp);
		} else {
			for (size_t k = 0; k < sizeof(ents) / sizeof(ents[0]); k++)
				if (strlen(ents[k].name) == nl &&
				    memcmp(ents[k].name, name, nl) == 0) {
					*o++ = ents[k].c;
					ok = true;
				}
		}
		if (!ok)
			goto bad;
		i = (size_t)(semi - s);
	}
	*o = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

static bool digits(const char *s, size_t n, int *v)
{
	int x = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		x = x * 10 + (s[i] - '0');
	}
	*v = x;
	return true;
}

/* The UTC time of a parsed date, in *@out; false when a field is out of
 * range (timegm would normalise "Feb 31" silently). */
static bool utc_time(int y, int mo, int d, int h, int mi, int se, time_t *out)
{
	struct tm t = { .tm_year = y - 1900, .tm_mon = mo, .tm_mday = d,
			.tm_hour = h, .tm_min = mi, .tm_sec = se };

	if (t.tm_year < 70 || t.tm_year >= 8000 || mo < 0 || mo >= 12 ||
	    d < 1 || d > 31 || h < 0 || h >= 24 || mi < 0 || mi >= 60 ||
	    se < 0 || se > 60)
		return false;
	*out = timegm(&t);
	return true;
}

bool us_parse_iso8601(const char *s, size_t n, struct timespec *ts)
{
	int y, mo, d, h, mi, se;
	long nsec = 0, off = 0;
	size_t i = 19;

	if (n < 20 || s[4] != '-' || s[7] != '-' ||
	    (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' ||
	    s[16] != ':')
		return false;
	if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) ||
	    !digits(s + 8, 2, &d) || !digits(s + 11, 2, &h) ||
	    !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &se))
		return false;
	if (s[i] == '.') {
		long scale = 100000000;
		size_t start = ++i;
		for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
			nsec += (s[i] - '0') * scale;
			scale /= 10;
		}
		if (i == start)
			return false;
	}
	if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
		i++;
	} else if (i + 6 == n && (s[i] == '+' || s[i] == '-') &&
		   s[i + 3] == ':') {
		int oh, om;
		if (!digits(s + i + 1, 2, &oh) || !digits(s + i + 4, 2, &om) ||
		    oh > 23 || om > 59)
			return false;
		off = (oh * 3600L + om * 60L) * (s[i] == '+' ? 1 : -1);
		i += 6;
	} else {
		return false;
	}
	if (i != n || !utc_time(y, mo - 1, d, h, mi, se, &ts->tv_sec))
		return false;
	ts->tv_sec -= off;
	ts->tv_nsec = nsec;
	return true;
}

bool us_parse_http_date(const char *s, struct timespec *ts)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	char mon[4];
	int d, y, h, mi, se, used = 0;

	/* "Sun, 06 Nov 1994 08:49:37 GMT" */
	if (sscanf(s, "%*3s, %2d %3s %4d %2d:%2d:%2d GMT%n", &d, mon, &y, &h,
		   &mi, &se, &used) != 6 || used == 0 || s[used] != '\0')
		return false;
	const char *m = strstr(months, mon);
	if (!m || strlen(mon) != 3 || (m - months) % 3)
		return false;
	if (!utc_time(y, (int)((m - months) / 3), d, h, mi, se, &ts->tv_sec))
		return false;
	ts->tv_nsec = 0;
	return true;
}

bool us_parse_content_range(const char *s, uint64_t *start, uint64_t *end,
			    uint64_t *total)
{
	const char *dash, *slash;

	if (strncmp(s, "bytes ", 6) != 0)
		return false;
	s += 6;
	dash = strchr(s, '-');
	slash = dash ? strchr(dash, '/') : NULL;
	if (!slash)
		return false;
	if (!us_parse_u64(s, (size_t)(dash - s), start) ||
	    !us_parse_u64(dash + 1, (size_t)(slash - dash - 1), end) ||
	    !us_parse_u64(slash + 1, strlen(slash + 1), total))
		return false;
	return *start <= *end && *end < *total;
}

/* Decode the text of element @tag in @rec into a malloc'd string. */
static enum us_status text_of(struct span rec, const char *tag, size_t max,
			      char **out)
{
	struct span v;

	*out = NULL;
	if (!xml_elem(&rec, tag, &v))
		return US_E_FORMAT;
	if ((size_t)(v.end - v.p) > max * 6 + 16)
		return US_E_FORMAT;
	*out = us_xml_decode(v.p, (size_t)(v.end - v.p));
	if (!*out || strlen(*out) > max) {
		free(*out);
		*out = NULL;
		return US_E_FORMAT;
	}
	return US_OK;
}

static enum us_status parse_contents(struct span rec, struct us_list_entry *e,
				     struct us_err *err)
{
	struct span v;
	char *s = NULL;

	memset(e, 0, sizeof(*e));
	if (text_of(rec, "Key", US_RM_MAX_KEY, &e->key) != US_OK)
		return us_err_reason(err, US_E_FORMAT,
				     "a listed object has no valid <Key>");
	struct span r2 = rec;
	if (!xml_elem(&r2, "Size", &v) ||
	    !us_parse_u64(v.p, (size_t)(v.end - v.p), &e->size) ||
	    e->size > (uint64_t)INT64_MAX)
		goto bad_size;
	if (text_of(rec, "ETag", US_RM_MAX_ETAG - 1, &e->etag) != US_OK ||
	    !*e->etag)
		goto bad_etag;
	if (text_of(rec, "LastModified", 64, &s) != US_OK ||
	    !us_parse_iso8601(s, strlen(s), &e->mtime))
		goto bad_date;
	free(s);
	return US_OK;
bad_size:
	us_err_reason(err, US_E_FORMAT, "%s: no valid <Size>", e->key);
	goto fail;
bad_etag:
	us_err_reason(err, US_E_FORMAT, "%s: no valid <ETag>", e->key);
	goto fail;
bad_date:
	us_err_reason(err, US_E_FORMAT, "%s: no valid <LastModified>", e->key);
fail:
	free(s);
	free(e->key);
	free(e->etag);
	return US_E_FORMAT;
}

static enum us_status parse_page_tail(struct span doc, struct us_list_page *pg,
				      struct us_err *err)
{
	struct span v, d = doc;

	pg->truncated = false;
	free(pg->next_token);
	pg->next_token = NULL;
	/* Our own elements come before or after the Contents records; keys
	 * cannot hide a fake <IsTruncated> because '<' in text is &lt;. */
	if (xml_elem(&d, "IsTruncated", &v)) {
		size_t n = (size_t)(v.end - v.p);
		if (n == 4 && memcmp(v.p, "true", 4) == 0)
			pg->truncated = true;
		else if (!(n == 5 && memcmp(v.p, "false", 5) == 0))
			return us_err_reason(err, US_E_FORMAT,
					     "<IsTruncated> is neither true nor false");
	}
	if (!pg->truncated)
		return US_OK;
	d = doc;
	if (text_of(d, "NextContinuationToken", 4096, &pg->next_token) !=
		    US_OK || !*pg->next_token)
		return us_err_reason(err, US_E_FORMAT,
				     "a truncated listing has no NextContinuationToken");
	return US_OK;
}

enum us_status us_s3_parse_list(const char *body, size_t len,
				struct us_list_page *pg, size_t max_total,
				struct us_err *err)
{
	struct span doc = { body, body + len }, root, rec;

	if (!xml_elem(&doc, "ListBucketResult", &root))
		return us_err_reason(err, US_E_FORMAT,
				     "the listing is not a ListBucketResult document");
	struct span scan = root;
	while (xml_elem(&scan, "Contents", &rec)) {
		if (pg->n >= max_total)
			return us_err_reason(err, US_E_FORMAT,
					     "more than %zu objects", max_total);
		if (US_GROW(pg->e, pg->cap, pg->n) != US_OK)
			return us_err_reason(err, US_E_NOMEM, "out of memory");
		US_TRY(parse_contents(rec, &pg->e[pg->n], err));
		pg->n++;
	}
	return parse_page_tail(root, pg, err);
}

void us_list_page_free(struct us_list_page *pg)
{
	for (size_t i = 0; i < pg->n; i++) {
		free(pg->e[i].key);
		free(pg->e[i].etag);
	}
	free(pg->e);
	free(pg->next_token);
	memset(pg, 0, sizeof(*pg));
}

static void copy_text(struct span doc, const char *tag, char *dst, size_t n)
{
	char *s = NULL;

	dst[0] = '\0';
	if (text_of(doc, tag, 4096, &s) == US_OK)
		snprintf(dst, n, "%s", s);
	free(s);
}

void us_s3_parse_error(const char *body, size_t len, char *code, size_t ncode,
		       char *msg, size_t nmsg)
{
	struct span doc = { body, body + (body ? len : 0) }, e;

	code[0] = msg[0] = '\0';
	if (!body || !xml_elem(&doc, "Error", &e))
		return;
	copy_text(e, "Code", code, ncode);
	copy_text(e, "Message", msg, nmsg);
}
