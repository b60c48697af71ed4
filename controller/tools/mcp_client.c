/* The MCP protocol over a connection (mcp_internal.h), and the set of an
 * agent's servers for one run: see mcp.h. */
#include "controller/tools/mcp.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/mcp_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define MCP_PROTOCOL_VERSION "2025-11-25"

/* The versions this client speaks, newest first. */
static const char *const protocol_versions[] = {
    MCP_PROTOCOL_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
};

/* One tool of a server, as the model sees it. */
struct mcp_tool {
  char *name;
  json_t *def; /* the function tool */
};

struct mcp_server {
  const struct agent_mcp_server *cfg;
  const struct mcp_transport *tp;
  void *conn;
  pthread_mutex_t mu; /* tools, which a refresh replaces */
  struct mcp_tool *tools;
  size_t ntools;
};

struct mcp_set {
  struct mcp_server *servers;
  size_t n;
};

/* The transport of each type of server. */
static const struct mcp_transport *const transports[] = {
    [AGENT_MCP_STDIO] = &mcp_stdio_transport,
    [AGENT_MCP_STREAMABLE_HTTP] = &mcp_http_transport,
};

int mcp_reply_result(const char *name, json_t *reply, json_t **result,
                     struct sbx_error *e) {
  json_t *err = json_object_get(reply, "error");
  if (err) {
    const char *m = json_string_value(json_object_get(err, "message"));
    return sbx_error_set(
        e, SBX_INTERNAL, EPROTO,
        "MCP server \"%s\" answered with error %lld: %.200s", name,
        (long long)json_integer_value(json_object_get(err, "code")),
        m ? m : "(no message)");
  }
  json_t *res = json_object_get(reply, "result");
  if (!json_is_object(res))
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "MCP server \"%s\" answered without a result", name);
  *result = json_incref(res);
  return 0;
}

/* ---- tools/list ------------------------------------------------------- */

static bool in_list(char **list, const char *name) {
  for (size_t i = 0; list && list[i]; i++)
    if (strcmp(list[i], name) == 0)
      return true;
  return false;
}

/* Whether S's filters let tool NAME through. */
static bool allowed(const struct agent_mcp_server *s, const char *name) {
  if (s->allowed && !in_list(s->allowed, name))
    return false;
  return !in_list(s->blocked, name);
}

/* The OpenAI function name rule: [A-Za-z0-9_-]{1,64}. */
static bool function_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 64)
    return false;
  return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                   "0123456789_-") == n;
}

/* The function tool for the MCP tool T (new, or NULL): its inputSchema as
 * the parameters, with "type" and "properties" as the API needs them. */
static json_t *function_def(json_t *t) {
  const char *name = json_string_value(json_object_get(t, "name"));
  const char *desc = json_string_value(json_object_get(t, "description"));
  json_t *in = json_object_get(t, "inputSchema");
  _cleanup_json_ json_t *params =
      json_is_object(in) ? json_deep_copy(in) : json_object();
  if (!params ||
      (!json_object_get(params, "type") &&
       json_object_set_new(params, "type", json_string("object")) < 0) ||
      (!json_object_get(params, "properties") &&
       json_object_set_new(params, "properties", json_object()) < 0))
    return NULL;
  return json_pack("{s:s, s:s, s:s, s:O, s:b}", "type", "function", "name",
                   name, "description", desc ? desc : "", "parameters", params,
                   "strict", 0);
}

static void tools_free(struct mcp_tool *tools, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(tools[i].name);
    json_decref(tools[i].def);
  }
  free(tools);
}

/* Adds the tools of one tools/list page PAGE to *TOOLS. */
static int add_page(struct mcp_server *sv, json_t *page, struct mcp_tool *tools,
                    size_t *n, struct sbx_error *e) {
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(page, "tools"), i, t) {
    const char *name = json_string_value(json_object_get(t, "name"));
    if (!name || !allowed(sv->cfg, name))
      continue;
    if (!function_name_ok(name)) {
      log_warn("mcp server \"%s\": tool \"%.64s\" is left out: its name is "
               "not a function name ([A-Za-z0-9_-]{1,64})",
               sv->cfg->name, name);
      continue;
    }
    for (size_t j = 0; j < *n; j++)
      if (strcmp(tools[j].name, name) == 0)
        return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                             "MCP server \"%s\" lists tool \"%s\" twice",
                             sv->cfg->name, name);
    if (*n == MCP_MAX_TOOLS)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "MCP server \"%s\" lists more than %d tools",
                           sv->cfg->name, MCP_MAX_TOOLS);
    tools[*n].name = strdup(name);
    tools[*n].def = function_def(t);
    if (!tools[(*n)++].def || !tools[*n - 1].name)
      return -ENOMEM;
  }
  return 0;
}

