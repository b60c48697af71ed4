/* The runs of the API: submitted (queued in the store for a worker),
 * listed, read, cancelled, decided on and retried. docs/api.md is the
 * contract. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/run/runner.h"
#include "controller/server/server_internal.h"
#include "controller/telemetry/events.h"
#include "shared/cleanup.h"
#include "shared/log.h"
#include "shared/rand.h"

#define MAX_TURNS_LIMIT 1000
#define METADATA_MAX_KEYS 64
#define METADATA_MAX_BYTES 16384
#define LIST_DEFAULT 50
#define REASON_MAX RUNS_REASON_MAX

static const char *const unfinished[] = {"queued", "running",
                                         "waiting_approval", NULL};
static const char *const statuses[] = {
    "queued",    "running", "waiting_approval", "completed", "failed",
    "cancelled", NULL};

bool server_has_state(struct server *srv, const char *id) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  return store_state_get(srv->store, id, &text, &len, NULL) == 0 && len > 0;
}

/* Replies with the run ID as it is now, with STATUS. */
static void reply_run(struct api *a, unsigned status, const char *id) {
  _cleanup_json_ json_t *row = NULL;
  struct sbx_error e = {0};
  if (store_run_get(a->srv->store, id, &row, &e) < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  (void)api_reply(a, status, runs_view(row));
}

/* The run of the path's first parameter: 0 with *ROW (new), or a reply
 * sent (404, 503). */
static int load_run(struct api *a, json_t **row) {
  struct sbx_error e = {0};
  const char *id = a->param[0];
  int r = server_run_id_valid(id) ? store_run_get(a->srv->store, id, row, &e)
                                  : -ENOENT;
  if (r == -ENOENT)
    return api_error(a, 404, "not_found", "no run \"%s\"", id);
  if (r < 0)
    return api_error(a, 503, "unavailable", "%s", e.msg);
  return 0;
}

/* A run's sandbox_id: one of the API's sandboxes, the token's own (or any
 * for admin). 0, or a reply sent. */
static int check_sandbox(struct api *a, json_t *sid) {
  const char *id = json_string_value(sid);
  if (!id)
    return api_error(a, 400, "invalid_request",
                     "\"sandbox_id\" must be the id of one of the server's "
                     "sandboxes");
  _cleanup_json_ json_t *row = NULL;
  struct sbx_error e = {0};
  int r = store_sandbox_get(a->srv->store, id, &row, &e);
  if (r == -ENOENT)
    return api_error(a, 422, "invalid_request",
                     "no sandbox \"%s\" (make one with POST /v1/sandboxes)",
                     id);
  if (r < 0)
    return api_error(a, 503, "unavailable", "%s", e.msg);
  const char *owner = json_string_value(json_object_get(row, "owner"));
  if (!api_has_scope(a, "admin") && (!owner || strcmp(owner, a->token) != 0))
    return api_error(a, 403, "forbidden", "sandbox %s belongs to another token",
                     id);
  return 0;
}

/* Checks a new run's members other than the agent: 0, or a reply sent. */
static int check_request(struct api *a, json_t *body) {
  static const char *const keys[] = {"agent",      "input",     "run_config",
                                     "sandbox_id", "max_turns", "metadata",
                                     NULL};
  if (api_known_members(a, body, "a run", keys) < 0)
    return -1;
  if (!json_is_object(json_object_get(body, "agent")))
    return api_error(a, 400, "invalid_request",
                     "\"agent\" is required: the agent file's JSON object");
  if (!json_is_string(json_object_get(body, "input")))
    return api_error(a, 400, "invalid_request",
                     "\"input\" is required: the prompt, a string");
  json_t *rc = json_object_get(body, "run_config");
  if (rc && !json_is_object(rc))
    return api_error(a, 400, "invalid_request",
                     "\"run_config\" must be an object");
  json_t *sid = json_object_get(body, "sandbox_id");
  if (sid && check_sandbox(a, sid) < 0)
    return -1;
  json_t *mt = json_object_get(body, "max_turns");
  if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
             json_integer_value(mt) > MAX_TURNS_LIMIT))
    return api_error(a, 400, "invalid_request",
                     "\"max_turns\" must be a whole number from 1 to %d",
                     MAX_TURNS_LIMIT);
  json_t *md = json_object_get(body, "metadata");
  if (md) {
    _cleanup_free_ char *t = json_dumps(md, JSON_COMPACT);
    if (!json_is_object(md) || json_object_size(md) > METADATA_MAX_KEYS || !t ||
        strlen(t) > METADATA_MAX_BYTES)
      return api_error(a, 400, "invalid_request",
                       "\"metadata\" must be an object of at most %d "
                       "members and %d bytes",
                       METADATA_MAX_KEYS, METADATA_MAX_BYTES);
  }
  return 0;
}

