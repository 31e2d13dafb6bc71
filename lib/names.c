/* names.c - removing wrapper segments and prefixes from tensor names. */
#include "names.h"

#include <stdlib.h>

#include <cjson/cJSON.h>
#include <string.h>

static const char *const wrapper_segments[] = {
	"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod",
	"_forward_module", "_fpw_module",
};

static bool is_wrapper(const char *seg, size_t len)
{
	for (size_t i = 0; i < sizeof(wrapper_segments) / sizeof(*wrapper_segments); i++)
		if (strlen(wrapper_segments[i]) == len &&
		    memcmp(wrapper_segments[i], seg, len) == 0)
			return true;
	return false;
}

/* Copy @src to @out segment by segment, dropping wrapper segments and the
 * leading run of "module" segments. */
static void drop_wrappers(const char *src, char *out)
{
	bool leading = true;
	size_t o = 0;

	for (const char *seg = src;;) {
		const char *dot = strchr(seg, '.');
		size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
		bool drop = is_wrapper(seg, len) ||
			    (leading && len == 6 && memcmp(seg, "module", 6) == 0);

		if (!drop) {
			/* after the first kept segment, even an empty one:
			 * ".w" and "..w" keep their leading dots */
			if (!leading)
				out[o++] = '.';
			memcpy(out + o, seg, len);
			o += len;
			leading = false;
		}
		if (!dot)
			break;
		seg = dot + 1;
	}
	out[o] = '\0';
}

/* Remove @prefix from @name when it ends on a segment boundary (or the
 * prefix itself ends with a dot). */
static void strip_prefix(char *name, const char *prefix)
{
	size_t p = strlen(prefix), n = strlen(name);

	if (p == 0 || p >= n || memcmp(name, prefix, p) != 0)
		return;
	if (prefix[p - 1] != '.' && name[p] != '.')
		return;
	if (name[p] == '.')
		p++;
	memmove(name, name + p, n - p + 1);
}

void us_unwrap_name(const char *src, const struct us_names_opts *o, char *out)
{
	if (o && o->no_unwrap)
		strcpy(out, src);
	else
		drop_wrappers(src, out);
	for (size_t i = 0; o && i < o->nstrip; i++)
		strip_prefix(out, o->strip_prefix[i]);
	if (!*out)
		strcpy(out, src);
}

enum us_status us_names_apply(struct us_statedict *sd,
			      const struct us_names_opts *o,
			      struct us_err *err)
{
	for (size_t i = 0; i < sd->ntensors; i++) {
		struct us_tensor *t = &sd->tensors[i];
		char *buf = malloc(strlen(t->name) + 1);

		if (!buf)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
		us_unwrap_name(t->name, o, buf);
		if (strcmp(buf, t->name) != 0)
			t->name = us_arena_strdup(&sd->arena, buf);
		free(buf);
		if (!t->name)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	return US_OK;
}

bool us_is_model_container(const char *k)
{
	static const char *const keys[] = {
		"state_dict", "model_state_dict", "model", "module", "net",
	};

	for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
		if (!strcmp(k, keys[i]))
			return true;
	return false;
}

bool us_is_optimizer_container(const char *k)
{
	return !strcmp(k, "optim") || !strcmp(k, "optimizer") ||
	       !strncmp(k, "optimizer_", 10) || !strcmp(k, "optimizers") ||
	       !strcmp(k, "lr_scheduler") || !strcmp(k, "lr_schedulers") ||
	       !strcmp(k, "scheduler");
}

/* "state.<param>.<slot>" -> "state." + unwrap(<param>) + ".<slot>". */
/* "state.<param>.<slot>" with <param> unwrapped, in *@out (malloc'ed), or
 * *@out NULL when @name is not a per-parameter entry (kept as it is).
 * Out of memory is a failure, never "keep it": names must not depend on
 * the machine's memory (tests/faultinject). */
static enum us_status unwrap_optim_name(const char *name,
					const struct us_names_opts *o,
					char **out)
{
	const char *param = name + 6, *slot = strrchr(name, '.');
	char *in;

	*out = NULL;
	if (strncmp(name, "state.", 6) != 0 || slot <= param)
		return US_OK;
	in = strndup(param, (size_t)(slot - param));
	*out = malloc(strlen(name) + 1);
	if (!in || !*out) {
		free(in);
		free(*out);
		*out = NULL;
		return US_E_NOMEM;
	}
	us_unwrap_name(in, o, *out + 6);
	memcpy(*out, "state.", 6);
	strcat(*out, slot);
	free(in);
	return US_OK;
}

/* Unwrap, in place, every string of the JSON array @list.  Unwrapping
 * only shortens a name, so cJSON_SetValuestring copies in place. */
static enum us_status unwrap_json_names(cJSON *list,
					const struct us_names_opts *o)
{
	cJSON *p;

	cJSON_ArrayForEach(p, list) {
		char *buf;

		if (!cJSON_IsString(p))
			continue;
		if (!(buf = malloc(strlen(p->valuestring) + 1)))
			return US_E_NOMEM;
		us_unwrap_name(p->valuestring, o, buf);
		p = cJSON_SetValuestring(p, buf) ? p : NULL;
		free(buf);
		if (!p)
			return US_E_NOMEM;
	}
	return US_OK;
}

enum us_status us_unwrap_json_groups(cJSON *groups,
				     const struct us_names_opts *o)
{
	cJSON *g;

	cJSON_ArrayForEach(g, groups) {
		US_TRY(unwrap_json_names(cJSON_GetObjectItemCaseSensitive(g, "params"), o));
		US_TRY(unwrap_json_names(cJSON_GetObjectItemCaseSensitive(g, "param_names"), o));
	}
	return US_OK;
}

/* Move @obj's first item to @fresh under its unwrapped key. */
static enum us_status move_optim_key(cJSON *obj, cJSON *fresh,
				     const struct us_names_opts *o)
{
	cJSON *it = obj->child;
	char *k;

	US_TRY(unwrap_optim_name(it->string, o, &k));
	cJSON_DetachItemViaPointer(obj, it);
	if (!cJSON_AddItemToObject(fresh, k ? k : it->string, it)) {
		/* its key could not be copied: the mount is refused */
		cJSON_Delete(it);
		free(k);
		return US_E_NOMEM;
	}
	free(k);
	return US_OK;
}

enum us_status us_unwrap_json_optim_keys(cJSON *obj,
					 const struct us_names_opts *o)
{
	cJSON *fresh;
	enum us_status rc = US_OK;

	if (!cJSON_IsObject(obj))
		return US_OK;
	if (!(fresh = cJSON_CreateObject()))
		return US_E_NOMEM;
	/* Keys cannot be renamed in place: move each item to a new object. */
	while (rc == US_OK && obj->child)
		rc = move_optim_key(obj, fresh, o);
	if (rc == US_OK) {
		obj->child = fresh->child; /* the moved items, new keys */
		fresh->child = NULL;
	}
	cJSON_Delete(fresh);
	return rc;
}

enum us_status us_names_apply_optim(struct us_statedict *sd,
				    const struct us_names_opts *o,
				    struct us_err *err)
{
	for (size_t i = 0; i < sd->ntensors; i++) {
		struct us_tensor *t = &sd->tensors[i];
		char *n;

		if (unwrap_optim_name(t->name, o, &n) != US_OK)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
		if (n && strcmp(n, t->name) != 0)
			t->name = us_arena_strdup(&sd->arena, n);
		free(n);
		if (!t->name)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	return US_OK;
}