/* Lists SV's tools, every page, and keeps those its filters let through. */
static int list_tools(struct mcp_server *sv, struct sbx_error *e) {
  struct mcp_tool *tools = calloc(MCP_MAX_TOOLS, sizeof(*tools));
  size_t n = 0;
  if (!tools)
    return -ENOMEM;
  _cleanup_free_ char *cursor = NULL;
  int r = 0;
  for (int page = 0; r == 0; page++) {
    if (page == MCP_MAX_PAGES) {
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                        "MCP server \"%s\" lists its tools in more than %d "
                        "pages",
                        sv->cfg->name, MCP_MAX_PAGES);
      break;
    }
    _cleanup_json_ json_t *params =
        cursor ? json_pack("{s:s}", "cursor", cursor) : NULL;
    _cleanup_json_ json_t *res = NULL;
    r = sv->tp->request(sv->conn, "tools/list", params, sv->cfg->timeout_ms,
                        &res, e);
    if (r == 0)
      r = add_page(sv, res, tools, &n, e);
    const char *next = json_string_value(json_object_get(res, "nextCursor"));
    if (r < 0 || !next || !*next)
      break;
    free(cursor);
    if (!(cursor = strdup(next)))
      r = -ENOMEM;
  }
  if (r < 0) {
    tools_free(tools, n);
    return r;
  }
  pthread_mutex_lock(&sv->mu);
  struct mcp_tool *old = sv->tools;
  size_t nold = sv->ntools;
  sv->tools = tools;
  sv->ntools = n;
  pthread_mutex_unlock(&sv->mu);
  tools_free(old, nold);
  return 0;
}

/* ---- initialize ------------------------------------------------------- */

/* Starts SV's server and goes through the handshake: initialize,
 * notifications/initialized, then the first tools/list. */
static int server_start(struct mcp_server *sv, struct sbx_error *e) {
  sv->tp = transports[sv->cfg->type];
  int r = sv->tp->start(sv->cfg, &sv->conn, e);
  if (r < 0)
    return r;
  _cleanup_json_ json_t *params = json_pack(
      "{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION,
      "capabilities", "clientInfo", "name", "sbx", "version", SBX_VERSION);
  _cleanup_json_ json_t *res = NULL;
  if (!params)
    return -ENOMEM;
  r = sv->tp->request(sv->conn, "initialize", params, sv->cfg->timeout_ms, &res,
                      e);
  if (r < 0)
    return r;
  const char *v = json_string_value(json_object_get(res, "protocolVersion"));
  bool known = false;
  for (size_t i = 0; v && i < SBX_ARRAY_SIZE(protocol_versions); i++)
    known = known || strcmp(v, protocol_versions[i]) == 0;
  if (!known)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EPROTONOSUPPORT,
                         "MCP server \"%s\" speaks protocol version \"%.32s\", "
                         "which sbx does not (it speaks %s)",
                         sv->cfg->name, v ? v : "(none)", MCP_PROTOCOL_VERSION);
  if (!json_is_object(
          json_object_get(json_object_get(res, "capabilities"), "tools")))
    log_warn("mcp server \"%s\" does not say it has tools", sv->cfg->name);
  r = sv->tp->notify(sv->conn, "notifications/initialized", NULL,
                     sv->cfg->timeout_ms);
  if (r < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, -r,
                         "MCP server \"%s\": cannot send "
                         "notifications/initialized: %s",
                         sv->cfg->name, strerror(-r));
  /* A list_changed sent while it started up is answered by this listing. */
  (void)sv->tp->take_list_changed(sv->conn);
  return list_tools(sv, e);
}

/* ---- the set ---------------------------------------------------------- */

/* The server and index of tool NAME (SV's lock held on success), or
 * NULL. */
static struct mcp_server *find_tool(const struct mcp_set *s, const char *name,
                                    size_t *idx) {
  for (size_t i = 0; s && i < s->n; i++) {
    struct mcp_server *sv = &s->servers[i];
    pthread_mutex_lock(&sv->mu);
    for (size_t j = 0; j < sv->ntools; j++)
      if (strcmp(sv->tools[j].name, name) == 0) {
        *idx = j;
        return sv;
      }
    pthread_mutex_unlock(&sv->mu);
  }
  return NULL;
}

