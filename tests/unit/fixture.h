/*
 * fixture.h - the committed checkpoints of tests/fixtures, for reader tests
 * that go through us_source_open.  meson passes the directory in the
 * environment (US_FIXTURES), so the tests run from any build directory.
 */
#ifndef US_FIXTURE_H
#define US_FIXTURE_H

#include <stddef.h>

/* @rel under the fixture directory (a static buffer); exits when
 * US_FIXTURES is unset, since every check would fail for that reason. */
const char *fixture_path(const char *rel);
/* us_source_open of @path with default options: the state dict, or NULL
 * after printing why (the caller CHECKs it: its counters are its own). */
struct us_statedict;
struct us_statedict *fixture_open(const char *path);
/* Copy every regular file of fixture directory @rel into @dst; 0 or -1. */
int fixture_copy_dir(const char *rel, const char *dst);
/* The whole of @path into a malloc'ed buffer (*@len bytes); NULL on error. */
unsigned char *fixture_slurp(const char *path, size_t *len);
/* Replace every @from in @buf with @to (the same length); the count. */
size_t fixture_replace(unsigned char *buf, size_t len, const char *from,
		       const char *to);

#endif /* US_FIXTURE_H */
