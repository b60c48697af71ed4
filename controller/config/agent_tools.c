/* The keys of the tools that run on the controller's host: "tools"
 * entries of type "command" and "mcp_servers" (stdio or Streamable HTTP).
 * Both are trusted configuration: they name programs the controller
 * starts, never inside the sandbox, and servers it connects to. A relative
 * program path (one with a slash) and a relative "cwd" are taken from the agent
 * file's directory, which is also where the programs run; a bare program name
 * is looked up in PATH. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/agent_internal.h"
#include "shared/cleanup.h"
#include "shared/json.h"

#define COMMAND_DEFAULT_TIMEOUT_S 60
#define COMMAND_MAX_TIMEOUT_S 3600
#define MCP_DEFAULT_TIMEOUT_S 5 /* the Python SDK's default */
#define MCP_NAME_MAX 64

/* The directory of the agent file C, absolute (new), or NULL. */
static char *file_dir(const struct agent_ctx *c) {
  const char *slash = strrchr(c->path, '/');
  _cleanup_free_ char *d =
      slash ? strndup(c->path, (size_t)(slash - c->path) + 1) : strdup(".");
  if (!d)
    return NULL;
  return realpath(d, NULL);
}

/* P taken from DIR when it is relative (new), or NULL. */
static char *from_dir(const char *dir, const char *p) {
  if (p[0] == '/')
    return strdup(p);
  size_t n = strlen(dir) + strlen(p) + 2;
  char *s = malloc(n);
  if (s)
    (void)snprintf(s, n, "%s/%s", dir, p);
  return s;
}

/* A program path as written: resolved against DIR when it has a slash and
 * is relative, else as is (PATH lookup). New, or NULL. */
static char *program_path(const char *dir, const char *p) {
  return strchr(p, '/') ? from_dir(dir, p) : strdup(p);
}

char **agent_strv_free(char **v) {
  for (size_t i = 0; v && v[i]; i++)
    free(v[i]);
  free(v);
  return NULL;
}

/* The array V of non-empty strings as a NULL-terminated vector with room
 * for EXTRA more entries in front (new, in *OUT). */
