/*
 * view.h - renderers from the state dict to virtual files.
 *
 * A view knows its size (and any header) at mount, from metadata alone, and
 * maps a byte range of itself to tensor ranges that the assembly engine
 * fills, through the assembler the reader passes (assemble.h): a view holds
 * no cache and no device of its own.  Views know nothing of FUSE: the
 * daemon only asks for size and bytes.  Every read-path function returns an
 * enum us_status (US_OK, US_E_IO, US_E_NOMEM); errnos are the daemon's.
 */
#ifndef US_VIEW_H
#define US_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../codec/jsonw.h"
#include "../assemble/assemble.h"
#include "../model.h"

struct us_view;

struct us_view_ops {
	/* Fill @buf with [@off, @off + @len), already clamped to the size,
	 * reading tensors through @as. */
	enum us_status (*read)(struct us_assembler *as, const struct us_view *v,
			       char *buf, size_t len, uint64_t off);
	void (*destroy)(struct us_view *v);
	/* Optional: describe [@off, @off + @len) as segments (assemble.h,
	 * us_tensor_map) instead of filling a buffer; segs->overflow set when
	 * the range must be read instead. */
	enum us_status (*map)(const struct us_view *v, struct us_segs *segs,
			      size_t len, uint64_t off);
};

struct us_view {
	const char *name; /* the file name under the mount root */
	uint64_t size;
	const struct us_view_ops *ops;
	const struct us_statedict *sd;
	void *priv;
};

/*
 * us_view_read - read up to @len bytes at @off, tensors through @as; *@nread
 * receives the number of bytes (0 at or past the end).  US_OK, or the
 * status of the first part that failed (*@nread is then 0).
 */
enum us_status us_view_read(struct us_assembler *as, const struct us_view *v,
			    char *buf, size_t len, uint64_t off,
			    size_t *nread);
void us_view_free(struct us_view *v);

/*
 * us_view_map - describe up to @len bytes at @off as segments of memory and
 * source files, for a zero-copy reply; *@nmapped receives the number of
 * bytes described (0 at or past the end).  When the view or the range
 * cannot be described, segs->overflow is set: read it with us_view_read.
 * US_OK, or US_E_IO when a source file changed since mount.
 */
enum us_status us_view_map(const struct us_view *v, struct us_segs *segs,
			   size_t len, uint64_t off, size_t *nmapped);

/*
 * For renderers: where the parts of a range go.  A view lays its range out
 * as parts, memory it owns or a range of a tensor, and hands each to a
 * sink, which copies it into @buf (read) or records it as segments (map),
 * so one walk serves both.  A walk stops at the first part that fails or
 * once us_sink_stopped (a map that cannot go on: segs->overflow).
 */
struct us_view_sink {
	const struct us_statedict *sd;
	struct us_assembler *as; /* read: where tensor bytes come from */
	char *buf;               /* read: where the next bytes go */
	struct us_segs *segs;    /* map: where the next segments go */
};

enum us_status us_sink_mem(struct us_view_sink *k, const void *p, size_t n);
enum us_status us_sink_tensor(struct us_view_sink *k, const struct us_tensor *t,
			      uint64_t n, uint64_t toff);
static inline bool us_sink_stopped(const struct us_view_sink *k)
{
	return k->segs && k->segs->overflow;
}

/* model.safetensors: the whole state dict as one safetensors file. */
enum us_status us_view_safetensors_new(const struct us_statedict *sd,
				       struct us_view **out,
				       struct us_err *err);
/* The same, under another (static) file name: optimizer.safetensors. */
enum us_status us_view_safetensors_named(const struct us_statedict *sd,
					 const char *name,
					 struct us_view **out,
					 struct us_err *err);

/*
 * us_view_safetensors_subset - a safetensors file of the tensors @keep
 * (sorted here into writer order) that records each of @dropped as
 * "<dropped>": "<tie_of>" in __metadata__.  @name is copied.  Used by the
 * sharded view, whose shards each hold a part of the state dict.
 */
enum us_status us_view_safetensors_subset(const struct us_statedict *sd,
					  const char *name,
					  const struct us_tensor *const *keep,
					  size_t nkeep,
					  const struct us_tensor *const *dropped,
					  size_t ndropped,
					  struct us_view **out,
					  struct us_err *err);
