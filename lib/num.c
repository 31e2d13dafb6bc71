/* num.c - decimal numbers in text (num.h). */
#include "num.h"

bool us_parse_u64(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		unsigned d = (unsigned)(s[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	return true;
}
