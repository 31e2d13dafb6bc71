/*
 * fishim.c - fault injection for unshardfs: an LD_PRELOAD shim that makes
 * the Nth call of one class fail, the way SQLite's OOM and I/O-error tests
 * do, so that every failure path is run and must end in one clean refusal.
 *
 *   US_FI_CLASS=alloc  malloc, calloc, realloc return NULL with ENOMEM
 *   US_FI_CLASS=io     read, pread, pread64, preadv, preadv64 return -1
 *                      with EIO
 *   US_FI_FAIL=N       fail the Nth call of that class (1-based), only that
 *                      one; 0 or unset: fail none (a counting run)
 *   US_FI_STICKY=1     fail call N and every later one of the class (a disk
 *                      that stays broken: one failed read of the mount is
 *                      retried by the kernel, which hides the EIO path)
 *   US_FI_CALLERS=app  count and fail only calls made from the executable,
 *                      libcjson and libzstd (the code whose failures reach
 *                      unshardfs); unset or "all": every caller
 *   US_FI_TRACE=1      print a backtrace on stderr when the call fails (to
 *                      find the code behind one run; breaks the one-line
 *                      rule, so not for the driver)
 *   US_FI_REPORT=PATH  at exit, write "<calls> <fired>" there: how many
 *                      calls of the class were made, and whether call N was
 *                      reached (so the driver knows the whole range)
 *
 * Why an LD_PRELOAD shim, and how it works with the ASan build:
 *  - ASan replaces malloc itself (its interceptors live in libasan.so, which
 *    gcc links dynamically and puts first in the binary's DT_NEEDED list).
 *    A shim preloaded *after* libasan is never called: the executable's
 *    malloc binds to the first definition in the lookup order, libasan's.
 *    So the shim is preloaded *before* it, LD_PRELOAD=fishim.so, and each
 *    wrapper calls the next definition, dlsym(RTLD_NEXT, ...), which is
 *    ASan's: every allocation is still ASan's, so leaks and overflows are
 *    still caught.  ASan then notices it is not first in the library list
 *    and refuses to start; ASAN_OPTIONS=verify_asan_link_order=0 allows it
 *    (safe here: the shim allocates nothing of its own and is not
 *    instrumented, which is what that check guards against).
 *  - ASan's allocator_may_return_null=1 alone cannot do this: it makes
 *    *impossible* requests return NULL, but has no way to fail a chosen
 *    ordinary call.  -Wl,--wrap=malloc would need a separate build and
 *    would miss calls from libcjson and libzstd, which the shim sees.
 *  - dlsym may itself call calloc before the real one is known: those
 *    calls are served from a small static buffer (and never freed).
 *  - Counting starts when main() is entered and stops at exit: the shim
 *    wraps __libc_start_main to run main through fi_main.  Before main, the
 *    static CUDA runtime linked into a CUDA build registers its kernels
 *    (__cudaRegisterAll) and crashes on a NULL malloc: NVIDIA's code, which
 *    no change here could fix, and which runs before any of ours.
 *  - Not counted either: allocations made by ld.so itself (glibc dlopens
 *    libgcc_s when the FUSE loop cancels its worker threads, and aborts,
 *    "libgcc_s.so.1 must be installed for pthread_cancel to work", when
 *    that fails -- by design, outside any code of ours), and reads of
 *    character devices: an EIO reading /dev/fuse is the kernel ending the
 *    session, not a source file failing (the daemon then exits 2).
 *  - US_FI_CALLERS=app is for the mounted daemon: there libfuse (which
 *    prints its own messages and ends the session on a failed allocation,
 *    or ignores it in fuse_opt_add_arg and then refuses its own options),
 *    glibc's pthread_create and ASan's thread start (a CHECK failure in
 *    pthread_getattr_np) do not survive a failed call, and no change in
 *    unshardfs could make them.  The caller is __builtin_return_address(0)
 *    of the wrapper, matched against those objects' PT_LOAD ranges.
 *  - Only calls through the PLT are seen: glibc's internal reads (stdio
 *    fread, for instance) and ASan's interceptors that allocate directly
 *    (strdup) are not counted.  Counting is atomic: the daemon is threaded.
 */
/* The build adds -D_FILE_OFFSET_BITS=64, under which unistd.h renames
 * pread to pread64: both are defined here, each under its own name. */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum fi_class { FI_NONE, FI_ALLOC, FI_IO };

static enum fi_class fi_class;
static unsigned long fi_fail;
static atomic_ulong fi_calls;
static atomic_bool fi_fired;
static bool fi_ready;
static bool fi_sticky;

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pread64)(int, void *, size_t, off64_t);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_preadv64)(int, const struct iovec *, int, off64_t);

