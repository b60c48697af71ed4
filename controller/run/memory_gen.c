/* Memory generated at the end of a run, as the SDK's memory generation
 * manager does: the run is appended to SESSIONS_DIR/<rollout>.jsonl, then
 * phase one (an agent "sandbox-memory-phase-one" in the same sandbox)
 * extracts a rollout summary and a raw memory from it, and phase two (an
 * agent "sandbox-memory-phase-two") consolidates the raw memories into
 * MEMORY.md and the summary. A phase that fails is warned about and does
 * not fail the run (the SDK logs it). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/run/memory.h"
#include "controller/run/run_internal.h"
#include "controller/telemetry/trace.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/log.h"
#include "shared/rand.h"

#define PHASE_ONE_MAX_TURNS 500

/* Items kept in a rollout by their type (the SDK's list). */
static const char *const kept_types[] = {"apply_patch_call",
                                         "apply_patch_call_output",
                                         "computer_call",
                                         "computer_call_output",
                                         "custom_tool_call",
                                         "custom_tool_call_output",
                                         "function_call",
                                         "function_call_output",
                                         "function_call_result",
                                         "hosted_tool_call",
                                         "local_shell_call",
                                         "local_shell_call_output",
                                         "mcp_approval_request",
                                         "mcp_approval_response",
                                         "mcp_call",
                                         "program",
                                         "program_output",
                                         "shell_call",
                                         "shell_call_output",
                                         "tool_search_call",
                                         "tool_search_output",
                                         "web_search_call"};

static bool keep_item(json_t *it) {
  const char *role = json_string_value(json_object_get(it, "role"));
  if (role)
    return strcmp(role, "assistant") == 0 || strcmp(role, "tool") == 0 ||
           strcmp(role, "user") == 0;
  const char *type = json_string_value(json_object_get(it, "type"));
  for (size_t i = 0; type && i < SBX_ARRAY_SIZE(kept_types); i++)
    if (strcmp(type, kept_types[i]) == 0)
      return true;
  return false;
}

/* The SDK's timestamp: ISO 8601 with milliseconds and "+00:00". */
static void iso_now(char out[40]) {
  struct timespec ts;
  struct tm tm;
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  (void)gmtime_r(&ts.tv_sec, &tm);
  char d[24];
  (void)strftime(d, sizeof(d), "%Y-%m-%dT%H:%M:%S", &tm);
  (void)snprintf(out, 40, "%.20s.%03d+00:00", d,
                 (int)(ts.tv_nsec / 1000000) % 1000);
}

/* The calls among ITEMS (from FIRST on) that have no output yet: those a
 * paused run waits to have approved (the SDK's interruptions). New. */
static json_t *pending_calls(json_t *items, size_t first) {
  _cleanup_json_ json_t *out = json_array();
  size_t i;
  json_t *it;
  json_array_foreach(items, i, it) {
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *id = json_string_value(json_object_get(it, "call_id"));
    if (i < first || !type || !id || !out)
      continue;
    size_t n = strlen(type);
    if (n > 7 && strcmp(type + n - 7, "_output") == 0) {
      size_t j;
      json_t *c;
      json_array_foreach(out, j, c) {
        if (strcmp(json_string_value(json_object_get(c, "call_id")), id) == 0) {
          (void)json_array_remove(out, j);
          break;
        }
      }
    } else if (n > 5 && strcmp(type + n - 5, "_call") == 0 &&
               json_array_append(out, it) < 0) {
      return NULL;
    }
  }
  return TAKE_PTR(out);
}

/* One run segment of the rollout (the SDK's buildMemoryRolloutPayload):
 * the user's input, the generated items, how it ended. New. */
