/*
 * test_assembler.c - struct us_assembler is a context, not a process
 * global: two assemblers in one process, with different cache sizes,
 * serve the same state dict side by side (as the daemon and a loader
 * would), each within its own bound, and neither sees the other's cache,
 * its freeing, or its device.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "asm_fixture.h"
#include "assemble/assembler.h" /* as->cache, for its accounting */
#include "assemble/cache.h"
#include "assemble/cast.h"
#include "harness.h"

#define SPAN (64 * 48 * 4) /* the transposed chunk's bytes */

static struct fx x;

static struct us_assembler *new_as(uint64_t cache, enum us_executor ex)
{
	struct us_assembler_opts o = { .cache_size = cache, .executor = ex };
	struct us_assembler *as = NULL;

	CHECK(us_assembler_new(&o, &as, NULL) == US_OK);
	return as;
}

/* A [64, 48] int32 tensor stored transposed: reads hold its span in the
 * cache when it fits (tile.c), and read rows in groups when it does not. */
static struct us_tensor *transposed(void)
{
	static const uint64_t shape[2] = { 64, 48 }, zero[2] = { 0, 0 };
	static const int64_t colmajor[2] = { 1, 64 };
	struct us_tensor *t = fx_tensor(&x, "tr", 2, shape, 1);

	if (t)
		CHECK(fx_write(&x, fx_place(&x, t, 0, zero, shape, colmajor, 0)));
	return t;
}

static void test_two_caches(void)
{
	struct us_assembler *big, *small;
	struct us_tensor *t;

	CHECK(fx_begin(&x));
	t = transposed();
	big = new_as(1u << 20, US_EXEC_CPU);
	small = new_as(SPAN / 2, US_EXEC_CPU); /* cannot hold the span */
	if (!t || !big || !small)
		goto out;
	CHECK(us_cache_capacity(big->cache) == 1u << 20);
	CHECK(us_cache_capacity(small->cache) == SPAN / 2);
	CHECK(fx_read_ok(big, &x, t, 0, t->nbytes));
	CHECK(us_cache_count(big->cache) == 1 && us_cache_used(big->cache) == SPAN);
	CHECK(us_cache_count(small->cache) == 0 && us_cache_used(small->cache) == 0);
	CHECK(fx_read_ok(small, &x, t, 0, t->nbytes));
	CHECK(fx_read_ok(small, &x, t, 1000, 3000));
	CHECK(us_cache_used(small->cache) == 0);
	CHECK(us_cache_count(big->cache) == 1); /* untouched by the other */
	/* freeing one leaves the other serving */
	us_assembler_free(big);
	big = NULL;
	CHECK(fx_read_ok(small, &x, t, 0, t->nbytes));
out:
	us_assembler_free(big);
	us_assembler_free(small);
	fx_end(&x);
}

struct reader {
	struct us_assembler *as;
	const struct us_tensor *t;
	unsigned seed;
	int bad;
};

static void *read_worker(void *arg)
{
	struct reader *r = arg;
	uint64_t n = r->t->nbytes;

	for (int i = 0; i < 200; i++) {
		uint64_t off = (uint64_t)rand_r(&r->seed) % n;
		uint64_t len = 1 + (uint64_t)rand_r(&r->seed) % 5000;

		r->bad += !fx_read_ok_mt(r->as, &x, r->t, off,
					 len < n - off ? len : n - off);
	}
	return NULL;
}

/* Both at once, from several threads each: right bytes, each cache
 * within its own bound. */
static void test_two_at_once(void)
{
	struct us_assembler *as[2];
	struct reader r[4];
	pthread_t th[4];
	struct us_tensor *t;

	CHECK(fx_begin(&x));
	t = transposed();
	as[0] = new_as(1u << 20, US_EXEC_CPU);
	as[1] = new_as(SPAN / 2, US_EXEC_CPU);
	if (!t || !as[0] || !as[1])
		goto out;
	for (int i = 0; i < 4; i++) {
		r[i] = (struct reader){ .as = as[i % 2], .t = t, .seed = 7u + i };
		CHECK(pthread_create(&th[i], NULL, read_worker, &r[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(r[i].bad == 0);
	}
	CHECK(us_cache_used(as[0]->cache) <= 1u << 20);
	CHECK(us_cache_used(as[1]->cache) == 0);
out:
	us_assembler_free(as[0]);
	us_assembler_free(as[1]);
	fx_end(&x);
}

/*
 * The executor is the assembler's too: one on the CPU, one on CUDA device
 * 0 (which falls back to the CPU per call where there is none, as here),
 * give the same cast bytes, those of us_cast.
 */
static void test_executor_per_assembler(void)
{
	static const uint64_t shape[1] = { 1000 };
	static unsigned char a[2000], b[2000], want[2000];
	struct us_assembler *cpu = new_as(0, US_EXEC_CPU);
	struct us_assembler *gpu = new_as(0, US_EXEC_CUDA);
	struct us_tensor *t;
	float f[1000];

	CHECK(fx_begin(&x));
	t = us_sd_add_tensor(x.sd, "f", US_DT_F32, 1, shape, 1, "test", NULL);
	if (!t || !cpu || !gpu)
		goto out;
	for (int i = 0; i < 1000; i++)
		f[i] = (float)i / 7.0f - 50.0f;
	memcpy(x.img, f, sizeof(f));
	((uint64_t *)t->chunks[0].sizes)[0] = 1000;
	CHECK(fx_write(&x, sizeof(f)));
	us_tensor_present_as(t, US_DT_BF16);
	us_cast(US_DT_F32, US_DT_BF16, f, want, 1000);
	CHECK(us_tensor_read(cpu, x.sd, t, a, t->nbytes, 0) == US_OK);
	CHECK(us_tensor_read(gpu, x.sd, t, b, t->nbytes, 0) == US_OK);
	CHECK(memcmp(a, want, sizeof(want)) == 0 && memcmp(b, want, sizeof(want)) == 0);
out:
	us_assembler_free(cpu);
	us_assembler_free(gpu);
	fx_end(&x);
}

int main(void)
{
	RUN(test_two_caches);
	RUN(test_two_at_once);
	RUN(test_executor_per_assembler);
	TEST_MAIN_END();
}
