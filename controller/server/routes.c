/* The API's routes: one table of method, path pattern, the scope a token
 * needs, and the handler; a request is matched, authorized, replayed from
 * its Idempotency-Key when it has been answered before, and handed on. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"
#include "shared/sha256.h"
#include "shared/utf8.h"

#define PATH_MAX_BYTES 2048
#define SEGMENT_MAX 256
#define IDEM_KEY_MAX 255

struct route {
  const char *method;
  const char *pattern; /* "{name}" stands for one segment */
  const char *scope;   /* NULL: no token needed */
  void (*fn)(struct api *a);
};

static void api_healthz(struct api *a) {
  (void)api_reply(a, 200, json_pack("{s:s}", "status", "ok"));
}

static const struct route routes[] = {
    {"GET", "/healthz", NULL, api_healthz},
    /* The web page; the session routes check the cookie themselves. */
    {"GET", "/", NULL, api_ui_page},
    {"GET", "/ui/app.js", NULL, api_ui_script},
    {"GET", "/ui/app.css", NULL, api_ui_style},
    {"POST", "/ui/login", NULL, api_ui_login},
    {"POST", "/ui/logout", NULL, api_ui_logout},
    {"GET", "/ui/session", NULL, api_ui_session},
    {"GET", "/metrics", "read", api_metrics},
    {"GET", "/v1/openapi.json", NULL, api_openapi},
    {"POST", "/v1/runs", "run", api_runs_create},
    {"GET", "/v1/runs", "read", api_runs_list},
    {"GET", "/v1/runs/{run_id}", "read", api_runs_get},
    {"GET", "/v1/runs/{run_id}/events", "read", api_runs_events},
    {"POST", "/v1/runs/{run_id}/cancel", "run", api_runs_cancel},
    {"POST", "/v1/runs/{run_id}/approvals/{call_id}", "approve",
     api_runs_approve},
    {"POST", "/v1/runs/{run_id}/retry", "run", api_runs_retry},
    {"POST", "/v1/sandboxes", "run", api_sandboxes_create},
    {"GET", "/v1/sandboxes", "read", api_sandboxes_list},
    {"GET", "/v1/sandboxes/{sandbox_id}", "read", api_sandboxes_get},
    {"DELETE", "/v1/sandboxes/{sandbox_id}", "run", api_sandboxes_delete},
    {"POST", "/v1/sandboxes/{sandbox_id}/execs", "run", api_execs_start},
    {"GET", "/v1/sandboxes/{sandbox_id}/execs/{exec_id}", "read",
     api_execs_get},
    {"GET", "/v1/sandboxes/{sandbox_id}/execs/{exec_id}/output", "read",
     api_execs_output},
    {"POST", "/v1/sandboxes/{sandbox_id}/execs/{exec_id}/stdin", "run",
     api_execs_stdin},
    {"PUT", "/v1/sandboxes/{sandbox_id}/files/{path*}", "run", api_files_put},
    {"GET", "/v1/sandboxes/{sandbox_id}/files/{path*}", "read", api_files_get},
    {"DELETE", "/v1/sandboxes/{sandbox_id}/files/{path*}", "run",
     api_files_delete},
    {"POST", "/v1/sandboxes/{sandbox_id}/patch", "run", api_sandboxes_patch},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

const char *api_route_at(size_t i, const char **method) {
  if (i >= NROUTES)
    return NULL;
  *method = routes[i].method;
  return routes[i].pattern;
}

/* Whether PATH (a copy the parameters point into) matches PATTERN. */
static bool match(const char *pattern, char *path, const char **param) {
  size_t np = 0;
  const char *p = pattern;
  char *s = path;
  char *rest = NULL; /* where a {name*} parameter began */
  while (*p && *s) {
    if (*p != '/' || *s != '/')
      return false;
    p++, s++;
    const char *pe = strchrnul(p, '/');
    char *se = strchrnul(s, '/');
    size_t plen = (size_t)(pe - p), slen = (size_t)(se - s);
    if (plen > 2 && p[0] == '{' && p[plen - 2] == '*') {
      /* The rest of the path, its slashes kept: a file's path. */
      if (slen == 0 || np == API_MAX_PARAMS || *pe)
        return false;
      param[np++] = s;
      rest = s;
      s += strlen(s);
      p = pe;
      break;
    } else if (plen > 1 && p[0] == '{') {
      if (slen == 0 || slen > SEGMENT_MAX || np == API_MAX_PARAMS)
        return false;
      param[np++] = s;
    } else if (plen != slen || strncmp(p, s, plen) != 0) {
      return false;
    }
    p = pe;
    s = se;
  }
  if (*p || *s)
    return false;
  /* Cut the parameters out of the copy, now that it matched. */
  for (char *q = path; (q = strchr(q, '/')) && (!rest || q < rest); q++)
    if (q != path)
      *q = '\0';
  return true;
}

bool api_has_scope(const struct api *a, const char *scope) {
  return auth_scope_in(a->scopes, scope);
}

int api_body_object(struct api *a, json_t **out) {
  size_t len = 0;
  const char *body = http_req_body(a->r, &len);
  json_error_t je;
  *out = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (json_is_object(*out))
    return 0;
  bool parsed = *out != NULL;
  json_decref(*out);
  *out = NULL;
  if (parsed)
    return api_error(a, 400, "invalid_request",
                     "the request body must be a JSON object");
  return api_error(a, 400, "invalid_request",
                   "the request body is not JSON: %s (at byte %d)", je.text,
                   je.position);
}

int api_known_members(struct api *a, json_t *body, const char *what,
                      const char *const *keys) {
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    size_t i = 0;
    while (keys[i] && strcmp(keys[i], k) != 0)
      i++;
    if (keys[i])
      continue;
    char list[256] = "";
    for (size_t j = 0, n = 0; keys[j] && n < sizeof(list); j++)
      n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s",
                            j ? (keys[j + 1] ? ", " : " and ") : "", keys[j]);
    return api_error(a, 400, "invalid_request",
                     "unknown member \"%s\" (%s takes %s)", k, what, list);
  }
  return 0;
}