static json_t *rollout_line(struct run *run, const char *id, int rc,
                            const struct sbx_error *err) {
  char now[40];
  iso_now(now);
  _cleanup_json_ json_t *input = json_array(), *gen = json_array();
  /* The segment starts at this run's prompt: a continued conversation's
   * earlier items are not its own (the SDK's original input). */
  const json_t *history = run->depth == 0 ? run->sh->o->history : NULL;
  size_t first = history ? json_array_size(history) : 0;
  size_t i;
  json_t *it;
  json_array_foreach(run->items, i, it) {
    if (i >= first && keep_item(it) &&
        json_array_append(i == first ? input : gen, it) < 0)
      return NULL;
  }
  const char *state = "failed", *type = NULL, *msg = NULL;
  if (rc == 0)
    state = "completed";
  else if (rc == RUNNER_PAUSED)
    state = "interrupted";
  else if (rc == -ECANCELED)
    state = "cancelled", type = "CancelledError";
  else if (err && strstr(err->msg, "max turns") == err->msg)
    state = "max_turns_exceeded", type = "MaxTurnsExceededError";
  else
    type = sbx_code_name(err && err->code != SBX_OK
                             ? err->code
                             : sbx_code_from_errno(rc < 0 ? -rc : EIO));
  if (rc < 0)
    msg = err && err->msg[0] ? err->msg : strerror(-rc);
  _cleanup_json_ json_t *line =
      json_pack("{s:s, s:s, s:O, s:O, s:{s:s, s:s?, s:s?, s:b}}", "updated_at",
                now, "rollout_id", id, "input", input, "generated_items", gen,
                "terminal_metadata", "terminal_state", state, "exception_type",
                type, "exception_message", msg, "has_final_output", rc == 0);
  if (!line)
    return NULL;
  _cleanup_json_ json_t *waiting =
      rc == RUNNER_PAUSED ? pending_calls(run->items, first) : NULL;
  if (rc == RUNNER_PAUSED &&
      (!waiting || (json_array_size(waiting) > 0 &&
                    json_object_set(line, "interruptions", waiting) < 0)))
    return NULL;
  const struct run_result *res = run->res;
  if (rc == 0 && res->final_output &&
      json_object_set_new(line, "final_output",
                          res->final_json ? json_incref(res->final_json)
                                          : json_string(res->final_output)) < 0)
    return NULL;
  return TAKE_PTR(line);
}

/* Joins A and B with a slash into OUT. */
static const char *join(char *out, size_t cap, const char *a, const char *b) {
  (void)snprintf(out, cap, "%s/%s", a, b);
  return out;
}

/* The SDK's ensureLayout: the directories, and MEMORY.md and the summary
 * as empty files when missing. */
static int ensure_layout(struct sandbox *sb, const struct agent_memory *m,
                         const char *owner, struct sbx_error *e) {
  static const char *const subdirs[] = {"", "raw_memories", "rollout_summaries",
                                        "skills"};
  char p[2200];
  int r = 0;
  for (size_t i = 0; r == 0 && i < SBX_ARRAY_SIZE(subdirs); i++)
    r = memory_mkdir(sb,
                     i ? join(p, sizeof(p), m->memories_dir, subdirs[i])
                       : m->memories_dir,
                     owner, e);
  if (r == 0)
    r = memory_mkdir(sb, m->sessions_dir, owner, e);
  const char *files[] = {"MEMORY.md", m->summary_file};
  for (size_t i = 0; r == 0 && i < 2; i++) {
    bool exists = false;
    join(p, sizeof(p), m->memories_dir, files[i]);
    r = sbx_file_exists(sb->client, p, &exists, NULL, e);
    if (r == 0 && !exists)
      r = memory_write(sb, p, "", 0, owner, e);
  }
  return r;
}

/* Appends the run's segment to the rollout ID's JSONL. */
static int append_rollout(struct run *run, struct sandbox *sb,
                          const struct agent_memory *m, const char *owner,
                          const char *id, int rc, const struct sbx_error *err,
                          struct sbx_error *e) {
  _cleanup_json_ json_t *line = rollout_line(run, id, rc, err);
  _cleanup_free_ char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
  if (!text)
    return -ENOMEM;
  char name[200], p[2200];
  (void)snprintf(name, sizeof(name), "%s.jsonl", id);
  join(p, sizeof(p), m->sessions_dir, name);
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps leaves room: replaced NUL, length n + 1 */
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = p;
  w.data.data = (uint8_t *)text;
  w.data.len = n + 1;
  w.mode = SBX__V1__WRITE_MODE__WRITE_APPEND;
  w.perm = 0644;
  w.owner = (char *)(owner ? owner : "");
  w.parents = true;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_write(sb->client, &w, &resp, e);
  sbx_client_reply_free(resp);
  text[n] = '\0';
  return r;
}

