/* cuda_none.c - the CUDA entry points of a build without nvcc. */
#include "cuda.h"

#include <stddef.h>

int us_cuda_device_count(const char **why)
{
	if (why)
		*why = "built without CUDA (nvcc was not found)";
	return 0;
}

bool us_cuda_cast(int dev, int from, int to, const void *src, void *dst,
		  size_t n)
{
	(void)dev; (void)from; (void)to; (void)src; (void)dst; (void)n;
	return false;
}
