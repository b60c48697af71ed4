/* The keys of one agent file, each checked and read by its parser (the
 * agent_fields table); the loader in agent.c follows the references they
 * name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "controller/config/agent_internal.h"
#include "shared/cleanup.h"
#include "shared/json.h"

#define USER_NAME_MAX 32

#define TOOL_NAME_MAX 64

static const char *const capability_names[AGENT_CAP_COUNT] = {
    [AGENT_CAP_FILESYSTEM] = "filesystem", [AGENT_CAP_SHELL] = "shell",
    [AGENT_CAP_COMPACTION] = "compaction", [AGENT_CAP_SKILLS] = "skills",
    [AGENT_CAP_MEMORY] = "memory",
};

#define CAPABILITY_CHOICES                                                     \
  "one of \"filesystem\", \"shell\", \"compaction\", \"skills\", \"memory\""

static const enum agent_capability default_capabilities[] = {
    AGENT_CAP_FILESYSTEM, AGENT_CAP_SHELL, AGENT_CAP_COMPACTION};

static const char *const api_names[] = {
    [AGENT_API_RESPONSES] = "responses",
    [AGENT_API_CHAT_COMPLETIONS] = "chat_completions",
};

const char *agent_capability_name(enum agent_capability c) {
  if ((unsigned)c >= AGENT_CAP_COUNT)
    return NULL;
  return capability_names[c];
}

void agent_key_path(char *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(k, KEY_MAX, fmt, ap);
  va_end(ap);
}

int agent_wrong_type(const struct agent_ctx *c, const char *key,
                     const char *expected, const json_t *v) {
  return agent_invalid(c, "\"%s\" must be %s (got %s)", key, expected,
                       sbx_json_kind(v, false));
}

static int unknown_key(const struct agent_ctx *c, const char *key) {
  return agent_invalid(c, "unknown key \"%s\"", key);
}

static int too_many(const struct agent_ctx *c, const char *key) {
  return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
}

static int get_string(const struct agent_ctx *c, const char *key,
                      const json_t *v, bool nonempty, char **out) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key,
                            nonempty ? "a non-empty string" : "a string", v);
  if (nonempty && json_string_length(v) == 0)
    return agent_invalid(c, "\"%s\" must not be empty", key);
  /* jansson refuses \u0000 unless asked, so the value is a C string. */
  char *s = strdup(json_string_value(v));
  if (!s)
    return agent_nomem(c);
  free(*out);
  *out = s;
  return 0;
}

/* An integer of at least 1. */
static int get_count(const struct agent_ctx *c, const char *key,
                     const json_t *v, int64_t *out) {
  if (!json_is_integer(v))
    return agent_wrong_type(c, key, "an integer", v);
  json_int_t n = json_integer_value(v);
  if (n < 1)
    return agent_invalid(
        c, "\"%s\" must be at least 1 (got %" JSON_INTEGER_FORMAT ")", key, n);
  *out = n;
  return 0;
}

/* A string that is one of NAMES[0..N) (NULL entries skipped): its index,
 * or a negative errno. */
static int get_enum(const struct agent_ctx *c, const char *key, const json_t *v,
                    const char *const *names, size_t n, const char *choices) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key, choices, v);
  const char *s = json_string_value(v);
  for (size_t i = 0; i < n; i++)
    if (names[i] && strcmp(s, names[i]) == 0)
      return (int)i;
  return agent_invalid(c, "\"%s\" must be %s (got \"%.64s\")", key, choices, s);
}

static int get_object(const struct agent_ctx *c, const char *key, json_t *v,
                      json_t **out) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  json_decref(*out);
  *out = json_incref(v);
  return 0;
}

/* The OpenAI function name rule: [A-Za-z0-9_-]{1,64}. */
bool agent_valid_tool_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > TOOL_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
        !(s[i] >= '0' && s[i] <= '9') && s[i] != '_' && s[i] != '-')
      return false;
  return true;
}

/* A portable user name: letters, digits, ".", "_", "-", not starting with
 * "-", at most 32 bytes. It ends up on command lines (sudo -u). */
