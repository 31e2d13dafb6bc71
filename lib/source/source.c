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

static const struct us_reader *pick_reader(const char *format, int dirfd,
					   const char *file)
{
	for (size_t i = 0; i < NREADERS; i++) {
		if (format && strcmp(format, "auto") != 0) {
			if (strcmp(format, readers[i]->name) == 0)
				return readers[i];
		} else if (readers[i]->probe(dirfd, file)) {
			return readers[i];
		}
	}
	return NULL;
}

bool us_source_probe(int dirfd)
{
	return pick_reader(NULL, dirfd, NULL) != NULL;
}

/* Split @path into an opened parent directory and a base name (*@base
 * set only when the directory opened; -1 with errno otherwise). */
static int open_parent(const char *path, char **base)
{
	char *a = strdup(path), *b = strdup(path);
	int fd = -1;

	errno = ENOMEM;
	if (a && b && (fd = open(dirname(a), O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0 &&
	    !(*base = strdup(basename(b)))) {
		close(fd);
		fd = -1;
		errno = ENOMEM;
	}
	free(a);
	free(b);
	return fd;
}

/* The directory whose config.json recipes and ties read: --overlay's when
 * it has one (the user added it for this), else SOURCE's.  *@ovfd is the
 * overlay's descriptor to close (-1: none). */
static enum us_status config_dir(const struct us_source_opts *opts, int dirfd,
				 int *cfgfd, int *ovfd, struct us_err *err)
{
	*cfgfd = dirfd;
	*ovfd = -1;
	if (!opts || !opts->overlay)
		return US_OK;
	*ovfd = open(opts->overlay, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*ovfd < 0)
		return us_err_set(err, US_E_USAGE, opts->overlay,
				  "--overlay: cannot open the directory: %s",
				  strerror(errno));
	if (faccessat(*ovfd, "config.json", F_OK, 0) == 0)
		*cfgfd = *ovfd;
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
				   const struct us_source_opts *opts, int cfgfd,
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
	rc = us_recipe_apply(sd, r, cfgfd, err);
	us_recipe_free(r);
	return rc;
}

enum us_status us_source_open(const char *path,
			      const struct us_source_opts *opts,
			      struct us_statedict **out, int *dirfd_out,
			      struct us_err *err)
{
	const char *format = opts ? opts->format : NULL;
	const struct us_reader *r;
	struct us_statedict *sd;
	char *file = NULL;
	struct stat st;
	enum us_status rc;
	int dirfd, cfgfd, ovfd = -1;

	*out = NULL;
	*dirfd_out = -1;
	if (stat(path, &st) < 0)
		return us_err_set(err, US_E_IO, ".", "cannot access SOURCE: %s",
				  strerror(errno));
	if (S_ISDIR(st.st_mode))
		dirfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	else
		dirfd = open_parent(path, &file);
	if (dirfd < 0)
		return us_err_set(err, US_E_IO, ".", "cannot open SOURCE %s: %s",
				  path, strerror(errno));
	if ((rc = config_dir(opts, dirfd, &cfgfd, &ovfd, err)) != US_OK)
		goto fail;
	r = pick_reader(format, dirfd, file);
	if (!r && format && strcmp(format, "auto") != 0) {
		rc = us_err_set(err, US_E_USAGE, file ? file : ".",
				"format '%s' is not supported", format);
		goto fail;
	}
	if (!r) {
		rc = us_err_set(err, US_E_FORMAT, file ? file : ".",
				"no checkpoint found (looked for safetensors "
				"files or their index, torch.save files (.bin .pt "
				".pth .ckpt) or their index, a DCP .metadata, a "
				"DeepSpeed latest or global_step*/)");
		goto fail;
	}
	sd = us_sd_new();
	if (!sd) {
		rc = us_err_set(err, US_E_NOMEM, ".", "out of memory");
		goto fail;
	}
	sd->names = opts ? &opts->names : NULL;
	rc = r->read(sd, dirfd, file, opts, err);
	if (rc == US_OK)
		rc = us_sd_resolve_aliases(sd, err);
	if (rc == US_OK)
		rc = us_names_apply(sd, opts ? &opts->names : NULL, err);
	if (rc == US_OK && sd->optim)
		rc = us_names_apply_optim(sd->optim, opts ? &opts->names : NULL, err);
	if (rc == US_OK)
		rc = apply_recipe(sd, opts, cfgfd, err);
	if (rc == US_OK)
		rc = us_sd_finalize(sd, err);
	if (rc == US_OK)
		rc = us_ties_detect(sd, opts ? opts->ties : US_TIES_AUTO, cfgfd,
				    opts && opts->progress, err);
	if (rc == US_OK)
		us_recipe_present(sd);
	/* Last: ties are found on the stored bytes. */
	for (size_t i = 0; rc == US_OK && i < sd->ntensors; i++)
		if (sd->tensors[i].upcast_f32)
			us_tensor_present_as(&sd->tensors[i], US_DT_F32);
	if (rc == US_OK && opts && opts->cast)
		us_sd_present_as(sd, opts->cast_to);
	if (rc != US_OK) {
		us_sd_free(sd);
		goto fail;
	}
	*out = sd;
	if (ovfd >= 0)
		close(ovfd);
	if (file)
		close(dirfd);
	else
		*dirfd_out = dirfd;
	free(file);
	return US_OK;
fail:
	if (ovfd >= 0)
		close(ovfd);
	close(dirfd);
	free(file);
	return rc;
}
