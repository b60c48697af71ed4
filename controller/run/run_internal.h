/* Private to the runner (controller/run/): the state of a run and the
 * steps its files share. runner.c sets a run up and tears it down (the
 * root run and the runs nested in tool calls), turn.c is the turn loop,
 * request.c builds what a turn asks the model, clients.c holds the model
 * clients, calls.c runs a response's tool calls, decisions.c decides on
 * the calls that need approval, run_state.c keeps the run state and its
 * journal, and sandboxes.c the run's sandboxes.
 *
 * Functions that fail return a negative errno and, where they take one,
 * fill E with a message for a person. */
#ifndef SBX_RUN_INTERNAL_H
#define SBX_RUN_INTERNAL_H

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/config/agent.h"
#include "controller/model/model.h"
#include "controller/run/runner.h"
#include "controller/state/state.h"
#include "controller/telemetry/events.h"
#include "controller/tools/mcp.h"
#include "controller/tools/tools.h"
#include "shared/errors.h"

struct trace_span;

#define RUNNER_MAX_CLIENTS 8
#define RUN_PATH_MAX 512

struct shared;

/* One model client of a run: for one API and base URL. */
struct client_slot {
  enum model_api api;
  char *base_url; /* NULL: the default */
  char *key_env;  /* the agent's api_key_env, or NULL for OPENAI_API_KEY */
  struct model_client *client;
  struct shared *sh;
  pthread_mutex_t call_mu;   /* one call at a time, as in model.c; guards: */
  struct events_where where; /* the call in flight, for its text deltas */
};

/* What one run shares with the runs nested in it. */
struct shared {
  const struct run_options *o;
  struct client_slot clients[RUNNER_MAX_CLIENTS];
  size_t nclients;
  pthread_mutex_t mu; /* clients */
  struct events *ev;  /* --stream, or NULL */
  char run_id[33];
  json_t *rs;         /* the run state (root run only), or NULL */
  char rs_path[4200]; /* its id in the store: run_ and the run id */
  size_t rs_items;    /* conversation items already in the journal */
  bool rs_written;    /* the state is in the store */
  int64_t rs_seq;     /* saves so far: the state and checkpoints say */
  json_t *rs_done;    /* resumed: the pending calls' recorded outputs by
                         call_id, or NULL */
  /* The run's snapshots (snapshots.c): off, or local in snap_dir. */
  bool snap_off;
  char snap_dir[4200];
  pthread_mutex_t rs_mu; /* the journal's appends, from the calls' threads */
  struct rs_journal *rj; /* the journal's writer (state_io.c), or NULL;
                         under rs_mu */
  /* Resumed: the journaled state of the runs nested in the pending calls,
   * by path ({"items", "progress", "done"}), each taken (removed) by the
   * nested run that goes on from it; or NULL. */
  json_t *rs_nested;
  /* The root run's last model response id (saved with its progress), and
   * for a conversation kept by the server (run_options
   * .previous_response_id) CHAINED and CHAIN_FROM, the first item the
   * server does not have: a Responses turn sends the items from there
   * with RESPONSE_ID as previous_response_id. */
  char *response_id;
  bool chained;
  size_t chain_from;
};

/* Per agent of one run: its sandbox, manifest and tools. */
struct agent_state {
  struct sandbox *sb;
  struct manifest *manifest;
  struct toolbox tb;
  bool ready;
  bool borrowed; /* --sandbox, or the caller's: not ours to close */
  char record_id[STATE_ID_LEN + 1]; /* recorded in the state dir, or "" */
  json_t *snapshot;    /* its last snapshot (snapshots.c), or NULL */
  struct mcp_set *mcp; /* its MCP servers, once its first turn started them */
  /* Built at the first turn and the same for every turn after (the tools
   * are built again when an MCP server's list changed). */
  char *instr;
  json_t *tools; /* for tools_api */
  enum model_api tools_api;
  /* It has called tools in this run: its tool_choice is no longer sent
   * (the SDK's reset_tool_choice). */
  bool used_tools;
  bool approvals_checked; /* run_check_approvals passed */
};

