#include "runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cleanup.h"
#include "clock.h"
#include "instructions.h"
#include "log.h"
#include "manifest.h"
#include "materialize.h"
#include "schema.h"
#include "tools.h"

#define RUNNER_MAX_CLIENTS 8
#define RUNNER_MAX_PARALLEL 16
#define RUNNER_MAX_NESTING 4

struct client_slot {
  enum model_api api;
  char *base_url; /* NULL: the default */
  struct model_client *client;
};

/* What one run shares with the runs nested in it. */
struct shared {
  const struct run_options *o;
  struct client_slot clients[RUNNER_MAX_CLIENTS];
  size_t nclients;
  pthread_mutex_t mu; /* events and clients */
};

/* Per agent of one run: its sandbox, manifest and tools. */
struct agent_state {
  struct sandbox *sb;
  struct manifest *manifest;
  struct toolbox tb;
  bool ready;
  bool borrowed; /* --sandbox: not ours to close */
};

struct run {
  struct shared *sh;
  struct agent_state states[AGENT_MAX_AGENTS];
  json_t *items;
  struct run_result *res;
  unsigned depth;
};

/* ---- events ------------------------------------------------------------ */

static void emit(struct shared *sh, json_t *ev) {
  if (!ev)
    return;
  if (sh->o->events) {
    json_object_set_new(ev, "version", json_integer(1));
    char *s = json_dumps(ev, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) {
      pthread_mutex_lock(&sh->mu);
      fputs(s, sh->o->events);
      fputc('\n', sh->o->events);
      fflush(sh->o->events);
      pthread_mutex_unlock(&sh->mu);
      free(s);
    }
  }
  json_decref(ev);
}

static void on_delta(void *arg, const char *text, size_t len) {
  struct shared *sh = arg;
  emit(sh, json_pack("{s:s, s:s%}", "type", "text_delta", "delta", text, len));
}

/* ---- model clients ----------------------------------------------------- */

