/* Progress of long work on stderr, only when stderr is a terminal and the
 * output is not JSON: bytes done, rate and time left, redrawn in place. */
#ifndef SBX_PROGRESS_H
#define SBX_PROGRESS_H

#include <stdbool.h>

#include "snapshot.h"

/* Whether progress should be shown (stderr is a terminal, not --json). */
bool progress_enabled(bool json);
/* A snapshot_progress_fn: ARG is ignored. */
void progress_snapshot(void *arg, const struct snapshot_progress *p);

#endif