struct run {
  struct shared *sh;
  struct agent_state states[AGENT_MAX_AGENTS];
  json_t *items;
  struct run_result *res;
  unsigned depth;
  int first_turn;               /* a resumed run goes on from its saved turn */
  struct trace_span *span;      /* sbx.run */
  struct trace_span *turn_span; /* sbx.turn of the turn in progress */
  int turn;
  /* A run nested in a tool call, in a run with a run state, is journaled
   * under PATH, the call ids from the root's down ("/c1/c2"), one line a
   * step (run_state.c); its sandboxes are recorded like the root's. */
  char path[RUN_PATH_MAX];
  bool journaled;
  size_t rs_items;    /* nested: conversation items already journaled */
  json_t *rs_pending; /* nested, resumed: the calls left pending, or NULL */
  json_t *rs_done;    /* nested, resumed: their recorded outputs, or NULL */
  /* Nested with "run_config": {"sandbox": "parent"}: the state of the
   * calling agent, whose live sandbox this run's agents work in (borrowed);
   * else NULL. */
  const struct agent_state *host;
  /* Nested: a call that needs approval pauses the whole run (the run is
   * journaled, and it and every run above it work in the root's
   * sandboxes); else it fails it. */
  bool can_pause;
};

/* One tool call of a response. */
struct call_job {
  struct run *run;
  const struct agent *agent;
  json_t *item;   /* borrowed: function_call or apply_patch_call */
  json_t *output; /* new: the output item */
  struct sbx_error err;
  int rc;
  struct tool_ctx tc; /* the sbx.tool_call span; the tool's failure */
  pthread_t thread;
  bool started;
  bool skip;         /* answered without running (a rejected call) */
  bool config_error; /* it failed for the configuration (a nested run's) */
};

/* skills.c: the skills capability. */

/* The "## Skills" instruction fragment of agent A (*OUT new, or NULL when
 * A has none or the SDK's would be null); a "from" index is read from A's
 * sandbox st->sb. */
int run_skills_fragment(const struct agent *a, struct agent_state *st,
                        const char *cwd, char **out);
/* The load_skill tool's definition (new). */
json_t *run_skills_tool_json(void);
/* Runs load_skill for agent A with the model's ARGS: *OUTPUT (new) is the
 * SDK's result as JSON text, or its generic error with the reason in
 * TC->failure. 0, or -ENOMEM. */
int run_load_skill(struct run *run, const struct agent *a, const char *args,
                   json_t **output, struct tool_ctx *tc);

/* Whether agent A has capability C. */
/* Whether the run was asked to stop (run_options.cancel), with E saying
 * so when it was. */
static inline bool run_cancelled(const struct run *run, struct sbx_error *e) {
  const volatile bool *c = run->sh->o->cancel;
  if (!c || !*c)
    return false;
  (void)sbx_error_set(e, SBX_OK, ECANCELED, "the run was cancelled");
  return true;
}

static inline bool run_has_cap(const struct agent *a, enum agent_capability c) {
  for (size_t i = 0; i < a->ncapabilities; i++)
    if (a->capabilities[i] == c)
      return true;
  return false;
}

/* Adds U to SUM. */
static inline void run_usage_add(struct model_usage *sum,
                                 const struct model_usage *u) {
  sum->input_tokens += u->input_tokens;
  sum->output_tokens += u->output_tokens;
  sum->total_tokens += u->total_tokens;
  sum->reasoning_tokens += u->reasoning_tokens;
  sum->cached_tokens += u->cached_tokens;
}

/* ---- runner.c ------------------------------------------------------ */

/* Sets U as SP's usage attributes. */
void run_trace_usage(struct trace_span *sp, const struct model_usage *u);
/* Runs the agent T for the tool call J, as a run nested in J's, under J's
 * span; its answer goes to *OUT (new); failures to j->err. RUNNER_PAUSED
 * when it paused for an approval (run->can_pause): the whole run pauses,
 * and the call runs again, going on inside, when it is resumed. */
int run_nested(struct call_job *j, const struct agent_tool *t,
               const char *input, char **out);
/* A run nested in another: of an agent used as a tool (CALL_ID its call,
 * journaled with the root run's state) or of a guard agent (CALL_ID
 * NULL: not journaled, no agent_tool_started event). */