static int get_strv(const struct agent_ctx *c, const char *key, json_t *v,
                    size_t extra, bool nonempty, char ***out) {
  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of strings", v);
  size_t n = json_array_size(v);
  if (n > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  if (nonempty && n == 0)
    return agent_invalid(c, "\"%s\" must not be empty", key);
  char **s = calloc(n + extra + 1, sizeof(*s));
  if (!s)
    return agent_nomem(c);
  *out = s;
  for (size_t i = 0; i < n; i++) {
    json_t *item = json_array_get(v, i);
    if (!json_is_string(item) || json_string_length(item) == 0)
      return agent_invalid(c, "\"%s[%zu]\" must be a non-empty string", key, i);
    if (!(s[extra + i] = strdup(json_string_value(item))))
      return agent_nomem(c);
  }
  return 0;
}

static int get_str(const struct agent_ctx *c, const char *key, json_t *v,
                   char **out) {
  if (!json_is_string(v) || json_string_length(v) == 0)
    return agent_wrong_type(c, key, "a non-empty string", v);
  free(*out);
  *out = strdup(json_string_value(v));
  return *out ? 0 : agent_nomem(c);
}

/* A whole number of seconds in 1..COMMAND_MAX_TIMEOUT_S. */
int agent_get_timeout(const struct agent_ctx *c, const char *key, json_t *v,
                      int64_t *out) {
  if (!json_is_integer(v))
    return agent_wrong_type(c, key, "an integer", v);
  json_int_t n = json_integer_value(v);
  if (n < 1 || n > COMMAND_MAX_TIMEOUT_S)
    return agent_invalid(c,
                         "\"%s\" must be between 1 and %d seconds (got "
                         "%" JSON_INTEGER_FORMAT ")",
                         key, COMMAND_MAX_TIMEOUT_S, n);
  *out = n;
  return 0;
}

int agent_get_program(const struct agent_ctx *c, const char *key, json_t *v,
                      char ***argv, char **dir) {
  *argv = agent_strv_free(*argv);
  int r = get_strv(c, key, v, 0, true, argv);
  if (r < 0)
    return r;
  free(*dir);
  if (!(*dir = file_dir(c)))
    return agent_fail(c, SBX_OK, errno ? errno : ENOMEM,
                      "cannot resolve the directory of the agent file: %s",
                      strerror(errno ? errno : ENOMEM));
  char *p = program_path(*dir, (*argv)[0]);
  if (!p)
    return agent_nomem(c);
  free((*argv)[0]);
  (*argv)[0] = p;
  return 0;
}

int agent_parse_command(const struct agent_ctx *c, struct agent_command *t,
                        const char *key, json_t *v) {
  char k[KEY_MAX];
  const char *sub;
  json_t *item;
  t->timeout_s = COMMAND_DEFAULT_TIMEOUT_S;
  json_object_foreach(v, sub, item) {
    agent_key_path(k, "%s.%.64s", key, sub);
    int r = 0;
    if (strcmp(sub, "type") == 0 || json_is_null(item))
      continue;
    if (strcmp(sub, "name") == 0) {
      r = get_str(c, k, item, &t->name);
      if (r == 0 && !agent_valid_tool_name(t->name))
        return agent_invalid(c,
                             "\"%s\" must be a tool name of at most 64 "
                             "letters, digits, \"_\" or \"-\" (got \"%.64s\")",
                             k, t->name);
    } else if (strcmp(sub, "description") == 0) {
      if (!json_is_string(item))
        return agent_wrong_type(c, k, "a string", item);
      free(t->description);
      t->description = strdup(json_string_value(item));
      r = t->description ? 0 : agent_nomem(c);
    } else if (strcmp(sub, "parameters") == 0) {
      if (!json_is_object(item))
        return agent_wrong_type(c, k, "a JSON schema object", item);
      json_decref(t->parameters);
      t->parameters = json_incref(item);
    } else if (strcmp(sub, "command") == 0) {
      r = agent_get_program(c, k, item, &t->argv, &t->dir);
    } else if (strcmp(sub, "timeout_s") == 0) {
      r = agent_get_timeout(c, k, item, &t->timeout_s);
    } else {
      return agent_invalid(c, "unknown key \"%s\"", k);
    }
    if (r < 0)
      return r;
  }
  static const char *const required[] = {"name", "command"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(required); i++)
    if (!json_object_get(v, required[i]))
      return agent_invalid(c, "missing required key \"%s.%s\"", key,
                           required[i]);
  if (!t->description && !(t->description = strdup("")))
    return agent_nomem(c);
  if (!t->parameters && !(t->parameters = json_pack("{s:s, s:{}}", "type",
                                                    "object", "properties")))
    return agent_nomem(c);
  return 0;
}

/* ---- mcp_servers -------------------------------------------------------- */

/* "require_approval": "always" | "never" | a boolean | {tool: "always" |
 * "never"} | {"always": {"tool_names": [...]}, "never": {...}}, as the
 * Python SDK takes it. */
static int parse_require_approval(const struct agent_ctx *c,
                                  struct agent_mcp_server *s, const char *key,
                                  json_t *v) {
  static const char expected[] =
      "\"always\", \"never\", a boolean or an object of tool names";
  if (json_is_boolean(v)) {
    s->approval_always = json_is_true(v);
    return 0;
  }
  if (json_is_string(v)) {
    const char *m = json_string_value(v);
    if (strcmp(m, "always") != 0 && strcmp(m, "never") != 0)
      return agent_invalid(c, "\"%s\" must be %s (got \"%.64s\")", key,
                           expected, m);
    s->approval_always = strcmp(m, "always") == 0;
    return 0;
  }
  if (!json_is_object(v))
    return agent_wrong_type(c, key, expected, v);
  size_t cap = json_object_size(v);
  json_t *lists[2] = {json_object_get(v, "always"),
                      json_object_get(v, "never")};
  for (size_t i = 0; i < 2; i++)
    if (json_is_object(lists[i]))
      cap += json_array_size(json_object_get(lists[i], "tool_names"));
  if (cap > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" names more than %d tools", key, AGENT_MAX_LIST);
  s->approvals = calloc(cap ? cap : 1, sizeof(*s->approvals));
  if (!s->approvals)
    return agent_nomem(c);
  const char *tool;
  json_t *item;
  char k[KEY_MAX];
  json_object_foreach(v, tool, item) {
    agent_key_path(k, "%s.%.64s", key, tool);
    bool grouped = json_is_object(item) &&
                   (strcmp(tool, "always") == 0 || strcmp(tool, "never") == 0);
    json_t *names = grouped ? json_object_get(item, "tool_names") : NULL;
    if (grouped && !json_is_array(names))
      return agent_wrong_type(c, k, "{\"tool_names\": [...]}", item);
    for (size_t i = 0; grouped && i < json_array_size(names); i++) {
      json_t *n = json_array_get(names, i);
      if (!json_is_string(n))
        return agent_wrong_type(c, k, "{\"tool_names\": [names...]}", item);
      struct agent_mcp_approval *ap = &s->approvals[s->napprovals++];
      ap->always = strcmp(tool, "always") == 0;
      if (!(ap->tool = strdup(json_string_value(n))))
        return agent_nomem(c);
    }
    if (grouped)
      continue;
    const char *m = json_string_value(item);
    if (!m || (strcmp(m, "always") != 0 && strcmp(m, "never") != 0))
      return agent_wrong_type(c, k, "\"always\" or \"never\"", item);
    struct agent_mcp_approval *ap = &s->approvals[s->napprovals++];
    ap->always = strcmp(m, "always") == 0;
    if (!(ap->tool = strdup(tool)))
      return agent_nomem(c);
  }
  return 0;
}

/* "env": an object of strings, as "KEY=VALUE" entries. */
static int parse_env(const struct agent_ctx *c, struct agent_mcp_server *s,
                     const char *key, json_t *v) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object of strings", v);
  if (json_object_size(v) > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  s->env = calloc(json_object_size(v) + 1, sizeof(*s->env));
  if (!s->env)
    return agent_nomem(c);
  size_t n = 0;
  const char *name;
  json_t *item;
  json_object_foreach(v, name, item) {
    if (!json_is_string(item))
      return agent_invalid(c, "\"%s.%.64s\" must be a string", key, name);
    if (name[0] == '\0' || strchr(name, '='))
      return agent_invalid(c, "\"%s\" has a bad variable name \"%.64s\"", key,
                           name);
    size_t len = strlen(name) + json_string_length(item) + 2;
    if (!(s->env[n] = malloc(len)))
      return agent_nomem(c);
    (void)snprintf(s->env[n++], len, "%s=%s", name, json_string_value(item));
  }
  return 0;
}

/* "headers": an object of strings, as "Name: value" lines. */
static int parse_headers(const struct agent_ctx *c, struct agent_mcp_server *s,
                         const char *key, json_t *v) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object of strings", v);
  if (json_object_size(v) > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  s->headers = calloc(json_object_size(v) + 1, sizeof(*s->headers));
  if (!s->headers)
    return agent_nomem(c);
  size_t n = 0;
  const char *name;
  json_t *item;
  json_object_foreach(v, name, item) {
    const char *val = json_string_value(item);
    if (!val)
      return agent_invalid(c, "\"%s.%.64s\" must be a string", key, name);
    size_t nl = strlen(name);
    if (nl == 0 ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"
                     "QRSTUVWXYZ0123456789!#$%&'*+-.^_`|~") != nl ||
        strpbrk(val, "\r\n"))
      return agent_invalid(c, "\"%s\" has a bad header \"%.64s\"", key, name);
    size_t len = nl + strlen(val) + 3;
    if (!(s->headers[n] = malloc(len)))
      return agent_nomem(c);
    (void)snprintf(s->headers[n++], len, "%s: %s", name, val);
  }
  return 0;
}

