/* A run's row in the state store, the same for sbx run and sbx serve
 * (runs.h). */
#include "controller/runs/runs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller/telemetry/events.h"
#include "shared/cleanup.h"
#include "shared/log.h"
#include "shared/rand.h"

static const char *const running[] = {"running", NULL};

bool runs_id_valid(const char *id) {
  size_t n = strlen(RUNS_ID_PREFIX);
  return strncmp(id, RUNS_ID_PREFIX, n) == 0 && strlen(id + n) == 32 &&
         strspn(id + n, "0123456789abcdef") == 32;
}

int runs_new_id(char id[RUNS_ID_MAX]) {
  char hex[33];
  int r = sbx_random_id(hex);
  if (r < 0)
    return r;
  (void)snprintf(id, RUNS_ID_MAX, RUNS_ID_PREFIX "%s", hex);
  return 0;
}

/* Records BATCH (stolen) of REC's events; one at a time when the batch
 * fails, so that one bad event loses no other. */
static void record(struct runs_rec *rec, json_t *batch) {
  struct sbx_error e = {0};
  if (store_events_add(rec->store, rec->id, batch, &e) < 0) {
    size_t i;
    json_t *ev;
    json_array_foreach(batch, i, ev) {
      json_int_t seq = json_integer_value(json_object_get(ev, "seq"));
      _cleanup_json_ json_t *one = json_pack("[O]", ev);
      memset(&e, 0, sizeof(e));
      if (!one || store_events_add(rec->store, rec->id, one, &e) < 0)
        log_warn("run %s: cannot record event %lld: %s", rec->id,
                 (long long)seq, e.msg[0] ? e.msg : "out of memory");
    }
  }
  json_decref(batch);
  if (rec->recorded)
    rec->recorded(rec->recorded_arg);
}

static bool rec_queued(void *arg) {
  struct runs_rec *rec = arg;
  return json_array_size(rec->queue) > 0;
}

static void *rec_take(void *arg) {
  struct runs_rec *rec = arg;
  json_t *fresh = json_array();
  if (!fresh)
    return NULL;
  json_t *batch = rec->queue;
  rec->queue = fresh;
  return batch;
}

static void rec_write(void *arg, void *batch) {
  record(arg, batch);
}

static const struct batcher_ops rec_ops = {
    .queued = rec_queued, .take = rec_take, .write = rec_write};

int runs_rec_init(struct runs_rec *rec, struct store *s, const char *id) {
  memset(rec, 0, sizeof(*rec));
  rec->store = s;
  (void)snprintf(rec->id, sizeof(rec->id), "%s", id);
  rec->pending = json_array();
  rec->queue = json_array();
  if (!rec->pending || !rec->queue ||
      batcher_start(&rec->w, RUNS_LINGER_MS, &rec_ops, rec) < 0) {
    json_decref(rec->pending);
    json_decref(rec->queue);
    rec->pending = rec->queue = NULL;
    return -ENOMEM;
  }
  return 0;
}

void runs_rec_flush(struct runs_rec *rec) {
  batcher_flush(&rec->w);
}

void runs_rec_clear(struct runs_rec *rec) {
  if (!rec->pending)
    return;
  batcher_stop(&rec->w);
  json_decref(rec->pending);
  json_decref(rec->queue);
  rec->pending = rec->queue = NULL;
}