/* qsort comparator of struct us_tensor pointers in the safetensors writer's
 * order: dtype order descending (dtype.h), then name by bytes. */
int us_tensor_cmp_writer_order(const void *a, const void *b);

/*
 * us_view_safetensors_sharded - the state dict as transformers'
 * save_pretrained(max_shard_size=@max_shard) lays it out (view/sharded.c):
 * model-0000K-of-0000N.safetensors files and model.safetensors.index.json
 * ({"metadata": {"total_size": N}, "weight_map": {name: shard}}), or one
 * model.safetensors when everything fits one shard, as save_pretrained does.
 * Stored tensors are taken in writer order and packed greedily; a tensor
 * larger than @max_shard gets a shard of its own.  A dropped tied name is
 * recorded in the __metadata__ of the shard that holds its kept name and is
 * not in weight_map (transformers re-ties from config.json).
 * *@out receives a malloc'd array of *@nout views: the shards, then the
 * index; free each with us_view_free, then the array.
 */
enum us_status us_view_safetensors_sharded(const struct us_statedict *sd,
					   uint64_t max_shard,
					   struct us_view ***out, size_t *nout,
					   struct us_err *err);

/*
 * us_view_optimizer_new - the optimizer's files: optimizer.safetensors when
 * the state dict has optimizer tensors, optimizer.json when it has
 * non-tensor state, in that order, into @out (*@n of them, at most 2; none
 * when there is no optimizer state).  On failure nothing is left made.
 */
enum us_status us_view_optimizer_new(const struct us_statedict *sd,
				     struct us_view *out[2], size_t *n,
				     struct us_err *err);

/* A file whose bytes are @text, copied at mount (optimizer.json). */
enum us_status us_view_text_new(const char *name, const char *text,
				struct us_view **out, struct us_err *err);

/* pytorch_model.bin: the whole state dict as a torch.save zip archive
 * (view/torchzip.c).  Refuses a tensor whose dtype torch cannot express. */
enum us_status us_view_torch_new(const struct us_statedict *sd,
				 struct us_view **out, struct us_err *err);

/*
 * tensors/<name>: one tensor's raw little-endian row-major bytes (size
 * t->nbytes), read through us_tensor_read (view/raw.c).  The view's name is
 * the tensor name as is; the daemon encodes it for the directory.  A raw
 * view is one struct us_view and nothing else, so that 100k of them stay
 * cheap; priv is the tensor, which the state dict owns.
 */
enum us_status us_view_raw_new(const struct us_statedict *sd,
			       const struct us_tensor *t,
			       struct us_view **out, struct us_err *err);
/* us_view_raw_array_new - raw views of every tensor, in one block indexed
 * like sd->tensors; free it with us_view_raw_array_free, not us_view_free. */
enum us_status us_view_raw_array_new(const struct us_statedict *sd,
				     struct us_view **out, struct us_err *err);
void us_view_raw_array_free(struct us_view *views);
/* us_view_raw_tensor - the tensor of raw view @v; NULL for any other view. */
const struct us_tensor *us_view_raw_tensor(const struct us_view *v);

/*
 * Extended attributes of a raw view (design.md, the tensors/ line):
 *   user.unshardfs.dtype   the safetensors dtype string, e.g. "F32"
 *   user.unshardfs.shape   dims joined by ',', e.g. "4096,4096"; "" for a scalar
 *   user.unshardfs.source  the distinct SOURCE files its chunks come from, in
 *                          chunk order, joined by ','; then " (N chunks)"
 *                          when N > 1; a list past 4000 bytes ends with
 *                          ",... (F files)"
 * us_raw_xattr_list is the listxattr reply: the three names, each followed
 * by a NUL (us_raw_xattr_list_len bytes).
 */
#define US_XATTR_DTYPE "user.unshardfs.dtype"
#define US_XATTR_SHAPE "user.unshardfs.shape"
#define US_XATTR_SOURCE "user.unshardfs.source"
extern const char us_raw_xattr_list[];
extern const size_t us_raw_xattr_list_len;

/* us_view_raw_xattr - append the value of xattr @name of raw view @v to @b
 * (no NUL).  US_OK; US_E_USAGE for an unknown name or a view that is not
 * raw (the daemon answers ENODATA); US_E_NOMEM. */
enum us_status us_view_raw_xattr(const struct us_view *v, const char *name,
				 struct us_sbuf *b);

#endif /* US_VIEW_H */
