/* A run's events as Server-Sent Events: every event after the client's
 * Last-Event-ID (or ?after=SEQ), as "id: SEQ", "event: TYPE" and "data:"
 * the JSON of `sbx run --stream`, then those still to come, until the
 * run's last event (or, with ?follow=false, until the last recorded).
 * Events are read from the store, so a client may read a run that another
 * server executes; it is woken at once by events recorded here and looks
 * for others every POLL_MS, when it also sees whether its client has gone
 * (and ends). A comment line every KEEPALIVE_MS keeps proxies from closing
 * a quiet stream. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/server/server_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define POLL_MS 250
#define KEEPALIVE_MS 15000
#define BATCH 100

struct sse {
  struct server *srv;
  char id[SERVER_ID_MAX];
  int64_t after;      /* the last seq sent */
  bool ended;         /* the terminal event was sent */
  bool follow;        /* wait for events to come (else end at the last) */
  struct sbx_buf out; /* formatted, not yet handed to the connection */
  size_t off;
  int64_t last_write_ms;
};

bool server_event_terminal(const char *type) {
  return strcmp(type, "run_finished") == 0 || strcmp(type, "run_failed") == 0 ||
         strcmp(type, "run_cancelled") == 0;
}

static void sse_free(void *arg) {
  struct sse *s = arg;
  sbx_buf_free(&s->out);
  free(s);
}

/* Whether the run is in a state whose events are all written. */
static bool run_over(struct sse *s) {
  _cleanup_json_ json_t *row = NULL;
  if (store_run_get(s->srv->store, s->id, &row, NULL) < 0)
    return true;
  const char *st = json_string_value(json_object_get(row, "status"));
  return st && (strcmp(st, "completed") == 0 || strcmp(st, "cancelled") == 0);
}

/* Formats the events after s->after into s->out: how many. */
static int fetch(struct sse *s) {
  _cleanup_json_ json_t *evs = NULL;
  struct sbx_error e = {0};
  if (store_events_after(s->srv->store, s->id, s->after, BATCH, &evs, &e) < 0) {
    log_warn("events of run %s: %s", s->id, e.msg);
    return -EIO;
  }
  size_t i;
  json_t *ev;
  json_array_foreach(evs, i, ev) {
    int64_t seq = json_integer_value(json_object_get(ev, "seq"));
    const char *type = json_string_value(json_object_get(ev, "type"));
    const char *data = json_string_value(json_object_get(ev, "data"));
    if (!type || !data)
      continue;
    /* The data is compact JSON with \u escapes: one line. */
    if (sbx_buf_printf(&s->out, "id: %lld\nevent: %s\ndata: %s\n\n",
                       (long long)seq, type, data) < 0)
      return -ENOMEM;
    s->after = seq;
    if (server_event_terminal(type))
      s->ended = true;
  }
  return (int)json_array_size(evs);
}

static ssize_t sse_read(void *arg, char *buf, size_t max,
                        const struct http_stream *st) {
  struct sse *s = arg;
  for (;;) {
    if (s->off < s->out.len) {
      size_t n = s->out.len - s->off;
      n = n < max ? n : max;
      memcpy(buf, s->out.data + s->off, n);
      s->off += n;
      if (s->off == s->out.len) {
        sbx_buf_reset(&s->out);
        s->off = 0;
      }
      s->last_write_ms = store_now_ms();
      return (ssize_t)n;
    }
    if (s->ended || http_stream_over(st))
      return 0;
    int got = fetch(s);
    if (got < 0)
      return got;
    if (got > 0)
      continue;
    if (!s->follow)
      return 0;
    /* A run that ended without a terminal event in its stream (events
     * cannot be lost, but a stream must not hang on one that was). */
    if (run_over(s) && fetch(s) == 0)
      return 0;
    if (store_now_ms() - s->last_write_ms >= KEEPALIVE_MS) {
      if (sbx_buf_append_str(&s->out, ": keep-alive\n\n") < 0)
        return -ENOMEM;
      continue;
    }
    pthread_mutex_lock(&s->srv->mu);
    if (!http_stream_over(st)) {
      struct timespec ts;
      (void)clock_gettime(CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += POLL_MS * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      (void)pthread_cond_timedwait(&s->srv->events_cv, &s->srv->mu, &ts);
    }
    pthread_mutex_unlock(&s->srv->mu);
  }
}

/* The seq the client saw last: Last-Event-ID, else ?after, else 0. -1
 * when it is not a number. */
static int64_t resume_point(struct http_req *r) {
  const char *v = http_req_header(r, "Last-Event-ID");
  if (!v)
    v = http_req_query(r, "after");
  if (!v || !*v)
    return 0;
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  return errno || *end || n < 0 ? -1 : n;
}

void api_runs_events(struct api *a) {
  const char *id = a->param[0];
  _cleanup_json_ json_t *row = NULL;
  struct sbx_error e = {0};
  int r = server_run_id_valid(id) ? store_run_get(a->srv->store, id, &row, &e)
                                  : -ENOENT;
  if (r == -ENOENT) {
    (void)api_error(a, 404, "not_found", "no run \"%s\"", id);
    return;
  }
  if (r < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  const char *follow = http_req_query(a->r, "follow");
  if (follow && strcmp(follow, "true") != 0 && strcmp(follow, "false") != 0) {
    (void)api_error(a, 400, "invalid_request", "\"follow\" is true or false");
    return;
  }
  int64_t after = resume_point(a->r);
  if (after < 0) {
    (void)api_error(a, 400, "invalid_request",
                    "Last-Event-ID and \"after\" must be an event's seq");
    return;
  }
  struct sse *s = calloc(1, sizeof(*s));
  if (!s) {
    (void)api_error(a, 500, "internal", "out of memory");
    return;
  }
  s->srv = a->srv;
  (void)snprintf(s->id, sizeof(s->id), "%s", id);
  s->after = after;
  s->follow = !follow || strcmp(follow, "true") == 0;
  s->last_write_ms = store_now_ms();
  sbx_buf_init(&s->out, (size_t)64 << 20);
  (void)http_add_header(a->r, "X-Accel-Buffering", "no");
  if (sbx_buf_append_str(&s->out, "retry: 1000\n\n") < 0) {
    sse_free(s);
    (void)api_error(a, 500, "internal", "out of memory");
    return;
  }
  if (http_reply_stream(a->r, 200, "text/event-stream", sse_read, s, sse_free) <
      0)
    log_warn("events of run %s: cannot start the stream", id);
}
