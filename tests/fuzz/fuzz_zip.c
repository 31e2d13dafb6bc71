/*
 * fuzz_zip.c - libFuzzer target: the input is a zip archive, read by the
 * torch.save zip reader (us_zip_open over a memfd).  Every entry's data
 * offset is resolved (us_zip_data reads its local header) and must lie
 * before the central directory; the records that resolve must not overlap
 * (from local header to data end: no aliased or overlapping records);
 * us_zip_find must find what it lists.
 */
#include "fuzz_util.h"

#include "codec/zip.h"

struct span {
	uint64_t begin, end;
};

static int cmp_span(const void *a, const void *b)
{
	uint64_t x = ((const struct span *)a)->begin;
	uint64_t y = ((const struct span *)b)->begin;

	return x < y ? -1 : x > y;
}

/* [local header, data end) of the @n resolved records: disjoint. */
static void check_disjoint(struct span *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_span);
	for (size_t i = 1; i < n; i++)
		if (v[i].begin < v[i - 1].end)
			abort(); /* two records share bytes */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_arena a;
	struct us_zip z;
	struct us_err err = { .msg = "" };
	int fd = fuzz_memfd(data, size);
	struct us_file f = { .fd = fd }; /* the zip reads through it */
	enum us_status st;

	us_arena_init(&a);
	st = us_zip_open(&z, &f, 0, size, &a, &err);
	if (st == US_OK) {
		size_t plen = strlen(z.prefix), ns = 0;
		struct span *spans = calloc(z.n + 1, sizeof(*spans));

		if (z.cd_off > size || !spans)
			abort();
		for (size_t i = 0; i < z.n; i++) {
			const struct us_zip_entry *e = &z.v[i];
			uint64_t off;
			enum us_status dst = us_zip_data(&z, e, &off, &err);

			if (dst != US_OK && !fuzz_refusal_ok(dst, &err))
				abort();
			if (dst == US_OK) {
				if (off > z.cd_off || e->size > z.cd_off - off)
					abort(); /* data past the central directory */
				spans[ns].begin = e->local_off;
				spans[ns++].end = off + e->size;
			}
			/* An entry under the prefix is found by its record. */
			if (!strncmp(e->name, z.prefix, plen) && e->name[plen] == '/' &&
			    !us_zip_find(&z, e->name + plen + 1))
				abort();
		}
		check_disjoint(spans, ns);
		free(spans);
		(void)us_zip_find(&z, "data.pkl");
	} else if (!fuzz_refusal_ok(st, &err)) {
		abort();
	}
	us_arena_free(&a);
	close(fd);
	return 0;
}
