/*
 * s3_xml.c - the few XML documents S3 sends us (ListObjectsV2 pages, error
 * bodies), HTTP dates and Content-Range.
 *
 * Not a general XML parser: a bounded tokenizer that first checks the whole
 * document is one well-formed element (comments and processing
 * instructions skipped, CDATA and DOCTYPE refused, attribute values read
 * as values), then walks the direct children of the elements it needs.
 * That is enough because these documents are flat records of text
 * elements, and it keeps every access inside [p, end): nothing is trusted
 * to be NUL-terminated, no length is trusted at all.
 */
#include "remote_internal.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grow.h"

/* A span of the document. */
struct span {
	const char *p, *end;
};

/* Nesting deeper than this is refused: S3's documents are three deep. */
#define XML_MAX_DEPTH 16

enum tok_kind {
	T_END,   /* the span is used up */
	T_TEXT,  /* character data, up to the next '<' */
	T_SKIP,  /* a comment or a processing instruction */
	T_OPEN,  /* <name attr="v" ...> */
	T_EMPTY, /* <name .../> */
	T_CLOSE, /* </name> */
	T_BAD,   /* malformed: why says how */
};

struct tok {
	enum tok_kind kind;
	struct span name; /* T_OPEN, T_EMPTY, T_CLOSE */
	const char *why;  /* T_BAD */
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

static bool has_prefix(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);

	return (size_t)(end - p) >= n && memcmp(p, s, n) == 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* XML's NameChar, for the ASCII range; any byte of a UTF-8 sequence is
 * taken as a name character (S3's names are ASCII). */
static bool is_name_char(char c, bool first)
{
	unsigned char u = (unsigned char)c;

	if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' ||
	    u == ':' || u >= 0x80)
		return true;
	return !first && ((u >= '0' && u <= '9') || u == '-' || u == '.');
}

static bool take_name(struct span *s, struct span *name)
{
	name->p = s->p;
	if (s->p == s->end || !is_name_char(*s->p, true))
		return false;
	while (s->p < s->end && is_name_char(*s->p, false))
		s->p++;
	name->end = s->p;
	return true;
}

static void skip_space(struct span *s)
{
	while (s->p < s->end && is_space(*s->p))
		s->p++;
}

static enum tok_kind bad(struct tok *t, const char *why)
{
	t->why = why;
	return t->kind = T_BAD;
}

/* One attribute, name="value" or name='value', at s->p.  A '>' inside the
 * value is text: scanning for the tag's end must not stop there. */
static bool take_attr(struct span *s)
{
	struct span name;
	const char *close;

	if (!take_name(s, &name))
		return false;
	skip_space(s);
	if (s->p == s->end || *s->p != '=')
		return false;
	s->p++;
	skip_space(s);
	if (s->p == s->end || (*s->p != '"' && *s->p != '\''))
		return false;
	close = memchr(s->p + 1, *s->p, (size_t)(s->end - s->p - 1));
	if (!close || memchr(s->p + 1, '<', (size_t)(close - s->p - 1)))
		return false;
	s->p = close + 1;
	return true;
}

/* The rest of a start tag, after its name: attributes, then '>' or '/>'. */
static enum tok_kind start_tag(struct span *s, struct tok *t)
{
	for (;;) {
		const char *before = s->p;

		skip_space(s);
		if (s->p == s->end)
			return bad(t, "a tag is not closed");
		if (*s->p == '>') {
			s->p++;
			return t->kind = T_OPEN;
		}
		if (s->end - s->p >= 2 && s->p[0] == '/' && s->p[1] == '>') {
			s->p += 2;
			return t->kind = T_EMPTY;
		}
		if (s->p == before || !take_attr(s))
			return bad(t, "a tag has a malformed attribute");
	}
}

/* Markup that is not an element: comments and processing instructions are
 * skipped whole (a <Key> inside one is not a key); CDATA and DOCTYPE are
 * refused, S3 never sends them and a DOCTYPE could declare entities. */
static enum tok_kind special(struct span *s, struct tok *t)
{
	const char *e;