/* "url": http:// or https://, without spaces. */
static int parse_url(const struct agent_ctx *c, struct agent_mcp_server *s,
                     const char *key, json_t *v) {
  int r = get_str(c, key, v, &s->url);
  if (r < 0)
    return r;
  const char *u = s->url;
  size_t scheme = strncmp(u, "https://", 8) == 0  ? 8
                  : strncmp(u, "http://", 7) == 0 ? 7
                                                  : 0;
  bool ok = scheme > 0 && u[scheme] != '\0' && u[scheme] != '/';
  for (const char *p = u; ok && *p; p++)
    ok = (unsigned char)*p > ' ' && *p != 0x7f;
  if (!ok)
    return agent_invalid(c,
                         "\"%s\" must be an http:// or https:// URL without "
                         "spaces (got \"%.64s\")",
                         key, u);
  return 0;
}

/* Which keys each type of server takes (besides "type"). */
static const struct {
  const char *key;
  bool stdio, http;
} server_keys[] = {
    {"name", true, true},
    {"command", true, false},
    {"args", true, false},
    {"env", true, false},
    {"cwd", true, false},
    {"url", false, true},
    {"headers", false, true},
    {"allowed_tools", true, true},
    {"blocked_tools", true, true},
    {"require_approval", true, true},
    {"use_structured_content", true, true},
    {"client_session_timeout_seconds", true, true},
};

