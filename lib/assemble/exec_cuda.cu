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

#define STAGE (4u << 20) /* pinned bytes per direction, per host thread */

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

/*
 * Per host thread: two pinned staging pairs, two device pairs and two
 * streams.  A block is cut into SLICE-sized pieces that alternate between
 * the streams, so one piece's host-to-device copy overlaps the other's
 * kernel and copy back (the copy engines run both directions at once).
 */
#define NSTREAM 2
#define SLICE (STAGE / NSTREAM)

struct stage {
	int dev;
	cudaStream_t stream[NSTREAM];
	unsigned char *hin[NSTREAM], *hout[NSTREAM], *din[NSTREAM], *dout[NSTREAM];
};

static thread_local struct stage st = { -1, {}, {}, {}, {}, {} };

static bool stage_init(int dev)
{
	if (st.dev == dev)
		return true;
	if (cudaSetDevice(dev) != cudaSuccess)
		return false;
	for (int i = 0; i < NSTREAM; i++)
		if (cudaStreamCreateWithFlags(&st.stream[i], cudaStreamNonBlocking) != cudaSuccess ||
		    cudaMallocHost(&st.hin[i], SLICE) != cudaSuccess ||
		    cudaMallocHost(&st.hout[i], SLICE) != cudaSuccess ||
		    cudaMalloc(&st.din[i], SLICE) != cudaSuccess ||
		    cudaMalloc(&st.dout[i], SLICE) != cudaSuccess)
			return false; /* leaks what was made: the thread falls back for good */
	st.dev = dev;
	return true;
}

/* Wait for stream @i's piece and copy its result out of pinned memory. */
static bool drain(int i, unsigned char *dst, size_t bytes)
{
	if (!dst)
		return true;
	if (cudaStreamSynchronize(st.stream[i]) != cudaSuccess)
		return false;
	memcpy(dst, st.hout[i], bytes);
	return true;
}

extern "C" bool us_cuda_cast(int dev, int from, int to, const void *src,
			     void *dst, size_t n)
{
	size_t si = us_dtype_bits((enum us_dtype)from) / 8;
	size_t di = us_dtype_bits((enum us_dtype)to) / 8;
	size_t per = SLICE / (si > di ? si : di);
	unsigned char *pend[NSTREAM] = { NULL, NULL };
	size_t pbytes[NSTREAM] = { 0, 0 };
	int i = 0;

	if (!stage_init(dev))
		return false;
	for (size_t done = 0; done < n; done += per, i = (i + 1) % NSTREAM) {
		size_t k = n - done < per ? n - done : per;

		if (!drain(i, pend[i], pbytes[i]))
			return false;
		memcpy(st.hin[i], (const unsigned char *)src + done * si, k * si);
		if (cudaMemcpyAsync(st.din[i], st.hin[i], k * si,
				    cudaMemcpyHostToDevice, st.stream[i]) != cudaSuccess)
			return false;
		cast_kernel<<<(unsigned)((k + 255) / 256), 256, 0, st.stream[i]>>>(
			from, to, st.din[i], st.dout[i], k);
		if (cudaGetLastError() != cudaSuccess ||
		    cudaMemcpyAsync(st.hout[i], st.dout[i], k * di,
				    cudaMemcpyDeviceToHost, st.stream[i]) != cudaSuccess)
			return false;
		pend[i] = (unsigned char *)dst + done * di;
		pbytes[i] = k * di;
	}
	for (i = 0; i < NSTREAM; i++)
		if (!drain(i, pend[i], pbytes[i]))
			return false;
	return true;
}
