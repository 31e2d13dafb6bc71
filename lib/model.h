/*
 * model.h - the one shared data structure of libunshard.
 *
 * A state dict is a list of tensors.  A tensor has a name, a dtype, a shape
 * and a list of chunks.  A chunk is an N-D box (offsets, sizes) of the tensor
 * whose elements live in one source extent: a file, a byte offset, element
 * strides, a dtype and a transform (such as a zstd-compressed item).
 *
 * Source readers (source/) only *describe* chunks; views (view/) only read
 * through the assembly engine (assemble/).  Nothing here knows FUSE.
 *
 * Invariants, established by us_sd_finalize() at mount and relied on by every
 * read afterwards (a mounted tree never discovers a format error):
 *  - tensor names are unique, and tensors are sorted by name;
 *  - the chunks of a tensor tile it exactly: inside its bounds, no overlap,
 *    volumes summing to numel (zero-volume chunks are dropped by readers);
 *  - every byte an extent can address lies inside its file (or decoded item).
 */
#ifndef US_MODEL_H
#define US_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "arena.h"
#include "dtype.h"
#include "storage/storage.h"
#include "us_error.h"

/* torch allows 64 dimensions; nothing real comes near it. */
#define US_MAX_NDIM 64

enum us_transform {
	US_XF_NONE = 0, /* bytes are stored as is in the file */
	US_XF_ZSTD = 1, /* the item is one zstd frame (DCP "stream.zstd/1") */
};

/* A source file, opened at mount and held open for the life of the mount. */
struct us_file {
	char *relpath; /* relative to SOURCE: for messages, inspect, xattrs */
	int fd;        /* local: open for reading; -1 for a remote object */
	/* Remote: the store (owned by the state dict) and the object of its
	 * listing; NULL for a local file.  Read with us_file_pread. */
	struct us_remote *remote;
	const struct us_remote_object *obj;
	/* Identity recorded at mount: a read that finds it changed says EIO
	 * (us_same_file: the ctime too, which a rewrite cannot restore). */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
};

/* Where the elements of one chunk live. */
struct us_extent {
	uint32_t file;          /* index into us_statedict.files */
	enum us_transform xf;
	uint64_t item_off;      /* transformed item: its byte range in the file */
	uint64_t item_len;
	uint64_t decoded_len;   /* transformed item: its size once decoded */
	uint64_t offset;        /* bytes to the chunk's first element: in the
				 * file (US_XF_NONE) or in the decoded item */
	const int64_t *strides; /* element strides per chunk dim; NULL means
				 * row-major contiguous over the chunk's sizes */
	enum us_dtype dtype;    /* element type as stored */
};

struct us_chunk {
	const uint64_t *offsets; /* ndim entries: the box's corner */
	const uint64_t *sizes;   /* ndim entries: the box's extent */
	struct us_extent src;
};

struct us_tensor {
	const char *name;        /* the name every view shows */
	const char *source_name; /* the key in the source, before unwrapping */
	/* The SOURCE file that declared its shape and chunk grid (a shard, an
	 * archive, DCP's .metadata): refusals about those name it. */
	const char *decl_path;
	enum us_dtype dtype;
	uint32_t ndim;
	const uint64_t *shape;
	uint64_t numel;
	uint64_t nbytes;
	struct us_chunk *chunks;
	uint32_t nchunks;
	uint32_t order;          /* position in the source, for tie canonicals */
	/*
	 * Ties (ties.h): the group's canonical tensor when this name is tied to
	 * another and is not itself canonical; NULL otherwise.  Set after
	 * finalize; a tied name shares the canonical's bytes in every view (one
	 * inode, one storage, stored once with a "<dropped>": "<kept>" record).
	 */
	const struct us_tensor *tie_of;
	uint32_t nlinks;         /* names in its tie group (1 when untied) */
	/* A reader that must serve the stored bytes converted (DeepSpeed's
	 * buffers, upcast like zero_to_fp32 does) sets this; the source layer
	 * applies it after finalize and ties (us_tensor_present_as). */
	bool upcast_f32;
	/* The recipe rule (1-based, recipes/recipe.h) that made this tensor,
	 * 0 when no recipe ran; source_name is then the tensor it came from.
	 * A rule's cast is applied, like upcast_f32, after ties. */
	uint32_t recipe_rule;
	bool recipe_cast;
	enum us_dtype recipe_cast_to;
};

