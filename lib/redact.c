/* redact.c - secrets out of shown text (redact.h). */
#include "redact.h"

#include <assert.h>
#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* Where text is written: cut at @cap - 1 bytes, always NUL-terminated. */
struct sink {
	char *out;
	size_t cap, n;
};

static void put(struct sink *s, const char *p, size_t len)
{
	for (size_t i = 0; i < len && s->n + 1 < s->cap; i++)
		s->out[s->n++] = p[i];
	s->out[s->n] = '\0';
}

/* Where a URL ends inside a line of text. */
static bool url_end(char c)
{
	return c == '\0' || isspace((unsigned char)c) || c == '"' ||
	       c == '\'' || c == '<' || c == '>' || c == '`';
}

/* Where a query value ends: the next parameter, the fragment, the URL's
 * end, or a ':' that a message's text goes on after ("URL: reason"). */
static bool value_end(const char *p)
{
	return url_end(*p) || *p == '&' || *p == '#' ||
	       (*p == ':' && url_end(p[1]));
}

static bool scheme_char(char c)
{
	return isalnum((unsigned char)c) || c == '+' || c == '-' || c == '.';
}

/* Is query parameter [@name, +@len) one whose value is a secret? */
static bool secret_name(const char *name, size_t len)
{
	static const char *const words[] = { "signature", "sig", "token",
		"credential", "key", "secret", "password", "auth" };

	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
		size_t k = strlen(words[w]);

		for (size_t i = 0; i + k <= len; i++)
			if (strncasecmp(name + i, words[w], k) == 0)
				return true;
	}
	return false;
}

/* The authority at @p (after "://"): its userinfo hidden. */
static const char *authority(struct sink *s, const char *p)
{
	size_t len = 0, user = 0;

	while (!url_end(p[len]) && p[len] != '/' && p[len] != '?' &&
	       p[len] != '#') {
		if (p[len] == '@')
			user = len + 1;
		len++;
	}
	if (user)
		put(s, "***@", 4);
	put(s, p + user, len - user);
	return p + len;
}

/* The query at @p (after '?'): secret values hidden. */
static const char *query(struct sink *s, const char *p)
{
	while (!url_end(*p) && *p != '#') {
		size_t nlen = strcspn(p, "=&# \t\r\n\"'<>`");
		const char *v;

		put(s, p, nlen);
		p += nlen;
		if (*p == '=') {
			put(s, "=", 1);
			v = ++p;
			while (!value_end(p))
				p++;
			if (secret_name(v - 1 - nlen, nlen))
				put(s, "REDACTED", 8);
			else
				put(s, v, (size_t)(p - v));
		}
		if (*p != '&')
			break;
		put(s, "&", 1);
		p++;
	}
	return p;
}

/* One URL whose "://" is at @p: written redacted; returns where it ends. */
static const char *url(struct sink *s, const char *p)
{
	const char *path;

	put(s, "://", 3);
	p = authority(s, p + 3);
	path = p;
	while (!url_end(*p) && *p != '?' && *p != '#')
		p++;
	put(s, path, (size_t)(p - path));
	if (*p == '?') {
		put(s, "?", 1);
		p = query(s, p + 1);
	}
	return p;
}

char *us_redact(const char *in, char *out, size_t cap)
{
	struct sink s = { out, cap, 0 };
	const char *p = in;

	assert(cap > 0 && (out + cap <= in || in + strlen(in) < out));
	out[0] = '\0';
	for (;;) {
		const char *u = strstr(p, "://");

		/* a scheme before it, or it is not a URL */
		while (u && (u == p || !scheme_char(u[-1])))
			u = strstr(u + 3, "://");
		if (!u) {
			put(&s, p, strlen(p));
			return out;
		}
		put(&s, p, (size_t)(u - p));
		p = url(&s, u);
	}
}

char *us_url_public(const char *u, char *out, size_t cap)
{
	struct sink s = { out, cap, 0 };
	const char *sep = strstr(u, "://"), *auth, *end;

	assert(cap > 0);
	out[0] = '\0';
	if (!sep) {
		put(&s, u, strcspn(u, "?#"));
		return out;
	}
	put(&s, u, (size_t)(sep - u) + 3);
	auth = sep + 3;
	end = auth + strcspn(auth, "/?#");
	for (const char *at = auth; at < end; at++)
		if (*at == '@')
			auth = at + 1;
	put(&s, auth, strcspn(auth, "?#"));
	return out;
}
