/* The sandboxes of the API: created for a manifest on a backend, listed,
 * read and removed. They are developer-owned sandboxes as `sbx sandbox
 * create` makes them (a record in the state directory), with their owner
 * and listing in the store. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/config/manifest.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/server/server_internal.h"
#include "controller/state/state.h"
#include "controller/telemetry/events.h"
#include "shared/cleanup.h"

unsigned api_status_for(const struct sbx_error *e, int r) {
  enum sbx_code c = e->code != SBX_OK ? e->code : sbx_code_from_errno(-r);
  switch (c) {
  case SBX_NOT_FOUND:
    return 404;
  case SBX_INVALID_ARGUMENT:
  case SBX_NOT_SUPPORTED:
    return 422;
  case SBX_PERMISSION_DENIED:
    return 403;
  case SBX_CONFLICT:
  case SBX_ALREADY_EXISTS:
    return 409;
  case SBX_LIMIT_EXCEEDED:
    return 413;
  case SBX_TIMED_OUT:
    return 504;
  case SBX_UNAVAILABLE:
    return 503;
  default:
    return 500;
  }
}

int api_fail(struct api *a, const struct sbx_error *e, int r) {
  enum sbx_code c = e->code != SBX_OK ? e->code : sbx_code_from_errno(-r);
  char code[32];
  const char *n = sbx_code_name(c);
  size_t i = 0;
  for (; n[i] && i < sizeof(code) - 1; i++)
    code[i] = (char)(n[i] >= 'A' && n[i] <= 'Z' ? n[i] + 32 : n[i]);
  code[i] = '\0';
  return api_error(a, api_status_for(e, r), code, "%s",
                   e->msg[0] ? e->msg : strerror(-r));
}

/* Whether the path's sandbox is one of the API's: 0, or a reply sent. */
static int known(struct api *a) {
  struct sbx_error e = {0};
  const char *id = a->param[0];
  _cleanup_json_ json_t *row = NULL;
  int r = strlen(id) == STATE_ID_LEN
              ? store_sandbox_get(a->srv->store, id, &row, &e)
              : -ENOENT;
  if (r == -ENOENT)
    return api_error(a, 404, "not_found", "no sandbox \"%s\"", id);
  return r < 0 ? api_error(a, 503, "unavailable", "%s", e.msg) : 0;
}

int api_sandbox_attach(struct api *a, struct sb_use *u) {
  *u = (struct sb_use){0};
  if (known(a) < 0)
    return -1;
  struct sbx_error e = {0};
  int r = attached_get(a->srv, a->param[0], u, &e);
  return r < 0 ? api_fail(a, &e, r) : 0;
}

/* The request's manifest (an empty one when absent), checked to reach
 * none of the server's files. 0, or a reply sent. */
static int request_manifest(struct api *a, json_t *body, struct manifest **m) {
  json_t *mj = json_object_get(body, "manifest");
  _cleanup_json_ json_t *empty = mj ? NULL : json_object();
  struct sbx_error e = {0};
  int r = manifest_parse(mj ? mj : empty, "manifest", m, &e);
  if (r == 0 && (r = server_manifest_check(*m, "manifest", &e)) < 0)
    *m = manifest_free(*m);
  return r < 0 ? api_error(a, 422, "invalid_manifest", "%s", e.msg) : 0;
}

/* The token's sandboxes over its quota: 0, or a reply sent. */
static int check_quota(struct api *a) {
  unsigned quota = a->srv->cfg->max_sandboxes;
  if (!quota)
    return 0;
  _cleanup_json_ json_t *mine = NULL;
  struct sbx_error e = {0};
  if (store_sandbox_list(a->srv->store, a->token, &mine, &e) < 0)
    return api_error(a, 503, "unavailable", "%s", e.msg);
  if (json_array_size(mine) < quota)
    return 0;
  (void)http_add_header(a->r, "Retry-After", "30");
  return api_error(a, 429, "quota_exceeded",
                   "the token \"%s\" has %zu sandboxes, its quota: remove "
                   "one first",
                   a->token, json_array_size(mine));
}

/* A sandbox's row as the API shows it, with its status: "running" when
 * its sandboxd answers (asked of it now), else "stopped"; its time in
 * RFC 3339, as a run's. */
static json_t *sandbox_view(struct api *a, json_t *row) {
  json_t *rec = json_object_get(row, "record");
  const char *id = json_string_value(json_object_get(row, "id"));
  bool running = id && lifecycle_running(a->srv->cfg->state_dir, id);
  char created[32];
  events_format_timestamp(
      (uint64_t)json_integer_value(json_object_get(row, "created_at")),
      created);
  return json_pack(
      "{s:O, s:O?, s:O?, s:O?, s:O?, s:s, s:s}", "id",
      json_object_get(row, "id"), "backend", json_object_get(rec, "backend"),
      "session_id", json_object_get(rec, "session_id"), "root",
      json_object_get(rec, "root"), "owner", json_object_get(row, "owner"),
      "created_at", created, "status", running ? "running" : "stopped");
}

