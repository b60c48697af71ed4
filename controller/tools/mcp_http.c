/* The MCP Streamable HTTP transport: every message is a POST to the
 * server's URL with "Accept: application/json, text/event-stream", the
 * agent file's headers, and once the server gave them at initialize, its
 * Mcp-Session-Id and the MCP-Protocol-Version agreed on. A request's reply
 * comes as a JSON body or in an event stream, which may carry the server's
 * own requests (ping is answered with a POST of its own; the rest get
 * "method not found") and notifications (tools/list_changed is noted,
 * progress and logging ignored) before it. A notification is answered with
 * 202. The session is ended with a DELETE when the run is done.
 *
 * Once initialized, a listener thread keeps the GET stream open that a
 * server may offer for messages outside any request (where a list_changed
 * usually comes), opening it again a second after it ends, until the
 * server says it has none (405) or the connection is freed.
 *
 * A reply's event stream that ends before the reply came, after events
 * with ids, is resumed as the specification says (SEP-1699): a GET with
 * Last-Event-ID after the stream's retry time (default 1 s, at most 10 s),
 * at most MCP_HTTP_RESUMES times, within the call's timeout. A reply that
 * comes on another stream (the listener's) is handed to the request
 * waiting for it, whose own stream is then left.
 *
 * Each message is bounded by MCP_MAX_MESSAGE, one reply's stream by
 * MCP_HTTP_MAX_STREAM. A session the server forgot (404) fails the call. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/net/http.h"
#include "controller/net/sse.h"
#include "controller/tools/mcp_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define MCP_HTTP_MAX_STREAM (16 * MCP_MAX_MESSAGE)
#define MCP_HTTP_MAX_HEADERS (AGENT_MAX_LIST + 8)
#define MCP_HTTP_CLOSE_MS 2000
#define MCP_HTTP_RESUMES 5
#define MCP_HTTP_RETRY_MS 1000 /* when the stream gave no retry */
#define MCP_HTTP_RETRY_MAX_MS 10000
#define MCP_HTTP_EVENT_ID_MAX 256
#define MCP_HTTP_LISTEN_WAIT_MS 200

struct http_conn {
  const struct agent_mcp_server *cfg;
  pthread_mutex_t mu; /* guards what follows */
  char *session;      /* Mcp-Session-Id, or NULL */
  char version[32];   /* the protocol version agreed on, or "" */
  int64_t next_id;
  bool list_changed;
  struct exchange *waiting; /* requests waiting for their replies */
  bool listen_began;        /* the GET stream answered, or ended */
  pthread_cond_t began;     /* signalled when listen_began turns true */
  pthread_t listener;       /* the GET stream's, once started */
  bool listening;
  volatile bool stop; /* tells the listener to end */
};

/* One POST and what its reply brought. */
struct exchange {
  struct http_conn *c;
  int64_t want_id;       /* the request's id, or -1 for a notification */
  bool keep_open;        /* read the stream to its end (initialize: headers) */
  json_t *reply;         /* new, once it came; under c->mu */
  volatile bool came;    /* the reply came on another stream: stop this one */
  bool listener;         /* the listener's GET stream */
  struct exchange *next; /* in c->waiting */
  struct sse_parser *sse;
  char last_id[MCP_HTTP_EVENT_ID_MAX]; /* the stream's last event id */
};

/* Whether X's reply is in. */
static bool has_reply(struct exchange *x) {
  pthread_mutex_lock(&x->c->mu);
  bool in = x->reply != NULL;
  pthread_mutex_unlock(&x->c->mu);
  return in;
}

/* Hands the reply MSG with id ID, read by FROM, to the request waiting
 * for it, on whichever stream it came: a server may send it on its GET
 * stream while the request's own stream ended and is being resumed. A
 * reply no request waits for is dropped. */
static void deliver(struct exchange *from, json_int_t id, json_t *msg) {
  struct http_conn *c = from->c;
  pthread_mutex_lock(&c->mu);
  struct exchange *w = c->waiting;
  while (w && w->want_id != id)
    w = w->next;
  bool taken = w && !w->reply;
  if (taken) {
    w->reply = json_incref(msg);
    w->came = w != from;
  }
  pthread_mutex_unlock(&c->mu);
  if (!taken)
    log_debug("mcp server \"%s\": a reply to %lld, which no request waits "
              "for",
              c->cfg->name, (long long)id);
}

