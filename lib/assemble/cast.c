/* cast.c - scalar conversions between f64, f32, f16 and bf16 (see cast.h). */
#include "cast.h"

#include <stdint.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static bool f32_bits_nan(uint32_t u)
{
	return (u & 0x7fffffffu) > 0x7f800000u;
}

/* Round-to-nearest-even of the top 16 bits (finite and infinite values). */
static uint16_t f32_to_bf16_finite(uint32_t u)
{
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* IEEE binary32 -> binary16, RNE, as x86's VCVTPS2PH does. */
static uint16_t f32_to_f16(uint32_t u)
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
static uint32_t f16_to_f32(uint16_t h)
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

static uint16_t rd16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void wr16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void wr32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Read one source element as f32 bits (f64 rounded once, RNE, NaNs quiet
 * with their sign and top payload bits, as the hardware converts them). */
static uint32_t load(enum us_dtype from, const unsigned char *p)
{
	switch (from) {
	case US_DT_F64: {
		uint64_t b = 0;
		double d;

		for (int i = 7; i >= 0; i--)
			b = b << 8 | p[i];
		memcpy(&d, &b, 8);
		return f32_bits((float)d);
	}
	case US_DT_F16: {
		uint32_t u = f16_to_f32(rd16(p));

		return f32_bits_nan(u) ? u | 0x400000u : u; /* quiet */
	}
	case US_DT_BF16:
		return (uint32_t)rd16(p) << 16;
	default:
		return rd32(p);
	}
}

static void store(enum us_dtype to, uint32_t u, unsigned char *q)
{
	switch (to) {
	case US_DT_BF16:
		/* A NaN keeps its sign and top payload bits, made quiet. */
		wr16(q, f32_bits_nan(u) ? (uint16_t)((u >> 16) | 0x40u)
					: f32_to_bf16_finite(u));
		break;
	case US_DT_F16:
		wr16(q, f32_to_f16(u));
		break;
	default: /* F32 */
		wr32(q, u);
		break;
	}
}

bool us_cast_supported(enum us_dtype from, enum us_dtype to)
{
	bool src = from == US_DT_F64 || from == US_DT_F32 || from == US_DT_F16 ||
		   from == US_DT_BF16;
	bool dst = to == US_DT_F32 || to == US_DT_F16 || to == US_DT_BF16;

	return from == to || (src && dst);
}

void us_cast(enum us_dtype from, enum us_dtype to, const void *src, void *dst,
	     size_t n)
{
	const unsigned char *p = src;
	unsigned char *q = dst;
	size_t si = us_dtype_bits(from) / 8, di = us_dtype_bits(to) / 8;

	if (from == to) {
		memcpy(dst, src, n * si);
		return;
	}
	for (size_t i = 0; i < n; i++, p += si, q += di)
		store(to, load(from, p), q);
}
