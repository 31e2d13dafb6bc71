/* tmpdir.h - scratch directories and files for reader tests. */
#ifndef US_TMPDIR_H
#define US_TMPDIR_H

#include <stddef.h>

/* A fresh empty directory under $TMPDIR (or /tmp); the path is static. */
const char *tmpdir_new(void);
/* Write @len bytes to @dir/@name; returns 0 or -1. */
int tmpdir_write(const char *dir, const char *name, const void *data, size_t len);
/* A safetensors file from a header JSON text and @dlen data bytes (value i&255). */
int tmpdir_write_st(const char *dir, const char *name, const char *json,
		    size_t dlen);
/* Remove @dir and everything in it. */
void tmpdir_rm(const char *dir);

#endif /* US_TMPDIR_H */
