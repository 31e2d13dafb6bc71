/*
 * pt_prune.h - which passthrough directories the mount leaves out.
 *
 * A directory whose every file the reader consumed (FSDP's
 * pytorch_model_fsdp_0/, Accelerate's optimizer_0/, DeepSpeed's
 * global_step2/) would show as an empty directory next to the views that
 * replace it: noise that invites a user to look for missing files.  Such a
 * directory is left out.  A directory that was empty, or holds anything the
 * reader did not consume, is still served as it is.
 */
#ifndef US_PT_PRUNE_H
#define US_PT_PRUNE_H

#include <stdbool.h>

#include "model.h"
#include "source/passthrough.h"

/*
 * us_pt_keep - fill @keep (pt->n entries) with whether entry i is served:
 * every file is; a directory is when it has a served entry under it or
 * held no consumed file.  @sd NULL: everything is kept.  0, or -1 when out
 * of memory.
 */
int us_pt_keep(const struct us_pt_list *pt, const struct us_statedict *sd,
	       bool *keep);

#endif /* US_PT_PRUNE_H */