static bool valid_user_name(const char *s, size_t n) {
  if (n == 0 || n > USER_NAME_MAX || s[0] == '-')
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
        !(s[i] >= '0' && s[i] <= '9') && s[i] != '_' && s[i] != '-' &&
        s[i] != '.')
      return false;
  return true;
}

typedef int (*field_fn)(const struct agent_ctx *c, struct agent *a,
                        const char *key, json_t *v);

static int parse_name(const struct agent_ctx *c, struct agent *a,
                      const char *key, json_t *v) {
  return get_string(c, key, v, true, &a->name);
}

static int parse_model(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v) {
  return get_string(c, key, v, true, &a->model);
}

static int parse_instructions(const struct agent_ctx *c, struct agent *a,
                              const char *key, json_t *v) {
  return get_string(c, key, v, false, &a->instructions);
}

static int parse_base_instructions(const struct agent_ctx *c, struct agent *a,
                                   const char *key, json_t *v) {
  return get_string(c, key, v, false, &a->base_instructions);
}

static int parse_default_manifest(const struct agent_ctx *c, struct agent *a,
                                  const char *key, json_t *v) {
  return get_object(c, key, v, &a->default_manifest);
}

static int parse_output_type(const struct agent_ctx *c, struct agent *a,
                             const char *key, json_t *v) {
  return get_object(c, key, v, &a->output_type);
}

/* A value of "prompt.variables": a string, or an input content object of
 * the Responses API (input_text, input_image or input_file). */
static int check_prompt_variable(const struct agent_ctx *c, const char *key,
                                 json_t *v) {
  static const char expected[] =
      "a string or an input_text, input_image or input_file object";
  if (json_is_string(v))
    return 0;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, expected, v);
  const char *type = json_string_value(json_object_get(v, "type"));
  if (!type || (strcmp(type, "input_text") && strcmp(type, "input_image") &&
                strcmp(type, "input_file")))
    return agent_invalid(c, "\"%s\" must be %s (got type \"%.64s\")", key,
                         expected, type ? type : "(none)");
  if (strcmp(type, "input_text") == 0 &&
      !json_is_string(json_object_get(v, "text")))
    return agent_invalid(c, "\"%s.text\" must be a string", key);
  return 0;
}

/* "prompt": the Responses API's reusable prompt, {"id", "version",
 * "variables"}, sent as the SDK sends it. */
static int parse_prompt(const struct agent_ctx *c, struct agent *a,
                        const char *key, json_t *v) {
  char k[KEY_MAX];
  const char *name;
  json_t *item;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  json_object_foreach(v, name, item) {
    agent_key_path(k, "%s.%s", key, name);
    if (strcmp(name, "id") == 0 || strcmp(name, "version") == 0) {
      if (!json_is_string(item) || json_string_length(item) == 0)
        return agent_wrong_type(c, k, "a non-empty string", item);
    } else if (strcmp(name, "variables") == 0) {
      if (!json_is_object(item))
        return agent_wrong_type(c, k, "an object", item);
      if (json_object_size(item) > AGENT_MAX_LIST)
        return too_many(c, k);
      const char *var;
      json_t *val;
      json_object_foreach(item, var, val) {
        agent_key_path(k, "%s.variables.%s", key, var);
        int r = check_prompt_variable(c, k, val);
        if (r < 0)
          return r;
      }
    } else {
      return unknown_key(c, k);
    }
  }
  if (!json_object_get(v, "id"))
    return agent_invalid(c, "\"%s\" needs an \"id\"", key);
  json_decref(a->prompt);
  a->prompt = json_pack("{s:O}", "id", json_object_get(v, "id"));
  if (!a->prompt)
    return agent_nomem(c);
  json_t *version = json_object_get(v, "version");
  json_t *vars = json_object_get(v, "variables");
  if ((version && json_object_set(a->prompt, "version", version) < 0) ||
      json_object_set_new(a->prompt, "variables",
                          vars ? json_deep_copy(vars) : json_object()) < 0)
    return agent_nomem(c);
  return 0;
}

static int parse_max_turns(const struct agent_ctx *c, struct agent *a,
                           const char *key, json_t *v) {
  return get_count(c, key, v, &a->max_turns);
}

