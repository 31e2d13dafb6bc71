/*
 * curl_dl.h - libcurl, loaded when the first remote SOURCE is opened
 * (private to lib/storage; http.c is its one user).
 *
 * Linked, libcurl brings 29 more shared libraries (GnuTLS, Kerberos, LDAP,
 * libssh2, ...) into every process that uses libunshard: a local mount
 * started 3 ms slower per exec (more when cold) and held 1.3 MiB more,
 * for a client it never calls.  So the daemon has no DT_NEEDED on it:
 * us_curl_load() dlopen()s libcurl.so.4 once, and the curl_* names http.c
 * calls are redirected here to the functions found in it.  The types and
 * constants are curl's own headers'; only the calls go through the table.
 */
#ifndef US_CURL_DL_H
#define US_CURL_DL_H

#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>

struct us_curl_api {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *c, CURLoption o, ...);
	CURLcode (*easy_perform)(CURL *c);
	CURLcode (*easy_getinfo)(CURL *c, CURLINFO i, ...);
	void (*easy_reset)(CURL *c);
	void (*easy_cleanup)(CURL *c);
	const char *(*easy_strerror)(CURLcode rc);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
	CURLSH *(*share_init)(void);
	CURLSHcode (*share_setopt)(CURLSH *s, CURLSHoption o, ...);
	CURLSHcode (*share_cleanup)(CURLSH *s);
};

/* Filled by us_curl_load; read only after it returned true. */
extern struct us_curl_api us_curl_api;

/*
 * us_curl_load - dlopen libcurl and find its functions, once per process
 * (thread-safe).  false, with why in @why (@n bytes), when it cannot be:
 * the library is missing (Debian: libcurl4) or lacks a function.
 */
bool us_curl_load(char *why, size_t n);

/* curl's headers make some of these macros (typecheck-gcc.h). */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_share_setopt
#define curl_global_init(f) us_curl_api.global_init(f)
#define curl_easy_init() us_curl_api.easy_init()
#define curl_easy_setopt(c, o, ...) us_curl_api.easy_setopt(c, o, __VA_ARGS__)
#define curl_easy_perform(c) us_curl_api.easy_perform(c)
#define curl_easy_getinfo(c, i, ...) us_curl_api.easy_getinfo(c, i, __VA_ARGS__)
#define curl_easy_reset(c) us_curl_api.easy_reset(c)
#define curl_easy_cleanup(c) us_curl_api.easy_cleanup(c)
#define curl_easy_strerror(rc) us_curl_api.easy_strerror(rc)
#define curl_slist_append(l, s) us_curl_api.slist_append(l, s)
#define curl_slist_free_all(l) us_curl_api.slist_free_all(l)
#define curl_share_init() us_curl_api.share_init()
#define curl_share_setopt(s, o, ...) us_curl_api.share_setopt(s, o, __VA_ARGS__)
#define curl_share_cleanup(s) us_curl_api.share_cleanup(s)

#endif /* US_CURL_DL_H */
