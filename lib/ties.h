/*
 * ties.h - tied weights: several names, one tensor.
 *
 * A tie is served only where the checkpoint says so (design.md: dropping a
 * name that is not a tie makes loaders re-initialise it):
 *  - declared: names whose chunks point at the very same source bytes (a
 *    torch.save storage shared by two names; a safetensors "<dropped>":
 *    "<kept>" record or DeepSpeed's shared_params, which readers turn into
 *    an alias of the kept tensor).  Same bytes by construction: always
 *    linked unless ties=off.
 *  - evidenced: formats that store every name separately (DCP saves a tied
 *    pair as two copies; the reader sets sd->ties_as_copies).  Only the
 *    writer's own evidence proposes a pair (tie_evidence.h: config.json
 *    ties the word embeddings of one model; the optimizer can only veto),
 *    and the pair is linked only when its bytes, compared in
 *    full through two fixed 1 MiB buffers, are equal.  Equal bytes never
 *    propose a pair (a LayerNorm after one AdamW step, deep-copied layers
 *    at step 0 are equal and distinct), except under the opt-in
 *    ties=equal.  Constant tensors (any tensor whose first 4 KiB repeat one
 *    element) are never linked from copies: their equality is
 *    initialisation.
 *
 * In each group the name that came first in the source is canonical (the
 * embedding precedes the output head in a state dict, and transformers
 * expects the embedding to be the stored one); the others get tie_of.
 */
#ifndef US_TIES_H
#define US_TIES_H

#include <stdbool.h>

#include "model.h"

enum us_ties_mode {
	US_TIES_AUTO,     /* declared, and evidenced copies with equal bytes */
	US_TIES_DECLARED, /* declared only: no bytes are read at mount */
	US_TIES_OFF,      /* every name is its own tensor */
	US_TIES_EQUAL,    /* auto, and any copies with equal bytes (opt-in:
			   * links distinct parameters that happen to match) */
};

/* us_ties_mode_parse - "auto", "declared", "off" or "equal". */
bool us_ties_mode_parse(const char *s, enum us_ties_mode *out);
/* us_ties_mode_name - the spelling us_ties_mode_parse reads back. */
const char *us_ties_mode_name(enum us_ties_mode mode);

/*
 * us_ties_detect - set tie_of and nlinks on every tensor of the finalized
 * @sd.  @dir is the SOURCE directory, where config.json is looked for
 * (US_DIR_NONE: none).  Confirming reads tensor bytes: with @progress, a line on stderr
 * reports it when it takes more than a second.  An I/O error while
 * confirming is a refusal (the mount would serve the same bytes).
 */
enum us_status us_ties_detect(struct us_statedict *sd, enum us_ties_mode mode,
			      const struct us_dir *dir, bool progress,
			      struct us_err *err);

#endif /* US_TIES_H */
