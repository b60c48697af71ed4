#include "controller/run/runner.h"
#include "controller/run/sandboxes.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/manifest.h"
#include "controller/run/approvals.h"
#include "controller/run/instructions.h"
#include "controller/run/schema.h"
#include "controller/sandbox/materialize.h"
#include "controller/state/state.h"
#include "controller/telemetry/events.h"
#include "controller/telemetry/trace.h"
#include "controller/tools/tools.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/rand.h"

#define RUNNER_MAX_CLIENTS 8
#define RUNNER_MAX_PARALLEL 16
#define RUNNER_MAX_NESTING 4

struct client_slot {
  enum model_api api;
  char *base_url; /* NULL: the default */
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
  char rs_path[4200]; /* where it is written */
  size_t rs_items;    /* conversation items already in the journal */
  int rs_jfd;         /* the journal, open for appending, or -1 */
  bool rs_written;    /* the state file exists */
  int64_t rs_seq;     /* saves so far: the state file and checkpoints say */
};

/* Per agent of one run: its sandbox, manifest and tools. */
struct agent_state {
  struct sandbox *sb;
  struct manifest *manifest;
  struct toolbox tb;
  bool ready;
  bool borrowed;                    /* --sandbox: not ours to close */
  char record_id[STATE_ID_LEN + 1]; /* recorded in the state dir, or "" */
  /* Built at the first turn and the same for every turn after. */
  char *instr;
  json_t *tools; /* for tools_api */
  enum model_api tools_api;
};

static void state_clear(struct agent_state *st) {
  manifest_free(st->manifest);
  free(st->instr);
  json_decref(st->tools);
  memset(st, 0, sizeof(*st));
}

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
};

/* ---- events and spans -------------------------------------------------- */

static void on_delta(void *arg, const char *text, size_t len) {
  struct client_slot *c = arg;
  events_text_delta(c->sh->ev, &c->where, text, len);
}

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

static void trace_usage(struct trace_span *sp, const struct model_usage *u) {
  trace_set_int(sp, "gen_ai.usage.input_tokens", u->input_tokens);
  trace_set_int(sp, "gen_ai.usage.output_tokens", u->output_tokens);
  trace_set_int(sp, "sbx.usage.total_tokens", u->total_tokens);
  trace_set_int(sp, "sbx.usage.reasoning_tokens", u->reasoning_tokens);
  trace_set_int(sp, "sbx.usage.cached_tokens", u->cached_tokens);
}

/* ---- model clients ----------------------------------------------------- */

static int get_client(struct shared *sh, const struct agent *a,
                      struct client_slot **out, struct sbx_error *e) {
  enum model_api api = a->api == AGENT_API_CHAT_COMPLETIONS
                           ? MODEL_API_CHAT
                           : MODEL_API_RESPONSES;
  const char *url = a->base_url;
  pthread_mutex_lock(&sh->mu);
  for (size_t i = 0; i < sh->nclients; i++) {
    struct client_slot *c = &sh->clients[i];
    if (c->api == api &&
        ((!c->base_url && !url) ||
         (c->base_url && url && strcmp(c->base_url, url) == 0))) {
      *out = c;
      pthread_mutex_unlock(&sh->mu);
      return 0;
    }
  }
  int r = 0;
  const struct model_config *base = &sh->o->model_cfg;
  if (sh->nclients > 0 && (base->record_path || base->replay_path)) {
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "--record and --replay need every agent on the same "
                      "API and base_url (agent \"%s\" differs)",
                      a->name);
  } else if (sh->nclients == RUNNER_MAX_CLIENTS) {
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                      "agents use more than %d model endpoints",
                      RUNNER_MAX_CLIENTS);
  } else {
    struct model_config cfg = *base;
    cfg.api = api;
    if (url)
      cfg.base_url = url;
    struct client_slot *c = &sh->clients[sh->nclients];
    if (sh->ev) {
      cfg.on_delta = on_delta;
      cfg.delta_arg = c;
    }
    r = model_client_new(&cfg, &c->client, e);
    if (r == 0) {
      c->api = api;
      c->base_url = url ? strdup(url) : NULL;
      c->sh = sh;
      (void)pthread_mutex_init(&c->call_mu, NULL);
      sh->nclients++;
      *out = c;
    }
  }
  pthread_mutex_unlock(&sh->mu);
  return r;
}

/* ---- sandboxes --------------------------------------------------------- */

static bool has_cap(const struct agent *a, enum agent_capability c) {
  for (size_t i = 0; i < a->ncapabilities; i++)
    if (a->capabilities[i] == c)
      return true;
  return false;
}

static bool uses_sandbox(const struct agent *a) {
  return has_cap(a, AGENT_CAP_FILESYSTEM) || has_cap(a, AGENT_CAP_SHELL) ||
         a->default_manifest != NULL;
}

/* Creates A's sandbox (lifecycle.h), or for the starting agent of a
 * --sandbox run applies its manifest to that live sandbox. */
static int create_state(struct run *run, const struct agent *a,
                        struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  /* The root run's sandboxes are recorded so the run can be resumed. */
  const char *persist =
      run->sh->rs && run->depth == 0 ? run->sh->o->state_dir : NULL;
  int r = run_agent_sandbox(run->sh->o, a, run->depth == 0 && a->index == 0,
                            persist, st->record_id, &st->sb, &st->manifest,
                            &st->borrowed, &run->res->config_error, e);
  if (r < 0)
    return r;
  const struct run_options *o = run->sh->o;
  json_t *ports = json_object();
  for (size_t i = 0; ports && i < o->n_exposed_ports; i++) {
    char ep[300], key[8];
    if (lifecycle_resolve_port(st->sb, o->exposed_ports, o->n_exposed_ports,
                               o->exposed_ports[i], ep, sizeof(ep), NULL) < 0)
      continue;
    (void)snprintf(key, sizeof(key), "%u", (unsigned)o->exposed_ports[i]);
    json_object_set_new(ports, key, json_string(ep));
  }
  events_sandbox_created(
      run->sh->ev, &(struct events_where){a->name, (int)run->depth, run->turn},
      st->sb->session_id, st->sb->backend->name, st->borrowed, ports);
  json_decref(ports);
  bool chat = a->api == AGENT_API_CHAT_COMPLETIONS;
  toolbox_init(&st->tb, st->sb, o->cwd, a->run_as, chat);
  st->ready = true;
  return 0;
}

/* Gets A's sandbox ready on first use, traced as sandbox.create_session
 * (sandbox.start for the live sandbox of a --sandbox run). */