/* Lists X among the requests waiting for their replies, or takes it off. */
static void set_waiting(struct exchange *x, bool on) {
  struct http_conn *c = x->c;
  pthread_mutex_lock(&c->mu);
  struct exchange **p = &c->waiting;
  while (*p && *p != x)
    p = &(*p)->next;
  if (on && !*p) {
    x->next = c->waiting;
    c->waiting = x;
  } else if (!on && *p) {
    *p = x->next;
  }
  pthread_mutex_unlock(&c->mu);
}

static int post(struct http_conn *c, json_t *msg, int64_t want_id,
                int64_t timeout_ms, json_t **reply, struct sbx_error *e);

/* Answers the server's request MSG with a POST of its own. */
static void answer_request(struct http_conn *c, json_t *msg) {
  const char *method = json_string_value(json_object_get(msg, "method"));
  json_t *id = json_object_get(msg, "id");
  _cleanup_json_ json_t *reply =
      strcmp(method, "ping") == 0
          ? json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", id, "result")
          : json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id,
                      "error", "code", -32601, "message", "Method not found");
  struct sbx_error e = {0};
  if (reply && post(c, reply, -1, 2000, NULL, &e) < 0)
    log_debug("mcp server \"%s\": answering %s: %s", c->cfg->name, method,
              e.msg);
}

/* One message from the server, in a JSON body or an event. */
static void handle_message(struct exchange *x, json_t *msg) {
  const char *method = json_string_value(json_object_get(msg, "method"));
  json_t *id = json_object_get(msg, "id");
  if (method && id) {
    answer_request(x->c, msg);
  } else if (method) {
    if (strcmp(method, "notifications/tools/list_changed") == 0) {
      pthread_mutex_lock(&x->c->mu);
      x->c->list_changed = true;
      pthread_mutex_unlock(&x->c->mu);
    }
  } else if (json_is_integer(id)) {
    deliver(x, json_integer_value(id), msg);
  }
}

/* A JSON body: one message, or a batch of them. */
static void handle_body(struct exchange *x, const char *text, size_t len) {
  json_error_t je;
  _cleanup_json_ json_t *j = json_loadb(text, len, 0, &je);
  if (json_is_object(j)) {
    handle_message(x, j);
    return;
  }
  size_t i;
  json_t *m;
  json_array_foreach(j, i, m) {
    if (json_is_object(m))
      handle_message(x, m);
  }
}

static int on_event(const struct sse_event *ev, void *arg) {
  struct exchange *x = arg;
  if (ev->id_len > 0 && ev->id_len < sizeof(x->last_id))
    memcpy(x->last_id, ev->id, ev->id_len + 1);
  if (ev->data_len > 0)
    handle_body(x, ev->data, ev->data_len);
  return 0;
}

/* Once the reply is in, what came with it in the same chunk is read (a
 * list_changed after it), and the rest of the stream is not waited for. */
/* The listener's GET stream answered or ended: http_notify may go on. */
static void listen_began(struct http_conn *c) {
  pthread_mutex_lock(&c->mu);
  c->listen_began = true;
  pthread_cond_broadcast(&c->began);
  pthread_mutex_unlock(&c->mu);
}

static int on_data(void *arg, const char *data, size_t len) {
  struct exchange *x = arg;
  if (x->listener && !x->came) {
    x->came = true; /* only once: the listener's is never a reply */
    listen_began(x->c);
  }
  int r = sse_feed(x->sse, data, len, NULL);
  if (r < 0)
    return r;
  return !x->keep_open && has_reply(x) ? -EALREADY : 0;
}

/* The request's header lines into LINES (pointers into BUF and CFG); a
 * GET (STREAM) accepts only an event stream, and resumes after LAST_ID
 * when given. */
static void header_lines(struct http_conn *c, bool stream, const char *last_id,
                         const char **lines, char *buf, size_t cap) {
  size_t n = 0, used = 0;
  for (size_t i = 0;
       c->cfg->headers && c->cfg->headers[i] && n < MCP_HTTP_MAX_HEADERS - 6;
       i++)
    lines[n++] = c->cfg->headers[i];
  lines[n++] = stream ? "Accept: text/event-stream"
                      : "Accept: application/json, text/event-stream";
  if (!stream)
    lines[n++] = "Content-Type: application/json";
  pthread_mutex_lock(&c->mu);
  int k;
  if (c->session &&
      (k = snprintf(buf, cap, "Mcp-Session-Id: %s", c->session)) > 0 &&
      (size_t)k < cap) {
    lines[n++] = buf;
    used = (size_t)k + 1;
  }
  if (c->version[0] &&
      (k = snprintf(buf + used, cap - used, "MCP-Protocol-Version: %s",
                    c->version)) > 0 &&
      (size_t)k < cap - used) {
    lines[n++] = buf + used;
    used += (size_t)k + 1;
  }
  pthread_mutex_unlock(&c->mu);
  if (last_id && *last_id &&
      (k = snprintf(buf + used, cap - used, "Last-Event-ID: %s", last_id)) >
          0 &&
      (size_t)k < cap - used)
    lines[n++] = buf + used;
  lines[n] = NULL;
}

