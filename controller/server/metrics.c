/* GET /metrics: the server's figures in Prometheus' text exposition format
 * (version 0.0.4), checked in the tests with promtool. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "controller/server/server_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

static const char *const statuses[] = {
    "queued",    "running", "waiting_approval", "completed", "failed",
    "cancelled", NULL};

static void counter(struct sbx_buf *b, const char *name, const char *help,
                    uint64_t v) {
  (void)sbx_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name,
                       help, name, name, (unsigned long long)v);
}

static void gauge(struct sbx_buf *b, const char *name, const char *help,
                  double v) {
  (void)sbx_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name,
                       help, name, name, v);
}

void api_metrics(struct api *a) {
  struct server *srv = a->srv;
  _cleanup_json_ json_t *counts = NULL;
  struct sbx_error e = {0};
  if (store_run_counts(srv->store, &counts, &e) < 0) {
    (void)api_error(a, 503, "unavailable", "%s", e.msg);
    return;
  }
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, (size_t)1 << 20);
  (void)sbx_buf_printf(&b, "# HELP sbx_runs Runs in the state store by "
                           "status.\n# TYPE sbx_runs gauge\n");
  for (size_t i = 0; statuses[i]; i++)
    (void)sbx_buf_printf(
        &b, "sbx_runs{status=\"%s\"} %lld\n", statuses[i],
        (long long)json_integer_value(json_object_get(counts, statuses[i])));
  pthread_mutex_lock(&srv->mu);
  unsigned active = srv->njobs;
  pthread_mutex_unlock(&srv->mu);
  gauge(&b, "sbx_runs_executing", "Runs this server executes now.", active);
  gauge(&b, "sbx_workers", "Runs this server may execute at once.",
        srv->nworkers);
  counter(&b, "sbx_runs_started_total",
          "Runs (or their continuations) this server began executing.",
          atomic_load(&srv->m.runs_started));
  counter(&b, "sbx_runs_ended_total",
          "Runs this server executed to an end: completed, failed, "
          "cancelled or waiting for approval.",
          atomic_load(&srv->m.runs_finished));
  counter(&b, "sbx_events_total", "Run events this server recorded.",
          atomic_load(&srv->m.events));
  counter(&b, "sbx_lease_lost_total",
          "Runs whose lease another server took while this one ran them.",
          atomic_load(&srv->m.lease_lost));
  (void)sbx_buf_printf(&b, "# HELP sbx_http_requests_total HTTP requests "
                           "answered, by status class.\n# TYPE "
                           "sbx_http_requests_total counter\n");
  static const char *const cls[] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
  for (size_t i = 0; i < 6; i++)
    (void)sbx_buf_printf(&b, "sbx_http_requests_total{code=\"%s\"} %llu\n",
                         cls[i],
                         (unsigned long long)atomic_load(&srv->m.http[i]));
  gauge(&b, "process_start_time_seconds",
        "Start time of the process since the Unix epoch in seconds.",
        (double)srv->started_ms / 1000.0);
  if (!b.data) {
    (void)api_error(a, 500, "internal", "out of memory");
    return;
  }
  (void)http_reply(a->r, 200, "text/plain; version=0.0.4; charset=utf-8",
                   b.data, b.len);
}
