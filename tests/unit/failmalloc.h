/*
 * failmalloc.h - allocation failures on demand, for the tests that check a
 * codec reports the machine out of memory as US_E_NOMEM (never as a
 * malformed file).  A test linked with
 *     -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc
 * (tests/unit/meson.build) sends libunshard's allocations through here:
 * after us_fail_after(n), n more succeed and every later one fails, until
 * us_fail_off().  libc's own allocations are not wrapped.
 */
#ifndef US_FAILMALLOC_H
#define US_FAILMALLOC_H

#include <stdbool.h>

void us_fail_after(long n);
void us_fail_off(void);
/* Did an allocation fail since the last us_fail_after()? */
bool us_fail_hit(void);

#endif /* US_FAILMALLOC_H */