/* Remembers the session id the reply RESP gave. */
static void keep_session(struct http_conn *c, struct http_response *resp) {
  const char *sid =
      json_string_value(json_object_get(resp->headers, "mcp-session-id"));
  if (!sid || !*sid)
    return;
  pthread_mutex_lock(&c->mu);
  if (!c->session)
    c->session = strdup(sid);
  pthread_mutex_unlock(&c->mu);
}

/* Resumes X's event stream after its last event id (SEP-1699) until the
 * reply came, the stream gave no id to resume from, or DEADLINE_MS (of
 * sbx_now_ms) would pass. */
static int resume(struct http_conn *c, struct exchange *x, uint64_t deadline_ms,
                  struct sbx_error *e) {
  for (int i = 0; i < MCP_HTTP_RESUMES && !has_reply(x) && x->last_id[0]; i++) {
    (void)sse_finish(x->sse); /* keeps the last id and the retry time */
    int64_t wait = sse_retry_ms(x->sse);
    if (wait < 0)
      wait = MCP_HTTP_RETRY_MS;
    if (wait > MCP_HTTP_RETRY_MAX_MS)
      wait = MCP_HTTP_RETRY_MAX_MS;
    if (sbx_now_ms() + (uint64_t)wait >= deadline_ms)
      return -ETIMEDOUT;
    struct timespec ts = {wait / 1000, (long)(wait % 1000) * 1000000};
    while (!x->came && nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
    if (has_reply(x))
      break;
    char from[sizeof(x->last_id)];
    memcpy(from, x->last_id, sizeof(from));
    x->last_id[0] = '\0'; /* the resumed stream must give its own */
    struct http_client *hc = NULL;
    int r = http_client_new(&hc, e);
    if (r < 0)
      return r;
    const char *lines[MCP_HTTP_MAX_HEADERS + 1];
    char buf[1024];
    header_lines(c, true, from, lines, buf, sizeof(buf));
    uint64_t left = deadline_ms - sbx_now_ms();
    struct http_request req = {
        .url = c->cfg->url,
        .method = "GET",
        .headers = lines,
        .stream_body = true,
        .timeout_ms = left > UINT_MAX ? 0 : (unsigned)left,
        .max_response_bytes = MCP_HTTP_MAX_STREAM,
        .on_data = on_data,
        .data_arg = x,
        .cancel = &x->came,
    };
    struct http_response resp = {0};
    r = http_send(hc, &req, &resp, e);
    if (r == -EALREADY || (r == -ECANCELED && x->came))
      r = 0; /* the reply came, here or on another stream */
    else if (r == 0 && (resp.status < 200 || resp.status >= 300))
      r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                        "MCP server \"%s\" did not resume its stream after "
                        "event \"%.64s\": HTTP %ld",
                        c->cfg->name, from, resp.status);
    http_response_clear(&resp);
    http_client_free(hc);
    if (r < 0)
      return r;
  }
  return 0;
}

/* POSTs MSG; with WANT_ID >= 0 waits at most TIMEOUT_MS for the reply with
 * that id (new, in *REPLY). */
