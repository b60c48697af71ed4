/* A run's setup and teardown: the root run (runner_run), with its run
 * id, events, run state and span, and the runs nested in tool calls
 * (agents used as tools), each with its own turn budget and sandboxes, or
 * its caller's sandbox.
 * The turns themselves are turn.c's. */
#include "controller/run/runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/rand.h"

#define RUNNER_MAX_NESTING 4

/* Sets U as SP's usage attributes. */
void run_trace_usage(struct trace_span *sp, const struct model_usage *u) {
  trace_set_int(sp, "gen_ai.usage.input_tokens", u->input_tokens);
  trace_set_int(sp, "gen_ai.usage.output_tokens", u->output_tokens);
  trace_set_int(sp, "sbx.usage.total_tokens", u->total_tokens);
  trace_set_int(sp, "sbx.usage.reasoning_tokens", u->reasoning_tokens);
  trace_set_int(sp, "sbx.usage.cached_tokens", u->cached_tokens);
}

/* The turn budget: GIVEN, else --max-turns, else the agent's, else
 * RUNNER_DEFAULT_MAX_TURNS. */
static int64_t turns_for(const struct run_options *o, const struct agent *a,
                         int64_t given) {
  if (given > 0)
    return given;
  if (o->max_turns > 0)
    return o->max_turns;
  if (a->max_turns > 0)
    return a->max_turns;
  return RUNNER_DEFAULT_MAX_TURNS;
}

/* The conversation item of the user's TEXT (new; NULL on OOM): a plain
 * string, as the SDK sends a string input. */
static json_t *user_message(const char *text) {
  return json_pack("{s:s, s:s}", "role", "user", "content", text);
}

int run_nested_agent(struct run *parent, const struct nested_spec *ns,
                     const char *input, struct run_result *res,
                     struct sbx_error *e) {
  memset(res, 0, sizeof(*res));
  if (parent->depth + 1 > RUNNER_MAX_NESTING)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "agents used as tools or guardrails nest deeper "
                         "than %d",
                         RUNNER_MAX_NESTING);
  struct run *run = calloc(1, sizeof(*run));
  if (!run)
    return -ENOMEM;
  run->sh = parent->sh;
  run->res = res;
  run->depth = parent->depth + 1;
  if (ns->parent_sandbox)
    run->host = &parent->states[ns->caller->index];
  /* Journaled, and resumed from the journal when a run before this one
   * was killed (or paused) in it. */
  const struct agent *start = ns->agent;
  int r = run_state_nested(run, parent, ns->call_id, &start, e);
  /* It can pause only where everything a resume needs is recorded: its
   * journal, and sandboxes that are the root run's. */
  run->can_pause =
      run->host && run->journaled && (parent->depth == 0 || parent->can_pause);
  if (r == 0 && !run->items &&
      (!(run->items = json_array()) ||
       json_array_append_new(run->items, user_message(input)) < 0))
    r = -ENOMEM;
  if (ns->call_id)
    events_agent_tool_started(
        run->sh->ev,
        &(struct events_where){ns->agent->name, (int)run->depth, 0},
        ns->caller->name, ns->call_id);
  run->span = trace_child(ns->span, TRACE_RUN);
  trace_set_str(run->span, "gen_ai.agent.name", ns->agent->name);
  trace_set_int(run->span, "sbx.depth", run->depth);
  int64_t max_turns =
      turns_for(&(struct run_options){0}, ns->agent, ns->max_turns);
  if (run->first_turn > 0)
    max_turns += run->first_turn - 1;
  if (r == 0)
    r = run_loop(run, start, max_turns, e);
  else if (r == 1)
    r = 0; /* it had answered before the kill */
  if (r != RUNNER_PAUSED)
    run_memory_generate(run, r, e);
  /* A paused run's sandboxes are its caller's: nothing of its own is left
   * running. */
  run_close_sandboxes(run, false);
  trace_set_int(run->span, "sbx.turns", res->turns);
  run_trace_usage(run->span, &res->usage);
  if (r < 0)
    trace_set_error(run->span, "%s", e->msg[0] ? e->msg : strerror(-r));
  trace_end(run->span);
  json_decref(run->items);
  json_decref(run->rs_pending);
  json_decref(run->rs_done);
  free(run);
  /* A paused run's usage is in its journal; it counts when it answers. */
  if (r != RUNNER_PAUSED && !ns->own_usage)
    run_usage_add(&parent->res->usage, &res->usage);
  return r;
}

