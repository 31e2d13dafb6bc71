/*
 * ops.c - one small handler per FUSE operation (passthrough_ll.c style):
 * every path ends in exactly one fuse_reply_*.  The filesystem is read-only:
 * every mutating operation answers EROFS.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "init_ext.h"
#include "io.h"
#include "msg.h"
#include "status_errno.h"
#include "view/readahead.h"

static struct us_tree *tree_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void us_init(void *userdata, struct fuse_conn_info *conn)
{
	const struct us_tree *t = userdata;

	if (t->direct_io && !us_init_ext_offered())
		us_msg(LOG_WARNING, "--direct-io: this kernel cannot map direct-io "
		       "files shared (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6+): "
		       "reads go through the page cache");
	/* Loaders read large tensors; let the kernel batch and overlap. */
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* Replies of source-file bytes are spliced from the page cache
	 * (reply_mapped): one copy fewer than read-then-write. */
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	conn->max_background = 64;
	conn->max_read = us_max_read(); /* the same as -o max_read (main.c) */
	conn->congestion_threshold = 48;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = '\0';
}

/* The device of the mount on @abs_mnt, the last (topmost) one listed. */
static int mount_dev(const char *abs_mnt, unsigned *maj, unsigned *min)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	int found = -1;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		char dir[4096];
		unsigned a, b;

		/* id parent major:minor root mountpoint ... */
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, dir) != 3)
			continue;
		unescape_octal(dir);
		if (strcmp(dir, abs_mnt) == 0) {
			*maj = a;
			*min = b;
			found = 0;
		}
	}
	free(line);
	fclose(f);
	return found;
}

/*
 * Read-ahead: the kernel sets the bdi's read_ahead_kb from the FUSE_INIT
 * reply (the minimum of its 128 KiB default and ours), so it can only be
 * raised after INIT.  A file's window is taken from the bdi right after its
 * FUSE_OPEN is answered, so the first open raises it, before replying:
 * deterministic for every file opened.  The device is found at mount.
 */
static char ra_path[64];
static unsigned ra_kb;
static pthread_once_t ra_once = PTHREAD_ONCE_INIT;

