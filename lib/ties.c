/* ties.c - finding tie groups: by shared extents, then by the writer's
 * evidence, confirmed by the bytes. */
#include "ties.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assemble/assemble.h"
#include "tie_evidence.h"

#define PROOF_BUF (1u << 20)

/* The one spelling of each mode: --ties and the canonical options. */
static const char *const mode_names[] = {
	[US_TIES_AUTO] = "auto", [US_TIES_DECLARED] = "declared",
	[US_TIES_OFF] = "off", [US_TIES_EQUAL] = "equal",
};

bool us_ties_mode_parse(const char *s, enum us_ties_mode *out)
{
	for (size_t i = 0; i < sizeof(mode_names) / sizeof(*mode_names); i++) {
		if (strcmp(s, mode_names[i]) == 0) {
			*out = (enum us_ties_mode)i;
			return true;
		}
	}
	return false;
}

const char *us_ties_mode_name(enum us_ties_mode mode)
{
	assert((size_t)mode < sizeof(mode_names) / sizeof(*mode_names));
	return mode_names[mode];
}

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

/* Same dtype and shape: the precondition of any tie. */
static int cmp_kind(const struct us_tensor *a, const struct us_tensor *b)
{
	int c = cmp_u64(a->dtype, b->dtype);

	if (c || (c = cmp_u64(a->ndim, b->ndim)))
		return c;
	for (uint32_t k = 0; k < a->ndim; k++)
		if ((c = cmp_u64(a->shape[k], b->shape[k])))
			return c;
	return 0;
}

static int cmp_extent(const struct us_extent *a, const struct us_extent *b,
		      uint32_t ndim)
{
	int c;

	if ((c = cmp_u64(a->file, b->file)) || (c = cmp_u64(a->xf, b->xf)) ||
	    (c = cmp_u64(a->item_off, b->item_off)) ||
	    (c = cmp_u64(a->offset, b->offset)) ||
	    (c = cmp_u64(a->dtype, b->dtype)))
		return c;
	if (!a->strides || !b->strides)
		return cmp_u64(!!a->strides, !!b->strides);
	for (uint32_t k = 0; k < ndim; k++)
		if ((c = cmp_u64((uint64_t)a->strides[k], (uint64_t)b->strides[k])))
			return c;
	return 0;
}

/* Same kind and the very same source bytes, chunk by chunk. */
static int cmp_declared(const void *x, const void *y)
{
	const struct us_tensor *a = *(const struct us_tensor *const *)x;
	const struct us_tensor *b = *(const struct us_tensor *const *)y;
	int c = cmp_kind(a, b);

	if (c || (c = cmp_u64(a->nchunks, b->nchunks)))
		return c;
	for (uint32_t i = 0; i < a->nchunks; i++) {
		const struct us_chunk *p = &a->chunks[i], *q = &b->chunks[i];

		for (uint32_t k = 0; k < a->ndim; k++)
			if ((c = cmp_u64(p->offsets[k], q->offsets[k])) ||
			    (c = cmp_u64(p->sizes[k], q->sizes[k])))
				return c;
		if ((c = cmp_extent(&p->src, &q->src, a->ndim)))
			return c;
	}
	return 0;
}

static int cmp_kind_order(const void *x, const void *y)
{
	const struct us_tensor *a = *(const struct us_tensor *const *)x;
	const struct us_tensor *b = *(const struct us_tensor *const *)y;
	int c = cmp_kind(a, b);

	return c ? c : cmp_u64(a->order, b->order);
}

/* The canonical tensor of @t's group (itself when untied). */
static struct us_tensor *canon(struct us_tensor *t)
{
	return t->tie_of ? (struct us_tensor *)t->tie_of : t;
}

/* Merge the groups of @a and @b; the earlier source name stays canonical. */
static void link_pair(struct us_statedict *sd, struct us_tensor *a,
		      struct us_tensor *b)
{
	struct us_tensor *ca = canon(a), *cb = canon(b), *keep, *drop;

	if (ca == cb)
		return;
	keep = ca->order < cb->order ? ca : cb;
	drop = keep == ca ? cb : ca;
	for (size_t i = 0; i < sd->ntensors; i++)
		if (sd->tensors[i].tie_of == drop)
			sd->tensors[i].tie_of = keep;
	drop->tie_of = keep;
}