static int ensure_state(struct run *run, const struct agent *a,
                        struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (st->ready || !uses_sandbox(a))
    return 0;
  bool attach = run->sh->o->sandbox && run->depth == 0 && a->index == 0;
  struct trace_span *sp =
      trace_child(run->turn_span,
                  attach ? TRACE_SANDBOX_START : TRACE_SANDBOX_CREATE_SESSION);
  trace_set_str(sp, "gen_ai.agent.name", a->name);
  trace_set_str(sp, "sandbox.backend", run->sh->o->backend->name);
  int r = create_state(run, a, e);
  if (st->sb) {
    trace_set_str(sp, "sandbox.backend", st->sb->backend->name);
    trace_set_str(sp, "sandbox.session_id", st->sb->session_id);
  }
  if (r < 0)
    trace_set_error(sp, "%s", e && e->msg[0] ? e->msg : strerror(-r));
  trace_end(sp);
  return r;
}

/* Closes the run's sandboxes: sandbox.cleanup, one sandbox.shutdown each.
 * With PAUSE, recorded sandboxes are left running for the resumed run. */
static void close_states(struct run *run, bool pause) {
  struct trace_span *cs = trace_child(run->span, TRACE_SANDBOX_CLEANUP);
  int64_t n = 0;
  for (size_t i = 0; i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (pause && st->record_id[0] && st->sb) {
      if (st->ready)
        toolbox_detach(&st->tb);
      if (st->sb->backend->detach)
        st->sb->backend->detach(st->sb);
      else
        sandbox_free(st->sb);
      state_clear(st);
      continue;
    }
    if (st->ready)
      toolbox_fini(&st->tb);
    if (st->sb && !st->borrowed) {
      struct sbx_error e = {0};
      struct trace_span *sp = trace_child(cs, TRACE_SANDBOX_SHUTDOWN);
      trace_set_str(sp, "gen_ai.agent.name",
                    run->sh->o->agents->agents[i]->name);
      trace_set_str(sp, "sandbox.session_id", st->sb->session_id);
      if (st->sb->backend->close(st->sb, &e) < 0) {
        log_warn("closing sandbox: %s", e.msg);
        trace_set_error(sp, "%s", e.msg);
      }
      trace_end(sp);
      n++;
      if (st->record_id[0])
        state_remove(run->sh->o->state_dir, st->record_id);
    }
    state_clear(st);
  }
  trace_set_int(cs, "sandbox.session_count", n);
  trace_end(cs);
}

/* ---- requests ---------------------------------------------------------- */

static const char *effort_name(enum agent_effort x) {
  switch (x) {
  case AGENT_EFFORT_MINIMAL:
    return "minimal";
  case AGENT_EFFORT_LOW:
    return "low";
  case AGENT_EFFORT_MEDIUM:
    return "medium";
  case AGENT_EFFORT_HIGH:
    return "high";
  default:
    return NULL;
  }
}

static json_t *settings_json(const struct agent_model_settings *m) {
  json_t *s = json_object();
  if (m->has_temperature)
    json_object_set_new(s, "temperature", json_real(m->temperature));
  if (effort_name(m->reasoning_effort))
    json_object_set_new(
        s, "reasoning",
        json_pack("{s:s}", "effort", effort_name(m->reasoning_effort)));
  switch (m->tool_choice) {
  case AGENT_TOOL_CHOICE_AUTO:
    json_object_set_new(s, "tool_choice", json_string("auto"));
    break;
  case AGENT_TOOL_CHOICE_REQUIRED:
    json_object_set_new(s, "tool_choice", json_string("required"));
    break;
  case AGENT_TOOL_CHOICE_NONE:
    json_object_set_new(s, "tool_choice", json_string("none"));
    break;
  case AGENT_TOOL_CHOICE_NAMED:
    json_object_set_new(s, "tool_choice",
                        json_pack("{s:s, s:s}", "type", "function", "name",
                                  m->tool_choice_name));
    break;
  default:
    break;
  }
  if (m->parallel_tool_calls >= 0)
    json_object_set_new(s, "parallel_tool_calls",
                        json_boolean(m->parallel_tool_calls));
  if (m->max_output_tokens > 0)
    json_object_set_new(s, "max_output_tokens",
                        json_integer(m->max_output_tokens));
  return s;
}

/* A function name from an agent name: lowercase, [a-z0-9_]. */
static void snake(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < cap; p++) {
    char c = *p;
    if (c >= 'A' && c <= 'Z')
      c = (char)(c + 32);
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
      c = '_';
    out[o++] = c;
  }
  out[o] = '\0';
}

static void handoff_name(const struct agent *a, char *out, size_t cap) {
  char s[128];
  snake(a->name, s, sizeof(s));
  (void)snprintf(out, cap, "transfer_to_%s", s);
}

static void tool_agent_name(const struct agent_tool *t, char *out, size_t cap) {
  if (t->name) {
    (void)snprintf(out, cap, "%s", t->name);
    return;
  }
  snake(t->agent->name, out, cap);
}

static json_t *build_tools(const struct agent *a, enum model_api api) {
  json_t *tools = json_array();
  for (size_t i = 0; i < a->ntools; i++) {
    const struct agent_tool *t = &a->tools[i];
    char name[128];
    tool_agent_name(t, name, sizeof(name));
    char desc[512];
    (void)snprintf(desc, sizeof(desc), "%s",
                   t->description
                       ? t->description
                       : (t->agent->instructions
                              ? "Runs the agent on the given input "
                                "and returns its answer."
                              : "Runs the agent on the given input."));
    json_array_append_new(
        tools,
        json_pack("{s:s, s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s], s:b}, s:b}",
                  "type", "function", "name", name, "description", desc,
                  "parameters", "type", "object", "properties", "input", "type",
                  "string", "required", "input", "additionalProperties", 0,
                  "strict", 1));
  }
  for (size_t i = 0; i < a->nhandoffs; i++) {
    char name[160];
    handoff_name(a->handoffs[i], name, sizeof(name));
    char desc[512];
    (void)snprintf(desc, sizeof(desc),
                   "Handoff to the %s agent to handle the request.",
                   a->handoffs[i]->name);
    json_array_append_new(
        tools, json_pack("{s:s, s:s, s:s, s:{s:s, s:{}, s:[], s:b}, s:b}",
                         "type", "function", "name", name, "description", desc,
                         "parameters", "type", "object", "properties",
                         "required", "additionalProperties", 0, "strict", 1));
  }
  json_t *caps = tools_definitions(has_cap(a, AGENT_CAP_FILESYSTEM),
                                   has_cap(a, AGENT_CAP_SHELL),
                                   model_api_features(api)->hosted_tools);
  json_array_extend(tools, caps);
  json_decref(caps);
  return tools;
}

/* The input for the next call: everything before the last compaction
 * item is dropped (the server summarized it). New reference. */
static json_t *turn_input(json_t *items) {
  size_t last = 0;
  bool found = false;
  size_t i;
  json_t *x;
  json_array_foreach(items, i, x) {
    const char *t = json_string_value(json_object_get(x, "type"));
    if (t && strcmp(t, "compaction") == 0) {
      last = i;
      found = true;
    }
  }
  if (!found)
    return json_incref(items);
  json_t *out = json_array();
  for (i = last; i < json_array_size(items); i++)
    json_array_append(out, json_array_get(items, i));
  return out;
}

