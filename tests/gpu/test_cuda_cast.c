/*
 * test_cuda_cast.c - the CUDA executor against the CPU one: every --dtype
 * pair over special bit patterns and random data must give the same bytes,
 * then both are timed (GB/s of output).  Exits 77 (skipped) without a
 * device, so it runs harmlessly in CI on machines without a GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assemble/cast.h"
#include "assemble/cuda.h"

#define N (16u << 20) /* elements per pair */

static const enum us_dtype froms[] = {US_DT_F64, US_DT_F32, US_DT_F16, US_DT_BF16};
static const enum us_dtype tos[] = {US_DT_F32, US_DT_F16, US_DT_BF16};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Random bits, with every 64th element a special: NaNs with payloads,
 * infinities, subnormals, rounding ties, extremes. */
static void fill(unsigned char *p, size_t bytes)
{
	static const uint32_t specials[] = {
		0x7fc00001, 0xffa00000, 0x7f800001, 0x7f800000, 0xff800000,
		0x00000001, 0x80000001, 0x007fffff, 0x477ff000, 0x33000000,
		0x3f808000, 0x3f818000, 0x387fc000, 0x387ff000, 0x7f7fffff,
	};
	uint64_t x = 88172645463325252ull;

	for (size_t i = 0; i < bytes; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
	for (size_t i = 0; i + 4 <= bytes; i += 256)
		memcpy(p + i, &specials[(i / 256) % 15], 4);
}

int main(void)
{
	const char *why = NULL;
	size_t cap = (size_t)N * 8;
	unsigned char *src, *a, *b;
	int failed = 0;

	if (us_cuda_device_count(&why) == 0) {
		printf("SKIP: no CUDA device (%s)\n", why);
		return 77;
	}
	src = malloc(cap);
	a = malloc(cap);
	b = malloc(cap);
	if (!src || !a || !b)
		return 1;
	fill(src, cap);
	for (size_t i = 0; i < 4; i++) {
		for (size_t j = 0; j < 3; j++) {
			enum us_dtype f = froms[i], t = tos[j];
			size_t out = (size_t)N * us_dtype_bits(t) / 8;
			double t0, t1, t2;

			if (f == t)
				continue;
			t0 = now();
			us_cast(f, t, src, a, N);
			t1 = now();
			if (!us_cuda_cast(0, f, t, src, b, N)) {
				printf("FAIL %s->%s: CUDA error\n", us_dtype_name(f), us_dtype_name(t));
				failed++;
				continue;
			}
			t2 = now();
			if (memcmp(a, b, out) != 0) {
				printf("FAIL %s->%s: CPU and CUDA differ\n", us_dtype_name(f),
				       us_dtype_name(t));
				failed++;
				continue;
			}
			printf("ok   %-4s -> %-4s  %u elements  CPU %6.2f GB/s  CUDA %6.2f GB/s\n",
			       us_dtype_name(f), us_dtype_name(t), N,
			       out / (t1 - t0) / 1e9, out / (t2 - t1) / 1e9);
		}
	}
	free(src);
	free(a);
	free(b);
	printf("%d failed\n", failed);
	return failed ? 1 : 0;
}
