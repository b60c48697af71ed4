#include "controller/telemetry/events.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shared/buf.h"
#include "shared/clock.h"
#include "shared/json.h"
#include "shared/log.h"

struct events {
  FILE *out; /* borrowed; NULL with a sink */
  events_sink_fn sink;
  void *sink_arg;
  char run_id[33];
  pthread_mutex_t mu; /* seq, the FILE and write_failed */
  uint64_t seq;
  bool write_failed;
};

int events_new(FILE *out, const char *run_id, struct events **ev,
               struct sbx_error *e) {
  *ev = NULL;
  struct events *x = calloc(1, sizeof(*x));
  if (!x)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  x->out = out;
  (void)snprintf(x->run_id, sizeof(x->run_id), "%s", run_id ? run_id : "");
  if (pthread_mutex_init(&x->mu, NULL) != 0) {
    free(x);
    return sbx_error_set(e, SBX_OK, ENOMEM, "cannot create a mutex");
  }
  *ev = x;
  return 0;
}

int events_new_sink(events_sink_fn fn, void *arg, FILE *out, const char *run_id,
                    uint64_t last_seq, struct events **ev,
                    struct sbx_error *e) {
  int r = events_new(out, run_id, ev, e);
  if (r < 0)
    return r;
  (*ev)->sink = fn;
  (*ev)->sink_arg = arg;
  (*ev)->seq = last_seq;
  return 0;
}

struct events *events_free(struct events *ev) {
  if (!ev)
    return NULL;
  (void)pthread_mutex_destroy(&ev->mu);
  free(ev);
  return NULL;
}

void events_format_timestamp(uint64_t unix_ms, char out[32]) {
  time_t secs = (time_t)(unix_ms / 1000);
  struct tm tm;
  if (!gmtime_r(&secs, &tm)) {
    (void)snprintf(out, 32, "1970-01-01T00:00:00.000Z");
    return;
  }
  size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  (void)snprintf(out + n, 32 - n, ".%03uZ", (unsigned)(unix_ms % 1000));
}

void events_emit(struct events *ev, const char *type, json_t *fields) {
  if (!ev) {
    json_decref(fields);
    return;
  }
  /* The common fields first, so that a reader sees the type at once. */
  json_t *o = json_pack("{s:i, s:s, s:s}", "version", EVENTS_VERSION, "type",
                        type, "run_id", ev->run_id);
  pthread_mutex_lock(&ev->mu);
  char ts[32];
  events_format_timestamp(sbx_wall_ms(), ts);
  char *s = NULL;
  if (o &&
      json_object_set_new(o, "seq", json_integer((json_int_t)ev->seq + 1)) ==
          0 &&
      json_object_set_new(o, "timestamp", json_string(ts)) == 0 &&
      (!fields || json_object_update(o, fields) == 0))
    s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
  if (s) {
    ev->seq++;
    size_t n = strlen(s);
    if (ev->sink)
      ev->sink(ev->sink_arg, ev->seq, type, s, n);
    s[n] = '\n'; /* one fwrite per line: the NUL becomes the newline */
    bool ok = !ev->out ||
              (fwrite(s, 1, n + 1, ev->out) == n + 1 && fflush(ev->out) == 0);
    if (!ok && !ev->write_failed) {
      ev->write_failed = true;
      log_warn("writing --stream events: %s", strerror(errno));
    }
  }
  pthread_mutex_unlock(&ev->mu);
  free(s);
  json_decref(o);
  json_decref(fields);
}

/* ---- field helpers ------------------------------------------------------ */

/* A JSON string of [S, S+LEN), with invalid UTF-8 replaced; JSON null for
 * a NULL S. NULL only when out of memory. */
static json_t *str_n(const char *s, size_t len) {
  if (!s)
    return json_null();
  return sbx_json_stringn_utf8(s, len);
}

static json_t *str(const char *s) {
  return str_n(s, s ? strlen(s) : 0);
}