/* A phase agent: NAME, with the memory agent A's API, endpoint, key and
 * run_as, the default capabilities. Freed with phase_agent_free. */
static struct agent *phase_agent(const struct agent *a, const char *name,
                                 const char *model, json_t *settings,
                                 const char *instructions) {
  struct agent *p = calloc(1, sizeof(*p));
  if (!p)
    return NULL;
  p->path = a->path;
  p->name = (char *)name;
  p->model = (char *)model;
  p->instructions = (char *)instructions;
  p->model_settings = settings;
  p->capabilities[0] = AGENT_CAP_FILESYSTEM;
  p->capabilities[1] = AGENT_CAP_SHELL;
  p->capabilities[2] = AGENT_CAP_COMPACTION;
  p->ncapabilities = 3;
  p->run_as = a->run_as;
  p->api = a->api;
  p->base_url = a->base_url;
  p->api_key_env = a->api_key_env;
  return p;
}

/* Runs the phase agent P on INPUT in the sandbox of HOST, as a run of its
 * own (the SDK's Runner.run) under the span FLUSH: its own model (never
 * --model's), no events of the run's stream, no run state; its result in
 * RES. */
static int run_phase(struct run *parent, struct trace_span *flush,
                     const struct agent_state *host, const struct agent *p,
                     const char *input, int64_t max_turns,
                     struct run_result *res, struct sbx_error *e) {
  struct run_options o = *parent->sh->o;
  o.model = NULL;
  o.events = NULL;
  o.event_sink = NULL;
  o.state_dir = NULL;
  o.resume_path = NULL;
  o.store = NULL;
  o.approve_ask = false;
  o.sandbox = NULL;
  o.cwd = NULL;
  struct shared sh = {.o = &o};
  memcpy(sh.run_id, parent->sh->run_id, sizeof(sh.run_id));
  pthread_mutex_init(&sh.mu, NULL);
  pthread_mutex_init(&sh.rs_mu, NULL);
  struct run *run = calloc(1, sizeof(*run));
  int r = -ENOMEM;
  if (run) {
    run->sh = &sh;
    run->res = res;
    run->host = host;
    run->span = trace_child(flush, TRACE_RUN);
    trace_set_str(run->span, "gen_ai.agent.name", p->name);
    run->items = json_pack("[{s:s, s:s}]", "role", "user", "content", input);
    if (run->items)
      r = run_loop(run, p, max_turns, e);
    run_close_sandboxes(run, false);
    run_trace_usage(run->span, &res->usage);
    if (r < 0)
      trace_set_error(run->span, "%s", e->msg[0] ? e->msg : strerror(-r));
    trace_end(run->span);
    json_decref(run->items);
    free(run);
  }
  free(sh.response_id); /* kept by the turns (turn_chain), as a root's */
  run_clients_free(&sh);
  pthread_mutex_destroy(&sh.mu);
  pthread_mutex_destroy(&sh.rs_mu);
  return r;
}

/* S with surrounding whitespace trimmed is empty. */
static bool blank(const char *s) {
  return !s || s[strspn(s, " \t\r\n\f\v")] == '\0';
}

/* The SDK's normalizeRolloutSlug into OUT. */
static int rollout_slug(const char *v, char out[96], struct sbx_error *e) {
  const char *s = v + strspn(v, " \t\r\n");
  size_t n = strlen(s);
  while (n > 0 && strchr(" \t\r\n", s[n - 1]))
    n--;
  if (n >= 3 && strncmp(s + n - 3, ".md", 3) == 0)
    n -= 3;
  bool ok = n >= 1 && n <= 80 &&
            ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9'));
  for (size_t i = 1; ok && i < n; i++)
    ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
         s[i] == '_' || s[i] == '-';
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "Invalid rollout_slug: %.200s", v);
  memcpy(out, s, n);
  out[n] = '\0';
  return 0;
}

/* The length of S as JavaScript counts it (UTF-16 code units). */
static size_t js_length(const char *s) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p & 0xc0) != 0x80)
      n += *p >= 0xf0 ? 2 : 1;
  return n;
}