/* The Idempotency-Key of a POST, or NULL. */
static const char *idem_key(const struct api *a) {
  if (strcmp(http_req_method(a->r), "POST") != 0)
    return NULL;
  return http_req_header(a->r, "Idempotency-Key");
}

/* The request's fingerprint: method, path and body. */
static void fingerprint(const struct api *a, char out[SBX_SHA256_HEX]) {
  struct sbx_sha256 h;
  sbx_sha256_init(&h);
  const char *m = http_req_method(a->r), *p = http_req_path(a->r);
  size_t len = 0;
  const char *b = http_req_body(a->r, &len);
  sbx_sha256_update(&h, m, strlen(m) + 1);
  sbx_sha256_update(&h, p, strlen(p) + 1);
  sbx_sha256_update(&h, b, len);
  sbx_sha256_final_hex(&h, out);
}

/* Records the answer STATUS, BODY (borrowed) under the request's key. */
static void idem_record(struct api *a, unsigned status, json_t *body) {
  const char *key = idem_key(a);
  if (!key || status >= 500)
    return;
  char fp[SBX_SHA256_HEX];
  fingerprint(a, fp);
  _cleanup_json_ json_t *rec =
      json_pack("{s:s, s:O}", "request", fp, "body", body ? body : json_null());
  _cleanup_free_ char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
  struct sbx_error e = {0};
  if (text &&
      store_idem_put(a->srv->store, a->token, key, (int)status, text, &e) < 0 &&
      e.err != EEXIST)
    log_warn("recording an Idempotency-Key: %s", e.msg);
}

int api_reply(struct api *a, unsigned status, json_t *body) {
  idem_record(a, status, body);
  return http_reply_json(a->r, status, body);
}

int api_error(struct api *a, unsigned status, const char *code, const char *fmt,
              ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  (void)api_reply(a, status, http_error_body(code, msg));
  return -1;
}

/* Whether S is valid UTF-8 (a key is stored as text, which PostgreSQL
 * refuses otherwise). */
static bool utf8_valid(const char *s) {
  size_t n = strlen(s);
  bool valid = true;
  for (size_t i = 0; i < n && valid;)
    i += sbx_utf8_scan((const unsigned char *)s + i, n - i, &valid);
  return valid;
}

/* Answers a POST whose Idempotency-Key was seen before with the first
 * answer: true when it did (or refused a key reused for another
 * request). */
