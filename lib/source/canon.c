/* canon.c - options and file identities between a mount and a loader. */
#include "canon.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "../num.h"
#include "../storage/remote.h"

bool us_cast_parse(const char *v, bool *cast, enum us_dtype *to)
{
	static const struct {
		const char *alias;
		bool cast;
		enum us_dtype to;
	} aliases[] = {
		{"keep", false, US_DT_F32},
		{"bf16", true, US_DT_BF16}, {"bfloat16", true, US_DT_BF16},
		{"f16", true, US_DT_F16},   {"fp16", true, US_DT_F16},
		{"float16", true, US_DT_F16}, {"half", true, US_DT_F16},
		{"f32", true, US_DT_F32},   {"fp32", true, US_DT_F32},
		{"float32", true, US_DT_F32}, {"float", true, US_DT_F32},
	};
	const char *name = strncmp(v, "torch.", 6) ? v : v + 6;

	for (size_t i = 0; i < sizeof(aliases) / sizeof(*aliases); i++) {
		if (strcmp(name, aliases[i].alias) != 0)
			continue;
		*cast = aliases[i].cast;
		*to = aliases[i].to;
		return true;
	}
	return false;
}

bool us_ds_weights_parse(const char *v, enum us_ds_weights *out)
{
	if (!strcmp(v, "fp32"))
		return *out = US_DS_WEIGHTS_FP32, true;
	if (!strcmp(v, "module"))
		return *out = US_DS_WEIGHTS_MODULE, true;
	return false;
}

/* The one spelling of each cast target in the canonical string. */
static const char *cast_name(const struct us_source_opts *o)
{
	if (!o->cast)
		return "keep";
	switch (o->cast_to) {
	case US_DT_BF16: return "bf16";
	case US_DT_F16: return "f16";
	default: return "f32";
	}
}

static bool needs_escape(unsigned char c)
{
	return c == '%' || c == ',' || c == '=' || c < 0x20 || c >= 0x7f;
}

/* Append to @buf at *@n, counting what does not fit (snprintf style). */
static void put(char *buf, size_t cap, size_t *n, const char *s, bool escape)
{
	for (; *s; s++) {
		char tmp[4] = { *s, 0 };

		if (escape && needs_escape((unsigned char)*s))
			snprintf(tmp, sizeof(tmp), "%%%02X", (unsigned char)*s);
		for (const char *t = tmp; *t; t++, (*n)++)
			if (*n + 1 < cap)
				buf[*n] = *t;
	}
	if (cap)
		buf[*n < cap ? *n : cap - 1] = '\0';
}

static void put_kv(char *buf, size_t cap, size_t *n, const char *k,
		   const char *v)
{
	if (*n)
		put(buf, cap, n, ",", false);
	put(buf, cap, n, k, false);
	put(buf, cap, n, "=", false);
	put(buf, cap, n, v, true);
}

static const char *const addressing_names[] = {"auto", "path", "virtual",
					       NULL};

bool us_addressing_parse(const char *v, enum us_addressing *out)
{
	for (int a = 0; addressing_names[a]; a++)
		if (!strcmp(v, addressing_names[a]))
			return *out = (enum us_addressing)a, true;
	return false;
}

static void put_num(char *buf, size_t cap, size_t *n, const char *k,
		    uint64_t v)
{
	char num[24];

	if (!v)
		return; /* unset: the store's default */
	snprintf(num, sizeof(num), "%" PRIu64, v);
	put_kv(buf, cap, n, k, num);
}

/*
 * A remote SOURCE's store options, each only when set, so that a loader
 * given the mount reaches the same store the same way (never credentials:
 * those stay where the AWS tools keep them).  A local mount's string is
 * what it always was.
 */
static void put_remote(char *buf, size_t cap, size_t *n,
		       const struct us_remote_opts *r)
{
	if (r->endpoint_url)
		put_kv(buf, cap, n, "endpoint-url", r->endpoint_url);
	if (r->region)
		put_kv(buf, cap, n, "region", r->region);
	if (r->profile)
		put_kv(buf, cap, n, "profile", r->profile);
	if (r->addressing != US_ADDR_AUTO)
		put_kv(buf, cap, n, "addressing",
		       addressing_names[r->addressing]);
	if (r->no_sign)
		put_kv(buf, cap, n, "no-sign-request", "yes");
	put_num(buf, cap, n, "block-size", r->block_size);
	put_num(buf, cap, n, "remote-cache-size", r->cache_bytes);
	if (r->cache_dir)
		put_kv(buf, cap, n, "cache-dir", r->cache_dir);
	put_num(buf, cap, n, "cache-dir-size", r->cache_dir_size);
	put_num(buf, cap, n, "connections", r->connections);
	put_num(buf, cap, n, "retries", r->retries);
	put_num(buf, cap, n, "timeout", r->timeout_s);
}

