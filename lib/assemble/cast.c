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

/*
 * One loop per (from, to) pair: cast_loop is inlined with constant dtypes,
 * so load() and store() lose their switches and the compiler can unroll.
 */
static inline __attribute__((always_inline)) void
cast_loop(enum us_dtype from, enum us_dtype to, const unsigned char *p,
	  unsigned char *q, size_t n)
{
	size_t si = us_dtype_bits(from) / 8, di = us_dtype_bits(to) / 8;

	for (size_t i = 0; i < n; i++)
		store(to, load(from, p + i * si), q + i * di);
}

#define PAIR(a, b) ((a) * 32 + (b))

static void cast_scalar(enum us_dtype from, enum us_dtype to,
			const unsigned char *p, unsigned char *q, size_t n)
{
	switch (PAIR(from, to)) {
	case PAIR(US_DT_F32, US_DT_BF16): cast_loop(US_DT_F32, US_DT_BF16, p, q, n); break;
	case PAIR(US_DT_F32, US_DT_F16): cast_loop(US_DT_F32, US_DT_F16, p, q, n); break;
	case PAIR(US_DT_F64, US_DT_F32): cast_loop(US_DT_F64, US_DT_F32, p, q, n); break;
	case PAIR(US_DT_F64, US_DT_BF16): cast_loop(US_DT_F64, US_DT_BF16, p, q, n); break;
	case PAIR(US_DT_F64, US_DT_F16): cast_loop(US_DT_F64, US_DT_F16, p, q, n); break;
	case PAIR(US_DT_F16, US_DT_F32): cast_loop(US_DT_F16, US_DT_F32, p, q, n); break;
	case PAIR(US_DT_F16, US_DT_BF16): cast_loop(US_DT_F16, US_DT_BF16, p, q, n); break;
	case PAIR(US_DT_BF16, US_DT_F32): cast_loop(US_DT_BF16, US_DT_F32, p, q, n); break;
	case PAIR(US_DT_BF16, US_DT_F16): cast_loop(US_DT_BF16, US_DT_F16, p, q, n); break;
	default: /* not reached: us_cast_supported() is checked at mount */
		for (size_t i = 0; i < n; i++)
			store(to, load(from, p + i * (us_dtype_bits(from) / 8)),
			      q + i * (us_dtype_bits(to) / 8));
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

/*
 * What the CPU and the kernel allow, from CPUID (clang's
 * __builtin_cpu_supports knows no "f16c"): AVX needs the OS to save the
 * YMM state (OSXSAVE, then XCR0 bits 1 and 2).
 */
enum { CPU_AVX = 1, CPU_F16C = 2, CPU_AVX2 = 4 };

static unsigned cpu_features(void)
{
	static int have = -1;
	unsigned a, b, c, d, lo, hi, f = 0;

	if (have >= 0)
		return (unsigned)have;
	if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE)) {
		__asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
		if ((lo & 6) == 6 && (c & bit_AVX)) {
			f |= CPU_AVX | ((c & bit_F16C) ? CPU_F16C : 0);
			if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_AVX2))
				f |= CPU_AVX2;
		}
	}
	have = (int)f;
	return f;
}

/*
 * Conversions to and from f16 with the F16C instructions, 8 elements at a
 * time (f32 <-> f16, and bf16, f64 -> f16, f16 -> bf16 through f32).  The rules
 * in cast_rules.h are written to give VCVTPS2PH's and VCVTPH2PS's bits
 * (round to nearest even; a NaN made quiet with its sign and top payload
 * bits), so both paths agree bit for bit (tests/unit/test_cast.c checks it
 * over every f16 and over special and random f32 values).
 */
__attribute__((target("avx,f16c")))
static size_t f32_to_f16_f16c(const unsigned char *p, unsigned char *q, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 x = _mm256_loadu_ps((const float *)(const void *)(p + 4 * i));
		__m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT |
						  _MM_FROUND_NO_EXC);

		_mm_storeu_si128((__m128i *)(void *)(q + 2 * i), h);
	}
	return i;
}

__attribute__((target("avx,f16c")))
static size_t f16_to_f32_f16c(const unsigned char *p, unsigned char *q, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));

		_mm256_storeu_ps((float *)(void *)(q + 4 * i), _mm256_cvtph_ps(h));
	}
	return i;
}

/* bf16 -> f16: widening bf16 is a shift (x << 16), then VCVTPS2PH. */
__attribute__((target("avx,f16c")))
static size_t bf16_to_f16_f16c(const unsigned char *p, unsigned char *q, size_t n)
{
	const __m128i zero = _mm_setzero_si128();
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));
		__m256 x = _mm256_set_m128(
			_mm_castsi128_ps(_mm_unpackhi_epi16(zero, b)),
			_mm_castsi128_ps(_mm_unpacklo_epi16(zero, b)));

		_mm_storeu_si128((__m128i *)(void *)(q + 2 * i),
				 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT |
						    _MM_FROUND_NO_EXC));
	}
	return i;
}

/* f64 -> f16: rounded once to f32 (VCVTPD2PS, as C's (float) does under the
 * default rounding mode) and then to f16, like the scalar rule. */
__attribute__((target("avx,f16c")))
static size_t f64_to_f16_f16c(const unsigned char *p, unsigned char *q, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		const double *d = (const double *)(const void *)(p + 8 * i);
		__m256 x = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(d + 4)),
					   _mm256_cvtpd_ps(_mm256_loadu_pd(d)));

		_mm_storeu_si128((__m128i *)(void *)(q + 2 * i),
				 _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT |
						    _MM_FROUND_NO_EXC));
	}
	return i;
}

