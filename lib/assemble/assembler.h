/*
 * assembler.h - what a struct us_assembler holds (private to assemble/).
 *
 * Everything a read shares with other reads lives here, owned by the
 * assembler's user, not by the process (assemble.h): the cache and the
 * pool of zstd streams are keyed by file index, so they belong with the
 * one file table the assembler serves.  The per-thread scratch buffers of
 * the executors (exec_cpu.c, cast_read.c) are the exception: they hold no
 * state between calls, so one set per thread serves every assembler.
 * (The CPU executor's gather buffers are the assembler's, bounded: gather.h.)
 */
#ifndef US_ASSEMBLER_H
#define US_ASSEMBLER_H

#include "assemble.h"
#include "cache.h"
#include "gather.h"
#include "zitem.h"

struct us_assembler {
	struct us_cache *cache;       /* decoded items and strided spans */
	struct us_zitem_pool *zitems; /* parked streams, checked items */
	struct us_gather_pool *gathers; /* the CPU executor's span buffers */
	enum us_executor executor;    /* where casts run */
	int device;                   /* US_EXEC_CUDA: the device index */
};

#endif /* US_ASSEMBLER_H */
