/*
 * test_remote_parse.c - the remote-storage client's pieces without a
 * network (lib/storage/remote_internal.h): s3:// URLs, endpoints and
 * addressing, key encoding, credentials and config files, ListObjectsV2
 * pages and error bodies (entities, truncation, hostile values), dates,
 * Content-Range, SigV4 against AWS's published examples, an https index's
 * shard names, and the memory and disk block caches.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "codec/json.h"
#include "storage/remote_internal.h"
#include "tmpdir.h"

static void check_s3_urls(void)
{
	struct us_s3_loc l;
	struct us_err err = { 0 };

	CHECK(us_s3_parse("s3://bkt", &l, &err) == US_OK);
	CHECK(strcmp(l.bucket, "bkt") == 0 && !*l.prefix && !l.dir_slash);
	us_s3_loc_free(&l);
	CHECK(us_s3_parse("s3://bkt/", &l, &err) == US_OK);
	CHECK(!*l.prefix && l.dir_slash);
	us_s3_loc_free(&l);
	CHECK(us_s3_parse("s3://bkt/a/b c/", &l, &err) == US_OK);
	CHECK(strcmp(l.prefix, "a/b c") == 0 && l.dir_slash);
	us_s3_loc_free(&l);
	CHECK(us_s3_parse("s3://bkt/a/model.safetensors", &l, &err) == US_OK);
	CHECK(strcmp(l.prefix, "a/model.safetensors") == 0 && !l.dir_slash);
	us_s3_loc_free(&l);
	const char *bad[] = { "s3://", "s3:///x", "s3://b k/x", "s3://b/a//c",
			      "s3://b/./c", "s3://b/a/..", "s3://b//", "https://x/",
			      "s3://b?x/y" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(us_s3_parse(bad[i], &l, &err) == US_E_USAGE);
		CHECK(strstr(err.msg, bad[i]) == err.msg);
	}
	CHECK(us_remote_is_url("s3://b") && us_remote_is_url("https://h/x") &&
	      us_remote_is_url("http://h/x") && !us_remote_is_url("/data/ckpt") &&
	      !us_remote_is_url("ftp://h/x") && !us_remote_is_url(NULL));
}

static void check_endpoints(void)
{
	struct us_endpoint ep;
	struct us_err err = { 0 };
	char *u;

	unsetenv("AWS_ENDPOINT_URL_S3");
	unsetenv("AWS_ENDPOINT_URL");
	CHECK(us_s3_endpoint(NULL, "eu-west-1", US_ADDR_AUTO, "bkt", &ep, &err) == US_OK);
	CHECK(strcmp(ep.scheme, "https") == 0 && !ep.path_style &&
	      strcmp(ep.hostport, "s3.eu-west-1.amazonaws.com") == 0);
	u = us_s3_object_url(&ep, "bkt", "a b/c+d", NULL);
	CHECK(u && strcmp(u, "https://bkt.s3.eu-west-1.amazonaws.com/a%20b/c%2Bd") == 0);
	free(u);
	u = us_s3_object_url(&ep, "bkt", "", "list-type=2");
	CHECK(u && strcmp(u, "https://bkt.s3.eu-west-1.amazonaws.com/?list-type=2") == 0);
	free(u);
	us_endpoint_free(&ep);
	/* A bucket that is not a DNS label: path-style even on AWS. */
	CHECK(us_s3_endpoint(NULL, "us-east-1", US_ADDR_AUTO, "my.bucket", &ep, &err) == US_OK);
	CHECK(ep.path_style);
	us_endpoint_free(&ep);
	CHECK(us_s3_endpoint("http://127.0.0.1:9000/", "r", US_ADDR_AUTO, "bkt", &ep,
			     &err) == US_OK);
	CHECK(ep.path_style && strcmp(ep.hostport, "127.0.0.1:9000") == 0 && !*ep.base);
	u = us_s3_object_url(&ep, "bkt", "k", NULL);
	CHECK(u && strcmp(u, "http://127.0.0.1:9000/bkt/k") == 0);
	free(u);
	u = us_s3_object_url(&ep, "bkt", "", "list-type=2&prefix=a%2F");
	CHECK(u && strcmp(u, "http://127.0.0.1:9000/bkt?list-type=2&prefix=a%2F") == 0);
	free(u);
	us_endpoint_free(&ep);
	/* The default port leaves the Host header; a base path stays. */
	CHECK(us_s3_endpoint("https://minio.local:443/store//", "r", US_ADDR_VIRTUAL,
			     "bkt", &ep, &err) == US_OK);
	CHECK(!ep.path_style && strcmp(ep.hostport, "minio.local") == 0 &&
	      strcmp(ep.base, "/store") == 0);
	us_endpoint_free(&ep);
	setenv("AWS_ENDPOINT_URL", "http://generic:1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "http://s3only:2", 1);
	CHECK(us_s3_endpoint(NULL, "r", US_ADDR_AUTO, "bkt", &ep, &err) == US_OK);
	CHECK(strcmp(ep.hostport, "s3only:2") == 0 && ep.path_style);
	us_endpoint_free(&ep);
	unsetenv("AWS_ENDPOINT_URL_S3");
	CHECK(us_s3_endpoint(NULL, "r", US_ADDR_AUTO, "bkt", &ep, &err) == US_OK);
	CHECK(strcmp(ep.hostport, "generic:1") == 0);
	us_endpoint_free(&ep);
	CHECK(us_s3_endpoint("http://override:3", "r", US_ADDR_AUTO, "bkt", &ep, &err) == US_OK);
	CHECK(strcmp(ep.hostport, "override:3") == 0);
	us_endpoint_free(&ep);
	unsetenv("AWS_ENDPOINT_URL");
	const char *bad[] = { "ftp://h", "http://", "http:///x", "http://u@h/",
			      "http://h/?q" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(us_s3_endpoint(bad[i], "r", US_ADDR_AUTO, "b", &ep, &err) == US_E_USAGE);
		us_endpoint_free(&ep);
	}
}

