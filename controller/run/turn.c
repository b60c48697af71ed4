/* The turn loop: each turn asks the model (or, resuming, takes the calls
 * its last response left pending), and either ends the run with the final
 * output or runs the response's tool calls, feeds their outputs back and
 * hands off to another agent when the model asked for one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/run/schema.h"
#include "controller/telemetry/trace.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

/* A turn's span, ended when the turn's scope is left: with the run's
 * error unless the turn was marked done. */
struct turn_scope {
  struct run *run;
  const struct sbx_error *e;
  bool done;
};

static void turn_scope_end(struct turn_scope *s) {
  if (!s->done)
    trace_set_error(s->run->turn_span, "%s",
                    s->e && s->e->msg[0] ? s->e->msg : "the turn failed");
  trace_end(s->run->turn_span);
  s->run->turn_span = NULL;
}

/* One turn, from its model call to the outputs of its calls. */
struct turn {
  struct run *run;
  const struct agent *a;
  struct events_where w;
  const char *model;
  struct model_response resp;
  struct model_usage usage; /* this turn's */
  bool resumed;             /* the calls came from the saved state */
  size_t ncalls;
  struct call_job *jobs; /* ncalls of them, the first njobs used */
  size_t njobs;
  const struct agent *next; /* the handoff asked for, or NULL */
  const char *next_call_id; /* borrowed from run->items */
  json_t *handoff_outputs;  /* the handoff calls' outputs */
};

/* Frees what the turn T still holds, on every way out of it. */
static void turn_clear(struct turn *t) {
  for (size_t m = 0; t->jobs && m < t->njobs; m++)
    json_decref(t->jobs[m].output);
  free(t->jobs);
  json_decref(t->handoff_outputs);
  model_response_clear(&t->resp);
}

/* True for an output item that is a tool call to run. */
static bool is_call(json_t *item) {
  const char *t = json_string_value(json_object_get(item, "type"));
  return t && (strcmp(t, "function_call") == 0 ||
               strcmp(t, "apply_patch_call") == 0);
}

/* Keeps the root run's last response id from the API API; a
 * conversation the server keeps goes on from it, with the items after
 * this response's. A response without an id, or one of Chat Completions,
 * breaks the chain: the whole conversation is sent again. */
static int turn_chain(struct shared *sh, enum model_api api,
                      struct model_response *resp, json_t *items) {
  if (!resp->id || api != MODEL_API_RESPONSES) {
    sh->chained = false;
    free(sh->response_id);
    sh->response_id = NULL;
    return 0;
  }
  free(sh->response_id);
  sh->response_id = strdup(resp->id);
  if (!sh->response_id)
    return -ENOMEM;
  sh->chain_from = json_array_size(items);
  return 0;
}

/* The calls a resumed run's last response left pending (borrowed), or
 * NULL for none. A nested run's pending calls are its own, taken once. */
static json_t *pending_calls(const struct run *run) {
  const struct shared *sh = run->sh;
  json_t *pending = !sh->rs           ? NULL
                    : run->depth == 0 ? json_object_get(sh->rs, "pending")
                                      : run->rs_pending;
  return json_is_array(pending) && json_array_size(pending) > 0 ? pending
                                                                : NULL;
}

/* The response of the turn: from the model, or for a resumed run first
 * the calls its last response left pending. Its usage is counted and its
 * output joins the conversation. */
static int turn_ask(struct turn *t, struct sbx_error *e) {
  struct run *run = t->run;
  struct shared *sh = run->sh;
  const struct agent *a = t->a;
  int r = run_ensure_sandbox(run, a, e);
  if (r == 0)
    r = run_mcp_ensure(run, a, e);
  if (r == 0)
    r = run_check_approvals(run, a, e);
  if (r < 0)
    return r;
  struct client_slot *slot = NULL;
  r = run_get_client(sh, a, &slot, e);
  if (r < 0) {
    run->res->config_error = true;
    return r;
  }
  json_t *pending = pending_calls(run);
  t->resumed = pending != NULL;
  if (t->resumed) {
    t->resp.output = json_incref(pending);
    if (run->depth != 0) {
      json_decref(run->rs_pending);
      run->rs_pending = NULL;
    }
  } else {
    _cleanup_(run_request_clear) struct turn_request tr = {0};
    r = run_request_build(run, a, model_client_api(slot->client), t->model, &tr,
                          e);
    if (r == 0)
      r = run_call_model(run, slot, a, &tr.req, &t->resp, e);
    if (r < 0)
      return r;
  }
  t->usage = t->resp.usage;
  run_usage_add(&run->res->usage, &t->resp.usage);
  if (t->resumed)
    return 0;
  run->res->turns++;
  if (json_array_extend(run->items, t->resp.output) < 0)
    return -ENOMEM;
  return run->depth == 0 ? turn_chain(sh, model_client_api(slot->client),
                                      &t->resp, run->items)
                         : 0;
}