	if (has_prefix(s->p, s->end, "<!--")) {
		e = find_mem(s->p + 4, s->end, "-->");
		if (!e)
			return bad(t, "a comment is not closed");
		s->p = e + 3;
		return t->kind = T_SKIP;
	}
	if (has_prefix(s->p, s->end, "<?")) {
		e = find_mem(s->p + 2, s->end, "?>");
		if (!e)
			return bad(t, "a processing instruction is not closed");
		s->p = e + 2;
		return t->kind = T_SKIP;
	}
	if (has_prefix(s->p, s->end, "<![CDATA["))
		return bad(t, "it has a CDATA section");
	return bad(t, "it has a DOCTYPE or other declaration");
}

/* The token at s->p; s->p moves past it. */
static enum tok_kind next_tok(struct span *s, struct tok *t)
{
	if (s->p == s->end)
		return t->kind = T_END;
	if (*s->p != '<') {
		const char *lt = memchr(s->p, '<', (size_t)(s->end - s->p));
		s->p = lt ? lt : s->end;
		return t->kind = T_TEXT;
	}
	if (s->end - s->p >= 2 && (s->p[1] == '!' || s->p[1] == '?'))
		return special(s, t);
	if (s->end - s->p >= 2 && s->p[1] == '/') {
		s->p += 2;
		if (!take_name(s, &t->name))
			return bad(t, "an end tag has no name");
		skip_space(s);
		if (s->p == s->end || *s->p != '>')
			return bad(t, "an end tag is not closed");
		s->p++;
		return t->kind = T_CLOSE;
	}
	s->p++;
	if (!take_name(s, &t->name))
		return bad(t, "a '<' does not start a tag");
	return start_tag(s, t);
}

static bool name_is(struct span n, const char *s)
{
	size_t len = strlen(s);

	return (size_t)(n.end - n.p) == len && memcmp(n.p, s, len) == 0;
}

static bool same_name(struct span a, struct span b)
{
	return a.end - a.p == b.end - b.p &&
	       memcmp(a.p, b.p, (size_t)(a.end - a.p)) == 0;
}

static bool all_space(const char *p, const char *end)
{
	for (; p < end; p++)
		if (!is_space(*p))
			return false;
	return true;
}

/*
 * Is @doc one well-formed element (with only comments, processing
 * instructions and space around it, tags balanced and named alike, at
 * most XML_MAX_DEPTH deep)?  Its name and content in *@name and *@body;
 * otherwise false with the reason in *@why.  Checking the whole document
 * before reading any of it means a malformed one is refused, never read
 * up to where it breaks.
 */
static bool xml_root(struct span doc, struct span *name, struct span *body,
		     const char **why)
{
	struct span stack[XML_MAX_DEPTH], s = doc;
	size_t depth = 0;
	bool seen = false;
	struct tok t;

	for (;;) {
		const char *at = s.p;

		switch (next_tok(&s, &t)) {
		case T_END:
			*why = depth ? "it ends inside an element" : "it has no element";
			return seen && !depth;
		case T_BAD:
			*why = t.why;
			return false;
		case T_SKIP:
			break;
		case T_TEXT:
			if (!depth && !all_space(at, s.p)) {
				*why = "it has text outside its element";
				return false;
			}
			break;
		case T_OPEN:
		case T_EMPTY:
			if (!depth && seen) {
				*why = "it has more than one top element";
				return false;
			}
			if (!depth) {
				seen = true;
				*name = t.name;
				body->p = body->end = s.p;
			}
			if (t.kind == T_EMPTY)
				break;
			if (depth == XML_MAX_DEPTH) {
				*why = "it nests too deeply";
				return false;
			}
			stack[depth++] = t.name;
			break;
		case T_CLOSE:
			if (!depth || !same_name(stack[depth - 1], t.name)) {
				*why = "an end tag does not match its start tag";
				return false;
			}
			if (--depth == 0)
				body->end = at;
			break;
		}
	}
}

/*
 * The next child element of @in (a well-formed element's content, as
 * xml_root found it): its name and content, in->p moved past it.  Text,
 * comments and processing instructions between children are skipped;
 * descendants deeper down are not children.  False at the end.
 */
static bool next_child(struct span *in, struct span *name, struct span *out)
{
	struct tok t;
	size_t depth = 0;

	for (;;) {
		const char *at = in->p;

		switch (next_tok(in, &t)) {
		case T_END:
		case T_BAD:
			return false;
		case T_TEXT:
		case T_SKIP:
			break;
		case T_EMPTY:
			if (!depth) {
				*name = t.name;
				out->p = out->end = in->p;
				return true;
			}
			break;
		case T_OPEN:
			if (!depth++) {
				*name = t.name;
				out->p = in->p;
			}
			break;
		case T_CLOSE:
			if (!depth)
				return false; /* not inside a checked element */
			if (!--depth) {
				out->end = at;
				return true;
			}
			break;
		}
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
static enum us_status text_of(struct span v, size_t max, char **out)
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
	struct span key, size, etag, date;
	bool has_key, has_size, has_etag, has_date;
};

static bool take_field(struct span name, struct span v, const char *tag,
		       struct span *to, bool *has, bool *dup)
{
	if (!name_is(name, tag))
		return false;
	*dup |= *has;
	*has = true;
	*to = v;
	return true;
}

static enum us_status read_record(struct span rec, struct record *r,
				  struct us_err *err)
{
	struct span name, v;
	bool dup = false;

	memset(r, 0, sizeof(*r));
	while (next_child(&rec, &name, &v))
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
static enum us_status bad_key(struct span v, struct us_err *err)
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

static enum us_status parse_contents(struct span rec, struct us_list_page *pg,
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
	struct span trunc, token;
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
		if (name_is(t->trunc, "true"))
			pg->truncated = true;
		else if (!name_is(t->trunc, "false"))
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
	struct span doc = { body, body + len }, name, root, v;
	struct tail t = { 0 };
	const char *why;

	if (!xml_root(doc, &name, &root, &why))
		return us_err_reason(err, US_E_FORMAT,
				     "the listing is not well-formed XML (%s)", why);
	if (!name_is(name, "ListBucketResult"))
		return us_err_reason(err, US_E_FORMAT,
				     "the listing is not a ListBucketResult document");
	while (next_child(&root, &name, &v)) {
		if (take_field(name, v, "IsTruncated", &t.trunc, &t.has_trunc,
			       &t.dup) ||
		    take_field(name, v, "NextContinuationToken", &t.token,
			       &t.has_token, &t.dup) ||
		    !name_is(name, "Contents"))
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
static void copy_text(struct span e, const char *tag, char *dst, size_t n)
{
	struct span name, v;

	dst[0] = '\0';
	while (next_child(&e, &name, &v)) {
		char *s;

		if (!name_is(name, tag) || memchr(v.p, '<', (size_t)(v.end - v.p)))
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
	struct span doc = { body, body + (body ? len : 0) }, name, e;
	const char *why;

	code[0] = msg[0] = '\0';
	if (!body || !xml_root(doc, &name, &e, &why) || !name_is(name, "Error"))
		return;
	copy_text(e, "Code", code, ncode);
	copy_text(e, "Message", msg, nmsg);
}
