/* tie_evidence.c - the optimizer's parameter names and config.json's
 * tie_word_embeddings, as evidence of ties (tie_evidence.h). */
#include "tie_evidence.h"

#include <assert.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/json.h"
#include "io.h"

/* A config.json is a few KiB; anything far bigger is not one. */
#define MAX_CONFIG (4u << 20)

/*
 * Model types whose transformers 5 config class defaults tie_word_embeddings
 * to true.  transformers 4 defaulted every config to true and wrote the key
 * only where it differed, so for these an absent key means tied in both.
 * For any other type an absent key is no evidence: transformers 5 would read
 * the class default, which may be false (Llama's is), and a name dropped as
 * a tie would then be re-initialised.  Sorted (strcmp) for bsearch.
 */
static const char *const default_tied[] = {
	"albert", "bart", "bert", "bert-generation", "big_bird",
	"bigbird_pegasus", "biogpt", "blenderbot", "blenderbot-small", "bloom",
	"camembert", "cohere", "cohere2", "convbert", "ctrl", "data2vec-text",
	"deberta", "deberta-v2", "distilbert", "electra", "ernie", "esm",
	"falcon", "flaubert", "fnet", "funnel", "gemma", "gemma2", "gemma3",
	"gemma3_text", "gpt-sw3", "gpt2", "gpt_bigcode", "gpt_neo", "ibert",
	"jetmoe", "layoutlm", "led", "longformer", "longt5", "luke", "m2m_100",
	"marian", "mbart", "megatron-bert", "mobilebert", "modernbert", "mpnet",
	"mpt", "mt5", "mvp", "nystromformer", "openai-gpt", "opt", "pegasus",
	"pegasus_x", "plbart", "prophetnet", "recurrent_gemma", "roberta",
	"roberta-prelayernorm", "roc_bert", "roformer", "smollm3", "squeezebert",
	"starcoder2", "t5", "umt5", "whisper", "xglm", "xlm", "xlm-roberta",
	"xlm-roberta-xl", "xlnet", "xmod", "yoso",
};

static int cmp_str(const void *k, const void *e)
{
	return strcmp(k, *(const char *const *)e);
}

bool us_tie_model_type_ties(const char *model_type)
{
	return bsearch(model_type, default_tied,
		       sizeof(default_tied) / sizeof(default_tied[0]),
		       sizeof(default_tied[0]), cmp_str) != NULL;
}

/* ---- the embedding pair --------------------------------------------------- */

/*
 * The tied pairs of transformers' models, by the ends of their names:
 * {output embedding, input embedding}.  (Models that tie more than two
 * names, T5's and BART's shared/encoder/decoder embeddings, are not here:
 * left untied, which always loads.)
 */
static const struct {
	const char *out, *in;
} embed_pairs[] = {
	{"lm_head.weight", "embed_tokens.weight"},     /* Llama, Mistral, OPT, Gemma */
	{"lm_head.weight", "wte.weight"},              /* GPT-2, GPT-Neo, BigCode */
	{"lm_head.weight", "word_embeddings.weight"},  /* BLOOM, Falcon */
	{"lm_head.decoder.weight", "word_embeddings.weight"}, /* RoBERTa */
	{"lm_head.decoder.bias", "lm_head.bias"},
	{"cls.predictions.decoder.weight", "word_embeddings.weight"}, /* BERT */
	{"cls.predictions.decoder.bias", "cls.predictions.bias"},
	{"vocab_projector.weight", "word_embeddings.weight"}, /* DistilBERT */
};

/* @name ends with @suffix at a dot (or is it); the prefix's length. */
static bool ends_with(const char *name, const char *suffix, size_t *plen)
{
	size_t n = strlen(name), k = strlen(suffix);

	if (n < k || strcmp(name + n - k, suffix) != 0 ||
	    (n > k && name[n - k - 1] != '.'))
		return false;
	*plen = n - k;
	return true;
}

bool us_tie_embedding_pair(const char *out, const char *in)
{
	size_t po, pi;

	for (size_t i = 0; i < sizeof(embed_pairs) / sizeof(embed_pairs[0]); i++) {
		if (!ends_with(out, embed_pairs[i].out, &po) ||
		    !ends_with(in, embed_pairs[i].in, &pi))
			continue;
		/* one model: the input embedding sits under the head's
		 * container ("" / "model.", "language_model." /
		 * "language_model.model."), never under a sibling's
		 * ("teacher." / "student.model.") */
		if (pi >= po && strncmp(out, in, po) == 0)
			return true;
	}
	return false;
}

/* ---- the optimizer -------------------------------------------------------- */

/*
 * The model tensor that the optimizer key "state.<param>.<slot...>" is
 * about: the first dotted prefix of the rest that names one (a parameter is
 * a leaf: no parameter's name is another's prefix at a dot).  -1 when none
 * does, -2 when out of memory.
 */
static long state_param(const struct us_statedict *sd, const char *key)
{
	const char *p = key + 6, *dot;
	const struct us_tensor *t = NULL;
	char *buf;

	if (strncmp(key, "state.", 6) != 0)
		return -1;
	if (!(buf = strdup(p)))
		return -2;
	for (dot = strchr(p, '.'); dot && !t; dot = strchr(dot + 1, '.')) {
		buf[dot - p] = '\0';
		t = us_sd_find(sd, buf);
		buf[dot - p] = '.';
	}
	free(buf);
	return t ? (long)(t - sd->tensors) : -1;
}