static void link_declared(struct us_statedict *sd, struct us_tensor **v)
{
	size_t n = sd->ntensors;

	qsort(v, n, sizeof(*v), cmp_declared);
	/* Empty tensors have no bytes to share (a DCP one has no chunks at
	 * all, so any two compare equal): each keeps its own name. */
	for (size_t i = 1; i < n; i++)
		if (v[i]->nbytes && cmp_declared(&v[i - 1], &v[i]) == 0)
			link_pair(sd, v[i - 1], v[i]);
}

/* ---- evidence, confirmed by bytes ---------------------------------------- */

struct confirmer {
	const struct us_statedict *sd;
	struct us_assembler *as; /* its own: confirming happens before a mount has one */
	const struct us_tie_evidence *ev;
	enum us_ties_mode mode;
	unsigned char *a, *b;
	bool progress;
	time_t start, last;
	uint64_t bytes; /* read so far, for progress */
};

static void draw(const struct confirmer *p)
{
	fprintf(stderr, "\runshardfs: confirming tied weights: %llu MiB compared",
		(unsigned long long)(p->bytes >> 20));
}

static void report(struct confirmer *p)
{
	time_t now;

	if (!p->progress)
		return;
	now = time(NULL);
	if (now - p->start >= 1 && now != p->last) {
		draw(p);
		p->last = now;
	}
}

/* The line ends on the final count: the last redraw was up to a second
 * and many MiB before the comparing stopped. */
static void report_end(const struct confirmer *p)
{
	if (!p->progress || !p->last)
		return;
	draw(p);
	fputc('\n', stderr);
}

static enum us_status read_block(struct confirmer *p,
				 const struct us_tensor *t, unsigned char *buf,
				 uint64_t len, uint64_t off)
{
	enum us_status rc = us_tensor_read(p->as, p->sd, t, buf, len, off);

	p->bytes += len;
	report(p);
	return rc;
}

/* Every element of @buf (@len bytes) equals the element @first. */
static bool all_equal(const unsigned char *buf, uint64_t len,
		      const unsigned char *first, unsigned isz)
{
	for (uint64_t i = 0; i < len; i += isz)
		if (memcmp(buf + i, first, isz) != 0)
			return false;
	return true;
}

/* *@same: whether @x and @y hold the same bytes. */
static enum us_status same_bytes(struct confirmer *p, const struct us_tensor *x,
				 const struct us_tensor *y, bool *same)
{
	*same = false;
	for (uint64_t off = 0; off < x->nbytes; off += PROOF_BUF) {
		uint64_t n = x->nbytes - off < PROOF_BUF ? x->nbytes - off : PROOF_BUF;

		US_TRY(read_block(p, x, p->a, n, off));
		US_TRY(read_block(p, y, p->b, n, off));
		if (memcmp(p->a, p->b, n) != 0)
			return US_OK;
	}
	*same = true;
	return US_OK;
}

struct cand {
	struct us_tensor *t;
	uint64_t hash;  /* of the first bytes: only equal hashes are compared */
	size_t cls;     /* index of the first candidate with the same bytes */
};

static int cmp_cand(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;
	int c = cmp_u64(a->hash, b->hash);

	return c ? c : cmp_u64(a->t->order, b->t->order);
}

#define PREFIX 4096u

/*
 * FNV-1a of the first bytes; 0 excludes the tensor.  A tensor whose first
 * 4 KiB repeat one element is excluded without reading further: it is a
 * constant (zero-initialised LoRA B, fresh LayerNorm) or starts like one;
 * a constant's equality is initialisation, never a sign of a tie, and
 * confirming it would cost a full read at mount.  Small tensors are
 * checked whole.
 */
static enum us_status prefix_hash(struct confirmer *p,
				  const struct us_tensor *t, uint64_t *h)
{
	uint64_t n = t->nbytes < PREFIX ? t->nbytes : PREFIX, v = 1469598103934665603ull;
	unsigned isz = us_dtype_bits(t->dtype) / 8;

	US_TRY(read_block(p, t, p->b, n, 0));
	if (all_equal(p->b, n, p->b, isz)) {
		*h = 0;
		return US_OK;
	}
	for (uint64_t i = 0; i < n; i++)
		v = (v ^ p->b[i]) * 1099511628211ull;
	*h = v | 1;
	return US_OK;
}

