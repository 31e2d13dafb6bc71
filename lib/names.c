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
static char *unwrap_optim_name(const char *name, const struct us_names_opts *o)
{
	const char *param = name + 6, *slot = strrchr(name, '.');
	size_t plen;
	char *in, *out;

	if (strncmp(name, "state.", 6) != 0 || slot <= param)
		return NULL; /* not a per-parameter entry: keep it */
	plen = (size_t)(slot - param);
	in = strndup(param, plen);
	out = malloc(strlen(name) + 1);
	if (in && out) {
		us_unwrap_name(in, o, out + 6);
		memcpy(out, "state.", 6);
		strcat(out, slot);
	} else {
		free(out);
		out = NULL;
	}
	free(in);
	return out;
}

/* Unwrap, in place, every string of the JSON array @list. */
static void unwrap_json_names(cJSON *list, const struct us_names_opts *o)
{
	cJSON *p;

	cJSON_ArrayForEach(p, list) {
		char *buf;

		if (!cJSON_IsString(p) || !(buf = malloc(strlen(p->valuestring) + 1)))
			continue;
		us_unwrap_name(p->valuestring, o, buf);
		cJSON_SetValuestring(p, buf);
		free(buf);
	}
}

void us_unwrap_json_groups(cJSON *groups, const struct us_names_opts *o)
{
	cJSON *g;

	cJSON_ArrayForEach(g, groups) {
		unwrap_json_names(cJSON_GetObjectItemCaseSensitive(g, "params"), o);
		unwrap_json_names(cJSON_GetObjectItemCaseSensitive(g, "param_names"), o);
	}
}

void us_unwrap_json_optim_keys(cJSON *obj, const struct us_names_opts *o)
{
	cJSON *fresh = cJSON_CreateObject();

	if (!fresh || !cJSON_IsObject(obj))
		goto out;
	/* Keys cannot be renamed in place: move each item to a new object. */
	while (obj->child) {
		cJSON *it = cJSON_DetachItemViaPointer(obj, obj->child);
		char *k = unwrap_optim_name(it->string, o);

		cJSON_AddItemToObject(fresh, k ? k : it->string, it);
		free(k);
	}
	obj->child = fresh->child; /* the moved items, under their new keys */
	fresh->child = NULL;
out:
	cJSON_Delete(fresh);
}

enum us_status us_names_apply_optim(struct us_statedict *sd,
				    const struct us_names_opts *o,
				    struct us_err *err)
{
	for (size_t i = 0; i < sd->ntensors; i++) {
		struct us_tensor *t = &sd->tensors[i];
		char *n = unwrap_optim_name(t->name, o);

		if (n && strcmp(n, t->name) != 0)
			t->name = us_arena_strdup(&sd->arena, n);
		free(n);
		if (!t->name)
			return us_err_set(err, US_E_NOMEM, ".", "out of memory");
	}
	return US_OK;
}