/* One key SUB (value V, path K) of a server S. */
static int parse_server_key(const struct agent_ctx *c,
                            struct agent_mcp_server *s, const char *sub,
                            const char *k, json_t *v, char **command,
                            char **cwd) {
  size_t i = 0;
  while (i < SBX_ARRAY_SIZE(server_keys) && strcmp(server_keys[i].key, sub))
    i++;
  if (i == SBX_ARRAY_SIZE(server_keys))
    return agent_invalid(c, "unknown key \"%s\"", k);
  if (s->type == AGENT_MCP_STDIO ? !server_keys[i].stdio : !server_keys[i].http)
    return agent_invalid(c, "\"%s\" is not a key of a \"%s\" server", k,
                         s->type == AGENT_MCP_STDIO ? "stdio"
                                                    : "streamable_http");
  if (strcmp(sub, "url") == 0)
    return parse_url(c, s, k, v);
  if (strcmp(sub, "headers") == 0)
    return parse_headers(c, s, k, v);
  if (strcmp(sub, "name") == 0)
    return get_str(c, k, v, &s->name);
  if (strcmp(sub, "command") == 0)
    return get_str(c, k, v, command);
  if (strcmp(sub, "args") == 0)
    return get_strv(c, k, v, 1, false, &s->argv);
  if (strcmp(sub, "env") == 0)
    return parse_env(c, s, k, v);
  if (strcmp(sub, "cwd") == 0)
    return get_str(c, k, v, cwd);
  if (strcmp(sub, "allowed_tools") == 0)
    return get_strv(c, k, v, 0, false, &s->allowed);
  if (strcmp(sub, "blocked_tools") == 0)
    return get_strv(c, k, v, 0, false, &s->blocked);
  if (strcmp(sub, "require_approval") == 0)
    return parse_require_approval(c, s, k, v);
  if (strcmp(sub, "use_structured_content") == 0) {
    if (!json_is_boolean(v))
      return agent_wrong_type(c, k, "a boolean", v);
    s->use_structured_content = json_is_true(v);
    return 0;
  }
  if (strcmp(sub, "client_session_timeout_seconds") == 0) {
    double t = json_number_value(v);
    if (!json_is_number(v) || !(t > 0 && t <= COMMAND_MAX_TIMEOUT_S))
      return agent_invalid(c,
                           "\"%s\" must be a number of seconds above 0 "
                           "and at most %d",
                           k, COMMAND_MAX_TIMEOUT_S);
    s->timeout_ms = (int64_t)(t * 1000);
    if (s->timeout_ms < 1)
      s->timeout_ms = 1;
    return 0;
  }
  return agent_invalid(c, "unknown key \"%s\"", k);
}

