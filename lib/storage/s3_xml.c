/*
 * s3_xml.c - the few XML documents S3 sends us (ListObjectsV2 pages, error
 * bodies), HTTP dates and Content-Range.
 *
 * The XML is read by xml.c's bounded scanner (xml.h): a whole document is
 * checked well-formed before any of it is read, then only the direct
 * children of the elements needed are walked.  That is enough because
 * these documents are flat records of text elements.
 */
#include "remote_internal.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grow.h"
#include "xml.h"

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

/* The first control byte (below 0x20, or DEL) of @s, or NULL.  Server text
 * with one would reach a header (an ETag in If-Match: CR LF starts another
 * header), a file name or a terminal: none is ever taken. */
static const char *control_byte(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return s;
	return NULL;
}

/* @s for a message: printable ASCII kept, every other byte \\xHH, cut to
 * fit @n bytes with "..." (a key may hold anything but NUL). */
static void escape_text(const char *s, char *out, size_t n)
{
	size_t o = 0;

	assert(n >= 8);
	for (; *s && o + 8 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, n - o, "\\x%02x", c);
	}
	if (*s)
		o += (size_t)snprintf(out + o, n - o, "...");
	out[o] = '\0';
}

/* The text of a leaf element's content @v, decoded, at most @max bytes and
 * without control bytes, malloc'd.  Markup inside (a child, a comment) is
 * refused: S3 sends none, and reading around it would be guessing. */
static enum us_status text_of(struct us_xml_span v, size_t max, char **out)
{
	size_t n = (size_t)(v.end - v.p);

	*out = NULL;
	if (memchr(v.p, '<', n) || n > max * 6 + 16)
		return US_E_FORMAT;
	*out = us_xml_decode(v.p, n);
	if (!*out || strlen(*out) > max || control_byte(*out)) {
		free(*out);
		*out = NULL;
		return US_E_FORMAT;
	}
	return US_OK;
}

/*
 * A listing's keys are held three times over while it is taken (the page,
 * the listing, each object's request URL, %-encoded): each key costs its
 * encoded length plus LIST_OBJ_COST for the rest of its object, and a
 * listing's keys may cost LIST_BUDGET in all.  That keeps the
 * memory of taking the largest listing near 256 MiB (docs/remote.md,
 * "What a server's replies can and cannot do").
 */
#define LIST_OBJ_COST 128u
#define LIST_BUDGET (64u << 20)

static size_t key_cost(const char *k)
{
	size_t c = LIST_OBJ_COST;

	for (; *k; k++) {
		unsigned char u = (unsigned char)*k;
		bool plain = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
			     (u >= '0' && u <= '9') || u == '-' || u == '.' ||
			     u == '_' || u == '~' || u == '/';
		c += plain ? 1 : 3;
	}
	return c;
}

/* An entry's key and ETag share one block, behind the running cost of the
 * listing so far: struct us_list_page has no field for it, and one block
 * an object instead of two halves the allocations of a large listing. */
struct entry_text {
	size_t cost; /* key_cost of this entry and of all before it */
	char s[];    /* key NUL ETag NUL */
};

static struct entry_text *entry_text_of(const struct us_list_entry *e)
{
	return (struct entry_text *)(void *)(e->key -
					     offsetof(struct entry_text, s));
}

static size_t listing_cost(const struct us_list_page *pg)
{
	return pg->n ? entry_text_of(&pg->e[pg->n - 1])->cost : 0;
}

/* The key and ETag of @e, in one block (see struct entry_text). */
static enum us_status keep_text(const struct us_list_page *pg,
				struct us_list_entry *e, const char *key,
				const char *etag, struct us_err *err)
{
	size_t kn = strlen(key), en = strlen(etag);
	size_t cost = listing_cost(pg) + key_cost(key);
	struct entry_text *t;

	if (cost > LIST_BUDGET)
		return us_err_reason(err, US_E_FORMAT,
				     "the listing's keys are over %u MiB (%zu "
				     "objects so far; a key counts its "
				     "%%-encoded length plus %u bytes)",
				     LIST_BUDGET >> 20, pg->n,
				     LIST_OBJ_COST);
	t = malloc(sizeof(*t) + kn + en + 2);
	if (!t)
		return us_err_reason(err, US_E_NOMEM, "out of memory");
	t->cost = cost;
	memcpy(t->s, key, kn + 1);
	memcpy(t->s + kn + 1, etag, en + 1);
	e->key = t->s;
	e->etag = t->s + kn + 1;
	return US_OK;
}

