/* loader_impl.h - what a struct us_loader holds (private to loader/). */
#ifndef US_LOADER_IMPL_H
#define US_LOADER_IMPL_H

#include "assemble/assemble.h"
#include "source/canon.h"
#include "unshardfs.h"

/* Readers per call at most: the one cap (loader.c applies it). */
#define US_LOADER_MAX_THREADS 16

struct us_loader {
	struct us_statedict *sd;
	struct us_assembler *as; /* one for every thread: it is thread-safe */
	unsigned threads;
	bool mounted;
	bool hugepages;          /* us_loader_opts.hugepages */
	char *source;            /* absolute */
	char options[4096];      /* canonical (canon.h) */
};

/* us_ld_tensor - tensor @i of @ld, or NULL with @err filled (US_E_USAGE)
 * when there is no such tensor: every entry point that takes an index. */
const struct us_tensor *us_ld_tensor(const struct us_loader *ld, size_t i,
				     struct us_err *err);

#endif /* US_LOADER_IMPL_H */