/* Creates the sandbox of the checked request in the state directory. */
static int create(struct api *a, const struct backend *b, void *own,
                  const struct manifest *m, char id[STATE_ID_LEN + 1],
                  struct sbx_error *e) {
  const char *dir = a->srv->cfg->state_dir;
  char tok[4200], logp[4200], created[32];
  int r = state_new_id(id);
  if (r < 0 || state_path(dir, id, "token", tok, sizeof(tok)) < 0 ||
      state_path(dir, id, "log", logp, sizeof(logp)) < 0)
    return sbx_error_set(e, SBX_INTERNAL, r ? -r : ENAMETOOLONG,
                         "cannot name a new sandbox");
  struct lifecycle_options lo = {.backend = b};
  lo.bo.own = own;
  lo.bo.state_dir = dir;
  lo.mo.limits = materialize_default_limits();
  state_now(created);
  struct sandbox *sb = NULL;
  r = lifecycle_create(&lo, m, true, tok, logp, &sb, e);
  if (r == 0)
    r = lifecycle_save(dir, id, sb, m, NULL, 0, created, (long)getpid(), e);
  _cleanup_json_ json_t *rec =
      r == 0 ? json_pack("{s:s, s:s, s:s}", "backend", sb->backend->name,
                         "session_id", sb->session_id, "root", sb->root)
             : NULL;
  if (r == 0 && !rec)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r == 0)
    r = store_sandbox_put(a->srv->store, id, a->token, rec, e);
  if (r < 0 && sb) {
    struct sbx_error ce = {0};
    (void)sb->backend->close(sb, &ce);
    sb = NULL;
  }
  if (r < 0)
    state_remove(dir, id);
  if (sb)
    sb->backend->detach(sb);
  return r;
}

void api_sandboxes_create(struct api *a) {
  _cleanup_json_ json_t *body = NULL;
  if (api_body_object(a, &body) < 0)
    return;
  static const char *const keys[] = {"manifest", "backend", "options", NULL};
  if (api_known_members(a, body, "a sandbox", keys) < 0)
    return;
  json_t *bj = json_object_get(body, "backend");
  if (bj && !json_is_string(bj))
    return (void)api_error(a, 400, "invalid_request",
                           "\"backend\" must be a backend's name");
  const struct backend *b = backend_find(json_string_value(bj));
  if (!b)
    return (void)api_error(a, 422, "invalid_request", "unknown backend \"%s\"",
                           json_string_value(bj));
  struct manifest *m = NULL;
  if (request_manifest(a, body, &m) < 0)
    return;
  if (check_quota(a) < 0) {
    manifest_free(m);
    return;
  }
  struct sbx_error e = {0};
  void *own = NULL;
  json_t *opts = json_object_get(body, "options");
  int r = api_has_scope(a, "admin")
              ? 0
              : backend_options_check_api(b, opts, "options", &e);
  if (r == 0)
    r = backend_options_parse(b, opts, "options", &own, &e);
  char id[STATE_ID_LEN + 1];
  if (r == 0)
    r = create(a, b, own, m, id, &e);
  backend_options_free(b, own);
  manifest_free(m);
  if (r < 0)
    return (void)api_fail(a, &e, r);
  _cleanup_json_ json_t *row = NULL;
  if (store_sandbox_get(a->srv->store, id, &row, &e) < 0)
    return (void)api_fail(a, &e, -EIO);
  char loc[64];
  (void)snprintf(loc, sizeof(loc), "/v1/sandboxes/%s", id);
  (void)http_add_header(a->r, "Location", loc);
  (void)api_reply(a, 201, sandbox_view(a, row));
}

void api_sandboxes_list(struct api *a) {
  _cleanup_json_ json_t *rows = NULL;
  struct sbx_error e = {0};
  if (store_sandbox_list(a->srv->store, NULL, &rows, &e) < 0)
    return (void)api_error(a, 503, "unavailable", "%s", e.msg);
  json_t *data = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    (void)json_array_append_new(data, sandbox_view(a, row));
  }
  (void)api_reply(a, 200, json_pack("{s:o}", "data", data));
}

void api_sandboxes_get(struct api *a) {
  _cleanup_json_ json_t *row = NULL;
  struct sbx_error e = {0};
  int r = store_sandbox_get(a->srv->store, a->param[0], &row, &e);
  if (r == -ENOENT)
    return (void)api_error(a, 404, "not_found", "no sandbox \"%s\"",
                           a->param[0]);
  if (r < 0)
    return (void)api_error(a, 503, "unavailable", "%s", e.msg);
  (void)api_reply(a, 200, sandbox_view(a, row));
}

void api_sandboxes_delete(struct api *a) {
  if (known(a) < 0)
    return;
  const char *id = a->param[0];
  attached_forget(a->srv, id);
  struct lifecycle_record rec;
  struct sbx_error e = {0};
  int r = lifecycle_load(a->srv->cfg->state_dir, id, &rec, &e);
  struct backend_options bo = {0};
  struct sandbox *sb = NULL;
  if (r == 0 && (r = lifecycle_attach(&rec, &bo, &sb, &e)) == 0)
    r = sb->backend->close(sb, &e);
  if (r == 0 || r != -ENOMEM)
    lifecycle_record_clear(&rec);
  if (r < 0)
    return (void)api_fail(a, &e, r);
  state_remove(a->srv->cfg->state_dir, id);
  (void)store_sandbox_remove(a->srv->store, id, &e);
  (void)http_reply(a->r, 204, NULL, "", 0);
}
