/* source.c - open SOURCE, pick a reader, finalize. */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../recipes/recipe.h"
#include "../storage/remote.h"

static const struct us_reader *const readers[] = {
	&us_reader_dcp,
	/* before deepspeed: a universal folder holds model states files too */
	&us_reader_ds_universal,
	/* before safetensors and torch: an HF Trainer checkpoint of a
	 * DeepSpeed run holds its 16-bit export (model.safetensors or
	 * pytorch_model.bin) beside the fp32 masters; the masters win, as
	 * zero_to_fp32 would read them (--format=safetensors: the export) */
	&us_reader_deepspeed,
	&us_reader_safetensors,
	&us_reader_torch,
};

#define NREADERS (sizeof(readers) / sizeof(readers[0]))

static const struct us_reader *pick_reader(const char *format,
					   const struct us_dir *dir,
					   const char *file)
{
	for (size_t i = 0; i < NREADERS; i++) {
		if (format && strcmp(format, "auto") != 0) {
			if (strcmp(format, readers[i]->name) == 0)
				return readers[i];
		} else if (readers[i]->probe(dir, file)) {
			return readers[i];
		}
	}
	return NULL;
}

bool us_source_probe(const struct us_dir *dir)
{
	return pick_reader(NULL, dir, NULL) != NULL;
}

/* Split @path into an opened parent directory @dir and a base name (*@base
 * set only when the directory opened; -1 with errno otherwise). */
static int open_parent(const char *path, struct us_dir *dir, char **base)
{
	char *a = strdup(path), *b = strdup(path);
	int rc = -1;

	errno = ENOMEM;
	if (a && b && (rc = us_dir_open_path(dirname(a), dir)) == 0 &&
	    !(*base = strdup(basename(b)))) {
		us_dir_close(dir);
		rc = -1;
		errno = ENOMEM;
	}
	free(a);
	free(b);
	return rc;
}

/* The local SOURCE @path: its directory, or a file's directory and name. */
static enum us_status open_local(const char *path, struct us_dir *dir,
				 char **file, struct us_err *err)
{
	struct stat st;
	int rc;

	if (stat(path, &st) < 0)
		return us_err_set(err, US_E_IO, ".", "cannot access SOURCE: %s",
				  strerror(errno));
	if (S_ISDIR(st.st_mode))
		rc = us_dir_open_path(path, dir);
	else
		rc = open_parent(path, dir, file);
	if (rc < 0)
		return us_err_set(err, US_E_IO, ".", "cannot open SOURCE %s: %s",
				  path, strerror(errno));
	return US_OK;
}

/* The remote SOURCE @url: the store's root, and when the URL named one
 * object, that object as the file SOURCE (as a local file is). */
static enum us_status open_remote(const char *url,
				  const struct us_source_opts *opts,
				  struct us_remote **r, struct us_dir *dir,
				  char **file, struct us_err *err)
{
	US_TRY(us_remote_open(url, opts ? &opts->remote : NULL, r, err));
	if (us_remote_single(*r) && us_remote_count(*r) == 1 &&
	    !(*file = strdup(us_remote_at(*r, 0)->key)))
		goto nomem;
	if (us_dir_open_remote(*r, "", dir) < 0)
		goto nomem;
	return US_OK;
nomem:
	free(*file);
	*file = NULL;
	us_remote_free(*r);
	*r = NULL;
	return us_err_set(err, US_E_NOMEM, ".", "out of memory");
}

/* The directory whose config.json recipes and ties read: --overlay's when
 * it has one (the user added it for this), else SOURCE's.  @ov is the
 * overlay directory to close (US_DIR_NONE: none); the overlay is always
 * local, whatever SOURCE is. */
static enum us_status config_dir(const struct us_source_opts *opts,
				 const struct us_dir *dir,
				 const struct us_dir **cfg, struct us_dir *ov,
				 struct us_err *err)
{
	*cfg = dir;
	*ov = US_DIR_NONE;
	if (!opts || !opts->overlay)
		return US_OK;
	if (us_dir_open_path(opts->overlay, ov) < 0)
		return us_err_set(err, US_E_USAGE, opts->overlay,
				  "--overlay: cannot open the directory: %s",
				  strerror(errno));
	if (us_dir_exists(ov, "config.json"))
		*cfg = ov;
	return US_OK;
}

/* The one built-in recipe that fits, as a hint (none asked for). */
static void recipe_hint(struct us_statedict *sd)
{
	const char *name = NULL;

	if (us_recipe_auto(sd, &name, NULL) == US_OK)
		sd->recipe_hint = name;
}

