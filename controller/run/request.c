/* What a turn asks the model: the agent's instructions, its tools (agents
 * as tools and handoffs as function tools, then the sandbox tools of its
 * capabilities), its model settings, and the conversation since the last
 * compaction. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/skills.h"
#include "controller/run/instructions.h"
#include "controller/run/memory.h"
#include "controller/run/run_internal.h"
#include "controller/run/schema.h"
#include "controller/sandbox/lifecycle.h"
#include "shared/cleanup.h"

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

/* The function name of the handoff to A: transfer_to_<a's name>. */
static void handoff_name(const struct agent *a, char *out, size_t cap) {
  char s[128];
  snake(a->name, s, sizeof(s));
  (void)snprintf(out, cap, "transfer_to_%s", s);
}

/* The function name of the agent used as the tool T: its name, or the
 * agent's name in snake case. */
void run_tool_agent_name(const struct agent_tool *t, char *out, size_t cap) {
  if (t->name) {
    (void)snprintf(out, cap, "%s", t->name);
    return;
  }
  snake(t->agent->name, out, cap);
}

/* The agent of A's handoff tool NAME, or NULL when NAME is none. */
const struct agent *run_find_handoff(const struct agent *a, const char *name) {
  for (size_t i = 0; i < a->nhandoffs; i++) {
    char hn[160];
    handoff_name(a->handoffs[i], hn, sizeof(hn));
    if (strcmp(hn, name) == 0)
      return a->handoffs[i];
  }
  return NULL;
}

/* The function tool that runs the agent used as tool T (new; NULL on
 * OOM). */
static json_t *agent_tool_json(const struct agent_tool *t) {
  char name[128];
  run_tool_agent_name(t, name, sizeof(name));
  /* The SDKs' as_tool: the description given, else none; the input
   * schema as zod renders {input: string}. */
  return json_pack(
      "{s:s, s:s, s:s, s:{s:s, s:s, s:{s:{s:s}}, s:[s], s:b}, s:b}", "type",
      "function", "name", name, "description",
      t->description ? t->description : "", "parameters", "$schema",
      "http://json-schema.org/draft-07/schema#", "type", "object", "properties",
      "input", "type", "string", "required", "input", "additionalProperties", 0,
      "strict", 1);
}

/* The function tool of the command tool T (new; NULL on OOM): not strict,
 * since its schema is the agent file's. */
static json_t *command_json(const struct agent_command *t) {
  return json_pack("{s:s, s:s, s:s, s:O, s:b}", "type", "function", "name",
                   t->name, "description", t->description, "parameters",
                   t->parameters, "strict", 0);
}

/* The function tool that hands off to agent H (new; NULL on OOM). */
static json_t *handoff_json(const struct agent *h) {
  char name[160];
  handoff_name(h, name, sizeof(name));
  char desc[512];
  /* The SDKs' text, whose handoff description (none here) follows a
   * space. */
  (void)snprintf(desc, sizeof(desc),
                 "Handoff to the %s agent to handle the request. ", h->name);
  return json_pack("{s:s, s:s, s:s, s:{s:s, s:{}, s:[], s:b}, s:b}", "type",
                   "function", "name", name, "description", desc, "parameters",
                   "type", "object", "properties", "required",
                   "additionalProperties", 0, "strict", 1);
}

/* A's tools for API (new; NULL on OOM) in the SDKs' order: the tools of
 * its MCP servers, its own tools (agents used as tools, command tools,
 * then the sandbox tools of its capabilities), then its handoffs. */
static json_t *build_tools(const struct agent *a, struct mcp_set *mcp,
                           enum model_api api) {
  _cleanup_json_ json_t *tools = json_array();
  if (!tools || mcp_set_definitions(mcp, tools) < 0)
    return NULL;
  for (size_t i = 0; i < a->ntools; i++)
    if (json_array_append_new(tools, agent_tool_json(&a->tools[i])) < 0)
      return NULL;
  for (size_t i = 0; i < a->ncommands; i++)
    if (json_array_append_new(tools, command_json(&a->commands[i])) < 0)
      return NULL;
  _cleanup_json_ json_t *caps = tools_definitions(
      run_has_cap(a, AGENT_CAP_FILESYSTEM), run_has_cap(a, AGENT_CAP_SHELL),
      model_api_features(api)->hosted_tools);
  if (!caps || json_array_extend(tools, caps) < 0)
    return NULL;
  if (a->skills && a->skills->lazy_src &&
      json_array_append_new(tools, run_skills_tool_json()) < 0)
    return NULL;
  for (size_t i = 0; i < a->nhandoffs; i++)
    if (json_array_append_new(tools, handoff_json(a->handoffs[i])) < 0)
      return NULL;
  return TAKE_PTR(tools);
}

