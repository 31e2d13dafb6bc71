/*
 * tie_evidence.h - what a checkpoint that saves every name (DCP) says about
 * which of its names are one parameter.
 *
 * Such a format stores a tied pair as two copies, so the extents say
 * nothing; equal bytes say nothing either (a LayerNorm after one AdamW step,
 * deep-copied layers at step 0).  Two things the writers leave do:
 *
 *  - an HF config.json beside the checkpoint whose tie_word_embeddings says
 *    the input and output embeddings are one tensor ([vocab_size, ...]):
 *    this proposes a pair;
 *  - the optimizer: torch's get_optimizer_state_dict and FSDP's
 *    optim_state_dict key state and param_groups' "params" by the FQN that
 *    named_parameters() yields, which visits a shared parameter once.  Two
 *    names the optimizer lists are two parameters: this vetoes a pair.  A
 *    name it does not list proves nothing: a frozen copy (an EMA, a teacher,
 *    PEFT's original_module, a buffer) is not listed either.
 *
 * ties.c proposes pairs from these and confirms them by their bytes.
 */
#ifndef US_TIE_EVIDENCE_H
#define US_TIE_EVIDENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct us_tie_evidence {
	/*
	 * The optimizer names its parameters: some entry does, and every
	 * entry (a param_groups "params" item, a "state.<param>.<slot>"
	 * tensor or scalar) resolves to a model tensor.  Then named[i] says
	 * whether sd->tensors[i] is one of them.  An optimizer that keys
	 * anything by position, or by a name the model lacks, is no evidence.
	 * Read only when embed_tied (named is NULL otherwise).
	 */
	bool optim;
	bool *named;
	/* config.json ties the word embeddings; they have vocab rows. */
	bool embed_tied;
	uint64_t vocab;
};

/*
 * us_tie_evidence_gather - read the evidence of the finalized @sd: its
 * optimizer (sd->optim, sd->optim_json) and "config.json" under @dir (the
 * SOURCE directory; -1 for none).  A missing or unreadable config.json is
 * no evidence, not an error.  Fails only when out of memory.
 */
enum us_status us_tie_evidence_gather(const struct us_statedict *sd,
				      const struct us_dir *dir,
				      struct us_tie_evidence *ev);

void us_tie_evidence_free(struct us_tie_evidence *ev);

/*
 * us_tie_embedding_pair - are @out and @in the output and input embeddings
 * of one transformers model ("lm_head.weight" and "model.embed_tokens.weight",
 * "cls.predictions.decoder.weight" and "bert.embeddings.word_embeddings.weight")?
 * config.json's tie_word_embeddings is about exactly such a pair.
 */
bool us_tie_embedding_pair(const char *out, const char *in);

/* us_tie_model_type_ties - transformers ties the embeddings of
 * @model_type when its config.json omits tie_word_embeddings. */
bool us_tie_model_type_ties(const char *model_type);

#endif /* US_TIE_EVIDENCE_H */
