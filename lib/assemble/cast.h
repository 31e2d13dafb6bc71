/*
 * cast.h - dtype conversion for --dtype=bf16|f16|f32.
 *
 * Every non-NaN value converts exactly as torch's Tensor.to(dtype) does on
 * the CPU: round to nearest, ties to even, overflow to infinity, gradual
 * underflow; f64 goes through f32 (torch builds Half and BFloat16 from a
 * float), so it rounds twice exactly where torch does.  NaNs stay NaNs with
 * their sign and top payload bits, made quiet.  torch itself is not
 * consistent there: its vectorized and scalar loops give different NaN bit
 * patterns (0xFFFF, 0x7FC0, 0x7FFFFFFF...) depending on the tensor's
 * length, so no fixed rule can match it bit for bit (test_dtype.py checks
 * non-NaN bytes exactly and NaN positions).
 */
#ifndef US_CAST_H
#define US_CAST_H

#include <stdbool.h>
#include <stddef.h>

#include "../dtype.h"

/* us_cast_supported - can @from be converted to @to (F64/F32/F16/BF16 to
 * F32/F16/BF16, or any dtype to itself)? */
bool us_cast_supported(enum us_dtype from, enum us_dtype to);

/* us_cast - convert @n little-endian elements from @src to @dst (which
 * must not overlap).  Only for pairs us_cast_supported() accepts. */
void us_cast(enum us_dtype from, enum us_dtype to, const void *src, void *dst,
	     size_t n);

#endif /* US_CAST_H */