/* ---- tool calls -------------------------------------------------------- */

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
  bool skip; /* answered without running (a rejected call) */
};

static int run_nested(struct call_job *j, const struct agent_tool *t,
                      const char *input, char **out);

/* Runs J's call into j->output, or fails the run with j->rc and j->err. */
static void run_call(struct call_job *j) {
  struct run *run = j->run;
  const struct agent *a = j->agent;
  struct agent_state *st = &run->states[a->index];
  const char *type = json_string_value(json_object_get(j->item, "type"));
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  if (!call_id)
    call_id = "";
  if (strcmp(type, "apply_patch_call") == 0) {
    json_t *op = json_object_get(j->item, "operation");
    const char *status = "failed";
    char *text = NULL;
    if (!st->ready) {
      text = strdup("apply_patch needs the filesystem capability");
      (void)sbx_error_set(&j->tc.failure, SBX_INVALID_ARGUMENT, EINVAL,
                          "apply_patch needs the filesystem capability");
    } else {
      j->rc = tools_apply_patch_operation(&st->tb, op, &status, &text, &j->tc);
    }
    j->output = json_pack("{s:s, s:s, s:s}", "type", "apply_patch_call_output",
                          "call_id", call_id, "status", status);
    if (text)
      json_object_set_new(j->output, "output", json_string(text));
    free(text);
    return;
  }
  const char *name = json_string_value(json_object_get(j->item, "name"));
  const char *args = json_string_value(json_object_get(j->item, "arguments"));
  if (!name)
    name = "";
  json_t *out = NULL;
  for (size_t i = 0; i < a->ntools && !out; i++) {
    char tn[128];
    tool_agent_name(&a->tools[i], tn, sizeof(tn));
    if (strcmp(tn, name) != 0)
      continue;
    json_error_t je;
    json_t *in = json_loads(args ? args : "", 0, &je);
    const char *input = json_string_value(json_object_get(in, "input"));
    char *answer = NULL;
    if (!input) {
      out = json_string(tools_generic_error);
      (void)sbx_error_set(&j->tc.failure, SBX_INVALID_ARGUMENT, EINVAL,
                          "invalid arguments");
    } else {
      j->rc = run_nested(j, &a->tools[i], input, &answer);
      out = j->rc == 0 ? json_string(answer) : NULL;
    }
    free(answer);
    json_decref(in);
    if (!out && j->rc == 0)
      j->rc = -ENOMEM;
    if (j->rc < 0)
      return;
  }
  if (!out) {
    if (!st->ready) {
      j->rc = sbx_error_set(&j->err, SBX_INTERNAL, ENOENT,
                            "the model called tool \"%s\", which agent \"%s\" "
                            "does not have",
                            name, a->name);
      return;
    }
    int r = tools_call(&st->tb, name, args, &out, &j->tc);
    if (r == -ENOENT) {
      j->rc = sbx_error_set(&j->err, SBX_INTERNAL, ENOENT,
                            "the model called tool \"%s\", which agent \"%s\" "
                            "does not have",
                            name, a->name);
      return;
    }
    if (r < 0) {
      j->rc = r;
      return;
    }
  }
  j->output = json_pack("{s:s, s:s, s:o}", "type", "function_call_output",
                        "call_id", call_id, "output", out);
}

/* One tool call of a response, in its own thread: tool_call_started, the
 * call in an sbx.tool_call span, tool_call_finished. */
static void *call_main(void *arg) {
  struct call_job *j = arg;
  struct run *run = j->run;
  struct events *ev = run->sh->ev;
  struct events_where w = {j->agent->name, (int)run->depth, run->turn};
  bool patch = strcmp(json_string_value(json_object_get(j->item, "type")),
                      "apply_patch_call") == 0;
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  const char *name = patch
                         ? "apply_patch"
                         : json_string_value(json_object_get(j->item, "name"));
  char *args =
      patch ? json_dumps(json_object_get(j->item, "operation"), JSON_COMPACT)
            : NULL;
  events_tool_call_started(
      ev, &w, name, call_id,
      patch ? args : json_string_value(json_object_get(j->item, "arguments")));
  free(args);
  j->tc.span = trace_child(run->turn_span, TRACE_TOOL_CALL);
  trace_set_str(j->tc.span, "gen_ai.tool.name", name);
  trace_set_str(j->tc.span, "gen_ai.tool.call.id", call_id);
  trace_set_str(j->tc.span, "gen_ai.agent.name", j->agent->name);
  uint64_t t0 = sbx_now_ns();
  /* Mutating sandbox requests get ids derived from the run and the call:
   * a resumed run that repeats this call is answered from sandboxd's reply
   * cache instead of doing the work twice. */
  char tag[64];
  (void)snprintf(tag, sizeof(tag), "%.12s-%u-%.40s", run->sh->run_id,
                 run->depth, call_id ? call_id : "");
  sbx_client_set_tag(tag);
  run_call(j);
  sbx_client_set_tag(NULL);
  const char *error = NULL;
  if (j->rc < 0)
    error = j->err.msg[0] ? j->err.msg : strerror(-j->rc);
  else if (j->tc.failure.code != SBX_OK)
    error = j->tc.failure.msg;
  const char *status = error ? "failed" : "completed";
  events_tool_call_finished(ev, &w, name, call_id, status,
                            json_object_get(j->output, "output"), error,
                            (int64_t)((sbx_now_ns() - t0) / 1000000));
  trace_set_str(j->tc.span, "sbx.tool.status", status);
  if (error)
    trace_set_error(j->tc.span, "%s", error);
  trace_end(j->tc.span);
  j->tc.span = NULL;
  return NULL;
}

/* ---- the loop ---------------------------------------------------------- */

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

static const struct agent *find_handoff(const struct agent *a,
                                        const char *name) {
  for (size_t i = 0; i < a->nhandoffs; i++) {
    char hn[160];
    handoff_name(a->handoffs[i], hn, sizeof(hn));
    if (strcmp(hn, name) == 0)
      return a->handoffs[i];
  }
  return NULL;
}

/* The model for agent A: --model, the agent's, $OPENAI_DEFAULT_MODEL, or
 * the default. */
static const char *model_for(const struct run_options *o,
                             const struct agent *a) {
  const char *model = o->model ? o->model : a->model;
  if (!model)
    model = getenv("OPENAI_DEFAULT_MODEL");
  return model ? model : "gpt-5.6-luna";
}

/* One model call in an sbx.model_call span. The slot's lock keeps the
 * call's text deltas attributed to this agent and turn. */