/* Refuses a tool name that two servers list, as the SDK does. */
static int check_unique(const struct mcp_set *s, struct sbx_error *e) {
  for (size_t i = 0; i < s->n; i++)
    for (size_t j = 0; j < s->servers[i].ntools; j++)
      for (size_t k = 0; k < i; k++)
        for (size_t m = 0; m < s->servers[k].ntools; m++)
          if (strcmp(s->servers[i].tools[j].name,
                     s->servers[k].tools[m].name) == 0)
            return sbx_error_set(
                e, SBX_INVALID_ARGUMENT, EINVAL,
                "Duplicate tool names found across MCP servers: %s (\"%s\" "
                "and \"%s\"); allowed_tools or blocked_tools can leave one "
                "out",
                s->servers[i].tools[j].name, s->servers[k].cfg->name,
                s->servers[i].cfg->name);
  return 0;
}

int mcp_set_start(const struct agent *a, struct mcp_set **out,
                  struct sbx_error *e) {
  struct mcp_set *s = calloc(1, sizeof(*s));
  if (!s || !(s->servers = calloc(a->nmcp_servers, sizeof(*s->servers)))) {
    free(s);
    return -ENOMEM;
  }
  int r = 0;
  for (size_t i = 0; i < a->nmcp_servers && r == 0; i++) {
    struct mcp_server *sv = &s->servers[s->n++];
    sv->cfg = &a->mcp_servers[i];
    pthread_mutex_init(&sv->mu, NULL);
    r = server_start(sv, e);
    if (r < 0 && e && !strstr(e->msg, sv->cfg->name)) {
      char msg[SBX_ERROR_MSG_MAX];
      (void)snprintf(msg, sizeof(msg), "%s", e->msg);
      (void)sbx_error_set(e, e->code, e->err, "MCP server \"%s\": %s",
                          sv->cfg->name, msg);
    }
  }
  if (r == 0)
    r = check_unique(s, e);
  if (r < 0) {
    mcp_set_free(s);
    return r;
  }
  *out = s;
  return 0;
}

bool mcp_set_refresh(struct mcp_set *s) {
  bool changed = false;
  for (size_t i = 0; s && i < s->n; i++) {
    struct mcp_server *sv = &s->servers[i];
    if (!sv->tp->take_list_changed(sv->conn))
      continue;
    struct sbx_error e = {0};
    if (list_tools(sv, &e) < 0)
      log_warn("mcp server \"%s\": listing its tools again: %s", sv->cfg->name,
               e.msg);
    else
      changed = true;
  }
  return changed;
}

int mcp_set_definitions(struct mcp_set *s, json_t *tools) {
  for (size_t i = 0; s && i < s->n; i++) {
    struct mcp_server *sv = &s->servers[i];
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    for (size_t j = 0; j < sv->ntools && r == 0; j++)
      r = json_array_append(tools, sv->tools[j].def);
    pthread_mutex_unlock(&sv->mu);
    if (r < 0)
      return -ENOMEM;
  }
  return 0;
}

bool mcp_set_has(const struct mcp_set *s, const char *name) {
  size_t idx;
  struct mcp_server *sv = find_tool(s, name, &idx);
  if (sv)
    pthread_mutex_unlock(&sv->mu);
  return sv != NULL;
}

bool mcp_set_needs_approval(const struct mcp_set *s, const char *name) {
  size_t idx;
  struct mcp_server *sv = find_tool(s, name, &idx);
  if (!sv)
    return false;
  pthread_mutex_unlock(&sv->mu);
  for (size_t i = 0; i < sv->cfg->napprovals; i++)
    if (strcmp(sv->cfg->approvals[i].tool, name) == 0)
      return sv->cfg->approvals[i].always;
  return sv->cfg->approval_always;
}

struct mcp_set *mcp_set_free(struct mcp_set *s) {
  if (!s)
    return NULL;
  for (size_t i = 0; i < s->n; i++) {
    struct mcp_server *sv = &s->servers[i];
    if (sv->tp)
      sv->tp->free(sv->conn);
    tools_free(sv->tools, sv->ntools);
    pthread_mutex_destroy(&sv->mu);
  }
  free(s->servers);
  free(s);
  return NULL;
}