/* The text of a message item: its string content, or its text and
 * refusal parts joined. New string; NULL on OOM. */
static char *message_text(json_t *item) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 64u << 20);
  json_t *content = json_object_get(item, "content");
  if (json_is_string(content)) {
    (void)sbx_buf_append_str(&b, json_string_value(content));
  } else {
    size_t i;
    json_t *c;
    json_array_foreach(content, i, c) {
      const char *ct = json_string_value(json_object_get(c, "type"));
      json_t *text = json_object_get(
          c, ct && strcmp(ct, "refusal") == 0 ? "refusal" : "text");
      if (json_is_string(text))
        (void)sbx_buf_append_str(&b, json_string_value(text));
    }
  }
  return sbx_buf_steal(&b, NULL);
}

/* The final output of a wrapped output_type: the value of its "response"
 * key, as the Python SDK's AgentOutputSchema gives it; a string is the
 * answer's text, anything else its JSON. */
static int unwrap_output(struct run *run, const struct agent *a,
                         struct sbx_error *e) {
  json_t *v = json_object_get(run->res->final_json, SCHEMA_OUTPUT_KEY);
  if (!v)
    return sbx_error_set(e, SBX_INTERNAL, EBADMSG,
                         "agent \"%s\" answered without the \"%s\" key its "
                         "wrapped output_type asks for",
                         a->name, SCHEMA_OUTPUT_KEY);
  json_incref(v);
  json_decref(run->res->final_json);
  run->res->final_json = v;
  char *text = json_is_string(v)
                   ? strdup(json_string_value(v))
                   : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!text)
    return -ENOMEM;
  free(run->res->final_output);
  run->res->final_output = text;
  return 0;
}

/* Ends the run with the turn's answer, a response without calls: the text
 * of its last message, validated against the agent's output_type. */
static int turn_finish(struct turn *t, struct sbx_error *e) {
  struct run *run = t->run;
  const struct agent *a = t->a;
  events_turn_finished(run->sh->ev, &t->w, t->model, 0, &t->usage);
  json_t *last = NULL;
  size_t i;
  json_t *it;
  json_array_foreach(t->resp.output, i, it) {
    const char *type = json_string_value(json_object_get(it, "type"));
    if (type && strcmp(type, "message") == 0)
      last = it;
  }
  char *text = last ? message_text(last) : strdup("");
  model_response_clear(&t->resp);
  if (!text)
    return -ENOMEM;
  run->res->final_output = text;
  run->res->last_agent = a->name;
  if (a->output_type) {
    json_error_t je;
    run->res->final_json = json_loads(text, JSON_DECODE_ANY, &je);
    if (!run->res->final_json)
      return sbx_error_set(e, SBX_INTERNAL, EBADMSG,
                           "agent \"%s\" answered with invalid JSON for its "
                           "output_type: %s",
                           a->name, je.text);
    if (schema_output_wrapped(a->output_type)) {
      int r = unwrap_output(run, a, e);
      if (r < 0)
        return r;
    }
    struct sbx_error se = {0};
    if (schema_validate(a->output_type, run->res->final_json, &se) < 0)
      return sbx_error_set(e, SBX_INTERNAL, EBADMSG,
                           "agent \"%s\" answered with JSON that does not "
                           "match its output_type: %s",
                           a->name, se.msg);
  }
  int r = run_guardrails_output(run, a, t->w.turn, e);
  if (r < 0)
    return r;
  return run_state_save(run, a, "finished", NULL, e);
}

/* The output of a handoff call: the first one names the next agent, any
 * other is ignored. New; NULL on OOM. */
