/*
 * loader_read.c - many threads reading one batch straight into the
 * caller's buffers.
 *
 * Each thread takes the next piece of the batch (at most PIECE bytes of one
 * request) and calls us_tensor_read on it through the loader's one
 * assembler, which is thread-safe (assemble.h: the daemon's FUSE threads do
 * the same).  Contiguous source runs land in the destination with no copy;
 * pieces are large so that each is a few big preads.  A batch too small to
 * share is read by the calling thread alone: no thread is started.  A
 * request may name one source chunk of its tensor instead (the device
 * path places each chunk itself): it is read as a tensor of its own.
 */
#include "loader_impl.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PIECE (8ull << 20)
#define HUGE_PAGE (2ull << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels say EINVAL */
#endif

struct batch {
	struct us_loader *ld;
	const struct us_loader_req *reqs;
	size_t n;
	pthread_mutex_t lock;
	size_t next;        /* the request the cursor is in */
	uint64_t next_off;  /* and how far into it */
	enum us_status rc;  /* the first failure */
	size_t failed;      /* its request */
};

/* The next piece, or false when the batch is done (or failed). */
static bool take(struct batch *b, size_t *req, uint64_t *off, uint64_t *len)
{
	bool got = false;

	pthread_mutex_lock(&b->lock);
	while (b->rc == US_OK && b->next < b->n &&
	       b->next_off >= b->reqs[b->next].len) {
		b->next++;
		b->next_off = 0;
	}
	if (b->rc == US_OK && b->next < b->n) {
		uint64_t left = b->reqs[b->next].len - b->next_off;

		*req = b->next;
		*off = b->next_off;
		*len = left < PIECE ? left : PIECE;
		b->next_off += *len;
		got = true;
	}
	pthread_mutex_unlock(&b->lock);
	return got;
}

/* [lo, hi): the multiples of @align wholly inside [buf, buf + len); false
 * when that is empty. */
static bool inner_span(void *buf, uint64_t len, uintptr_t align,
		       uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t b = (uintptr_t)buf;

	*lo = (b + align - 1) & ~(align - 1);
	*hi = (b + len) & ~(align - 1);
	return *lo < *hi;
}

/* Ask for huge pages under every large destination, before any of it is
 * touched: fresh memory then costs one fault and one 2 MiB clear per huge
 * page instead of 512 faults inside the copy.  Advice only: where the
 * kernel has no THP, or the buffer is not anonymous memory, nothing
 * changes. */
