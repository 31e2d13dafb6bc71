/*
 * fuzz_dcp_zstd.c - libFuzzer target: the head walker of a zstd DCP item
 * (us_dcp_zstd_item, lib/source/dcp_zstd.c) over lib/codec/zstream.c.
 *
 * The first input byte picks the mode:
 *   even: the rest is the item as stored, a zstd frame (hostile frames,
 *         truncation, trailing bytes);
 *   odd:  the rest is the decoded torch.save archive, which the target
 *         compresses into one frame first -- so the fuzzer works on the zip
 *         local headers, data.pkl and data descriptors the walker parses,
 *         not on zstd's entropy coding.
 * A walk that succeeds must describe a storage record inside what it says
 * reads need.
 */
#include "fuzz_util.h"

#include <zstd.h>

#include "source/dcp_zstd.h"

static void walk(const void *item, size_t len)
{
	struct us_dcp_zitem zi;
	struct us_arena a;
	const char *why = NULL;
	int fd = fuzz_memfd(item, len);

	us_arena_init(&a);
	if (us_dcp_zstd_item(fd, 0, len, &a, &zi, &why) == 0) {
		if (zi.data + zi.bytes + US_DCP_ZSTD_DESC != zi.served ||
		    zi.first < zi.data)
			abort();
	} else if (!why) {
		abort();
	}
	us_arena_free(&a);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1) {
		/* One compression context for the whole run: ZSTD_compress()
		 * would allocate and clear a fresh one per input, which cost
		 * more than the walk itself. */
		static ZSTD_CCtx *cctx;
		size_t cap = ZSTD_compressBound(size - 1), n;
		void *frame = malloc(cap ? cap : 1);

		if (!cctx)
			cctx = ZSTD_createCCtx();
		if (!frame || !cctx)
			abort();
		n = ZSTD_compressCCtx(cctx, frame, cap, data + 1, size - 1, 1);
		if (ZSTD_isError(n))
			abort();
		walk(frame, n);
		free(frame);
	} else {
		walk(data + 1, size - 1);
	}
	return 0;
}
