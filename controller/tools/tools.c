#include "controller/tools/tools.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/output.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/encode.h"
#include "shared/log.h"
#include "shared/utf8.h"

const char tools_generic_error[] =
    "An error occurred while running the tool. Please try again.";

#define COLLECT_MAX (1u << 20) /* output kept per call, like the SDK's */
#define YIELD_MIN_MS 250
#define YIELD_MAX_MS 30000
#define EMPTY_POLL_MIN_MS 5000

/* One tool invocation: the sandbox.* span around it and how it ended. */
struct op {
  struct trace_span *sp;     /* may be NULL */
  struct sbx_error *failure; /* never NULL; the first failure is kept */
};

/* Records that the tool failed (its output tells the model why) and
 * returns OUT. */
__attribute__((format(printf, 3, 4))) static json_t *
op_fail(struct op *op, json_t *out, const char *fmt, ...) {
  if (op->failure->code == SBX_OK) {
    va_list ap;
    va_start(ap, fmt);
    (void)sbx_error_setv(op->failure, SBX_INTERNAL, EIO, fmt, ap);
    va_end(ap);
  }
  return out;
}

static json_t *op_invalid(struct op *op) {
  return op_fail(op, json_string(tools_generic_error), "invalid arguments");
}

void toolbox_init(struct toolbox *t, struct sandbox *sb, const char *cwd,
                  const char *run_as, bool text_images) {
  memset(t, 0, sizeof(*t));
  t->sb = sb;
  t->cwd = cwd && *cwd ? cwd : NULL;
  t->run_as = run_as && *run_as ? run_as : NULL;
  t->text_images = text_images;
  t->next_id = 1;
  pthread_mutex_init(&t->mu, NULL);
}

void toolbox_fini(struct toolbox *t) {
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nsessions; i++) {
    struct sbx_error e = {0};
    (void)sbx_exec_signal(t->sb->client, t->sessions[i].exec_id, SIGKILL, true,
                          &e);
  }
  t->nsessions = 0;
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_destroy(&t->mu);
}

void toolbox_detach(struct toolbox *t) {
  pthread_mutex_lock(&t->mu);
  t->nsessions = 0;
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_destroy(&t->mu);
}

json_t *toolbox_save(struct toolbox *t) {
  json_t *arr = json_array();
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; arr && i < t->nsessions; i++) {
    const struct tool_exec_session *s = &t->sessions[i];
    json_array_append_new(arr,
                          json_pack("{s:i, s:I, s:I, s:b}", "id", s->id,
                                    "exec_id", (json_int_t)s->exec_id, "offset",
                                    (json_int_t)s->offset, "tty", s->tty));
  }
  int next = t->next_id;
  pthread_mutex_unlock(&t->mu);
  return json_pack("{s:i, s:o}", "next_id", next, "sessions", arr);
}

void toolbox_load(struct toolbox *t, json_t *j) {
  pthread_mutex_lock(&t->mu);
  json_t *n = json_object_get(j, "next_id");
  if (json_is_integer(n) && json_integer_value(n) > 0 &&
      json_integer_value(n) < 1000000)
    t->next_id = (int)json_integer_value(n);
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(j, "sessions"), i, x) {
    if (t->nsessions == TOOLS_MAX_EXEC_SESSIONS)
      break;
    json_t *id = json_object_get(x, "id"), *ex = json_object_get(x, "exec_id"),
           *off = json_object_get(x, "offset");
    if (!json_is_integer(id) || !json_is_integer(ex) || !json_is_integer(off))
      continue;
    struct tool_exec_session *s = &t->sessions[t->nsessions++];
    s->id = (int)json_integer_value(id);
    s->exec_id = (uint64_t)json_integer_value(ex);
    s->offset = (uint64_t)json_integer_value(off);
    s->tty = json_is_true(json_object_get(x, "tty"));
    s->last_used = sbx_now_ns();
  }
  pthread_mutex_unlock(&t->mu);
}

/* ---- schemas ----------------------------------------------------------- */

static json_t *nullable(const char *type, const char *description) {
  return json_pack("{s:s, s:[{s:s}, {s:s}]}", "description", description,
                   "anyOf", "type", type, "type", "null");
}

static json_t *function_tool(const char *name, const char *description,
                             json_t *parameters, bool strict) {
  return json_pack("{s:s, s:s, s:s, s:o, s:b}", "type", "function", "name",
                   name, "description", description, "parameters", parameters,
                   "strict", strict);
}

static json_t *strict_object(json_t *props, const char *const *required) {
  json_t *req = json_array();
  for (size_t i = 0; required[i]; i++)
    json_array_append_new(req, json_string(required[i]));
  return json_pack("{s:s, s:o, s:o, s:b, s:s}", "type", "object", "properties",
                   props, "required", req, "additionalProperties", 0, "$schema",
                   "http://json-schema.org/draft-07/schema#");
}