/* Within candidates of one kind and hash: set each one's byte class (the
 * first earlier candidate with the same bytes, else itself). */
static enum us_status classify_bucket(struct confirmer *p, struct cand *c,
				      size_t from, size_t n)
{
	for (size_t i = from; i < from + n; i++) {
		c[i].cls = i;
		for (size_t j = from; j < i; j++) {
			bool same;

			if (c[j].cls != j)
				continue; /* compare with class firsts only */
			US_TRY(same_bytes(p, c[j].t, c[i].t, &same));
			if (same) {
				c[i].cls = j;
				break;
			}
		}
	}
	return US_OK;
}

static bool named(const struct confirmer *p, const struct us_tensor *t)
{
	return p->ev->optim && p->ev->named[t - p->sd->tensors];
}

/* The word-embedding kind of config.json: [vocab] or [vocab, d]. */
static bool vocab_kind(const struct confirmer *p, const struct us_tensor *t)
{
	return p->ev->embed_tied && (t->ndim == 1 || t->ndim == 2) &&
	       t->shape[0] == p->ev->vocab;
}

/*
 * Link the byte-equal class @m[0..n) as far as the evidence goes; @sole:
 * the only class of its kind.  Equal bytes alone link only under
 * --ties=equal.  Otherwise only config.json's tied embeddings link, and
 * only a class that is exactly their pair: the one class of the vocab kind,
 * two names, an output and an input embedding of one model
 * (us_tie_embedding_pair), the output not listed by the optimizer.  Three
 * or more equal copies (a teacher beside its student, an EMA) or a class
 * the optimizer lists twice (two parameters) is a coincidence of bytes, and
 * every name is served: that always loads.  The optimizer never proposes a
 * pair: the names it leaves out are also those of frozen copies (an EMA, a
 * teacher, PEFT's original_module), equal while the original has not moved
 * (step 0, a warm-up at lr 0, a group at lr 0).
 */
static void link_class(struct confirmer *p, struct us_statedict *sd,
		       struct us_tensor **m, size_t n, bool sole)
{
	size_t nnamed = 0;

	assert(n >= 2);
	if (p->mode == US_TIES_EQUAL) {
		for (size_t i = 1; i < n; i++)
			link_pair(sd, m[0], m[i]);
		return;
	}
	for (size_t i = 0; i < n; i++)
		nnamed += named(p, m[i]);
	if (nnamed > 1 || n != 2 || !sole || !vocab_kind(p, m[0]))
		return;
	for (int o = 0; o < 2; o++)
		if (us_tie_embedding_pair(m[o]->name, m[!o]->name) && !named(p, m[o])) {
			link_pair(sd, m[!o], m[o]);
			return;
		}
}

/* The members of the class that starts at @c[@i], into @m; their count. */
static size_t class_members(const struct cand *c, size_t n, size_t i,
			    struct us_tensor **m)
{
	size_t k = 0;

	for (size_t j = i; c[i].cls == i && j < n; j++)
		if (c[j].cls == i)
			m[k++] = c[j].t;
	return k;
}

/* Link the classes of the classified candidates @c[0..n). */
static enum us_status link_classes(struct confirmer *p, struct us_statedict *sd,
				   struct cand *c, size_t n)
{
	struct us_tensor **m = malloc((n ? n : 1) * sizeof(*m));
	size_t nclasses = 0;

	if (!m)
		return US_E_NOMEM;
	for (size_t i = 0; i < n; i++)
		nclasses += class_members(c, n, i, m) >= 2;
	for (size_t i = 0; i < n; i++) {
		size_t k = class_members(c, n, i, m);

		if (k >= 2)
			link_class(p, sd, m, k, nclasses == 1);
	}
	free(m);
	return US_OK;
}

/*
 * Could the evidence propose a pair among @run (one kind)?  Only such runs
 * are read: the vocab kind when config.json ties the embeddings; every kind
 * under --ties=equal.
 */
static bool worth_reading(const struct confirmer *p, struct us_tensor **run)
{
	return p->mode == US_TIES_EQUAL || vocab_kind(p, run[0]);
}

static enum us_status confirm_run(struct confirmer *p, struct us_statedict *sd,
				  struct us_tensor **run, size_t n)
{
	enum us_status rc = US_OK;
	struct cand *c;
	size_t m = 0;