/* dlsym's own early calloc: served from here until real_calloc is known. */
static _Alignas(16) unsigned char boot_buf[4096];
static size_t boot_used;

static bool in_boot(const void *p)
{
	return (const unsigned char *)p >= boot_buf &&
	       (const unsigned char *)p < boot_buf + sizeof(boot_buf);
}

static void *boot_alloc(size_t n)
{
	void *p;

	n = (n + 15) & ~(size_t)15;
	if (n > sizeof(boot_buf) - boot_used)
		return NULL;
	p = boot_buf + boot_used;
	boot_used += n;
	return p; /* static storage: already zero */
}

static void resolve(void)
{
	static atomic_bool resolving;

	if (real_malloc || atomic_exchange(&resolving, true))
		return;
	/* POSIX's idiom: dlsym returns an object pointer. */
	*(void **)&real_calloc = dlsym(RTLD_NEXT, "calloc");
	*(void **)&real_malloc = dlsym(RTLD_NEXT, "malloc");
	*(void **)&real_realloc = dlsym(RTLD_NEXT, "realloc");
	*(void **)&real_free = dlsym(RTLD_NEXT, "free");
	*(void **)&real_read = dlsym(RTLD_NEXT, "read");
	*(void **)&real_pread = dlsym(RTLD_NEXT, "pread");
	*(void **)&real_pread64 = dlsym(RTLD_NEXT, "pread64");
	*(void **)&real_preadv = dlsym(RTLD_NEXT, "preadv");
	*(void **)&real_preadv64 = dlsym(RTLD_NEXT, "preadv64");
}

/* Where ld.so is mapped: its allocations are not counted. */
static uintptr_t rtld_lo, rtld_hi;

static int find_rtld(struct dl_phdr_info *info, size_t size, void *data)
{
	if (!info->dlpi_name || !strstr(info->dlpi_name, "/ld-linux"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type != PT_LOAD)
			continue;
		if (!rtld_lo || lo < rtld_lo)
			rtld_lo = lo;
		if (lo + ph->p_memsz > rtld_hi)
			rtld_hi = lo + ph->p_memsz;
	}
	return 1;
}

/* US_FI_CALLERS=app: the objects whose calls may fail. */
struct range {
	uintptr_t lo, hi;
};
static struct range app[8];
static int napp;
static bool app_only;

static int find_app(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	struct range r = { UINTPTR_MAX, 0 };

	/* "" is the executable (the first object listed) */
	if (napp == (int)(sizeof(app) / sizeof(app[0])) ||
	    (*name && !strstr(name, "/libcjson") && !strstr(name, "/libzstd")))
		return 0;
	if (!*name && (*(int *)data)++)
		return 0; /* only the first nameless object: the vDSO is another */
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type != PT_LOAD)
			continue;
		r.lo = lo < r.lo ? lo : r.lo;
		r.hi = lo + ph->p_memsz > r.hi ? lo + ph->p_memsz : r.hi;
	}
	if (r.hi)
		app[napp++] = r;
	return 0;
}

/* May a call from @caller be counted and failed? */
static bool eligible(const void *caller)
{
	if (!app_only)
		return true;
	for (int i = 0; i < napp; i++)
		if ((uintptr_t)caller >= app[i].lo && (uintptr_t)caller < app[i].hi)
			return true;
	return false;
}

static bool from_rtld(const void *caller)
{
	return (uintptr_t)caller >= rtld_lo && (uintptr_t)caller < rtld_hi;
}

static bool fail_now(enum fi_class c);

static bool alloc_may_fail(const void *caller)
{
	return !from_rtld(caller) && eligible(caller) && fail_now(FI_ALLOC);
}

static bool is_chardev(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
}

/* Should this call of class @c fail?  Counts it. */
static bool fail_now(enum fi_class c)
{
	unsigned long n;

	if (!fi_ready || c != fi_class)
		return false;
	n = atomic_fetch_add(&fi_calls, 1) + 1;
	if (fi_fail == 0 || n < fi_fail || (n > fi_fail && !fi_sticky))
		return false;
	if (!atomic_exchange(&fi_fired, true) && getenv("US_FI_TRACE")) {
		void *frames[32];

		backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
	}
	return true;
}

static int (*real_main)(int, char **, char **);

/* At exit (atexit handlers registered before main, the CUDA runtime's,
 * run after this one): nothing is counted or failed any more. */
static void fi_stop(void)
{
	fi_ready = false;
}

static int fi_main(int argc, char **argv, char **envp)
{
	atexit(fi_stop);
	fi_ready = true;
	return real_main(argc, argv, envp);
}

