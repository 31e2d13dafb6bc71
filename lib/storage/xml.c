/*
 * xml.c - a bounded XML scanner for the small documents a store sends
 * (xml.h): one pass that checks a whole document is one well-formed
 * element, then a walk of an element's direct children.  Every access
 * stays inside [p, end): nothing is trusted to be NUL-terminated.
 */
#include "xml.h"

#include <stdlib.h>
#include <string.h>

#include "remote_internal.h"

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
	struct us_xml_span name; /* T_OPEN, T_EMPTY, T_CLOSE */
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

static bool take_name(struct us_xml_span *s, struct us_xml_span *name)
{
	name->p = s->p;
	if (s->p == s->end || !is_name_char(*s->p, true))
		return false;
	while (s->p < s->end && is_name_char(*s->p, false))
		s->p++;
	name->end = s->p;
	return true;
}

static void skip_space(struct us_xml_span *s)
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
static bool take_attr(struct us_xml_span *s)
{
	struct us_xml_span name;
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
static enum tok_kind start_tag(struct us_xml_span *s, struct tok *t)
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
static enum tok_kind special(struct us_xml_span *s, struct tok *t)
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
static enum tok_kind next_tok(struct us_xml_span *s, struct tok *t)
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

bool us_xml_name_is(struct us_xml_span n, const char *s)
{
	size_t len = strlen(s);

	return (size_t)(n.end - n.p) == len && memcmp(n.p, s, len) == 0;
}

static bool same_name(struct us_xml_span a, struct us_xml_span b)
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
bool us_xml_root(struct us_xml_span doc, struct us_xml_span *name,
		 struct us_xml_span *body, const char **why)
{
	struct us_xml_span stack[XML_MAX_DEPTH], s = doc;
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
 * us_xml_root found it): its name and content, in->p moved past it.  Text,
 * comments and processing instructions between children are skipped;
 * descendants deeper down are not children.  False at the end.
 */
bool us_xml_next_child(struct us_xml_span *in, struct us_xml_span *name,
		       struct us_xml_span *out)
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
