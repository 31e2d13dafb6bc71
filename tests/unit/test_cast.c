/* test_cast.c - dtype conversions on hand-picked bit patterns (values taken
 * from torch 2.15's Tensor.to on x86-64). */
#include <stdint.h>
#include <string.h>

#include "assemble/cast.h"
#include "assemble/cast_rules.h"
#include "harness.h"

static uint16_t f32_to(enum us_dtype to, uint32_t bits)
{
	uint16_t out = 0;

	us_cast(US_DT_F32, to, &bits, &out, 1);
	return out;
}

static void test_f32_to_bf16(void)
{
	CHECK(f32_to(US_DT_BF16, 0x3f800000u) == 0x3f80);
	CHECK(f32_to(US_DT_BF16, 0x3f808000u) == 0x3f80); /* tie to even */
	CHECK(f32_to(US_DT_BF16, 0x3f818000u) == 0x3f82); /* tie to even */
	CHECK(f32_to(US_DT_BF16, 0x3f800001u) == 0x3f80);
	CHECK(f32_to(US_DT_BF16, 0x7f7fffffu) == 0x7f80); /* rounds to inf */
	CHECK(f32_to(US_DT_BF16, 0x00000001u) == 0x0000);
	CHECK((f32_to(US_DT_BF16, 0xffa00000u) & 0x7fc0) == 0x7fc0); /* NaN stays */
}

static void test_f32_to_f16(void)
{
	CHECK(f32_to(US_DT_F16, 0x477ff000u) == 0x7c00); /* 65520 -> inf */
	CHECK(f32_to(US_DT_F16, 0x477fefffu) == 0x7bff);
	CHECK(f32_to(US_DT_F16, 0x33800000u) == 0x0001); /* 2^-24 */
	CHECK(f32_to(US_DT_F16, 0x33000000u) == 0x0000); /* 2^-25: tie to 0 */
	CHECK(f32_to(US_DT_F16, 0x33000001u) == 0x0001);
	CHECK(f32_to(US_DT_F16, 0x387fc000u) == 0x03ff); /* subnormal, exact */
	CHECK(f32_to(US_DT_F16, 0x387ff000u) == 0x0400); /* tie: up to normal */
	CHECK(f32_to(US_DT_F16, 0x80000000u) == 0x8000);
	CHECK(f32_to(US_DT_F16, 0xffa00000u) == 0xff00); /* NaN payload kept */
	CHECK(f32_to(US_DT_F16, 0x7f800000u) == 0x7c00);
}

static void test_widening(void)
{
	uint16_t h[4] = {0x0001, 0x8001, 0x3c00, 0x7c00};
	uint32_t f[4];
	double d = 1.0000000596046448; /* 1 + 2^-24: ties to 1.0 in f32 */
	uint16_t b;

	us_cast(US_DT_F16, US_DT_F32, h, f, 4);
	CHECK(f[0] == 0x33800000u && f[1] == 0xb3800000u);
	CHECK(f[2] == 0x3f800000u && f[3] == 0x7f800000u);
	us_cast(US_DT_F64, US_DT_BF16, &d, &b, 1);
	CHECK(b == 0x3f80);
	CHECK(us_cast_supported(US_DT_F64, US_DT_F16));
	CHECK(!us_cast_supported(US_DT_I32, US_DT_F16));
	CHECK(!us_cast_supported(US_DT_F32, US_DT_F64));
}

/* f64 bits -> the f32 bits C's (float) gives: the scalar rule's first step. */
static uint32_t f64_as_f32(double d)
{
	float g = (float)d;
	uint32_t u;

	memcpy(&u, &g, 4);
	return u;
}

/* f64 to f16, bf16 and f32 over 4096 values derived from @f (the f32 test
 * values, scaled off their f32 grid); the number of wrong elements. */
static int f64_blocks_match_rules(const uint32_t *f)
{
	static double d[4096];
	static uint16_t h[4096];
	static uint32_t w[4096];
	int bad = 0;

	for (uint32_t i = 0; i < 4096; i++) {
		float g;

		memcpy(&g, &f[i * 16], 4);
		d[i] = (double)g * (1.0 + 1e-9 * (double)(i % 7));
	}
	d[0] = 65519.99999; /* rounds to 65520 as f32, then to inf */
	us_cast(US_DT_F64, US_DT_F16, d, h, 4096);
	for (uint32_t i = 0; i < 4096; i++)
		bad += h[i] != us_f32_to_f16(f64_as_f32(d[i]));
	us_cast(US_DT_F64, US_DT_BF16, d, h, 4096);
	for (uint32_t i = 0; i < 4096; i++)
		bad += h[i] != us_f32_to_bf16(f64_as_f32(d[i]));
	us_cast(US_DT_F64, US_DT_F32, d, w, 4096);
	for (uint32_t i = 0; i < 4096; i++)
		bad += w[i] != f64_as_f32(d[i]);
	return bad;
}

/*
 * Whole blocks take the vector path (F16C, where the CPU has it); the
 * rules in cast_rules.h are the reference, element by element: every f16
 * widened, and special plus pseudo-random f32 narrowed (NaNs included).
 */
static void test_blocks_match_rules(void)
{
	static uint16_t h[65536], h2[65536];
	static uint32_t w[65536], f[65536];
	uint32_t x = 12345;
	int bad = 0;

	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	us_cast(US_DT_F16, US_DT_F32, h, w, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		uint32_t u = us_f16_to_f32((uint16_t)i);

		bad += w[i] != (us_f32_nan(u) ? u | 0x400000u : u);
	}
	for (uint32_t i = 0; i < 65536; i++) {
		x = x * 1103515245u + 12345u;
		f[i] = i < 65536 / 2 ? (uint32_t)i << 16 | (x & 0xffff) : x;
	}
	f[0] = 0x7f800001u; /* signalling NaN */
	f[1] = 0xffc00000u; /* quiet negative NaN */
	f[2] = 0x477ff000u; /* 65520: rounds to infinity */
	f[3] = 0x33000001u; /* just above half the smallest subnormal */
	us_cast(US_DT_F32, US_DT_F16, f, h2, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		bad += h2[i] != us_f32_to_f16(f[i]);
	CHECK(bad == 0);
	bad = 0;
	/* Every bf16 to f16, every f16 to bf16, through the vector paths. */
	us_cast(US_DT_BF16, US_DT_F16, h, h2, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		bad += h2[i] != us_f32_to_f16(i << 16);
	us_cast(US_DT_F16, US_DT_BF16, h, h2, 65536);
	for (uint32_t i = 0; i < 65536; i++) {
		uint32_t u = us_f16_to_f32((uint16_t)i);

		bad += h2[i] != us_f32_to_bf16(us_f32_nan(u) ? u | 0x400000u : u);
	}
	CHECK(bad == 0);
	bad = 0;
	bad += f64_blocks_match_rules(f);
	CHECK(bad == 0);
	bad = 0;
	/* f32 to bf16 (ties, NaNs, overflow to infinity included) and back. */
	us_cast(US_DT_F32, US_DT_BF16, f, h2, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		bad += h2[i] != us_f32_to_bf16(f[i]);
	us_cast(US_DT_BF16, US_DT_F32, h, w, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		bad += w[i] != i << 16;
	CHECK(bad == 0);
}

int main(void)
{
	RUN(test_f32_to_bf16);
	RUN(test_f32_to_f16);
	RUN(test_widening);
	RUN(test_blocks_match_rules);
	TEST_MAIN_END();
}
