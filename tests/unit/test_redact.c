/*
 * test_redact.c - secrets out of shown text (lib/redact.h), the one-line
 * refusal with a long path (error.c), where requests may go
 * (us_same_origin) and what they may carry (us_http_do, issue 28).
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "redact.h"
#include "storage/remote_internal.h"
#include "us_error.h"

static void check_redact(const char *in, const char *want)
{
	char out[1024];

	us_redact(in, out, sizeof(out));
	CHECK(strcmp(out, want) == 0);
	if (strcmp(out, want) != 0)
		fprintf(stderr, "  got  %s\n  want %s\n", out, want);
}

static void test_redact(void)
{
	check_redact("no url here: fine", "no url here: fine");
	check_redact("https://h/p/model.safetensors: not found (HTTP 404)",
		     "https://h/p/model.safetensors: not found (HTTP 404)");
	check_redact("http://alice:pw@h:8/x: refused",
		     "http://***@h:8/x: refused");
	check_redact("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4"
		     "&X-Amz-Credential=AKID%2F2024&X-Amz-Security-Token=TOK/+="
		     "&X-Amz-Signature=abc123: not found",
		     "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4"
		     "&X-Amz-Credential=REDACTED&X-Amz-Security-Token=REDACTED"
		     "&X-Amz-Signature=REDACTED: not found");
	check_redact("serving https://a.blob.core.windows.net/c/m?sv=2022&sig=S%2B1 at /mnt",
		     "serving https://a.blob.core.windows.net/c/m?sv=2022&sig=REDACTED at /mnt");
	/* two URLs, the second with a fragment */
	check_redact("from http://h/a?token=T1 to http://u:p@h/b?x=1#f",
		     "from http://h/a?token=REDACTED to http://***@h/b?x=1#f");
	/* "://" with no scheme before it is not a URL */
	check_redact(":// ?token=x", ":// ?token=x");
}

static void test_redact_cut(void)
{
	char out[24];

	us_redact("http://h/x?sig=SECRETSECRETSECRET", out, sizeof(out));
	CHECK(strlen(out) == sizeof(out) - 1);
	CHECK(strstr(out, "SECRET") == NULL);
}

static void test_url_public(void)
{
	char out[256];

	CHECK(!strcmp(us_url_public("https://u:p@h:9/d/m.st?X-Amz-Signature=s#f",
				    out, sizeof(out)), "https://h:9/d/m.st"));
	CHECK(!strcmp(us_url_public("s3://b/k", out, sizeof(out)), "s3://b/k"));
}

static void test_same_origin(void)
{
	CHECK(us_same_origin("http://h/a", "http://h:80/b"));
	CHECK(us_same_origin("https://H:443/a", "https://h/b?x"));
	CHECK(us_same_origin("http://[::1]:8/a", "http://[::1]:8/b"));
	CHECK(!us_same_origin("https://h/a", "http://h/a"));   /* a downgrade */
	CHECK(!us_same_origin("http://h/a", "https://h/a"));
	CHECK(!us_same_origin("http://h:1/a", "http://h:2/a")); /* another port */
	CHECK(!us_same_origin("http://h/a", "http://g/a"));     /* another host */
	CHECK(!us_same_origin("http://h/a", "http://h@g/a"));   /* userinfo */
	CHECK(!us_same_origin("http://h/a", "file:///etc/passwd"));
	CHECK(!us_same_origin("http://h/a", "ftp://h/a"));
}

static void test_long_path(void)
{
	char path[3000];
	struct us_err err;

	memset(path, 'd', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	memcpy(path + sizeof(path) - 19, "/model.safetensors", 18);
	us_err_set(&err, US_E_FORMAT, path, "not a safetensors file");
	CHECK(strstr(err.msg, "model.safetensors: not a safetensors file") != NULL);
	CHECK(strstr(err.msg, "...") != NULL);
	CHECK(strncmp(err.msg, "ddd", 3) == 0);
}

/* A header value with CR LF is never sent: nothing to connect to here,
 * so a request that was sent would say "connection refused". */
static void test_no_control_bytes_sent(void)
{
	struct us_http_cfg cfg = { .connections = 1, .retries = 0, .timeout_s = 2 };
	struct us_http_req q = { .method = "GET", .url = "http://127.0.0.1:1/x",
				 .if_match = "\"e\"\r\n\r\nGET /evil HTTP/1.1",
				 .max_body = 1024 };
	struct us_http_resp p;
	struct us_http *h = NULL;
	struct us_err err = { 0 };

	if (us_http_new(&cfg, &h, &err) != US_OK) {
		fprintf(stderr, "  skipped: %s\n", err.msg); /* no libcurl */
		return;
	}
	CHECK(us_http_do(h, &q, &p) == US_E_IO);
	CHECK(strstr(p.transport, "control byte") != NULL);
	us_http_resp_free(&p);
	q.if_match = NULL;
	q.url = "http://127.0.0.1:1/x\r\nHost: evil";
	CHECK(us_http_do(h, &q, &p) == US_E_IO);
	CHECK(strstr(p.transport, "control byte") != NULL);
	us_http_resp_free(&p);
	us_http_free(h);
}

int main(void)
{
	RUN(test_redact);
	RUN(test_redact_cut);
	RUN(test_url_public);
	RUN(test_same_origin);
	RUN(test_long_path);
	RUN(test_no_control_bytes_sent);
	TEST_MAIN_END();
}
