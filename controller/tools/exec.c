/* The shell tools: exec_command starts a command in the sandbox and
 * waits up to its yield time for it to finish; a command still running
 * becomes a session that write_stdin writes to and reads from. Both answer
 * with the SDK's text (controller/tools/output.h). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/output.h"
#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/utf8.h"

#define COLLECT_MAX (1u << 20) /* output kept per call, like the SDK's */
#define YIELD_MIN_MS 250
#define YIELD_MAX_MS 30000
#define EMPTY_POLL_MIN_MS 5000

/* The output of one call so far: the last COLLECT_MAX bytes, how many
 * were lost before them, and how the process ended. */
struct collected {
  struct sbx_buf text;
  uint64_t dropped; /* bytes the retention or our cap lost */
  bool exited;
  int code;
};

/* Releases C's text at the end of its scope. */
static void collected_freep(struct collected *c) {
  sbx_buf_free(&c->text);
}

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

/* Lets sandboxd forget an exited process (its output is all read). */
static void release_exec(struct toolbox *t, uint64_t exec_id) {
  struct sbx_error e = {0};
  (void)sbx_exec_release(t->sb->client, exec_id, &e);
}

/* The SDK's clamp of yield_time_ms. */
static int64_t clamp_yield(int64_t ms) {
  if (ms < YIELD_MIN_MS)
    return YIELD_MIN_MS;
  if (ms > YIELD_MAX_MS)
    return YIELD_MAX_MS;
  return ms;
}

/* The attributes of an exec or write_stdin result. */
static void trace_exec_result(struct tool_op *op, const struct collected *c,
                              int session_id) {
  trace_set_bool(op->sp, "sandbox.exec.running", !c->exited);
  if (c->exited)
    trace_set_int(op->sp, "sandbox.exec.exit_code", c->code);
  else
    trace_set_int(op->sp, "sandbox.exec.session_id", session_id);
  trace_set_int(op->sp, "sandbox.exec.output_bytes",
                (int64_t)(c->text.len + c->dropped));
}

/* exec_command: starts CMD and waits for it until the yield time; a
 * process still running is remembered as a session. */
json_t *tools_exec_command(struct toolbox *t, json_t *args,
                           struct tool_op *op) {
  const char *cmd, *workdir, *shell;
  bool login, tty;
  int64_t yield, max_tokens;
  if (!tools_opt_str(args, "cmd", &cmd) || !cmd || !*cmd ||
      !tools_opt_str(args, "workdir", &workdir) ||
      !tools_opt_str(args, "shell", &shell) ||
      !tools_opt_bool(args, "login", true, &login) ||
      !tools_opt_bool(args, "tty", false, &tty) ||
      !tools_opt_int(args, "yield_time_ms", 0, 10000, &yield) ||
      !tools_opt_int(args, "max_output_tokens", 1, OUTPUT_TOKENS_UNLIMITED,
                     &max_tokens))
    return tools_op_invalid(op);
  trace_set_str(op->sp, "sandbox.exec.command", cmd);
  trace_set_bool(op->sp, "sandbox.exec.tty", tty);
  uint64_t start = sbx_now_ns();
  _cleanup_free_ char *cwd = tools_anchor(t, workdir);
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
  _cleanup_(collected_freep) struct collected c = {0};
  sbx_buf_init(&c.text, COLLECT_MAX + 1);
  if (ret < 0) {
    /* A spawn error is the output of a process that exited with 1. */
    c.exited = true;
    c.code = 1;
    (void)sbx_buf_printf(&c.text, "%s\n", e.msg);
    (void)format_result(&c, start, false, 0, max_tokens, &out);
    return tools_op_fail(op, tools_text_output(&out),
                         "cannot start the command: %s", e.msg);
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
    return tools_op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  int sid = 0;
  if (c.exited)
    release_exec(t, exec_id);
  else
    sid = tools_session_add(t, exec_id, offset, tty);
  trace_exec_result(op, &c, sid);
  ret = format_result(&c, start, !c.exited, sid, max_tokens, &out);
  if (ret < 0)
    return NULL;
  return tools_text_output(&out);
}

/* write_stdin: writes CHARS to a session (Ctrl-C as SIGINT without a
 * terminal), then reads its output until the yield time. */
json_t *tools_write_stdin(struct toolbox *t, json_t *args, struct tool_op *op) {
  int64_t sid, yield, max_tokens;
  const char *chars;
  json_t *sv = json_object_get(args, "session_id");
  if (!sv || json_is_null(sv) ||
      !tools_opt_int(args, "session_id", 0, 0, &sid) ||
      !tools_opt_str(args, "chars", &chars) ||
      !tools_opt_int(args, "yield_time_ms", 0, 250, &yield) ||
      !tools_opt_int(args, "max_output_tokens", 1, OUTPUT_TOKENS_UNLIMITED,
                     &max_tokens))
    return tools_op_invalid(op);
  if (!chars)
    chars = "";
  trace_set_int(op->sp, "sandbox.exec.session_id", sid);
  trace_set_int(op->sp, "sandbox.write_stdin.bytes", (int64_t)strlen(chars));
  uint64_t start = sbx_now_ns();
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, COLLECT_MAX * 4 + 4096);
  _cleanup_(collected_freep) struct collected c = {0};
  sbx_buf_init(&c.text, COLLECT_MAX + 1);

  struct tool_exec_session s = {0};
  if (!tools_session_get(t, sid, &s)) {
    c.exited = true;
    c.code = 1;
    (void)sbx_buf_printf(&c.text, "write_stdin failed: session not found: %lld",
                         (long long)sid);
    (void)format_result(&c, sbx_now_ns(), false, 0, max_tokens, &out);
    return tools_op_fail(op, tools_text_output(&out), "session not found: %lld",
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
    return tools_op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  int64_t wait = clamp_yield(yield);
  if (n == 0 && wait < EMPTY_POLL_MIN_MS)
    wait = EMPTY_POLL_MIN_MS;
  uint64_t offset = s.offset;
  ret = collect(t, s.exec_id, s.tty, &offset, start / 1000000 + (uint64_t)wait,
                &c, &e);
  if (ret < 0) {
    log_warn("write_stdin: %s", e.msg);
    return tools_op_fail(op, json_string(tools_generic_error), "%s", e.msg);
  }
  tools_session_update(t, sid, offset, c.exited);
  if (c.exited)
    release_exec(t, s.exec_id);
  trace_exec_result(op, &c, (int)sid);
  ret = format_result(&c, start, !c.exited, (int)sid, max_tokens, &out);
  if (ret < 0)
    return NULL;
  return tools_text_output(&out);
}
