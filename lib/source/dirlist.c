/* dirlist.c - probes over a directory's sorted listing (storage.h us_dirlist). */
#include "source.h"

bool us_dir_any(const struct us_dir *d, bool (*match)(const char *name))
{
	char **names;
	size_t n;
	bool yes = false;

	if (us_dirlist(d, &names, &n) != US_OK)
		return false;
	for (size_t i = 0; i < n && !yes; i++)
		yes = match(names[i]);
	us_dirlist_free(names, n);
	return yes;
}