json_t *tools_definitions(bool filesystem, bool shell, bool hosted_patch) {
  json_t *tools = json_array();
  if (!tools)
    return NULL;
  if (filesystem) {
    static const char *const vreq[] = {"path", NULL};
    json_t *vp = json_pack(
        "{s:{s:s, s:s}}", "path", "type", "string", "description",
        "Path to an image file in the sandbox workspace or an explicitly "
        "granted sandbox path");
    json_array_append_new(
        tools,
        function_tool("view_image",
                      "Returns an image output from a path in the sandbox "
                      "workspace or an explicitly granted sandbox path.",
                      strict_object(vp, vreq), true));
    if (hosted_patch) {
      json_array_append_new(tools, json_pack("{s:s}", "type", "apply_patch"));
    } else {
      json_t *pp = json_pack(
          "{s:{s:s, s:s}, s:{s:s}, s:{s:s, s:{s:s}}, s:{s:s}, s:{s:s, "
          "s:[s,s,s]},"
          " s:{s:s}, s:{s:s}, s:{s:s}}",
          "patch", "type", "string", "description",
          "A freeform apply_patch payload wrapped in *** Begin Patch and *** "
          "End Patch.",
          "operation", "type", "object", "operations", "type", "array", "items",
          "type", "object", "command", "type", "array", "type", "type",
          "string", "enum", "create_file", "update_file", "delete_file", "path",
          "type", "string", "diff", "type", "string", "moveTo", "type",
          "string");
      json_t *params =
          json_pack("{s:s, s:o, s:[], s:b}", "type", "object", "properties", pp,
                    "required", "additionalProperties", 1);
      json_array_append_new(
          tools,
          function_tool("apply_patch",
                        "Applies a create, update, move, or delete file patch "
                        "in the sandbox workspace. Accepts a freeform "
                        "apply_patch payload or structured apply_patch "
                        "operations.",
                        params, false));
    }
  }
  if (shell) {
    static const char *const ereq[] = {
        "cmd",           "workdir",           "shell", "login", "tty",
        "yield_time_ms", "max_output_tokens", NULL};
    json_t *ep = json_object();
    json_object_set_new(ep, "cmd",
                        json_pack("{s:s, s:s}", "type", "string", "description",
                                  "Shell command to execute."));
    json_object_set_new(
        ep, "workdir",
        nullable("string", "Optional working directory to run the command "
                           "in; defaults to the turn cwd."));
    json_object_set_new(ep, "shell",
                        nullable("string", "Shell binary to launch. Defaults "
                                           "to the user's default shell."));
    json_object_set_new(ep, "login",
                        nullable("boolean", "Whether to run the shell with "
                                            "-l/-i semantics. Defaults to "
                                            "true."));
    json_object_set_new(
        ep, "tty",
        nullable("boolean",
                 "Whether to allocate a TTY for the command. Defaults to "
                 "false (plain pipes); set to true to open a PTY and access "
                 "TTY process."));
    json_object_set_new(ep, "yield_time_ms",
                        nullable("number", "How long to wait (in "
                                           "milliseconds) for output before "
                                           "yielding."));
    json_object_set_new(ep, "max_output_tokens",
                        nullable("number", "Maximum number of tokens to "
                                           "return. Excess output will be "
                                           "truncated."));
    json_array_append_new(
        tools, function_tool("exec_command",
                             "Runs a command in a PTY, returning output or a "
                             "session ID for ongoing interaction.",
                             strict_object(ep, ereq), true));
    static const char *const wreq[] = {"session_id", "chars", "yield_time_ms",
                                       "max_output_tokens", NULL};
    json_t *wp = json_object();
    json_object_set_new(wp, "session_id",
                        json_pack("{s:s, s:s}", "type", "number", "description",
                                  "Identifier of the running unified exec "
                                  "session."));
    json_object_set_new(wp, "chars",
                        nullable("string", "Bytes to write to stdin (may be "
                                           "empty to poll)."));
    json_object_set_new(wp, "yield_time_ms",
                        nullable("number", "How long to wait (in "
                                           "milliseconds) for output before "
                                           "yielding."));
    json_object_set_new(wp, "max_output_tokens",
                        nullable("number", "Maximum number of tokens to "
                                           "return. Excess output will be "
                                           "truncated."));
    json_array_append_new(
        tools, function_tool("write_stdin",
                             "Writes characters to an existing unified exec "
                             "session and returns recent output.",
                             strict_object(wp, wreq), true));
  }
  return tools;
}

/* ---- argument helpers --------------------------------------------------- */

/* Reads an optional integer ≥ MIN; absent or null gives DEF. False when the
 * value is present but not a whole number ≥ MIN. */
static bool opt_int(json_t *args, const char *key, int64_t min, int64_t def,
                    int64_t *out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return true;
  }
  double d;
  if (json_is_integer(v))
    d = (double)json_integer_value(v);
  else if (json_is_real(v))
    d = json_real_value(v);
  else
    return false;
  if (d != (double)(int64_t)d || d < (double)min || d > 9.0e15)
    return false;
  *out = (int64_t)d;
  return true;
}

