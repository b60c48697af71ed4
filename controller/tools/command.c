/* Command tools: a "tools" entry of type "command" runs a program on the
 * controller's host (trusted configuration, the C analogue of the SDK's
 * function tools) with the call's JSON arguments on its stdin; its stdout
 * is the tool's output. A timeout kills its process group; output over
 * COMMAND_MAX_OUTPUT, a non-zero exit and arguments that are not a JSON
 * object fail the call, and the model is told why in the Python SDK's
 * words (default_tool_error_function). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/tools/host_proc.h"
#include "controller/tools/tools.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/utf8.h"

#define COMMAND_MAX_OUTPUT (1u << 20) /* bytes of stdout */
#define COMMAND_STDERR_KEEP 2048      /* bytes of stderr kept for messages */

const char tools_error_prefix[] =
    "An error occurred while running the tool. Please try again. Error: ";
const char tools_args_error_prefix[] =
    "An error occurred while parsing tool arguments. Please try again with "
    "valid JSON. Error: ";

json_t *tools_host_failure(struct tool_ctx *ctx, const char *prefix,
                           const char *fmt, ...) {
  char msg[SBX_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (ctx)
    (void)sbx_error_set(&ctx->failure, SBX_INTERNAL, EIO, "%s", msg);
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 2 * SBX_ERROR_MSG_MAX);
  if (sbx_buf_append_str(&b, prefix) < 0 ||
      sbx_utf8_sanitize(msg, strlen(msg), &b) < 0)
    return NULL;
  return json_stringn(b.data, b.len);
}

/* What one run of a command collected. */
struct command_io {
  struct host_proc p;
  const char *in; /* left to write */
  size_t inlen;
  struct sbx_buf out;
  char err[COMMAND_STDERR_KEEP];
  size_t errlen;
  bool too_big;
};

static void command_io_clear(struct command_io *io) {
  sbx_buf_free(&io->out);
}

/* Keeps the last bytes of stderr in IO. */
static void keep_stderr(struct command_io *io, const char *b, size_t n) {
  if (n >= sizeof(io->err)) {
    memcpy(io->err, b + n - sizeof(io->err), sizeof(io->err));
    io->errlen = sizeof(io->err);
    return;
  }
  if (io->errlen + n > sizeof(io->err)) {
    size_t drop = io->errlen + n - sizeof(io->err);
    memmove(io->err, io->err + drop, io->errlen - drop);
    io->errlen -= drop;
  }
  memcpy(io->err + io->errlen, b, n);
  io->errlen += n;
}