static int call_model(struct run *run, struct client_slot *c,
                      const struct agent *a, const struct model_request *req,
                      struct model_response *resp, struct sbx_error *e) {
  struct trace_span *sp = trace_child(run->turn_span, TRACE_MODEL_CALL);
  trace_set_str(sp, "gen_ai.system", "openai");
  trace_set_str(sp, "gen_ai.operation.name", "chat");
  trace_set_str(sp, "gen_ai.request.model", req->model);
  trace_set_str(sp, "sbx.model.api", model_api_features(c->api)->trace_name);
  pthread_mutex_lock(&c->call_mu);
  c->where = (struct events_where){a->name, (int)run->depth, run->turn};
  int r = model_call(c->client, req, resp, e);
  pthread_mutex_unlock(&c->call_mu);
  if (r < 0) {
    trace_set_error(sp, "%s", e && e->msg[0] ? e->msg : strerror(-r));
  } else {
    trace_set_str(sp, "gen_ai.response.id", resp->id);
    trace_usage(sp, &resp->usage);
  }
  trace_end(sp);
  return r;
}

/* ---- run state --------------------------------------------------------- */

/* The members of the run state that change as a run goes; a checkpoint
 * line in the journal carries these. */
static const char *const rs_progress_keys[] = {
    "seq",     "status", "agent",     "turn",         "items_count",
    "pending", "usage",  "sandboxes", "final_output",
};

/* The journal's line for a checkpoint: an object with this one member,
 * which no conversation item has. */
#define RS_CHECKPOINT "sbx.checkpoint"