static int parse_version(const struct agent_ctx *c, struct agent *a,
                         const char *key, json_t *v) {
  if (!json_is_integer(v))
    return agent_wrong_type(c, key, "an integer", v);
  if (json_integer_value(v) != 1)
    return agent_invalid(c, "\"%s\" must be 1 (got %" JSON_INTEGER_FORMAT ")",
                         key, json_integer_value(v));
  return 0;
}

/* One entry of "capabilities": a name, or a capability's object; the
 * capability, or a negative errno. */
static int parse_capability(const struct agent_ctx *c, struct agent *a,
                            const char *k, json_t *item) {
  if (json_is_object(item)) {
    /* A capability with options is an object named by its "type". */
    json_t *type = json_object_get(item, "type");
    if (!type)
      return agent_invalid(c, "\"%s\" has no \"type\"", k);
    char tk[KEY_MAX];
    agent_key_path(tk, "%s.type", k);
    int cap = get_enum(c, tk, type, capability_names, AGENT_CAP_COUNT,
                       CAPABILITY_CHOICES);
    if (cap < 0)
      return cap;
    if (cap == AGENT_CAP_SKILLS) {
      if (a->skills)
        return agent_invalid(c, "\"%s\" repeats \"skills\"", k);
      int r = agent_parse_skills(c, a, k, item);
      return r < 0 ? r : AGENT_CAP_SKILLS;
    }
    if (cap == AGENT_CAP_MEMORY) {
      if (a->memory)
        return agent_invalid(c, "\"%s\" repeats \"memory\"", k);
      int r = agent_parse_memory(c, a, k, item);
      return r < 0 ? r : AGENT_CAP_MEMORY;
    }
    return agent_invalid(c,
                         "\"%s\": the \"%s\" capability takes no "
                         "options; write it as the string \"%s\"",
                         k, capability_names[cap], capability_names[cap]);
  }
  int cap = get_enum(c, k, item, capability_names, AGENT_CAP_COUNT,
                     CAPABILITY_CHOICES);
  /* The SDK's Skills() without a source is refused there too. */
  if (cap == AGENT_CAP_SKILLS)
    return agent_invalid(c,
                         "\"%s\": skills capability requires `skills`, "
                         "`from`, or `lazy_from`: write {\"type\": "
                         "\"skills\", \"from\" or \"lazy_from\": "
                         "{\"type\": \"local_dir\", \"src\": ...}}",
                         k);
  if (cap == AGENT_CAP_MEMORY) {
    if (a->memory)
      return agent_invalid(c, "\"%s\" repeats \"memory\"", k);
    int r = agent_parse_memory(c, a, k, NULL);
    if (r < 0)
      return r;
  }
  return cap;
}

static int parse_capabilities(const struct agent_ctx *c, struct agent *a,
                              const char *key, json_t *v) {
  char k[KEY_MAX];
  size_t i;
  json_t *item;

  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of capability names", v);
  a->ncapabilities = 0;
  json_array_foreach(v, i, item) {
    agent_key_path(k, "%s[%zu]", key, i);
    int cap = parse_capability(c, a, k, item);
    if (cap < 0)
      return cap;
    for (size_t j = 0; j < a->ncapabilities; j++)
      if (a->capabilities[j] == (enum agent_capability)cap)
        return agent_invalid(c, "\"%s\" repeats \"%s\"", k,
                             capability_names[cap]);
    /* Five names, no repeats: the array cannot overflow. */
    a->capabilities[a->ncapabilities++] = (enum agent_capability)cap;
  }
  return agent_check_memory(c, a);
}

