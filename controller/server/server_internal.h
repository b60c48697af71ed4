/* The parts of sbx serve, private to controller/server/. */
#ifndef SBX_SERVER_INTERNAL_H
#define SBX_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/runs/runs.h"
#include "controller/server/httpd.h"
#include "controller/server/server.h"
#include "controller/state/store.h"
#include "shared/sha256.h"

#define SERVER_ID_MAX RUNS_ID_MAX
#define SERVER_RUN_PREFIX RUNS_ID_PREFIX

/* One run executing in this server. */
struct job {
  struct job *next;
  struct server *srv;
  char id[SERVER_ID_MAX];  /* the store's id: run_ and the runner's id */
  volatile bool cancel;    /* the runner stops at its next step */
  volatile bool interrupt; /* ... and keeps its state: the server stops or
                              lost the lease */
  struct runs_rec rec;     /* its record in the store */
};

struct server_metrics {
  atomic_uint_fast64_t http[6]; /* by status class: 1xx .. 5xx, [0] other */
  atomic_uint_fast64_t events;  /* recorded by this server's runs */
  atomic_uint_fast64_t runs_started, runs_finished;
  atomic_uint_fast64_t lease_lost;
};

struct server {
  const struct server_config *cfg;
  struct store *store;
  struct httpd *http;
  char owner[64]; /* this server in leases: host, pid and a random part */
  int64_t lease_ms;
  volatile bool stopping;
  pthread_mutex_t mu;
  pthread_cond_t events_cv; /* an event was recorded here */
  pthread_cond_t work_cv;   /* a run may be waiting to be taken */
  struct job *jobs;         /* executing here, under mu */
  unsigned njobs;
  pthread_t *workers;
  unsigned nworkers;
  pthread_t renewer;
  bool renewer_started;
  struct server_metrics m;
  int64_t started_ms;
  pthread_mutex_t att_mu; /* the attached sandboxes (attached.c) */
  struct attached *attached;
  unsigned nattached;
};

/* server.c: a server on C, its store open and its API listening (the
 * port in httpd_port(srv->http)), into *OUT (new); with its workers when
 * WORKERS, else no run is ever executed (a test or a fuzz target that
 * drives the API in-process). 0 or a negative errno with E. */
int server_start(const struct server_config *c, bool workers,
                 struct server **out, struct sbx_error *e);
/* Stops and frees what server_start made; accepts NULL, returns NULL. */
struct server *server_stop(struct server *srv);

/* A request's context once it matched a route: the path's parameters
 * and the token that authorized it. */
#define API_MAX_PARAMS 3
struct api {
  struct server *srv;
  struct http_req *r;
  const char *param[API_MAX_PARAMS];
  const char *token;  /* the token's name ("" without auth) */
  const char *scopes; /* its scopes */
};

/* routes.c: the route table; every request goes through api_dispatch. */
void api_dispatch(void *arg, struct http_req *r);
/* The table's routes as "METHOD /path/{param}" for the OpenAPI check:
 * the I-th, or NULL past the end. */
const char *api_route_at(size_t i, const char **method);
/* The request body as a JSON object (*OUT new), or a 400 already sent. */
int api_body_object(struct api *a, json_t **out);
/* Refuses a member of BODY not among KEYS (NULL-terminated) with a 400
 * saying what WHAT ("a run") takes: 0, or -1 with the reply sent. */
int api_known_members(struct api *a, json_t *body, const char *what,
                      const char *const *keys);
/* Replies with BODY (stolen) and records the answer under the request's
 * Idempotency-Key, if it has one. */
int api_reply(struct api *a, unsigned status, json_t *body);
/* Replies with an error as http_reply_error, also recorded. Returns -1,
 * so that a check can end with `return api_error(...)`. */
int api_error(struct api *a, unsigned status, const char *code, const char *fmt,
              ...) __attribute__((format(printf, 4, 5)));
/* Whether the token holds SCOPE (admin holds every scope). */
bool api_has_scope(const struct api *a, const char *scope);

/* auth.c */
#define AUTH_ID_MAX 13 /* a token's id: 12 hex digits */
/* The token that authorized a request. */
struct auth_who {
  char id[AUTH_ID_MAX];
  char name[128];
  char scopes[128];
  char hash[SBX_SHA256_HEX]; /* as stored: what a session's key is made of */
  bool session;              /* by the page's session cookie (session.c) */
  int64_t expires;           /* the session's end, unix seconds */
  char csrf[SBX_SHA256_HEX]; /* the session's X-CSRF-Token */
};
/* Checks R's credentials: "Authorization: Bearer TOKEN", or without that
 * header the session cookie (with its X-CSRF-Token on a request that is
 * not a GET or HEAD). 0 with WHO filled, or an error in E: code
 * SBX_UNAUTHENTICATED (answer 401), SBX_PERMISSION_DENIED (a session
 * request without the right X-CSRF-Token: 403), SBX_UNAVAILABLE (the
 * store failed: 503). */
int auth_check(struct server *srv, struct http_req *r, struct auth_who *who,
               struct sbx_error *e);
/* Answers R as auth_check's error E says (401 with WWW-Authenticate, 403
 * or 503). */
void auth_refuse(struct http_req *r, const struct sbx_error *e);
/* Checks the token text T ("sbx_ID_SECRET"), as auth_check. */
int auth_token(struct server *srv, const char *t, struct auth_who *who,
               struct sbx_error *e);
