/* dirlist.c - sorted directory listings, so every result is deterministic. */
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../grow.h"

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void us_dirlist_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

enum us_status us_dirlist(int dirfd, char ***names_out, size_t *n_out)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	enum us_status rc;
	int fd;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return US_E_IO;
	d = fdopendir(fd); /* allocates its buffer: ENOMEM is memory */
	if (!d) {
		rc = errno == ENOMEM ? US_E_NOMEM : US_E_IO;
		close(fd);
		return rc;
	}
	/* readdir's NULL is the end only with errno untouched: a listing
	 * cut short by an error would silently hide files. */
	while ((errno = 0, de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (US_GROW(names, cap, n) != US_OK ||
		    !(names[n] = strdup(de->d_name)))
			goto nomem;
		n++;
	}
	if (errno) {
		rc = errno == ENOMEM ? US_E_NOMEM : US_E_IO;
		closedir(d);
		us_dirlist_free(names, n);
		return rc;
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_str);
	*names_out = names;
	*n_out = n;
	return US_OK;
nomem:
	closedir(d);
	us_dirlist_free(names, n);
	return US_E_NOMEM;
}

bool us_dir_any(int dirfd, bool (*match)(const char *name))
{
	char **names;
	size_t n;
	bool yes = false;

	if (us_dirlist(dirfd, &names, &n) != US_OK)
		return false;
	for (size_t i = 0; i < n && !yes; i++)
		yes = match(names[i]);
	us_dirlist_free(names, n);
	return yes;
}
