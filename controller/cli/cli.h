/* The sbx command line. cli_main parses argv and returns the exit code:
 * 0 done, 1 the run failed (model or tool error), 2 usage or configuration
 * error, 3 waiting for approval. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdbool.h>

#include "controller/sandbox/lifecycle.h"
#include "shared/errors.h"

struct snapshot_limits;

int cli_main(int argc, char **argv);

/* Loads and attaches to the developer-owned sandbox ID in STATE_DIR (NULL:
 * the default), starting its sandboxd again when it was stopped. Returns 0,
 * or the exit code (1 or 2) with E saying why. */
int cli_attach(const char *state_dir, const char *id,
               struct lifecycle_record *rec, struct sandbox **out,
               struct sbx_error *e);

/* Resumes a saved session state (sbx sandbox save): the live sandbox when
 * it still runs under the same session id and accepts this controller's
 * token, else a new sandbox from the trusted manifest (TRUSTED, else the
 * state's) with the snapshot restored within LIMITS (NULL or 0 fields: the
 * defaults). The manifest's local sources are resolved against BASE_DIR,
 * else TRUSTED's directory, else the base directory recorded with the
 * saved sandbox; never the current directory. ID_OUT gets the sandbox
 * id. Returns 0 or a negative errno with E saying which step failed
 * (-EINVAL: the state or manifest file is unusable). */
int cli_session_resume(const char *state_dir, const char *path,
                       const char *trusted, const char *base_dir,
                       const struct snapshot_limits *limits, bool progress,
                       char id_out[STATE_ID_LEN + 1], bool *reconnected,
                       struct sbx_error *e);

#endif