static bool idem_replay(struct api *a) {
  const char *key = idem_key(a);
  if (!key)
    return false;
  if (!*key || strlen(key) > IDEM_KEY_MAX || !utf8_valid(key)) {
    (void)http_reply_error(a->r, 400, "invalid_request",
                           "an Idempotency-Key is 1 to %d bytes of UTF-8",
                           IDEM_KEY_MAX);
    return true;
  }
  int status = 0;
  _cleanup_free_ char *text = NULL;
  struct sbx_error e = {0};
  int k = store_idem_get(a->srv->store, a->token, key, &status, &text, &e);
  if (k == -ENOENT)
    return false;
  if (k < 0) {
    (void)http_reply_error(a->r, 503, "unavailable", "%s", e.msg);
    return true;
  }
  json_error_t je;
  _cleanup_json_ json_t *rec = json_loads(text, 0, &je);
  char fp[SBX_SHA256_HEX];
  fingerprint(a, fp);
  const char *was = json_string_value(json_object_get(rec, "request"));
  if (!was || strcmp(was, fp) != 0) {
    (void)http_reply_error(a->r, 422, "idempotency_key_reused",
                           "this Idempotency-Key was used for another "
                           "request");
    return true;
  }
  (void)http_add_header(a->r, "Idempotent-Replayed", "true");
  (void)http_reply_json(a->r, (unsigned)status,
                        json_incref(json_object_get(rec, "body")));
  return true;
}

/* Finds the route of R: its index, or -1 with the reply (404, 405) sent. */
static int find_route(struct http_req *r, char *path, const char **param) {
  const char *method = http_req_method(r);
  bool other_method = false;
  char allow[64] = "";
  for (size_t i = 0; i < NROUTES; i++) {
    (void)snprintf(path, PATH_MAX_BYTES, "%s", http_req_path(r));
    if (!match(routes[i].pattern, path, param))
      continue;
    if (strcmp(routes[i].method, method) == 0)
      return (int)i;
    other_method = true;
    size_t n = strlen(allow);
    (void)snprintf(allow + n, sizeof(allow) - n, "%s%s", n ? ", " : "",
                   routes[i].method);
  }
  if (other_method) {
    (void)http_add_header(r, "Allow", allow);
    (void)http_reply_error(r, 405, "method_not_allowed",
                           "%s is not allowed on %s (allowed: %s)", method,
                           http_req_path(r), allow);
  } else {
    (void)http_reply_error(r, 404, "not_found", "no such endpoint: %s %s",
                           method, http_req_path(r));
  }
  return -1;
}

static void count(struct server *srv, const struct http_req *r) {
  unsigned s = http_req_status(r) / 100;
  atomic_fetch_add(&srv->m.http[s >= 1 && s <= 5 ? s : 0], 1);
}

void api_dispatch(void *arg, struct http_req *r) {
  struct server *srv = arg;
  struct api a = {.srv = srv, .r = r, .token = "", .scopes = ""};
  char path[PATH_MAX_BYTES];
  if (strlen(http_req_path(r)) >= sizeof(path)) {
    (void)http_reply_error(r, 414, "uri_too_long", "the path is over %d bytes",
                           PATH_MAX_BYTES - 1);
    count(srv, r);
    return;
  }
  int i = find_route(r, path, a.param);
  if (i < 0) {
    count(srv, r);
    return;
  }
  const struct route *rt = &routes[i];
  struct auth_who who = {0};
  if (rt->scope) {
    struct sbx_error e = {0};
    if (auth_check(srv, r, &who, &e) < 0) {
      auth_refuse(r, &e);
      count(srv, r);
      return;
    }
    a.token = who.name;
    a.scopes = who.scopes;
    if (!auth_scope_in(who.scopes, rt->scope)) {
      (void)http_reply_error(r, 403, "forbidden",
                             "the token \"%s\" lacks the \"%s\" scope this "
                             "needs",
                             who.name, rt->scope);
      count(srv, r);
      return;
    }
  }
  /* Keys are kept per token: a route without one has none. */
  if (!rt->scope || !idem_replay(&a))
    rt->fn(&a);
  count(srv, r);
  explicit_bzero(&who, sizeof(who)); /* its hash keys the token's sessions */
}