struct us_statedict {
	struct us_arena arena;
	const char *format;      /* "safetensors", ... : for inspect */
	bool finalized;
	/* The format saves every name separately, so a tied pair arrives as
	 * two copies (DCP): only the writer's other evidence (its optimizer,
	 * config.json) says which copies are one parameter (ties.h).  Other
	 * formats declare their ties, and their mount reads no tensor data. */
	bool ties_as_copies;
	struct us_tensor *tensors;
	size_t ntensors, tensors_cap;
	struct us_file *files;
	size_t nfiles, files_cap;
	/* Declared aliases: "<dropped>" -> "<kept>" records (safetensors). */
	struct us_alias {
		const char *name, *target;
	} *aliases;
	size_t naliases, aliases_cap;
	/*
	 * The optimizer state, when the source has it: its tensors as a child
	 * state dict named "state.<param>.<slot>" (it reads through this
	 * state dict's files), and its non-tensor state (param_groups,
	 * scalars) as JSON text.  NULL when absent.
	 */
	struct us_statedict *optim;
	char *optim_json;
	bool borrowed_files;     /* a child: files belong to the parent */
	/* The unwrapping options, for readers that name things inside
	 * non-tensor state (optimizer param_groups); NULL: defaults. */
	const struct us_names_opts *names;
	/* The recipe that renamed and re-laid the tensors (NULL: none), and
	 * the source names its rules dropped (rule numbers beside): inspect
	 * reports them, so no tensor disappears silently. */
	const char *recipe;
	const char **recipe_dropped;
	uint32_t *recipe_dropped_rule;
	size_t nrecipe_dropped;
	/* No recipe was asked for, and this built-in fits every name: the
	 * mount says so on stderr (a hint, not an error).  NULL otherwise. */
	const char *recipe_hint;
	/* Files that belong to the checkpoint (shards, indexes): not passed through. */
	const char **consumed;
	size_t nconsumed, consumed_cap;
	/* A remote SOURCE's store (storage/remote.h), owned: freed after the
	 * files that read from it.  NULL for a local SOURCE and in the
	 * optimizer child (which borrows its parent's files). */
	struct us_remote *remote;
};

struct us_statedict *us_sd_new(void);
/* Closes every file and frees everything the state dict owns. */
void us_sd_free(struct us_statedict *sd);

/* us_sd_optim - the optimizer child of @sd, created on first use (NULL when
 * out of memory).  Its tensors' extents index @sd's files. */
struct us_statedict *us_sd_optim(struct us_statedict *sd);

/* us_sd_find_file - the file of @sd opened as @relpath, or NULL. */
const struct us_file *us_sd_find_file(const struct us_statedict *sd,
				      const char *relpath);

/*
 * us_sd_open_file - open @relpath under @d (symlinks followed), record
 * its identity, mark it consumed and return its index in *@idx.  Opening the
 * same relpath twice returns the first index.  Refuses anything that is not
 * a regular file.
 */
enum us_status us_sd_open_file(struct us_statedict *sd, const struct us_dir *d,
			       const char *relpath, uint32_t *idx,
			       struct us_err *err);

/* us_sd_consume - mark @relpath (an index, a metadata file) as part of the
 * checkpoint so that it is not passed through. */
enum us_status us_sd_consume(struct us_statedict *sd, const char *relpath);
bool us_sd_is_consumed(const struct us_statedict *sd, const char *relpath);
/* us_sd_unconsume - pass @relpath through after all: a lone weights file
 * whose name loaders look for (adapter_model.safetensors of PEFT,
 * diffusion_pytorch_model.safetensors of diffusers) stays visible beside
 * the views made from it. */
