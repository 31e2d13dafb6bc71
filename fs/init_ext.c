/*
 * init_ext.c - add FUSE_DIRECT_IO_ALLOW_MMAP to libfuse 3.14's INIT reply
 * (init_ext.h says why).  The hooks are libfuse's custom io: read() and
 * writev() of the device, and splice() for replies (without a splice hook
 * libfuse would stop splicing).  Only the first INIT is looked at; every
 * other message passes through untouched.
 */
#include "init_ext.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Protocol 7.39; Linux 6.6 called it FUSE_DIRECT_IO_RELAX. */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif

static _Atomic uint64_t init_unique; /* of the INIT that offered the flag */
static atomic_bool offered;
static atomic_bool granted;

bool us_init_ext_offered(void)
{
	return atomic_load(&offered);
}

bool us_init_ext_mmap_direct(void)
{
	return atomic_load(&granted);
}

/* Note the kernel's INIT when it offers the flag. */
static void see_request(const void *buf, ssize_t n)
{
	const struct fuse_in_header *h = buf;
	struct fuse_init_in in;
	uint64_t flags;

	if (atomic_load(&offered) || n < (ssize_t)(sizeof(*h) + sizeof(in)) ||
	    h->opcode != FUSE_INIT)
		return;
	memcpy(&in, (const char *)buf + sizeof(*h), sizeof(in));
	flags = in.flags;
	if (flags & FUSE_INIT_EXT)
		flags |= (uint64_t)in.flags2 << 32;
	if (in.major != 7 || !(flags & FUSE_DIRECT_IO_ALLOW_MMAP))
		return;
	atomic_store(&init_unique, h->unique);
	atomic_store(&offered, true);
}

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);

	(void)userdata;
	if (n > 0)
		see_request(buf, n);
	return n;
}

/*
 * The reply to the INIT that offered the flag: header, then fuse_init_out.
 * libfuse set FUSE_INIT_EXT in it when the kernel did (without that the
 * kernel ignores flags2).  The patched copy lives on this stack frame.
 */
static ssize_t hook_writev(int fd, struct iovec *iov, int count,
			   void *userdata)
{
	struct fuse_out_header h;
	struct fuse_init_out out;
	struct iovec patched[2];
	ssize_t n;

	(void)userdata;
	if (!atomic_load(&offered) || atomic_load(&granted) || count != 2 ||
	    iov[0].iov_len != sizeof(h) || iov[1].iov_len != sizeof(out))
		return writev(fd, iov, count);
	memcpy(&h, iov[0].iov_base, sizeof(h));
	memcpy(&out, iov[1].iov_base, sizeof(out));
	if (h.unique != atomic_load(&init_unique) || h.error != 0 ||
	    !(out.flags & FUSE_INIT_EXT))
		return writev(fd, iov, count);
	out.flags2 |= (uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
	patched[0] = iov[0];
	patched[1] = (struct iovec){ .iov_base = &out, .iov_len = sizeof(out) };
	n = writev(fd, patched, 2);
	if (n == (ssize_t)(sizeof(h) + sizeof(out)))
		atomic_store(&granted, true);
	return n;
}

static ssize_t hook_splice(int fdin, off_t *offin, int fdout, off_t *offout,
			   size_t len, unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int us_init_ext_install(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.read = hook_read,
		.writev = hook_writev,
		.splice_send = hook_splice,
	};

	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