static int get_client(struct shared *sh, const struct agent *a,
                      struct model_client **out, struct sbx_error *e) {
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
      *out = c->client;
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
    if (sh->o->events) {
      cfg.on_delta = on_delta;
      cfg.delta_arg = sh;
    }
    struct client_slot *c = &sh->clients[sh->nclients];
    r = model_client_new(&cfg, &c->client, e);
    if (r == 0) {
      c->api = api;
      c->base_url = url ? strdup(url) : NULL;
      sh->nclients++;
      *out = c->client;
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

/* Creates A's sandbox on first use (lifecycle.h), or for the starting
 * agent of a --sandbox run applies its manifest to that live sandbox. */
static int ensure_state(struct run *run, const struct agent *a,
                        struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (st->ready || !uses_sandbox(a))
    return 0;
  int r = lifecycle_agent_sandbox(
      run->sh->o, a, run->depth == 0 && a->index == 0, &st->sb, &st->manifest,
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
  emit(run->sh, json_pack("{s:s, s:s, s:s, s:s, s:b, s:o}", "type",
                          "sandbox_created", "agent", a->name, "session_id",
                          st->sb->session_id, "backend", st->sb->backend->name,
                          "attached", st->borrowed, "exposed_ports", ports));
  bool chat = a->api == AGENT_API_CHAT_COMPLETIONS;
  toolbox_init(&st->tb, st->sb, o->cwd, a->run_as, chat);
  st->ready = true;
  return 0;
}

static void close_states(struct run *run) {
  for (size_t i = 0; i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (st->ready)
      toolbox_fini(&st->tb);
    if (st->sb && !st->borrowed) {
      struct sbx_error e = {0};
      if (st->sb->backend->close(st->sb, &e) < 0)
        log_warn("closing sandbox: %s", e.msg);
    }
    manifest_free(st->manifest);
    memset(st, 0, sizeof(*st));
  }
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
                                   api == MODEL_API_RESPONSES);
  json_array_extend(tools, caps);
  json_decref(caps);
  return tools;
}

long long runner_compaction_threshold(const char *model) {
  static const struct {
    const char *name;
    long long window;
  } table[] = {
      {"gpt-5.6", 1047576},
      {"gpt-5.6-sol", 1047576},
      {"gpt-5.6-terra", 1047576},
      {"gpt-5.6-luna", 1047576},
      {"gpt-5.4", 1047576},
      {"gpt-5.4-pro", 1047576},
      {"gpt-4.1", 1047576},
      {"gpt-4.1-mini", 1047576},
      {"gpt-4.1-nano", 1047576},
      {"gpt-5", 400000},
      {"gpt-5-codex", 400000},
      {"gpt-5-mini", 400000},
      {"gpt-5-nano", 400000},
      {"gpt-5-pro", 400000},
      {"gpt-5.1", 400000},
      {"gpt-5.1-codex", 400000},
      {"gpt-5.1-codex-max", 400000},
      {"gpt-5.1-codex-mini", 400000},
      {"gpt-5.2", 400000},
      {"gpt-5.2-codex", 400000},
      {"gpt-5.2-codex-cyber", 400000},
      {"gpt-5.2-pro", 400000},
      {"gpt-5.3-codex", 400000},
      {"gpt-5.3-codex-spark", 400000},
      {"gpt-5.4-mini", 400000},
      {"gpt-5.4-nano", 400000},
      {"o1", 200000},
      {"o1-pro", 200000},
      {"o3", 200000},
      {"o3-mini", 200000},
      {"o3-pro", 200000},
      {"o3-deep-research", 200000},
      {"o4-mini", 200000},
      {"o4-mini-deep-research", 200000},
      {"codex-mini-latest", 200000},
      {"gpt-4o", 128000},
      {"gpt-4o-mini", 128000},
      {"gpt-5-chat-latest", 128000},
      {"gpt-5.1-chat-latest", 128000},
      {"gpt-5.2-chat-latest", 128000},
      {"gpt-5.3-chat-latest", 128000},
  };
  if (!model)
    return 240000;
  const char *slash = strrchr(model, '/');
  char name[128];
  (void)snprintf(name, sizeof(name), "%s", slash ? slash + 1 : model);
  for (char *p = name; *p; p++)
    if (*p >= 'A' && *p <= 'Z')
      *p = (char)(*p + 32);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
      if (strcmp(table[i].name, name) == 0)
        return table[i].window * 9 / 10;
    /* Then without a -YYYY-MM-DD suffix. */
    size_t n = strlen(name);
    if (n > 11 && name[n - 11] == '-' && name[n - 8] == '-' &&
        name[n - 5] == '-')
      name[n - 11] = '\0';
    else
      break;
  }
  return 240000;
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
  pthread_t thread;
  bool started;
};

static int run_nested(struct run *parent, const struct agent_tool *t,
                      const char *input, char **out, struct sbx_error *e);

static void *call_main(void *arg) {
  struct call_job *j = arg;
  struct run *run = j->run;
  const struct agent *a = j->agent;
  struct agent_state *st = &run->states[a->index];
  const char *type = json_string_value(json_object_get(j->item, "type"));
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  if (!call_id)
    call_id = "";
  uint64_t t0 = sbx_now_ns();
  if (strcmp(type, "apply_patch_call") == 0) {
    json_t *op = json_object_get(j->item, "operation");
    emit(run->sh,
         json_pack("{s:s, s:s, s:s, s:O*}", "type", "tool_call_started", "name",
                   "apply_patch", "call_id", call_id, "arguments", op));
    const char *status = "failed";
    char *text = NULL;
    if (!st->ready) {
      text = strdup("apply_patch needs the filesystem capability");
    } else {
      j->rc = tools_apply_patch_operation(&st->tb, op, &status, &text);
    }
    j->output = json_pack("{s:s, s:s, s:s}", "type", "apply_patch_call_output",
                          "call_id", call_id, "status", status);
    if (text)
      json_object_set_new(j->output, "output", json_string(text));
    emit(run->sh,
         json_pack("{s:s, s:s, s:s, s:s, s:s?, s:I}", "type",
                   "tool_call_finished", "name", "apply_patch", "call_id",
                   call_id, "status", status, "output", text, "duration_ms",
                   (json_int_t)((sbx_now_ns() - t0) / 1000000)));
    free(text);
    return NULL;
  }
  const char *name = json_string_value(json_object_get(j->item, "name"));
  const char *args = json_string_value(json_object_get(j->item, "arguments"));
  if (!name)
    name = "";
  emit(run->sh, json_pack("{s:s, s:s, s:s, s:s?}", "type", "tool_call_started",
                          "name", name, "call_id", call_id, "arguments", args));
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
    } else {
      j->rc = run_nested(run, &a->tools[i], input, &answer, &j->err);
      out = j->rc == 0 ? json_string(answer) : NULL;
    }
    free(answer);
    json_decref(in);
    if (!out && j->rc == 0)
      j->rc = -ENOMEM;
    if (j->rc < 0)
      return NULL;
  }
  if (!out) {
    if (!st->ready) {
      j->rc = sbx_error_set(&j->err, SBX_INTERNAL, ENOENT,
                            "the model called tool \"%s\", which agent \"%s\" "
                            "does not have",
                            name, a->name);
      return NULL;
    }
    int r = tools_call(&st->tb, name, args, &out);
    if (r == -ENOENT) {
      j->rc = sbx_error_set(&j->err, SBX_INTERNAL, ENOENT,
                            "the model called tool \"%s\", which agent \"%s\" "
                            "does not have",
                            name, a->name);
      return NULL;
    }
    if (r < 0) {
      j->rc = r;
      return NULL;
    }
  }
  j->output = json_pack("{s:s, s:s, s:o}", "type", "function_call_output",
                        "call_id", call_id, "output", out);
  json_t *shown = json_object_get(j->output, "output");
  emit(run->sh,
       json_pack("{s:s, s:s, s:s, s:O, s:I}", "type", "tool_call_finished",
                 "name", name, "call_id", call_id, "output", shown,
                 "duration_ms", (json_int_t)((sbx_now_ns() - t0) / 1000000)));
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

