/* cuda_none.c - the CUDA entry points of a build without nvcc. */
#include "cuda.h"

#include <stddef.h>

int us_cuda_device_count(const char **why)
{
	if (why)
		*why = "built without CUDA (nvcc was not found)";
	return 0;
}
