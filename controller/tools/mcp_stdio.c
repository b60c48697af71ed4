/* The MCP stdio transport: the controller starts the server on its own
 * host, writes JSON-RPC messages to its stdin one a line, and a reader
 * thread reads its stdout: replies go to the callers waiting for them (by
 * id), the server's requests are answered (ping; anything else is "method
 * not found", since this client offers no capabilities), and notifications
 * are noted (tools/list_changed) or ignored (progress, logging). Its stderr
 * is read too, so that it never blocks, and logged at debug.
 *
 * A message over MCP_MAX_MESSAGE, or a server that exits, ends the
 * connection: what waits fails, and so does every later request. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/tools/host_proc.h"
#include "controller/tools/mcp_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define MCP_STDERR_LINE 1024
#define MCP_EXIT_GRACE_MS 1000

/* A request waiting for its reply. */
struct pending {
  int64_t id;
  json_t *reply; /* new, once it came */
  struct pending *next;
};

struct stdio_conn {
  const struct agent_mcp_server *cfg;
  struct host_proc p;
  pthread_t reader;
  bool reader_started;
  pthread_mutex_t mu; /* guards what follows, and writes */
  pthread_cond_t cv;
  int64_t next_id;
  struct pending *pending;
  bool gone;     /* the server exited or broke the protocol */
  bool stopping; /* stdio_free */
  char gone_msg[160];
  bool list_changed;
  int wfd; /* its stdin, non-blocking */
};

/* Ends the connection (locked): every waiter wakes to fail. */
static void set_gone(struct stdio_conn *c, const char *msg) {
  if (!c->gone)
    (void)snprintf(c->gone_msg, sizeof(c->gone_msg), "%s", msg);
  c->gone = true;
  pthread_cond_broadcast(&c->cv);
}

/* Writes LINE (with its newline) to the server before END (ms). Locked. */
static int write_line(struct stdio_conn *c, const char *line, size_t len,
                      uint64_t end) {
  sigset_t old;
  host_sigpipe_block(&old);
  int r = 0;
  while (len > 0) {
    ssize_t k = write(c->wfd, line, len);
    if (k > 0) {
      line += k;
      len -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && errno != EAGAIN) {
      r = -errno;
      break;
    }
    uint64_t now = sbx_now_ms();
    if (now >= end) {
      r = -ETIMEDOUT;
      break;
    }
    struct pollfd pf = {.fd = c->wfd, .events = POLLOUT};
    (void)poll(&pf, 1, (int)(end - now > 100 ? 100 : end - now));
  }
  host_sigpipe_restore(&old);
  return r;
}

/* Sends MSG (borrowed) as one line. Takes the lock. */
static int send_msg(struct stdio_conn *c, json_t *msg, uint64_t end) {
  _cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
  if (!text)
    return -ENOMEM;
  size_t n = strlen(text);
  if (n >= MCP_MAX_MESSAGE)
    return -E2BIG;
  pthread_mutex_lock(&c->mu);
  int r = c->gone ? -EPIPE : 0;
  if (r == 0)
    r = write_line(c, text, n, end);
  if (r == 0)
    r = write_line(c, "\n", 1, end);
  if (r == -EPIPE)
    set_gone(c, "its stdin is closed");
  pthread_mutex_unlock(&c->mu);
  return r;
}

/* Answers the server's request MSG: ping with {}, anything else with
 * "method not found". */
static void answer_request(struct stdio_conn *c, json_t *msg) {
  const char *method = json_string_value(json_object_get(msg, "method"));
  json_t *id = json_object_get(msg, "id");
  _cleanup_json_ json_t *reply =
      strcmp(method, "ping") == 0
          ? json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", id, "result")
          : json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id,
                      "error", "code", -32601, "message", "Method not found");
  if (reply)
    (void)send_msg(c, reply, sbx_now_ms() + 1000);
}

/* One message from the server. */
static void handle_message(struct stdio_conn *c, const char *line, size_t len) {
  json_error_t je;
  _cleanup_json_ json_t *msg = json_loadb(line, len, 0, &je);
  if (!json_is_object(msg)) {
    log_debug("mcp server \"%s\": not a JSON-RPC message: %s", c->cfg->name,
              je.text);
    return;
  }
  const char *method = json_string_value(json_object_get(msg, "method"));
  json_t *id = json_object_get(msg, "id");
  if (method && id) {
    answer_request(c, msg);
    return;
  }
  if (method) {
    if (strcmp(method, "notifications/tools/list_changed") == 0) {
      pthread_mutex_lock(&c->mu);
      c->list_changed = true;
      pthread_mutex_unlock(&c->mu);
    }
    return; /* progress, logging and the rest: nothing to do */
  }
  if (!json_is_integer(id))
    return; /* not a reply to anything we sent */
  pthread_mutex_lock(&c->mu);
  for (struct pending *p = c->pending; p; p = p->next)
    if (p->id == json_integer_value(id) && !p->reply) {
      p->reply = json_incref(msg);
      pthread_cond_broadcast(&c->cv);
      break;
    }
  pthread_mutex_unlock(&c->mu);
}