void us_raise_read_ahead(const char *abs_mnt, unsigned kb)
{
	unsigned maj, min;

	if (mount_dev(abs_mnt, &maj, &min) < 0)
		return;
	snprintf(ra_path, sizeof(ra_path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 maj, min);
	ra_kb = kb;
}

static void ra_apply(void)
{
	unsigned cur = 0;
	FILE *f;

	if (!ra_path[0])
		return;
	f = fopen(ra_path, "r+");
	if (!f)
		return; /* not root: docs/benchmarks.md gives the command */
	if (fscanf(f, "%u", &cur) == 1 && cur < ra_kb) {
		rewind(f);
		fprintf(f, "%u\n", ra_kb);
	}
	fclose(f);
}

static void fill_entry(struct us_tree *t, fuse_ino_t ino,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	us_tree_stat(t, ino, &e->attr);
	e->attr_timeout = US_TIMEOUT;
	e->entry_timeout = US_TIMEOUT;
}

static void us_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct us_tree *t = tree_of(req);
	struct us_node *d = us_tree_get(t, parent);
	struct fuse_entry_param e;
	fuse_ino_t ino;

	if (!d || d->kind != US_NODE_DIR) {
		fuse_reply_err(req, d ? ENOTDIR : ENOENT);
		return;
	}
	if (strlen(name) > NAME_MAX) { /* statfs says namemax is 255 */
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	/* Any name of a node counts toward the one count of that node: the
	 * kernel forgets inodes, not names. */
	ino = us_tree_lookup(d, name);
	if (!ino) {
		/* A negative entry the kernel may cache: the tree never changes. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = US_TIMEOUT;
		fuse_reply_entry(req, &e);
		return;
	}
	fill_entry(t, ino, &e);
	atomic_fetch_add(&t->nodes[ino - 1].nlookup, 1);
	fuse_reply_entry(req, &e);
}

static void forget_one(struct us_tree *t, fuse_ino_t ino, uint64_t nlookup)
{
	struct us_node *n = us_tree_get(t, ino);

	if (n)
		atomic_fetch_sub(&n->nlookup, nlookup);
}

static void us_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(tree_of(req), ino, nlookup);
	fuse_reply_none(req);
}

static void us_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(tree_of(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void us_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct us_tree *t = tree_of(req);
	struct stat st;

	(void)fi;
	if (!us_tree_get(t, ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	us_tree_stat(t, ino, &st);
	fuse_reply_attr(req, &st, US_TIMEOUT);
}

/* Open a passthrough file and make sure it is still the file seen at mount. */
static int open_passthrough(struct us_tree *t, const struct us_node *n)
{
	const struct stat *was = n->like;
	struct stat st;
	int fd = openat(t->srcfd, n->u.relpath, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !us_same_file(was, &st)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

static void us_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct us_tree *t = tree_of(req);
	struct us_node *n = us_tree_get(t, ino);
	int fd;

	if (!n) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	if (n->kind == US_NODE_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	pthread_once(&ra_once, ra_apply);
	fi->fh = 0;
	if (n->kind == US_NODE_PASSTHROUGH) {
		fd = open_passthrough(t, n);
		if (fd < 0) {
			fuse_reply_err(req, -fd);
			return;
		}
		fi->fh = (uint64_t)fd;
	}
	/* The bytes never change: keep the page cache across opens. */
	fi->keep_cache = 1;
	/* --direct-io: read() replies go straight into the reader's pages, no
	 * FUSE page cache (one page allocation and one copy fewer per byte);
	 * only once the kernel accepted that such files may still be mapped
	 * shared (init_ext.h), or safetensors' mmap would fail. */
	if (t->direct_io && n->kind != US_NODE_PASSTHROUGH &&
	    us_init_ext_mmap_direct())
		fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

/*
 * One reply buffer per thread, grown to the largest request seen, and freed
 * by a key destructor when the loop retires the thread (idle threads come
 * and go).  This is the "fixed per-thread buffer" of the memory bound.
 */
struct thread_buf {
	char *p;
	size_t cap;
};

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;

static void tbuf_free(void *v)
{
	struct thread_buf *b = v;

	free(b->p);
	free(b);
}

static void tbuf_key_init(void)
{
	if (pthread_key_create(&tbuf_key, tbuf_free) != 0)
		abort(); /* only EAGAIN/ENOMEM at start-up: nothing to serve */
}

static char *thread_buf(size_t size)
{
	struct thread_buf *b;

	pthread_once(&tbuf_once, tbuf_key_init);
	b = pthread_getspecific(tbuf_key);
	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b || pthread_setspecific(tbuf_key, b) != 0) {
			free(b);
			return NULL;
		}
	}
	if (size > b->cap) {
		char *p = realloc(b->p, size);

		if (!p)
			return NULL;
		b->p = p;
		b->cap = size;
	}
	return b->p ? b->p : (b->p = malloc(1));
}

/*
 * Zero-copy replies: a read whose bytes are all plain runs of source files
 * (plus header bytes in memory) is described as segments (us_view_map) and
 * handed to libfuse as fd buffers, which it splices into the reply.  0 when
 * replied; -EAGAIN when the read must go through a buffer.
 */
#define REPLY_SEGS 64

static int reply_segs(fuse_req_t req, const struct us_seg *seg, size_t n)
{
	/* struct fuse_bufvec ends with buf[1]: allocated with room for n
	 * (indexing past a [1] array inside a local struct is undefined, and
	 * gcc does drop the later elements). */
	struct fuse_bufvec *bv;

	if (n == 0 || n > REPLY_SEGS)
		return -EAGAIN;
	bv = calloc(1, sizeof(*bv) + (n - 1) * sizeof(struct fuse_buf));
	if (!bv)
		return -EAGAIN;
	bv->count = n;
	for (size_t i = 0; i < n; i++) {
		struct fuse_buf *b = &bv->buf[i];

		b->size = seg[i].len;
		if (seg[i].fd >= 0) {
			b->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK |
				   FUSE_BUF_FD_RETRY;
			b->fd = seg[i].fd;
			b->pos = (off_t)seg[i].off;
		} else {
			b->mem = (void *)(uintptr_t)seg[i].mem;
		}
	}
	fuse_reply_data(req, bv, 0);
	free(bv);
	return 0;
}

/*
 * libfuse splices a reply through a pipe it sizes as one page per segment
 * plus two, plus the reply (fuse_send_data_iov); it cannot grow a pipe past
 * /proc/sys/fs/pipe-max-size (1 MiB by default) and then falls back to a
 * freshly allocated bounce buffer per reply -- a copy, and under glibc's
 * growing mmap threshold, memory that piles up in the threads' arenas.  So
 * a reply is only handed to libfuse when it fits that pipe (fits_pipe), and
 * requests are sized (us_max_read) so that one of up to SPLICE_SEGS
 * segments does; anything else takes our own buffer.
 */
#define SPLICE_SEGS 5

static size_t pipe_max = 1u << 20;
static pthread_once_t pipe_max_once = PTHREAD_ONCE_INIT;

static void pipe_max_read(void)
{
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
	unsigned long v;

	if (f && fscanf(f, "%lu", &v) == 1)
		pipe_max = v;
	if (f)
		fclose(f);
}

/* The pipe libfuse needs for @size bytes in @nsegs segments, and a page of
 * slack for the reply header. */
static size_t pipe_need(size_t size, size_t nsegs)
{
	return size + (nsegs + 3) * 4096;
}

static bool fits_pipe(size_t size, size_t nsegs)
{
	pthread_once(&pipe_max_once, pipe_max_read);
	return pipe_need(size, nsegs) <= pipe_max;
}

unsigned us_max_read(void)
{
	size_t slack = pipe_need(0, SPLICE_SEGS), b = 128u << 10;

	pthread_once(&pipe_max_once, pipe_max_read);
	if (pipe_max > slack + b)
		b = pipe_max - slack;
	b -= b % 4096; /* whole pages */
	return b > (1u << 20) ? 1u << 20 : (unsigned)b;
}

unsigned us_read_ahead_kb(void)
{
	return US_READ_AHEAD_REQS * (us_max_read() / 1024);
}

static int reply_mapped(fuse_req_t req, const struct us_node *n, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	static __thread struct us_seg segv[REPLY_SEGS];
	struct us_segs segs = { .v = segv, .cap = REPLY_SEGS };
	enum us_status rc;
	size_t got;

	if (!fits_pipe(size, 1))
		return -EAGAIN;
	if (n->kind == US_NODE_PASSTHROUGH) {
		segv[0] = (struct us_seg){ .fd = (int)fi->fh, .off = (uint64_t)off,
					   .len = size };
		return reply_segs(req, segv, 1);
	}
	if (n->kind != US_NODE_VIEW && n->kind != US_NODE_TENSOR)
		return -EAGAIN;
	rc = us_view_map(n->u.view, &segs, size, (uint64_t)off, &got);
	if (rc != US_OK) {
		fuse_reply_err(req, us_status_errno(rc));
		return 0;
	}
	if (segs.overflow)
		return -EAGAIN;
	if (!fits_pipe(size, segs.n))
		return -EAGAIN;
	return reply_segs(req, segv, segs.n);
}

/* A read that cannot be spliced: assembled (or read) into the thread's
 * buffer, then replied. */
static void reply_buffered(fuse_req_t req, const struct us_node *n,
			   size_t size, off_t off, struct fuse_file_info *fi)
{
	char *buf = thread_buf(size);
	long long got;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (n->kind == US_NODE_VIEW || n->kind == US_NODE_TENSOR) {
		size_t nread;
		enum us_status st = us_view_read(tree_of(req)->as, n->u.view,
						 buf, size, (uint64_t)off, &nread);

		got = st == US_OK ? (long long)nread : -us_status_errno(st);
	} else {
		int rc = us_pread_full((int)fi->fh, buf, size, (uint64_t)off);
		got = rc < 0 ? rc : (long long)size;
	}
	if (got < 0)
		fuse_reply_err(req, (int)-got);
	else
		fuse_reply_buf(req, buf, (size_t)got);
}

static void us_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct us_tree *t = tree_of(req); /* @req is gone once replied */
	struct us_node *n = us_tree_get(t, ino);
	uint64_t fsize = n ? n->size : 0;

	if (!n || n->kind == US_NODE_DIR || off < 0) {
		fuse_reply_err(req, n ? EISDIR : ENOENT);
		return;
	}
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > fsize - (uint64_t)off)
		size = (size_t)(fsize - (uint64_t)off);
	if (reply_mapped(req, n, size, off, fi) != 0)
		reply_buffered(req, n, size, off, fi);
	/* After the reply: the reader goes on while this thread reads ahead. */
	if (n->kind == US_NODE_VIEW || n->kind == US_NODE_TENSOR)
		us_readahead_after(t->ra, n->u.view, (uint64_t)off, size);
}

static void us_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);

	if (n && n->kind == US_NODE_PASSTHROUGH && fi->fh)
		close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void us_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);

	if (!n)
		fuse_reply_err(req, ENOENT);
	else if (n->kind != US_NODE_DIR)
		fuse_reply_err(req, ENOTDIR);
	else {
		fi->cache_readdir = 1;
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
	}
}

