/*
 * baseline_fs.c - the benchmark peer: the smallest honest libfuse3 low-level
 * server.  One file, "model.safetensors", in the root, backed by pread on a
 * real file.  Multithreaded loop, keep_cache, the same attr/entry timeouts
 * and init settings as unshardfs, one reply buffer per request.
 *
 *   baseline_fs -f BACKING MOUNTPOINT [-o opts]
 */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TIMEOUT 86400.0
#define FILE_INO 2
static const char fname[] = "model.safetensors";
static int backing_fd = -1;
static struct stat backing_st;

static void bl_init(void *ud, struct fuse_conn_info *conn)
{
	(void)ud;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = backing_st.st_size;
		st->st_blocks = (backing_st.st_size + 511) / 512;
	}
}

static void bl_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr_timeout = e.entry_timeout = TIMEOUT;
	if (parent == FUSE_ROOT_ID && strcmp(name, fname) == 0) {
		e.ino = FILE_INO;
		fill(FILE_INO, &e.attr);
	}
	fuse_reply_entry(req, &e);
}

static void bl_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (ino != FUSE_ROOT_ID && ino != FILE_INO) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill(ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void bl_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FILE_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void bl_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	char *buf = malloc(size ? size : 1);
	size_t got = 0;

	(void)ino; (void)fi;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	while (got < size) {
		ssize_t n = pread(backing_fd, buf + got, size - got, off + (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			fuse_reply_err(req, EIO);
			return;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	fuse_reply_buf(req, buf, got);
	free(buf);
}

static void bl_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	char buf[512];
	size_t pos = 0;
	struct stat st;
	static const char *names[] = { ".", "..", fname };

	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	for (off_t i = off; i < 3 && size > pos; i++) {
		size_t need;

		fill(i == 2 ? FILE_INO : FUSE_ROOT_ID, &st);
		need = fuse_add_direntry(req, buf + pos,
					 (size - pos) < sizeof(buf) - pos ? size - pos : sizeof(buf) - pos,
					 names[i], &st, i + 1);
		if (need > sizeof(buf) - pos || need > size - pos)
			break;
		pos += need;
	}
	fuse_reply_buf(req, buf, pos);
}

static const struct fuse_lowlevel_ops bl_ops = {
	.init = bl_init,
	.lookup = bl_lookup,
	.getattr = bl_getattr,
	.open = bl_open,
	.read = bl_read,
	.readdir = bl_readdir,
};

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	int rc = 1;

	if (argc < 4 || strcmp(argv[1], "-f") != 0) {
		fprintf(stderr, "usage: baseline_fs -f BACKING MOUNTPOINT [-o opts]\n");
		return 1;
	}
	backing_fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (backing_fd < 0 || fstat(backing_fd, &backing_st) < 0) {
		perror(argv[2]);
		return 1;
	}
	fuse_opt_add_arg(&args, "baseline_fs");
	fuse_opt_add_arg(&args, "-o");
	fuse_opt_add_arg(&args, "ro,default_permissions,subtype=baseline_fs,fsname=baseline");
	for (int i = 4; i < argc; i++)
		fuse_opt_add_arg(&args, argv[i]);
	se = fuse_session_new(&args, &bl_ops, sizeof(bl_ops), NULL);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[3]) != 0)
		goto out;
	cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	fuse_loop_cfg_set_idle_threads(cfg, 16);
	rc = fuse_session_loop_mt(se, cfg) == 0 ? 0 : 1;
	fuse_loop_cfg_destroy(cfg);
	fuse_session_unmount(se);
out:
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	return rc;
}