	if (!worth_reading(p, run))
		return US_OK;
	if (!(c = calloc(n, sizeof(*c))))
		return US_E_NOMEM;
	for (size_t i = 0; i < n && rc == US_OK; i++) {
		if (run[i]->tie_of)
			continue; /* already in a declared group */
		c[m].t = run[i];
		rc = prefix_hash(p, run[i], &c[m].hash);
		if (rc == US_OK && c[m].hash)
			m++;
	}
	qsort(c, m, sizeof(*c), cmp_cand);
	for (size_t i = 0, j; rc == US_OK && i < m; i = j) {
		for (j = i + 1; j < m && c[j].hash == c[i].hash; j++)
			;
		rc = classify_bucket(p, c, i, j - i);
	}
	if (rc == US_OK)
		rc = link_classes(p, sd, c, m);
	free(c);
	return rc;
}

static enum us_status link_evidenced(struct us_statedict *sd,
				     struct us_tensor **v, enum us_ties_mode mode,
				     const struct us_tie_evidence *ev,
				     bool progress)
{
	struct confirmer p = { .sd = sd, .ev = ev, .mode = mode,
			    .progress = progress, .start = time(NULL) };
	enum us_status rc = US_OK;
	size_t n = sd->ntensors;

	p.a = malloc(PROOF_BUF);
	p.b = malloc(PROOF_BUF);
	if (!p.a || !p.b || us_assembler_new(NULL, &p.as, NULL) != US_OK)
		rc = US_E_NOMEM;
	qsort(v, n, sizeof(*v), cmp_kind_order);
	for (size_t i = 0, j; rc == US_OK && i < n; i = j) {
		for (j = i + 1; j < n && cmp_kind(v[i], v[j]) == 0; j++)
			;
		if (j - i > 1 && v[i]->nbytes && us_dtype_bits(v[i]->dtype) % 8 == 0)
			rc = confirm_run(&p, sd, v + i, j - i);
	}
	report_end(&p);
	us_assembler_free(p.as);
	free(p.a);
	free(p.b);
	return rc;
}

static void count_links(struct us_statedict *sd)
{
	for (size_t i = 0; i < sd->ntensors; i++)
		sd->tensors[i].nlinks = 1;
	for (size_t i = 0; i < sd->ntensors; i++)
		if (sd->tensors[i].tie_of)
			((struct us_tensor *)sd->tensors[i].tie_of)->nlinks++;
	for (size_t i = 0; i < sd->ntensors; i++)
		if (sd->tensors[i].tie_of)
			sd->tensors[i].nlinks = sd->tensors[i].tie_of->nlinks;
}

/* The evidence of a format that saves every name, linked where the bytes
 * confirm it. */
static enum us_status link_copies(struct us_statedict *sd, struct us_tensor **v,
				  enum us_ties_mode mode, const struct us_dir *dir,
				  bool progress)
{
	struct us_tie_evidence ev;
	enum us_status rc;

	if (us_tie_evidence_gather(sd, dir, &ev) != US_OK)
		return US_E_NOMEM;
	rc = link_evidenced(sd, v, mode, &ev, progress);
	us_tie_evidence_free(&ev);
	return rc;
}

enum us_status us_ties_detect(struct us_statedict *sd, enum us_ties_mode mode,
			      const struct us_dir *dir, bool progress, struct us_err *err)
{
	enum us_status rc = US_OK;
	struct us_tensor **v;

	if (mode == US_TIES_OFF || sd->ntensors < 2)
		return US_OK;
	v = malloc(sd->ntensors * sizeof(*v));
	if (!v)
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	for (size_t i = 0; i < sd->ntensors; i++)
		v[i] = &sd->tensors[i];
	link_declared(sd, v);
	if ((mode == US_TIES_AUTO || mode == US_TIES_EQUAL) && sd->ties_as_copies)
		rc = link_copies(sd, v, mode, dir, progress);
	free(v);
	count_links(sd);
#ifndef NDEBUG
	us_sd_assert_ok(sd); /* tie groups consistent (model.h) */
#endif
	if (rc != US_OK)
		return us_err_set(err, rc == US_E_NOMEM ? US_E_NOMEM : US_E_IO, ".",
				  "cannot read tensors while confirming ties: %s",
				  rc == US_E_NOMEM ? "Cannot allocate memory"
						   : "Input/output error");
	return US_OK;
}
