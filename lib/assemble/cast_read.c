/*
 * cast_read.c - reading a tensor presented in another dtype (--dtype).
 *
 * The stored elements covering the requested range are read in blocks
 * through the CPU executor (us_exec_cpu_read), converted (cast.h) where the
 * assembler says, and the requested bytes copied out.  On the CPU: two fixed 32 KiB stack
 * buffers per call.  With a CUDA device: two 1 MiB buffers per thread, so a
 * whole FUSE read (at most 1 MiB) is one round trip to the device instead
 * of thirty-two.  Memory stays bounded whatever the tensor size.
 */
#include "exec.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "assembler.h"
#include "cast.h"
#include "cuda.h"

#define CAST_BLOCK 32768u
#define CAST_BLOCK_DEV (1u << 20)

static bool on_device(const struct us_assembler *as)
{
	return as->executor == US_EXEC_CUDA;
}

/* On the assembler's device, with a fallback to the CPU if it fails: the
 * same bits either way (cast_rules.h). */
static void convert(const struct us_assembler *as, enum us_dtype from,
		    enum us_dtype to, const void *src, void *dst, size_t n)
{
	if (!on_device(as) || !us_cuda_cast(as->device, from, to, src, dst, n))
		us_cast(from, to, src, dst, n);
}

struct us_tensor us_tensor_stored(const struct us_tensor *t)
{
	struct us_tensor s = *t;

	s.dtype = t->chunks[0].src.dtype;
	s.nbytes = t->numel * (us_dtype_bits(s.dtype) / 8);
	return s;
}

/* This thread's device-sized buffers (freed with the thread), or NULL.
 * Scratch only, so one key serves every assembler (assembler.h). */
static pthread_key_t dev_key;
static pthread_once_t dev_once = PTHREAD_ONCE_INIT;
static int dev_key_ok;

static void dev_key_init(void)
{
	dev_key_ok = pthread_key_create(&dev_key, free) == 0;
}

static unsigned char *dev_buffers(void)
{
	unsigned char *b;

	pthread_once(&dev_once, dev_key_init);
	if (!dev_key_ok)
		return NULL;
	b = pthread_getspecific(dev_key);
	if (!b) {
		b = malloc(2 * (size_t)CAST_BLOCK_DEV);
		if (b && pthread_setspecific(dev_key, b) != 0) {
			free(b);
			b = NULL;
		}
	}
	return b;
}

bool us_tensor_is_cast(const struct us_tensor *t)
{
	return t->nchunks && t->chunks[0].src.dtype != t->dtype;
}

enum us_status us_cast_read(struct us_assembler *as,
			    const struct us_statedict *sd,
			    const struct us_tensor *t, void *buf, uint64_t len,
			    uint64_t off)
{
	unsigned char stack[2][CAST_BLOCK];
	unsigned char *big = on_device(as) ? dev_buffers() : NULL;
	unsigned char *sbuf = big ? big : stack[0];
	unsigned char *dbuf = big ? big + CAST_BLOCK_DEV : stack[1];
	struct us_tensor s = us_tensor_stored(t);
	uint64_t si = us_dtype_bits(s.dtype) / 8, di = us_dtype_bits(t->dtype) / 8;
	uint64_t per = (big ? CAST_BLOCK_DEV : CAST_BLOCK) / (si > di ? si : di);
	uint64_t e = off / di, end = off + len;
	unsigned char *out = buf;

	/* Only whole-byte float dtypes are cast (us_tensor_present_as), and
	 * a block holds at least one element of either. */
	assert(si > 0 && di > 0 && per > 0);
	assert(t->nbytes == t->numel * di && s.nbytes == t->numel * si);

	while (e * di < end) {
		uint64_t n = t->numel - e < per ? t->numel - e : per;
		uint64_t b0 = e * di, b1 = (e + n) * di, from, to;
		enum us_status rc = us_exec_cpu_read(as, sd, &s, sbuf, n * si,
						     e * si);

		if (rc != US_OK)
			return rc;
		convert(as, s.dtype, t->dtype, sbuf, dbuf, (size_t)n);
		from = b0 > off ? b0 : off;
		to = b1 < end ? b1 : end;
		memcpy(out + (from - off), dbuf + (from - b0), (size_t)(to - from));
		e += n;
	}
	return US_OK;
}