/*
 * Directory offsets: 0 is the start, entry i (0 ".", 1 "..", then children)
 * is followed by offset i + 1.  readdirplus counts a lookup for every entry
 * it returns except "." and "..", as the kernel expects.
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       bool plus)
{
	struct us_tree *t = tree_of(req);
	struct us_node *d = us_tree_get(t, ino);
	char *buf = thread_buf(size);
	size_t pos = 0;

	if (!d || d->kind != US_NODE_DIR || !buf) {
		fuse_reply_err(req, !d ? ENOENT : !buf ? ENOMEM : ENOTDIR);
		return;
	}
	for (size_t i = (size_t)off; i < d->u.dir.nents + 2; i++) {
		fuse_ino_t cino = i == 0 ? ino : i == 1 ? d->parent
				  : d->u.dir.ents[i - 2].ino;
		const char *name = i == 0 ? "." : i == 1 ? ".."
				   : d->u.dir.ents[i - 2].name;
		struct fuse_entry_param e;
		size_t need;

		/* d_ino is st_ino: hard links show one inode in ls -i too. */
		fill_entry(t, cino, &e);
		if (plus)
			need = fuse_add_direntry_plus(req, buf + pos, size - pos,
						      name, &e, (off_t)i + 1);
		else
			need = fuse_add_direntry(req, buf + pos, size - pos,
						 name, &e.attr, (off_t)i + 1);
		if (need > size - pos)
			break;
		if (plus && i >= 2)
			atomic_fetch_add(&t->nodes[cino - 1].nlookup, 1);
		pos += need;
	}
	fuse_reply_buf(req, buf, pos);
}