/* The elements of one <Contents> record we read; each at most once. */
struct record {
	struct us_xml_span key, size, etag, date;
	bool has_key, has_size, has_etag, has_date;
};

static bool take_field(struct us_xml_span name, struct us_xml_span v, const char *tag,
		       struct us_xml_span *to, bool *has, bool *dup)
{
	if (!us_xml_name_is(name, tag))
		return false;
	*dup |= *has;
	*has = true;
	*to = v;
	return true;
}

static enum us_status read_record(struct us_xml_span rec, struct record *r,
				  struct us_err *err)
{
	struct us_xml_span name, v;
	bool dup = false;

	memset(r, 0, sizeof(*r));
	while (us_xml_next_child(&rec, &name, &v))
		if (!take_field(name, v, "Key", &r->key, &r->has_key, &dup) &&
		    !take_field(name, v, "Size", &r->size, &r->has_size, &dup) &&
		    !take_field(name, v, "ETag", &r->etag, &r->has_etag, &dup))
			take_field(name, v, "LastModified", &r->date, &r->has_date,
				   &dup);
	if (dup)
		return us_err_reason(err, US_E_FORMAT,
				     "a listed object has two <Key>, <Size>, "
				     "<ETag> or <LastModified> elements");
	return US_OK;
}

/* Why the key text @v is refused, with the key shown escaped. */
static enum us_status bad_key(struct us_xml_span v, struct us_err *err)
{
	char *raw = us_xml_decode(v.p, (size_t)(v.end - v.p));
	char shown[256];

	if (!raw || !control_byte(raw)) {
		free(raw);
		return us_err_reason(err, US_E_FORMAT,
				     "a listed object has no valid <Key>");
	}
	escape_text(raw, shown, sizeof(shown));
	free(raw);
	return us_err_reason(err, US_E_FORMAT,
			     "the key \"%s\" has a control character "
			     "(refused: it would reach file names and requests)",
			     shown);
}

static enum us_status parse_contents(struct us_xml_span rec, struct us_list_page *pg,
				     struct us_err *err)
{
	struct us_list_entry *e = &pg->e[pg->n];
	struct record r;
	char *key = NULL, *etag = NULL, *date = NULL, shown[256];
	enum us_status rc;

	memset(e, 0, sizeof(*e));
	US_TRY(read_record(rec, &r, err));
	if (!r.has_key || text_of(r.key, US_RM_MAX_KEY, &key) != US_OK)
		return bad_key(r.key, err);
	escape_text(key, shown, sizeof(shown));
	if (!r.has_size ||
	    !us_parse_u64(r.size.p, (size_t)(r.size.end - r.size.p), &e->size) ||
	    e->size > (uint64_t)INT64_MAX)
		rc = us_err_reason(err, US_E_FORMAT, "%s: no valid <Size>", shown);
	else if (!r.has_etag ||
		 text_of(r.etag, US_RM_MAX_ETAG - 1, &etag) != US_OK || !*etag)
		rc = us_err_reason(err, US_E_FORMAT,
				   "%s: no valid <ETag> (at most %u bytes, "
				   "no control characters)", shown,
				   US_RM_MAX_ETAG - 1);
	else if (!r.has_date || text_of(r.date, 64, &date) != US_OK ||
		 !us_parse_iso8601(date, strlen(date), &e->mtime))
		rc = us_err_reason(err, US_E_FORMAT, "%s: no valid <LastModified>",
				   shown);
	else
		rc = keep_text(pg, e, key, etag, err);
	free(key);
	free(etag);
	free(date);
	return rc;
}

