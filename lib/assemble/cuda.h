/*
 * cuda.h - the CUDA executor of the assembly engine.
 *
 * Built only when meson finds nvcc (option 'cuda', auto by default); the
 * CUDA runtime is linked statically, and without a device or driver every
 * function reports "no device" so the same binary falls back to the CPU.
 * Host-side planning stays in plain C (plan.c, cast_read.c) so CPU tests
 * cover it; the device only converts (--dtype) the bytes the CPU gathered,
 * bit-exact with assemble/cast.c.
 */
#ifndef US_CUDA_H
#define US_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * us_cuda_device_count - usable CUDA devices: 0 when the build has no CUDA,
 * or there is no driver or device.  @why, if not NULL, receives a short
 * static reason when the answer is 0.
 */
int us_cuda_device_count(const char **why);

/*
 * us_cuda_probe - us_cuda_device_count() asked in a forked child, so that
 * this process can still fork (daemonize) and use CUDA afterwards.  @why
 * (@whylen bytes) receives the reason when the answer is 0.
 */
int us_cuda_probe(char *why, size_t whylen);

/*
 * us_cuda_cast - convert @n elements (dtypes as enum us_dtype values) from
 * @src to @dst on device @dev: pinned staging, host-to-device copy, the cast
 * kernel and the copy back run on a per-thread stream.  Same results as
 * us_cast().  Whether the device converted them: false when CUDA is
 * unavailable or fails, and the caller converts on the CPU (not an error:
 * the same bits come either way).
 */
bool us_cuda_cast(int dev, int from, int to, const void *src, void *dst,
		  size_t n);

#ifdef __cplusplus
}
#endif

#endif /* US_CUDA_H */
