/*
 * ties.h - tied weights: several names, one tensor.
 *
 * Two kinds of evidence (design.md, issue 4):
 *  - declared: names whose chunks point at the very same source bytes (a
 *    torch.save storage shared by two names; a safetensors "<dropped>":
 *    "<kept>" record, which the reader turns into an alias of the kept
 *    tensor).  Same bytes by construction: always linked unless ties=off.
 *  - proven: formats that store every name separately (DCP saves a tied
 *    pair as two copies; the reader sets sd->prove_ties).  Candidates of equal dtype and shape are linked
 *    only after their bytes are compared, streamed through two fixed 1 MiB
 *    buffers; one differing byte keeps them apart.  Constant tensors (fresh
 *    LayerNorm weights, zero biases, scalars -- any tensor whose first 4 KiB
 *    repeat one element) are never linked by proof: they are equal by
 *    initialisation, not by tying, and excluding them by their first 4 KiB
 *    bounds the work at mount.
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
	US_TIES_AUTO,     /* declared and proven */
	US_TIES_DECLARED, /* declared only: no bytes are read at mount */
	US_TIES_OFF,      /* every name is its own tensor */
};

/* us_ties_mode_parse - "auto", "declared" or "off". */
bool us_ties_mode_parse(const char *s, enum us_ties_mode *out);

/*
 * us_ties_detect - set tie_of and nlinks on every tensor of the finalized
 * @sd.  Proving reads tensor bytes: with @progress, a line on stderr
 * reports it when it takes more than a second.  An I/O error while proving
 * is a refusal (the mount would serve the same bytes).
 */
enum us_status us_ties_detect(struct us_statedict *sd, enum us_ties_mode mode,
			      bool progress, struct us_err *err);

#endif /* US_TIES_H */
