/* text.c - a view of fixed text known at mount (optimizer.json). */
#include "view.h"

#include <stdlib.h>
#include <string.h>

static enum us_status text_read(struct us_assembler *as,
				const struct us_view *v, char *buf, size_t len,
				uint64_t off)
{
	(void)as; /* no tensor in it */
	memcpy(buf, (const char *)v->priv + off, len);
	return US_OK;
}

static void text_destroy(struct us_view *v)
{
	free(v->priv);
}

static const struct us_view_ops text_ops = {
	.read = text_read,
	.destroy = text_destroy,
};

enum us_status us_view_text_new(const char *name, const char *text,
				struct us_view **out, struct us_err *err)
{
	struct us_view *v = calloc(1, sizeof(*v));
	char *copy = strdup(text);

	if (!v || !copy) {
		free(v);
		free(copy);
		return us_err_set(err, US_E_NOMEM, name, "out of memory");
	}
	v->name = name;
	v->size = strlen(copy);
	v->ops = &text_ops;
	v->priv = copy;
	*out = v;
	return US_OK;
}