/* Runs the agent T for the tool call J, as a run nested in J's, under J's
 * span; its answer goes to *OUT (new); failures to j->err. */
int run_nested(struct call_job *j, const struct agent_tool *t,
               const char *input, char **out) {
  struct run_result res = {0};
  struct nested_spec ns = {
      .agent = t->agent,
      .caller = j->agent,
      .call_id = json_string_value(json_object_get(j->item, "call_id")),
      .span = j->tc.span,
      .max_turns = t->max_turns,
      .parent_sandbox = t->parent_sandbox,
  };
  int r = run_nested_agent(j->run, &ns, input, &res, &j->err);
  j->config_error = res.config_error;
  /* A tripwire inside it stops the whole run, and says so there. */
  if (r < 0 && res.guardrail) {
    pthread_mutex_lock(&j->run->sh->mu);
    struct run_result *top = j->run->res;
    if (!top->guardrail) {
      top->guardrail = res.guardrail;
      top->guardrail_kind = res.guardrail_kind;
      top->guardrail_info = TAKE_PTR(res.guardrail_info);
    }
    pthread_mutex_unlock(&j->run->sh->mu);
  }
  if (r == 0) {
    *out = res.final_output;
    res.final_output = NULL;
  }
  run_result_clear(&res);
  return r;
}

void run_result_clear(struct run_result *r) {
  free(r->final_output);
  json_decref(r->final_json);
  json_decref(r->guardrail_info);
  memset(r, 0, sizeof(*r));
}

/* A new run that continues a conversation (run_options.history) starts
 * with its items, and with previous_response_id the server's chain
 * starts after them. */
static int continue_from(struct shared *sh, json_t *items) {
  const struct run_options *o = sh->o;
  if (o->history && json_array_extend(items, o->history) < 0)
    return -ENOMEM;
  if (!o->previous_response_id)
    return 0;
  if (!(sh->response_id = strdup(o->previous_response_id)))
    return -ENOMEM;
  sh->chained = true;
  sh->chain_from = json_array_size(items);
  return 0;
}

/* Whether the failed RUN, which started with agent START, has a state
 * to be retried from: one that failed before its first step (its first
 * model call, say) saves it now, to go on from its first turn. */
static bool keep_failed(struct run *run, const struct agent *start) {
  struct shared *sh = run->sh;
  if (!sh->rs)
    return false;
  if (sh->rs_written)
    return true;
  struct sbx_error e = {0};
  run->turn = 0; /* no turn finished */
  if (run_state_save(run, start, "running", NULL, &e) < 0) {
    log_warn("run %s: cannot keep it for a retry: %s", sh->run_id, e.msg);
    return false;
  }
  return true;
}

/* Starts the run's sbx.run span and emits run_started. */
static void run_begin(struct run *run, const struct agent *start,
                      int64_t max_turns) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  const char *model = run_model_for(o, start);
  run->span = trace_start(o->tracer, TRACE_RUN);
  trace_set_str(run->span, "sbx.run_id", sh->run_id);
  trace_set_str(run->span, "gen_ai.agent.name", start->name);
  trace_set_str(run->span, "gen_ai.request.model", model);
  trace_set_str(run->span, "sbx.backend", run_backend_name(o));
  trace_set_int(run->span, "sbx.depth", 0);
  char trace_id[33];
  trace_trace_id(run->span, trace_id);
  events_run_started(sh->ev, start->name, run_backend_name(o), model, max_turns,
                     trace_id[0] ? trace_id : NULL);
}