static int parse_run_as(const struct agent_ctx *c, struct agent *a,
                        const char *key, json_t *v) {
  char k[KEY_MAX];
  const json_t *name = v;

  /* The Python SDK takes a str or a User, whose JSON is {"name": ...}. */
  if (json_is_object(v)) {
    const char *sub;
    json_t *item;
    name = NULL;
    json_object_foreach(v, sub, item) {
      if (strcmp(sub, "name") != 0) {
        agent_key_path(k, "%s.%.64s", key, sub);
        return unknown_key(c, k);
      }
      name = item;
    }
    agent_key_path(k, "%s.name", key);
    if (!name)
      return agent_invalid(c, "missing required key \"%s\"", k);
    key = k;
  }
  if (!json_is_string(name))
    return agent_wrong_type(c, key, "a user name string", name);

  /* Trimmed, as the SDK does. */
  const char *s = json_string_value(name);
  size_t n = json_string_length(name);
  while (n > 0 && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) {
    s++;
    n--;
  }
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' ||
                   s[n - 1] == '\r'))
    n--;
  if (!valid_user_name(s, n))
    return agent_invalid(
        c,
        "\"%s\" must be a user name of at most %d letters, digits, "
        "\".\", \"_\" or \"-\" (got \"%.64s\")",
        key, USER_NAME_MAX, json_string_value(name));
  free(a->run_as);
  a->run_as = strndup(s, n);
  return a->run_as ? 0 : agent_nomem(c);
}

static int parse_handoffs(const struct agent_ctx *c, struct agent *a,
                          const char *key, json_t *v) {
  char k[KEY_MAX];
  size_t i;
  json_t *item;

  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of paths", v);
  size_t n = json_array_size(v);
  if (n > AGENT_MAX_LIST)
    return too_many(c, key);
  if (n == 0)
    return 0;
  a->handoff_paths = calloc(n, sizeof(*a->handoff_paths));
  a->handoffs = calloc(n, sizeof(*a->handoffs));
  if (!a->handoff_paths || !a->handoffs)
    return agent_nomem(c);
  a->nhandoffs = n;
  json_array_foreach(v, i, item) {
    agent_key_path(k, "%s[%zu]", key, i);
    if (!json_is_string(item))
      return agent_wrong_type(c, k, "a path string", item);
    int r = get_string(c, k, item, true, &a->handoff_paths[i]);
    if (r < 0)
      return r;
  }
  return 0;
}

/* An agent_as_tool entry's "run_config": the RunConfig the SDK's as_tool
 * takes for the nested run. Its one key here is "sandbox": "parent", the
 * SDK's SandboxRunConfig(session=<the caller's live session>): the nested
 * run works in its caller's sandbox. The backend and its options are the
 * run's (the starting agent's run_config), so any other key is refused. */
static int parse_tool_run_config(const struct agent_ctx *c,
                                 struct agent_tool *t, const char *key,
                                 json_t *v) {
  char k[KEY_MAX];
  const char *sub;
  json_t *item;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  json_object_foreach(v, sub, item) {
    agent_key_path(k, "%s.%.64s", key, sub);
    if (strcmp(sub, "sandbox") != 0)
      return agent_invalid(c,
                           "\"%s\" is not supported: the run_config of an "
                           "agent used as a tool takes only \"sandbox\"; a "
                           "run has one backend and one set of its options, "
                           "the starting agent's run_config",
                           k);
    if (json_is_null(item))
      continue;
    if (!json_is_string(item))
      return agent_wrong_type(c, k, "\"parent\"", item);
    if (strcmp(json_string_value(item), "parent") != 0)
      return agent_invalid(c,
                           "\"%s\" must be \"parent\" (got \"%.64s\"): "
                           "without it the agent gets a sandbox of its own",
                           k, json_string_value(item));
    t->parent_sandbox = true;
  }
  return 0;
}