static void check_encoding(void)
{
	char *s = us_uri_encode("a b+c/~\xc3\xa9%-_.", 13, true);

	CHECK(s && strcmp(s, "a%20b%2Bc/~%C3%A9%25-_.") == 0);
	free(s);
	s = us_uri_encode("a/b=&", 5, false);
	CHECK(s && strcmp(s, "a%2Fb%3D%26") == 0);
	free(s);
	s = us_uri_decode("a%20b%2bc", 9);
	CHECK(s && strcmp(s, "a b+c") == 0);
	free(s);
	CHECK(us_uri_decode("%zz", 3) == NULL && us_uri_decode("%4", 2) == NULL &&
	      us_uri_decode("%00", 3) == NULL && us_uri_decode("ab%", 3) == NULL);
	CHECK(us_rel_key_ok("a") && us_rel_key_ok("a/b.c") && us_rel_key_ok("..a/b.."));
	CHECK(!us_rel_key_ok("") && !us_rel_key_ok("/a") && !us_rel_key_ok("a/") &&
	      !us_rel_key_ok("a//b") && !us_rel_key_ok("./a") && !us_rel_key_ok("a/../b") &&
	      !us_rel_key_ok(".."));
}

static void clear_aws_env(void)
{
	const char *v[] = { "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
			    "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE",
			    "AWS_REGION", "AWS_DEFAULT_REGION" };
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		unsetenv(v[i]);
}

static void check_creds(void)
{
	const char *dir = tmpdir_new();
	char cred[512], cfg[512];
	struct us_remote_opts o = { 0 };
	struct us_creds c;
	struct us_err err = { 0 };
	const char *ctext =
		"# comment\n[default]\naws_access_key_id = AKDEF\n"
		"aws_secret_access_key=SDEF\n\n[ work ]\n"
		"aws_access_key_id = AKWORK\r\naws_secret_access_key = SWORK\n"
		"aws_session_token = TWORK\n; other\n[half]\naws_access_key_id = X\n";
	const char *gtext =
		"[default]\nregion = eu-central-1\n[profile work]\n"
		"s3 =\n  region = nested-not-this\nregion = ap-south-1\n"
		"[profile cfgonly]\naws_access_key_id = AKCFG\n"
		"aws_secret_access_key = SCFG\n";

	CHECK(tmpdir_write(dir, "credentials", ctext, strlen(ctext)) == 0);
	CHECK(tmpdir_write(dir, "config", gtext, strlen(gtext)) == 0);
	snprintf(cred, sizeof(cred), "%s/credentials", dir);
	snprintf(cfg, sizeof(cfg), "%s/config", dir);
	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
	setenv("AWS_CONFIG_FILE", cfg, 1);

	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKDEF") == 0 && strcmp(c.secret, "SDEF") == 0 &&
	      !c.token && strcmp(c.region, "eu-central-1") == 0);
	us_creds_free(&c);

	o.profile = "work";
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKWORK") == 0 && strcmp(c.token, "TWORK") == 0 &&
	      strcmp(c.region, "ap-south-1") == 0);
	us_creds_free(&c);

	o.profile = "cfgonly"; /* keys in the config file, as the CLI allows */
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKCFG") == 0 && strcmp(c.region, "us-east-1") == 0);
	us_creds_free(&c);

	o.profile = "half"; /* a key without its secret is no credentials */
	CHECK(us_creds_resolve(&o, &c, &err) == US_E_USAGE);
	CHECK(strstr(err.msg, "half") != NULL);
	o.profile = "nope";
	CHECK(us_creds_resolve(&o, &c, &err) == US_E_USAGE);
	CHECK(strstr(err.msg, "nope") != NULL);
	o.profile = NULL;

	setenv("AWS_PROFILE", "work", 1);
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKWORK") == 0);
	us_creds_free(&c);

	/* The environment's keys win over AWS_PROFILE, not over --profile. */
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SENV", 1);
	setenv("AWS_SESSION_TOKEN", "TENV", 1);
	setenv("AWS_DEFAULT_REGION", "dr", 1);
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKENV") == 0 && strcmp(c.token, "TENV") == 0 &&
	      strcmp(c.region, "dr") == 0);
	us_creds_free(&c);
	setenv("AWS_REGION", "r1", 1);
	o.region = "opt-region";
	o.profile = "work";
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.key_id, "AKWORK") == 0 && strcmp(c.region, "opt-region") == 0);
	us_creds_free(&c);
	o.region = NULL;
	o.profile = NULL;
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(strcmp(c.region, "r1") == 0);
	us_creds_free(&c);

	/* Nothing anywhere: one line; --no-sign-request: anonymous. */
	clear_aws_env();
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/c", 1);
	setenv("AWS_CONFIG_FILE", "/nonexistent/g", 1);
	CHECK(us_creds_resolve(&o, &c, &err) == US_E_IO);
	CHECK(strstr(err.msg, "no AWS credentials") != NULL);
	o.no_sign = true;
	CHECK(us_creds_resolve(&o, &c, &err) == US_OK);
	CHECK(!c.key_id && strcmp(c.region, "us-east-1") == 0);
	us_creds_free(&c);

	char *v = NULL;
	CHECK(us_ini_get(cred, "work", "aws_session_token", &v) == 1 &&
	      strcmp(v, "TWORK") == 0);
	free(v);
	CHECK(us_ini_get(cred, "work", "missing", &v) == 0 && !v);
	CHECK(us_ini_get("/nonexistent/x", "a", "b", &v) == 0);
	CHECK(us_ini_get(dir, "a", "b", &v) == -1); /* a directory */
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	tmpdir_rm(dir);
}