/* Emits run_finished or run_failed and ends the sbx.run span. */
static void run_end(struct run *run, int r, const struct sbx_error *e,
                    uint64_t t0) {
  struct run_result *res = run->res;
  int64_t ms = (int64_t)((sbx_now_ns() - t0) / 1000000);
  trace_set_int(run->span, "sbx.turns", res->turns);
  run_trace_usage(run->span, &res->usage);
  if (r == 0) {
    events_run_finished(run->sh->ev, res->last_agent, res->final_output,
                        res->turns, &res->usage, ms);
    trace_set_str(run->span, "sbx.final_agent", res->last_agent);
  } else if (r == -ECANCELED) {
    events_run_cancelled(run->sh->ev, res->turns, &res->usage, ms);
    trace_set_error(run->span, "the run was cancelled");
  } else {
    const char *msg = e->msg[0] ? e->msg : strerror(-r);
    const char *code =
        sbx_code_name(e->code != SBX_OK ? e->code : sbx_code_from_errno(-r));
    events_run_failed(run->sh->ev, msg, code, res->config_error ? 2 : 1,
                      res->turns, &res->usage, ms);
    trace_set_str(run->span, "sbx.error.code", code);
    trace_set_error(run->span, "%s", msg);
  }
  trace_end(run->span);
}

int runner_run(const struct run_options *o, struct run_result *res,
               struct sbx_error *e) {
  memset(res, 0, sizeof(*res));
  struct sbx_error local = {0};
  if (!e)
    e = &local;
  uint64_t t0 = sbx_now_ns();
  struct shared sh = {.o = o};
  if (o->run_id) {
    if (strlen(o->run_id) != 32 || strspn(o->run_id, "0123456789abcdef") != 32)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "\"%s\" is not a run id (32 hex digits)", o->run_id);
    memcpy(sh.run_id, o->run_id, 33);
  } else if (sbx_random_id(sh.run_id) < 0) {
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot make a run id");
  }
  if (o->event_sink
          ? events_new_sink(o->event_sink, o->event_arg, o->events, sh.run_id,
                            o->event_seq, &sh.ev, e) < 0
          : o->events && events_new(o->events, sh.run_id, &sh.ev, e) < 0)
    return -ENOMEM;
  pthread_mutex_init(&sh.mu, NULL);
  pthread_mutex_init(&sh.rs_mu, NULL);
  struct run *run = calloc(1, sizeof(*run));
  if (!run) {
    events_free(sh.ev);
    pthread_mutex_destroy(&sh.mu);
    pthread_mutex_destroy(&sh.rs_mu);
    return -ENOMEM;
  }
  run->sh = &sh;
  run->res = res;
  const struct agent *start = o->agents->agents[0];
  int r = 0;
  if (o->resume_path)
    r = run_state_resume(run, &start, e);
  else if (o->state_dir)
    r = run_state_begin(run, e);
  if (!run->items)
    run->items = json_array();
  if (!run->items || (!o->resume_path && continue_from(&sh, run->items) < 0) ||
      (!o->resume_path &&
       json_array_append_new(run->items, user_message(o->prompt)) < 0))
    r = r < 0 ? r : -ENOMEM;
  int64_t max_turns = turns_for(o, start, 0);
  if (run->first_turn > 0)
    max_turns += run->first_turn - 1;
  run_begin(run, start, max_turns);
  if (r == 0)
    r = run_loop(run, start, max_turns, e);
  /* A paused run keeps its sandboxes and state; so does a failed one the
   * caller may retry (keep_failed), but not one that was cancelled or
   * whose configuration is wrong. */
  if (r < 0 && o->interrupt && *o->interrupt)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EINTR,
                      "the run was interrupted; it goes on when resumed");
  bool keep =
      r == RUNNER_PAUSED || (r == -EINTR && sh.rs) ||
      (o->keep_failed && r < 0 && r != -ECANCELED && !res->config_error &&
       !res->guardrail && keep_failed(run, start));
  /* Memory is generated whenever the run stops, answered, failed or
   * paused (the SDK's finalizeSandboxRuntime), in its sandboxes before
   * they are closed. */
  run_memory_generate(run, r, e);
  run_close_sandboxes(run, keep);
  /* A completed run may keep its conversation, not its sandboxes. */
  if (r == 0 && o->keep_completed)
    keep = true;
  if (r == RUNNER_PAUSED)
    events_run_paused(sh.ev, sh.rs_path, res->turns);
  else if (r == -EINTR && keep)
    trace_end(run->span); /* neither finished nor failed: it goes on */
  else
    run_end(run, r, e, t0);
  run_state_end(run, keep);
  json_decref(run->items);
  free(sh.response_id);
  free(run);
  run_clients_free(&sh);
  pthread_mutex_destroy(&sh.mu);
  pthread_mutex_destroy(&sh.rs_mu);
  events_free(sh.ev);
  return r;
}