static int parse_tool(const struct agent_ctx *c, struct agent *a,
                      const char *key, json_t *v) {
  char k[KEY_MAX];
  const char *sub;
  json_t *item;
  int r = 0;

  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  /* The type first: another tool type gets its own message, not one about
   * its other keys. */
  json_t *type = json_object_get(v, "type");
  agent_key_path(k, "%s.type", key);
  if (!type)
    return agent_invalid(c, "missing required key \"%s\"", k);
  if (!json_is_string(type))
    return agent_wrong_type(c, k, "\"agent_as_tool\" or \"command\"", type);
  if (strcmp(json_string_value(type), "command") == 0)
    return agent_parse_command(c, &a->commands[a->ncommands++], key, v);
  if (strcmp(json_string_value(type), "agent_as_tool") != 0)
    return agent_invalid(c,
                         "\"%s\" must be \"agent_as_tool\" or \"command\" "
                         "(got \"%.64s\")",
                         k, json_string_value(type));
  struct agent_tool *t = &a->tools[a->ntools++];
  json_object_foreach(v, sub, item) {
    agent_key_path(k, "%s.%.64s", key, sub);
    if (strcmp(sub, "type") == 0) {
      continue;
    } else if (strcmp(sub, "agent") == 0) {
      if (!json_is_string(item))
        return agent_wrong_type(c, k, "a path string", item);
      r = get_string(c, k, item, true, &t->agent_path);
    } else if (strcmp(sub, "name") == 0) {
      if (json_is_null(item))
        continue;
      r = get_string(c, k, item, true, &t->name);
      if (r == 0 && !agent_valid_tool_name(t->name))
        return agent_invalid(
            c,
            "\"%s\" must be a tool name of at most %d letters, "
            "digits, \"_\" or \"-\" (got \"%.64s\")",
            k, TOOL_NAME_MAX, t->name);
    } else if (strcmp(sub, "description") == 0) {
      if (json_is_null(item))
        continue;
      r = get_string(c, k, item, false, &t->description);
    } else if (strcmp(sub, "max_turns") == 0) {
      if (json_is_null(item))
        continue;
      r = get_count(c, k, item, &t->max_turns);
    } else if (strcmp(sub, "run_config") == 0) {
      if (json_is_null(item))
        continue;
      r = parse_tool_run_config(c, t, k, item);
    } else {
      return unknown_key(c, k);
    }
    if (r < 0)
      return r;
  }
  if (!t->agent_path) {
    agent_key_path(k, "%s.agent", key);
    return agent_invalid(c, "missing required key \"%s\"", k);
  }
  return 0;
}

/* The name of the entry I of "tools", or NULL when it has none. */
static const char *tool_entry_name(json_t *tools, size_t i) {
  return json_string_value(json_object_get(json_array_get(tools, i), "name"));
}

static int parse_tools(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v) {
  char k[KEY_MAX];
  size_t i;
  json_t *item;

  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of tool objects", v);
  size_t n = json_array_size(v);
  if (n > AGENT_MAX_LIST)
    return too_many(c, key);
  if (n == 0)
    return 0;
  a->tools = calloc(n, sizeof(*a->tools));
  a->commands = calloc(n, sizeof(*a->commands));
  if (!a->tools || !a->commands)
    return agent_nomem(c);
  json_array_foreach(v, i, item) {
    agent_key_path(k, "%s[%zu]", key, i);
    int r = parse_tool(c, a, k, item);
    if (r < 0)
      return r;
    const char *name = tool_entry_name(v, i);
    for (size_t j = 0; name && j < i; j++)
      if (tool_entry_name(v, j) && strcmp(tool_entry_name(v, j), name) == 0)
        return agent_invalid(c, "\"%s.name\" repeats \"%s\" of \"%s[%zu]\"", k,
                             name, key, j);
  }
  return 0;
}

static int parse_api(const struct agent_ctx *c, struct agent *a,
                     const char *key, json_t *v) {
  int api = get_enum(c, key, v, api_names, SBX_ARRAY_SIZE(api_names),
                     "\"responses\" or \"chat_completions\"");
  if (api < 0)
    return api;
  a->api = (enum agent_api)api;
  return 0;
}

static int parse_base_url(const struct agent_ctx *c, struct agent *a,
                          const char *key, json_t *v) {
  int r = get_string(c, key, v, true, &a->base_url);
  if (r < 0)
    return r;
  const char *u = a->base_url;
  size_t scheme = strncasecmp(u, "https://", 8) == 0  ? 8
                  : strncasecmp(u, "http://", 7) == 0 ? 7
                                                      : 0;
  bool ok = scheme > 0 && u[scheme] != '\0' && u[scheme] != '/';
  for (const char *p = u; ok && *p; p++)
    if ((unsigned char)*p <= ' ' || *p == 0x7f)
      ok = false;
  if (!ok)
    return agent_invalid(
        c,
        "\"%s\" must be an http:// or https:// URL without spaces "
        "(got \"%.64s\")",
        key, u);
  return 0;
}

