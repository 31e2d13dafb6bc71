/* path.c - checks on metadata-supplied paths. */
#include "path.h"

#include <string.h>

bool us_path_is_inside(const char *p)
{
	const char *seg = p;

	if (!p || !*p || *p == '/')
		return false;
	for (;;) {
		const char *end = strchr(seg, '/');
		size_t len = end ? (size_t)(end - seg) : strlen(seg);

		if (len == 2 && seg[0] == '.' && seg[1] == '.')
			return false;
		if (!end)
			return true;
		seg = end + 1;
	}
}

bool us_path_has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), s = strlen(suffix);

	return n > s && memcmp(name + n - s, suffix, s) == 0;
}