void runs_sink(void *arg, uint64_t seq, const char *type, const char *line,
               size_t len) {
  struct runs_rec *rec = arg;
  json_t *p = NULL;
  if (strcmp(type, "approval_requested") == 0) {
    json_error_t je;
    _cleanup_json_ json_t *ev = json_loadb(line, len, 0, &je);
    p = json_pack("{s:O?, s:O?, s:O?}", "call_id",
                  json_object_get(ev, "call_id"), "tool",
                  json_object_get(ev, "name"), "arguments",
                  json_object_get(ev, "arguments"));
  }
  json_t *ev = json_pack("{s:I, s:s, s:s%}", "seq", (json_int_t)seq, "type",
                         type, "data", line, len);
  batcher_lock(&rec->w);
  if (p && json_array_append_new(rec->pending, p) < 0)
    log_warn("run %s: cannot keep an approval: out of memory", rec->id);
  while (rec->w.started && json_array_size(rec->queue) >= RUNS_QUEUE_MAX)
    batcher_wait(&rec->w);
  bool first = json_array_size(rec->queue) == 0;
  bool queued = rec->w.started && ev && json_array_append(rec->queue, ev) == 0;
  if (queued && first) /* the writer sleeps only while none waits */
    batcher_queued(&rec->w);
  batcher_unlock(&rec->w);
  if (!queued && ev) /* no writer: recorded here */
    record(rec, json_pack("[O]", ev));
  else if (!ev)
    log_warn("run %s: cannot record event %llu: out of memory", rec->id,
             (unsigned long long)seq);
  json_decref(ev);
}

/* The status a run is left in when the runner returned R. */
static const char *status_of(int r) {
  if (r == 0)
    return "completed";
  if (r == RUNNER_PAUSED)
    return "waiting_approval";
  if (r == -ECANCELED)
    return "cancelled";
  if (r == -EINTR)
    return "running"; /* goes on when taken up again */
  return "failed";
}

int runs_finish(struct runs_rec *rec, json_t *result, int r,
                const struct run_result *res, const struct sbx_error *re,
                struct sbx_error *e) {
  runs_rec_flush(rec);
  batcher_lock(&rec->w);
  json_t *pending = r == RUNNER_PAUSED ? json_deep_copy(rec->pending) : NULL;
  batcher_unlock(&rec->w);
  (void)json_object_set_new(result, "pending_approvals",
                            pending ? pending : json_array());
  (void)json_object_set_new(result, "final_output",
                            r == 0 && res->final_output
                                ? json_string(res->final_output)
                                : json_null());
  (void)json_object_set_new(result, "usage", events_usage_json(&res->usage));
  (void)json_object_set_new(result, "turns", json_integer(res->turns));
  json_t *err = json_null();
  if (r < 0 && r != -EINTR && r != -ECANCELED)
    err = json_pack(
        "{s:s, s:s}", "code",
        sbx_code_name(re->code != SBX_OK ? re->code : sbx_code_from_errno(-r)),
        "message", re->msg[0] ? re->msg : strerror(-r));
  /* A tripwire names its guardrail: the run is not retried as it is. */
  if (json_is_object(err) && res->guardrail)
    (void)json_object_set_new(
        err, "guardrail",
        json_pack("{s:s, s:s, s:O?}", "name", res->guardrail, "kind",
                  res->guardrail_kind, "output_info", res->guardrail_info));
  (void)json_object_set_new(result, "error", err);
  return store_run_update(rec->store, rec->id, running, status_of(r), result,
                          e);
}

/* Whether CALL_ID is among PENDING's calls. */
static bool pending_has(json_t *pending, const char *call_id) {
  size_t i;
  json_t *p;
  json_array_foreach(pending, i, p) {
    const char *c = json_string_value(json_object_get(p, "call_id"));
    if (c && strcmp(c, call_id) == 0)
      return true;
  }
  return false;
}

/* Takes the decided calls out of the run's pending approvals, by the
 * store's decisions (what every process records, so two decisions at
 * once in two processes cannot lose one); the run goes back to the
 * queue when none is left. */
static int settle(struct store *s, const char *id, json_t *row, bool *queued,
                  struct sbx_error *e) {
  _cleanup_json_ json_t *decided = NULL;
  int r = store_decisions_get(s, id, &decided, e);
  if (r < 0)
    return r;
  json_t *res = json_object_get(row, "result");
  json_t *pending = json_object_get(res, "pending_approvals");
  for (size_t i = json_array_size(pending); i-- > 0;) {
    const char *c = json_string_value(
        json_object_get(json_array_get(pending, i), "call_id"));
    if (!c || json_object_get(decided, c))
      (void)json_array_remove(pending, i);
  }
  static const char *const waiting[] = {"waiting_approval", NULL};
  bool done = json_array_size(pending) == 0;
  r = store_run_update(s, id, waiting, done ? "queued" : NULL, res, e);
  if (r == -ESTALE)
    return 0; /* another decision queued it first */
  if (r == 0)
    *queued = done;
  return r;
}

