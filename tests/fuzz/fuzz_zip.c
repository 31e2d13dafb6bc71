/*
 * fuzz_zip.c - libFuzzer target: the input is a zip archive, read by the
 * torch.save zip reader (us_zip_open over a memfd).  Every entry's data
 * offset is resolved (us_zip_data reads its local header) and must lie
 * before the central directory; us_zip_find must find what it lists.
 */
#include "fuzz_util.h"

#include "codec/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct us_arena a;
	struct us_zip z;
	const char *why = NULL;
	int fd = fuzz_memfd(data, size);

	us_arena_init(&a);
	if (us_zip_open(&z, fd, 0, size, &a, &why) == 0) {
		size_t plen = strlen(z.prefix);

		if (z.cd_off > size)
			abort();
		for (size_t i = 0; i < z.n; i++) {
			const struct us_zip_entry *e = &z.v[i];
			uint64_t off;

			if (us_zip_data(&z, e, &off, &why) == 0 &&
			    (off > z.cd_off || e->size > z.cd_off - off))
				abort(); /* data past the central directory */
			/* An entry under the prefix is found by its record. */
			if (!strncmp(e->name, z.prefix, plen) && e->name[plen] == '/' &&
			    !us_zip_find(&z, e->name + plen + 1))
				abort();
		}
		(void)us_zip_find(&z, "data.pkl");
	} else if (!why) {
		abort();
	}
	us_arena_free(&a);
	close(fd);
	return 0;
}