static bool opt_bool(json_t *args, const char *key, bool def, bool *out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return true;
  }
  if (!json_is_boolean(v))
    return false;
  *out = json_is_true(v);
  return true;
}

static bool opt_str(json_t *args, const char *key, const char **out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = NULL;
    return true;
  }
  if (!json_is_string(v))
    return false;
  *out = json_string_value(v);
  return true;
}

/* Anchors a model path to the run's cwd as the SDK does: relative paths
 * join the cwd, empty is the cwd, absolute stays. New string. */
static char *anchor(const struct toolbox *t, const char *p) {
  if (!p)
    p = "";
  if (!t->cwd || p[0] == '/')
    return strdup(p);
  if (!*p)
    return strdup(t->cwd);
  size_t a = strlen(t->cwd), b = strlen(p);
  char *s = malloc(a + b + 2);
  if (!s)
    return NULL;
  memcpy(s, t->cwd, a);
  s[a] = '/';
  memcpy(s + a + 1, p, b + 1);
  return s;
}

static json_t *text_output(struct sbx_buf *b) {
  return json_stringn(b->data ? b->data : "", b->len);
}

/* ---- exec -------------------------------------------------------------- */

struct collected {
  struct sbx_buf text;
  uint64_t dropped; /* bytes the retention or our cap lost */
  bool exited;
  int code;
};

/* The SDK's exit code for a process that ended by signal SIG. */
static int signal_code(bool tty, int sig) {
  if (tty)
    return 128 + sig;
  return sig == SIGINT ? 130 : 1;
}

/* Adds the read X to C and moves *OFFSET past it; whether the process has
 * exited and its output is drained. */
static int absorb(const Sbx__V1__ExecReadReply *x, bool tty, uint64_t *offset,
                  struct collected *c, bool *done) {
  c->dropped += x->gap;
  size_t n = x->data.len;
  const uint8_t *p = x->data.data;
  if (n > COLLECT_MAX) {
    c->dropped += n - COLLECT_MAX;
    p += n - COLLECT_MAX;
    n = COLLECT_MAX;
  }
  if (c->text.len + n > COLLECT_MAX) {
    size_t drop = c->text.len + n - COLLECT_MAX;
    c->dropped += drop;
    sbx_buf_consume(&c->text, drop);
  }
  *offset = x->next_offset;
  *done = x->exited && x->eof;
  if (*done) {
    c->exited = true;
    c->code = x->signal ? signal_code(tty, x->signal) : x->exit_code;
  }
  return sbx_buf_append(&c->text, p, n);
}

/* Reads EXEC_ID's output from *OFFSET until the process has exited and its
 * output is drained, or DEADLINE (monotonic ms) passes. */
static int collect(struct toolbox *t, uint64_t exec_id, bool tty,
                   uint64_t *offset, uint64_t deadline, struct collected *c,
                   struct sbx_error *e) {
  for (;;) {
    uint64_t now = sbx_now_ms();
    uint64_t wait = deadline > now ? deadline - now : 0;
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = exec_id;
    rd.stream = SBX__V1__STREAM__STDOUT;
    rd.offset = *offset;
    rd.max_bytes = COLLECT_MAX;
    rd.wait_ms = (uint32_t)wait;
    rd.until_exit = true;
    Sbx__V1__Response *r = NULL;
    int ret = sbx_exec_read(t->sb->client, &rd, &r, e);
    if (ret < 0)
      return ret;
    bool done;
    ret = absorb(r->exec_read, tty, offset, c, &done);
    sbx_client_reply_free(r);
    if (ret < 0)
      return ret;
    if (done || wait == 0)
      return 0;
  }
}

/* Formats the tool text for C into OUT. */
static int format_result(struct collected *c, uint64_t start_ns, bool running,
                         int session_id, int64_t max_tokens,
                         struct sbx_buf *out) {
  _cleanup_buf_ struct sbx_buf text;
  sbx_buf_init(&text, COLLECT_MAX * 4 + 256);
  int r = 0;
  if (c->dropped)
    r = sbx_buf_printf(
        &text, "[...%llu characters truncated from process output...]\n",
        (unsigned long long)c->dropped);
  if (r == 0)
    r = sbx_utf8_sanitize(c->text.data ? c->text.data : "", c->text.len, &text);
  if (r < 0)
    return r;
  struct output_exec x = {
      .wall_ns = sbx_now_ns() - start_ns,
      .running = running,
      .session_id = session_id,
      .exit_code = c->code,
      .text = text.data ? text.data : "",
      .len = text.len,
  };
  return output_exec_response(&x, max_tokens, out);
}