static void advise_huge(const struct us_loader_req *reqs, size_t n)
{
	uintptr_t lo, hi;

	for (size_t i = 0; i < n; i++)
		if (reqs[i].len >= HUGE_PAGE &&
		    inner_span(reqs[i].buf, reqs[i].len, HUGE_PAGE, &lo, &hi))
			madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

/* Fault in a piece's destination pages before its pread, so that the copy
 * runs on mapped memory: one MADV_POPULATE_WRITE walks the piece's pages in
 * the kernel, where faults taken one by one inside the copy cost a trap and
 * a retry each (a warm 0.94 GB load here: 0.25 s without, 0.20 s with, on
 * 4 KiB pages as on huge ones).  The pages are the caller's, written next
 * anyway: populating changes no byte; a refusal (old kernel, memory that is
 * not anonymous) leaves the faults to the pread. */
static void prefault(void *buf, uint64_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo, hi;

	if (inner_span(buf, len, page, &lo, &hi))
		madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

/* The box of @t's chunk @k as a tensor of its own (in *@ct, whose one
 * chunk is *@cc): the same extent, dtype and casts, so that reading it
 * gives that box's bytes in its own row-major order.  The assembler's
 * cache is keyed by file and item, never by tensor, so a tensor made for
 * one read shares it with the real ones. */
static const struct us_tensor *chunk_tensor(const struct us_tensor *t,
					    uint32_t k, struct us_tensor *ct,
					    struct us_chunk *cc)
{
	static const uint64_t corner[US_MAX_NDIM];
	const struct us_chunk *c = &t->chunks[k];
	uint64_t numel = 1;

	assert(k < t->nchunks && t->ndim <= US_MAX_NDIM);
	for (uint32_t d = 0; d < t->ndim; d++)
		numel *= c->sizes[d];
	*cc = (struct us_chunk){ .offsets = corner, .sizes = c->sizes,
				 .src = c->src };
	*ct = *t;
	ct->shape = c->sizes;
	ct->numel = numel;
	ct->nbytes = numel * (us_dtype_bits(t->dtype) / 8);
	ct->chunks = cc;
	ct->nchunks = 1;
	ct->tie_of = NULL;
	return ct;
}

/* What request @r reads: its tensor, or one of its chunks (in *@ct). */
static const struct us_tensor *req_tensor(const struct us_loader *ld,
					  const struct us_loader_req *r,
					  struct us_tensor *ct,
					  struct us_chunk *cc)
{
	const struct us_tensor *t = &ld->sd->tensors[r->tensor];

	return r->chunk ? chunk_tensor(t, r->chunk - 1, ct, cc) : t;
}

static void *worker(void *arg)
{
	struct batch *b = arg;
	size_t i;
	uint64_t off, len;

	while (take(b, &i, &off, &len)) {
		const struct us_loader_req *r = &b->reqs[i];
		struct us_tensor ct;
		struct us_chunk cc;
		const struct us_tensor *t = req_tensor(b->ld, r, &ct, &cc);
		enum us_status rc;

		prefault((char *)r->buf + off, len);
		rc = us_tensor_read(b->ld->as, b->ld->sd, t,
				    (char *)r->buf + off, len, r->off + off);
		if (rc != US_OK) {
			pthread_mutex_lock(&b->lock);
			if (b->rc == US_OK) {
				b->rc = rc;
				b->failed = i;
			}
			pthread_mutex_unlock(&b->lock);
		}
	}
	return NULL;
}

/* Refuse a request outside its tensor before any thread starts. */
static enum us_status check(const struct us_loader *ld,
			    const struct us_loader_req *r, struct us_err *err)
{
	const struct us_tensor *t = us_ld_tensor(ld, r->tensor, err);
	struct us_tensor ct;
	struct us_chunk cc;

	if (!t)
		return US_E_USAGE;
	if (r->chunk > t->nchunks)
		return us_err_set(err, US_E_USAGE, t->name, "no chunk %u (%u "
				  "chunks)", r->chunk - 1, t->nchunks);
	t = req_tensor(ld, r, &ct, &cc);
	if (r->off > t->nbytes || r->len > t->nbytes - r->off) {
		char what[32] = "its";

		if (r->chunk)
			snprintf(what, sizeof(what), "its chunk %u's", r->chunk - 1);
		return us_err_set(err, US_E_USAGE, t->name, "bytes [%llu, +%llu) "
				  "are outside %s %llu bytes",
				  (unsigned long long)r->off,
				  (unsigned long long)r->len, what,
				  (unsigned long long)t->nbytes);
	}
	if (r->len && !r->buf)
		return us_err_set(err, US_E_USAGE, t->name, "no buffer");
	return US_OK;
}

static enum us_status failure(const struct batch *b, struct us_err *err)
{
	const struct us_tensor *t = &b->ld->sd->tensors[b->reqs[b->failed].tensor];

	return us_err_set(err, b->rc, t->decl_path ? t->decl_path : ".",
			  "cannot read tensor '%s': %s (a source file failed, "
			  "or changed since it was opened)", t->name,
			  us_status_str(b->rc));
}

enum us_status us_loader_read_many(struct us_loader *ld,
				   const struct us_loader_req *reqs, size_t n,
				   struct us_err *err)
{
	struct batch b = { .ld = ld, .reqs = reqs, .n = n, .rc = US_OK };
	pthread_t tid[US_LOADER_MAX_THREADS];
	uint64_t total = 0;
	unsigned nt, started = 0;

	if (!ld || (n && !reqs))
		return us_err_set(err, US_E_USAGE, ".", "no loader or no "
				  "requests (a closed handle?)");
	for (size_t i = 0; i < n; i++) {
		US_TRY(check(ld, &reqs[i], err));
		total += reqs[i].len;
	}
	nt = (unsigned)((total + PIECE - 1) / PIECE);
	nt = nt < ld->threads ? nt : ld->threads;
	assert(nt <= US_LOADER_MAX_THREADS); /* ld->threads: loader.c caps it */
	if (ld->hugepages)
		advise_huge(reqs, n);
	pthread_mutex_init(&b.lock, NULL);
	/* The caller is a reader too; with no thread started it is the only one. */
	while (started + 1 < nt &&
	       pthread_create(&tid[started], NULL, worker, &b) == 0)
		started++;
	worker(&b);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&b.lock);
	return b.rc == US_OK ? US_OK : failure(&b, err);
}