/* The SDK's renderPhaseOnePrompt: the terminal metadata of the rollout's
 * last segment (or of every segment), as sorted, indented JSON. New. */
static char *terminal_json(const char *jsonl, json_t **last_out,
                           struct sbx_error *e) {
  _cleanup_json_ json_t *states = json_array(), *last = NULL;
  size_t count = 0;
  for (const char *p = jsonl; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (strspn(p, " \t\r\f\v") < n) {
      json_decref(last);
      if (!(last = json_loadb(p, n, 0, NULL))) {
        (void)sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                            "the rollout holds a line that is not JSON");
        return NULL;
      }
      const char *st = json_string_value(json_object_get(
          json_object_get(last, "terminal_metadata"), "terminal_state"));
      if (json_array_append_new(states, json_string(st ? st : "unknown")) < 0)
        return NULL;
      count++;
    }
    p += n + (nl ? 1 : 0);
  }
  if (!last) {
    (void)sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "rollout_contents must contain at least one JSONL "
                        "record");
    return NULL;
  }
  json_t *tm = json_object_get(last, "terminal_metadata");
  _cleanup_json_ json_t *meta =
      count == 1
          ? json_incref(tm ? tm : json_object())
          : json_pack("{s:I, s:O, s:O}", "segment_count", (json_int_t)count,
                      "final_terminal_metadata", tm ? tm : json_object(),
                      "terminal_states", states);
  *last_out = TAKE_PTR(last);
  /* The SDK's stableJsonPrettyStringify: JSON.stringify(v, null, 2) with
   * every '": ' then made '":' (in strings too). */
  _cleanup_free_ char *text =
      meta ? json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
  return text ? memory_replace_all(text, "\": ", "\":") : NULL;
}

/* The phase-one user message for the rollout JSONL. New. */
static char *phase_one_input(const char *jsonl, json_t **last,
                             struct sbx_error *e) {
  _cleanup_free_ char *meta = terminal_json(jsonl, last, e);
  _cleanup_free_ char *cut =
      meta ? memory_truncate_tokens(jsonl, strlen(jsonl),
                                    MEMORY_ROLLOUT_MAX_TOKENS)
           : NULL;
  if (!cut)
    return NULL;
  _cleanup_free_ char *shown = NULL;
  if (strcmp(cut, jsonl) != 0 &&
      asprintf(&shown,
               "\n\n[rollout content omitted: this phase-one memory prompt "
               "contains a truncated view of the saved rollout. "
               "original_chars=%zu; rendered_chars=%zu. Do not assume the "
               "rendered rollout below is complete.]\n\n%s",
               js_length(jsonl), js_length(cut), cut) < 0)
    return NULL;
  return memory_render(sbx_memory_phase_one_user_md, "terminal_metadata_json",
                       meta, "rollout_contents", shown ? shown : cut, NULL);
}

/* S with trailing whitespace removed, as a length. */
static int trim_end(const char *s) {
  size_t n = strlen(s);
  while (n > 0 && strchr(" \t\r\n\f\v", s[n - 1]))
    n--;
  return (int)n;
}

/* Writes phase one's raw memory and rollout summary for rollout ID, with
 * the metadata of its last segment LAST, under the SDK's names. */
static int write_artifacts(struct sandbox *sb, const struct agent_memory *m,
                           const char *id, json_t *last, const char *slug,
                           const char *summary, const char *raw,
                           const char *owner, struct sbx_error *e) {
  const char *at = json_string_value(json_object_get(last, "updated_at"));
  const char *state = json_string_value(json_object_get(
      json_object_get(last, "terminal_metadata"), "terminal_state"));
  at = at ? at : "unknown";
  state = state ? state : "unknown";
  char rollout_path[1200], summary_file[400], p[2400];
  (void)snprintf(rollout_path, sizeof(rollout_path), "%s/%s.jsonl",
                 m->sessions_dir, id);
  (void)snprintf(summary_file, sizeof(summary_file),
                 "rollout_summaries/%s_%s.md", id, slug);
  _cleanup_free_ char *a = NULL, *b = NULL;
  int na =
      asprintf(&a,
               "rollout_id: %s\nupdated_at: %s\nrollout_path: %s\n"
               "rollout_summary_file: %s\nterminal_state: %s\n\n%.*s\n",
               id, at, rollout_path, summary_file, state, trim_end(raw), raw);
  int nb = asprintf(&b,
                    "session_id: %s\nupdated_at: %s\nrollout_path: %s\n"
                    "terminal_state: %s\n\n%.*s\n",
                    sb->session_id, at, rollout_path, state, trim_end(summary),
                    summary);
  if (na < 0 || nb < 0)
    return -ENOMEM;
  (void)snprintf(p, sizeof(p), "%s/raw_memories/%s.md", m->memories_dir, id);
  int r = memory_write(sb, p, a, (size_t)na, owner, e);
  (void)snprintf(p, sizeof(p), "%s/%s", m->memories_dir, summary_file);
  return r < 0 ? r : memory_write(sb, p, b, (size_t)nb, owner, e);
}