/* The input for the next call: everything before the last compaction
 * item is dropped (the server summarized it). New reference; NULL on OOM. */
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
  _cleanup_json_ json_t *out = json_array();
  for (i = last; out && i < json_array_size(items); i++)
    if (json_array_append(out, json_array_get(items, i)) < 0)
      return NULL;
  return TAKE_PTR(out);
}

/* The items of ITEMS from index FROM on (new reference; NULL on OOM):
 * what a server that keeps the conversation has not seen. */
static json_t *items_from(json_t *items, size_t from) {
  _cleanup_json_ json_t *out = json_array();
  for (size_t i = from; out && i < json_array_size(items); i++)
    if (json_array_append(out, json_array_get(items, i)) < 0)
      return NULL;
  return TAKE_PTR(out);
}

/* The request of agent A's turn in RUN to API for MODEL. The agent's
 * instructions are built at its first turn and kept (with memory, built
 * again for every call, the summary read anew); so are its tools,
 * for as long as its API stays the same. */
int run_request_build(struct run *run, const struct agent *a,
                      enum model_api api, const char *model,
                      struct turn_request *tr, struct sbx_error *e) {
  memset(tr, 0, sizeof(*tr));
  struct agent_state *st = &run->states[a->index];
  const struct run_options *o = run->sh->o;
  struct instructions_input ii = {
      .base = a->base_instructions,
      .agent = a->instructions,
      .manifest = st->manifest,
      .root = st->sb ? st->sb->root : "/workspace",
      .cwd = o->cwd,
  };
  /* Memory's summary is read again for every call, as the SDK builds its
   * instructions for every call. */
  _cleanup_free_ char *memory = NULL;
  if (a->memory && a->memory->read && st->sb) {
    int r =
        memory_read_fragment(st->sb, a->memory, ii.root, o->cwd, &memory, e);
    if (r < 0)
      return r;
    free(st->instr);
    st->instr = NULL;
  }
  if (!st->instr) {
    _cleanup_free_ char *skills = NULL;
    int r = run_skills_fragment(a, st, o->cwd, &skills);
    if (r < 0)
      return r;
    /* The capabilities' fragments in the agent's order (filesystem and
     * compaction have none). */
    for (size_t i = 0; i < a->ncapabilities; i++) {
      enum agent_capability cap = a->capabilities[i];
      const char *f = cap == AGENT_CAP_SHELL    ? instructions_shell_fragment
                      : cap == AGENT_CAP_SKILLS ? skills
                      : cap == AGENT_CAP_MEMORY ? memory
                                                : NULL;
      if (f && ii.nfragments < INSTRUCTIONS_MAX_FRAGMENTS)
        ii.fragments[ii.nfragments++] = f;
    }
    if (!(st->instr = instructions_build(&ii)))
      return -ENOMEM;
  }
  bool relisted = mcp_set_refresh(st->mcp);
  if (!st->tools || st->tools_api != api || relisted) {
    json_decref(st->tools);
    st->tools = build_tools(a, st->mcp, api);
    st->tools_api = api;
    if (!st->tools)
      return -ENOMEM;
  }
  /* The agent's settings, or the SDK's defaults for the model when the
   * agent gives none (settings given replace them whole, as in the SDK). */
  /* A reusable prompt chooses the model unless the agent or --model names
   * one; then the model's defaults do not apply either (the SDK). */
  bool prompt_model = a->prompt && !a->model && !o->model;
  tr->settings = a->model_settings ? json_deep_copy(a->model_settings)
                 : prompt_model    ? json_object()
                                   : model_default_settings(model);
  /* Once the agent has called tools, its tool_choice goes (but "none"), so
   * that a forced call is not forced again: the SDK's reset_tool_choice. */
  const char *choice =
      json_string_value(json_object_get(tr->settings, "tool_choice"));
  if (st->used_tools && choice && strcmp(choice, "none") != 0)
    (void)json_object_del(tr->settings, "tool_choice");
  struct shared *sh = run->sh;
  bool chained = run->depth == 0 && sh->chained && sh->response_id &&
                 api == MODEL_API_RESPONSES;
  tr->input =
      chained ? items_from(run->items, sh->chain_from) : turn_input(run->items);
  if (!tr->settings || !tr->input)
    return -ENOMEM;
  if (run_has_cap(a, AGENT_CAP_COMPACTION) &&
      model_api_features(api)->compaction &&
      !(tr->extra = json_pack("{s:[{s:s, s:I}]}", "context_management", "type",
                              "compaction", "compact_threshold",
                              (json_int_t)model_compaction_threshold(model))))
    return -ENOMEM;
  if (chained && ((!tr->extra && !(tr->extra = json_object())) ||
                  json_object_set_new(tr->extra, "previous_response_id",
                                      json_string(sh->response_id)) < 0))
    return -ENOMEM;
  if (a->output_type && !(tr->schema = schema_output_for_model(a->output_type)))
    return -ENOMEM;
  tr->req = (struct model_request){
      .model = prompt_model ? NULL : model,
      .instructions = st->instr,
      .input = tr->input,
      .tools = st->tools,
      .model_settings = tr->settings,
      .output_schema = tr->schema,
      .extra = tr->extra,
      .prompt = a->prompt,
  };
  return 0;
}