/* Sets KEY to V (stolen); marks *OK false when V or O is NULL (jansson
 * refuses a NULL object and frees V), so an event is built without a
 * check after each allocation. */
static void put(json_t *o, const char *key, json_t *v, bool *ok) {
  if (!v || json_object_set_new(o, key, v) < 0)
    *ok = false;
}

static void put_where(json_t *o, const struct events_where *w, bool *ok) {
  put(o, "agent", str(w->agent), ok);
  put(o, "depth", json_integer(w->depth), ok);
  put(o, "turn", json_integer(w->turn), ok);
}

json_t *events_usage_json(const struct model_usage *u) {
  static const struct model_usage zero;
  if (!u)
    u = &zero;
  return json_pack("{s:I, s:I, s:I, s:I, s:I}", "input_tokens",
                   (json_int_t)u->input_tokens, "output_tokens",
                   (json_int_t)u->output_tokens, "total_tokens",
                   (json_int_t)u->total_tokens, "reasoning_tokens",
                   (json_int_t)u->reasoning_tokens, "cached_tokens",
                   (json_int_t)u->cached_tokens);
}

/* Emits O when every field could be built; else drops the event (out of
 * memory) with a debug line. */
static void finish(struct events *ev, const char *type, json_t *o, bool ok) {
  if (!o || !ok) {
    log_debug("events: cannot build a %s event (out of memory)", type);
    json_decref(o);
    return;
  }
  events_emit(ev, type, o);
}

/* ---- the typed events --------------------------------------------------- */

void events_run_started(struct events *ev, const char *agent,
                        const char *backend, const char *model,
                        int64_t max_turns, const char *trace_id) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "agent", str(agent), &ok);
  put(o, "backend", str(backend), &ok);
  put(o, "model", str(model), &ok);
  put(o, "max_turns", json_integer((json_int_t)max_turns), &ok);
  put(o, "trace_id", str(trace_id), &ok);
  finish(ev, "run_started", o, ok);
}

void events_sandbox_created(struct events *ev, const struct events_where *w,
                            const char *session_id, const char *backend,
                            bool attached, json_t *exposed_ports) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "session_id", str(session_id), &ok);
  put(o, "backend", str(backend), &ok);
  put(o, "attached", json_boolean(attached), &ok);
  put(o, "exposed_ports",
      exposed_ports ? json_incref(exposed_ports) : json_object(), &ok);
  finish(ev, "sandbox_created", o, ok);
}

void events_agent_tool_started(struct events *ev, const struct events_where *w,
                               const char *parent_agent, const char *call_id) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "parent_agent", str(parent_agent), &ok);
  put(o, "call_id", str(call_id), &ok);
  finish(ev, "agent_tool_started", o, ok);
}

void events_text_delta(struct events *ev, const struct events_where *w,
                       const char *text, size_t len) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "delta", str_n(text ? text : "", text ? len : 0), &ok);
  finish(ev, "text_delta", o, ok);
}

/* The fields tool_call_started and approval_requested share. */
static json_t *call_fields(const struct events_where *w, const char *name,
                           const char *call_id, const char *arguments,
                           bool *ok) {
  json_t *o = json_object();
  *ok = o != NULL;
  if (o) {
    put_where(o, w, ok);
    put(o, "name", str(name ? name : ""), ok);
    put(o, "call_id", str(call_id ? call_id : ""), ok);
    put(o, "arguments", str(arguments ? arguments : ""), ok);
  }
  return o;
}

void events_tool_call_started(struct events *ev, const struct events_where *w,
                              const char *name, const char *call_id,
                              const char *arguments) {
  if (!ev)
    return;
  bool ok;
  json_t *o = call_fields(w, name, call_id, arguments, &ok);
  finish(ev, "tool_call_started", o, ok);
}

