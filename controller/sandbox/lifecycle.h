/* Sandbox lifecycle: creating a sandbox for a manifest (backend checks,
 * grants and bind mounts, materialization, close on failure), the
 * developer-owned sandboxes kept in the state directory (create, attach,
 * start, stop, close), the run cwd check, exposed ports, and what the
 * runner asks for each agent.
 *
 * Owned sandboxes (one run's) are closed by their run. Developer-owned
 * ones live until `sbx sandbox rm`: their record (state.h) holds the
 * backend's fields, the persisted manifest (no ephemeral values, no host
 * paths), the exposed ports, the owner and the base directory its
 * manifest's local sources were read from (for a restore). */
#ifndef SBX_LIFECYCLE_H
#define SBX_LIFECYCLE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/backend/backend.h"
#include "controller/config/agent.h"
#include "controller/config/manifest.h"
#include "controller/sandbox/materialize.h"
#include "controller/state/state.h"
#include "shared/errors.h"

#define LIFECYCLE_MAX_PORTS 64

struct lifecycle_options {
  const struct backend *backend;
  struct backend_options bo; /* with the exposed ports */
  struct materialize_options mo;
  /* Developer-owned: the operator's labels and when the sandbox stops by
   * itself (struct sandbox_spec's; 0: never). */
  const struct sandbox_label *labels;
  size_t nlabels;
  int64_t expires_at;
  unsigned idle_timeout_s;
};

/* A developer-owned sandbox as loaded from its record. */
struct lifecycle_record {
  char id[STATE_ID_LEN + 1];
  char dir[4096];            /* the state directory */
  json_t *rec;               /* the record (new) */
  struct manifest *manifest; /* what it holds */
  uint16_t ports[LIFECYCLE_MAX_PORTS];
  size_t nports;
};

/* Parses a port 1..65535 ("Exposed ports must be integers between 1 and
 * 65535."). */
int lifecycle_parse_port(const char *s, uint16_t *out, struct sbx_error *e);

/* Refuses what backend B cannot do with M (its features): cloud mounts on
 * any backend today, local_bind mounts, read-only ones and host_path
 * grants where B lacks them. */
int lifecycle_check_manifest(const struct manifest *m, const struct backend *b,
                             struct sbx_error *e);

/* Creates a sandbox holding M: refuses what the backend cannot do, creates
 * it with M's grants and bind mounts (DETACHED: developer-owned, with
 * TOKEN_PATH and LOG_PATH), materializes M and closes it again on failure.
 * *OUT is new. */
int lifecycle_create(const struct lifecycle_options *o,
                     const struct manifest *m, bool detached,
                     const char *token_path, const char *log_path,
                     struct sandbox **out, struct sbx_error *e);

/* The paths a snapshot of a sandbox holding M leaves out and a restore
 * keeps: its ephemeral entries (their contents are not in the saved
 * manifest) and mounts. A new NULL-terminated array of paths borrowed from
 * M (free the array only), or NULL when out of memory. */
const char **lifecycle_snapshot_excludes(const struct manifest *m);

/* Writes the record of developer-owned SB (id ID) in state directory DIR. */
int lifecycle_save(const char *dir, const char *id, const struct sandbox *sb,
                   const struct manifest *m, const uint16_t *ports,
                   size_t nports, const char *created_at, long owner_pid,
                   struct sbx_error *e);

/* As lifecycle_save, with EXTRA's keys (borrowed; may be NULL) in the
 * record too: meta.h's name, labels, time to live and idle timeout. */
int lifecycle_save_extra(const char *dir, const char *id,
                         const struct sandbox *sb, const struct manifest *m,
                         const uint16_t *ports, size_t nports,
                         const char *created_at, long owner_pid, json_t *extra,
                         struct sbx_error *e);

/* Records in the record ID of DIR the base directory its manifest's
 * local sources were resolved against (made absolute), so that a restore
 * resolves them there too, wherever it runs. */
int lifecycle_save_base_dir(const char *dir, const char *id, const char *base,
                            struct sbx_error *e);
/* R's recorded base directory (absolute; borrowed), or NULL. */
const char *lifecycle_base_dir(const struct lifecycle_record *r);
/* Whether M has local_file or local_dir entries, read from the host. */
bool lifecycle_has_local_sources(const struct manifest *m);

/* Loads the record of WANT (an id, a name or a unique id prefix) from
 * DIR. */
int lifecycle_load(const char *dir, const char *want,
                   struct lifecycle_record *r, struct sbx_error *e);
void lifecycle_record_clear(struct lifecycle_record *r);

/* Attaches to R's sandbox: *OUT has its client connected when it runs
 * and its manifest's environment. Detach it with backend->detach. */
int lifecycle_attach(const struct lifecycle_record *r,
                     const struct backend_options *bo, struct sandbox **out,
                     struct sbx_error *e);
/* Whether the recorded sandbox ID of DIR is running: its sandboxd answers
 * (attached and let go again). False when it is stopped, gone or its
 * record cannot be read. */
bool lifecycle_running(const char *dir, const char *id);
/* Rewrites R's record for SB (after start, stop or new entries), keeping
 * its name, labels, time to live, idle timeout and base directory. */
int lifecycle_resave(struct lifecycle_record *r, const struct sandbox *sb,
                     const struct manifest *m, struct sbx_error *e);

/* Checks the run cwd: a directory that RUN_AS (NULL: sandboxd's user) can
 * enter and read. The SDK's message otherwise. */
int lifecycle_check_cwd(struct sandbox *sb, const char *cwd, const char *run_as,
                        struct sbx_error *e);

/* Where exposed PORT of SB is reachable: "HOST:PORT" in OUT. Refuses a
 * port not in PORTS ("... was not configured to expose port N."). */
int lifecycle_resolve_port(const struct sandbox *sb, const uint16_t *ports,
                           size_t nports, unsigned port, char *out, size_t n,
                           struct sbx_error *e);

/* The manifest of agent A: its default_manifest (or an empty one) plus its
 * run_as user. *OUT is new. */
int lifecycle_agent_manifest(const struct agent *a, struct manifest **out,
                             struct sbx_error *e);

/* For the runner: applies agent A's manifest to the live developer-owned
 * sandbox SB (holding LIVE) under the SDK's additive rule. Without a
 * default_manifest nothing is applied; A's run_as must be one of its users.
 * *OUT is the manifest the sandbox now holds (new). When R is given, its
 * record is rewritten after additions. */
int lifecycle_apply_to_live(const struct lifecycle_options *o,
                            struct sandbox *sb, const struct manifest *live,
                            const struct agent *a, struct lifecycle_record *r,
                            struct manifest **out, struct sbx_error *e);

#endif