/* Starts agent A's MCP servers on first use. An MCP tool may not have the
 * name of another of A's tools: the model would be offered both. */
int run_mcp_ensure(struct run *run, const struct agent *a,
                   struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (st->mcp || a->nmcp_servers == 0)
    return 0;
  int r = mcp_set_start(a, &st->mcp, e);
  if (r < 0)
    return r;
  _cleanup_json_ json_t *others = build_tools(a, NULL, run_agent_api(a));
  if (!others)
    return -ENOMEM;
  size_t i;
  json_t *t;
  json_array_foreach(others, i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (name && mcp_set_has(st->mcp, name)) {
      run->res->config_error = true;
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "agent \"%s\": an MCP server lists tool \"%s\", "
                           "which the agent has already; blocked_tools can "
                           "leave it out",
                           a->name, name);
    }
  }
  return 0;
}

/* The name of the tool definition T (new-style, chat or hosted), or
 * NULL. */
static const char *tool_def_name(json_t *t) {
  const char *n = json_string_value(json_object_get(t, "name"));
  if (!n)
    n = json_string_value(
        json_object_get(json_object_get(t, "function"), "name"));
  if (!n)
    n = json_string_value(json_object_get(t, "type"));
  return n;
}

int run_check_approvals(struct run *run, const struct agent *a,
                        struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (st->approvals_checked || a->napprovals == 0)
    return 0;
  _cleanup_json_ json_t *tools = build_tools(a, st->mcp, run_agent_api(a));
  if (!tools)
    return -ENOMEM;
  for (size_t i = 0; i < a->napprovals; i++) {
    const char *want = a->approvals[i].tool;
    bool found = false;
    size_t k;
    json_t *t;
    json_array_foreach(tools, k, t) {
      const char *n = tool_def_name(t);
      if (n && strcmp(n, want) == 0 && !run_find_handoff(a, n))
        found = true;
    }
    if (!found) {
      run->res->config_error = true;
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "agent \"%s\" (%s): \"approvals.%s\" names no "
                           "tool the agent has%s, so it would decide nothing",
                           a->name, a->path, want,
                           run_find_handoff(a, want)
                               ? " (a handoff is taken without approval)"
                               : "");
    }
  }
  st->approvals_checked = true;
  return 0;
}

/* Frees what run_request_build made for TR. */
void run_request_clear(struct turn_request *tr) {
  json_decref(tr->settings);
  json_decref(tr->input);
  json_decref(tr->extra);
  json_decref(tr->schema);
  memset(tr, 0, sizeof(*tr));
}