/* Appends LEN bytes of TEXT to the journal, opening it the first time. */
static int rs_append(struct shared *sh, const char *text, size_t len) {
  if (sh->rs_jfd < 0) {
    char jpath[4300];
    (void)snprintf(jpath, sizeof(jpath), "%s.items", sh->rs_path);
    sh->rs_jfd = open(jpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (sh->rs_jfd < 0) {
      int r = -errno;
      log_warn("cannot write the run journal \"%s\": %m", jpath);
      return r;
    }
  }
  /* One write: a kill leaves at most a partial last line, which a resume
   * ignores. */
  return sbx_write_all(sh->rs_jfd, text, len);
}

/* Saves the root run's state: the conversation, the current agent, the
 * calls of the last response still to run (PENDING, the response's output
 * items), usage, and each sandbox's record and running exec sessions. A
 * no-op without a state dir.
 *
 * The conversation goes to an append-only journal beside the state file,
 * one item a line, so a save costs the new items, not the whole run. A
 * save while the run goes on ("running") appends a checkpoint line with
 * the rest of what changed, in the same write as its items; the state file
 * itself is replaced (temp file and rename) only when the run starts,
 * pauses or finishes, so that other processes (sbx approve) read it whole.
 * Both carry a sequence number; a resume takes the newer. */
static int rs_save(struct run *run, const struct agent *a, const char *status,
                   json_t *pending) {
  struct shared *sh = run->sh;
  if (!sh->rs || run->depth != 0)
    return 0;
  json_t *rs = sh->rs;
  const struct model_usage *u = &run->res->usage;
  json_object_set_new(rs, "seq", json_integer(++sh->rs_seq));
  json_object_set_new(rs, "status", json_string(status));
  json_object_set_new(rs, "agent", json_integer((json_int_t)a->index));
  json_object_set_new(rs, "turn", json_integer(run->turn));
  size_t n = json_array_size(run->items);
  json_object_set_new(rs, "items_count", json_integer((json_int_t)n));
  json_object_set_new(rs, "pending",
                      pending ? json_incref(pending) : json_null());
  json_object_set_new(
      rs, "usage",
      json_pack("{s:I, s:I, s:I, s:I, s:I, s:i}", "input_tokens",
                (json_int_t)u->input_tokens, "output_tokens",
                (json_int_t)u->output_tokens, "total_tokens",
                (json_int_t)u->total_tokens, "reasoning_tokens",
                (json_int_t)u->reasoning_tokens, "cached_tokens",
                (json_int_t)u->cached_tokens, "turns", run->res->turns));
  json_t *sbs = json_object();
  for (size_t i = 0; i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (!st->record_id[0] || !st->ready)
      continue;
    char key[16];
    (void)snprintf(key, sizeof(key), "%zu", i);
    json_object_set_new(sbs, key,
                        json_pack("{s:s, s:o}", "record", st->record_id,
                                  "tools", toolbox_save(&st->tb)));
  }
  json_object_set_new(rs, "sandboxes", sbs);
  if (run->res->final_output)
    json_object_set_new(rs, "final_output",
                        json_string(run->res->final_output));

  bool checkpoint = sh->rs_written && strcmp(status, "running") == 0;
  _cleanup_buf_ struct sbx_buf j;
  sbx_buf_init(&j, 4096);
  int r = 0;
  for (size_t i = sh->rs_items; i < n && r == 0; i++) {
    _cleanup_free_ char *line = json_dumps(json_array_get(run->items, i),
                                           JSON_COMPACT | JSON_ENSURE_ASCII);
    r = line ? sbx_buf_printf(&j, "%s\n", line) : -ENOMEM;
  }
  if (r == 0 && checkpoint) {
    json_t *body = json_object();
    _cleanup_json_ json_t *cp = json_pack("{s:o}", RS_CHECKPOINT, body);
    for (size_t i = 0; cp && i < SBX_ARRAY_SIZE(rs_progress_keys); i++) {
      json_t *v = json_object_get(rs, rs_progress_keys[i]);
      if (v)
        json_object_set(body, rs_progress_keys[i], v);
    }
    _cleanup_free_ char *line =
        cp ? json_dumps(cp, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    r = line ? sbx_buf_printf(&j, "%s\n", line) : -ENOMEM;
  }
  if (r == 0 && j.len)
    r = rs_append(sh, j.data, j.len);
  if (r < 0) {
    log_warn("cannot write the run journal of \"%s\": %s", sh->rs_path,
             strerror(-r));
    return r;
  }
  sh->rs_items = n;
  if (checkpoint)
    return 0;
  _cleanup_free_ char *text = json_dumps(rs, JSON_COMPACT);
  if (!text)
    return -ENOMEM;
  r = sbx_write_file_replace(sh->rs_path, text, strlen(text), 0600);
  if (r < 0)
    log_warn("cannot write the run state \"%s\": %s", sh->rs_path,
             strerror(-r));
  else
    sh->rs_written = true;
  return r;
}

/* The decision recorded for CALL_ID by sbx approve / sbx reject, or NULL. */
static const char *decision_for(struct run *run, const char *call_id,
                                const char **reason) {
  json_t *d = json_object_get(json_object_get(run->sh->rs, "decisions"),
                              call_id ? call_id : "");
  *reason = json_string_value(json_object_get(d, "reason"));
  return json_string_value(json_object_get(d, "decision"));
}

static void record_decision(struct run *run, const char *call_id,
                            const char *decision, const char *reason) {
  json_t *ds = json_object_get(run->sh->rs, "decisions");
  if (!json_is_object(ds)) {
    ds = json_object();
    json_object_set_new(run->sh->rs, "decisions", ds);
  }
  json_object_set_new(
      ds, call_id,
      json_pack("{s:s, s:s?}", "decision", decision, "reason", reason));
}

/* Asks on the terminal whether the call may run; records the answer. */
static bool ask_approval(struct run *run, const char *tool, const char *args,
                         const char *call_id) {
  FILE *tty = run->sh->o->ask_tty;
  fprintf(tty, "sbx: %s wants to run %s %s\nApprove? [y/N] ",
          run->sh->o->agents->agents[0]->name, tool, args ? args : "");
  fflush(tty);
  char line[512];
  bool yes =
      fgets(line, sizeof(line), tty) && (line[0] == 'y' || line[0] == 'Y');
  char reason[512] = "";
  if (!yes) {
    fprintf(tty, "Reason (optional): ");
    fflush(tty);
    if (fgets(reason, sizeof(reason), tty))
      reason[strcspn(reason, "\n")] = '\0';
  }
  record_decision(run, call_id, yes ? "approved" : "rejected",
                  reason[0] ? reason : NULL);
  return yes;
}

/* The output item that answers ITEM with a rejection. */
static json_t *rejected_output(json_t *item, const char *reason) {
  const char *type = json_string_value(json_object_get(item, "type"));
  const char *call_id = json_string_value(json_object_get(item, "call_id"));
  char *text = approvals_rejection_text(reason);
  json_t *out;
  if (type && strcmp(type, "apply_patch_call") == 0)
    out = json_pack("{s:s, s:s, s:s, s:s}", "type", "apply_patch_call_output",
                    "call_id", call_id ? call_id : "", "status", "failed",
                    "output", text ? text : "");
  else
    out =
        json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id",
                  call_id ? call_id : "", "output", text ? text : "");
  free(text);
  return out;
}

static int loop(struct run *run, const struct agent *start, int64_t max_turns,
                struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  const struct agent *a = start;
  for (int turn = run->first_turn > 0 ? run->first_turn : 1;; turn++) {
    if (turn > max_turns)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "max turns (%lld) exceeded", (long long)max_turns);
    run->turn = turn;
    run->turn_span = trace_child(run->span, TRACE_TURN);
    _cleanup_(turn_scope_end) struct turn_scope scope = {run, e, false};
    trace_set_int(run->turn_span, "sbx.turn", turn);
    trace_set_int(run->turn_span, "sbx.depth", run->depth);
    trace_set_str(run->turn_span, "gen_ai.agent.name", a->name);
    struct events_where w = {a->name, (int)run->depth, turn};
    int r = ensure_state(run, a, e);
    if (r < 0)
      return r;
    struct client_slot *slot = NULL;
    r = get_client(sh, a, &slot, e);
    if (r < 0) {
      run->res->config_error = true;
      return r;
    }
    enum model_api api = model_client_api(slot->client);
    struct agent_state *st = &run->states[a->index];
    struct instructions_input ii = {
        .base = a->base_instructions,
        .agent = a->instructions,
        .shell = has_cap(a, AGENT_CAP_SHELL),
        .manifest = st->manifest,
        .root = st->sb ? st->sb->root : "/workspace",
        .cwd = o->cwd,
    };
    if (!st->instr && !(st->instr = instructions_build(&ii)))
      return -ENOMEM;
    const char *instr = st->instr;
    if (!st->tools || st->tools_api != api) {
      json_decref(st->tools);
      st->tools = build_tools(a, api);
      st->tools_api = api;
    }
    json_t *tools = st->tools;
    _cleanup_json_ json_t *settings = settings_json(&a->model_settings);
    _cleanup_json_ json_t *input = turn_input(run->items);
    _cleanup_json_ json_t *extra = NULL;
    const char *model = model_for(o, a);
    if (has_cap(a, AGENT_CAP_COMPACTION) && model_api_features(api)->compaction)
      extra = json_pack("{s:[{s:s, s:I}]}", "context_management", "type",
                        "compaction", "compact_threshold",
                        (json_int_t)model_compaction_threshold(model));
    struct model_request req = {
        .model = model,
        .instructions = instr,
        .input = input,
        .tools = tools,
        .model_settings = settings,
        .output_schema = a->output_type,
        .extra = extra,
    };
    struct model_response resp = {0};
    /* A resumed run first runs the calls its last response left pending. */
    json_t *pending =
        sh->rs && run->depth == 0 ? json_object_get(sh->rs, "pending") : NULL;
    bool resumed = json_is_array(pending) && json_array_size(pending) > 0;
    if (resumed) {
      resp.output = json_incref(pending);
    } else {
      r = call_model(run, slot, a, &req, &resp, e);
      if (r < 0)
        return r;
    }
    struct model_usage turn_usage = resp.usage;
    struct model_usage *u = &run->res->usage;
    u->input_tokens += resp.usage.input_tokens;
    u->output_tokens += resp.usage.output_tokens;
    u->total_tokens += resp.usage.total_tokens;
    u->reasoning_tokens += resp.usage.reasoning_tokens;
    u->cached_tokens += resp.usage.cached_tokens;
    if (!resumed) {
      run->res->turns++;
      json_array_extend(run->items, resp.output);
    }
    size_t first_new = 0;
    size_t ncalls = 0;
    size_t i;
    json_t *it;
    json_array_foreach(resp.output, i, it) {
      const char *t = json_string_value(json_object_get(it, "type"));
      if (t && (strcmp(t, "function_call") == 0 ||
                strcmp(t, "apply_patch_call") == 0))
        ncalls++;
    }
    trace_set_int(run->turn_span, "sbx.tool_calls", (int64_t)ncalls);
    if (ncalls > 0 && !resumed)
      (void)rs_save(run, a, "running", resp.output);
    if (ncalls == 0) {
      events_turn_finished(sh->ev, &w, model, 0, &turn_usage);
      json_t *last = NULL;
      json_array_foreach(resp.output, i, it) {
        const char *t = json_string_value(json_object_get(it, "type"));
        if (t && strcmp(t, "message") == 0)
          last = it;
      }
      char *text = last ? message_text(last) : strdup("");
      model_response_clear(&resp);
      if (!text)
        return -ENOMEM;
      run->res->final_output = text;
      run->res->last_agent = a->name;
      if (a->output_type) {
        json_error_t je;
        run->res->final_json = json_loads(text, JSON_DECODE_ANY, &je);
        if (!run->res->final_json)
          return sbx_error_set(
              e, SBX_INTERNAL, EBADMSG,
              "agent \"%s\" answered with invalid JSON for its "
              "output_type: %s",
              a->name, je.text);
        struct sbx_error se = {0};
        if (schema_validate(a->output_type, run->res->final_json, &se) < 0)
          return sbx_error_set(e, SBX_INTERNAL, EBADMSG,
                               "agent \"%s\" answered with JSON that does not "
                               "match its output_type: %s",
                               a->name, se.msg);
      }
      (void)rs_save(run, a, "finished", NULL);
      scope.done = true;
      return 0;
    }

    /* Run the calls of this response concurrently; handoffs last. */
    struct call_job *jobs = calloc(ncalls, sizeof(*jobs));
    if (!jobs) {
      model_response_clear(&resp);
      return -ENOMEM;
    }
    size_t nj = 0;
    const struct agent *next = NULL;
    const char *next_call_id = NULL; /* borrowed from run->items */
    json_t *handoff_outputs = json_array();
    json_array_foreach(resp.output, i, it) {
      const char *t = json_string_value(json_object_get(it, "type"));
      if (!t || (strcmp(t, "function_call") != 0 &&
                 strcmp(t, "apply_patch_call") != 0))
        continue;
      const char *name = json_string_value(json_object_get(it, "name"));
      const struct agent *h = strcmp(t, "function_call") == 0 && name
                                  ? find_handoff(a, name)
                                  : NULL;
      if (h) {
        const char *cid = json_string_value(json_object_get(it, "call_id"));
        json_t *outp;
        if (!next) {
          next = h;
          next_call_id = cid;
          outp = json_pack("{s:s}", "assistant", h->name);
          char *s = json_dumps(outp, JSON_COMPACT);
          json_decref(outp);
          outp = json_string(s ? s : "");
          free(s);
        } else {
          outp = json_string("Multiple handoffs detected, ignoring this one.");
        }
        json_array_append_new(handoff_outputs,
                              json_pack("{s:s, s:s, s:o}", "type",
                                        "function_call_output", "call_id",
                                        cid ? cid : "", "output", outp));
        continue;
      }
      jobs[nj].run = run;
      jobs[nj].agent = a;
      jobs[nj].item = it;
      nj++;
    }
    /* Calls that need a person: run when approved, answered with the reason
     * when rejected, else asked on the terminal or the run pauses. */
    size_t awaiting = 0;
    for (size_t m = 0; m < nj; m++) {
      json_t *it2 = jobs[m].item;
      bool patch = strcmp(json_string_value(json_object_get(it2, "type")),
                          "apply_patch_call") == 0;
      const char *cid = json_string_value(json_object_get(it2, "call_id"));
      const char *tool = patch
                             ? "apply_patch"
                             : json_string_value(json_object_get(it2, "name"));
      _cleanup_free_ char *pargs =
          patch ? json_dumps(json_object_get(it2, "operation"), JSON_COMPACT)
                : NULL;
      const char *args =
          patch ? pargs : json_string_value(json_object_get(it2, "arguments"));
      if (!tool || !approvals_needed(a, tool, args))
        continue;
      const char *reason = NULL;
      const char *dec = sh->rs ? decision_for(run, cid, &reason) : NULL;
      if (!dec && o->approve_ask && o->ask_tty && sh->rs && cid) {
        events_approval_requested(sh->ev, &w, tool, cid, args, NULL);
        (void)ask_approval(run, tool, args, cid);
        dec = decision_for(run, cid, &reason);
      }
      if (dec && strcmp(dec, "approved") == 0)
        continue;
      if (dec && strcmp(dec, "rejected") == 0) {
        jobs[m].output = rejected_output(it2, reason);
        jobs[m].skip = true;
        continue;
      }
      awaiting++;
      events_approval_requested(sh->ev, &w, tool, cid, args,
                                sh->rs ? sh->rs_path : NULL);
    }
    if (awaiting) {
      for (size_t m = 0; m < nj; m++)
        json_decref(jobs[m].output);
      free(jobs);
      json_decref(handoff_outputs);
      if (!sh->rs) {
        model_response_clear(&resp);
        return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                             "a tool call needs approval, but the run has no "
                             "state to pause in");
      }
      (void)rs_save(run, a, "awaiting_approval", resp.output);
      model_response_clear(&resp);
      scope.done = true;
      return RUNNER_PAUSED;
    }
    /* At most RUNNER_MAX_PARALLEL at once. */
    for (size_t k = 0; k < nj; k += RUNNER_MAX_PARALLEL) {
      size_t end = k + RUNNER_MAX_PARALLEL < nj ? k + RUNNER_MAX_PARALLEL : nj;
      for (size_t m = k; m < end; m++) {
        if (jobs[m].skip)
          continue;
        if (nj == 1 ||
            pthread_create(&jobs[m].thread, NULL, call_main, &jobs[m]) != 0)
          call_main(&jobs[m]);
        else
          jobs[m].started = true;
      }
      for (size_t m = k; m < end; m++)
        if (jobs[m].started)
          (void)pthread_join(jobs[m].thread, NULL);
    }
    r = 0;
    for (size_t m = 0; m < nj; m++) {
      if (jobs[m].rc < 0 && r == 0) {
        r = jobs[m].rc;
        if (e)
          *e = jobs[m].err;
      }
      if (jobs[m].output)
        json_array_append_new(run->items, jobs[m].output);
    }
    free(jobs);
    json_array_extend(run->items, handoff_outputs);
    json_decref(handoff_outputs);
    model_response_clear(&resp);
    (void)first_new;
    if (r < 0) {
      if (e && e->code == SBX_OK)
        sbx_error_set(e, SBX_INTERNAL, -r, "a tool call failed: %s",
                      strerror(-r));
      return r;
    }
    if (next) {
      events_handoff(sh->ev, &w, next->name, next_call_id);
      trace_set_str(run->turn_span, "sbx.handoff.to", next->name);
    }
    (void)rs_save(run, next ? next : a, "running", NULL);
    events_turn_finished(sh->ev, &w, model, ncalls, &turn_usage);
    scope.done = true;
    if (next)
      a = next;
  }
}

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

