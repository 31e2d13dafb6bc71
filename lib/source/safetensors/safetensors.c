/*
 * safetensors.c - the safetensors reader: one file, a directory of shards
 * with a *.safetensors.index.json, or a directory of *.safetensors files.
 *
 * Validation follows the reference (Rust) reader exactly, because a file it
 * refuses must not become servable through us: the header is at most
 * 100,000,000 bytes of UTF-8 JSON starting with '{'; the data spans, sorted
 * by (begin, end), tile the data buffer from 0 with no hole or overlap, each
 * is numel * bits / 8 bytes, and the last one ends at the end of the file.
 * Only the header is read: tensor bytes are never touched at mount.
 */
#include "../source.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../codec/json.h"
#include "../../io.h"
#include "../../path.h"
#include "../index.h"
#include "st_dcp.h"

#define ST_MAX_HEADER 100000000ull
#define ST_SUFFIX ".safetensors"
#define ST_INDEX_SUFFIX ".safetensors.index.json"

struct st_entry {
	const char *name;
	enum us_dtype dtype;
	uint32_t ndim;
	uint64_t shape[US_MAX_NDIM];
	uint64_t begin, end;
};

static enum us_status st_read_header(const struct us_file *f, cJSON **root,
				     uint64_t *data_start, struct us_err *err)
{
	unsigned char len8[8];
	uint64_t n = 0;
	struct us_err why;
	enum us_status st;
	char *hdr;

	if (f->size < 8)
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "not a safetensors file: shorter than 8 bytes");
	if (us_file_pread(f, len8, 8, 0) != US_OK)
		return us_err_set(err, US_E_IO, f->relpath, "cannot read: %s",
				  us_file_strerror(f));
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	/* n is the file's first 8 bytes, unvalidated: any file can sit here
	 * under a .safetensors name (a symlink to /etc/passwd reads 'root:x:0'
	 * as 3475222254926655346), so the messages say what is wrong without
	 * printing it.  The file's size is ours (fstat). */
	if (n > ST_MAX_HEADER)
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "its 8-byte header length is over the "
				  "100000000-byte limit: not a safetensors file, "
				  "or a corrupt one");
	if (n + 8 > (uint64_t)f->size)
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "its 8-byte header length runs past the end of "
				  "the file (%lld bytes): truncated, or not a "
				  "safetensors file", (long long)f->size);
	hdr = malloc(n ? n : 1);
	if (!hdr)
		return us_err_set(err, US_E_NOMEM, f->relpath, "out of memory");
	if (us_file_pread(f, hdr, n, 8) != US_OK) {
		us_err_set(err, US_E_IO, f->relpath, "cannot read: %s",
			   us_file_strerror(f));
		free(hdr);
		return US_E_IO;
	}
	if (n == 0 || hdr[0] != '{') {
		free(hdr);
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "header does not start with '{'");
	}
	st = us_json_parse(hdr, n, root, &why);
	free(hdr);
	if (st != US_OK)
		return us_err_set(err, st, f->relpath, "header %s", why.msg);
	if (!cJSON_IsObject(*root)) {
		cJSON_Delete(*root);
		return us_err_set(err, US_E_FORMAT, f->relpath,
				  "header is not a JSON object");
	}
	*data_start = 8 + n;
	return US_OK;
}

/* __metadata__ is {str: str}.  Entries may record dropped tied names as
 * "<dropped>": "<kept>" (huggingface_hub); each becomes an alias candidate. */
static enum us_status st_read_metadata(struct us_statedict *sd,
				       const cJSON *md, const char *path,
				       struct us_err *err)
{
	if (!cJSON_IsObject(md))
		return us_err_set(err, US_E_FORMAT, path,
				  "__metadata__ is not an object");
	for (const cJSON *c = md->child; c; c = c->next) {
		if (!strcmp(c->string, US_ST_DCP_KEY))
			continue; /* chunk placement, not a tie (st_dcp.h) */
		if (!cJSON_IsString(c))
			return us_err_set(err, US_E_FORMAT, path,
					  "__metadata__ value '%s' is not a "
					  "string", c->string);
		if (us_sd_add_alias(sd, c->string, c->valuestring) != US_OK)
			return us_err_set(err, US_E_NOMEM, path, "out of memory");
	}
	return US_OK;
}