/* Remembers a running process; prunes the least recently used when full. */
static int add_session(struct toolbox *t, uint64_t exec_id, uint64_t offset,
                       bool tty) {
  pthread_mutex_lock(&t->mu);
  if (t->nsessions == TOOLS_MAX_EXEC_SESSIONS) {
    size_t lru = 0;
    for (size_t i = 1; i < t->nsessions; i++)
      if (t->sessions[i].last_used < t->sessions[lru].last_used)
        lru = i;
    struct sbx_error e = {0};
    log_warn("too many running sessions; killing session %d",
             t->sessions[lru].id);
    (void)sbx_exec_signal(t->sb->client, t->sessions[lru].exec_id, SIGKILL,
                          true, &e);
    t->sessions[lru] = t->sessions[--t->nsessions];
  }
  struct tool_exec_session *s = &t->sessions[t->nsessions++];
  s->id = t->next_id++;
  s->exec_id = exec_id;
  s->offset = offset;
  s->tty = tty;
  s->last_used = sbx_now_ns();
  int id = s->id;
  pthread_mutex_unlock(&t->mu);
  return id;
}

static void release_exec(struct toolbox *t, uint64_t exec_id) {
  struct sbx_error e = {0};
  (void)sbx_exec_release(t->sb->client, exec_id, &e);
}

static int64_t clamp_yield(int64_t ms) {
  if (ms < YIELD_MIN_MS)
    return YIELD_MIN_MS;
  if (ms > YIELD_MAX_MS)
    return YIELD_MAX_MS;
  return ms;
}

/* The attributes of an exec or write_stdin result. */
static void trace_exec_result(struct op *op, const struct collected *c,
                              int session_id) {
  trace_set_bool(op->sp, "sandbox.exec.running", !c->exited);
  if (c->exited)
    trace_set_int(op->sp, "sandbox.exec.exit_code", c->code);
  else
    trace_set_int(op->sp, "sandbox.exec.session_id", session_id);
  trace_set_int(op->sp, "sandbox.exec.output_bytes",
                (int64_t)(c->text.len + c->dropped));
}

static json_t *exec_command(struct toolbox *t, json_t *args, struct op *op) {
  const char *cmd, *workdir, *shell;
  bool login, tty;
  int64_t yield, max_tokens;
  if (!opt_str(args, "cmd", &cmd) || !cmd || !*cmd ||
      !opt_str(args, "workdir", &workdir) || !opt_str(args, "shell", &shell) ||
      !opt_bool(args, "login", true, &login) ||
      !opt_bool(args, "tty", false, &tty) ||
      !opt_int(args, "yield_time_ms", 0, 10000, &yield) ||
      !opt_int(args, "max_output_tokens", 1, OUTPUT_TOKENS_UNLIMITED,
               &max_tokens))
    return op_invalid(op);
  trace_set_str(op->sp, "sandbox.exec.command", cmd);
  trace_set_bool(op->sp, "sandbox.exec.tty", tty);
  uint64_t start = sbx_now_ns();
  _cleanup_free_ char *cwd = anchor(t, workdir);
  if (!cwd)
    return NULL;
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = (char *)cmd;
  st.login = login;
  st.shell = (char *)(shell && *shell ? shell : "");
  st.cwd = cwd;
  st.tty = tty;
  st.stderr_to_stdout = !tty;
  st.run_as = (char *)(t->run_as ? t->run_as : "");
  _cleanup_free_ Sbx__V1__EnvVar *vars = calloc(t->sb->nenv + 1, sizeof(*vars));
  _cleanup_free_ Sbx__V1__EnvVar **pvars =
      calloc(t->sb->nenv + 1, sizeof(*pvars));
  if (!vars || !pvars)
    return NULL;
  for (size_t i = 0; i < t->sb->nenv; i++) {
    sbx__v1__env_var__init(&vars[i]);
    char *eq = strchr(t->sb->env[i], '=');
    *eq = '\0'; /* restored below */
    vars[i].name = t->sb->env[i];
    vars[i].value = eq + 1;
    pvars[i] = &vars[i];
  }
  st.env = pvars;
  st.n_env = t->sb->nenv;
  /* The start waits for a quick command's exit and brings its output. */
  uint64_t deadline = start / 1000000 + (uint64_t)clamp_yield(yield);
  uint64_t now = sbx_now_ms();
  st.wait_ms = deadline > now ? (uint32_t)(deadline - now) : 1;
  st.max_bytes = COLLECT_MAX;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  int ret = sbx_exec_start(t->sb->client, &st, &r, &e);
  for (size_t i = 0; i < t->sb->nenv; i++)
    vars[i].name[strlen(vars[i].name)] = '=';
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, COLLECT_MAX * 4 + 4096);
  struct collected c = {0};
  sbx_buf_init(&c.text, COLLECT_MAX + 1);
  if (ret < 0) {
    /* A spawn error is the output of a process that exited with 1. */
    c.exited = true;
    c.code = 1;
    (void)sbx_buf_printf(&c.text, "%s\n", e.msg);
    (void)format_result(&c, start, false, 0, max_tokens, &out);
    sbx_buf_free(&c.text);
    return op_fail(op, text_output(&out), "cannot start the command: %s",
                   e.msg);
  }
  uint64_t exec_id = r->exec_start->exec_id;
  uint64_t offset = 0;
  bool done = false;
  if (r->exec_start->output) /* absent from a sandboxd that did not wait */
    ret = absorb(r->exec_start->output, tty, &offset, &c, &done);
  sbx_client_reply_free(r);
  if (ret == 0 && !done && sbx_now_ms() < deadline)
    ret = collect(t, exec_id, tty, &offset, deadline, &c, &e);
  if (ret < 0) {
    log_warn("exec_command: %s", e.msg);
    sbx_buf_free(&c.text);
    return op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  int sid = 0;
  if (c.exited)
    release_exec(t, exec_id);
  else
    sid = add_session(t, exec_id, offset, tty);
  trace_exec_result(op, &c, sid);
  ret = format_result(&c, start, !c.exited, sid, max_tokens, &out);
  sbx_buf_free(&c.text);
  if (ret < 0)
    return NULL;
  return text_output(&out);
}

