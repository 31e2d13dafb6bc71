/*
 * exec_cuda.cu - the CUDA executor: device discovery, and the --dtype cast
 * kernel.  The element rules are cast_rules.h, shared with cast.c, so both
 * executors give the same bits (the GPU check, tests/gpu/run.sh, still
 * compares them over every pair and special value).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "../dtype.h"
}
#include "cast_rules.h"
#include "cuda.h"

#define STAGE (4u << 20) /* bytes per staging buffer */

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

__device__ static uint32_t load(int from, const unsigned char *p, size_t i)
{
	switch (from) {
	case US_DT_F64: {
		double d;
		float f;

		memcpy(&d, p + 8 * i, 8);
		f = __double2float_rn(d);
		return __float_as_uint(f);
	}
	case US_DT_F16: {
		uint16_t h;
		uint32_t u;

		memcpy(&h, p + 2 * i, 2);
		u = us_f16_to_f32(h);
		return us_f32_nan(u) ? u | 0x400000u : u;
	}
	case US_DT_BF16: {
		uint16_t b;

		memcpy(&b, p + 2 * i, 2);
		return (uint32_t)b << 16;
	}
	default: {
		uint32_t u;

		memcpy(&u, p + 4 * i, 4);
		return u;
	}
	}
}

__global__ static void cast_kernel(int from, int to, const unsigned char *src,
				   unsigned char *dst, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint32_t u;
	uint16_t h;

	if (i >= n)
		return;
	u = load(from, src, i);
	if (to == US_DT_F32) {
		memcpy(dst + 4 * i, &u, 4);
		return;
	}
	h = to == US_DT_BF16 ? us_f32_to_bf16(u) : us_f32_to_f16(u);
	memcpy(dst + 2 * i, &h, 2);
}

/* Per host thread: pinned staging, device buffers, a stream. */
struct stage {
	int dev;
	cudaStream_t stream;
	unsigned char *hin, *hout, *din, *dout;
};

static thread_local struct stage st = { -1, 0, 0, 0, 0, 0 };

static int stage_init(int dev)
{
	if (st.dev == dev)
		return 0;
	if (cudaSetDevice(dev) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaMallocHost(&st.hin, STAGE) != cudaSuccess ||
	    cudaMallocHost(&st.hout, STAGE) != cudaSuccess ||
	    cudaMalloc(&st.din, STAGE) != cudaSuccess ||
	    cudaMalloc(&st.dout, STAGE) != cudaSuccess)
		return -1; /* leaks what was made: the thread falls back for good */
	st.dev = dev;
	return 0;
}

extern "C" int us_cuda_cast(int dev, int from, int to, const void *src,
			    void *dst, size_t n)
{
	size_t si = us_dtype_bits((enum us_dtype)from) / 8;
	size_t di = us_dtype_bits((enum us_dtype)to) / 8;
	size_t per = STAGE / (si > di ? si : di);

	if (stage_init(dev) < 0)
		return -1;
	for (size_t done = 0; done < n; done += per) {
		size_t k = n - done < per ? n - done : per;

		memcpy(st.hin, (const unsigned char *)src + done * si, k * si);
		if (cudaMemcpyAsync(st.din, st.hin, k * si, cudaMemcpyHostToDevice,
				    st.stream) != cudaSuccess)
			return -1;
		cast_kernel<<<(unsigned)((k + 255) / 256), 256, 0, st.stream>>>(
			from, to, st.din, st.dout, k);
		if (cudaMemcpyAsync(st.hout, st.dout, k * di, cudaMemcpyDeviceToHost,
				    st.stream) != cudaSuccess ||
		    cudaStreamSynchronize(st.stream) != cudaSuccess)
			return -1;
		memcpy((unsigned char *)dst + done * di, st.hout, k * di);
	}
	return 0;
}
