/*
 * ds_common.h - what the two DeepSpeed readers share: the ZeRO checkpoint
 * reader (ds_zero.c) and the universal checkpoint reader (ds_universal.c).
 *
 * Both read a model states file (mp_rank_00_model_states.pt, or one
 * zero_pp_rank_<r>_mp_rank_00_model_states.pt per rank under ZeRO-3) for the
 * parameter list (param_shapes), the buffers and frozen parameters, the tied
 * names (shared_params) and, with --deepspeed-weights=module, the 16-bit
 * weights; and both name the optimizer's param_groups the same way.
 */
#ifndef US_DS_COMMON_H
#define US_DS_COMMON_H

#include "../source.h"
#include "../../codec/torchpkl.h"

#define US_DS_TAG_MAX 256    /* a tag ("global_step1000") longer is refused */

/* One torch.save file of the checkpoint, parsed. */
struct us_ds_file {
	char *relpath;          /* relative to SOURCE */
	uint32_t file;          /* index in sd->files */
	struct us_torch_archive ta;
	bool present;
};

/* One trainable parameter, in param_shapes order. */
struct us_ds_param {
	const char *name;
	uint32_t group, ndim;
	const uint64_t *shape;
	uint64_t numel;
	uint64_t off;           /* the ZeRO reader's offset in its flat vector */
};

/* What a tag file ("latest", "latest_universal") says. */
enum us_ds_tag {
	US_DS_TAG_ABSENT, /* there is no such file */
	US_DS_TAG_DIR,    /* it names a directory inside SOURCE */
	US_DS_TAG_BAD,    /* anything else: empty, not a tag, absolute, climbs
			   * out, names nothing or a non-directory */
};

/*
 * us_ds_tag - read the tag file @name under @dir as DeepSpeed does
 * (its text, stripped) into @tag (US_DS_TAG_MAX + 1 bytes).  For
 * US_DS_TAG_BAD, @why (may be NULL) holds what is wrong, without a path,
 * for a refusal naming @name, and its kind: US_E_IO when the file cannot
 * be opened or read, else US_E_FORMAT.  It quotes the tag only once it is
 * one line of text no longer than a tag: anything else may be a foreign
 * file's bytes (a "latest" symlinked to /etc/passwd), and is described,
 * not printed.
 */
enum us_ds_tag us_ds_tag(const struct us_dir *dir, const char *name, char *tag,
			 struct us_err *why);

/* us_ds_model_states_name - "..._model_states.pt": a model states file
 * (ZeRO's or a universal checkpoint's). */
bool us_ds_model_states_name(const char *n);

/* us_ds_rank_name - "[bf16_|fp16_]zero_pp_rank_<r>_mp_rank_<mp><kind>"? */
bool us_ds_rank_name(const char *n, const char *kind, long *r, long *mp);

/* The most ranks a DeepSpeed checkpoint may name (rank < this). */
#define US_DS_MAX_RANKS 16384

/* us_ds_rank_slot - rank @r's entry in the per-rank table *@tab of *@cap
 * entries, grown (doubling, in @a, zero-filled) to hold it: the table is
 * sized by the ranks present, not by US_DS_MAX_RANKS.  @r must be in
 * [0, US_DS_MAX_RANKS).  NULL when out of memory. */
struct us_ds_file *us_ds_rank_slot(struct us_arena *a, struct us_ds_file **tab,
				   uint32_t *cap, uint32_t r);

/* us_ds_stage - zero_stage: an int, or ZeroStageEnum pickled as Class(2)
 * (Python < 3.12) or getattr(Class, "gradients"); -1 if neither. */
int us_ds_stage(const struct us_pk *p);

/* us_ds_partition_count - an int, or a list per group (ZeRO-2): the max;
 * -1 if neither. */
int64_t us_ds_partition_count(const struct us_pk *p);

/* us_ds_open - open @f->relpath under @dir and parse its data.pkl. */
enum us_status us_ds_open(struct us_statedict *sd, const struct us_dir *dir,
			  struct us_ds_file *f, struct us_arena *a,
			  struct us_err *err);

/* us_ds_shape - torch.Size((...)) or a tuple: ndim, shape (in @a), numel. */
bool us_ds_shape(struct us_arena *a, const struct us_pk *p, uint32_t *ndim,
		 const uint64_t **shape, uint64_t *numel);

/* us_ds_params - the parameters of @ms's param_shapes (a list per param
 * group of name -> shape), in order; @path names @ms in messages. */
enum us_status us_ds_params(struct us_arena *a, const struct us_pk *ms,
			    const char *path, struct us_ds_param **out,
			    uint32_t *n, uint32_t *ngroups, struct us_err *err);

/* us_ds_add_plain - the tensor @v of @f as @name (strides kept). */
enum us_status us_ds_add_plain(struct us_statedict *sd,
			       const struct us_ds_file *f, const char *name,
			       const struct us_pk *v, struct us_err *err);

/* Which entries of a "module" state dict us_ds_add_module takes. */
enum us_ds_module_part {
	/* every entry but the names shared_params drops: ZeRO-1/2's 16-bit
	 * weights as saved (--deepspeed-weights=module) */
	US_DS_MODULE_ALL,
	/* the buffers (buffer_names), floating ones widened to fp32 as
	 * zero_to_fp32's .float() gives them (the ZeRO reader) */
	US_DS_BUFFERS_FP32,
	/* the buffers as stored: DeepSpeed's universal load restores no
	 * buffer, the model keeps them in its own (16-bit) dtype */
	US_DS_BUFFERS_STORED,
};

/* us_ds_add_module - the entries @part names of @f's "module" state dict. */
enum us_status us_ds_add_module(struct us_statedict *sd,
				const struct us_ds_file *f,
				enum us_ds_module_part part, struct us_err *err);

/* us_ds_add_frozen_z3 - ZeRO-3 frozen param @name: every rank's fragment
 * (frozen_param_fragments of @model[0..world)), concatenated, truncated. */
enum us_status us_ds_add_frozen_z3(struct us_statedict *sd, struct us_arena *a,
				   const struct us_ds_file *model, uint32_t world,
				   const char *name, const struct us_pk *shape,
				   struct us_err *err);

/* us_ds_add_ties - shared_params ({"dropped": "kept"}) as aliases. */
enum us_status us_ds_add_ties(struct us_statedict *sd, const struct us_pk *ms,
			      struct us_err *err);

/* us_ds_module_refusal - --deepspeed-weights=module on ZeRO-3: its module
 * holds empty placeholders, so there is nothing 16-bit to serve. */
enum us_status us_ds_module_refusal(const char *path, struct us_err *err);

/* us_ds_optim_json - sd->optim_json: @groups (param_groups) with each
 * group's "params" replaced by its parameters' unwrapped names. */
enum us_status us_ds_optim_json(struct us_statedict *sd, const struct us_pk *groups,
				const struct us_ds_param *params, uint32_t n,
				struct us_err *err);

#endif /* US_DS_COMMON_H */
