/* The sandboxes of a run: which sandbox each agent works in. */
#ifndef SBX_RUN_SANDBOXES_H
#define SBX_RUN_SANDBOXES_H

#include <stdbool.h>

#include "controller/run/runner.h"
#include "controller/state/state.h"

/* The sandbox of agent A in a run with options O. The
 * starting agent of a --sandbox run (STARTING and o->sandbox) gets that
 * live sandbox with A's manifest applied (*BORROWED true); any other agent
 * gets a fresh one holding A's manifest, with local sources relative to
 * o->materialize.base_dir or A's file's directory. Then the run cwd is
 * checked for A's run_as. *CONFIG_ERROR tells a configuration error (exit
 * 2) from a failure (exit 1). On failure *SB may be set: the caller closes
 * it unless borrowed. With PERSIST_DIR, a new sandbox is created detached
 * and recorded there under RECORD_ID (a run's sandbox that survives pauses
 * and crashes). */
int run_agent_sandbox(const struct run_options *o, const struct agent *a,
                      bool starting, const char *persist_dir,
                      char record_id[STATE_ID_LEN + 1], struct sandbox **sb,
                      struct manifest **m, bool *borrowed, bool *config_error,
                      struct sbx_error *e);

#endif