/* Phase one for rollout ID: *WROTE when it wrote its artifacts. */
static int phase_one(struct run *run, struct trace_span *flush,
                     struct agent_state *st, const struct agent *a,
                     const char *id, bool *wrote, struct sbx_error *e) {
  const struct agent_memory *m = a->memory;
  char name[200], path[2200];
  (void)snprintf(name, sizeof(name), "%s.jsonl", id);
  join(path, sizeof(path), m->sessions_dir, name);
  _cleanup_free_ char *jsonl = NULL;
  size_t len;
  int r = memory_read(st->sb, path, MEMORY_TEXT_MAX_BYTES, &jsonl, &len, e);
  if (r < 0)
    return r;
  if (!jsonl)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "Memory rollout transcript was not found: %s", path);
  _cleanup_json_ json_t *last = NULL;
  _cleanup_free_ char *input = phase_one_input(jsonl, &last, e);
  _cleanup_free_ char *extra = memory_extra_section(m->extra_prompt);
  _cleanup_free_ char *instr =
      extra ? memory_render(sbx_memory_phase_one_md,
                            "{{ extra_prompt_section }}", extra, NULL)
            : NULL;
  _cleanup_json_ json_t *schema = json_pack(
      "{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}}, s:[s,s,s], s:b}", "type", "object",
      "properties", "rollout_summary", "type", "string", "rollout_slug", "type",
      "string", "raw_memory", "type", "string", "required", "rollout_summary",
      "rollout_slug", "raw_memory", "additionalProperties", false);
  if (!input)
    return e->msg[0] ? -EINVAL : -ENOMEM;
  if (!instr || !schema)
    return -ENOMEM;
  _cleanup_free_ struct agent *p =
      phase_agent(a, "sandbox-memory-phase-one", m->phase_one_model,
                  m->phase_one_settings, instr);
  if (!p)
    return -ENOMEM;
  p->output_type = schema;
  struct run_result res = {0};
  r = run_phase(run, flush, st, p, input, PHASE_ONE_MAX_TURNS, &res, e);
  json_t *out = res.final_json;
  const char *sum = json_string_value(json_object_get(out, "rollout_summary"));
  const char *slug = json_string_value(json_object_get(out, "rollout_slug"));
  const char *raw = json_string_value(json_object_get(out, "raw_memory"));
  if (r == 0 && (!sum || !slug || !raw))
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "phase 1 did not answer {rollout_summary, rollout_slug, "
                      "raw_memory}");
  if (r == 0 && !(blank(sum) && blank(slug) && blank(raw))) {
    char s[96];
    if (blank(sum) || blank(slug) || blank(raw))
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "Phase 1 returned partially-empty memory artifacts.");
    else if ((r = rollout_slug(slug, s, e)) == 0)
      r = write_artifacts(st->sb, m, id, last, s, sum, raw, a->run_as, e);
    *wrote = r == 0;
  }
  run_result_clear(&res);
  return r;
}

/* The value of the header line "KEY: value" of a raw memory, or "". New. */
static char *meta_value(const char *text, const char *key) {
  size_t k = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
    if (strncmp(p, key, k) == 0 && p[k] == ':') {
      const char *v = p + k + 1, *end = strchr(v, '\n');
      size_t n = end ? (size_t)(end - v) : strlen(v);
      while (n > 0 && strchr(" \t\r", v[0]))
        v++, n--;
      while (n > 0 && strchr(" \t\r", v[n - 1]))
        n--;
      return strndup(v, n);
    }
  return strdup("");
}