static void us_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, false);
}

static void us_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, true);
}

static void us_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void us_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct us_tree *t = tree_of(req);
	struct statvfs s;

	(void)ino;
	memset(&s, 0, sizeof(s));
	s.f_bsize = 4096;
	s.f_frsize = 4096;
	/* Inodes, not names: a tied tensor is counted once (tree.c). */
	s.f_blocks = (t->total_bytes + 4095) / 4096;
	s.f_files = t->total_inodes;
	s.f_namemax = 255;
	s.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &s);
}

/* ---- extended attributes: tensors/ files describe themselves ------------ */

/* The xattr size protocol: @size 0 asks how much room the value needs; a
 * buffer too small for it is ERANGE. */
static void reply_xattr_value(fuse_req_t req, const char *val, size_t len,
			      size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, len);
}

static void us_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);
	struct us_sbuf b;
	enum us_status rc;

	if (!n || n->kind != US_NODE_TENSOR) {
		fuse_reply_err(req, n ? ENODATA : ENOENT);
		return;
	}
	/* Built on request (view/raw.c): nothing is kept per tensor. */
	us_sbuf_init(&b);
	rc = us_view_raw_xattr(n->u.view, name, &b);
	if (rc != US_OK)
		fuse_reply_err(req, rc == US_E_USAGE ? ENODATA : us_status_errno(rc));
	else
		reply_xattr_value(req, b.p, b.len, size);
	us_sbuf_free(&b);
}

static void us_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);

	if (!n)
		fuse_reply_err(req, ENOENT);
	else if (n->kind == US_NODE_TENSOR)
		reply_xattr_value(req, us_raw_xattr_list,
				  us_raw_xattr_list_len, size);
	else
		reply_xattr_value(req, NULL, 0, size);
}

/* ---- everything that would change the tree: EROFS ---------------------- */

static void us_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	(void)ino; (void)attr; (void)to_set; (void)fi;
	fuse_reply_err(req, EROFS);
}

static void us_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	(void)parent; (void)name; (void)mode; (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void us_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	(void)parent; (void)name; (void)mode;
	fuse_reply_err(req, EROFS);
}

static void us_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent; (void)name;
	fuse_reply_err(req, EROFS);
}

static void us_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	(void)link; (void)parent; (void)name;
	fuse_reply_err(req, EROFS);
}

static void us_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	(void)parent; (void)name; (void)newparent; (void)newname; (void)flags;
	fuse_reply_err(req, EROFS);
}

static void us_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	(void)ino; (void)newparent; (void)newname;
	fuse_reply_err(req, EROFS);
}

static void us_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino; (void)buf; (void)size; (void)off; (void)fi;
	fuse_reply_err(req, EROFS);
}

static void us_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	(void)parent; (void)name; (void)mode; (void)fi;
	fuse_reply_err(req, EROFS);
}

static void us_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	(void)ino; (void)name; (void)value; (void)size; (void)flags;
	fuse_reply_err(req, EROFS);
}

static void us_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino; (void)name;
	fuse_reply_err(req, EROFS);
}

static void us_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
			 off_t offset, off_t length, struct fuse_file_info *fi)
{
	(void)ino; (void)mode; (void)offset; (void)length; (void)fi;
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops us_fuse_ops = {
	.init = us_init,
	.lookup = us_lookup,
	.forget = us_forget,
	.forget_multi = us_forget_multi,
	.getattr = us_getattr,
	.open = us_open,
	.read = us_read,
	.release = us_release,
	.opendir = us_opendir,
	.readdir = us_readdir,
	.readdirplus = us_readdirplus,
	.releasedir = us_releasedir,
	.statfs = us_statfs,
	.setattr = us_setattr,
	.mknod = us_mknod,
	.mkdir = us_mkdir,
	.unlink = us_unlink,
	.rmdir = us_unlink,
	.symlink = us_symlink,
	.rename = us_rename,
	.link = us_link,
	.write = us_write,
	.create = us_create,
	.getxattr = us_getxattr,
	.listxattr = us_listxattr,
	.setxattr = us_setxattr,
	.removexattr = us_removexattr,
	.fallocate = us_fallocate,
};
