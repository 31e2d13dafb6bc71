/*
 * remote_stub.c - remote.h for a build without the S3/https client.
 *
 * Placeholder so that the storage layer links before the real client
 * (remote*.c, libcurl) lands: it is replaced by that client at merge.  Every
 * URL SOURCE is refused with one line; nothing else can be reached, since
 * no struct us_remote is ever made.
 */
#include "remote.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

bool us_remote_is_url(const char *source)
{
	return source && (strncmp(source, "s3://", 5) == 0 ||
			  strncmp(source, "http://", 7) == 0 ||
			  strncmp(source, "https://", 8) == 0);
}

enum us_status us_remote_open(const char *url, const struct us_remote_opts *o,
			      struct us_remote **out, struct us_err *err)
{
	(void)o;
	*out = NULL;
	return us_err_set(err, US_E_UNSUPPORTED, url,
			  "remote SOURCEs: this build has no S3/https client");
}

void us_remote_free(struct us_remote *r)
{
	(void)r;
}

size_t us_remote_count(const struct us_remote *r)
{
	(void)r;
	return 0;
}

const struct us_remote_object *us_remote_at(const struct us_remote *r,
					    size_t i)
{
	(void)r;
	(void)i;
	return NULL;
}

const struct us_remote_object *us_remote_find(const struct us_remote *r,
					      const char *key)
{
	(void)r;
	(void)key;
	return NULL;
}

bool us_remote_single(const struct us_remote *r)
{
	(void)r;
	return false;
}

const char *us_remote_url(const struct us_remote *r)
{
	(void)r;
	return "";
}

enum us_status us_remote_read(struct us_remote *r,
			      const struct us_remote_object *o, void *buf,
			      size_t len, uint64_t off)
{
	(void)r;
	(void)o;
	(void)buf;
	(void)len;
	(void)off;
	errno = EIO;
	return US_E_IO;
}

void us_remote_get_stats(const struct us_remote *r, struct us_remote_stats *s)
{
	(void)r;
	memset(s, 0, sizeof(*s));
}
