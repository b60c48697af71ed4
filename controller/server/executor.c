/* The executor: worker threads that lease runs from the store and execute
 * them with the runner, and a renewer that keeps their leases and notices
 * cancels asked of another server.
 *
 * A run's lease is what makes one server its executor. A worker takes a
 * run that is queued, or running under a lease that expired (its server
 * died); its state in the store says whether it starts or goes on from
 * its last step. When this server stops, its runs are interrupted (they
 * keep their state and sandboxes) and their leases given up, so the next
 * server to start continues them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/run/runner.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

static const char *const claimable[] = {"queued", "running", NULL};

static void wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, unsigned ms) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  (void)pthread_cond_timedwait(cv, mu, &ts);
}

struct job *executor_find(struct server *srv, const char *id) {
  for (struct job *j = srv->jobs; j; j = j->next)
    if (strcmp(j->id, id) == 0)
      return j;
  return NULL;
}

void executor_wake(struct server *srv) {
  pthread_mutex_lock(&srv->mu);
  (void)pthread_cond_broadcast(&srv->work_cv);
  pthread_mutex_unlock(&srv->mu);
}

/* After each event a run of this server recorded: the streams waiting
 * for it wake. */
static void recorded(void *arg) {
  struct server *srv = arg;
  atomic_fetch_add(&srv->m.events, 1);
  pthread_mutex_lock(&srv->mu);
  (void)pthread_cond_broadcast(&srv->events_cv);
  pthread_mutex_unlock(&srv->mu);
}

/* The run a server-made event is for. */
struct target {
  struct server *srv;
  const char *id;
};

static void target_sink(void *arg, uint64_t seq, const char *type,
                        const char *line, size_t len) {
  (void)len;
  struct target *t = arg;
  struct sbx_error e = {0};
  if (store_event_add(t->srv->store, t->id, (int64_t)seq, type, line, &e) < 0)
    log_warn("run %s: cannot record event %llu: %s", t->id,
             (unsigned long long)seq, e.msg);
  recorded(t->srv);
}

int executor_cancelled(struct server *srv, const char *id,
                       struct sbx_error *e) {
  _cleanup_json_ json_t *row = NULL;
  int r = store_run_get(srv->store, id, &row, e);
  if (r < 0)
    return r;
  struct target t = {srv, id};
  struct events *ev = NULL;
  r = events_new_sink(
      target_sink, &t, NULL, id + strlen(SERVER_RUN_PREFIX),
      (uint64_t)json_integer_value(json_object_get(row, "last_seq")), &ev, e);
  if (r < 0)
    return r;
  events_run_cancelled(ev, 0, NULL, 0);
  events_free(ev);
  return 0;
}

/* The run's outcome in the store: its status and the result of R. */
static void finish(struct job *j, json_t *result, int r,
                   const struct run_result *res, const struct sbx_error *e) {
  struct sbx_error se = {0};
  if (runs_finish(&j->rec, result, r, res, e, &se) < 0)
    log_warn("run %s: cannot record its end: %s", j->id, se.msg);
  if (r != -EINTR)
    atomic_fetch_add(&j->srv->m.runs_finished, 1);
}

/* What a run that cannot start records: failed, with E's message. */
static void fail(struct job *j, json_t *result, int r,
                 const struct sbx_error *e) {
  struct run_result res = {0};
  finish(j, result, r, &res, e);
}

/* The run's options from its stored REQUEST, for agents SET. */
static int options_for(struct job *j, json_t *request, struct agent_set *set,
                       const char *resume, struct run_options *o,
                       struct sbx_error *e) {
  struct server *srv = j->srv;
  const struct agent *a = set->agents[0];
  const struct backend *b = backend_find(a->run_backend);
  if (!b)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "agent: unknown backend \"%s\"", a->run_backend);
  void *own = NULL;
  int r =
      backend_options_parse(b, a->run_options, "agent: run_config", &own, e);
  if (r < 0)
    return r;
  o->agents = set;
  o->prompt = json_string_value(json_object_get(request, "input"));
  o->max_turns = json_integer_value(json_object_get(request, "max_turns"));
  o->backend = b;
  o->backend_opts.own = own;
  o->model_cfg.stream = true;
  o->materialize.limits = materialize_default_limits();
  o->state_dir = srv->cfg->state_dir;
  o->store = srv->store;
  o->resume_path = resume;
  o->run_id = j->id + strlen(SERVER_RUN_PREFIX);
  o->event_sink = runs_sink;
  o->event_arg = &j->rec;
  o->cancel = &j->cancel;
  o->interrupt = &j->interrupt;
  o->keep_failed = true;
  return 0;
}