static json_t *user_message(const char *text) {
  return json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "type", "message", "role",
                   "user", "content", "type", "input_text", "text", text);
}

/* Runs the agent T for the tool call J, as a run nested in J's, under J's
 * span; its answer goes to *OUT (new); failures to j->err. */
static int run_nested(struct call_job *j, const struct agent_tool *t,
                      const char *input, char **out) {
  struct run *parent = j->run;
  struct sbx_error *e = &j->err;
  if (parent->depth + 1 > RUNNER_MAX_NESTING)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "agents used as tools nest deeper than %d",
                         RUNNER_MAX_NESTING);
  struct run_result res = {0};
  struct run *run = calloc(1, sizeof(*run));
  if (!run)
    return -ENOMEM;
  run->sh = parent->sh;
  run->res = &res;
  run->depth = parent->depth + 1;
  run->items = json_array();
  json_array_append_new(run->items, user_message(input));
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  events_agent_tool_started(
      run->sh->ev, &(struct events_where){t->agent->name, (int)run->depth, 0},
      j->agent->name, call_id);
  run->span = trace_child(j->tc.span, TRACE_RUN);
  trace_set_str(run->span, "gen_ai.agent.name", t->agent->name);
  trace_set_int(run->span, "sbx.depth", run->depth);
  int r = loop(run, t->agent,
               turns_for(&(struct run_options){0}, t->agent, t->max_turns), e);
  close_states(run, false);
  trace_set_int(run->span, "sbx.turns", res.turns);
  trace_usage(run->span, &res.usage);
  if (r < 0)
    trace_set_error(run->span, "%s", e->msg[0] ? e->msg : strerror(-r));
  trace_end(run->span);
  json_decref(run->items);
  free(run);
  struct model_usage *u = &parent->res->usage;
  u->input_tokens += res.usage.input_tokens;
  u->output_tokens += res.usage.output_tokens;
  u->total_tokens += res.usage.total_tokens;
  u->reasoning_tokens += res.usage.reasoning_tokens;
  u->cached_tokens += res.usage.cached_tokens;
  if (r == 0) {
    *out = res.final_output;
    res.final_output = NULL;
  }
  run_result_clear(&res);
  return r;
}

