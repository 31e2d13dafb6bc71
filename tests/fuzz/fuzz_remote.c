/*
 * fuzz_remote.c - libFuzzer target: what a remote store sends the client
 * (lib/storage/remote_internal.h).  The first byte picks the parser: a
 * ListObjectsV2 page (appended twice, as pages are), an S3 error body, XML
 * text, Content-Range / dates / sizes, an https index's weight_map, an
 * s3:// URL.  Whatever is accepted must keep the parsers' promises.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "storage/remote_internal.h"

static void check(int cond)
{
	if (!cond)
		abort();
}

static void fuzz_list(const char *s, size_t n)
{
	struct us_list_page pg = { 0 };
	struct us_err err;

	enum us_status rc = us_s3_parse_list(s, n, &pg, 64, &err);

	if (rc == US_OK)
		rc = us_s3_parse_list(s, n, &pg, 64, &err);
	check(pg.n <= 64);
	for (size_t i = 0; i < pg.n; i++)
		check(strlen(pg.e[i].key) <= US_RM_MAX_KEY &&
		      pg.e[i].size <= (uint64_t)INT64_MAX && pg.e[i].etag[0]);
	if (rc == US_OK)
		check(!pg.truncated || (pg.next_token && pg.next_token[0]));
	us_list_page_free(&pg);
}

static void fuzz_text(const char *s, size_t n)
{
	char code[32], msg[64], *d;

	us_s3_parse_error(s, n, code, sizeof(code), msg, sizeof(msg));
	check(strlen(code) < sizeof(code) && strlen(msg) < sizeof(msg));
	d = us_xml_decode(s, n);
	check(!d || strlen(d) <= n);
	free(d);
	d = us_uri_decode(s, n);
	check(!d || strlen(d) <= n);
	free(d);
}

static void fuzz_fields(const char *z, size_t n)
{
	uint64_t a, b, t;
	struct timespec ts;

	if (us_parse_content_range(z, &a, &b, &t))
		check(a <= b && b < t);
	us_parse_iso8601(z, n, &ts);
	us_parse_http_date(z, &ts);
	us_parse_u64(z, n, &a);
}

static void fuzz_index(const char *s, size_t n)
{
	char **v = NULL;
	size_t cnt = 0;
	struct us_err err;

	if (us_https_index_names(s, n, &v, &cnt, &err) != US_OK) {
		check(!v && !cnt);
		return;
	}
	for (size_t i = 0; i < cnt; i++) {
		check(us_rel_key_ok(v[i]) && v[i][0] != '/');
		free(v[i]);
	}
	free(v);
}

static void fuzz_url(const char *z)
{
	struct us_s3_loc l;
	struct us_err err;

	if (us_s3_parse(z, &l, &err) != US_OK)
		return;
	check(l.bucket[0] && (!l.prefix[0] || us_rel_key_ok(l.prefix)));
	us_s3_loc_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* A copy of exactly the bytes: ASan sees any read past them; a
	 * NUL-terminated one for the parsers that take C strings. */
	size_t n = size - 1;
	char *s = malloc(n ? n : 1), *z = malloc(n + 1);
	memcpy(s, data + 1, n);
	memcpy(z, data + 1, n);
	z[n] = '\0';
	switch (data[0] % 5) {
	case 0: fuzz_list(s, n); break;
	case 1: fuzz_text(s, n); break;
	case 2: fuzz_fields(z, strlen(z)); break;
	case 3: fuzz_index(s, n); break;
	case 4: fuzz_url(z); break;
	}
	free(s);
	free(z);
	return 0;
}