int runs_decide(struct store *s, const char *id, const char *call_id,
                bool approve, const char *reason, bool *queued,
                struct sbx_error *e) {
  *queued = false;
  _cleanup_json_ json_t *row = NULL;
  int r = store_run_get(s, id, &row, e);
  if (r < 0)
    return r;
  const char *status = json_string_value(json_object_get(row, "status"));
  json_t *pending =
      json_object_get(json_object_get(row, "result"), "pending_approvals");
  if (strcmp(status, "waiting_approval") != 0 || !pending_has(pending, call_id))
    return sbx_error_set(e, SBX_CONFLICT, ESRCH,
                         "run %s has no call \"%s\" waiting for approval (it "
                         "is %s)",
                         id, call_id, status);
  /* The runner takes the decision from the store when the run goes on. */
  r = store_decision_add(s, id, call_id, approve ? "approve" : "reject", reason,
                         e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_CONFLICT, EEXIST,
                         "call \"%s\" is decided already", call_id);
  return r < 0 ? r : settle(s, id, row, queued, e);
}

int runs_cancel(struct store *s, const char *id, struct sbx_error *e) {
  _cleanup_json_ json_t *row = NULL;
  int r = store_run_get(s, id, &row, e);
  if (r < 0)
    return r;
  const char *status = json_string_value(json_object_get(row, "status"));
  if (strcmp(status, "completed") == 0 || strcmp(status, "cancelled") == 0)
    return sbx_error_set(e, SBX_CONFLICT, EALREADY, "run %s is %s already", id,
                         status);
  r = store_run_cancel_request(s, id, e);
  if (r < 0)
    return r;
  static const char *const waiting[] = {"waiting_approval", "failed", NULL};
  r = store_run_update(s, id, waiting, "queued", NULL, e);
  return r == -ESTALE ? 0 : r;
}

static json_t *time_json(json_t *ms) {
  char ts[32];
  events_format_timestamp((uint64_t)json_integer_value(ms), ts);
  return json_string(ts);
}

bool runs_of_cli(json_t *row) {
  const char *owner = json_string_value(json_object_get(row, "owner"));
  return owner && strcmp(owner, RUNS_CLI_OWNER) == 0;
}

json_t *runs_view(json_t *row) {
  json_t *req = json_object_get(row, "request");
  json_t *res = json_object_get(row, "result");
  json_t *md = json_object_get(req, "metadata");
  json_t *pending = json_object_get(res, "pending_approvals");
  json_t *usage = json_object_get(res, "usage");
  json_t *out = json_object_get(res, "final_output");
  json_t *err = json_object_get(res, "error");
  json_t *until = json_object_get(res, "retry_until_ms");
  json_t *cont = json_object_get(req, "continues");
  return json_pack(
      "{s:O, s:O, s:O?, s:o, s:O, s:O, s:O, s:o, s:b, s:s, s:o, s:o, s:o, "
      "s:O?}",
      "id", json_object_get(row, "id"), "status",
      json_object_get(row, "status"), "agent",
      json_object_get(json_object_get(req, "agent"), "name"), "metadata",
      json_is_object(md) ? json_incref(md) : json_object(), "final_output",
      out ? out : json_null(), "error", err ? err : json_null(), "usage",
      usage ? usage : json_null(), "pending_approvals",
      json_is_array(pending) ? json_incref(pending) : json_array(),
      "cancel_requested",
      json_is_true(json_object_get(row, "cancel_requested")), "origin",
      runs_of_cli(row) ? "cli" : "api", "created_at",
      time_json(json_object_get(row, "created_at")), "updated_at",
      time_json(json_object_get(row, "updated_at")), "retry_until",
      json_is_integer(until) ? time_json(until) : json_null(), "continues",
      json_is_string(cont) ? cont : NULL);
}