static json_t *write_stdin(struct toolbox *t, json_t *args, struct op *op) {
  int64_t sid, yield, max_tokens;
  const char *chars;
  json_t *sv = json_object_get(args, "session_id");
  if (!sv || json_is_null(sv) || !opt_int(args, "session_id", 0, 0, &sid) ||
      !opt_str(args, "chars", &chars) ||
      !opt_int(args, "yield_time_ms", 0, 250, &yield) ||
      !opt_int(args, "max_output_tokens", 1, OUTPUT_TOKENS_UNLIMITED,
               &max_tokens))
    return op_invalid(op);
  if (!chars)
    chars = "";
  trace_set_int(op->sp, "sandbox.exec.session_id", sid);
  trace_set_int(op->sp, "sandbox.write_stdin.bytes", (int64_t)strlen(chars));
  uint64_t start = sbx_now_ns();
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, COLLECT_MAX * 4 + 4096);
  struct collected c = {0};
  sbx_buf_init(&c.text, COLLECT_MAX + 1);

  pthread_mutex_lock(&t->mu);
  struct tool_exec_session s = {0};
  size_t idx = SIZE_MAX;
  for (size_t i = 0; i < t->nsessions; i++)
    if (t->sessions[i].id == sid) {
      idx = i;
      t->sessions[i].last_used = sbx_now_ns();
      s = t->sessions[i];
    }
  pthread_mutex_unlock(&t->mu);
  if (idx == SIZE_MAX) {
    c.exited = true;
    c.code = 1;
    (void)sbx_buf_printf(&c.text, "write_stdin failed: session not found: %lld",
                         (long long)sid);
    (void)format_result(&c, sbx_now_ns(), false, 0, max_tokens, &out);
    sbx_buf_free(&c.text);
    return op_fail(op, text_output(&out), "session not found: %lld",
                   (long long)sid);
  }
  struct sbx_error e = {0};
  int ret = 0;
  size_t n = strlen(chars);
  if (s.tty) {
    if (n)
      ret = sbx_exec_write(t->sb->client, s.exec_id, chars, n, false, &e);
  } else {
    /* Without a terminal, Ctrl-C becomes SIGINT and is not written. */
    _cleanup_free_ char *rest = malloc(n + 1);
    if (!rest)
      return NULL;
    size_t m = 0;
    bool intr = false;
    for (size_t i = 0; i < n; i++) {
      if (chars[i] == '\x03')
        intr = true;
      else
        rest[m++] = chars[i];
    }
    if (intr)
      ret = sbx_exec_signal(t->sb->client, s.exec_id, SIGINT, true, &e);
    if (ret == 0 && m)
      ret = sbx_exec_write(t->sb->client, s.exec_id, rest, m, false, &e);
  }
  if (ret < 0 && e.code != SBX_CONFLICT) {
    log_warn("write_stdin: %s", e.msg);
    sbx_buf_free(&c.text);
    return op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  int64_t wait = clamp_yield(yield);
  if (n == 0 && wait < EMPTY_POLL_MIN_MS)
    wait = EMPTY_POLL_MIN_MS;
  uint64_t offset = s.offset;
  ret = collect(t, s.exec_id, s.tty, &offset, start / 1000000 + (uint64_t)wait,
                &c, &e);
  if (ret < 0) {
    log_warn("write_stdin: %s", e.msg);
    sbx_buf_free(&c.text);
    return op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nsessions; i++)
    if (t->sessions[i].id == sid) {
      if (c.exited)
        t->sessions[i] = t->sessions[--t->nsessions];
      else
        t->sessions[i].offset = offset;
      break;
    }
  pthread_mutex_unlock(&t->mu);
  if (c.exited)
    release_exec(t, s.exec_id);
  trace_exec_result(op, &c, (int)sid);
  ret = format_result(&c, start, !c.exited, (int)sid, max_tokens, &out);
  sbx_buf_free(&c.text);
  if (ret < 0)
    return NULL;
  return text_output(&out);
}

/* ---- view_image -------------------------------------------------------- */