static int post(struct http_conn *c, json_t *msg, int64_t want_id,
                int64_t timeout_ms, json_t **reply, struct sbx_error *e) {
  _cleanup_free_ char *body = json_dumps(msg, JSON_COMPACT);
  if (!body)
    return -ENOMEM;
  const char *method = json_string_value(json_object_get(msg, "method"));
  struct exchange x = {.c = c,
                       .want_id = want_id,
                       .keep_open = method && !strcmp(method, "initialize")};
  if (want_id >= 0)
    set_waiting(&x, true);
  uint64_t t0 = sbx_now_ms();
  int r = sse_parser_new(MCP_MAX_MESSAGE, on_event, &x, &x.sse);
  struct http_client *hc = NULL;
  if (r == 0)
    r = http_client_new(&hc, e);
  const char *lines[MCP_HTTP_MAX_HEADERS + 1];
  char buf[512];
  header_lines(c, false, NULL, lines, buf, sizeof(buf));
  struct http_request req = {
      .url = c->cfg->url,
      .body = body,
      .body_len = strlen(body),
      .headers = lines,
      .timeout_ms = (unsigned)timeout_ms,
      .max_response_bytes = want_id >= 0 ? MCP_HTTP_MAX_STREAM : 65536,
      .on_data = on_data,
      .data_arg = &x,
      .capture_prefix = "mcp-",
      .cancel = want_id >= 0 ? &x.came : NULL,
  };
  struct http_response resp = {0};
  if (r == 0)
    r = http_post(hc, &req, &resp, e);
  if (r == -EALREADY || (r == -ECANCELED && x.came)) {
    /* The reply came; the rest of the stream was left. */
    r = 0;
    resp.status = 200;
  }
  if (r == 0 && resp.streamed && want_id >= 0 && !has_reply(&x) &&
      resp.status >= 200 && resp.status < 300 && x.last_id[0])
    r = resume(c, &x, timeout_ms > 0 ? t0 + (uint64_t)timeout_ms : UINT64_MAX,
               e);
  if (r == -E2BIG && e && !e->msg[0])
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                      "MCP server \"%s\" sent a message over %u bytes",
                      c->cfg->name, MCP_MAX_MESSAGE);
  if (r == 0 && !resp.streamed && resp.body_len > MCP_MAX_MESSAGE)
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                      "MCP server \"%s\" sent a message over %u bytes",
                      c->cfg->name, MCP_MAX_MESSAGE);
  if (r == 0 && !resp.streamed && resp.status >= 200 && resp.status < 300 &&
      resp.body_len > 0)
    handle_body(&x, resp.body, resp.body_len);
  if (r == 0)
    keep_session(c, &resp);
  if (want_id >= 0)
    set_waiting(&x, false); /* x.reply is this thread's alone from here */
  if (r == 0 && resp.status == 404 && c->session)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EPIPE,
                      "MCP server \"%s\" no longer knows the session",
                      c->cfg->name);
  else if (r == 0 && (resp.status < 200 || resp.status >= 300))
    r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                      "MCP server \"%s\" answered HTTP %ld: %.200s",
                      c->cfg->name, resp.status, resp.body ? resp.body : "");
  else if (r == 0 && want_id >= 0 && !x.reply)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                      "MCP server \"%s\" answered without a reply to %s",
                      c->cfg->name, method ? method : "the request");
  http_response_clear(&resp);
  http_client_free(hc);
  sse_parser_free(x.sse);
  if (r == 0 && reply)
    *reply = x.reply;
  else
    json_decref(x.reply);
  return r;
}

/* One GET of the server's stream, read until it ends: 1 when the server
 * offers none (405, or another 4xx), else 0. */
static int listen_once(struct http_conn *c) {
  struct exchange x = {
      .c = c, .want_id = -1, .keep_open = true, .listener = true};
  struct http_client *hc = NULL;
  struct sbx_error e = {0};
  if (sse_parser_new(MCP_MAX_MESSAGE, on_event, &x, &x.sse) < 0 ||
      http_client_new(&hc, &e) < 0) {
    sse_parser_free(x.sse);
    return 1;
  }
  const char *lines[MCP_HTTP_MAX_HEADERS + 1];
  char buf[512];
  header_lines(c, true, NULL, lines, buf, sizeof(buf));
  struct http_request req = {.url = c->cfg->url,
                             .method = "GET",
                             .headers = lines,
                             .stream_body = true,
                             .on_data = on_data,
                             .data_arg = &x,
                             .cancel = &c->stop};
  struct http_response resp = {0};
  int r = http_send(hc, &req, &resp, &e);
  int none = r == 0 && resp.status >= 400 && resp.status < 500;
  if (r < 0 && r != -ECANCELED)
    log_debug("mcp server \"%s\": its GET stream: %s", c->cfg->name, e.msg);
  listen_began(c);
  http_response_clear(&resp);
  http_client_free(hc);
  sse_parser_free(x.sse);
  json_decref(x.reply);
  return none;
}

/* The listener thread: the GET stream, again a second after it ends. */
static void *listen_main(void *arg) {
  struct http_conn *c = arg;
  while (!c->stop && listen_once(c) == 0)
    for (int i = 0; i < 10 && !c->stop; i++) {
      struct timespec ts = {0, 100 * 1000 * 1000};
      (void)nanosleep(&ts, NULL);
    }
  return NULL;
}

static int http_start(const struct agent_mcp_server *cfg, void **out,
                      struct sbx_error *e) {
  (void)e;
  struct http_conn *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->cfg = cfg;
  c->next_id = 1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->began, NULL);
  *out = c;
  return 0;
}