/* Starts a new run state under the state dir. */
static int rs_begin(struct run *run, struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  char dir[4200];
  int n = snprintf(dir, sizeof(dir), "%s/runs", o->state_dir);
  if (n < 0 || (size_t)n >= sizeof(dir))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "state directory path too long");
  int r = state_dir_ensure(o->state_dir, e);
  if (r < 0)
    return r;
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s", dir,
                         strerror(errno));
  n = snprintf(sh->rs_path, sizeof(sh->rs_path), "%s/%s.json", dir, sh->run_id);
  if (n < 0 || (size_t)n >= sizeof(sh->rs_path))
    return -ENAMETOOLONG;
  char abs[4096];
  const char *path = o->agents->agents[0]->path;
  if (!realpath(path, abs))
    (void)snprintf(abs, sizeof(abs), "%s", path);
  char created[32];
  state_now(created);
  sh->rs =
      json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:{}}", "version", 1, "run_id",
                sh->run_id, "agent_path", abs, "prompt", o->prompt,
                "created_at", created, "status", "running", "decisions");
  return sh->rs ? 0 : -ENOMEM;
}

/* Reads the journal of the run state RS saved at PATH: the conversation
 * into *ITEMS (new reference), and RS brought up to the newest checkpoint
 * that is newer than the state file. Then cuts the journal after what
 * counts: a kill can leave items without their checkpoint, or half a line.
 * Fails (-EINVAL) when items the state counts are missing. */
static int rs_load_journal(const char *path, json_t *rs, json_t **items_out) {
  *items_out = NULL;
  json_int_t seq = json_integer_value(json_object_get(rs, "seq"));
  json_t *cnt = json_object_get(rs, "items_count");
  if (!json_is_integer(cnt) || json_integer_value(cnt) < 1)
    return -EINVAL;
  size_t want = (size_t)json_integer_value(cnt);
  char jpath[4300];
  (void)snprintf(jpath, sizeof(jpath), "%s.items", path);
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(jpath, 1u << 30, &text, &len);
  if (r < 0)
    return r;
  _cleanup_json_ json_t *items = json_array();
  _cleanup_json_ json_t *best = NULL; /* the newest good checkpoint */
  size_t best_end = 0, want_end = 0;
  bool have_want = false;
  for (char *p = text, *end = text + len; items && p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
      break;
    json_error_t je;
    json_t *it = json_loadb(p, (size_t)(nl - p), 0, &je);
    if (!json_is_object(it)) {
      json_decref(it);
      break;
    }
    size_t line_end = (size_t)(nl + 1 - text);
    p = nl + 1;
    json_t *cp = json_object_get(it, RS_CHECKPOINT);
    if (cp) {
      json_t *cs = json_object_get(cp, "seq");
      json_t *cn = json_object_get(cp, "items_count");
      /* Its items come before it, in the same write. */
      if (json_is_object(cp) && json_is_integer(cs) &&
          json_integer_value(cs) > seq && json_is_integer(cn) &&
          (size_t)json_integer_value(cn) == json_array_size(items) &&
          (!best || json_integer_value(cs) >
                        json_integer_value(json_object_get(best, "seq")))) {
        json_decref(best);
        best = json_incref(cp);
        best_end = line_end;
      }
      json_decref(it);
      continue;
    }
    json_array_append_new(items, it);
    if (json_array_size(items) == want && !have_want) {
      have_want = true;
      want_end = line_end;
    }
  }
  if (!items)
    return -ENOMEM;
  size_t cut = want_end;
  if (best) {
    if (json_object_update(rs, best) < 0)
      return -ENOMEM;
    want = (size_t)json_integer_value(json_object_get(best, "items_count"));
    cut = best_end;
  } else if (!have_want) {
    return -EINVAL;
  }
  while (json_array_size(items) > want)
    (void)json_array_remove(items, json_array_size(items) - 1);
  if (truncate(jpath, (off_t)cut) < 0)
    return -errno;
  *items_out = TAKE_PTR(items);
  return 0;
}

/* Loads the run state at o->resume_path: conversation, agent, turn,
 * usage, pending calls, and re-attaches the recorded sandboxes. */