void events_approval_requested(struct events *ev, const struct events_where *w,
                               const char *name, const char *call_id,
                               const char *arguments, const char *run_state) {
  if (!ev)
    return;
  bool ok;
  json_t *o = call_fields(w, name, call_id, arguments, &ok);
  if (o)
    put(o, "run_state", str(run_state), &ok);
  finish(ev, "approval_requested", o, ok);
}

void events_tool_call_finished(struct events *ev, const struct events_where *w,
                               const char *name, const char *call_id,
                               const char *status, json_t *output,
                               const char *error, int64_t duration_ms) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "name", str(name ? name : ""), &ok);
  put(o, "call_id", str(call_id ? call_id : ""), &ok);
  put(o, "status", str(status), &ok);
  put(o, "output", output ? json_incref(output) : json_null(), &ok);
  put(o, "error", str(error), &ok);
  put(o, "duration_ms", json_integer((json_int_t)duration_ms), &ok);
  finish(ev, "tool_call_finished", o, ok);
}

void events_guardrail_tripped(struct events *ev, const struct events_where *w,
                              const char *name, const char *kind,
                              json_t *info) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "guardrail", str(name), &ok);
  put(o, "kind", str(kind), &ok);
  put(o, "output_info", info ? json_incref(info) : json_null(), &ok);
  finish(ev, "guardrail_tripped", o, ok);
}

void events_handoff(struct events *ev, const struct events_where *w,
                    const char *to, const char *call_id) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "from", str(w->agent), &ok);
  put(o, "to", str(to), &ok);
  put(o, "call_id", str(call_id ? call_id : ""), &ok);
  put(o, "depth", json_integer(w->depth), &ok);
  put(o, "turn", json_integer(w->turn), &ok);
  finish(ev, "handoff", o, ok);
}

void events_turn_finished(struct events *ev, const struct events_where *w,
                          const char *model, size_t tool_calls,
                          const struct model_usage *usage) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put_where(o, w, &ok);
  put(o, "model", str(model), &ok);
  put(o, "tool_calls", json_integer((json_int_t)tool_calls), &ok);
  put(o, "usage", events_usage_json(usage), &ok);
  finish(ev, "turn_finished", o, ok);
}

void events_run_finished(struct events *ev, const char *agent,
                         const char *final_output, int turns,
                         const struct model_usage *usage, int64_t duration_ms) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "agent", str(agent), &ok);
  put(o, "final_output", str(final_output ? final_output : ""), &ok);
  put(o, "turns", json_integer(turns), &ok);
  put(o, "usage", events_usage_json(usage), &ok);
  put(o, "duration_ms", json_integer((json_int_t)duration_ms), &ok);
  finish(ev, "run_finished", o, ok);
}

void events_run_failed(struct events *ev, const char *error, const char *code,
                       int exit_code, int turns,
                       const struct model_usage *usage, int64_t duration_ms) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "error", str(error ? error : ""), &ok);
  put(o, "code", str(code ? code : "INTERNAL"), &ok);
  put(o, "exit_code", json_integer(exit_code), &ok);
  put(o, "turns", json_integer(turns), &ok);
  put(o, "usage", events_usage_json(usage), &ok);
  put(o, "duration_ms", json_integer((json_int_t)duration_ms), &ok);
  finish(ev, "run_failed", o, ok);
}

void events_run_cancelled(struct events *ev, int turns,
                          const struct model_usage *usage,
                          int64_t duration_ms) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "turns", json_integer(turns), &ok);
  put(o, "usage", events_usage_json(usage), &ok);
  put(o, "duration_ms", json_integer((json_int_t)duration_ms), &ok);
  finish(ev, "run_cancelled", o, ok);
}

void events_run_paused(struct events *ev, const char *run_state, int turns) {
  if (!ev)
    return;
  json_t *o = json_object();
  bool ok = o != NULL;
  put(o, "run_state", str(run_state ? run_state : ""), &ok);
  put(o, "turns", json_integer(turns), &ok);
  finish(ev, "run_paused", o, ok);
}