/* Reads what FD has; false at its end (or on an error). */
static bool drain(struct command_io *io, int *fd, bool is_out) {
  char b[8192];
  ssize_t k = read(*fd, b, sizeof(b));
  if (k < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (k <= 0) {
    (void)close(*fd);
    *fd = -1;
    return false;
  }
  if (!is_out)
    keep_stderr(io, b, (size_t)k);
  else if (sbx_buf_append(&io->out, b, (size_t)k) < 0)
    io->too_big = true;
  return true;
}

/* Feeds stdin and reads stdout and stderr until both end, the process
 * exits and its pipes are drained, or END (ms) passes: -ETIMEDOUT. */
static int pump(struct command_io *io, int pidfd, uint64_t end) {
  bool exited = false;
  for (;;) {
    if (io->p.out < 0 && io->p.err < 0 && (exited || pidfd < 0))
      return 0;
    struct pollfd pf[4];
    int n = 0, iin = -1, iout = -1, ierr = -1, ipid = -1;
    if (io->p.in >= 0) {
      pf[n] = (struct pollfd){.fd = io->p.in, .events = POLLOUT};
      iin = n++;
    }
    if (io->p.out >= 0) {
      pf[n] = (struct pollfd){.fd = io->p.out, .events = POLLIN};
      iout = n++;
    }
    if (io->p.err >= 0) {
      pf[n] = (struct pollfd){.fd = io->p.err, .events = POLLIN};
      ierr = n++;
    }
    if (pidfd >= 0 && !exited) {
      pf[n] = (struct pollfd){.fd = pidfd, .events = POLLIN};
      ipid = n++;
    }
    uint64_t now = sbx_now_ms();
    if (now >= end)
      return -ETIMEDOUT;
    /* Once the process is gone, what is left in the pipes is read at
     * once; a child it left holding them open is not waited for. */
    int wait_ms = exited ? 0 : (int)(end - now);
    int pr = poll(pf, (nfds_t)n, wait_ms);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return -errno;
    if (pr == 0 && exited)
      return 0; /* the pipes stay open in something it left behind */
    if (ipid >= 0 && pf[ipid].revents)
      exited = true;
    if (iin >= 0 && pf[iin].revents) {
      ssize_t k = write(io->p.in, io->in, io->inlen);
      if (k > 0) {
        io->in += k;
        io->inlen -= (size_t)k;
      }
      if ((k < 0 && errno != EAGAIN && errno != EINTR) || io->inlen == 0) {
        (void)close(io->p.in);
        io->p.in = -1;
      }
    }
    if (iout >= 0 && pf[iout].revents)
      (void)drain(io, &io->p.out, true);
    if (ierr >= 0 && pf[ierr].revents)
      (void)drain(io, &io->p.err, false);
    if (io->too_big)
      return -EFBIG;
  }
}

/* The last line of stderr, trimmed, for a message; "" when none. */
static void stderr_tail(const struct command_io *io, char *out, size_t cap) {
  size_t n = io->errlen;
  while (n > 0 && (io->err[n - 1] == '\n' || io->err[n - 1] == ' '))
    n--;
  size_t start = n;
  while (start > 0 && io->err[start - 1] != '\n')
    start--;
  (void)snprintf(out, cap, ": %.*s", (int)(n - start), io->err + start);
  if (n == start)
    out[0] = '\0';
}

/* Runs ARGV in DIR with IO's input until it ends or TIMEOUT_S passes. */
static int host_command_io(struct command_io *io, char *const argv[],
                           const char *dir, int64_t timeout_s,
                           struct sbx_error *e) {
  int sr = host_proc_start(&io->p, argv, dir, NULL, e);
  if (sr < 0)
    return sr;
  (void)fcntl(io->p.in, F_SETFL, O_NONBLOCK);
  _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, io->p.pid, 0);
  sigset_t old;
  host_sigpipe_block(&old);
  int r = pump(io, pidfd, sbx_now_ms() + (uint64_t)timeout_s * 1000);
  host_sigpipe_restore(&old);
  int status = 0;
  if (r < 0) {
    host_proc_stop(&io->p, NULL);
    if (r == -ETIMEDOUT)
      return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                           "the command timed out after %lld s",
                           (long long)timeout_s);
    if (r == -EFBIG)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "the command's output is larger than %u bytes",
                           COMMAND_MAX_OUTPUT);
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "reading the command's output: %s", strerror(-r));
  }
  /* Its stdout is closed: reap it, and whatever it left behind. */
  int wr = host_proc_wait(&io->p, &status);
  host_proc_stop(&io->p, NULL);
  if (wr < 0)
    return sbx_error_set(e, SBX_INTERNAL, -wr, "waiting for the command: %s",
                         strerror(-wr));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    char how[64], tail[COMMAND_STDERR_KEEP + 4];
    host_proc_describe(status, how, sizeof(how));
    stderr_tail(io, tail, sizeof(tail));
    return sbx_error_set(e, SBX_INTERNAL, EIO, "the command %s%s", how, tail);
  }
  return 0;
}

int tools_host_command(char *const argv[], const char *dir, int64_t timeout_s,
                       const char *in, size_t inlen, char **out, size_t *len,
                       struct sbx_error *e) {
  _cleanup_(command_io_clear) struct command_io io = {.in = in, .inlen = inlen};
  sbx_buf_init(&io.out, COMMAND_MAX_OUTPUT);
  int r = host_command_io(&io, argv, dir, timeout_s, e);
  if (r < 0)
    return r;
  *out = malloc(io.out.len + 1);
  if (!*out)
    return -ENOMEM;
  if (io.out.len)
    memcpy(*out, io.out.data, io.out.len);
  (*out)[io.out.len] = '\0';
  *len = io.out.len;
  return 0;
}

/* Runs T with IN on stdin; the output or the failure (new). */
static json_t *command_run(const struct agent_command *t, const char *in,
                           struct tool_ctx *ctx) {
  struct sbx_error se = {0};
  _cleanup_free_ char *out = NULL;
  size_t len = 0;
  int r = tools_host_command(t->argv, t->dir, t->timeout_s, in, strlen(in),
                             &out, &len, &se);
  if (r == -ENOMEM)
    return NULL;
  if (r < 0)
    return tools_host_failure(ctx, tools_error_prefix, "%s", se.msg);
  _cleanup_buf_ struct sbx_buf text;
  sbx_buf_init(&text, 4 * COMMAND_MAX_OUTPUT);
  if (sbx_utf8_sanitize(out, len, &text) < 0)
    return NULL;
  return json_stringn(text.data ? text.data : "", text.len);
}

int tools_command_call(const struct agent_command *t, const char *args,
                       json_t **output, struct tool_ctx *ctx) {
  if (ctx)
    sbx_error_clear(&ctx->failure);
  json_error_t je;
  const char *text = args && *args ? args : "{}";
  _cleanup_json_ json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(a)) {
    *output =
        tools_host_failure(ctx, tools_args_error_prefix, "%s",
                           a ? "the arguments are not a JSON object" : je.text);
    return *output ? 0 : -ENOMEM;
  }
  *output = command_run(t, text, ctx);
  return *output ? 0 : -ENOMEM;
}