/* --recipe: rename and re-lay the tensors before finalize checks them. */
static enum us_status apply_recipe(struct us_statedict *sd,
				   const struct us_source_opts *opts,
				   const struct us_dir *cfg,
				   struct us_err *err)
{
	const char *spec = opts ? opts->recipe : NULL;
	struct us_recipe *r;
	enum us_status rc;

	if (!spec) {
		if (opts && opts->recipe_hint)
			recipe_hint(sd);
		return US_OK;
	}
	if (strcmp(spec, "auto") == 0) {
		US_TRY(us_recipe_auto(sd, &spec, err));
		if (!spec)
			return us_err_set(err, US_E_UNSUPPORTED, ".", "--recipe=auto: "
					  "no built-in recipe fits every tensor name "
					  "(docs/recipes.md: write one)");
	}
	US_TRY(us_recipe_load(spec, &r, err));
	rc = us_recipe_apply(sd, r, cfg, err);
	us_recipe_free(r);
	return rc;
}

/* Pick the reader for SOURCE and run it, then everything that turns what
 * it described into the finalized state dict. */
static enum us_status read_source(struct us_statedict *sd,
				  const struct us_source_opts *opts,
				  const struct us_dir *dir, const char *file,
				  const struct us_dir *cfg, struct us_err *err)
{
	const char *format = opts ? opts->format : NULL;
	const struct us_reader *r = pick_reader(format, dir, file);
	enum us_status rc;

	if (!r && format && strcmp(format, "auto") != 0)
		return us_err_set(err, US_E_USAGE, file ? file : ".",
				  "format '%s' is not supported", format);
	if (!r)
		return us_err_set(err, US_E_FORMAT, file ? file : ".",
				  "no checkpoint found (looked for safetensors "
				  "files or their index, torch.save files (.bin .pt "
				  ".pth .ckpt) or their index, a DCP .metadata, a "
				  "DeepSpeed latest or global_step*/)");
	sd->names = opts ? &opts->names : NULL;
	rc = r->read(sd, dir, file, opts, err);
	if (rc == US_OK)
		rc = us_sd_resolve_aliases(sd, err);
	if (rc == US_OK)
		rc = us_names_apply(sd, opts ? &opts->names : NULL, err);
	if (rc == US_OK && sd->optim)
		rc = us_names_apply_optim(sd->optim, opts ? &opts->names : NULL, err);
	if (rc == US_OK)
		rc = apply_recipe(sd, opts, cfg, err);
	if (rc == US_OK)
		rc = us_sd_finalize(sd, err);
	if (rc == US_OK)
		rc = us_ties_detect(sd, opts ? opts->ties : US_TIES_AUTO, cfg,
				    opts && opts->progress, err);
	if (rc == US_OK)
		us_recipe_present(sd);
	/* Last: ties are found on the stored bytes. */
	for (size_t i = 0; rc == US_OK && i < sd->ntensors; i++)
		if (sd->tensors[i].upcast_f32)
			us_tensor_present_as(&sd->tensors[i], US_DT_F32);
	if (rc == US_OK && opts && opts->cast)
		us_sd_present_as(sd, opts->cast_to);
	return rc;
}

enum us_status us_source_open(const char *path,
			      const struct us_source_opts *opts,
			      struct us_statedict **out, struct us_dir *dir_out,
			      struct us_err *err)
{
	struct us_dir dir = US_DIR_NONE, ov;
	const struct us_dir *cfg;
	struct us_remote *remote = NULL;
	struct us_statedict *sd = NULL;
	char *file = NULL;
	enum us_status rc;

	*out = NULL;
	*dir_out = US_DIR_NONE;
	if (us_remote_is_url(path))
		rc = open_remote(path, opts, &remote, &dir, &file, err);
	else
		rc = open_local(path, &dir, &file, err);
	if (rc != US_OK)
		return rc;
	if ((rc = config_dir(opts, &dir, &cfg, &ov, err)) != US_OK)
		goto fail;
	if (!(sd = us_sd_new())) {
		rc = us_err_set(err, US_E_NOMEM, ".", "out of memory");
		goto fail;
	}
	/* The state dict owns the store from here: its files read from it. */
	sd->remote = remote;
	remote = NULL;
	if ((rc = read_source(sd, opts, &dir, file, cfg, err)) != US_OK)
		goto fail;
	*out = sd;
	us_dir_close(&ov);
	if (file)
		us_dir_close(&dir);
	else
		*dir_out = dir;
	free(file);
	return US_OK;
fail:
	us_dir_close(&ov);
	us_dir_close(&dir);
	us_sd_free(sd);
	us_remote_free(remote);
	free(file);
	return rc;
}