/* The token whose id is ID, as stored, into WHO (its secret unchecked),
 * as auth_check. */
int auth_lookup(struct server *srv, const char *id, struct auth_who *who,
                struct sbx_error *e);
/* Whether the comma list LIST holds SCOPE, or admin. */
bool auth_scope_in(const char *list, const char *scope);

/* api_runs.c */
void api_runs_create(struct api *a);
void api_runs_list(struct api *a);
void api_runs_get(struct api *a);
void api_runs_cancel(struct api *a);
void api_runs_approve(struct api *a);
void api_runs_retry(struct api *a);
/* Whether ID has the shape of a run id (runs_id_valid): any other is no
 * run, without asking the store (PostgreSQL refuses text that is not
 * UTF-8, and would fail the request). */
#define server_run_id_valid runs_id_valid
/* Whether run ID has a state in the store to go on from. */
bool server_has_state(struct server *srv, const char *id);

/* api_sandboxes.c, api_execs.c, api_files.c: the sandboxes API. */
void api_sandboxes_create(struct api *a);
void api_sandboxes_list(struct api *a);
void api_sandboxes_get(struct api *a);
void api_sandboxes_delete(struct api *a);
void api_sandboxes_patch(struct api *a);
void api_execs_start(struct api *a);
void api_execs_get(struct api *a);
void api_execs_output(struct api *a);
void api_execs_stdin(struct api *a);
void api_files_put(struct api *a);
void api_files_get(struct api *a);
void api_files_delete(struct api *a);
struct sandbox;
/* A request's use of an attached sandbox (attached.c). */
struct sb_use {
  struct server *srv;
  struct attached *ref;
  struct sandbox *sb; /* borrowed while in use */
};
/* The sandbox of the path's first parameter, attached (or one attached
 * before): 0, or a reply sent (404, 503, ...). */
int api_sandbox_attach(struct api *a, struct sb_use *u);
/* attached.c: the attached sandboxes kept by the server. */
int attached_get(struct server *srv, const char *id, struct sb_use *u,
                 struct sbx_error *e);
/* Ends the use U; R is the last call's result (a sandboxd that is gone
 * drops the entry). */
void attached_put(struct sb_use *u, int r);
/* Drops sandbox ID's entry (it is being removed). */
void attached_forget(struct server *srv, const char *id);
void attached_free_all(struct server *srv);
/* The HTTP status for an error E (or R): 404, 422, 409, 503, ... */
unsigned api_status_for(const struct sbx_error *e, int r);
/* Replies with E (or R) under that status; returns -1. */
int api_fail(struct api *a, const struct sbx_error *e, int r);

/* api_events.c: GET /v1/runs/{id}/events as Server-Sent Events. */
void api_runs_events(struct api *a);
/* Whether an event TYPE ends a run's stream. */
bool server_event_terminal(const char *type);

/* session.c: the web page's sessions. The cookie sbx_session holds a
 * token's id, an expiry and an HMAC of both under a key derived from the
 * token's stored hash, so that any server of the store checks it, a
 * restart keeps it, and removing the token ends it. */
/* Checks R's session cookie: 0 with WHO filled (WHO->session set, its
 * X-CSRF-Token checked unless R is a GET or HEAD), -ENOENT when R has no
 * such cookie, else as auth_check. */
int session_check(struct server *srv, struct http_req *r, struct auth_who *who,
                  struct sbx_error *e);
/* POST /ui/login, POST /ui/logout, GET /ui/session. */
void api_ui_login(struct api *a);
void api_ui_logout(struct api *a);
void api_ui_session(struct api *a);

/* ui.c: the page and its script and style, built into the program. */
void api_ui_page(struct api *a);
void api_ui_script(struct api *a);
void api_ui_style(struct api *a);

/* metrics.c: GET /metrics in Prometheus' text format. */
void api_metrics(struct api *a);
/* openapi.c: GET /v1/openapi.json. */
void api_openapi(struct api *a);
/* The OpenAPI document (borrowed text). */
const char *server_openapi_text(void);

/* agent_check.c: the agent of a request (borrowed) loaded into *OUT (new)
 * and checked to reach none of the server's files, nor (unless TRUSTED:
 * an admin token's, or one checked when it was submitted) its model API
 * key or host. -EINVAL or -EPERM with E. */
struct agent_set;
int server_agent_load(const struct server *srv, json_t *agent, bool trusted,
                      struct agent_set **out, struct sbx_error *e);
/* Refuses a manifest M (named WHERE) with entries or grants that read the
 * server's files: -EINVAL with E. */
struct manifest;
int server_manifest_check(const struct manifest *m, const char *where,
                          struct sbx_error *e);

/* executor.c: the workers that lease and execute runs. */
int executor_start(struct server *srv, struct sbx_error *e);
/* Wakes the workers (a run was queued). */
void executor_wake(struct server *srv);
/* Stops the workers: the runs they execute are cancelled locally without
 * being marked cancelled, their leases given up. */
void executor_stop(struct server *srv);
/* The job executing run ID here, or NULL; under srv->mu. */
struct job *executor_find(struct server *srv, const char *id);
/* Records run_cancelled for run ID, cancelled before it ran. */
int executor_cancelled(struct server *srv, const char *id, struct sbx_error *e);

#endif