/* Newest updated_at first, then rollout id (the SDK's order). */
static int by_recency(const void *x, const void *y) {
  json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
  const char *ua = json_string_value(json_object_get(a, "updated_at"));
  const char *ub = json_string_value(json_object_get(b, "updated_at"));
  bool ka = *ua && strcmp(ua, "unknown") != 0;
  bool kb = *ub && strcmp(ub, "unknown") != 0;
  if (ka != kb)
    return ka ? -1 : 1;
  int c = ka ? strcmp(ub, ua) : 0;
  return c ? c
           : strcmp(json_string_value(json_object_get(b, "rollout_id")),
                    json_string_value(json_object_get(a, "rollout_id")));
}

/* The raw memories under the memories directory as selection items
 * {rollout_id, updated_at, rollout_path, rollout_summary_file,
 * terminal_state}, newest first, at most M's limit; their texts joined
 * into *JOINED (new). */
static int select_raw(struct sandbox *sb, const struct agent_memory *m,
                      json_t **sel, char **joined, struct sbx_error *e) {
  char dir[1100], p[2400];
  (void)snprintf(dir, sizeof(dir), "%s/raw_memories", m->memories_dir);
  Sbx__V1__FileList fl = SBX__V1__FILE_LIST__INIT;
  fl.path = dir;
  fl.depth = 1;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_list(sb->client, &fl, &resp, e);
  if (r < 0)
    return r;
  _cleanup_json_ json_t *items = json_array(), *texts = json_object();
  for (size_t i = 0; r == 0 && i < resp->file_list->n_entries; i++) {
    const Sbx__V1__FileInfo *f = resp->file_list->entries[i];
    size_t n = strlen(f->path);
    if (f->type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY || n < 3 ||
        strcmp(f->path + n - 3, ".md") != 0 || strchr(f->path, '/'))
      continue;
    _cleanup_free_ char *text = NULL;
    size_t len;
    (void)snprintf(p, sizeof(p), "%s/%s", dir, f->path);
    if ((r = memory_read(sb, p, MEMORY_TEXT_MAX_BYTES, &text, &len, e)) < 0 ||
        !text)
      continue;
    _cleanup_free_ char *id = meta_value(text, "rollout_id"),
                        *sf = meta_value(text, "rollout_summary_file"),
                        *at = meta_value(text, "updated_at"),
                        *rp = meta_value(text, "rollout_path"),
                        *ts = meta_value(text, "terminal_state");
    if (!id || !sf || !at || !rp || !ts)
      r = -ENOMEM;
    else if (*id && *sf &&
             (json_array_append_new(
                  items, json_pack("{s:s, s:s, s:s, s:s, s:s}", "rollout_id",
                                   id, "updated_at", at, "rollout_path", rp,
                                   "rollout_summary_file", sf, "terminal_state",
                                   ts)) < 0 ||
              json_object_set_new(texts, id, json_string(text)) < 0))
      r = -ENOMEM;
  }
  sbx_client_reply_free(resp);
  if (r < 0 || !items)
    return r < 0 ? r : -ENOMEM;
  size_t n = json_array_size(items);
  json_t **v = calloc(n + 1, sizeof(*v));
  for (size_t i = 0; v && i < n; i++)
    v[i] = json_array_get(items, i);
  if (v)
    qsort(v, n, sizeof(*v), by_recency);
  _cleanup_json_ json_t *out = json_array();
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 64u << 20);
  for (size_t i = 0; v && out && i < n && i < (size_t)m->max_raw_memories;
       i++) {
    const char *t = json_string_value(json_object_get(
        texts, json_string_value(json_object_get(v[i], "rollout_id"))));
    if (json_array_append(out, v[i]) < 0 ||
        (!blank(t) && ((b.len && sbx_buf_append_str(&b, "\n\n") < 0) ||
                       sbx_buf_append(&b, t, (size_t)trim_end(t)) < 0)))
      r = -ENOMEM;
  }
  free(v);
  if (!v || !out || r < 0 || sbx_buf_append(&b, "", 1) < 0)
    return -ENOMEM;
  *joined = sbx_buf_steal(&b, NULL);
  *sel = TAKE_PTR(out);
  return 0;
}