#define PAGE_HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" \
	"<Name>bkt</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount>"

static enum us_status parse(const char *doc, struct us_list_page *pg, size_t max)
{
	struct us_err err = { 0 };

	return us_s3_parse_list(doc, strlen(doc), pg, max, &err);
}

static void check_list_pages(void)
{
	struct us_list_page pg = { 0 };
	const char *p1 = PAGE_HEAD
		"<IsTruncated>true</IsTruncated>"
		"<Contents><Key>p/a &amp; b&#x41;&#66;&lt;&gt;&apos;\xc3\xa9</Key>"
		"<LastModified>2024-01-31T12:34:56.789Z</LastModified>"
		"<ETag>&quot;0123abcd&quot;</ETag><Size>18446744073709551</Size>"
		"<StorageClass>STANDARD</StorageClass></Contents>"
		"<Contents>\n <Key>p/sub/x</Key>\n <Size>0</Size>\n"
		" <ETag>\"e-2\"</ETag>\n <LastModified>2024-01-31T13:00:00+01:00</LastModified>"
		"</Contents>"
		"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
		"</ListBucketResult>";
	const char *p2 = PAGE_HEAD "<Contents><Key>p/z</Key><Size>7</Size>"
		"<ETag>\"z\"</ETag><LastModified>2024-02-01T00:00:00Z</LastModified>"
		"</Contents><IsTruncated>false</IsTruncated></ListBucketResult>";

	CHECK(parse(p1, &pg, 100) == US_OK);
	CHECK(pg.n == 2 && pg.truncated && pg.next_token &&
	      strcmp(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=") == 0);
	CHECK(strcmp(pg.e[0].key, "p/a & bAB<>'\xc3\xa9") == 0);
	CHECK(strcmp(pg.e[0].etag, "\"0123abcd\"") == 0);
	CHECK(pg.e[0].size == 18446744073709551ull);
	CHECK(pg.e[0].mtime.tv_sec == 1706704496 && pg.e[0].mtime.tv_nsec == 789000000);
	CHECK(strcmp(pg.e[1].key, "p/sub/x") == 0 && pg.e[1].size == 0 &&
	      pg.e[1].mtime.tv_sec == 1706702400);
	CHECK(parse(p2, &pg, 100) == US_OK); /* appended */
	CHECK(pg.n == 3 && !pg.truncated && !pg.next_token &&
	      strcmp(pg.e[2].key, "p/z") == 0);
	/* The bound on the number of objects in all pages. */
	CHECK(parse(p2, &pg, 3) == US_E_FORMAT);
	us_list_page_free(&pg);

	CHECK(parse(PAGE_HEAD "<IsTruncated>false</IsTruncated></ListBucketResult>", &pg,
		    10) == US_OK && pg.n == 0);
	us_list_page_free(&pg);

	const char *bad[] = {
		"",
		"garbage \x01\xff<<<>>>",
		"<Error><Code>AccessDenied</Code></Error>",
		PAGE_HEAD "<Contents><Key>p/a</Key>", /* cut short */
		PAGE_HEAD "<Contents><Key>p/a</Key><Size>1</Size><ETag>\"x\"</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents>",
		/* sizes: past 2^63, not a number, negative, empty */
		PAGE_HEAD "<Contents><Key>k</Key><Size>99999999999999999999</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>k</Key><Size>9223372036854775808</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>k</Key><Size>-1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>k</Key><Size></Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		/* missing fields */
		PAGE_HEAD "<Contents><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>k</Key><Size>1</Size>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>k</Key><Size>1</Size><ETag>e</ETag></Contents></ListBucketResult>",
		/* entities that are not characters */
		PAGE_HEAD "<Contents><Key>&foo;</Key><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>a&#0;</Key><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>&#xD800;</Key><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>&#x110000;</Key><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		PAGE_HEAD "<Contents><Key>a&amp</Key><Size>1</Size><ETag>e</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents></ListBucketResult>",
		/* truncated without a token, a bad IsTruncated */
		PAGE_HEAD "<IsTruncated>true</IsTruncated></ListBucketResult>",
		PAGE_HEAD "<IsTruncated>yes</IsTruncated></ListBucketResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct us_list_page b = { 0 };
		enum us_status rc = parse(bad[i], &b, 100);
		if (rc != US_E_FORMAT)
			fprintf(stderr, "bad[%zu] accepted\n", i);
		CHECK(rc == US_E_FORMAT);
		us_list_page_free(&b);
	}
	/* A key past S3's 1024 bytes. */
	size_t kn = 3000;
	char *doc = malloc(kn + 512), *w = doc;
	w += sprintf(w, PAGE_HEAD "<Contents><Key>");
	memset(w, 'k', kn);
	w += kn;
	sprintf(w, "</Key><Size>1</Size><ETag>e</ETag><LastModified>2024-01-01T00:00:00Z"
		   "</LastModified></Contents></ListBucketResult>");
	CHECK(parse(doc, &pg, 10) == US_E_FORMAT);
	us_list_page_free(&pg);
	/* Not NUL-terminated: the scanner stays inside its length. */
	size_t n = strlen(p2);
	char *cut = malloc(n);
	memcpy(cut, p2, n);
	struct us_err err = { 0 };
	CHECK(us_s3_parse_list(cut, n - 1, &pg, 10, &err) == US_E_FORMAT);
	us_list_page_free(&pg);
	for (size_t i = 0; i < n; i++) /* every prefix of a good page */
		if (us_s3_parse_list(cut, i, &pg, 10, &err) == US_OK)
			CHECK(pg.n <= 1);
	us_list_page_free(&pg);
	free(cut);
	free(doc);
}

/* Issue 28: control bytes, markup that is not an element, malformed
 * documents, the key budget, the JSON cost budget. */
static void check_hostile_listings(void)
{
	const char *rec = "<Size>1</Size><ETag>\"e\"</ETag>"
			  "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents>";
	const char *bad[] = {
		("<Contents><Key>p/a</Key><Size>1</Size><ETag>\"e\"&#13;&#10;X: 1</ETag>"
		 "<LastModified>2024-01-01T00:00:00Z</LastModified></Contents>"),
		"<Contents><Key>p/a&#27;b</Key>%s",
		"<Contents><Key>p/a&#127;</Key>%s",
		"<Contents><Key>p/a\tb</Key>%s",
		"<Contents note=\"<Key>\"><Key>p/a</Key>%s",
		"<![CDATA[x]]><Contents><Key>p/a</Key>%s",
		"<Contents><Key>p/a</Key><Key>p/b</Key>%s",
		"<Contents><Key>p/<!-- c -->a</Key>%s",
		"<Contents><Key>p/a</Key>%s</Contents>",
		"<Contents><Key>p/a</Key>%s<!-- open",
		"<Contents><Key>p/a</Key>%s<Other>",
	};
	char doc[2048];
	struct us_err err = { 0 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct us_list_page pg = { 0 };
		const char *at = strstr(bad[i], "%s");
		int k = at ? (int)(at - bad[i]) : (int)strlen(bad[i]);
		snprintf(doc, sizeof(doc), PAGE_HEAD "%.*s%s%s</ListBucketResult>", k,
			 bad[i], at ? rec : "", at ? at + 2 : "");
		enum us_status rc = us_s3_parse_list(doc, strlen(doc), &pg, 10, &err);
		if (rc != US_E_FORMAT)
			fprintf(stderr, "hostile[%zu] accepted\n", i);
		CHECK(rc == US_E_FORMAT && !strpbrk(err.msg, "\r\n\x1b"));
		us_list_page_free(&pg);
	}
	/* The refused key is named, escaped. */
	struct us_list_page pg = { 0 };
	snprintf(doc, sizeof(doc), PAGE_HEAD "<Contents><Key>p/a&#27;b</Key>%s"
		 "</ListBucketResult>", rec);
	CHECK(us_s3_parse_list(doc, strlen(doc), &pg, 10, &err) == US_E_FORMAT);
	CHECK(strstr(err.msg, "p/a\\x1bb") != NULL);
	/* Comments, PIs and attributes with '>' hide nothing and add nothing. */
	snprintf(doc, sizeof(doc), PAGE_HEAD "<!-- <Contents><Key>p/ghost</Key>%s -->"
		 "<?pi <Contents><Key>p/pi</Key>%s?><Contents a=\"x>y\">"
		 "<Key>p/real</Key><!-- <Key>p/other</Key> -->%s</ListBucketResult>"
		 "<!-- after -->", rec, rec, rec);
	CHECK(us_s3_parse_list(doc, strlen(doc), &pg, 10, &err) == US_OK);
	CHECK(pg.n == 1 && strcmp(pg.e[0].key, "p/real") == 0);
	us_list_page_free(&pg);
	/* The budget on key text: 64 MiB counted as encoded length + 128. */
	size_t per = 1000, kn = 1000;
	char *big = malloc(per * (kn + 200) + 512), *w = big;
	w += sprintf(w, PAGE_HEAD);
	for (size_t i = 0; i < per; i++) {
		w += sprintf(w, "<Contents><Key>");
		memset(w, 'k', kn);
		w += kn;
		w += sprintf(w, "%06zu</Key>%s", i, rec);
	}
	sprintf(w, "</ListBucketResult>");
	enum us_status rc = US_OK;
	size_t pages = 0;
	while (rc == US_OK && pages < 100) {
		rc = us_s3_parse_list(big, strlen(big), &pg, 1000000, &err);
		pages++;
	}
	CHECK(rc == US_E_FORMAT && strstr(err.msg, "over 64 MiB"));
	CHECK(pages > 50 && pages < 70);
	us_list_page_free(&pg);
	free(big);
}

static void check_json_budget(void)
{
	size_t n = 4u << 20;
	char *t = malloc(2 * n + 2);
	cJSON *doc;
	struct us_err err = { 0 };

	t[0] = '[';
	for (size_t i = 0; i < n; i++)
		memcpy(t + 1 + 2 * i, i + 1 < n ? "0," : "0]", 2);
	/* 4 Mi values of 2 bytes: 320 MiB of nodes for 8 MiB of text. */
	CHECK(us_json_parse(t, 2 * n + 1, &doc, &err) == US_E_FORMAT && !doc);
	CHECK(strstr(err.msg, "MiB of memory to parse") != NULL);
	CHECK(us_json_parse_budget(t, 201, US_JSON_TIGHT(201), &doc, &err) ==
	      US_E_FORMAT); /* cut: not JSON, but within budget */
	t[200] = ']';
	CHECK(us_json_parse_budget(t, 201, 100 * 80 + 64, &doc, &err) == US_OK);
	cJSON_Delete(doc);
	CHECK(us_json_parse_budget(t, 201, 99 * 80, &doc, &err) == US_E_FORMAT);
	free(t);
}

static void check_error_bodies(void)
{
	char code[64], msg[128];
	const char *b = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>"
			"<Message>The request signature &amp; so on</Message>"
			"<RequestId>x</RequestId></Error>";

	us_s3_parse_error(b, strlen(b), code, sizeof(code), msg, sizeof(msg));
	CHECK(strcmp(code, "SignatureDoesNotMatch") == 0);
	CHECK(strcmp(msg, "The request signature & so on") == 0);
	us_s3_parse_error("oops", 4, code, sizeof(code), msg, sizeof(msg));
	CHECK(!code[0] && !msg[0]);
	us_s3_parse_error(NULL, 0, code, sizeof(code), msg, sizeof(msg));
	CHECK(!code[0]);
	us_s3_parse_error(b, 40, code, 4, msg, sizeof(msg)); /* cut, small */
	CHECK(strlen(code) < 4);
}

static void check_dates_and_ranges(void)
{
	struct timespec ts;
	uint64_t s, e, t, v;

	CHECK(us_parse_iso8601("1970-01-01T00:00:00Z", 20, &ts) && ts.tv_sec == 0);
	CHECK(us_parse_iso8601("2024-01-31T12:34:56.7Z", 22, &ts) &&
	      ts.tv_sec == 1706704496 && ts.tv_nsec == 700000000);
	CHECK(us_parse_iso8601("2024-01-31T13:34:56-01:00", 25, &ts) &&
	      ts.tv_sec == 1706704496 + 2 * 3600);
	const char *bad[] = { "2024-01-31T12:34:56", "2024-13-01T00:00:00Z",
			      "2024-01-31 12:34:56.Z", "2024-01-31T12:34:56Zjunk",
			      "x024-01-31T12:34:56Z", "2024-01-31T25:00:00Z", "" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(!us_parse_iso8601(bad[i], strlen(bad[i]), &ts));
	CHECK(us_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", &ts) &&
	      ts.tv_sec == 784111777);
	CHECK(!us_parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT", &ts));
	CHECK(!us_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT+junk", &ts));
	CHECK(!us_parse_http_date("yesterday", &ts));

	CHECK(us_parse_content_range("bytes 0-9/100", &s, &e, &t) && s == 0 && e == 9 &&
	      t == 100);
	CHECK(us_parse_content_range("bytes 8388608-16777215/9223372036854775807", &s, &e,
				     &t) && e == 16777215);
	const char *br[] = { "bytes 9-0/100", "bytes 0-100/100", "bytes 0-9/*",
			     "bytes */100", "bytes=0-9/100", "bytes 0-9/100x",
			     "bytes 0-99999999999999999999/100", "bytes -1-9/100",
			     "bytes 0-9/", "" };
	for (size_t i = 0; i < sizeof(br) / sizeof(br[0]); i++)
		CHECK(!us_parse_content_range(br[i], &s, &e, &t));
	CHECK(us_parse_u64("18446744073709551615", 20, &v) && v == UINT64_MAX);
	CHECK(!us_parse_u64("18446744073709551616", 20, &v));
	CHECK(!us_parse_u64("", 0, &v) && !us_parse_u64("1 ", 2, &v) &&
	      !us_parse_u64("+1", 2, &v));
}

/* AWS's worked examples ("Signature Calculations for the Authorization
 * Header: Transferring Payload in a Single Chunk", S3 API reference). */
static void check_sigv4(void)
{
	struct us_sigv4_out out;
	struct us_sigv4_in in = {
		.method = "GET", .hostport = "examplebucket.s3.amazonaws.com",
		.path = "/test.txt", .range = "bytes=0-9",
		.key_id = "AKIAIOSFODNN7EXAMPLE",
		.secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		.region = "us-east-1", .service = "s3", .now = 1369353600,
	};

	CHECK(us_sigv4_sign(&in, &out));
	CHECK(strstr(out.auth, "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41") != NULL);
	CHECK(strstr(out.auth, "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request") != NULL);
	CHECK(strstr(out.auth, "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,") != NULL);
	CHECK(strcmp(out.date, "x-amz-date: 20130524T000000Z") == 0);
	CHECK(!out.token[0]);

	/* GET Bucket (List Objects): the query is sorted and encoded. */
	in.path = "/";
	in.range = NULL;
	in.query = "prefix=J&max-keys=2";
	CHECK(us_sigv4_sign(&in, &out));
	CHECK(strstr(out.auth, "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7") != NULL);
	in.query = "max-keys=2&prefix=J"; /* the same request */
	struct us_sigv4_out again;
	CHECK(us_sigv4_sign(&in, &again) && strcmp(out.auth, again.auth) == 0);
	in.query = "max-keys=2&prefix=%4A"; /* encoding canonicalised too */
	CHECK(us_sigv4_sign(&in, &again) && strcmp(out.auth, again.auth) == 0);
	in.token = "SESSION";
	CHECK(us_sigv4_sign(&in, &again) && strcmp(out.auth, again.auth) != 0);
	CHECK(strcmp(again.token, "x-amz-security-token: SESSION") == 0);
	CHECK(strstr(again.auth, ";x-amz-security-token,") != NULL);
}

static void check_backoff(void)
{
	for (unsigned r = 0; r < 1000; r += 37) {
		unsigned a = us_backoff_ms(0, r), b = us_backoff_ms(3, r),
			 c = us_backoff_ms(40, r);
		CHECK(a >= 50 && a <= 100);
		CHECK(b >= 400 && b <= 800);
		CHECK(c >= 1000 && c <= 2000);
	}
}

static void check_index_names(void)
{
	char **v;
	size_t n;
	struct us_err err = { 0 };
	const char *good = "{\"metadata\":{\"total_size\":3},\"weight_map\":"
			   "{\"a\":\"m-1.safetensors\",\"b\":\"sub/m-2.safetensors\","
			   "\"c\":\"m-1.safetensors\"}}";

	CHECK(us_https_index_names(good, strlen(good), &v, &n, &err) == US_OK);
	CHECK(n == 2 && strcmp(v[0], "m-1.safetensors") == 0 &&
	      strcmp(v[1], "sub/m-2.safetensors") == 0);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	const char *bad[] = {
		"{\"weight_map\":{\"a\":\"../x\"}}", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}",
		"{\"weight_map\":{\"a\":\"a//b\"}}", "{\"weight_map\":{\"a\":\"\"}}",
		"{\"weight_map\":{\"a\":\"a/./b\"}}", "{\"weight_map\":{\"a\":\"a\\\\..\\\\b\"}}",
		"{\"weight_map\":{\"a\":1}}", "{\"weight_map\":[]}", "{}", "not json",
		"{\"weight_map\":{\"a\":\"x\"},\"weight_map\":{}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(us_https_index_names(bad[i], strlen(bad[i]), &v, &n, &err) != US_OK);
		CHECK(!v && n == 0);
	}
}

static char *bytes(size_t n, int c)
{
	char *p = malloc(n);

	memset(p, c, n);
	return p;
}

struct waiter {
	struct us_bcache *c;
	uint64_t blk;
	int rc;
	char first;
};

static void *wait_block(void *arg)
{
	struct waiter *w = arg;
	struct us_block *b;

	w->rc = us_bcache_get(w->c, 7, w->blk, false, &b);
	if (w->rc == US_OK)
		w->first = b->data[0];
	us_bcache_put(w->c, b);
	return NULL;
}

static void check_block_cache(void)
{
	struct us_bcache *c = us_bcache_new(25);
	struct us_block *b, *b2;

	CHECK(us_bcache_get(c, 0, 0, false, &b) == 1); /* absent: ours to fill */
	CHECK(us_bcache_get(c, 0, 0, true, &b2) == 0 && !b2); /* in flight */
	us_bcache_done(c, b, bytes(10, 'a'), 10);
	us_bcache_put(c, b);
	CHECK(us_bcache_get(c, 0, 0, false, &b) == US_OK && b->len == 10 && b->data[9] == 'a');
	us_bcache_put(c, b);
	for (uint64_t i = 1; i <= 2; i++) {
		CHECK(us_bcache_get(c, 0, i, false, &b) == 1);
		us_bcache_done(c, b, bytes(10, 'b'), 10);
		us_bcache_put(c, b);
	}
	/* 30 bytes > 25: the least recent (block 0) went. */
	CHECK(!us_bcache_has(c, 0, 0) && us_bcache_has(c, 0, 1) && us_bcache_has(c, 0, 2));

	/* A waiter on an in-flight block gets its bytes; a failure is seen
	 * by the waiters and forgotten, so the next get fetches again. */
	for (int fail = 0; fail < 2; fail++) {
		struct waiter w = { c, 3 + (uint64_t)fail, 99, 0 };
		pthread_t t;
		CHECK(us_bcache_get(c, 7, w.blk, false, &b) == 1);
		CHECK(pthread_create(&t, NULL, wait_block, &w) == 0);
		usleep(20000);
		us_bcache_done(c, b, fail ? NULL : bytes(5, 'w'), 5);
		us_bcache_put(c, b);
		pthread_join(t, NULL);
		CHECK(fail ? w.rc == US_E_IO : (w.rc == US_OK && w.first == 'w'));
		CHECK(us_bcache_has(c, 7, w.blk) == !fail);
	}
	/* A referenced block is not evicted, whatever the bound. */
	CHECK(us_bcache_get(c, 0, 1, false, &b) == US_OK);
	for (uint64_t i = 10; i < 14; i++) {
		CHECK(us_bcache_get(c, 1, i, false, &b2) == 1);
		us_bcache_done(c, b2, bytes(10, 'c'), 10);
		us_bcache_put(c, b2);
	}
	CHECK(us_bcache_has(c, 0, 1) && b->data[0] == 'b');
	us_bcache_put(c, b);
	us_bcache_free(c);
}

/* The file of block @name in @dir, in @out. */
static const char *dc_path(const char *dir, const char *name, char out[600])
{
	snprintf(out, 600, "%s/%s", dir, name);
	return out;
}

/* Flip byte @off of file @path (its size unchanged). */
static void dc_flip(const char *path, long off)
{
	FILE *f = fopen(path, "r+b");
	int c;

	CHECK(f != NULL);
	if (!f)
		return;
	fseek(f, off, SEEK_SET);
	c = fgetc(f);
	fseek(f, off, SEEK_SET);
	fputc(c ^ 0xff, f);
	fclose(f);
}

/* What --cache-dir trusts: nothing it reads (docs/remote.md).  @sub holds
 * the 40-byte blocks @n1 and @n3, both good. */
static void check_disk_cache_trust(const char *sub, const char *n1,
				   const char *n3)
{
	const char *data = "0123456789012345678901234567890123456789";
	char p[600], buf[64], open_dir[600];
	struct us_dcache *d;
	struct us_err err = { 0 };
	struct stat st;

	CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700);
	CHECK(stat(dc_path(sub, n3, p), &st) == 0 &&
	      (st.st_mode & 0777) == 0600 && st.st_size == 88);
	CHECK(us_dcache_open(sub, 1000, &d, &err) == US_OK);
	/* a payload byte changed, size kept: a miss, and the file removed */
	dc_flip(dc_path(sub, n3, p), 60);
	CHECK(!us_dcache_get(d, n3, buf, 40) && access(p, F_OK) != 0);
	/* a header byte (the version) changed: a miss */
	us_dcache_put(d, n3, data, 40);
	CHECK(us_dcache_get(d, n3, buf, 40) && memcmp(buf, data, 40) == 0);
	dc_flip(p, 4);
	CHECK(!us_dcache_get(d, n3, buf, 40));
	/* good bytes under another block's name: a miss (keyed by the name) */
	us_dcache_put(d, n1, data, 40);
	char p1[600];
	CHECK(link(dc_path(sub, n1, p1), p) == 0);
	CHECK(!us_dcache_get(d, n3, buf, 40) && us_dcache_get(d, n1, buf, 40));
	/* writable by others: not served */
	CHECK(chmod(p1, 0666) == 0 && !us_dcache_get(d, n1, buf, 40));
	/* a FIFO: a miss at once, not a read that waits for a writer */
	unlink(p);
	CHECK(mkfifo(p, 0600) == 0 && !us_dcache_get(d, n3, buf, 40));
	CHECK(access(p, F_OK) != 0); /* ours: removed */
	/* the old format (the bare 40 bytes): a miss */
	CHECK(tmpdir_write(sub, n3, data, 40) == 0 &&
	      !us_dcache_get(d, n3, buf, 40));
	us_dcache_free(d);
	/* a directory group or others can write: refused, one line naming it */
	snprintf(open_dir, sizeof(open_dir), "%s/open", sub);
	CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0);
	CHECK(us_dcache_open(open_dir, 100, &d, &err) == US_E_IO);
	CHECK(strstr(err.msg, open_dir) == err.msg &&
	      strstr(err.msg, "writable by others") && !strchr(err.msg, '\n'));
	CHECK(chmod(open_dir, 0770) == 0 &&
	      us_dcache_open(open_dir, 100, &d, &err) == US_E_IO &&
	      strstr(err.msg, "writable by its group"));
	CHECK(chmod(open_dir, 0755) == 0 &&
	      us_dcache_open(open_dir, 100, &d, &err) == US_OK);
	us_dcache_free(d);
}

static void check_disk_cache(void)
{
	const char *dir = tmpdir_new();
	char sub[512], n1[65], n2[65], n3[65], buf[64];
	struct us_dcache *d;
	struct us_err err = { 0 };

	snprintf(sub, sizeof(sub), "%s/a/b", dir);
	/* a 40-byte block takes 88 bytes on disk (its 48-byte header) */
	CHECK(us_dcache_open(sub, 250, &d, &err) == US_OK);
	us_dcache_name("", "http://h/b/k", "\"e1\"", 8, 0, n1);
	us_dcache_name("", "http://h/b/k", "\"e2\"", 8, 0, n2);
	us_dcache_name("", "http://h/b/k", "\"e1\"", 8, 1, n3);
	CHECK(strlen(n1) == 64 && strcmp(n1, n2) != 0 && strcmp(n1, n3) != 0);
	CHECK(!us_dcache_get(d, n1, buf, 40));
	us_dcache_put(d, n1, "0123456789012345678901234567890123456789", 40);
	CHECK(us_dcache_get(d, n1, buf, 40) && memcmp(buf, "0123456789", 10) == 0);
	CHECK(!us_dcache_get(d, n1, buf, 39)); /* the length is checked */
	CHECK(!us_dcache_get(d, n1, buf, 40)); /* a file of ours that fails it: gone */
	us_dcache_put(d, n1, "0123456789012345678901234567890123456789", 40);
	us_dcache_put(d, n2, buf, 40);
	usleep(20000);
	CHECK(us_dcache_get(d, n1, buf, 40)); /* n1 now the most recent */
	us_dcache_put(d, n3, buf, 40);        /* 264 > 250: the oldest (n2) goes */
	CHECK(us_dcache_get(d, n1, buf, 40) && us_dcache_get(d, n3, buf, 40) &&
	      !us_dcache_get(d, n2, buf, 40));
	us_dcache_free(d);
	/* Reopened: the blocks are still there (and counted). */
	CHECK(us_dcache_open(sub, 250, &d, &err) == US_OK);
	CHECK(us_dcache_get(d, n3, buf, 40));
	us_dcache_free(d);
	check_disk_cache_trust(sub, n1, n3);
	/* A cache dir under a file cannot be created: one line. */
	char file[600];
	snprintf(file, sizeof(file), "%s/f", dir);
	CHECK(tmpdir_write(dir, "f", "x", 1) == 0);
	strcat(file, "/cache");
	CHECK(us_dcache_open(file, 100, &d, &err) == US_E_USAGE);
	CHECK(strstr(err.msg, "cannot create the cache directory") != NULL);
	tmpdir_rm(dir);
}

int main(void)
{
	RUN(check_s3_urls);
	RUN(check_endpoints);
	RUN(check_encoding);
	RUN(check_creds);
	RUN(check_list_pages);
	RUN(check_hostile_listings);
	RUN(check_json_budget);
	RUN(check_error_bodies);
	RUN(check_dates_and_ranges);
	RUN(check_sigv4);
	RUN(check_backoff);
	RUN(check_index_names);
	RUN(check_block_cache);
	RUN(check_disk_cache);
	TEST_MAIN_END();
}