static int loop(struct run *run, const struct agent *start, int64_t max_turns,
                struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  const struct agent *a = start;
  for (int turn = 1;; turn++) {
    if (turn > max_turns)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "max turns (%lld) exceeded", (long long)max_turns);
    int r = ensure_state(run, a, e);
    if (r < 0)
      return r;
    struct model_client *mc = NULL;
    r = get_client(sh, a, &mc, e);
    if (r < 0) {
      run->res->config_error = true;
      return r;
    }
    enum model_api api = model_client_api(mc);
    struct agent_state *st = &run->states[a->index];
    struct instructions_input ii = {
        .base = a->base_instructions,
        .agent = a->instructions,
        .shell = has_cap(a, AGENT_CAP_SHELL),
        .manifest = st->manifest,
        .root = st->sb ? st->sb->root : "/workspace",
        .cwd = o->cwd,
    };
    _cleanup_free_ char *instr = instructions_build(&ii);
    if (!instr)
      return -ENOMEM;
    _cleanup_json_ json_t *tools = build_tools(a, api);
    _cleanup_json_ json_t *settings = settings_json(&a->model_settings);
    _cleanup_json_ json_t *input = turn_input(run->items);
    _cleanup_json_ json_t *extra = NULL;
    const char *model = o->model ? o->model : a->model;
    if (!model)
      model = getenv("OPENAI_DEFAULT_MODEL");
    if (!model)
      model = "gpt-5.6-luna";
    if (has_cap(a, AGENT_CAP_COMPACTION) && api == MODEL_API_RESPONSES)
      extra = json_pack("{s:[{s:s, s:I}]}", "context_management", "type",
                        "compaction", "compact_threshold",
                        (json_int_t)runner_compaction_threshold(model));
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
    r = model_call(mc, &req, &resp, e);
    if (r < 0)
      return r;
    struct model_usage *u = &run->res->usage;
    u->input_tokens += resp.usage.input_tokens;
    u->output_tokens += resp.usage.output_tokens;
    u->total_tokens += resp.usage.total_tokens;
    u->reasoning_tokens += resp.usage.reasoning_tokens;
    u->cached_tokens += resp.usage.cached_tokens;
    run->res->turns++;

    size_t first_new = json_array_size(run->items);
    json_array_extend(run->items, resp.output);
    size_t ncalls = 0;
    size_t i;
    json_t *it;
    json_array_foreach(resp.output, i, it) {
      const char *t = json_string_value(json_object_get(it, "type"));
      if (t && (strcmp(t, "function_call") == 0 ||
                strcmp(t, "apply_patch_call") == 0))
        ncalls++;
    }
    emit(sh, json_pack("{s:s, s:i, s:s, s:{s:I, s:I, s:I}}", "type",
                       "turn_finished", "turn", turn, "agent", a->name, "usage",
                       "input_tokens", (json_int_t)resp.usage.input_tokens,
                       "output_tokens", (json_int_t)resp.usage.output_tokens,
                       "total_tokens", (json_int_t)resp.usage.total_tokens));
    if (ncalls == 0) {
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
    /* At most RUNNER_MAX_PARALLEL at once. */
    for (size_t k = 0; k < nj; k += RUNNER_MAX_PARALLEL) {
      size_t end = k + RUNNER_MAX_PARALLEL < nj ? k + RUNNER_MAX_PARALLEL : nj;
      for (size_t m = k; m < end; m++) {
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
      emit(sh, json_pack("{s:s, s:s, s:s}", "type", "handoff", "from", a->name,
                         "to", next->name));
      a = next;
    }
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

static int run_nested(struct run *parent, const struct agent_tool *t,
                      const char *input, char **out, struct sbx_error *e) {
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
  emit(run->sh, json_pack("{s:s, s:s}", "type", "agent_tool_started", "agent",
                          t->agent->name));
  int r = loop(run, t->agent,
               turns_for(&(struct run_options){0}, t->agent, t->max_turns), e);
  close_states(run);
  json_decref(run->items);
  free(run);
  struct model_usage *u = &parent->res->usage;
  u->input_tokens += res.usage.input_tokens;
  u->output_tokens += res.usage.output_tokens;
  u->total_tokens += res.usage.total_tokens;
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
  memset(r, 0, sizeof(*r));
}

int runner_run(const struct run_options *o, struct run_result *res,
               struct sbx_error *e) {
  memset(res, 0, sizeof(*res));
  struct shared sh = {.o = o};
  pthread_mutex_init(&sh.mu, NULL);
  struct run *run = calloc(1, sizeof(*run));
  if (!run)
    return -ENOMEM;
  run->sh = &sh;
  run->res = res;
  run->items = json_array();
  const struct agent *start = o->agents->agents[0];
  json_array_append_new(run->items, user_message(o->prompt));
  emit(&sh, json_pack("{s:s, s:s, s:s}", "type", "run_started", "agent",
                      start->name, "backend", o->backend->name));
  int r = loop(run, start, turns_for(o, start, 0), e);
  close_states(run);
  if (r == 0)
    emit(&sh, json_pack("{s:s, s:s, s:s, s:i}", "type", "run_finished",
                        "final_output", res->final_output, "agent",
                        res->last_agent, "turns", res->turns));
  else
    emit(&sh, json_pack("{s:s, s:s}", "type", "run_failed", "error",
                        e ? e->msg : strerror(-r)));
  json_decref(run->items);
  free(run);
  for (size_t i = 0; i < sh.nclients; i++) {
    model_client_free(sh.clients[i].client);
    free(sh.clients[i].base_url);
  }
  pthread_mutex_destroy(&sh.mu);
  return r;
}