/* Whether the selection SEL holds rollout ID. */
static bool selected(json_t *sel, const char *id) {
  size_t i;
  json_t *x;
  json_array_foreach(sel, i, x) {
    const char *y = json_string_value(json_object_get(x, "rollout_id"));
    if (y && strcmp(y, id) == 0)
      return true;
  }
  return false;
}

/* The SDK's renderPhaseTwoInputSelection: SEL against the last successful
 * selection PRIOR (an array, may be empty). */
static char *render_selection(json_t *sel, json_t *prior) {
  _cleanup_buf_ struct sbx_buf s, rm;
  sbx_buf_init(&s, 16u << 20);
  sbx_buf_init(&rm, 16u << 20);
  size_t i, retained = 0, removed = 0;
  json_t *x;
  int r = 0;
  json_array_foreach(sel, i, x) {
    const char *id = json_string_value(json_object_get(x, "rollout_id"));
    const char *at = json_string_value(json_object_get(x, "updated_at"));
    bool kept = selected(prior, id);
    retained += kept;
    r |= sbx_buf_printf(
        &s,
        "%s- [%s] rollout_id=%s, rollout_summary_file=%s, "
        "updated_at=%s",
        i ? "\n" : "", kept ? "retained" : "added", id,
        json_string_value(json_object_get(x, "rollout_summary_file")),
        at && *at ? at : "unknown");
  }
  json_array_foreach(prior, i, x) {
    const char *id = json_string_value(json_object_get(x, "rollout_id"));
    const char *sf =
        json_string_value(json_object_get(x, "rollout_summary_file"));
    const char *at = json_string_value(json_object_get(x, "updated_at"));
    if (!id || !*id || !sf || !*sf || selected(sel, id))
      continue;
    r |= sbx_buf_printf(&rm,
                        "%s- rollout_id=%s, rollout_summary_file=%s, "
                        "updated_at=%s",
                        removed++ ? "\n" : "", id, sf,
                        at && *at ? at : "unknown");
  }
  size_t n = json_array_size(sel);
  char *out = NULL;
  if (r < 0 || sbx_buf_append(&s, "", 1) < 0 || sbx_buf_append(&rm, "", 1) < 0)
    return NULL;
  if (asprintf(&out,
               "- selected inputs this run: %zu\n"
               "- newly added since the last successful Phase 2 run: %zu\n"
               "- retained from the last successful Phase 2 run: %zu\n"
               "- removed from the last successful Phase 2 run: %zu\n\n"
               "Current selected Phase 1 inputs:\n%s\n\n"
               "Removed from the last successful Phase 2 selection:\n%s\n",
               n, n - retained, retained, removed, n ? s.data : "- none",
               removed ? rm.data : "- none") < 0)
    return NULL;
  return out;
}