/* glibc calls main through this; the shim swaps in fi_main. */
int __libc_start_main(int (*main)(int, char **, char **), int argc,
		      char **argv, void (*init)(void), void (*fini)(void),
		      void (*rtld_fini)(void), void *stack_end);
int __libc_start_main(int (*main)(int, char **, char **), int argc,
		      char **argv, void (*init)(void), void (*fini)(void),
		      void (*rtld_fini)(void), void *stack_end)
{
	int (*next)(int (*)(int, char **, char **), int, char **,
		    void (*)(void), void (*)(void), void (*)(void), void *);

	*(void **)&next = dlsym(RTLD_NEXT, "__libc_start_main");
	real_main = main;
	return next(fi_main, argc, argv, init, fini, rtld_fini, stack_end);
}

__attribute__((constructor)) static void fi_init(void)
{
	const char *c = getenv("US_FI_CLASS"), *n = getenv("US_FI_FAIL");

	resolve();
	if (c && strcmp(c, "alloc") == 0)
		fi_class = FI_ALLOC;
	else if (c && strcmp(c, "io") == 0)
		fi_class = FI_IO;
	fi_fail = n ? strtoul(n, NULL, 10) : 0;
	fi_sticky = getenv("US_FI_STICKY") != NULL;
	dl_iterate_phdr(find_rtld, NULL);
	c = getenv("US_FI_CALLERS");
	app_only = c && strcmp(c, "app") == 0;
	if (app_only) {
		int nameless = 0;

		dl_iterate_phdr(find_app, &nameless);
	}
}

/* The report is written with open/write: no allocation, no stdio. */
__attribute__((destructor)) static void fi_report(void)
{
	const char *path = getenv("US_FI_REPORT");
	char line[64];
	int fd, len;

	fi_ready = false;
	if (!path)
		return;
	len = snprintf(line, sizeof(line), "%lu %d\n", atomic_load(&fi_calls),
		       (int)atomic_load(&fi_fired));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)len) < 0)
		(void)0; /* nothing to do: the driver sees a missing report */
	close(fd);
}

void *malloc(size_t n)
{
	if (!real_malloc) {
		resolve();
		if (!real_malloc)
			return boot_alloc(n);
	}
	if (alloc_may_fail(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	if (!real_calloc) {
		resolve();
		if (!real_calloc)
			return n && size > sizeof(boot_buf) / n ? NULL
								  : boot_alloc(n * size);
	}
	if (alloc_may_fail(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	if (!real_realloc)
		resolve();
	if (in_boot(p)) { /* never happens in practice: moved, not freed */
		void *q = malloc(n);

		if (q)
			memcpy(q, p, n < sizeof(boot_buf) ? n : sizeof(boot_buf));
		return q;
	}
	if (alloc_may_fail(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_realloc(p, n);
}

void free(void *p)
{
	if (in_boot(p))
		return;
	if (!real_free)
		resolve();
	real_free(p);
}

ssize_t read(int fd, void *buf, size_t n)
{
	if (!real_read)
		resolve();
	if (fi_class == FI_IO && eligible(__builtin_return_address(0)) &&
	    !is_chardev(fd) && fail_now(FI_IO)) {
		errno = EIO;
		return -1;
	}
	return real_read(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	if (!real_pread)
		resolve();
	if (fi_class == FI_IO && eligible(__builtin_return_address(0)) &&
	    !is_chardev(fd) && fail_now(FI_IO)) {
		errno = EIO;
		return -1;
	}
	return real_pread(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	if (!real_pread64)
		resolve();
	if (fi_class == FI_IO && eligible(__builtin_return_address(0)) &&
	    !is_chardev(fd) && fail_now(FI_IO)) {
		errno = EIO;
		return -1;
	}
	return real_pread64(fd, buf, n, off);
}

/* The CPU executor's gathers (exec_cpu.c) read with preadv. */
ssize_t preadv(int fd, const struct iovec *iov, int n, off_t off)
{
	if (!real_preadv)
		resolve();
	if (fi_class == FI_IO && eligible(__builtin_return_address(0)) &&
	    !is_chardev(fd) && fail_now(FI_IO)) {
		errno = EIO;
		return -1;
	}
	return real_preadv(fd, iov, n, off);
}

ssize_t preadv64(int fd, const struct iovec *iov, int n, off64_t off)
{
	if (!real_preadv64)
		resolve();
	if (fi_class == FI_IO && eligible(__builtin_return_address(0)) &&
	    !is_chardev(fd) && fail_now(FI_IO)) {
		errno = EIO;
		return -1;
	}
	return real_preadv64(fd, iov, n, off);
}
