/*
 * cuda.h - the CUDA side of the assembly engine.
 *
 * Built only when meson finds nvcc (option 'cuda', auto by default); the
 * CUDA runtime is linked statically, and without a device or driver every
 * function reports "no device" so the same binary falls back to the CPU.
 * Host-side planning stays in plain C (plan.c) so CPU tests cover it.
 */
#ifndef US_CUDA_H
#define US_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * us_cuda_device_count - usable CUDA devices: 0 when the build has no CUDA,
 * or there is no driver or device.  @why, if not NULL, receives a short
 * static reason when the answer is 0.
 */
int us_cuda_device_count(const char **why);

#ifdef __cplusplus
}
#endif

#endif /* US_CUDA_H */
