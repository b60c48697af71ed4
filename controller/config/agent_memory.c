/* The memory capability of an agent file, with the Python SDK's Memory
 * fields: "layout" {memories_dir, sessions_dir, summary_file}, "read"
 * ({live_update}, true, or null/false for none) and "generate"
 * ({max_raw_memories_for_consolidation, phase_one_model,
 * phase_one_model_settings, phase_two_model, phase_two_model_settings,
 * phase_two_max_turns, extra_prompt}, true, or null/false for none). The
 * bare string "memory" is Memory(): read with live updates, and generate,
 * with the SDK's defaults. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/agent_internal.h"
#include "shared/cleanup.h"
#include "shared/json.h"
#include "shared/path.h"

#define MEMORY_MAX_RAW_DEFAULT 256
#define MEMORY_MAX_RAW_LIMIT 4096
#define MEMORY_MAX_TURNS_DEFAULT 500
#define MEMORY_PROMPT_MAX (64 * 1024)

void agent_memory_free(struct agent_memory *m) {
  if (!m)
    return;
  free(m->memories_dir);
  free(m->sessions_dir);
  free(m->summary_file);
  free(m->phase_one_model);
  free(m->phase_two_model);
  json_decref(m->phase_one_settings);
  json_decref(m->phase_two_settings);
  free(m->extra_prompt);
  free(m);
}

/* The SDK's model settings for both phases: medium reasoning. */
static json_t *default_settings(void) {
  return json_pack("{s:{s:s}}", "reasoning", "effort", "medium");
}

static int set_defaults(struct agent_memory *m) {
  m->read = m->live_update = m->generate = true;
  m->max_raw_memories = MEMORY_MAX_RAW_DEFAULT;
  m->phase_two_max_turns = MEMORY_MAX_TURNS_DEFAULT;
  if (!(m->memories_dir = strdup("memories")) ||
      !(m->sessions_dir = strdup("sessions")) ||
      !(m->summary_file = strdup("memory_summary.md")) ||
      !(m->phase_one_model = strdup("gpt-5.4-mini")) ||
      !(m->phase_two_model = strdup("gpt-5.4")) ||
      !(m->phase_one_settings = default_settings()) ||
      !(m->phase_two_settings = default_settings()))
    return -ENOMEM;
  return 0;
}

/* A layout path: relative, not escaping the root, not empty. */
static int layout_path(const struct agent_ctx *c, const char *key, json_t *v,
                       bool file_name, char **out) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key, "a string", v);
  const char *s = json_string_value(v);
  char norm[1024];
  if (sbx_path_normalize_rel(s, json_string_length(v), norm, sizeof(norm),
                             SBX_PATH_NO_DOTDOT | SBX_PATH_POSIX_ONLY,
                             NULL) < 0 ||
      strcmp(norm, ".") == 0)
    return agent_invalid(c,
                         "\"%s\" must be relative to the sandbox workspace "
                         "root, non-empty, and must not escape root, got: "
                         "%.200s",
                         key, s);
  if (file_name && strchr(norm, '/'))
    return agent_invalid(c, "\"%s\" must be a file name, got: %.200s", key, s);
  free(*out);
  return (*out = strdup(norm)) ? 0 : agent_nomem(c);
}

static int get_string(const struct agent_ctx *c, const char *key, json_t *v,
                      size_t max, char **out) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key, "a string", v);
  if (json_string_length(v) > max)
    return agent_invalid(c, "\"%s\" is longer than %zu bytes", key, max);
  free(*out);
  return (*out = strdup(json_string_value(v))) ? 0 : agent_nomem(c);
}

static int get_int(const struct agent_ctx *c, const char *key, json_t *v,
                   int64_t lo, int64_t hi, int64_t *out) {
  if (!json_is_integer(v))
    return agent_wrong_type(c, key, "an integer", v);
  if (json_integer_value(v) < lo || json_integer_value(v) > hi)
    return agent_invalid(c,
                         "\"%s\" must be an integer between %" PRId64
                         " and %" PRId64 " (got %" JSON_INTEGER_FORMAT ")",
                         key, lo, hi, json_integer_value(v));
  *out = json_integer_value(v);
  return 0;
}

static int get_settings(const struct agent_ctx *c, const char *key, json_t *v,
                        json_t **out) {
  struct agent tmp = {0};
  int r = agent_parse_model_settings(c, &tmp, key, v);
  if (r < 0)
    return r;
  json_decref(*out);
  *out = tmp.model_settings;
  return 0;
}

static int parse_layout(const struct agent_ctx *c, struct agent_memory *m,
                        const char *key, json_t *v) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    agent_key_path(k, "%s.%.64s", key, sub);
    int r;
    if (strcmp(sub, "memories_dir") == 0)
      r = layout_path(c, k, item, false, &m->memories_dir);
    else if (strcmp(sub, "sessions_dir") == 0)
      r = layout_path(c, k, item, false, &m->sessions_dir);
    else if (strcmp(sub, "summary_file") == 0)
      r = layout_path(c, k, item, true, &m->summary_file);
    else
      r = agent_invalid(c, "unknown key \"%s\"", k);
    if (r < 0)
      return r;
  }
  if (strcmp(m->memories_dir, m->sessions_dir) == 0)
    return agent_invalid(c,
                         "\"%s\": memories_dir and sessions_dir are the same "
                         "directory \"%s\"",
                         key, m->memories_dir);
  return 0;
}

static int parse_read(const struct agent_ctx *c, struct agent_memory *m,
                      const char *key, json_t *v) {
  if (json_is_null(v) || json_is_false(v)) {
    m->read = m->live_update = false;
    return 0;
  }
  if (json_is_true(v))
    return 0;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object, true, false or null", v);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    agent_key_path(k, "%s.%.64s", key, sub);
    if (strcmp(sub, "live_update") != 0)
      return agent_invalid(c, "unknown key \"%s\"", k);
    if (!json_is_boolean(item))
      return agent_wrong_type(c, k, "a boolean", item);
    m->live_update = json_is_true(item);
  }
  return 0;
}