static const char *sniff_image(const uint8_t *p, size_t n, const char *path) {
  if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
    return "image/png";
  if (n >= 3 && memcmp(p, "\xff\xd8\xff", 3) == 0)
    return "image/jpeg";
  if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
    return "image/gif";
  if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
    return "image/webp";
  if (n >= 2 && memcmp(p, "BM", 2) == 0)
    return "image/bmp";
  if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0 ||
                 memcmp(p, "II+\0", 4) == 0 || memcmp(p, "MM\0+", 4) == 0))
    return "image/tiff";
  size_t pl = strlen(path);
  if ((pl >= 4 && strcmp(path + pl - 4, ".svg") == 0) ||
      (pl >= 5 && strcmp(path + pl - 5, ".svgz") == 0))
    return "image/svg+xml";
  /* SVG by content: the first 512 bytes, trimmed and lowercased. */
  char head[513];
  size_t i = 0, k = 0;
  while (i < n && i < 512 &&
         (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
    i++;
  for (; i < n && i < 512; i++)
    head[k++] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
  head[k] = '\0';
  if (strncmp(head, "<svg", 4) == 0 ||
      (strncmp(head, "<?xml", 5) == 0 && strstr(head, "<svg")))
    return "image/svg+xml";
  return NULL;
}

enum image_err {
  IMG_NOT_FOUND,
  IMG_NOT_FILE,
  IMG_TOO_BIG,
  IMG_FORMAT,
  IMG_OTHER
};

/* The SDK's view_image error texts; PATH is the path as the model gave it. */
static json_t *image_error(struct op *op, enum image_err kind, const char *path,
                           const char *detail) {
  char msg[1200];
  switch (kind) {
  case IMG_NOT_FOUND:
    (void)snprintf(msg, sizeof(msg), "image path `%s` was not found", path);
    break;
  case IMG_NOT_FILE:
    (void)snprintf(msg, sizeof(msg), "image path `%s` is not a file", path);
    break;
  case IMG_TOO_BIG:
    (void)snprintf(msg, sizeof(msg),
                   "image path `%s` exceeded the allowed size of 10MB; resize "
                   "or compress the image and try again",
                   path);
    break;
  case IMG_FORMAT:
    (void)snprintf(msg, sizeof(msg),
                   "image path `%s` is not a supported image file", path);
    break;
  case IMG_OTHER:
    (void)snprintf(msg, sizeof(msg), "unable to read image at `%s`: %s", path,
                   detail);
    break;
  }
  return op_fail(op, json_string(msg), "%s", msg);
}

static json_t *view_image(struct toolbox *t, json_t *args, struct op *op) {
  const char *path;
  if (!opt_str(args, "path", &path) || !path)
    return op_invalid(op);
  trace_set_str(op->sp, "sandbox.path", path);
  _cleanup_free_ char *p = anchor(t, path);
  if (!p)
    return NULL;
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  int ret = sbx_file_stat(t->sb->client, p, &r, &e);
  if (ret < 0) {
    if (e.code == SBX_NOT_FOUND)
      return image_error(op, IMG_NOT_FOUND, path, NULL);
    return image_error(op, IMG_OTHER, path,
                       e.code == SBX_PERMISSION_DENIED
                           ? "SandboxInvalidManifestPathError"
                           : "SandboxError");
  }
  Sbx__V1__FileType type = r->file_stat->type;
  uint64_t size = r->file_stat->size;
  sbx_client_reply_free(r);
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK) {
    /* The image may sit behind a link inside the workspace; reading
     * follows it beneath the root. */
    type = SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR;
    size = 0;
  }
  if (type != SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR)
    return image_error(op, IMG_NOT_FILE, path, NULL);
  if (size > TOOLS_VIEW_IMAGE_MAX)
    return image_error(op, IMG_TOO_BIG, path, NULL);
  _cleanup_buf_ struct sbx_buf data;
  sbx_buf_init(&data, TOOLS_VIEW_IMAGE_MAX + 1);
  for (;;) {
    Sbx__V1__FileRead fr = SBX__V1__FILE_READ__INIT;
    fr.path = p;
    fr.offset = data.len;
    fr.length = 4u << 20;
    ret = sbx_file_read(t->sb->client, &fr, &r, &e);
    if (ret < 0) {
      if (e.code == SBX_NOT_FOUND)
        return image_error(op, IMG_NOT_FOUND, path, NULL);
      if (e.code == SBX_INVALID_ARGUMENT)
        return image_error(op, IMG_NOT_FILE, path, NULL);
      return image_error(op, IMG_OTHER, path, "SandboxError");
    }
    Sbx__V1__FileReadReply *x = r->file_read;
    bool eof = x->eof || x->data.len == 0;
    ret = sbx_buf_append(&data, x->data.data, x->data.len);
    sbx_client_reply_free(r);
    if (ret == -E2BIG || data.len > TOOLS_VIEW_IMAGE_MAX)
      return image_error(op, IMG_TOO_BIG, path, NULL);
    if (ret < 0)
      return NULL;
    if (eof)
      break;
  }
  const char *mime = sniff_image((const uint8_t *)(data.data ? data.data : ""),
                                 data.len, path);
  if (!mime)
    return image_error(op, IMG_FORMAT, path, NULL);
  trace_set_str(op->sp, "sandbox.view_image.mime_type", mime);
  trace_set_int(op->sp, "sandbox.view_image.bytes", (int64_t)data.len);
  size_t prefix = strlen("data:;base64,") + strlen(mime);
  _cleanup_free_ char *url =
      malloc(prefix + sbx_base64_encoded_size(data.len) + 1);
  if (!url)
    return NULL;
  int l = snprintf(url, prefix + 1, "data:%s;base64,", mime);
  (void)l;
  sbx_base64_encode(data.data ? data.data : "", data.len, url + prefix);
  if (t->text_images)
    return json_string(url);
  return json_pack("[{s:s, s:s}]", "type", "input_image", "image_url", url);
}