/* The API sandbox ID the run goes on in (run_options.sandbox): attached
 * into O, its record into REC. */
static int attach_sandbox(struct server *srv, const char *id,
                          struct lifecycle_record *rec, struct run_options *o,
                          struct sbx_error *e) {
  int r = lifecycle_load(srv->cfg->state_dir, id, rec, e);
  struct backend_options bo = {0};
  struct sandbox *sb = NULL;
  if (r == 0 && (r = lifecycle_attach(rec, &bo, &sb, e)) == 0 && !sb->client)
    r = sbx_error_set(e, SBX_UNAVAILABLE, ESRCH,
                      "the run's sandbox %s is stopped", id);
  if (r < 0) {
    if (sb)
      sb->backend->detach(sb);
    return r;
  }
  o->sandbox = sb;
  o->sandbox_manifest = rec->manifest;
  o->sandbox_record = rec;
  return 0;
}

/* Executes the leased run J: from the start, or from its state in the
 * store (a run that began on this server or another). */
static void execute(struct job *j) {
  struct server *srv = j->srv;
  struct sbx_error e = {0};
  _cleanup_json_ json_t *row = NULL;
  if (store_run_get(srv->store, j->id, &row, &e) < 0) {
    log_warn("run %s: %s", j->id, e.msg);
    return;
  }
  json_t *request = json_object_get(row, "request");
  json_t *old = json_object_get(row, "result");
  _cleanup_json_ json_t *result =
      json_is_object(old) ? json_deep_copy(old) : json_object();
  if (!result)
    return;
  bool resume = server_has_state(srv, j->id);
  if (json_is_true(json_object_get(row, "cancel_requested")))
    j->cancel = true;
  if (store_run_update(srv->store, j->id, claimable, "running", NULL, &e) < 0) {
    log_warn("run %s: %s", j->id, e.msg);
    return;
  }
  if (j->cancel && !resume) {
    struct run_result res = {0};
    finish(j, result, -ECANCELED, &res, &e);
    (void)executor_cancelled(srv, j->id, &e);
    return;
  }
  struct agent_set *set = NULL;
  struct run_options o = {0};
  /* Checked against its token when it was submitted. */
  int r =
      server_agent_load(srv, json_object_get(request, "agent"), true, &set, &e);
  if (r == 0)
    r = options_for(j, request, set, resume ? j->id : NULL, &o, &e);
  if (r < 0) {
    fail(j, result, r, &e);
    agent_set_free(set);
    return;
  }
  uint64_t seq = 0;
  _cleanup_json_ json_t *now = NULL;
  if (store_run_get(srv->store, j->id, &now, &e) == 0)
    seq = (uint64_t)json_integer_value(json_object_get(now, "last_seq"));
  o.event_seq = seq;
  struct lifecycle_record rec = {0};
  const char *sid = json_string_value(json_object_get(request, "sandbox_id"));
  r = sid ? attach_sandbox(srv, sid, &rec, &o, &e) : 0;
  if (r < 0) {
    fail(j, result, r, &e);
    backend_options_free(o.backend, (void *)o.backend_opts.own);
    agent_set_free(set);
    return;
  }
  atomic_fetch_add(&srv->m.runs_started, 1);
  struct run_result res = {0};
  memset(&e, 0, sizeof(e));
  r = runner_run(&o, &res, &e);
  finish(j, result, r, &res, &e);
  run_result_clear(&res);
  if (o.sandbox)
    o.sandbox->backend->detach(o.sandbox);
  lifecycle_record_clear(&rec);
  backend_options_free(o.backend, (void *)o.backend_opts.own);
  agent_set_free(set);
}