static int parse_server(const struct agent_ctx *c, struct agent_mcp_server *s,
                        const char *key, json_t *v) {
  char k[KEY_MAX];
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  json_t *type = json_object_get(v, "type");
  agent_key_path(k, "%s.type", key);
  static const char types[] = "\"stdio\" or \"streamable_http\"";
  if (!json_is_string(type))
    return agent_wrong_type(c, k, types, type);
  if (strcmp(json_string_value(type), "streamable_http") == 0)
    s->type = AGENT_MCP_STREAMABLE_HTTP;
  else if (strcmp(json_string_value(type), "stdio") == 0)
    s->type = AGENT_MCP_STDIO;
  else
    return agent_invalid(c, "\"%s\" must be %s (got \"%.64s\")", k, types,
                         json_string_value(type));
  s->timeout_ms = MCP_DEFAULT_TIMEOUT_S * 1000;
  _cleanup_free_ char *command = NULL;
  _cleanup_free_ char *cwd = NULL;
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    agent_key_path(k, "%s.%.64s", key, sub);
    if (strcmp(sub, "type") == 0 || json_is_null(item))
      continue;
    int r = parse_server_key(c, s, sub, k, item, &command, &cwd);
    if (r < 0)
      return r;
  }
  bool stdio = s->type == AGENT_MCP_STDIO;
  if (!s->name || (stdio ? !command : !s->url))
    return agent_invalid(c, "missing required key \"%s.%s\"", key,
                         s->name ? (stdio ? "command" : "url") : "name");
  if (strlen(s->name) > MCP_NAME_MAX)
    return agent_invalid(c, "\"%s.name\" is longer than %d bytes", key,
                         MCP_NAME_MAX);
  if (!stdio)
    return 0;
  if (!s->argv && !(s->argv = calloc(2, sizeof(*s->argv))))
    return agent_nomem(c);
  _cleanup_free_ char *dir = file_dir(c);
  if (!dir)
    return agent_fail(c, SBX_OK, errno ? errno : ENOMEM,
                      "cannot resolve the directory of the agent file: %s",
                      strerror(errno ? errno : ENOMEM));
  s->cwd = cwd ? from_dir(dir, cwd) : strdup(dir);
  s->argv[0] = program_path(s->cwd ? s->cwd : dir, command);
  if (!s->cwd || !s->argv[0])
    return agent_nomem(c);
  return 0;
}

int agent_parse_mcp_servers(const struct agent_ctx *c, struct agent *a,
                            const char *key, json_t *v) {
  char k[KEY_MAX];
  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of server objects", v);
  size_t n = json_array_size(v);
  if (n > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  if (n == 0)
    return 0;
  a->mcp_servers = calloc(n, sizeof(*a->mcp_servers));
  if (!a->mcp_servers)
    return agent_nomem(c);
  for (size_t i = 0; i < n; i++) {
    agent_key_path(k, "%s[%zu]", key, i);
    a->nmcp_servers++;
    int r = parse_server(c, &a->mcp_servers[i], k, json_array_get(v, i));
    if (r < 0)
      return r;
    for (size_t j = 0; j < i; j++)
      if (strcmp(a->mcp_servers[j].name, a->mcp_servers[i].name) == 0)
        return agent_invalid(c, "\"%s.name\" repeats \"%s\" of \"%s[%zu]\"", k,
                             a->mcp_servers[i].name, key, j);
  }
  return 0;
}

void agent_host_tools_free(struct agent *a) {
  for (size_t i = 0; i < a->ncommands; i++) {
    struct agent_command *t = &a->commands[i];
    free(t->name);
    free(t->description);
    json_decref(t->parameters);
    agent_strv_free(t->argv);
    free(t->dir);
  }
  free(a->commands);
  for (size_t i = 0; i < a->nmcp_servers; i++) {
    struct agent_mcp_server *s = &a->mcp_servers[i];
    free(s->name);
    agent_strv_free(s->argv);
    agent_strv_free(s->env);
    free(s->cwd);
    free(s->url);
    agent_strv_free(s->headers);
    agent_strv_free(s->allowed);
    agent_strv_free(s->blocked);
    for (size_t j = 0; j < s->napprovals; j++)
      free(s->approvals[j].tool);
    free(s->approvals);
  }
  free(a->mcp_servers);
}