/* ---- apply_patch ------------------------------------------------------- */

/* Builds a "*** Begin Patch" text from one SDK operation object. */
static int operation_to_patch(json_t *op, struct sbx_buf *b, const char **why) {
  const char *type = json_string_value(json_object_get(op, "type"));
  const char *path = json_string_value(json_object_get(op, "path"));
  const char *diff = json_string_value(json_object_get(op, "diff"));
  json_t *mv = json_object_get(op, "move_to");
  if (!mv)
    mv = json_object_get(op, "moveTo");
  const char *move_to = json_is_string(mv) ? json_string_value(mv) : NULL;
  if (!type || !path || !*path) {
    *why = "an operation needs \"type\" and \"path\"";
    return -EINVAL;
  }
  int r;
  if (strcmp(type, "create_file") == 0) {
    if (!diff) {
      *why = "create_file needs \"diff\"";
      return -EINVAL;
    }
    r = sbx_buf_printf(b, "*** Add File: %s\n", path);
    /* The hosted tool's create diff is "+line" lines; plain text is taken
     * as the content. */
    const char *p = diff;
    while (r == 0 && *p) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      if (n == 0 && !nl)
        break;
      r = sbx_buf_printf(b, "%s%.*s\n", p[0] == '+' ? "" : "+", (int)n, p);
      p += n + (nl ? 1 : 0);
    }
  } else if (strcmp(type, "update_file") == 0) {
    r = sbx_buf_printf(b, "*** Update File: %s\n", path);
    if (r == 0 && move_to)
      r = sbx_buf_printf(b, "*** Move to: %s\n", move_to);
    if (r == 0 && diff && *diff) {
      r = sbx_buf_append_str(b, diff);
      if (r == 0 && diff[strlen(diff) - 1] != '\n')
        r = sbx_buf_append_str(b, "\n");
    }
  } else if (strcmp(type, "delete_file") == 0) {
    r = sbx_buf_printf(b, "*** Delete File: %s\n", path);
  } else {
    *why = "unknown operation type";
    return -EINVAL;
  }
  return r;
}

/* Applies PATCH atomically; fills OUT with the per-file results or the
 * error. Returns 0 when applied. */
static int apply_patch_text(struct toolbox *t, const char *patch,
                            struct sbx_buf *out, struct op *op) {
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  int ret = sbx_patch_apply(t->sb->client, patch, t->cwd ? t->cwd : "", false,
                            &r, &e);
  if (ret < 0) {
    (void)sbx_buf_append_str(out, e.msg);
    (void)op_fail(op, NULL, "%s", e.msg);
    return ret;
  }
  Sbx__V1__PatchApplyReply *x = r->patch_apply;
  trace_set_int(op->sp, "sandbox.apply_patch.files", (int64_t)x->n_results);
  for (size_t i = 0; i < x->n_results; i++) {
    if (i)
      (void)sbx_buf_append_str(out, "\n");
    (void)sbx_buf_append_str(out, x->results[i]->summary);
  }
  sbx_client_reply_free(r);
  return 0;
}