struct nested_spec {
  const struct agent *agent;  /* the agent that runs */
  const struct agent *caller; /* the agent it runs for */
  const char *call_id;        /* or NULL */
  struct trace_span *span;    /* its parent span */
  int64_t max_turns;          /* 0: the agent's, else the default */
  bool parent_sandbox;        /* in the caller's sandbox */
  /* Its usage goes to its result only, for the caller to count (a run in
   * another thread than its parent's turn): else to the parent's too. */
  bool own_usage;
};
/* Runs NS with the user input INPUT as a run nested in PARENT; its result
 * into *RES (cleared first; the caller clears it after). Its usage counts
 * in PARENT's. 0, RUNNER_PAUSED or a negative errno with E. */
int run_nested_agent(struct run *parent, const struct nested_spec *ns,
                     const char *input, struct run_result *res,
                     struct sbx_error *e);

/* ---- guardrails.c -------------------------------------------------- */

/* The input guardrails of agent A, run on RUN's input in a thread of
 * their own while the first turn asks the model. */
struct guard_job {
  struct run *run;
  const struct agent *a;
  int turn;
  json_t *subject; /* the input they check (new) */
  pthread_t thread;
  bool started;
  int rc;
  struct sbx_error err;
  /* Set by the thread, taken by the wait: */
  struct model_usage usage; /* of the guard agents' runs */
  const struct agent_guardrail *tripped;
  json_t *info; /* its output_info (new), or NULL */
};
/* Starts A's input guardrails on RUN's input (its first turn), if it has
 * any. 0 or -ENOMEM. */
int run_guardrails_input_start(struct guard_job *g, struct run *run,
                               const struct agent *a, int turn);
/* Waits for them: 0 when every one passed (or none ran), else the
 * failure, a tripwire (res->guardrail set) or a guardrail that could not
 * run, in E. Accepts a job never started. */
int run_guardrails_input_wait(struct guard_job *g, struct sbx_error *e);
/* Runs A's output guardrails on RUN's final output (res->final_output
 * and final_json), one after another: 0, or the first failure in E. */
int run_guardrails_output(struct run *run, const struct agent *a, int turn,
                          struct sbx_error *e);

/* ---- turn.c -------------------------------------------------------- */

/* Runs RUN's turns from agent START until a final output (0), a pause
 * (RUNNER_PAUSED) or an error; at most MAX_TURNS in all. */
int run_loop(struct run *run, const struct agent *start, int64_t max_turns,
             struct sbx_error *e);

/* ---- request.c ----------------------------------------------------- */

/* What one turn asks the model: the request, and what it borrows. */
struct turn_request {
  struct model_request req;
  json_t *settings; /* new */
  json_t *input;    /* new */
  json_t *extra;    /* new, or NULL */
  json_t *schema;   /* new, or NULL: the output schema sent */
};

/* The request of agent A's turn in RUN to API for MODEL. The agent's
 * instructions and tools are built at its first turn and kept (with
 * memory, the instructions are built again for every turn); a memory
 * summary that cannot be read fails it, with E. */
int run_request_build(struct run *run, const struct agent *a,
                      enum model_api api, const char *model,
                      struct turn_request *tr, struct sbx_error *e);
void run_request_clear(struct turn_request *tr);
/* Starts agent A's MCP servers on first use; a server that cannot be
 * started or initialized fails the turn. */
int run_mcp_ensure(struct run *run, const struct agent *a, struct sbx_error *e);
/* Refuses (a configuration error) an entry of A's "approvals" that names
 * none of A's tools (its MCP servers' included, so after run_mcp_ensure):
 * it would decide nothing. Once per agent and run. */
int run_check_approvals(struct run *run, const struct agent *a,
                        struct sbx_error *e);
/* The function name of the agent used as the tool T. */
void run_tool_agent_name(const struct agent_tool *t, char *out, size_t cap);
/* The agent of A's handoff tool NAME, or NULL when NAME is none. */
const struct agent *run_find_handoff(const struct agent *a, const char *name);

/* ---- clients.c ----------------------------------------------------- */

