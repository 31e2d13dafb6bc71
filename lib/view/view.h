/*
 * view.h - renderers from the state dict to virtual files.
 *
 * A view knows its size (and any header) at mount, from metadata alone, and
 * maps a byte range of itself to tensor ranges that the assembly engine
 * fills.  Views know nothing of FUSE: the daemon only asks for size and bytes.
 */
#ifndef US_VIEW_H
#define US_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "../model.h"

struct us_view;

struct us_view_ops {
	/* Fill @buf with [@off, @off + @len), already clamped to the size.
	 * Returns 0 or a negative errno. */
	int (*read)(const struct us_view *v, char *buf, size_t len,
		    uint64_t off);
	void (*destroy)(struct us_view *v);
};

struct us_view {
	const char *name; /* the file name under the mount root */
	uint64_t size;
	const struct us_view_ops *ops;
	const struct us_statedict *sd;
	void *priv;
};

/*
 * us_view_read - read up to @len bytes at @off.  Returns the number of bytes
 * (0 at or past the end), or a negative errno.
 */
long long us_view_read(const struct us_view *v, char *buf, size_t len,
		       uint64_t off);
void us_view_free(struct us_view *v);

/* model.safetensors: the whole state dict as one safetensors file. */
enum us_status us_view_safetensors_new(const struct us_statedict *sd,
				       struct us_view **out,
				       struct us_err *err);

/* pytorch_model.bin: the whole state dict as a torch.save zip archive
 * (view/torchzip.c).  Refuses a tensor whose dtype torch cannot express. */
enum us_status us_view_torch_new(const struct us_statedict *sd,
				 struct us_view **out, struct us_err *err);

#endif /* US_VIEW_H */
