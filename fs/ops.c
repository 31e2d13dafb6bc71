/*
 * ops.c - one small handler per FUSE operation (passthrough_ll.c style):
 * every path ends in exactly one fuse_reply_*.  The filesystem is read-only:
 * every mutating operation answers EROFS.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "assemble/assemble.h"
#include "root_xattr.h"
#include "bdi.h"
#include "init_ext.h"
#include "io.h"
#include "msg.h"
#include "pipe.h"
#include "status_errno.h"
#include "tbuf.h"
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
	ino = us_tree_lookup(d, name);
	if (!ino) {
		/* A negative entry the kernel may cache: the tree never changes. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = US_TIMEOUT;
		fuse_reply_entry(req, &e);
		return;
	}
	fill_entry(t, ino, &e);
	fuse_reply_entry(req, &e);
}

/*
 * Lookup counts: nodes live as long as the mount (tree.h), so there is
 * nothing to free when the kernel forgets one; a forget only needs its
 * (absent) reply.
 */
static void us_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req);
}

static void us_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	(void)count;
	(void)forgets;
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

/*
 * Open a passthrough file and make sure it is still the file seen at mount.
 * The open file lives on the heap (fi->fh) until release: a local one is
 * spliced from its descriptor, a remote one read through its store.
 */
static int open_passthrough(struct us_tree *t, const struct us_node *n,
			    struct us_file **out)
{
	const struct stat *was = n->like;
	struct us_file *f = calloc(1, sizeof(*f));
	enum us_status rc;
	struct stat now;
	int e;

	if (!f)
		return -ENOMEM;
	/* An overlay file's relpath is absolute: us_file_open opens it
	 * locally, whatever SOURCE is. */
	rc = us_file_open(t->src, n->u.relpath, f);
	if (rc != US_OK) {
		e = rc == US_E_IO ? errno : us_status_errno(rc);
		free(f);
		return -e;
	}
	now = (struct stat){ .st_dev = f->dev, .st_ino = f->ino,
			     .st_size = f->size, .st_mtim = f->mtime,
			     .st_ctim = f->ctime };
	if (!us_same_file(was, &now)) {
		us_file_close(f);
		free(f);
		return -EIO;
	}
	*out = f;
	return 0;
}

static struct us_file *fh_file(const struct fuse_file_info *fi)
{
	return (struct us_file *)(uintptr_t)fi->fh;
}

static void us_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct us_tree *t = tree_of(req);
	struct us_node *n = us_tree_get(t, ino);
	struct us_file *f = NULL;
	int rc;

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
	us_bdi_apply(); /* before the reply: bdi.c says why */
	fi->fh = 0;
	if (n->kind == US_NODE_PASSTHROUGH) {
		rc = open_passthrough(t, n, &f);
		if (rc < 0) {
			fuse_reply_err(req, -rc);
			return;
		}
		fi->fh = (uint64_t)(uintptr_t)f;
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

static int reply_mapped(fuse_req_t req, const struct us_node *n, size_t size,
			off_t off, struct fuse_file_info *fi)
{
	static __thread struct us_seg segv[REPLY_SEGS];
	struct us_segs segs = { .v = segv, .cap = REPLY_SEGS };
	enum us_status rc;
	size_t got;

	if (!us_fits_pipe(size, 1))
		return -EAGAIN;
	if (n->kind == US_NODE_PASSTHROUGH) {
		if (fh_file(fi)->fd < 0)
			return -EAGAIN; /* remote: no descriptor to splice */
		segv[0] = (struct us_seg){ .fd = fh_file(fi)->fd,
					   .off = (uint64_t)off, .len = size };
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
	if (!us_fits_pipe(size, segs.n))
		return -EAGAIN;
	return reply_segs(req, segv, segs.n);
}

/* A read that cannot be spliced: assembled (or read) into a reply buffer
 * of the pool (tbuf.h), then replied. */
static void reply_buffered(fuse_req_t req, const struct us_node *n,
			   size_t size, off_t off, struct fuse_file_info *fi)
{
	struct us_rbuf *rb = us_rbuf_take(size);
	char *buf = rb ? rb->p : NULL;
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
		/* a passthrough file: its own errno (EIO when it ends early) */
		got = us_file_pread(fh_file(fi), buf, size, (uint64_t)off) == US_OK
			      ? (long long)size : -errno;
	}
	if (got < 0)
		fuse_reply_err(req, (int)-got);
	else
		fuse_reply_buf(req, buf, (size_t)got);
	us_rbuf_give(rb);
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

	if (n && n->kind == US_NODE_PASSTHROUGH && fi->fh) {
		us_file_close(fh_file(fi));
		free(fh_file(fi));
	}
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
 * is followed by offset i + 1.
 */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       bool plus)
{
	struct us_tree *t = tree_of(req);
	struct us_node *d = us_tree_get(t, ino);
	/* its own buffer, not the pool's: ls never waits behind reads */
	char *buf = d && d->kind == US_NODE_DIR ? malloc(size ? size : 1) : NULL;
	size_t pos = 0;

	if (!d || d->kind != US_NODE_DIR || !buf) {
		fuse_reply_err(req, !d ? ENOENT : d->kind != US_NODE_DIR ? ENOTDIR
									: ENOMEM);
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
		pos += need;
	}
	fuse_reply_buf(req, buf, pos);
	free(buf);
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

/* The root's xattrs name SOURCE (a remote one's URL may be presigned) and
 * its store's options: only the mount's owner (the daemon's uid, the
 * user_id= the kernel records) and root are told, as only they are what a
 * loader believes (lib/loader/mount_root.c). */
static bool root_xattr_reader(fuse_req_t req)
{
	uid_t uid = fuse_req_ctx(req)->uid;

	return uid == 0 || uid == getuid();
}

static void us_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);
	struct us_sbuf b;
	enum us_status rc;

	if (ino == FUSE_ROOT_ID && n) {
		char tmp[US_ROOT_XATTR_TMP];
		size_t len = 0;
		const char *v = us_root_xattr(tree_of(req)->rootx, name, tmp,
					      &len);

		if (v && !root_xattr_reader(req))
			fuse_reply_err(req, EACCES);
		else if (v)
			reply_xattr_value(req, v, len, size);
		else
			fuse_reply_err(req, ENODATA);
		return;
	}
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

/* The root's names: remote_stats only for a remote SOURCE. */
static void reply_root_names(fuse_req_t req, size_t size)
{
	size_t len;
	const char *names = us_root_xattr_names(tree_of(req)->rootx, &len);

	reply_xattr_value(req, names, len, size);
}

static void us_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct us_node *n = us_tree_get(tree_of(req), ino);

	if (!n)
		fuse_reply_err(req, ENOENT);
	else if (n->kind == US_NODE_TENSOR)
		reply_xattr_value(req, us_raw_xattr_list,
				  us_raw_xattr_list_len, size);
	else if (ino == FUSE_ROOT_ID && tree_of(req)->rootx)
		reply_root_names(req, size);
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