static json_t *handoff_output(struct turn *t, const struct agent *h,
                              const char *call_id) {
  json_t *out;
  if (!t->next) {
    t->next = h;
    t->next_call_id = call_id;
    _cleanup_json_ json_t *o = json_pack("{s:s}", "assistant", h->name);
    _cleanup_free_ char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    out = s ? json_string(s) : NULL;
  } else {
    out = json_string("Multiple handoffs detected, ignoring this one.");
  }
  return json_pack("{s:s, s:s, s:o, s:s}", "type", "function_call_output",
                   "call_id", call_id ? call_id : "", "output", out, "status",
                   "completed");
}

/* Sorts the response's calls into jobs to run and handoffs, which are
 * answered at once. */
static int turn_jobs(struct turn *t) {
  t->jobs = calloc(t->ncalls, sizeof(*t->jobs));
  t->handoff_outputs = json_array();
  if (!t->jobs || !t->handoff_outputs)
    return -ENOMEM;
  size_t i;
  json_t *it;
  json_array_foreach(t->resp.output, i, it) {
    if (!is_call(it))
      continue;
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *name = json_string_value(json_object_get(it, "name"));
    const struct agent *h = strcmp(type, "function_call") == 0 && name
                                ? run_find_handoff(t->a, name)
                                : NULL;
    if (h) {
      const char *cid = json_string_value(json_object_get(it, "call_id"));
      if (json_array_append_new(t->handoff_outputs, handoff_output(t, h, cid)) <
          0)
        return -ENOMEM;
      continue;
    }
    struct call_job *j = &t->jobs[t->njobs++];
    *j = (struct call_job){
        .run = t->run,
        .agent = t->a,
        .item = it,
    };
    /* Resumed: a call whose output the journal recorded is not run again. */
    const char *cid = json_string_value(json_object_get(it, "call_id"));
    json_t *done = t->resumed && cid ? json_object_get(t->run->depth == 0
                                                           ? t->run->sh->rs_done
                                                           : t->run->rs_done,
                                                       cid)
                                     : NULL;
    if (done) {
      j->output = json_incref(done);
      j->skip = true;
    }
  }
  return 0;
}

/* Pauses the run for the calls that wait for a person: the state holds
 * them as pending, for sbx approve / sbx reject and the resumed run. */
static int turn_pause(struct turn *t, struct sbx_error *e) {
  if (!t->run->sh->rs)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                         "a tool call needs approval, but the run has no "
                         "state to pause in");
  if (t->run->depth != 0 && !t->run->can_pause)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "a tool call of agent \"%s\", used as a tool, "
                         "needs approval, and a run cannot pause inside an "
                         "agent used as a tool that has a sandbox of its "
                         "own: run with --approve ask, give that agent no "
                         "approvals, or run it in its caller's sandbox "
                         "(\"run_config\": {\"sandbox\": \"parent\"})",
                         t->a->name);
  /* The root's sandboxes are snapshotted once, as the root pauses. */
  if (t->run->depth == 0)
    run_snapshot_pause(t->run);
  int r = run_state_save(t->run, t->a, "awaiting_approval", t->resp.output, e);
  return r < 0 ? r : RUNNER_PAUSED;
}

/* Whether a call paused inside an agent used as a tool, and none failed:
 * then the turn pauses too, its calls pending. The outputs of those that
 * answered are journaled already, and a resume does not run them again. */
static bool turn_paused_inside(const struct turn *t) {
  bool paused = false;
  for (size_t m = 0; m < t->njobs; m++) {
    if (t->jobs[m].rc < 0)
      return false;
    paused = paused || t->jobs[m].rc == RUNNER_PAUSED;
  }
  return paused;
}

/* Adds the calls' outputs to the conversation, then the handoffs'; the
 * first call that failed fails the turn. */