static int http_notify(void *arg, const char *method, json_t *params,
                       int64_t timeout_ms) {
  struct http_conn *c = arg;
  _cleanup_json_ json_t *msg = json_pack("{s:s, s:s, s:O*}", "jsonrpc", "2.0",
                                         "method", method, "params", params);
  struct sbx_error e = {0};
  int r = msg ? post(c, msg, -1, timeout_ms, NULL, &e) : -ENOMEM;
  /* Initialized: the server may send on its own stream from now on. The
   * stream is under way before the next request goes (up to
   * MCP_HTTP_LISTEN_WAIT_MS for its first bytes), as in a client that
   * opens it before it sends more: a server may take a GET that comes
   * during a call for that call's resumption. */
  if (r == 0 && strcmp(method, "notifications/initialized") == 0 &&
      !c->listening) {
    c->listening = pthread_create(&c->listener, NULL, listen_main, c) == 0;
    struct timespec until =
        sbx_deadline_in(CLOCK_REALTIME, MCP_HTTP_LISTEN_WAIT_MS);
    pthread_mutex_lock(&c->mu);
    while (c->listening && !c->listen_began)
      if (pthread_cond_timedwait(&c->began, &c->mu, &until) != 0)
        break;
    pthread_mutex_unlock(&c->mu);
  }
  return r;
}

static int http_request(void *arg, const char *method, json_t *params,
                        int64_t timeout_ms, json_t **result,
                        struct sbx_error *e) {
  struct http_conn *c = arg;
  pthread_mutex_lock(&c->mu);
  int64_t id = c->next_id++;
  pthread_mutex_unlock(&c->mu);
  _cleanup_json_ json_t *msg =
      json_pack("{s:s, s:I, s:s, s:O*}", "jsonrpc", "2.0", "id", (json_int_t)id,
                "method", method, "params", params);
  _cleanup_json_ json_t *reply = NULL;
  struct sbx_error pe = {0};
  int r = msg ? post(c, msg, id, timeout_ms, &reply, &pe) : -ENOMEM;
  if (r == -ETIMEDOUT) {
    _cleanup_json_ json_t *cancel = json_pack(
        "{s:I, s:s}", "requestId", (json_int_t)id, "reason", "timed out");
    if (cancel)
      (void)http_notify(c, "notifications/cancelled", cancel, 2000);
    return sbx_error_set(e, SBX_UNAVAILABLE, ETIMEDOUT,
                         "MCP server \"%s\" did not answer %s within %.3g s",
                         c->cfg->name, method, (double)timeout_ms / 1000);
  }
  if (r < 0)
    return sbx_error_set(e, pe.code, -r, "%s",
                         pe.msg[0] ? pe.msg : strerror(-r));
  r = mcp_reply_result(c->cfg->name, reply, result, e);
  if (r == 0 && strcmp(method, "initialize") == 0) {
    const char *v =
        json_string_value(json_object_get(*result, "protocolVersion"));
    pthread_mutex_lock(&c->mu);
    (void)snprintf(c->version, sizeof(c->version), "%s", v ? v : "");
    pthread_mutex_unlock(&c->mu);
  }
  return r;
}

static bool http_take_list_changed(void *arg) {
  struct http_conn *c = arg;
  pthread_mutex_lock(&c->mu);
  bool changed = c->list_changed;
  c->list_changed = false;
  pthread_mutex_unlock(&c->mu);
  return changed;
}

/* Ends the session with a DELETE, as the specification asks of a client
 * that is done; a server that does not allow it answers 405. */
static void http_free(void *arg) {
  struct http_conn *c = arg;
  if (!c)
    return;
  c->stop = true;
  if (c->listening)
    (void)pthread_join(c->listener, NULL);
  struct http_client *hc = NULL;
  struct sbx_error e = {0};
  if (c->session && http_client_new(&hc, &e) == 0) {
    const char *lines[MCP_HTTP_MAX_HEADERS + 1];
    char buf[512];
    header_lines(c, false, NULL, lines, buf, sizeof(buf));
    struct http_request req = {.url = c->cfg->url,
                               .method = "DELETE",
                               .headers = lines,
                               .timeout_ms = MCP_HTTP_CLOSE_MS};
    struct http_response resp = {0};
    if (http_send(hc, &req, &resp, &e) < 0)
      log_debug("mcp server \"%s\": ending the session: %s", c->cfg->name,
                e.msg);
    http_response_clear(&resp);
  }
  http_client_free(hc);
  free(c->session);
  pthread_cond_destroy(&c->began);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const struct mcp_transport mcp_http_transport = {
    .start = http_start,
    .request = http_request,
    .notify = http_notify,
    .take_list_changed = http_take_list_changed,
    .free = http_free,
};