static int rs_resume(struct run *run, const struct agent **start,
                     struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(o->resume_path, 256u << 20, &text, &len);
  if (r < 0) {
    run->res->config_error = true;
    return sbx_error_set(e, SBX_OK, -r, "cannot read run state \"%s\": %s",
                         o->resume_path, strerror(-r));
  }
  json_error_t je;
  json_t *rs = json_loadb(text, len, 0, &je);
  json_t *items = NULL;
  if (json_is_object(rs))
    (void)rs_load_journal(o->resume_path, rs, &items);
  json_t *agent = json_object_get(rs, "agent");
  const char *id = json_string_value(json_object_get(rs, "run_id"));
  const char *status = json_string_value(json_object_get(rs, "status"));
  if (!json_is_object(rs) || !json_is_integer(json_object_get(rs, "version")) ||
      json_integer_value(json_object_get(rs, "version")) != 1 || !id ||
      strlen(id) != 32 || !json_is_array(items) || !json_is_integer(agent) ||
      json_integer_value(agent) < 0 ||
      (size_t)json_integer_value(agent) >= o->agents->n || !status) {
    json_decref(items);
    json_decref(rs);
    run->res->config_error = true;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a run state sbx can resume",
                         o->resume_path);
  }
  if (strcmp(status, "finished") == 0) {
    json_decref(items);
    json_decref(rs);
    run->res->config_error = true;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EALREADY,
                         "run %s already finished; nothing to resume", id);
  }
  sh->rs = rs;
  memcpy(sh->run_id, id, 33);
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "%s", o->resume_path);
  run->items = items;
  sh->rs_items = json_array_size(items);
  sh->rs_written = true;
  sh->rs_seq = json_integer_value(json_object_get(rs, "seq"));
  *start = o->agents->agents[json_integer_value(agent)];
  json_t *turn = json_object_get(rs, "turn");
  run->first_turn = json_is_integer(turn) ? (int)json_integer_value(turn) : 1;
  if (run->first_turn < 1)
    run->first_turn = 1;
  /* The pending calls belong to the saved turn; a turn that finished
   * starts the next one. */
  json_t *pending = json_object_get(rs, "pending");
  if (!(json_is_array(pending) && json_array_size(pending) > 0) &&
      json_array_size(items) > 1)
    run->first_turn++;
  json_t *u = json_object_get(rs, "usage");
  struct model_usage *mu = &run->res->usage;
  mu->input_tokens = json_integer_value(json_object_get(u, "input_tokens"));
  mu->output_tokens = json_integer_value(json_object_get(u, "output_tokens"));
  mu->total_tokens = json_integer_value(json_object_get(u, "total_tokens"));
  mu->reasoning_tokens =
      json_integer_value(json_object_get(u, "reasoning_tokens"));
  mu->cached_tokens = json_integer_value(json_object_get(u, "cached_tokens"));
  run->res->turns = (int)json_integer_value(json_object_get(u, "turns"));
  /* Re-attach each agent's recorded sandbox. */
  const char *key;
  json_t *sbj;
  json_object_foreach(json_object_get(rs, "sandboxes"), key, sbj) {
    char *end = NULL;
    unsigned long idx = strtoul(key, &end, 10);
    const char *rid = json_string_value(json_object_get(sbj, "record"));
    if (!end || *end || idx >= o->agents->n || !rid)
      continue;
    struct lifecycle_record rec;
    r = lifecycle_load(o->state_dir, rid, &rec, e);
    if (r < 0)
      return r;
    struct sandbox *sb = NULL;
    r = lifecycle_attach(&rec, &o->backend_opts, &sb, e);
    if (r < 0) {
      lifecycle_record_clear(&rec);
      return r;
    }
    struct agent_state *st = &run->states[idx];
    st->sb = sb;
    st->manifest = rec.manifest;
    rec.manifest = NULL;
    lifecycle_record_clear(&rec);
    (void)snprintf(st->record_id, sizeof(st->record_id), "%s", rid);
    const struct agent *ag = o->agents->agents[idx];
    toolbox_init(&st->tb, sb, o->cwd, ag->run_as,
                 ag->api == AGENT_API_CHAT_COMPLETIONS);
    toolbox_load(&st->tb, json_object_get(sbj, "tools"));
    st->ready = true;
  }
  return 0;
}

void run_result_clear(struct run_result *r) {
  free(r->final_output);
  json_decref(r->final_json);
  memset(r, 0, sizeof(*r));
}

/* Starts the run's sbx.run span and emits run_started. */
static void run_begin(struct run *run, const struct agent *start,
                      int64_t max_turns) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  const char *model = model_for(o, start);
  run->span = trace_start(o->tracer, TRACE_RUN);
  trace_set_str(run->span, "sbx.run_id", sh->run_id);
  trace_set_str(run->span, "gen_ai.agent.name", start->name);
  trace_set_str(run->span, "gen_ai.request.model", model);
  trace_set_str(run->span, "sbx.backend", o->backend->name);
  trace_set_int(run->span, "sbx.depth", 0);
  char trace_id[33];
  trace_trace_id(run->span, trace_id);
  events_run_started(sh->ev, start->name, o->backend->name, model, max_turns,
                     trace_id[0] ? trace_id : NULL);
}

/* Emits run_finished or run_failed and ends the sbx.run span. */
static void run_end(struct run *run, int r, const struct sbx_error *e,
                    uint64_t t0) {
  struct run_result *res = run->res;
  int64_t ms = (int64_t)((sbx_now_ns() - t0) / 1000000);
  trace_set_int(run->span, "sbx.turns", res->turns);
  trace_usage(run->span, &res->usage);
  if (r == 0) {
    events_run_finished(run->sh->ev, res->last_agent, res->final_output,
                        res->turns, &res->usage, ms);
    trace_set_str(run->span, "sbx.final_agent", res->last_agent);
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
  struct shared sh = {.o = o, .rs_jfd = -1};
  if (sbx_random_id(sh.run_id) < 0)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot make a run id");
  if (o->events && events_new(o->events, sh.run_id, &sh.ev, e) < 0)
    return -ENOMEM;
  pthread_mutex_init(&sh.mu, NULL);
  struct run *run = calloc(1, sizeof(*run));
  if (!run) {
    events_free(sh.ev);
    pthread_mutex_destroy(&sh.mu);
    return -ENOMEM;
  }
  run->sh = &sh;
  run->res = res;
  const struct agent *start = o->agents->agents[0];
  int r = 0;
  if (o->resume_path)
    r = rs_resume(run, &start, e);
  else if (o->state_dir)
    r = rs_begin(run, e);
  if (!run->items)
    run->items = json_array();
  if (!o->resume_path)
    json_array_append_new(run->items, user_message(o->prompt));
  int64_t max_turns = turns_for(o, start, 0);
  if (run->first_turn > 0)
    max_turns += run->first_turn - 1;
  run_begin(run, start, max_turns);
  if (r == 0)
    r = loop(run, start, max_turns, e);
  close_states(run, r == RUNNER_PAUSED);
  if (r == RUNNER_PAUSED)
    events_run_paused(sh.ev, sh.rs_path, res->turns);
  else
    run_end(run, r, e, t0);
  if (sh.rs_jfd >= 0)
    (void)close(sh.rs_jfd);
  if (sh.rs) {
    (void)snprintf(res->state_path, sizeof(res->state_path), "%s", sh.rs_path);
    /* Only a paused run (or a killed one, which never gets here) leaves
     * its state behind: a finished or failed run has closed its
     * sandboxes, so there is nothing to resume. */
    if (r != RUNNER_PAUSED) {
      (void)unlink(sh.rs_path);
      char jpath[4300];
      (void)snprintf(jpath, sizeof(jpath), "%s.items", sh.rs_path);
      (void)unlink(jpath);
      res->state_path[0] = '\0';
    }
  }
  json_decref(sh.rs);
  json_decref(run->items);
  free(run);
  for (size_t i = 0; i < sh.nclients; i++) {
    model_client_free(sh.clients[i].client);
    free(sh.clients[i].base_url);
    pthread_mutex_destroy(&sh.clients[i].call_mu);
  }
  pthread_mutex_destroy(&sh.mu);
  events_free(sh.ev);
  return r;
}