/* Mark the tensor @idx names; false when it names none. */
static bool mark(struct us_tie_evidence *ev, long idx, size_t *entries)
{
	(*entries)++;
	if (idx < 0)
		return false;
	ev->named[idx] = true;
	return true;
}

/* Every "params" item of every group: a name of a model tensor.  A number
 * (a position: the optimizer was saved without names) spoils the evidence. */
static bool mark_groups(const struct us_statedict *sd, const cJSON *groups,
			struct us_tie_evidence *ev, size_t *entries)
{
	const cJSON *g, *p;
	bool ok = true;

	cJSON_ArrayForEach(g, groups) {
		cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(g, "params")) {
			const struct us_tensor *t = cJSON_IsString(p) ?
				us_sd_find(sd, p->valuestring) : NULL;

			ok &= mark(ev, t ? (long)(t - sd->tensors) : -1, entries);
		}
	}
	return ok;
}

/* The per-parameter scalars ("state.<param>.step") of optimizer.json. */
static int mark_scalars(const struct us_statedict *sd, const cJSON *scalars,
			struct us_tie_evidence *ev, size_t *entries)
{
	const cJSON *s;
	bool ok = true;

	cJSON_ArrayForEach(s, scalars) {
		long idx;

		if (!s->string || strncmp(s->string, "state.", 6) != 0)
			continue;
		if ((idx = state_param(sd, s->string)) == -2)
			return -1;
		ok &= mark(ev, idx, entries);
	}
	return ok;
}

static int mark_json(const struct us_statedict *sd, struct us_tie_evidence *ev,
		     size_t *entries)
{
	cJSON *root;
	int ok;

	if (!sd->optim_json)
		return 1;
	switch (us_json_parse(sd->optim_json, strlen(sd->optim_json), &root, NULL)) {
	case US_OK: break;
	case US_E_NOMEM: return -1;
	default: return 0; /* our own rendering: cannot happen, but no evidence */
	}
	ok = mark_groups(sd, cJSON_GetObjectItemCaseSensitive(root, "param_groups"),
			 ev, entries);
	if (ok) {
		int rc = mark_scalars(sd, cJSON_GetObjectItemCaseSensitive(root, "scalars"),
				      ev, entries);
		ok = rc < 0 ? -1 : rc;
	}
	cJSON_Delete(root);
	return ok;
}

/* 1: the optimizer names its parameters; 0: it does not; -1: no memory. */
static int gather_optim(const struct us_statedict *sd, struct us_tie_evidence *ev)
{
	const struct us_statedict *o = sd->optim;
	size_t entries = 0;
	int ok = 1;

	for (size_t i = 0; o && ok == 1 && i < o->ntensors; i++) {
		long idx = state_param(sd, o->tensors[i].name);

		if (idx == -2)
			return -1;
		ok = mark(ev, idx, &entries);
	}
	if (ok == 1)
		ok = mark_json(sd, ev, &entries);
	return ok < 0 ? -1 : ok == 1 && entries > 0;
}

/* ---- config.json ---------------------------------------------------------- */

/* config.json's text, NUL-terminated; NULL when absent, empty, odd or
 * too big (evidence only: never a refusal). */
static char *read_config(const struct us_dir *dir, size_t *len)
{
	char *text = NULL;

	if (!us_dir_is_open(dir) ||
	    us_read_small(dir, "config.json", MAX_CONFIG, &text, len) != US_OK)
		return NULL;
	if (text && *len == 0) {
		free(text);
		text = NULL;
	}
	return text;
}

/* tie_word_embeddings as transformers reads it: the key when it is a
 * boolean, else the model type's default where every version agrees. */
static bool config_ties(const cJSON *cfg)
{
	const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");

	if (tie)
		return cJSON_IsTrue(tie);
	return cJSON_IsString(type) && us_tie_model_type_ties(type->valuestring);
}

static void gather_config(const struct us_dir *dir, struct us_tie_evidence *ev)
{
	size_t len = 0;
	char *text = read_config(dir, &len);
	cJSON *cfg = NULL;
	uint64_t vocab;

	/* Evidence only: a config.json that does not parse (or out of
	 * memory) proposes no tie, the safe answer. */
	if (text)
		us_json_parse(text, len, &cfg, NULL);

	if (cJSON_IsObject(cfg) && config_ties(cfg) &&
	    us_json_u64(cJSON_GetObjectItemCaseSensitive(cfg, "vocab_size"), &vocab) &&
	    vocab > 0) {
		ev->embed_tied = true;
		ev->vocab = vocab;
	}
	cJSON_Delete(cfg);
	free(text);
}

enum us_status us_tie_evidence_gather(const struct us_statedict *sd,
				      const struct us_dir *dir,
				      struct us_tie_evidence *ev)
{
	int rc;

	assert(sd->finalized); /* names are sorted: us_sd_find */
	memset(ev, 0, sizeof(*ev));
	gather_config(dir, ev);
	/* The optimizer only vetoes what config.json proposes: without a
	 * proposal its JSON (50k parameters, say) need not be parsed again. */
	if (!ev->embed_tied)
		return US_OK;
	ev->named = calloc(sd->ntensors ? sd->ntensors : 1, sizeof(*ev->named));
	if (!ev->named)
		return US_E_NOMEM;
	if ((rc = gather_optim(sd, ev)) < 0) {
		us_tie_evidence_free(ev);
		return US_E_NOMEM;
	}
	ev->optim = rc == 1;
	return US_OK;
}

void us_tie_evidence_free(struct us_tie_evidence *ev)
{
	free(ev->named);
	ev->named = NULL;
}