/* One key SUB of "generate". */
static int generate_key(const struct agent_ctx *c, struct agent_memory *m,
                        const char *k, const char *sub, json_t *item) {
  if (strcmp(sub, "max_raw_memories_for_consolidation") == 0)
    return get_int(c, k, item, 1, MEMORY_MAX_RAW_LIMIT, &m->max_raw_memories);
  if (strcmp(sub, "phase_two_max_turns") == 0)
    return get_int(c, k, item, 1, 100000, &m->phase_two_max_turns);
  if (strcmp(sub, "phase_one_model") == 0)
    return get_string(c, k, item, 256, &m->phase_one_model);
  if (strcmp(sub, "phase_two_model") == 0)
    return get_string(c, k, item, 256, &m->phase_two_model);
  if (strcmp(sub, "phase_one_model_settings") == 0)
    return get_settings(c, k, item, &m->phase_one_settings);
  if (strcmp(sub, "phase_two_model_settings") == 0)
    return get_settings(c, k, item, &m->phase_two_settings);
  if (strcmp(sub, "extra_prompt") == 0)
    return get_string(c, k, item, MEMORY_PROMPT_MAX, &m->extra_prompt);
  return agent_invalid(c, "unknown key \"%s\"", k);
}

static int parse_generate(const struct agent_ctx *c, struct agent_memory *m,
                          const char *key, json_t *v) {
  if (json_is_null(v) || json_is_false(v)) {
    m->generate = false;
    return 0;
  }
  if (json_is_true(v))
    return 0;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object, true, false or null", v);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    agent_key_path(k, "%s.%.64s", key, sub);
    int r = json_is_null(item) && strcmp(sub, "extra_prompt") == 0
                ? 0
                : generate_key(c, m, k, sub, item);
    if (r < 0)
      return r;
  }
  return 0;
}

int agent_parse_memory(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v) {
  struct agent_memory *m = calloc(1, sizeof(*m));
  if (!m || set_defaults(m) < 0) {
    agent_memory_free(m);
    return agent_nomem(c);
  }
  agent_memory_free(a->memory);
  a->memory = m;
  if (!v)
    return 0;
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    agent_key_path(k, "%s.%.64s", key, sub);
    int r = 0;
    if (strcmp(sub, "type") == 0)
      continue;
    if (strcmp(sub, "layout") == 0)
      r = json_is_null(item) ? 0 : parse_layout(c, m, k, item);
    else if (strcmp(sub, "read") == 0)
      r = parse_read(c, m, k, item);
    else if (strcmp(sub, "generate") == 0)
      r = parse_generate(c, m, k, item);
    else
      r = agent_invalid(c, "unknown key \"%s\"", k);
    if (r < 0)
      return r;
  }
  if (!m->read && !m->generate)
    return agent_invalid(c,
                         "\"%s\": Memory requires at least one of `read` or "
                         "`generate`.",
                         key);
  return 0;
}

/* The SDK's check: read needs shell, and filesystem with live updates. */
int agent_check_memory(const struct agent_ctx *c, const struct agent *a) {
  const struct agent_memory *m = a->memory;
  if (!m || !m->read)
    return 0;
  bool fs = false, shell = false;
  for (size_t i = 0; i < a->ncapabilities; i++) {
    fs |= a->capabilities[i] == AGENT_CAP_FILESYSTEM;
    shell |= a->capabilities[i] == AGENT_CAP_SHELL;
  }
  bool need_fs = m->live_update && !fs;
  if (!need_fs && shell)
    return 0;
  return agent_invalid(c,
                       "\"capabilities\": memory requires missing "
                       "capabilities: %s%s%s",
                       need_fs ? "filesystem" : "",
                       need_fs && !shell ? ", " : "", shell ? "" : "shell");
}

/* Whether the normalized PATH overlaps an entry key of ENTRIES. */
static bool overlaps(json_t *entries, const char *path) {
  const char *key;
  json_t *v;
  size_t n = strlen(path);
  json_object_foreach(entries, key, v) {
    char norm[1024];
    if (sbx_path_normalize_rel(key, strlen(key), norm, sizeof(norm), 0, NULL) <
        0)
      continue; /* the manifest's parser refuses it */
    size_t k = strlen(norm);
    if (strcmp(norm, path) == 0 ||
        (strncmp(norm, path, n) == 0 && norm[n] == '/') ||
        (strncmp(path, norm, k) == 0 && path[k] == '/'))
      return true;
  }
  return false;
}

json_t *agent_memory_manifest(const struct agent *a, json_t *manifest) {
  const struct agent_memory *m = a->memory;
  _cleanup_json_ json_t *out =
      manifest ? json_deep_copy(manifest) : json_object();
  if (!out || !m)
    return TAKE_PTR(out);
  json_t *entries = json_object_get(out, "entries");
  if (!entries &&
      json_object_set_new(out, "entries", entries = json_object()) < 0)
    return NULL;
  if (!json_is_object(entries))
    return TAKE_PTR(out); /* the manifest's parser says what is wrong */
  const char *dirs[2] = {m->live_update || m->generate ? m->memories_dir : NULL,
                         m->generate ? m->sessions_dir : NULL};
  for (size_t i = 0; i < 2; i++)
    if (dirs[i] && !overlaps(entries, dirs[i]) &&
        json_object_set_new(entries, dirs[i],
                            json_pack("{s:s}", "type", "dir")) < 0)
      return NULL;
  return TAKE_PTR(out);
}