static json_t *apply_patch_function(struct toolbox *t, const char *raw,
                                    struct op *op) {
  _cleanup_buf_ struct sbx_buf patch;
  sbx_buf_init(&patch, 32u << 20);
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, 1u << 20);
  const char *s = raw;
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  if (strncmp(s, "*** Begin Patch", 15) == 0) {
    if (sbx_buf_append_str(&patch, raw) < 0)
      return NULL;
  } else {
    json_error_t je;
    _cleanup_json_ json_t *in = json_loads(raw, JSON_DECODE_ANY, &je);
    if (!in) {
      (void)sbx_buf_printf(&out, "Invalid apply_patch JSON: %s", je.text);
      return op_fail(op, text_output(&out), "%s", out.data);
    }
    json_t *ops = NULL;
    json_t *one = NULL;
    const char *text = NULL;
    if (json_is_string(in)) {
      text = json_string_value(in);
    } else if (json_is_array(in)) {
      ops = in;
    } else if (!json_is_object(in)) {
      return op_fail(
          op, json_string("apply_patch input must be an object or array."),
          "apply_patch input must be an object or array.");
    } else if (json_is_string(json_object_get(in, "patch"))) {
      text = json_string_value(json_object_get(in, "patch"));
    } else if (json_is_array(json_object_get(in, "command")) &&
               json_array_size(json_object_get(in, "command")) == 2 &&
               json_is_string(
                   json_array_get(json_object_get(in, "command"), 1))) {
      text =
          json_string_value(json_array_get(json_object_get(in, "command"), 1));
    } else if (json_is_array(json_object_get(in, "operations"))) {
      ops = json_object_get(in, "operations");
    } else if (json_is_object(json_object_get(in, "operation"))) {
      one = json_object_get(in, "operation");
    } else {
      one = in;
    }
    if (text) {
      if (sbx_buf_append_str(&patch, text) < 0)
        return NULL;
    } else {
      size_t n = ops ? json_array_size(ops) : 1;
      if (n == 0)
        return op_fail(
            op, json_string("apply_patch input must include an operation."),
            "apply_patch input must include an operation.");
      (void)sbx_buf_append_str(&patch, "*** Begin Patch\n");
      for (size_t i = 0; i < n; i++) {
        json_t *item = ops ? json_array_get(ops, i) : one;
        const char *why = NULL;
        if (!json_is_object(item) ||
            operation_to_patch(item, &patch, &why) < 0) {
          (void)sbx_buf_printf(&out, "Invalid apply_patch operation: %s",
                               why ? why : "not an object");
          return op_fail(op, text_output(&out), "%s", out.data);
        }
      }
      (void)sbx_buf_append_str(&patch, "*** End Patch\n");
    }
  }
  _cleanup_buf_ struct sbx_buf res;
  sbx_buf_init(&res, 1u << 20);
  if (apply_patch_text(t, patch.data, &res, op) < 0)
    (void)sbx_buf_printf(&out, "Failed to apply patch: %s",
                         res.data ? res.data : "");
  else
    (void)sbx_buf_append(&out, res.data ? res.data : "", res.len);
  return text_output(&out);
}

/* Starts the span of one tool invocation under CTX's span. */
static void op_begin(struct op *op, struct tool_ctx *ctx,
                     struct sbx_error *scratch, const char *span_name,
                     const struct toolbox *t) {
  op->failure = ctx ? &ctx->failure : scratch;
  sbx_error_clear(op->failure);
  op->sp = trace_child(ctx ? ctx->span : NULL, span_name);
  trace_set_str(op->sp, "sandbox.session_id", t->sb->session_id);
}

static void op_end(struct op *op) {
  if (op->failure->code != SBX_OK)
    trace_set_error(op->sp, "%s", op->failure->msg);
  trace_end(op->sp);
}

int tools_apply_patch_operation(struct toolbox *t, json_t *operation,
                                const char **status, char **output,
                                struct tool_ctx *ctx) {
  struct sbx_error scratch;
  struct op op;
  op_begin(&op, ctx, &scratch, TRACE_SANDBOX_APPLY_PATCH, t);
  _cleanup_buf_ struct sbx_buf patch;
  sbx_buf_init(&patch, 32u << 20);
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, 1u << 20);
  const char *why = NULL;
  *output = NULL;
  *status = "failed";
  (void)sbx_buf_append_str(&patch, "*** Begin Patch\n");
  if (!json_is_object(operation) ||
      operation_to_patch(operation, &patch, &why) < 0) {
    (void)sbx_buf_printf(&out, "Invalid apply_patch operation: %s",
                         why ? why : "not an object");
    (void)op_fail(&op, NULL, "%s", out.data);
  } else {
    (void)sbx_buf_append_str(&patch, "*** End Patch\n");
    if (apply_patch_text(t, patch.data, &out, &op) == 0)
      *status = "completed";
  }
  if (strcmp(*status, "failed") == 0)
    *output = sbx_buf_steal(&out, NULL);
  op_end(&op);
  return 0;
}

int tools_call(struct toolbox *t, const char *name, const char *args,
               json_t **output, struct tool_ctx *ctx) {
  json_t *(*fn)(struct toolbox *, json_t *, struct op *) = NULL;
  const char *span_name = TRACE_SANDBOX_APPLY_PATCH;
  if (strcmp(name, "apply_patch") == 0) {
    fn = NULL;
  } else if (strcmp(name, "exec_command") == 0) {
    fn = exec_command;
    span_name = TRACE_SANDBOX_EXEC;
  } else if (strcmp(name, "write_stdin") == 0) {
    fn = write_stdin;
    span_name = TRACE_SANDBOX_WRITE_STDIN;
  } else if (strcmp(name, "view_image") == 0) {
    fn = view_image;
    span_name = TRACE_SANDBOX_VIEW_IMAGE;
  } else {
    return -ENOENT;
  }
  struct sbx_error scratch;
  struct op op;
  op_begin(&op, ctx, &scratch, span_name, t);
  if (!fn) {
    *output = apply_patch_function(t, args ? args : "", &op);
  } else {
    json_error_t je;
    _cleanup_json_ json_t *a = json_loads(args ? args : "", 0, &je);
    *output = json_is_object(a) ? fn(t, a, &op) : op_invalid(&op);
  }
  if (!*output)
    (void)op_fail(&op, NULL, "out of memory");
  op_end(&op);
  return *output ? 0 : -ENOMEM;
}