void us_sd_unconsume(struct us_statedict *sd, const char *relpath);

/*
 * us_sd_add_tensor - append a tensor with room for @nchunks chunks, each with
 * its offsets/sizes arrays allocated (zeroed).  @name is copied.  numel and
 * nbytes are computed here; NULL on overflow or out of memory (@err set).
 */
struct us_tensor *us_sd_add_tensor(struct us_statedict *sd, const char *name,
				   enum us_dtype dtype, uint32_t ndim,
				   const uint64_t *shape, uint32_t nchunks,
				   const char *errpath, struct us_err *err);

/* us_sd_add_whole_tensor - a tensor stored contiguously as one extent of
 * @file at byte @offset (safetensors and friends). */
struct us_tensor *us_sd_add_whole_tensor(struct us_statedict *sd,
					 const char *name, enum us_dtype dtype,
					 uint32_t ndim, const uint64_t *shape,
					 uint32_t file, uint64_t offset,
					 struct us_err *err);

/*
 * us_sd_add_alias - record that @name, absent from the source, is @target
 * (huggingface_hub's "<dropped>": "<kept>" metadata).  Resolved by
 * us_sd_resolve_aliases(): an alias whose name exists, or whose target does
 * not, is ignored -- metadata values are not always tensor names.
 */
enum us_status us_sd_add_alias(struct us_statedict *sd, const char *name,
			       const char *target);
/* us_sd_resolve_aliases - add each valid alias as a tensor sharing its
 * target's chunks (the same bytes: a declared tie). */
enum us_status us_sd_resolve_aliases(struct us_statedict *sd,
				     struct us_err *err);

/*
 * us_sd_finalize - sort tensors by name, refuse duplicate names (naming
 * both files, or both source keys when unwrapping made them collide) and
 * check the invariants above.  Only the source layer calls it, once, after
 * a reader has described everything and names were unwrapped.
 */
enum us_status us_sd_finalize(struct us_statedict *sd, struct us_err *err);

#ifndef NDEBUG
/*
 * us_sd_check - verify again, by independent arithmetic, every invariant
 * the read path relies on (the list at the top of this file, plus: each
 * chunk's box inside the shape and its extent inside its file or decoded
 * item without overflow, numel/nbytes matching shape and dtype, stored
 * dtypes matching, names valid, tie groups consistent) on a finalized @sd
 * and its optimizer child.  NULL when they hold, else what is broken (a
 * static per-thread string).  Debug builds only (NDEBUG unset: meson's
 * b_ndebug=false, the default even for debugoptimized): us_sd_finalize
 * asserts it at every mount, us_ties_detect after linking.  Linear in
 * chunks, plus a sort of each tensor's chunk corners.
 */
const char *us_sd_check(const struct us_statedict *sd);
/* us_sd_assert_ok - assert(us_sd_check(@sd) == NULL), printing what broke. */
void us_sd_assert_ok(const struct us_statedict *sd);
#endif

/*
 * us_sd_present_as - present every floating tensor (F64, F32, F16, BF16) of
 * @sd as @dtype (--dtype): dtype and nbytes change, chunks keep the stored
 * dtype, and reads convert (assemble/cast.h).  The optimizer is left as
 * stored.
 */
void us_sd_present_as(struct us_statedict *sd, enum us_dtype dtype);
/* us_tensor_present_as - the same for one tensor. */
void us_tensor_present_as(struct us_tensor *t, enum us_dtype dtype);

/* us_sd_find - binary search by name after finalize; NULL if absent. */
const struct us_tensor *us_sd_find(const struct us_statedict *sd,
				   const char *name);

/* us_numel - product of @shape, false on overflow. */
bool us_numel(uint32_t ndim, const uint64_t *shape, uint64_t *out);
/* us_nbytes - bytes of @numel elements of @dt, false on overflow or when
 * sub-byte elements do not fill whole bytes. */
bool us_nbytes(enum us_dtype dt, uint64_t numel, uint64_t *out);

#endif /* US_MODEL_H */
