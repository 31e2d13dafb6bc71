/* cast.c - scalar conversions between f64, f32, f16 and bf16 (see cast.h). */
#include "cast.h"
#include "cast_rules.h"

#include <stdint.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
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
		uint32_t u = us_f16_to_f32(rd16(p));

		return us_f32_nan(u) ? u | 0x400000u : u; /* quiet */
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
		wr16(q, us_f32_to_bf16(u));
		break;
	case US_DT_F16:
		wr16(q, us_f32_to_f16(u));
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