/* Takes the complete lines out of B: messages from stdout, or log lines
 * from stderr. False when a line is over the limit. */
static bool take_lines(struct stdio_conn *c, struct sbx_buf *b, bool is_out) {
  for (;;) {
    char *nl = b->len ? memchr(b->data, '\n', b->len) : NULL;
    if (!nl && is_out)
      return b->len < MCP_MAX_MESSAGE;
    if (!nl) {
      if (b->len >= MCP_STDERR_LINE) /* a long log line is cut */
        sbx_buf_reset(b);
      return true;
    }
    size_t n = (size_t)(nl - b->data);
    if (is_out && n > 0)
      handle_message(c, b->data, n);
    else if (!is_out)
      log_debug("mcp server \"%s\": %.*s", c->cfg->name, (int)n, b->data);
    sbx_buf_consume(b, n + 1);
  }
}

/* The reader thread: stdout and stderr until the server is gone. */
static void *reader_main(void *arg) {
  struct stdio_conn *c = arg;
  _cleanup_buf_ struct sbx_buf out;
  _cleanup_buf_ struct sbx_buf err;
  sbx_buf_init(&out, MCP_MAX_MESSAGE + 65536);
  sbx_buf_init(&err, MCP_STDERR_LINE + 65536);
  const char *why = "it exited";
  int fds[2] = {c->p.out, c->p.err};
  while (fds[0] >= 0) {
    pthread_mutex_lock(&c->mu);
    bool stop = c->stopping;
    pthread_mutex_unlock(&c->mu);
    if (stop)
      break;
    struct pollfd pf[2] = {{.fd = fds[0], .events = POLLIN},
                           {.fd = fds[1], .events = POLLIN}};
    int pr = poll(pf, 2, 200);
    if (pr < 0 && errno != EINTR)
      break;
    for (int i = 0; pr > 0 && i < 2; i++) {
      if (fds[i] < 0 || !pf[i].revents)
        continue;
      struct sbx_buf *b = i == 0 ? &out : &err;
      if (sbx_buf_reserve(b, 65536) < 0) {
        why = "it sent a line over the size limit";
        fds[0] = -1;
        break;
      }
      ssize_t k = read(fds[i], b->data + b->len, 65536);
      if (k < 0 && (errno == EINTR || errno == EAGAIN))
        continue;
      if (k <= 0) {
        fds[i] = -1;
        continue;
      }
      b->len += (size_t)k;
      b->data[b->len] = '\0';
      if (!take_lines(c, b, i == 0)) {
        why = "it sent a message over the size limit";
        fds[0] = -1;
      }
    }
  }
  pthread_mutex_lock(&c->mu);
  set_gone(c, why);
  pthread_mutex_unlock(&c->mu);
  if (strcmp(why, "it exited") != 0)
    host_proc_kill(&c->p);
  return NULL;
}

static void stdio_free(void *arg);

static int stdio_start(const struct agent_mcp_server *cfg, void **out,
                       struct sbx_error *e) {
  struct stdio_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->cfg = cfg;
  c->next_id = 1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t ca;
  (void)pthread_condattr_init(&ca);
  (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &ca);
  (void)pthread_condattr_destroy(&ca);
  int r = host_proc_start(&c->p, cfg->argv, cfg->cwd, cfg->env, e);
  if (r < 0) {
    stdio_free(c);
    return r;
  }
  c->wfd = c->p.in;
  (void)fcntl(c->wfd, F_SETFL, O_NONBLOCK);
  if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
    stdio_free(c);
    return sbx_error_set(e, SBX_INTERNAL, EAGAIN, "cannot start a thread");
  }
  c->reader_started = true;
  *out = c;
  return 0;
}

/* Waits (locked) until P has its reply, the server is gone or END. */
static void wait_reply(struct stdio_conn *c, struct pending *p, int64_t ms) {
  struct timespec end =
      sbx_deadline_in(CLOCK_MONOTONIC, ms > 0 ? (unsigned)ms : 0);
  while (!p->reply && !c->gone)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &end) == ETIMEDOUT)
      break;
}

