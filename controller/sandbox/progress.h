/* Progress of long work on stderr, only when stderr is a terminal and the
 * output is not JSON: bytes done, rate and time left, redrawn in place. */
#ifndef SBX_PROGRESS_H
#define SBX_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "controller/snapshot/snapshot.h"

/* Whether progress should be shown (stderr is a terminal, not --json). */
bool progress_enabled(bool json);
/* A snapshot_progress_fn: ARG is ignored. */
void progress_snapshot(void *arg, const struct snapshot_progress *p);

/* Rate-limited reporting of one phase of work (at most 4 calls a second,
 * plus the last). FN may be NULL: then nothing is reported. */
struct progress_meter {
  snapshot_progress_fn fn;
  void *arg;
  const char *phase;
  uint64_t t0_ns, last_ns;
};

void progress_meter_start(struct progress_meter *m, snapshot_progress_fn fn,
                          void *arg, const char *phase);
void progress_meter_update(struct progress_meter *m, uint64_t done,
                           uint64_t total, bool finished);

#endif
