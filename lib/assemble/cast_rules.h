/*
 * cast_rules.h - the element conversion rules of --dtype, written once for
 * both executors: plain static inline C for cast.c, __host__ __device__ for
 * exec_cuda.cu, so the CPU and the GPU give the same bits by construction.
 * Integer operations only (no float intrinsics, whose rounding could differ).
 */
#ifndef US_CAST_RULES_H
#define US_CAST_RULES_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define US_HD __host__ __device__
#else
#define US_HD
#endif

US_HD static inline bool us_f32_nan(uint32_t u)
{
	return (u & 0x7fffffffu) > 0x7f800000u;
}

/* Round-to-nearest-even of the top 16 bits (finite and infinite values). */
US_HD static inline uint16_t us_f32_to_bf16_finite(uint32_t u)
{
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* IEEE binary32 -> binary16, RNE, as x86's VCVTPS2PH does. */
US_HD static inline uint16_t us_f32_to_f16(uint32_t u)
{
	uint32_t sign = (u >> 16) & 0x8000u, mant = u & 0x7fffffu;
	int32_t exp = (int32_t)((u >> 23) & 0xff);
	uint32_t half, rest, lsb;
	int shift;

	if (exp == 0xff) /* infinity, or NaN: quiet, payload truncated */
		return (uint16_t)(sign | (mant ? 0x7e00u | (mant >> 13) : 0x7c00u));
	exp -= 127 - 15;
	if (exp >= 0x1f)
		return (uint16_t)(sign | 0x7c00u); /* overflow */
	if (exp <= 0) {
		/* Subnormal (or zero): shift the implicit bit in, round. */
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = 14 - exp;
		half = mant >> shift;
		rest = mant & ((1u << shift) - 1);
		lsb = half & 1;
		if (rest > (1u << (shift - 1)) || (rest == (1u << (shift - 1)) && lsb))
			half++;
		return (uint16_t)(sign | half);
	}
	half = ((uint32_t)exp << 10) | (mant >> 13);
	rest = mant & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
		half++; /* may carry into the exponent, up to infinity: right */
	return (uint16_t)(sign | half);
}

/* binary16 -> binary32, exact for every non-NaN. */
US_HD static inline uint32_t us_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, mant = h & 0x3ffu;
	int exp = (h >> 10) & 0x1f;

	if (exp == 0x1f)
		return sign | 0x7f800000u | (mant << 13);
	if (exp == 0) {
		if (!mant)
			return sign;
		exp = 1;
		while (!(mant & 0x400u)) { /* normalise a subnormal */
			mant <<= 1;
			exp--;
		}
		mant &= 0x3ffu;
	}
	return sign | ((uint32_t)(exp + 127 - 15) << 23) | (mant << 13);
}

/* A bf16 result for f32 bits @u: NaNs keep sign and top payload, quiet. */
US_HD static inline uint16_t us_f32_to_bf16(uint32_t u)
{
	return us_f32_nan(u) ? (uint16_t)((u >> 16) | 0x40u) : us_f32_to_bf16_finite(u);
}

#endif /* US_CAST_RULES_H */
