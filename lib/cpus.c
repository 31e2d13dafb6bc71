/* cpus.c - the online CPU count, clamped (cpus.h). */
#include "cpus.h"

#include <assert.h>
#include <unistd.h>

unsigned us_online_cpus(unsigned min, unsigned max)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	assert(min <= max);
	return n < (long)min ? min : n > (long)max ? max : (unsigned)n;
}