/* Phase two: consolidation of the selected raw memories. */
static int phase_two(struct run *run, struct trace_span *flush,
                     struct agent_state *st, const struct agent *a,
                     struct sbx_error *e) {
  const struct agent_memory *m = a->memory;
  _cleanup_json_ json_t *sel = NULL;
  _cleanup_free_ char *joined = NULL;
  int r = select_raw(st->sb, m, &sel, &joined, e);
  if (r < 0 || !*joined)
    return r;
  char p[1200];
  (void)snprintf(p, sizeof(p), "%s/raw_memories.md", m->memories_dir);
  if ((r = memory_write(st->sb, p, joined, strlen(joined), a->run_as, e)) < 0)
    return r;
  (void)snprintf(p, sizeof(p), "%s/phase_two_selection.json", m->memories_dir);
  _cleanup_free_ char *prior_text = NULL;
  size_t len;
  (void)memory_read(st->sb, p, MEMORY_TEXT_MAX_BYTES, &prior_text, &len, NULL);
  _cleanup_json_ json_t *prior_doc =
      prior_text ? json_loads(prior_text, 0, NULL) : NULL;
  json_t *prior = json_object_get(prior_doc, "selected");
  _cleanup_json_ json_t *none = json_array();
  _cleanup_free_ char *selection =
      render_selection(sel, json_is_array(prior) ? prior : none);
  _cleanup_free_ char *extra = memory_extra_section(m->extra_prompt);
  _cleanup_free_ char *input =
      selection && extra
          ? memory_render(sbx_memory_phase_two_md, "{{ memory_root }}",
                          m->memories_dir, "{{ phase_two_input_selection }}",
                          selection, "{{ extra_prompt_section }}", extra, NULL)
          : NULL;
  _cleanup_free_ struct agent *ag =
      phase_agent(a, "sandbox-memory-phase-two", m->phase_two_model,
                  m->phase_two_settings, NULL);
  if (!input || !ag)
    return -ENOMEM;
  struct run_result res = {0};
  r = run_phase(run, flush, st, ag, input, m->phase_two_max_turns, &res, e);
  run_result_clear(&res);
  if (r < 0)
    return r;
  char now[40];
  iso_now(now);
  _cleanup_json_ json_t *doc = json_pack("{s:i, s:s, s:O}", "version", 1,
                                         "updated_at", now, "selected", sel);
  _cleanup_free_ char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
  _cleanup_free_ char *withnl = NULL;
  if (!text || asprintf(&withnl, "%s\n", text) < 0)
    return -ENOMEM;
  return memory_write(st->sb, p, withnl, strlen(withnl), a->run_as, e);
}

/* The agent whose memory the run generates (the SDK's active memory): the
 * last agent if it generates memory, else the first that does, with a
 * sandbox; its index in *IDX. */
static const struct agent *memory_agent(struct run *run, size_t *idx) {
  const struct agent_set *set = run->sh->o->agents;
  const struct agent *best = NULL;
  for (size_t i = 0; i < set->n; i++) {
    const struct agent *a = set->agents[i];
    if (!a->memory || !a->memory->generate || !run->states[i].ready ||
        !run->states[i].sb)
      continue;
    if (!best ||
        (run->res->last_agent && strcmp(a->name, run->res->last_agent) == 0)) {
      best = a;
      *idx = i;
    }
  }
  return best;
}

void run_memory_generate(struct run *run, int rc, const struct sbx_error *err) {
  size_t idx = 0;
  const struct agent *a = memory_agent(run, &idx);
  if (!a)
    return;
  struct agent_state *st = &run->states[idx];
  /* The root run's rollout is the run's id; a nested run's is its own. */
  char own[33];
  const char *id = run->sh->run_id;
  if (run->depth > 0) {
    if (sbx_random_id(own) < 0)
      return;
    id = own;
  }
  struct sbx_error e = {0};
  struct trace_span *sp = trace_child(run->span, TRACE_MEMORY_FLUSH);
  trace_set_str(sp, "sandbox.memory.rollout_id", id);
  int r = ensure_layout(st->sb, a->memory, a->run_as, &e);
  if (r == 0)
    r = append_rollout(run, st->sb, a->memory, a->run_as, id, rc, err, &e);
  if (r < 0) {
    log_warn("failed to enqueue sandbox memory generation: %s",
             e.msg[0] ? e.msg : strerror(-r));
    trace_set_error(sp, "%s", e.msg[0] ? e.msg : strerror(-r));
    trace_end(sp);
    return;
  }
  /* A cancelled run asks for no more model calls, nor one stopped to go
   * on later: its rollout is kept, not extracted. */
  if (rc == -ECANCELED || rc == -EINTR) {
    trace_end(sp);
    return;
  }
  bool wrote = false;
  memset(&e, 0, sizeof(e));
  if ((r = phase_one(run, sp, st, a, id, &wrote, &e)) < 0)
    log_warn("sandbox memory phase 1 failed (rollout %s): %s", id,
             e.msg[0] ? e.msg : strerror(-r));
  memset(&e, 0, sizeof(e));
  if (wrote && (r = phase_two(run, sp, st, a, &e)) < 0)
    log_warn("sandbox memory phase 2 failed: %s",
             e.msg[0] ? e.msg : strerror(-r));
  if (r < 0)
    trace_set_error(sp, "%s", e.msg[0] ? e.msg : strerror(-r));
  trace_end(sp);
}
