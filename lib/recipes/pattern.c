/* pattern.c - "{name}" patterns: compile, match, format. */
#include "pattern.h"

#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A malformed pattern: the reason, without a path (the recipe adds it). */
#define BAD(why, msg) us_err_reason((why), US_E_FORMAT, "%s", (msg))

void us_pattern_free(struct us_pattern *p)
{
	free(p->text);
	for (uint32_t i = 0; i < p->ncaps; i++)
		free(p->caps[i]);
	memset(p, 0, sizeof(*p));
}

int us_pattern_cap(const struct us_pattern *p, const char *name)
{
	for (uint32_t i = 0; i < p->ncaps; i++)
		if (strcmp(p->caps[i], name) == 0)
			return (int)i;
	return -1;
}

/* One capture at @s (just after '{'): its name, validated, appended. */
static enum us_status add_cap(struct us_pattern *p, const char *s,
			      const char **end, struct us_err *why)
{
	const char *close = strchr(s, '}');
	char *name;

	if (!close)
		return BAD(why, "a '{' is not closed");
	if (close == s)
		return BAD(why, "a capture has no name ('{}')");
	for (const char *q = s; q < close; q++)
		if (!isalnum((unsigned char)*q) && *q != '_')
			return BAD(why, "a capture name is not letters, digits or '_'");
	if (close - s > 63)
		return BAD(why, "a capture name is longer than 63 characters");
	if (p->ncaps == US_RECIPE_MAX_CAPS)
		return BAD(why, "more than 8 captures");
	name = strndup(s, (size_t)(close - s));
	if (!name)
		return us_err_reason(why, US_E_NOMEM, "out of memory");
	if (us_pattern_cap(p, name) >= 0) {
		free(name);
		return BAD(why, "a capture name is used twice");
	}
	p->caps[p->ncaps++] = name;
	/* A capture is a run of digits: what follows must end the run. */
	if (close[1] == '{')
		return BAD(why, "two captures with nothing between them");
	if (isdigit((unsigned char)close[1]))
		return BAD(why, "a capture is followed by a digit");
	*end = close + 1;
	return US_OK;
}

enum us_status us_pattern_compile(const char *text, struct us_pattern *p,
				  struct us_err *why)
{
	enum us_status rc = US_OK;
	const char *s = text;

	memset(p, 0, sizeof(*p));
	if (!*text)
		return BAD(why, "a pattern is empty");
	while (rc == US_OK && *s) {
		if (*s == '}')
			rc = BAD(why, "a '}' has no '{'");
		else if (*s++ == '{')
			rc = add_cap(p, s, &s, why);
	}
	if (rc == US_OK && !(p->text = strdup(text)))
		rc = us_err_reason(why, US_E_NOMEM, "out of memory");
	if (rc != US_OK)
		us_pattern_free(p);
	return rc;
}

bool us_pattern_match(const struct us_pattern *p, const char *name,
		      struct us_capture *caps)
{
	const char *s = p->text, *n = name;
	uint32_t k = 0;

	while (*s) {
		if (*s != '{') {
			if (*s++ != *n++)
				return false;
			continue;
		}
		s = strchr(s, '}') + 1; /* compiled: closed */
		caps[k].s = n;
		while (isdigit((unsigned char)*n))
			n++;
		caps[k].len = (size_t)(n - caps[k].s);
		if (caps[k++].len == 0)
			return false;
	}
	return *n == '\0';
}

bool us_pattern_format(const struct us_pattern *to, const struct us_pattern *from,
		       const struct us_capture *caps, const char *var,
		       unsigned long long idx, char *out, size_t cap)
{
	const char *s = to->text;
	size_t o = 0;

	while (*s) {
		const char *close;
		char num[24];
		const char *v;
		size_t vlen;
		int i;

		if (*s != '{') {
			if (o + 1 >= cap)
				return false;
			out[o++] = *s++;
			continue;
		}
		close = strchr(s, '}');
		if (var && (size_t)(close - s - 1) == strlen(var) &&
		    !strncmp(s + 1, var, strlen(var))) {
			vlen = (size_t)snprintf(num, sizeof(num), "%llu", idx);
			v = num;
		} else {
			char name[64];

			snprintf(name, sizeof(name), "%.*s", (int)(close - s - 1), s + 1);
			i = us_pattern_cap(from, name);
			if (i < 0)
				return false; /* parse.c refuses such a recipe */
			v = caps[i].s;
			vlen = caps[i].len;
		}
		if (o + vlen >= cap)
			return false;
		memcpy(out + o, v, vlen);
		o += vlen;
		s = close + 1;
	}
	out[o] = '\0';
	return true;
}

bool us_capture_add(const struct us_capture *c, uint64_t n, char *buf,
		    size_t cap, struct us_capture *out)
{
	uint64_t v = 0;
	int len;

	assert(c->len > 0 && cap >= 21);
	for (size_t i = 0; i < c->len; i++) {
		unsigned d = (unsigned)(c->s[i] - '0');

		assert(d < 10); /* a capture is a run of digits */
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (v > UINT64_MAX - n)
		return false;
	len = snprintf(buf, cap, "%llu", (unsigned long long)(v + n));
	assert(len > 0 && (size_t)len < cap);
	out->s = buf;
	out->len = (size_t)len;
	return true;
}

const struct us_pattern *us_rule_input_pattern(const struct us_recipe_rule *r,
					       size_t k)
{
	return k == 0 ? &r->from : &r->cat_from[k - 1];
}

int us_rule_input(const struct us_recipe_rule *r, const char *name,
		  struct us_capture *caps)
{
	for (size_t k = 0; k <= r->ncat; k++)
		if (us_pattern_match(us_rule_input_pattern(r, k), name, caps))
			return (int)k;
	return -1;
}