/* The name of the environment variable holding the agent's key: a
 * portable name, [A-Za-z_][A-Za-z0-9_]*, at most 128 bytes. */
static int parse_api_key_env(const struct agent_ctx *c, struct agent *a,
                             const char *key, json_t *v) {
  int r = get_string(c, key, v, true, &a->api_key_env);
  if (r < 0)
    return r;
  const char *s = a->api_key_env;
  bool ok = strlen(s) <= 128 && !(s[0] >= '0' && s[0] <= '9');
  for (const char *p = s; ok && *p; p++)
    ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
         (*p >= '0' && *p <= '9') || *p == '_';
  if (!ok)
    return agent_invalid(c,
                         "\"%s\" must be an environment variable name: "
                         "letters, digits and \"_\", not starting with a "
                         "digit (got \"%.64s\")",
                         key, s);
  return 0;
}

/* "run_config.exposed_ports": the ports the sandbox exposes, as --expose
 * gives them (the SDK's exposedPorts, a client option of every backend). */
static int parse_run_ports(const struct agent_ctx *c, struct agent *a,
                           const char *key, json_t *v) {
  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of ports", v);
  if (json_array_size(v) > AGENT_MAX_PORTS)
    return agent_invalid(c, "\"%s\" has more than %d ports", key,
                         AGENT_MAX_PORTS);
  size_t i;
  json_t *p;
  json_array_foreach(v, i, p) {
    json_int_t n = json_integer_value(p);
    if (!json_is_integer(p) || n < 1 || n > 65535)
      return agent_invalid(c,
                           "\"%s[%zu]\": Exposed ports must be integers "
                           "between 1 and 65535.",
                           key, i);
    for (size_t j = 0; j < i; j++)
      if (a->run_ports[j] == n)
        return agent_invalid(c, "\"%s\": port %d is listed twice", key, (int)n);
    a->run_ports[i] = (uint16_t)n;
  }
  a->n_run_ports = json_array_size(v);
  return 0;
}

/* "run_config": the run defaults the SDK keeps in RunConfig.sandbox, which
 * `sbx run`'s flags replace: "backend" (a name) and the backend's own
 * options, kept as JSON for the backend to check (backend.h): this module
 * does not know the backends. */
static int parse_run_config(const struct agent_ctx *c, struct agent *a,
                            const char *key, json_t *v) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  char kp[KEY_MAX];
  agent_key_path(kp, "%s.sandbox", key);
  if (json_object_get(v, "sandbox"))
    return agent_invalid(c,
                         "\"%s\" is not an agent's own setting: it goes in "
                         "the run_config of the \"agent_as_tool\" entry "
                         "that uses this agent (\"tools\" of the calling "
                         "agent's file)",
                         kp);
  agent_key_path(kp, "%s.backend", key);
  json_t *b = json_object_get(v, "backend");
  if (b && !json_is_null(b)) {
    int r = get_string(c, kp, b, true, &a->run_backend);
    if (r < 0)
      return r;
  }
  json_t *ports = json_object_get(v, "exposed_ports");
  if (ports && !json_is_null(ports)) {
    agent_key_path(kp, "%s.exposed_ports", key);
    int r = parse_run_ports(c, a, kp, ports);
    if (r < 0)
      return r;
  }
  json_t *opts = json_deep_copy(v);
  if (!opts)
    return agent_nomem(c);
  (void)json_object_del(opts, "backend"); /* absent is fine */
  (void)json_object_del(opts, "exposed_ports");
  if (json_object_size(opts) == 0) {
    json_decref(opts);
    return 0;
  }
  a->run_options = opts;
  return 0;
}