/* IsTruncated and NextContinuationToken, children of the root. */
struct tail {
	struct us_xml_span trunc, token;
	bool has_trunc, has_token, dup;
};

static enum us_status parse_page_tail(const struct tail *t,
				      struct us_list_page *pg,
				      struct us_err *err)
{
	pg->truncated = false;
	free(pg->next_token);
	pg->next_token = NULL;
	if (t->dup)
		return us_err_reason(err, US_E_FORMAT,
				     "two <IsTruncated> or <NextContinuationToken>");
	if (t->has_trunc) {
		if (us_xml_name_is(t->trunc, "true"))
			pg->truncated = true;
		else if (!us_xml_name_is(t->trunc, "false"))
			return us_err_reason(err, US_E_FORMAT,
					     "<IsTruncated> is neither true nor false");
	}
	if (!pg->truncated)
		return US_OK;
	if (!t->has_token || text_of(t->token, 4096, &pg->next_token) != US_OK ||
	    !*pg->next_token)
		return us_err_reason(err, US_E_FORMAT,
				     "a truncated listing has no valid "
				     "NextContinuationToken");
	return US_OK;
}

enum us_status us_s3_parse_list(const char *body, size_t len,
				struct us_list_page *pg, size_t max_total,
				struct us_err *err)
{
	struct us_xml_span doc = { body, body + len }, name, root, v;
	struct tail t = { 0 };
	const char *why;

	if (!us_xml_root(doc, &name, &root, &why))
		return us_err_reason(err, US_E_FORMAT,
				     "the listing is not well-formed XML (%s)", why);
	if (!us_xml_name_is(name, "ListBucketResult"))
		return us_err_reason(err, US_E_FORMAT,
				     "the listing is not a ListBucketResult document");
	while (us_xml_next_child(&root, &name, &v)) {
		if (take_field(name, v, "IsTruncated", &t.trunc, &t.has_trunc,
			       &t.dup) ||
		    take_field(name, v, "NextContinuationToken", &t.token,
			       &t.has_token, &t.dup) ||
		    !us_xml_name_is(name, "Contents"))
			continue;
		if (pg->n >= max_total)
			return us_err_reason(err, US_E_FORMAT,
					     "more than %zu objects", max_total);
		if (US_GROW(pg->e, pg->cap, pg->n) != US_OK)
			return us_err_reason(err, US_E_NOMEM, "out of memory");
		US_TRY(parse_contents(v, pg, err));
		pg->n++;
	}
	return parse_page_tail(&t, pg, err);
}

void us_list_page_free(struct us_list_page *pg)
{
	for (size_t i = 0; i < pg->n; i++)
		free(entry_text_of(&pg->e[i])); /* the key's and the ETag's */
	free(pg->e);
	free(pg->next_token);
	memset(pg, 0, sizeof(*pg));
}

/* The text of child @tag of @e into @dst, cut to fit and with any control
 * byte shown as '?': it goes into a message. */
static void copy_text(struct us_xml_span e, const char *tag, char *dst, size_t n)
{
	struct us_xml_span name, v;

	dst[0] = '\0';
	while (us_xml_next_child(&e, &name, &v)) {
		char *s;

		if (!us_xml_name_is(name, tag) || memchr(v.p, '<', (size_t)(v.end - v.p)))
			continue;
		s = us_xml_decode(v.p, (size_t)(v.end - v.p) > 4096 ? 4096
								 : (size_t)(v.end - v.p));
		for (char *c = s; c && *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		if (s)
			snprintf(dst, n, "%s", s);
		free(s);
		return;
	}
}

void us_s3_parse_error(const char *body, size_t len, char *code, size_t ncode,
		       char *msg, size_t nmsg)
{
	struct us_xml_span doc = { body, body + (body ? len : 0) }, name, e;
	const char *why;

	code[0] = msg[0] = '\0';
	if (!body || !us_xml_root(doc, &name, &e, &why) || !us_xml_name_is(name, "Error"))
		return;
	copy_text(e, "Code", code, ncode);
	copy_text(e, "Message", msg, nmsg);
}