/* The token's unfinished runs, counted up to LIMIT. */
static int count_unfinished(struct api *a, size_t limit, size_t *n,
                            struct sbx_error *e) {
  *n = 0;
  for (size_t i = 0; unfinished[i]; i++) {
    _cleanup_json_ json_t *rows = NULL;
    int64_t next = 0;
    int r = store_run_list(a->srv->store, unfinished[i], a->token, 0, limit,
                           &rows, &next, e);
    if (r < 0)
      return r;
    *n += json_array_size(rows);
  }
  return 0;
}

void api_runs_create(struct api *a) {
  _cleanup_json_ json_t *body = NULL;
  if (api_body_object(a, &body) < 0 || check_request(a, body) < 0)
    return;
  /* run_config in the request is laid over the agent's own. */
  _cleanup_json_ json_t *agent = json_deep_copy(json_object_get(body, "agent"));
  json_t *rc = json_object_get(body, "run_config");
  if (agent && rc) {
    json_t *own = json_object_get(agent, "run_config");
    if (json_is_object(own))
      (void)json_object_update(own, rc);
    else
      (void)json_object_set(agent, "run_config", rc);
  }
  struct sbx_error e = {0};
  struct agent_set *set = NULL;
  if (!agent || server_agent_load(a->srv, agent, api_has_scope(a, "admin"),
                                  &set, &e) < 0) {
    unsigned st = !agent ? 500 : e.code == SBX_PERMISSION_DENIED ? 403 : 422;
    (void)api_error(a, st, st == 403 ? "forbidden" : "invalid_agent", "%s",
                    agent ? e.msg : "out of memory");
    return;
  }
  agent_set_free(set);
  unsigned quota = a->srv->cfg->max_runs;
  size_t n = 0;
  if (quota && count_unfinished(a, quota, &n, &e) < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  if (quota && n >= quota) {
    (void)http_add_header(a->r, "Retry-After", "5");
    (void)api_error(a, 429, "quota_exceeded",
                    "the token \"%s\" has %zu unfinished runs, its quota",
                    a->token, n);
    return;
  }
  char hex[33], id[SERVER_ID_MAX];
  if (sbx_random_id(hex) < 0) {
    (void)api_error(a, 500, "internal", "cannot make a run id");
    return;
  }
  (void)snprintf(id, sizeof(id), SERVER_RUN_PREFIX "%s", hex);
  _cleanup_json_ json_t *request = json_pack(
      "{s:O, s:O}", "agent", agent, "input", json_object_get(body, "input"));
  static const char *const optional[] = {"max_turns", "metadata", "sandbox_id",
                                         NULL};
  for (size_t i = 0; request && optional[i]; i++) {
    json_t *v = json_object_get(body, optional[i]);
    if (v)
      (void)json_object_set(request, optional[i], v);
  }
  if (!request || store_run_insert(a->srv->store, id, a->token, "queued",
                                   request, &e) < 0) {
    (void)api_error(a, 503, "unavailable", "%s",
                    request ? e.msg : "out of memory");
    return;
  }
  executor_wake(a->srv);
  char loc[128];
  (void)snprintf(loc, sizeof(loc), "/v1/runs/%s", id);
  (void)http_add_header(a->r, "Location", loc);
  reply_run(a, 201, id);
}

void api_runs_list(struct api *a) {
  const char *status = http_req_query(a->r, "status");
  const char *limit_s = http_req_query(a->r, "limit");
  const char *cursor = http_req_query(a->r, "cursor");
  if (status) {
    size_t i = 0;
    while (statuses[i] && strcmp(statuses[i], status) != 0)
      i++;
    if (!statuses[i]) {
      (void)api_error(a, 400, "invalid_request",
                      "unknown status \"%s\" (queued, running, "
                      "waiting_approval, completed, failed, cancelled)",
                      status);
      return;
    }
  }
  char *end = NULL;
  long long limit = limit_s ? strtoll(limit_s, &end, 10) : LIST_DEFAULT;
  if (limit_s &&
      (end == limit_s || *end || limit < 1 || limit > STORE_LIST_MAX)) {
    (void)api_error(a, 400, "invalid_request",
                    "\"limit\" must be a whole number from 1 to %d",
                    STORE_LIST_MAX);
    return;
  }
  long long before = cursor ? strtoll(cursor, &end, 10) : 0;
  if (cursor && (end == cursor || *end || before < 1)) {
    (void)api_error(a, 400, "invalid_request",
                    "\"cursor\" must be a next_cursor this API gave");
    return;
  }
  _cleanup_json_ json_t *rows = NULL;
  int64_t next = 0;
  struct sbx_error e = {0};
  if (store_run_list(a->srv->store, status, NULL, before, (size_t)limit, &rows,
                     &next, &e) < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  json_t *data = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    (void)json_array_append_new(data, runs_view(row));
  }
  char nc[32];
  (void)snprintf(nc, sizeof(nc), "%lld", (long long)next);
  (void)api_reply(
      a, 200,
      json_pack("{s:o, s:s?}", "data", data, "next_cursor", next ? nc : NULL));
}

void api_runs_get(struct api *a) {
  _cleanup_json_ json_t *row = NULL;
  if (load_run(a, &row) < 0)
    return;
  (void)api_reply(a, 200, runs_view(row));
}

/* A run that waits (queued, for approvals, or failed and kept) goes back
 * to the queue marked cancelled: its worker resumes it only to stop it,
 * which removes its sandboxes and records run_cancelled. */
void api_runs_cancel(struct api *a) {
  _cleanup_json_ json_t *row = NULL;
  if (load_run(a, &row) < 0)
    return;
  struct server *srv = a->srv;
  const char *id = a->param[0];
  struct sbx_error e = {0};
  int r = runs_cancel(srv->store, id, &e);
  if (r < 0) {
    (void)api_error(a, r == -EALREADY ? 409 : 503,
                    r == -EALREADY ? "conflict" : "unavailable", "%s", e.msg);
    return;
  }
  pthread_mutex_lock(&srv->mu);
  struct job *j = executor_find(srv, id);
  if (j)
    j->cancel = true;
  pthread_mutex_unlock(&srv->mu);
  executor_wake(srv);
  reply_run(a, 202, id);
}

/* Checks a decision's body: 0 with *APPROVE and *REASON (borrowed from
 * BODY), or a reply sent. */
static int check_decision(struct api *a, json_t *body, bool *approve,
                          const char **reason) {
  static const char *const keys[] = {"decision", "reason", NULL};
  if (api_known_members(a, body, "a decision", keys) < 0)
    return -1;
  const char *d = json_string_value(json_object_get(body, "decision"));
  if (!d || (strcmp(d, "approve") != 0 && strcmp(d, "reject") != 0))
    return api_error(a, 400, "invalid_request",
                     "\"decision\" must be \"approve\" or \"reject\"");
  json_t *rs = json_object_get(body, "reason");
  if (rs && !json_is_null(rs) &&
      (!json_is_string(rs) || json_string_length(rs) > REASON_MAX))
    return api_error(a, 400, "invalid_request",
                     "\"reason\" must be a string of at most %d bytes",
                     REASON_MAX);
  *approve = strcmp(d, "approve") == 0;
  *reason = json_string_value(rs);
  return 0;
}

void api_runs_approve(struct api *a) {
  _cleanup_json_ json_t *body = NULL;
  _cleanup_json_ json_t *row = NULL;
  bool approve = false;
  const char *reason = NULL;
  if (api_body_object(a, &body) < 0 ||
      check_decision(a, body, &approve, &reason) < 0 || load_run(a, &row) < 0)
    return;
  struct server *srv = a->srv;
  const char *id = a->param[0], *call_id = a->param[1];
  struct sbx_error e = {0};
  bool queued = false;
  int r = runs_decide(srv->store, id, call_id, approve, reason, &queued, &e);
  if (r == -ESRCH || r == -EEXIST)
    (void)api_error(a, 409, "conflict", "%s", e.msg);
  else if (r < 0)
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
  else {
    if (queued && !runs_of_cli(row))
      executor_wake(srv);
    reply_run(a, 200, id);
  }
}

void api_runs_retry(struct api *a) {
  _cleanup_json_ json_t *row = NULL;
  if (load_run(a, &row) < 0)
    return;
  const char *id = a->param[0];
  static const char *const failed[] = {"failed", NULL};
  struct sbx_error e = {0};
  const char *status = json_string_value(json_object_get(row, "status"));
  if (strcmp(status, "failed") != 0) {
    (void)api_error(a, 409, "conflict",
                    "run %s is %s: only a failed run can be retried", id,
                    status);
    return;
  }
  if (runs_of_cli(row)) {
    (void)api_error(a, 409, "conflict",
                    "run %s was started by sbx run, which executes it: "
                    "continue it with `sbx run --resume %s`",
                    id, id);
    return;
  }
  if (!server_has_state(a->srv, id)) {
    (void)api_error(a, 409, "conflict",
                    "run %s failed before its first step: there is no "
                    "state to continue from",
                    id);
    return;
  }
  int r = store_run_update(a->srv->store, id, failed, "queued", NULL, &e);
  if (r == -ESTALE) {
    (void)api_error(a, 409, "conflict", "run %s is no longer failed", id);
    return;
  }
  if (r < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  executor_wake(a->srv);
  reply_run(a, 202, id);
}