static void *worker_main(void *arg) {
  struct server *srv = arg;
  while (!srv->stopping) {
    struct job *j = calloc(1, sizeof(*j));
    struct sbx_error e = {0};
    int r = j ? store_lease_claim(srv->store, srv->owner, claimable,
                                  srv->lease_ms, j->id, sizeof(j->id), &e)
              : -ENOMEM;
    if (r == 0 && runs_rec_init(&j->rec, srv->store, j->id) < 0) {
      (void)store_lease_release(srv->store, j->id, srv->owner, &e);
      r = -ENOMEM;
    }
    if (r < 0) {
      free(j);
      if (r != -ENOENT)
        log_warn("taking a run: %s", e.msg[0] ? e.msg : strerror(-r));
      /* Runs queued here wake us; those of other servers and expired
       * leases are looked for every second. */
      pthread_mutex_lock(&srv->mu);
      if (!srv->stopping)
        wait_ms(&srv->work_cv, &srv->mu, 1000);
      pthread_mutex_unlock(&srv->mu);
      continue;
    }
    j->srv = srv;
    j->rec.recorded = recorded;
    j->rec.recorded_arg = srv;
    pthread_mutex_lock(&srv->mu);
    j->next = srv->jobs;
    srv->jobs = j;
    srv->njobs++;
    if (srv->stopping)
      j->cancel = j->interrupt = true;
    pthread_mutex_unlock(&srv->mu);
    execute(j);
    (void)store_lease_release(srv->store, j->id, srv->owner, &e);
    pthread_mutex_lock(&srv->mu);
    for (struct job **p = &srv->jobs; *p; p = &(*p)->next)
      if (*p == j) {
        *p = j->next;
        break;
      }
    srv->njobs--;
    pthread_mutex_unlock(&srv->mu);
    runs_rec_clear(&j->rec);
    free(j);
  }
  return NULL;
}

/* Renews this server's leases at a third of their length and passes
 * cancels asked of other servers on to the runs, every second. */
static void *renewer_main(void *arg) {
  struct server *srv = arg;
  int64_t last_renew = store_now_ms();
  pthread_mutex_lock(&srv->mu);
  while (!srv->stopping) {
    wait_ms(&srv->work_cv, &srv->mu, 1000);
    bool renew = store_now_ms() - last_renew >= srv->lease_ms / 3;
    char ids[SERVER_MAX_WORKERS][SERVER_ID_MAX];
    size_t n = 0;
    for (struct job *j = srv->jobs; j && n < SERVER_MAX_WORKERS; j = j->next)
      memcpy(ids[n++], j->id, SERVER_ID_MAX);
    pthread_mutex_unlock(&srv->mu);
    for (size_t i = 0; i < n; i++) {
      struct sbx_error e = {0};
      bool lost = renew && store_lease_renew(srv->store, ids[i], srv->owner,
                                             srv->lease_ms, &e) == -ESTALE;
      _cleanup_json_ json_t *row = NULL;
      bool cancel = !lost && store_run_get(srv->store, ids[i], &row, &e) == 0 &&
                    json_is_true(json_object_get(row, "cancel_requested"));
      pthread_mutex_lock(&srv->mu);
      struct job *j = executor_find(srv, ids[i]);
      if (j && lost) {
        log_warn("run %s: its lease was taken over; stopping it here", j->id);
        atomic_fetch_add(&srv->m.lease_lost, 1);
        j->interrupt = j->cancel = true;
      } else if (j && cancel) {
        j->cancel = true;
      }
      pthread_mutex_unlock(&srv->mu);
    }
    if (renew)
      last_renew = store_now_ms();
    pthread_mutex_lock(&srv->mu);
  }
  pthread_mutex_unlock(&srv->mu);
  return NULL;
}

int executor_start(struct server *srv, struct sbx_error *e) {
  unsigned n = srv->cfg->workers ? srv->cfg->workers : SERVER_DEFAULT_WORKERS;
  srv->workers = calloc(n, sizeof(*srv->workers));
  if (!srv->workers)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  for (; srv->nworkers < n; srv->nworkers++) {
    int r =
        pthread_create(&srv->workers[srv->nworkers], NULL, worker_main, srv);
    if (r != 0)
      return sbx_error_set(e, SBX_INTERNAL, r,
                           "cannot start worker %u of %u: %s",
                           srv->nworkers + 1, n, strerror(r));
  }
  int r = pthread_create(&srv->renewer, NULL, renewer_main, srv);
  if (r != 0)
    return sbx_error_set(e, SBX_INTERNAL, r, "cannot start a thread: %s",
                         strerror(r));
  srv->renewer_started = true;
  return 0;
}

void executor_stop(struct server *srv) {
  pthread_mutex_lock(&srv->mu);
  srv->stopping = true;
  for (struct job *j = srv->jobs; j; j = j->next)
    j->interrupt = j->cancel = true;
  (void)pthread_cond_broadcast(&srv->work_cv);
  (void)pthread_cond_broadcast(&srv->events_cv);
  pthread_mutex_unlock(&srv->mu);
  for (unsigned i = 0; i < srv->nworkers; i++)
    (void)pthread_join(srv->workers[i], NULL);
  srv->nworkers = 0;
  free(srv->workers);
  srv->workers = NULL;
  if (srv->renewer_started)
    (void)pthread_join(srv->renewer, NULL);
  srv->renewer_started = false;
}