/* Takes P off the list (locked). */
static void unlink_pending(struct stdio_conn *c, struct pending *p) {
  for (struct pending **pp = &c->pending; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
}

static int stdio_notify(void *arg, const char *method, json_t *params,
                        int64_t timeout_ms);

static int stdio_request(void *arg, const char *method, json_t *params,
                         int64_t timeout_ms, json_t **result,
                         struct sbx_error *e) {
  struct stdio_conn *c = arg;
  uint64_t end = sbx_now_ms() + (uint64_t)timeout_ms;
  struct pending p = {0};
  pthread_mutex_lock(&c->mu);
  p.id = c->next_id++;
  p.next = c->pending;
  c->pending = &p;
  pthread_mutex_unlock(&c->mu);
  _cleanup_json_ json_t *msg =
      json_pack("{s:s, s:I, s:s, s:O*}", "jsonrpc", "2.0", "id",
                (json_int_t)p.id, "method", method, "params", params);
  int r = msg ? send_msg(c, msg, end) : -ENOMEM;
  pthread_mutex_lock(&c->mu);
  if (r == 0)
    wait_reply(c, &p, (int64_t)(end > sbx_now_ms() ? end - sbx_now_ms() : 0));
  unlink_pending(c, &p);
  bool gone = c->gone && !p.reply;
  char why[sizeof(c->gone_msg)];
  (void)snprintf(why, sizeof(why), "%s", c->gone_msg);
  pthread_mutex_unlock(&c->mu);
  _cleanup_json_ json_t *reply = p.reply;
  if (reply)
    return mcp_reply_result(c->cfg->name, reply, result, e);
  if (gone || r == -EPIPE)
    return sbx_error_set(e, SBX_UNAVAILABLE, EPIPE,
                         "MCP server \"%s\" is gone (%s)", c->cfg->name,
                         why[0] ? why : "its stdin is closed");
  if (r < 0 && r != -ETIMEDOUT)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot write to MCP server \"%s\": %s", c->cfg->name,
                         strerror(-r));
  /* Timed out: the server may stop working on it. */
  _cleanup_json_ json_t *cancel = json_pack(
      "{s:I, s:s}", "requestId", (json_int_t)p.id, "reason", "timed out");
  if (cancel)
    (void)stdio_notify(c, "notifications/cancelled", cancel, 1000);
  return sbx_error_set(e, SBX_UNAVAILABLE, ETIMEDOUT,
                       "MCP server \"%s\" did not answer %s within %.3g s",
                       c->cfg->name, method, (double)timeout_ms / 1000);
}

static int stdio_notify(void *arg, const char *method, json_t *params,
                        int64_t timeout_ms) {
  struct stdio_conn *c = arg;
  _cleanup_json_ json_t *msg = json_pack("{s:s, s:s, s:O*}", "jsonrpc", "2.0",
                                         "method", method, "params", params);
  if (!msg)
    return -ENOMEM;
  return send_msg(c, msg, sbx_now_ms() + (uint64_t)timeout_ms);
}

static bool stdio_take_list_changed(void *arg) {
  struct stdio_conn *c = arg;
  pthread_mutex_lock(&c->mu);
  bool changed = c->list_changed;
  c->list_changed = false;
  pthread_mutex_unlock(&c->mu);
  return changed;
}

/* Waits up to MS for the server to exit by itself. */
static void wait_exit(struct stdio_conn *c, unsigned ms) {
  uint64_t end = sbx_now_ms() + ms;
  while (c->p.pid > 0 && sbx_now_ms() < end) {
    int st;
    pid_t w = waitpid(c->p.pid, &st, WNOHANG);
    if (w == c->p.pid || (w < 0 && errno != EINTR)) {
      c->p.pid = 0;
      return;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    (void)nanosleep(&ts, NULL);
  }
}

static void stdio_free(void *arg) {
  struct stdio_conn *c = arg;
  if (!c)
    return;
  pthread_mutex_lock(&c->mu);
  c->stopping = true;
  set_gone(c, "it was closed");
  /* Closing stdin asks a stdio server to exit. */
  if (c->p.in >= 0)
    (void)close(c->p.in);
  c->p.in = -1;
  pthread_mutex_unlock(&c->mu);
  if (c->p.pid > 0)
    wait_exit(c, MCP_EXIT_GRACE_MS);
  host_proc_kill(&c->p);
  if (c->reader_started)
    (void)pthread_join(c->reader, NULL);
  host_proc_stop(&c->p, NULL);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const struct mcp_transport mcp_stdio_transport = {
    .start = stdio_start,
    .request = stdio_request,
    .notify = stdio_notify,
    .take_list_changed = stdio_take_list_changed,
    .free = stdio_free,
};