/* The model API agent A talks to. */
enum model_api run_agent_api(const struct agent *a);
/* The model for agent A: --model, the agent's, $OPENAI_DEFAULT_MODEL, or
 * the default. */
const char *run_model_for(const struct run_options *o, const struct agent *a);
/* The client for A's API and base URL, made on first use. */
int run_get_client(struct shared *sh, const struct agent *a,
                   struct client_slot **out, struct sbx_error *e);
/* One model call in an sbx.model_call span under the turn's. */
int run_call_model(struct run *run, struct client_slot *c,
                   const struct agent *a, const struct model_request *req,
                   struct model_response *resp, struct sbx_error *e);
/* Frees SH's clients. */
void run_clients_free(struct shared *sh);

/* ---- calls.c ------------------------------------------------------- */

/* The tool name and the arguments text of the call ITEM (a function_call
 * or apply_patch_call, whose arguments are its operation's JSON, new in
 * *OWNED). -ENOMEM. */
int run_call_args(json_t *item, const char **tool, const char **args,
                  char **owned);
/* Runs the N calls of JOBS that are not skipped, at most
 * RUNNER_MAX_PARALLEL at once; each ends with its output or its rc. */
void run_calls(struct call_job *jobs, size_t n);

/* ---- decisions.c --------------------------------------------------- */

/* Decides on the N calls of JOBS that need a person, at W: an approved
 * call runs, a rejected one is answered with the reason (skip), any other
 * is asked on the terminal (--approve-ask) or counted in *AWAITING, for
 * the run to pause. */
int run_decide_calls(struct run *run, const struct agent *a,
                     const struct events_where *w, struct call_job *jobs,
                     size_t n, size_t *awaiting);

/* ---- run_state.c --------------------------------------------------- */

/* Starts a new run state under the state dir. */
int run_state_begin(struct run *run, struct sbx_error *e);
/* Loads the run state at o->resume_path: conversation, agent, turn,
 * usage, pending calls, and re-attaches the recorded sandboxes. */
int run_state_resume(struct run *run, const struct agent **start,
                     struct sbx_error *e);
/* Saves the root run's state with A as the current agent, STATUS and the
 * calls still to run (PENDING, borrowed); a no-op without a state dir. The
 * journal is written behind the run (state_io.c): a failed write fails
 * this save or a later one, and run_state_sync; E says what could not be
 * written. */
int run_state_save(struct run *run, const struct agent *a, const char *status,
                   json_t *pending, struct sbx_error *e);
/* Returns once everything saved so far is written (a no-op without a
 * state dir): no call runs before its step is in the journal. */
int run_state_sync(struct run *run, struct sbx_error *e);
/* Records the OUTPUT item (borrowed) of a call of the pending turn as soon
 * as the call is done, so that a resume after a kill does not run it
 * again; a no-op without a state dir or in a nested run that is not
 * journaled. Thread-safe. */
int run_state_call_done(struct run *run, json_t *output, struct sbx_error *e);
/* Ends the state of a run: unless KEEP (it paused, or failed and may be
 * retried), removes its state and journal; sets res->state_path. The
 * sandboxes of nested runs that a resume did not reach are closed. */
void run_state_end(struct run *run, bool keep);

/* state_io.c: the root run's state in the store (run_options.store);
 * sh->rs_path is the store's run id. 0 or a negative errno with E. */
int rs_io_begin(struct shared *sh, struct sbx_error *e);
int rs_io_append(struct shared *sh, const char *text, size_t len,
                 struct sbx_error *e);
int rs_io_put(struct shared *sh, const char *text, size_t len,
              struct sbx_error *e);
/* The state of the run WHERE (the store's run id) and its journal
 * (new, both; the journal "" when there is none), up to MAX bytes each. */
int rs_io_read(struct shared *sh, const char *where, size_t max, char **state,
               size_t *slen, char **journal, size_t *jlen, struct sbx_error *e);
/* Reads the journal TEXT (LEN) of the run state RS: the conversation
 * into *ITEMS (new), the outputs of the pending calls that were done into
 * *DONE (new), the state of the runs nested in them into *NESTED (new),
 * RS brought up to its newest checkpoint, and *CUT, where to cut the
 * journal after what counts. -EINVAL when items the state counts are
 * missing. */