/* f16 -> bf16: VCVTPH2PS (exact, NaNs made quiet as the rule does), then
 * the scalar bf16 rounding on the widened block. */
__attribute__((target("avx,f16c")))
static size_t f16_to_bf16_f16c(const unsigned char *p, unsigned char *q, size_t n)
{
	uint32_t w[8];
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));

		_mm256_storeu_ps((float *)(void *)w, _mm256_cvtph_ps(h));
		for (int k = 0; k < 8; k++)
			wr16(q + 2 * (i + (size_t)k), us_f32_to_bf16(w[k]));
	}
	return i;
}

/*
 * To bf16 with AVX2 integer operations, the rule of cast_rules.h eight lanes
 * at a time: round to nearest even on the top 16 bits, or, for a NaN, keep
 * sign and top payload and set the quiet bit.
 */
__attribute__((target("avx2")))
static __m128i bf16_of(__m256i u)
{
	const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
	const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i rne = _mm256_srli_epi32(
		_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
	__m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
	__m256i r = _mm256_blendv_epi8(rne, qnan, nan);

	/* Every lane is <= 0xffff: the saturating pack keeps it; the pack
	 * works per 128-bit half, so gather the two low quadwords. */
	r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
	return _mm256_castsi256_si128(r);
}

__attribute__((target("avx2")))
static size_t f32_to_bf16_avx2(const unsigned char *p, unsigned char *q, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256i u = _mm256_loadu_si256((const __m256i *)(const void *)(p + 4 * i));

		_mm_storeu_si128((__m128i *)(void *)(q + 2 * i), bf16_of(u));
	}
	return i;
}

/* f64 -> f32 (VCVTPD2PS: C's (float) under the default rounding), and on to
 * bf16 by the rule, for f64 -> bf16. */
__attribute__((target("avx2")))
static size_t f64_to_f32_avx2(const unsigned char *p, unsigned char *q, size_t n,
			      bool bf16)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		const double *d = (const double *)(const void *)(p + 8 * i);
		__m256 x = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(d + 4)),
					   _mm256_cvtpd_ps(_mm256_loadu_pd(d)));

		if (bf16)
			_mm_storeu_si128((__m128i *)(void *)(q + 2 * i),
					 bf16_of(_mm256_castps_si256(x)));
		else
			_mm256_storeu_ps((float *)(void *)(q + 4 * i), x);
	}
	return i;
}

/* bf16 -> f32: each element shifted into the top half of a word. */
__attribute__((target("avx2")))
static size_t bf16_to_f32_avx2(const unsigned char *p, unsigned char *q, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m128i b = _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i));

		_mm256_storeu_si256((__m256i *)(void *)(q + 4 * i),
				    _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
	}
	return i;
}

/* Elements done with AVX2 (a prefix of @n), 0 when it does not apply. */
static size_t cast_avx2(enum us_dtype from, enum us_dtype to,
			const unsigned char *p, unsigned char *q, size_t n)
{
	if (!(cpu_features() & CPU_AVX2))
		return 0;
	if (from == US_DT_F32 && to == US_DT_BF16)
		return f32_to_bf16_avx2(p, q, n);
	if (from == US_DT_BF16 && to == US_DT_F32)
		return bf16_to_f32_avx2(p, q, n);
	if (from == US_DT_F64 && (to == US_DT_F32 || to == US_DT_BF16))
		return f64_to_f32_avx2(p, q, n, to == US_DT_BF16);
	return 0;
}

/* Elements done with F16C (a prefix of @n), 0 when it does not apply. */
static size_t cast_f16c(enum us_dtype from, enum us_dtype to,
			const unsigned char *p, unsigned char *q, size_t n)
{
	if ((cpu_features() & (CPU_AVX | CPU_F16C)) != (CPU_AVX | CPU_F16C))
		return 0;
	if (from == US_DT_F32 && to == US_DT_F16)
		return f32_to_f16_f16c(p, q, n);
	if (from == US_DT_F16 && to == US_DT_F32)
		return f16_to_f32_f16c(p, q, n);
	if (from == US_DT_BF16 && to == US_DT_F16)
		return bf16_to_f16_f16c(p, q, n);
	if (from == US_DT_F64 && to == US_DT_F16)
		return f64_to_f16_f16c(p, q, n);
	if (from == US_DT_F16 && to == US_DT_BF16)
		return f16_to_bf16_f16c(p, q, n);
	return 0;
}
#else
static size_t cast_avx2(enum us_dtype from, enum us_dtype to,
			const unsigned char *p, unsigned char *q, size_t n)
{
	(void)from; (void)to; (void)p; (void)q; (void)n;
	return 0;
}

static size_t cast_f16c(enum us_dtype from, enum us_dtype to,
			const unsigned char *p, unsigned char *q, size_t n)
{
	(void)from; (void)to; (void)p; (void)q; (void)n;
	return 0;
}
#endif

void us_cast(enum us_dtype from, enum us_dtype to, const void *src, void *dst,
	     size_t n)
{
	const unsigned char *p = src;
	unsigned char *q = dst;
	size_t si = us_dtype_bits(from) / 8, di = us_dtype_bits(to) / 8, done;

	if (from == to) {
		memcpy(dst, src, n * si);
		return;
	}
	done = cast_f16c(from, to, p, q, n);
	if (!done)
		done = cast_avx2(from, to, p, q, n);
	cast_scalar(from, to, p + done * si, q + done * di, n - done);
}
