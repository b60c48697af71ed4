/* The runner: the turn loop of one agent run inside sandboxes.
 *
 * Each turn builds the system prompt, calls the model, runs the tool calls
 * of the response concurrently and feeds their outputs back, until the
 * model answers without tool calls (the final output, validated against
 * output_type when the agent has one), or max_turns is exceeded. Handoffs
 * switch the active agent within the run; agents used as tools run a
 * nested run with their own turn budget, in a sandbox of their own or
 * (run_config "sandbox": "parent") in their caller's. */
#ifndef SBX_RUNNER_H
#define SBX_RUNNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "controller/backend/backend.h"
#include "controller/config/agent.h"
#include "controller/model/model.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/telemetry/events.h"
#include "shared/errors.h"

struct tracer;
struct store;

#define RUNNER_DEFAULT_MAX_TURNS 10

struct run_options {
  struct agent_set *agents; /* borrowed; agents[0] starts */
  const char *prompt;
  int64_t max_turns; /* 0: the agent's, else RUNNER_DEFAULT_MAX_TURNS */
  const char *model; /* overrides every agent's model; NULL: theirs */
  const char *cwd;   /* workspace-relative run cwd, or NULL */
  const struct backend *backend;
  struct backend_options backend_opts;
  struct model_config model_cfg; /* base settings: stream, record, replay */
  FILE *events;                  /* --stream: JSON lines (docs/events.md);
                                    NULL for none */
  struct tracer *tracer;         /* borrowed: spans (trace.h), or NULL */
  /* Materialization limits and the base directory of local sources (NULL:
   * each agent file's directory). */
  struct materialize_options materialize;
  const uint16_t *exposed_ports; /* reported with sandbox_created */
  size_t n_exposed_ports;
  /* --sandbox: the starting agent runs in this live sandbox (borrowed,
   * never closed by the run) holding SANDBOX_MANIFEST; its record is
   * rewritten when the agent's manifest adds entries. */
  struct sandbox *sandbox;
  const struct manifest *sandbox_manifest;
  struct lifecycle_record *sandbox_record;
  /* Run state: with STATE_DIR set, the run's state and journal are
   * written to its row "run_<run id>" of STORE (borrowed; required then)
   * after every step, and its sandboxes are recorded in STATE_DIR, so a
   * paused or crashed run can be resumed. RESUME_PATH ("run_<run id>")
   * continues the run saved there (agents and prompt come from it), with
   * the decisions recorded in the store. APPROVE_ASK asks on ASK_TTY for
   * calls that need approval instead of pausing. */
  const char *state_dir;
  const char *resume_path;
  struct store *store;
  bool approve_ask;
  FILE *ask_tty;
  /* Snapshots of a run with a state dir (controller/run/snapshots.c):
   * when the run pauses, each of its recorded sandboxes is snapshotted, so
   * that a resume whose sandbox is gone goes on in a new one restored from
   * it. SNAPSHOT is "local" or "none" (NULL: the resumed run's, else
   * local); SNAPSHOT_DIR where local snapshots go (NULL: the resumed run's,
   * else STATE_DIR/snapshots). */
  const char *snapshot;
  const char *snapshot_dir;
  /* The run's id (32 hex digits; NULL: a new one), its events handed to
   * EVENT_SINK (telemetry/events.h; NULL: none) numbered after EVENT_SEQ,
   * and written to EVENTS too when set, and CANCEL, which stops the run
   * at its next step once true (a model call in flight included):
   * -ECANCELED. */
  const char *run_id;
  events_sink_fn event_sink;
  void *event_arg;
  uint64_t event_seq;
  const volatile bool *cancel;
  /* Set with CANCEL when the run is to stop but be continued later (the
   * server is going down): the run ends with -EINTR and keeps its state
   * and sandboxes as a paused one does. */
  const volatile bool *interrupt;
  /* A run with a state dir that fails (not a configuration error, not
   * cancelled) keeps its state and sandboxes as a paused one does, so that
   * it can be resumed from its last step (sbx serve's retry). */
  bool keep_failed;
  /* A run with a state dir that completes keeps its state (status
   * "finished": the whole conversation and the last response id) so that
   * a later run can continue the conversation (runner_history); its
   * sandboxes are closed all the same. */
  bool keep_completed;
  /* A continued conversation (sbx run --continue): HISTORY (borrowed; the
   * previous run's items, the SDK's to_input_list()) comes before the
   * prompt, and CONTINUES, the run id continued, is recorded in the state.
   * With PREVIOUS_RESPONSE_ID the conversation is kept by the model server
   * (the Responses API with store): a turn of the Responses API sends only
   * the items new since the last response, with that response's id, as
   * the SDK does when given previous_response_id. */
  json_t *history;
  const char *continues;
  const char *previous_response_id;
};

/* runner_run's result for a run that stopped to wait for approvals; the
 * run state's id in the store is run_result.state_path. */
#define RUNNER_PAUSED 1

struct run_result {
  char *final_output; /* new: text, or the JSON text for output_type */
  json_t *final_json; /* new, with output_type; else NULL */
  struct model_usage usage;
  int turns;
  const char *last_agent; /* borrowed from the agent set */
  bool config_error;      /* the failure is the configuration's (exit 2) */
  /* A guardrail's tripwire stopped the run: its name and "input" or
   * "output" (borrowed from the agent set), and its output_info (new, or
   * NULL). Such a run is not kept for a retry: the same input or output
   * would trip it again. */
  const char *guardrail;
  const char *guardrail_kind;
  json_t *guardrail_info;
  char state_path[4200]; /* the run state's id in the store, "" for none */
};

/* Runs to completion or to a pause for approval (RUNNER_PAUSED). Returns
 * 0, RUNNER_PAUSED, or a negative errno with E saying why;
 * res->config_error tells a configuration error (a bad manifest, a missing
 * cwd: exit 2) from a failed run (model or tool error: exit 1). */
int runner_run(const struct run_options *o, struct run_result *res,
               struct sbx_error *e);
void run_result_clear(struct run_result *r);

/* The conversation that the run ID (the store's id, "run_...") of STORE
 * kept when it completed (keep_completed): its items, the SDK's
 * to_input_list() (new), and the id of its last model response (new; NULL
 * when the API gave none). -ENOENT when it kept none, -EINVAL when what
 * it kept is not a finished run state; E says which. */
int runner_history(struct store *store, const char *id, json_t **items,
                   char **response_id, struct sbx_error *e);
/* Ends what the run ID of o->store kept to be resumed (a failed run whose
 * keep time passed): closes the sandboxes its state records (in
 * o->state_dir, with o->backend_opts), removes its snapshots, then its
 * state and journal. A sandbox that cannot be closed is warned about. 0
 * (also when it kept nothing) or a negative errno with E. */
int runner_discard(const struct run_options *o, const char *id,
                   struct sbx_error *e);

#endif
