/* curl_dl.c - libcurl found at run time (curl_dl.h). */
#include "curl_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

struct us_curl_api us_curl_api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failed[256]; /* empty: loaded */

/* One symbol of @lib into *@slot; false (and why) when it is missing. */
static bool find(void *lib, const char *name, void *slot)
{
	void *f = dlsym(lib, name);

	if (!f) {
		snprintf(failed, sizeof(failed), "libcurl.so.4 has no %s", name);
		return false;
	}
	*(void **)slot = f; /* POSIX: a function pointer fits a void * */
	return true;
}

static void load(void)
{
	struct us_curl_api *a = &us_curl_api;
	/* RTLD_NODELETE: its TLS destructors and atexit handlers must not
	 * outlive the code they point into. */
	void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

	if (!lib) {
		snprintf(failed, sizeof(failed), "cannot load libcurl.so.4 "
			 "(Debian: libcurl4): %s", dlerror());
		return;
	}
	if (find(lib, "curl_global_init", &a->global_init) &&
	    find(lib, "curl_easy_init", &a->easy_init) &&
	    find(lib, "curl_easy_setopt", &a->easy_setopt) &&
	    find(lib, "curl_easy_perform", &a->easy_perform) &&
	    find(lib, "curl_easy_getinfo", &a->easy_getinfo) &&
	    find(lib, "curl_easy_reset", &a->easy_reset) &&
	    find(lib, "curl_easy_cleanup", &a->easy_cleanup) &&
	    find(lib, "curl_easy_strerror", &a->easy_strerror) &&
	    find(lib, "curl_slist_append", &a->slist_append) &&
	    find(lib, "curl_slist_free_all", &a->slist_free_all) &&
	    find(lib, "curl_share_init", &a->share_init) &&
	    find(lib, "curl_share_setopt", &a->share_setopt) &&
	    find(lib, "curl_share_cleanup", &a->share_cleanup))
		return;
	dlclose(lib);
}

bool us_curl_load(char *why, size_t n)
{
	pthread_once(&once, load);
	if (failed[0])
		snprintf(why, n, "%s", failed);
	return failed[0] == '\0';
}