static int turn_collect(struct turn *t, struct sbx_error *e) {
  struct run *run = t->run;
  int r = 0;
  for (size_t m = 0; m < t->njobs; m++) {
    struct call_job *j = &t->jobs[m];
    if (j->rc < 0 && r == 0) {
      r = j->rc;
      if (e)
        *e = j->err;
      run->res->config_error = run->res->config_error || j->config_error;
    }
    json_t *out = TAKE_PTR(j->output);
    if (out && json_array_append_new(run->items, out) < 0 && r == 0)
      r = -ENOMEM;
  }
  if (json_array_extend(run->items, t->handoff_outputs) < 0 && r == 0)
    r = -ENOMEM;
  if (r < 0 && e && e->code == SBX_OK)
    (void)sbx_error_set(e, SBX_INTERNAL, -r, "a tool call failed: %s",
                        strerror(-r));
  return r;
}

/* Runs the response's calls: decisions first for those that need a
 * person, then the calls, then their outputs into the conversation. 0,
 * RUNNER_PAUSED, or an error. */
static int turn_run_calls(struct turn *t, struct sbx_error *e) {
  struct run *run = t->run;
  int r =
      t->resumed ? 0 : run_state_save(run, t->a, "running", t->resp.output, e);
  if (r < 0)
    return r;
  r = turn_jobs(t);
  size_t awaiting = 0;
  if (r == 0)
    r = run_decide_calls(run, t->a, &t->w, t->jobs, t->njobs, &awaiting);
  if (r < 0)
    return r;
  if (awaiting)
    return turn_pause(t, e);
  if (run_cancelled(run, e))
    return -ECANCELED;
  if ((r = run_state_sync(run, e)) < 0)
    return r;
  run_calls(t->jobs, t->njobs);
  if (turn_paused_inside(t))
    return turn_pause(t, e);
  r = turn_collect(t, e);
  model_response_clear(&t->resp);
  if (r < 0)
    return r;
  if (t->next) {
    events_handoff(run->sh->ev, &t->w, t->next->name, t->next_call_id);
    trace_set_str(run->turn_span, "sbx.handoff.to", t->next->name);
  }
  r = run_state_save(run, t->next ? t->next : t->a, "running", NULL, e);
  if (r < 0)
    return r;
  events_turn_finished(run->sh->ev, &t->w, t->model, t->ncalls, &t->usage);
  return 0;
}

/* Runs RUN's turns from agent START until a final output (0), a pause
 * (RUNNER_PAUSED) or an error; at most MAX_TURNS in all. Each turn is an
 * sbx.turn span. */
int run_loop(struct run *run, const struct agent *start, int64_t max_turns,
             struct sbx_error *e) {
  const struct agent *a = start;
  for (int turn = run->first_turn > 0 ? run->first_turn : 1;; turn++) {
    if (turn > max_turns)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "max turns (%lld) exceeded", (long long)max_turns);
    if (run_cancelled(run, e))
      return -ECANCELED;
    run->turn = turn;
    run->turn_span = trace_child(run->span, TRACE_TURN);
    _cleanup_(turn_scope_end) struct turn_scope scope = {run, e, false};
    trace_set_int(run->turn_span, "sbx.turn", turn);
    trace_set_int(run->turn_span, "sbx.depth", run->depth);
    trace_set_str(run->turn_span, "gen_ai.agent.name", a->name);
    _cleanup_(turn_clear) struct turn t = {
        .run = run,
        .a = a,
        .w = {a->name, (int)run->depth, turn},
        .model = run_model_for(run->sh->o, a),
    };
    /* The input guardrails check the run's input alongside its first
     * model call; nothing of the turn is used before they pass. */
    struct guard_job guard = {0};
    int r = turn == 1 && !pending_calls(run)
                ? run_guardrails_input_start(&guard, run, a, turn)
                : 0;
    if (r == 0)
      r = turn_ask(&t, e);
    int gr = run_guardrails_input_wait(&guard, e);
    if (gr < 0)
      return gr;
    if (r < 0)
      return r;
    size_t i;
    json_t *it;
    json_array_foreach(t.resp.output, i, it) {
      if (is_call(it))
        t.ncalls++;
    }
    trace_set_int(run->turn_span, "sbx.tool_calls", (int64_t)t.ncalls);
    if (t.ncalls > 0)
      run->states[a->index].used_tools = true;
    r = t.ncalls == 0 ? turn_finish(&t, e) : turn_run_calls(&t, e);
    if (r != 0 || t.ncalls == 0) {
      scope.done = r >= 0;
      return r;
    }
    scope.done = true;
    if (t.next)
      a = t.next;
  }
}