int run_state_load_journal(const char *text, size_t len, json_t *rs,
                           json_t **items, json_t **done, json_t **nested,
                           size_t *cut);
/* Closes each sandbox recorded in SBS (a progress's "sandboxes"). */
void run_close_recorded_all(const struct run_options *o, json_t *sbs);
/* Keeps the first KEEP bytes of the journal. */
int rs_io_cut(struct shared *sh, size_t keep, struct sbx_error *e);
/* Removes the state and its journal. */
void rs_io_remove(struct shared *sh);
/* Returns once the journal's appends are written: the first that failed
 * (with E), or 0. */
int rs_io_sync(struct shared *sh, struct sbx_error *e);
/* Waits for the journal's appends and stops its writer (a failure is
 * logged); appends after it start another. */
void rs_io_close(struct shared *sh);
/* Sets up the journaling of RUN, nested in PARENT's call CALL_ID; when a
 * resumed run journaled it before, RUN goes on from there: its
 * conversation, agent (*START), turn, usage, sandboxes and pending calls;
 * 1 when it had answered already (run->res->final_output is its answer).
 * Else run->items stays NULL. */
int run_state_nested(struct run *run, const struct run *parent,
                     const char *call_id, const struct agent **start,
                     struct sbx_error *e);

/* ---- sandboxes.c --------------------------------------------------- */

/* The name of the run's backend. */
const char *run_backend_name(const struct run_options *o);
/* Gets A's sandbox ready on first use: in a run with a host, the host's
 * sandbox. */
int run_ensure_sandbox(struct run *run, const struct agent *a,
                       struct sbx_error *e);
/* Re-attaches agent IDX's sandbox, recorded under RECORD_ID, with the
 * exec sessions TOOLS (toolbox_save's) that were running in it; when it is
 * gone (removed, its workspace or container lost), goes on in a new one
 * restored from SNAPSHOT (the run state's record of its last snapshot, or
 * NULL: then the resume fails, naming the step and the remedy). */
int run_reattach_sandbox(struct run *run, size_t idx, const char *record_id,
                         json_t *tools, json_t *snapshot, struct sbx_error *e);
/* Closes the run's sandboxes; with PAUSE, recorded sandboxes are left
 * running for the resumed run. Without, their snapshots are removed. */
void run_close_sandboxes(struct run *run, bool pause);
/* Closes the sandbox recorded in the state dir as RECORD_ID, if it is
 * still there, and removes its record; failures are warned about. */
void run_close_recorded(const struct run_options *o, const char *record_id);

/* ---- memory_gen.c ------------------------------------------------- */

/* Generates memory when the run RUN (root or nested; a nested run's
 * rollout gets an id of its own) stops with RC (ERR saying why it
 * failed; RUNNER_PAUSED: interrupted), for its agent with the memory
 * capability and "generate" (memory_gen.c): the rollout appended, then
 * phase one and phase two run in that agent's sandbox (not after a
 * cancel or an interruption to go on later). Failures are warned about
 * and never change the run's result. */
void run_memory_generate(struct run *run, int rc, const struct sbx_error *err);

/* ---- snapshots.c --------------------------------------------------- */

/* The run's snapshot settings into RUN's shared state (snap_off,
 * snap_dir): o->snapshot and o->snapshot_dir, else what the run state
 * sh->rs recorded (a resumed run's), else local in STATE_DIR/snapshots;
 * recorded in sh->rs. A bad setting is a configuration error. */
int run_snapshots_settle(struct run *run, struct sbx_error *e);
/* Snapshots each recorded sandbox of the root run RUN as it pauses, into
 * its agent state's snapshot (saved with the run state). A failure is
 * warned about and keeps the earlier snapshot: the run pauses anyway, its
 * sandboxes left running. */
void run_snapshot_pause(struct run *run);
/* Restores SNAP (a run state's snapshot record) into SB, which holds M. */
int run_snapshot_restore(json_t *snap, struct sandbox *sb,
                         const struct manifest *m, struct sbx_error *e);
/* Removes ST's snapshot (its file too). */
void run_snapshot_discard(struct agent_state *st);

#endif