static int parse_approval(const struct agent_ctx *c, struct agent_approval *ap,
                          const char *key, json_t *v) {
  static const char expected[] =
      "\"always\", \"never\" or an array of command prefixes";
  char k[KEY_MAX];
  size_t i;
  json_t *item;

  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    if (strcmp(s, "always") == 0)
      ap->mode = AGENT_APPROVAL_ALWAYS;
    else if (strcmp(s, "never") == 0)
      ap->mode = AGENT_APPROVAL_NEVER;
    else
      return agent_invalid(c, "\"%s\" must be %s (got \"%.64s\")", key,
                           expected, s);
    return 0;
  }
  if (!json_is_array(v))
    return agent_wrong_type(c, key, expected, v);
  size_t n = json_array_size(v);
  if (n > AGENT_MAX_LIST)
    return too_many(c, key);
  if (n == 0)
    return agent_invalid(c,
                         "\"%s\" lists no command prefix (\"never\" says "
                         "that none needs approval)",
                         key);
  ap->mode = AGENT_APPROVAL_PREFIXES;
  ap->prefixes = calloc(n, sizeof(*ap->prefixes));
  if (!ap->prefixes)
    return agent_nomem(c);
  ap->nprefixes = n;
  json_array_foreach(v, i, item) {
    agent_key_path(k, "%s[%zu]", key, i);
    if (!json_is_string(item))
      return agent_wrong_type(c, k, "a command prefix string", item);
    int r = get_string(c, k, item, true, &ap->prefixes[i]);
    if (r < 0)
      return r;
  }
  return 0;
}

static int parse_approvals(const struct agent_ctx *c, struct agent *a,
                           const char *key, json_t *v) {
  char k[KEY_MAX];
  const char *tool;
  json_t *item;

  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object of tool names", v);
  size_t n = json_object_size(v);
  if (n > AGENT_MAX_LIST)
    return too_many(c, key);
  if (n == 0)
    return 0;
  a->approvals = calloc(n, sizeof(*a->approvals));
  if (!a->approvals)
    return agent_nomem(c);
  json_object_foreach(v, tool, item) {
    struct agent_approval *ap = &a->approvals[a->napprovals++];
    agent_key_path(k, "%s.%.64s", key, tool);
    if (tool[0] == '\0')
      return agent_invalid(c, "\"%s\" keys must be tool names, not \"\"", key);
    ap->tool = strdup(tool);
    if (!ap->tool)
      return agent_nomem(c);
    int r = parse_approval(c, ap, k, item);
    if (r < 0)
      return r;
  }
  return 0;
}

static const struct field {
  const char *key;
  field_fn parse;
} agent_fields[] = {
    {"name", parse_name},
    {"model", parse_model},
    {"instructions", parse_instructions},
    {"base_instructions", parse_base_instructions},
    {"default_manifest", parse_default_manifest},
    {"capabilities", parse_capabilities},
    {"run_as", parse_run_as},
    {"model_settings", agent_parse_model_settings},
    {"output_type", parse_output_type},
    {"prompt", parse_prompt},
    {"max_turns", parse_max_turns},
    {"handoffs", parse_handoffs},
    {"tools", parse_tools},
    {"mcp_servers", agent_parse_mcp_servers},
    {"input_guardrails", agent_parse_guardrails},
    {"output_guardrails", agent_parse_guardrails},
    {"api", parse_api},
    {"base_url", parse_base_url},
    {"api_key_env", parse_api_key_env},
    {"approvals", parse_approvals},
    {"run_config", parse_run_config},
    {"version", parse_version},
};

/* Fills A from the parsed file ROOT. null is the same as a key left out,
 * except for "name". */
int agent_parse(const struct agent_ctx *c, struct agent *a, json_t *root) {
  a->ncapabilities = SBX_ARRAY_SIZE(default_capabilities);
  memcpy(a->capabilities, default_capabilities, sizeof(default_capabilities));
  const char *key;
  json_t *v;

  if (!json_is_object(root))
    return agent_invalid(c,
                         "an agent definition must be a JSON object (got %s)",
                         sbx_json_kind(root, false));
  json_object_foreach(root, key, v) {
    const struct field *f = NULL;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(agent_fields) && !f; i++)
      if (strcmp(key, agent_fields[i].key) == 0)
        f = &agent_fields[i];
    if (!f)
      return agent_invalid(c, "unknown key \"%.64s\"", key);
    if (json_is_null(v) && f->parse != parse_name)
      continue;
    int r = f->parse(c, a, key, v);
    if (r < 0)
      return r;
  }
  if (!a->name)
    return agent_invalid(c, "missing required key \"name\"");
  int r = agent_check_skills(c, a);
  return r < 0 ? r : agent_check_model_settings(c, a);
}
