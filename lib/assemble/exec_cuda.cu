/* cuda_probe.cu - device discovery through the statically linked runtime. */
#include <cuda_runtime.h>

#include "cuda.h"

extern "C" int us_cuda_device_count(const char **why)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		if (why)
			*why = cudaGetErrorString(e);
		return 0;
	}
	if (n == 0 && why)
		*why = "no CUDA device";
	return n;
}