static enum us_status st_parse_entry(const cJSON *j, struct st_entry *e,
				     const char *path, struct us_err *err)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
	int nd;

	e->name = j->string;
	if (!cJSON_IsObject(j) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
	    !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return us_err_set(err, US_E_FORMAT, path,
				  "tensor '%s': needs dtype, shape and two "
				  "data_offsets", e->name);
	if (!us_dtype_from_name(dt->valuestring, &e->dtype))
		return us_err_set(err, US_E_UNSUPPORTED, path,
				  "tensor '%s': unknown dtype '%s'", e->name,
				  dt->valuestring);
	nd = cJSON_GetArraySize(shape);
	if (nd > US_MAX_NDIM)
		return us_err_set(err, US_E_UNSUPPORTED, path,
				  "tensor '%s': %d dimensions (at most %d)",
				  e->name, nd, US_MAX_NDIM);
	e->ndim = (uint32_t)nd;
	for (int k = 0; k < nd; k++)
		if (!us_json_u64(cJSON_GetArrayItem(shape, k), &e->shape[k]))
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': shape is not a list of "
					  "non-negative integers", e->name);
	if (!us_json_u64(cJSON_GetArrayItem(offs, 0), &e->begin) ||
	    !us_json_u64(cJSON_GetArrayItem(offs, 1), &e->end))
		return us_err_set(err, US_E_FORMAT, path,
				  "tensor '%s': data_offsets are not "
				  "non-negative integers", e->name);
	return US_OK;
}

static int cmp_span(const void *a, const void *b)
{
	const struct st_entry *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

/* The spans, sorted, must tile [0, data_len) and match shape * dtype. */
static enum us_status st_check_spans(struct st_entry *v, size_t n,
				     uint64_t data_len, const char *path,
				     struct us_err *err)
{
	uint64_t pos = 0;

	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_span);
	for (size_t i = 0; i < n; i++) {
		uint64_t numel, nbytes;

		if (v[i].begin != pos || v[i].end < v[i].begin)
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': data_offsets [%llu, %llu] "
					  "leave a hole or overlap (expected to "
					  "start at %llu)", v[i].name,
					  (unsigned long long)v[i].begin,
					  (unsigned long long)v[i].end,
					  (unsigned long long)pos);
		if (!us_numel(v[i].ndim, v[i].shape, &numel) ||
		    !us_nbytes(v[i].dtype, numel, &nbytes))
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': shape overflows",
					  v[i].name);
		if (v[i].end - v[i].begin != nbytes)
			return us_err_set(err, US_E_FORMAT, path,
					  "tensor '%s': %llu bytes of data for "
					  "%llu bytes of %s elements", v[i].name,
					  (unsigned long long)(v[i].end - v[i].begin),
					  (unsigned long long)nbytes,
					  us_dtype_name(v[i].dtype));
		pos = v[i].end;
	}
	if (pos != data_len)
		return us_err_set(err, US_E_FORMAT, path,
				  "data is %llu bytes but the tensors cover %llu: "
				  "truncated, or trailing bytes",
				  (unsigned long long)data_len,
				  (unsigned long long)pos);
	return US_OK;
}

static enum us_status st_add_entries(struct us_statedict *sd, uint32_t file,
				     const struct st_entry *v, size_t n,
				     uint64_t data_start, struct us_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (!us_sd_add_whole_tensor(sd, v[i].name, v[i].dtype,
					    v[i].ndim, v[i].shape, file,
					    data_start + v[i].begin, err))
			return err ? err->status : US_E_NOMEM;
	return US_OK;
}

/*
 * The entries of a file that carries DCP_SHARDING_INFO: chunks for
 * @pieces when the directory's files are being merged; otherwise (an
 * index, or the file alone) each must be a whole tensor, at offset 0.
 */
static enum us_status st_add_chunks(struct us_statedict *sd, uint32_t file,
				    const struct st_entry *v, size_t n,
				    uint64_t data_start,
				    const struct us_st_info *info,
				    struct us_st_pieces *pieces,
				    struct us_err *err)
{
	const char *path = sd->files[file].relpath;
	struct us_st_pieces *one = pieces ? NULL : us_st_pieces_new();
	enum us_status rc = US_OK;

	if (!pieces && !one)
		return us_err_set(err, US_E_NOMEM, path, "out of memory");
	for (size_t i = 0; rc == US_OK && i < n; i++)
		rc = us_st_pieces_add(pieces ? pieces : one, info, v[i].name,
				      v[i].dtype, v[i].ndim, v[i].shape, file,
				      data_start + v[i].begin, path, err);
	if (rc == US_OK && one)
		rc = us_st_pieces_commit(one, sd, err);
	us_st_pieces_free(one);
	return rc;
}

static enum us_status st_read_file(struct us_statedict *sd,
				   const struct us_dir *dir,
				   const char *relpath,
				   struct us_st_pieces *pieces,
				   struct us_err *err)
{
	struct st_entry *v = NULL;
	cJSON *root = NULL;
	struct us_st_info *info = NULL;
	uint64_t data_start = 0;
	size_t n = 0;
	uint32_t file;
	enum us_status rc;