size_t us_source_opts_canon(const struct us_source_opts *o, char *buf,
			    size_t cap)
{
	size_t n = 0;

	if (cap)
		buf[0] = '\0';
	put_kv(buf, cap, &n, "format", o->format ? o->format : "auto");
	put_kv(buf, cap, &n, "no-unwrap", o->names.no_unwrap ? "yes" : "no");
	for (size_t i = 0; i < o->names.nstrip; i++)
		put_kv(buf, cap, &n, "strip-prefix", o->names.strip_prefix[i]);
	put_kv(buf, cap, &n, "dtype", cast_name(o));
	put_kv(buf, cap, &n, "ties", us_ties_mode_name(o->ties));
	put_kv(buf, cap, &n, "deepspeed-weights",
	       o->ds_weights == US_DS_WEIGHTS_MODULE ? "module" : "fp32");
	/* Only when given, so a mount without them says what it always did.
	 * Both change names or bytes (the overlay's config.json feeds recipes
	 * and tie evidence); the daemon records them as absolute paths. */
	if (o->recipe)
		put_kv(buf, cap, &n, "recipe", o->recipe);
	if (o->overlay)
		put_kv(buf, cap, &n, "overlay", o->overlay);
	put_remote(buf, cap, &n, &o->remote);
	return n;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Unescape the value [@s, @end) into the store; NULL when malformed. */
static const char *unescape(struct us_canon_opts *c, size_t *used,
			    const char *s, const char *end)
{
	char *out = c->store + *used;

	for (; s < end; s++) {
		int hi, lo;

		if (*used + 2 > sizeof(c->store))
			return NULL;
		if (*s != '%') {
			c->store[(*used)++] = *s;
			continue;
		}
		if (end - s < 3 || (hi = hexval(s[1])) < 0 || (lo = hexval(s[2])) < 0)
			return NULL;
		c->store[(*used)++] = (char)(hi << 4 | lo);
		s += 2;
	}
	c->store[(*used)++] = '\0';
	return out;
}

/* A number of the canonical string: digits only, not 0, at most @max. */
static bool parse_u64(const char *v, uint64_t max, uint64_t *out)
{
	uint64_t n;

	if (!us_parse_u64(v, strlen(v), &n) || n == 0 || n > max)
		return false;
	*out = n;
	return true;
}

static bool parse_uint(const char *v, unsigned *out)
{
	uint64_t n;

	if (!parse_u64(v, UINT32_MAX, &n))
		return false;
	*out = (unsigned)n;
	return true;
}

/* One remote store item (put_remote): 1 applied, 0 not a remote key,
 * -1 a bad value. */
static int apply_remote(struct us_remote_opts *r, const char *k,
			const char *v)
{
	const char **text = !strcmp(k, "endpoint-url") ? &r->endpoint_url
			  : !strcmp(k, "region") ? &r->region
			  : !strcmp(k, "profile") ? &r->profile
			  : !strcmp(k, "cache-dir") ? &r->cache_dir : NULL;

	if (text)
		return *v ? (*text = v, 1) : -1;
	if (!strcmp(k, "addressing"))
		return us_addressing_parse(v, &r->addressing) ? 1 : -1;
	if (!strcmp(k, "no-sign-request"))
		return strcmp(v, "yes") ? -1 : (r->no_sign = true, 1);
	if (!strcmp(k, "block-size"))
		return parse_u64(v, UINT64_MAX, &r->block_size) ? 1 : -1;
	if (!strcmp(k, "remote-cache-size"))
		return parse_u64(v, UINT64_MAX, &r->cache_bytes) ? 1 : -1;
	if (!strcmp(k, "cache-dir-size"))
		return parse_u64(v, UINT64_MAX, &r->cache_dir_size) ? 1 : -1;
	if (!strcmp(k, "connections"))
		return parse_uint(v, &r->connections) ? 1 : -1;
	if (!strcmp(k, "retries"))
		return parse_uint(v, &r->retries) ? 1 : -1;
	if (!strcmp(k, "timeout"))
		return parse_uint(v, &r->timeout_s) ? 1 : -1;
	return 0;
}

/* Apply one decoded item: 0, or the status to refuse with. */
static enum us_status apply(struct us_canon_opts *c, const char *k,
			    const char *v, struct us_err *err)
{
	struct us_source_opts *o = &c->so;
	int remote = apply_remote(&o->remote, k, v);

	if (remote < 0)
		goto bad;
	if (remote > 0)
		return US_OK;
	if (!strcmp(k, "format")) {
		o->format = v;
	} else if (!strcmp(k, "no-unwrap")) {
		if (strcmp(v, "yes") && strcmp(v, "no"))
			goto bad;
		o->names.no_unwrap = !strcmp(v, "yes");
	} else if (!strcmp(k, "strip-prefix")) {
		if (o->names.nstrip == US_CANON_MAX_STRIP || !*v)
			goto bad;
		c->strip[o->names.nstrip++] = v;
	} else if (!strcmp(k, "dtype")) {
		if (!us_cast_parse(v, &o->cast, &o->cast_to))
			goto bad;
	} else if (!strcmp(k, "ties")) {
		if (!us_ties_mode_parse(v, &o->ties))
			goto bad;
	} else if (!strcmp(k, "deepspeed-weights")) {
		if (!us_ds_weights_parse(v, &o->ds_weights))
			goto bad;
	} else if (!strcmp(k, "recipe")) {
		if (!*v)
			goto bad;
		o->recipe = v;
	} else if (!strcmp(k, "overlay")) {
		if (*v != '/')
			goto bad; /* the daemon records it absolute */
		o->overlay = v;
	} else {
		return us_err_set(err, US_E_UNSUPPORTED, "options", "'%s' is "
				  "not an option this loader knows (a newer "
				  "unshardfs mounted it?)", k);
	}
	return US_OK;
bad:
	return us_err_set(err, US_E_FORMAT, "options", "bad value '%s' for %s",
			  v, k);
}

void us_canon_opts_init(struct us_canon_opts *c)
{
	memset(c, 0, sizeof(*c));
	c->so.ties = US_TIES_AUTO;
	c->so.names.strip_prefix = c->strip;
}

enum us_status us_source_opts_decode(const char *s, struct us_canon_opts *c,
				     struct us_err *err)
{
	size_t used = 0;

	us_canon_opts_init(c);
	while (*s) {
		const char *end = s + strcspn(s, ","), *eq = memchr(s, '=', (size_t)(end - s));
		const char *k, *v;

		if (!eq || eq == s)
			return us_err_set(err, US_E_FORMAT, "options", "not "
					  "NAME=VALUE: '%.*s'", (int)(end - s), s);
		k = unescape(c, &used, s, eq);
		v = unescape(c, &used, eq + 1, end);
		if (!k || !v)
			return us_err_set(err, US_E_FORMAT, "options",
					  "malformed or too long: '%.*s'",
					  (int)(end - s), s);
		US_TRY(apply(c, k, v, err));
		s = *end ? end + 1 : end;
	}
	return US_OK;
}

/* FNV-1a: a fingerprint, not a defence (the ctime cannot be set back). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	for (const unsigned char *b = p; n--; b++)
		h = (h ^ *b) * 0x100000001b3ull;
	return h;
}

/* A remote object is who its size and ETag say (the store checks the
 * ETag on every read; Last-Modified can repeat across rewrites). */
static uint64_t remote_identity(uint64_t h, const struct us_file *f)
{
	int64_t size = (int64_t)f->size;
	const char *etag = f->obj->etag ? f->obj->etag : "";

	h = fnv(h, &size, sizeof(size));
	return fnv(h, etag, strlen(etag) + 1);
}

void us_sd_identity(const struct us_statedict *sd, char *buf, size_t cap)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < sd->nfiles; i++) {
		const struct us_file *f = &sd->files[i];
		int64_t v[7] = { (int64_t)f->dev, (int64_t)f->ino, (int64_t)f->size,
				 f->mtime.tv_sec, f->mtime.tv_nsec,
				 f->ctime.tv_sec, f->ctime.tv_nsec };

		h = fnv(h, f->relpath, strlen(f->relpath) + 1);
		if (f->remote)
			h = remote_identity(h, f);
		else
			h = fnv(h, v, sizeof(v));
	}
	snprintf(buf, cap, "v1:%zu:%016" PRIx64, sd->nfiles, h);
}