/* ---- tools/call ------------------------------------------------------- */

/* One content block of a result as a Responses input part (new), as the
 * Python SDK maps them: text as input_text, an image as an input_image
 * data URL, anything else as input_text holding the block's JSON. */
static json_t *content_part(json_t *c) {
  const char *type = json_string_value(json_object_get(c, "type"));
  const char *text = json_string_value(json_object_get(c, "text"));
  const char *data = json_string_value(json_object_get(c, "data"));
  const char *mime = json_string_value(json_object_get(c, "mimeType"));
  if (type && strcmp(type, "text") == 0 && text)
    return json_pack("{s:s, s:s}", "type", "input_text", "text", text);
  if (type && strcmp(type, "image") == 0 && data) {
    _cleanup_buf_ struct sbx_buf b;
    sbx_buf_init(&b, 2 * MCP_MAX_MESSAGE);
    if (sbx_buf_printf(&b, "data:%s;base64,%s", mime ? mime : "image/png",
                       data) < 0)
      return NULL;
    return json_pack("{s:s, s:s}", "type", "input_image", "image_url", b.data);
  }
  _cleanup_free_ char *j = json_dumps(c, JSON_COMPACT | JSON_ENCODE_ANY);
  return j ? json_pack("{s:s, s:s}", "type", "input_text", "text", j) : NULL;
}

/* The tool output (new) of the tools/call result RES of server SV. */
static json_t *result_output(const struct mcp_server *sv, json_t *res) {
  json_t *sc = json_object_get(res, "structuredContent");
  if (sv->cfg->use_structured_content && json_is_object(sc) &&
      !json_is_true(json_object_get(res, "isError"))) {
    _cleanup_free_ char *j = json_dumps(sc, JSON_COMPACT);
    return j ? json_string(j) : NULL;
  }
  json_t *content = json_object_get(res, "content");
  _cleanup_json_ json_t *parts = json_array();
  size_t i;
  json_t *c;
  json_array_foreach(content, i, c) {
    if (json_array_append_new(parts, content_part(c)) < 0)
      return NULL;
  }
  json_t *only = json_array_size(parts) == 1 ? json_array_get(parts, 0) : NULL;
  const char *t = json_string_value(json_object_get(only, "type"));
  if (t && strcmp(t, "input_text") == 0)
    return json_incref(json_object_get(only, "text"));
  if (json_array_size(parts) == 0)
    return json_string("");
  return TAKE_PTR(parts);
}

int mcp_set_call(struct mcp_set *s, const char *name, const char *args,
                 json_t **output, struct tool_ctx *ctx) {
  size_t idx;
  struct mcp_server *sv = find_tool(s, name, &idx);
  if (!sv)
    return -ENOENT;
  pthread_mutex_unlock(&sv->mu);
  if (ctx) {
    sbx_error_clear(&ctx->failure);
    trace_set_str(ctx->span, "sbx.mcp.server", sv->cfg->name);
  }
  json_error_t je;
  _cleanup_json_ json_t *a = args && *args
                                 ? json_loads(args, JSON_REJECT_DUPLICATES, &je)
                                 : json_object();
  if (!json_is_object(a)) {
    *output = tools_host_failure(ctx, tools_args_error_prefix,
                                 "Invalid JSON input for tool %s: %s", name,
                                 a ? "expected a JSON object" : je.text);
    return *output ? 0 : -ENOMEM;
  }
  _cleanup_json_ json_t *params =
      json_pack("{s:s, s:O}", "name", name, "arguments", a);
  _cleanup_json_ json_t *res = NULL;
  struct sbx_error e = {0};
  int r = params ? sv->tp->request(sv->conn, "tools/call", params,
                                   sv->cfg->timeout_ms, &res, &e)
                 : -ENOMEM;
  if (r == -ENOMEM)
    return r;
  if (r < 0) {
    *output = tools_host_failure(ctx, tools_error_prefix,
                                 "Error invoking MCP tool %s on server "
                                 "'%s': %s",
                                 name, sv->cfg->name, e.msg);
    return *output ? 0 : -ENOMEM;
  }
  *output = result_output(sv, res);
  if (*output && json_is_true(json_object_get(res, "isError")) && ctx)
    (void)sbx_error_set(&ctx->failure, SBX_INTERNAL, EIO,
                        "MCP tool %s on server '%s' answered with isError",
                        name, sv->cfg->name);
  return *output ? 0 : -ENOMEM;
}