	US_TRY(us_sd_open_file(sd, dir, relpath, &file, err));
	rc = st_read_header(&sd->files[file], &root, &data_start, err);
	if (rc != US_OK)
		return rc;
	v = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof(*v));
	if (!v) {
		rc = us_err_set(err, US_E_NOMEM, relpath, "out of memory");
		goto out;
	}
	for (const cJSON *c = root->child; c; c = c->next) {
		if (strcmp(c->string, "__metadata__") == 0) {
			rc = st_read_metadata(sd, c, relpath, err);
			if (rc == US_OK)
				rc = us_st_sharding_info(c, &info, relpath, err);
		} else {
			rc = st_parse_entry(c, &v[n++], relpath, err);
		}
		if (rc != US_OK)
			goto out;
	}
	rc = st_check_spans(v, n, (uint64_t)sd->files[file].size - data_start,
			    relpath, err);
	if (rc == US_OK && info)
		rc = st_add_chunks(sd, file, v, n, data_start, info, pieces, err);
	else if (rc == US_OK)
		rc = st_add_entries(sd, file, v, n, data_start, err);
out:
	free(v);
	us_st_info_free(info);
	cJSON_Delete(root);
	return rc;
}

static enum us_status st_read_one(struct us_statedict *sd,
				  const struct us_dir *dir,
				  const char *relpath, struct us_err *err)
{
	return st_read_file(sd, dir, relpath, NULL, err);
}

/* ---- directory ----------------------------------------------------------- */

static bool has_name(char **names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

/* Every *.safetensors file of a directory without an index: one model in
 * several files, or one DCP save's per-rank shards, whose chunks of a name
 * make one tensor (st_dcp.h).  A lone file stays visible too unless it is
 * the view's own name (us_sd_unconsume says why). */
static enum us_status st_read_all(struct us_statedict *sd,
				  const struct us_dir *dir,
				  char **names, size_t n, struct us_err *err)
{
	struct us_st_pieces *pieces = us_st_pieces_new();
	const char *last = NULL;
	size_t read = 0;
	enum us_status rc = US_OK;

	if (!pieces)
		return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	for (size_t i = 0; rc == US_OK && i < n; i++) {
		if (!us_path_has_suffix(names[i], ST_SUFFIX))
			continue;
		rc = st_read_file(sd, dir, names[i], pieces, err);
		last = names[i];
		read++;
	}
	if (rc == US_OK && !read)
		rc = us_err_set(err, US_E_FORMAT, ".",
				"no *.safetensors file in the directory");
	if (rc == US_OK)
		rc = us_st_pieces_commit(pieces, sd, err);
	us_st_pieces_free(pieces);
	if (rc == US_OK && read == 1)
		us_sd_unconsume(sd, last);
	return rc;
}

/*
 * transformers' order: model.safetensors if it is there (the rest of the
 * directory -- a stale index and its shards, an adapter -- passes
 * through), else the index, else every *.safetensors file.
 */
static enum us_status st_read_dir(struct us_statedict *sd,
				  const struct us_dir *dir,
				  struct us_err *err)
{
	const char *index;
	char **names;
	size_t n;
	enum us_status rc;

	if (us_dirlist(dir, &names, &n) != US_OK)
		return us_err_set(err, US_E_IO, ".", "cannot list the directory");
	if (has_name(names, n, "model" ST_SUFFIX)) {
		rc = st_read_one(sd, dir, "model" ST_SUFFIX, err);
		goto out;
	}
	rc = us_index_find(names, n, "model" ST_INDEX_SUFFIX, ST_INDEX_SUFFIX,
			   &index, err);
	if (rc == US_OK && index)
		rc = us_index_read(sd, dir, index, st_read_one, err);
	else if (rc == US_OK)
		rc = st_read_all(sd, dir, names, n, err);
out:
	us_dirlist_free(names, n);
	return rc;
}

static bool st_dir_entry(const char *name)
{
	return us_path_has_suffix(name, ST_SUFFIX) ||
	       us_path_has_suffix(name, ST_INDEX_SUFFIX);
}

static bool st_probe(const struct us_dir *dir, const char *file)
{
	if (file)
		return us_path_has_suffix(file, ST_SUFFIX);
	return us_dir_any(dir, st_dir_entry);
}

static enum us_status st_read(struct us_statedict *sd, const struct us_dir *dir,
			      const char *file,
			      const struct us_source_opts *opts,
			      struct us_err *err)
{
	(void)opts; /* no format options */
	sd->format = "safetensors";
	if (file)
		return st_read_one(sd, dir, file, err);
	return st_read_dir(sd, dir, err);
}

const struct us_reader us_reader_safetensors = {
	.name = "safetensors",
	.probe = st_probe,
	.read = st_read,
};
