/* Two sbx serve processes on one PostgreSQL (a private server started by
 * the test), sharing a state directory as two servers on one host do:
 * events read from either, an approval or a cancel posted to the one that
 * does not execute the run, and a server killed with SIGKILL whose run the
 * other finishes once the lease expires. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/postgres.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_pg pg;
static struct test_model_server ms;
static struct test_server a, b;

static void stop_all(void) {
  test_server_kill(&b, SIGTERM);
  test_server_fini(&a);
  test_model_server_stop(&ms);
  test_pg_stop(&pg);
}

TestSuite(server_pg, .fini = stop_all, .timeout = 240);

static const char *const lease[] = {"--lease-seconds", "3", NULL};

/* PostgreSQL, the model server on SCRIPT, server A and (when BOTH) B. */
static void start(const char *script, bool both) {
  test_pg_start(&pg);
  test_model_server_start(&ms, script, NULL);
  test_server_init(&a, pg.url, ms.base_url);
  test_server_start(&a, lease);
  b = a;
  b.pid = 0;
  (void)snprintf(b.log, sizeof(b.log), "%s/serve-b.log", a.dir);
  if (both)
    test_server_start(&b, lease);
}

#define AGENT_A "{\"name\": \"A\", \"model\": \"m1\"}"

Test(server_pg, runs_and_events_are_shared_by_both_servers) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo hi\"}}]},"
        " {\"text\": \"done\"}]",
        true);
  char *id = test_server_submit(&a, AGENT_A, "go");
  json_t *run = test_server_wait(&b, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "done");
  json_decref(run);
  bool ended_a = false, ended_b = false;
  json_t *ea = test_sse(&a, a.token, id, -1, 0, 10000, &ended_a);
  json_t *eb = test_sse(&b, b.token, id, -1, 0, 10000, &ended_b);
  cr_expect(ended_a && ended_b);
  cr_expect_gt(json_array_size(ea), 4);
  cr_expect(json_equal(ea, eb), "both servers stream the same events");
  json_decref(ea);
  json_decref(eb);
  free(id);
}

Test(server_pg, an_approval_posted_to_either_server_reaches_the_run) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo approved\"}}]},"
        " {\"text\": \"done\"}]",
        true);
  char *id =
      test_server_submit(&a,
                         "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": "
                         "{\"exec_command\": \"always\"}}",
                         "go");
  json_decref(test_server_wait(&a, id, "waiting_approval", 60000));
  char path[128];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/approvals/c1", id);
  struct test_http h;
  test_http(&h, &b, "POST", path, b.token, "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  json_decref(test_server_wait(&a, id, "completed", 60000));
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "approved"), "%s", out ? out : "(none)");
  json_decref(reqs);
  free(id);
}

Test(server_pg, a_cancel_posted_to_the_other_server_stops_the_run) {
  start("[{\"delay_ms\": 20000, \"text\": \"too late\"}]", false);
  char *id = test_server_submit(&a, AGENT_A, "wait");
  json_decref(test_server_wait(&a, id, "running", 30000));
  test_server_start(&b, lease);
  char path[128];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/cancel", id);
  struct test_http h;
  test_http(&h, &b, "POST", path, b.token, NULL, NULL);
  cr_expect_eq(h.status, 202, "%s", h.body);
  test_http_free(&h);
  json_decref(test_server_wait(&b, id, "cancelled", 15000));
  free(id);
}

Test(server_pg, the_other_server_finishes_a_killed_server_s_run) {
  start("{\"by_turn\": true, \"steps\": ["
        "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo x >> n; wc -l < n\"}}]},"
        " {\"delay_ms\": 4000, \"text\": \"finished\"}]}",
        false);
  char *id = test_server_submit(&a, AGENT_A, "count");
  bool ended = false;
  json_t *evs = test_sse(&a, a.token, id, -1, 0, 1500, &ended);
  bool tool_done = false;
  size_t i;
  json_t *ev;
  json_array_foreach(evs, i, ev) {
    tool_done |= strcmp(json_string_value(json_object_get(ev, "event")),
                        "tool_call_finished") == 0;
  }
  json_decref(evs);
  cr_assert(tool_done, "the tool call finished on A before the kill");
  test_server_start(&b, lease);
  test_server_kill(&a, SIGKILL);
  json_t *run = test_server_wait(&b, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "finished");
  json_decref(run);
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "Output:\n1\n"), "the tool ran once: %s",
            out ? out : "(none)");
  json_decref(reqs);
  free(id);
}

struct decide {
  struct test_server *s;
  const char *path;
  long status;
};

static void *decide(void *arg) {
  struct decide *d = arg;
  struct test_http h;
  test_http(&h, d->s, "POST", d->path, d->s->token,
            "{\"decision\": \"approve\"}", NULL);
  d->status = h.status;
  test_http_free(&h);
  return NULL;
}

Test(server_pg, two_approvals_on_two_servers_at_once_lose_neither) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo one\"}}, {\"name\": "
        "\"exec_command\", \"call_id\": \"c2\", \"arguments\": {\"cmd\": "
        "\"echo two\"}}]},"
        " {\"text\": \"done\"}]",
        true);
  char *id =
      test_server_submit(&a,
                         "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": "
                         "{\"exec_command\": \"always\"}}",
                         "go");
  json_t *run = test_server_wait(&a, id, "waiting_approval", 60000);
  cr_assert_eq(json_array_size(json_object_get(run, "pending_approvals")), 2);
  json_decref(run);
  char p1[128], p2[128];
  (void)snprintf(p1, sizeof(p1), "/v1/runs/%s/approvals/c1", id);
  (void)snprintf(p2, sizeof(p2), "/v1/runs/%s/approvals/c2", id);
  struct decide d1 = {&a, p1, 0}, d2 = {&b, p2, 0};
  pthread_t t1, t2;
  cr_assert_eq(pthread_create(&t1, NULL, decide, &d1), 0);
  cr_assert_eq(pthread_create(&t2, NULL, decide, &d2), 0);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  cr_expect_eq(d1.status, 200);
  cr_expect_eq(d2.status, 200);
  json_decref(test_server_wait(&b, id, "completed", 60000));
  json_t *reqs = test_model_server_requests(&ms);
  const char *o1 = test_call_output(reqs, -1, "c1");
  const char *o2 = test_call_output(reqs, -1, "c2");
  cr_expect(o1 && strstr(o1, "one") && o2 && strstr(o2, "two"), "%s / %s",
            o1 ? o1 : "(none)", o2 ? o2 : "(none)");
  json_decref(reqs);
  free(id);
}

Test(server_pg, bytes_that_are_not_utf8_are_no_run_and_no_key) {
  start("[]", false);
  /* PostgreSQL refuses text that is not UTF-8: these used to reach it and
   * be answered 503, as if the database had failed. */
  static const struct {
    const char *method, *path;
  } runs[] = {
      {"GET", "/v1/runs/run_%FF"},
      {"GET", "/v1/runs/run_%FF/events"},
      {"POST", "/v1/runs/run_%FF/cancel"},
      {"POST", "/v1/runs/run_%FF/retry"},
  };
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    struct test_http h;
    test_http(&h, &a, runs[i].method, runs[i].path, a.token, NULL, NULL);
    cr_expect_eq(h.status, 404, "%s %s: %ld %s", runs[i].method, runs[i].path,
                 h.status, h.body);
    test_http_free(&h);
  }
  const char *key[] = {"Idempotency-Key: k\xff", NULL};
  struct test_http h;
  test_http(&h, &a, "POST", "/v1/runs", a.token,
            "{\"agent\": {\"name\": \"A\"}, \"input\": \"x\"}", key);
  cr_expect_eq(h.status, 400, "%ld %s", h.status, h.body);
  cr_expect(strstr(h.body, "Idempotency-Key"), "%s", h.body);
  test_http_free(&h);
}

/* sbx run on the servers' PostgreSQL (--db): its run is there for both
 * servers to list and stream, paused and decided on through one of them,
 * and continued by sbx run --resume; neither server takes it up. */
Test(server_pg, a_run_of_sbx_run_on_postgresql_is_shared) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo cli\"}}]},"
        " {\"text\": \"done\"}]",
        true);
  char agent[160];
  (void)snprintf(agent, sizeof(agent), "%s",
                 test_write_file(a.dir, "cli.json",
                                 "{\"name\": \"Cli\", \"model\": \"m1\", "
                                 "\"approvals\": {\"exec_command\": "
                                 "\"always\"}}"));
  struct sbx_run_out r;
  const char *run[] = {"run",   "--db", pg.url, "--state-dir",
                       a.state, agent,  "go",   NULL};
  sbx_run(&r, ms.base_url, run);
  cr_assert_eq(r.status, 3, "%s", r.err);
  const char *p = strstr(r.err, "sbx: run ");
  cr_assert_not_null(p, "%s", r.err);
  p += strlen("sbx: run ");
  char *id = strndup(p, strcspn(p, " \n"));
  sbx_run_free(&r);
  json_decref(test_server_wait(&b, id, "waiting_approval", 10000));
  char path[160];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/approvals/c1", id);
  struct test_http h;
  test_http(&h, &b, "POST", path, b.token, "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  sleep(2);
  json_t *reqs = test_model_server_requests(&ms);
  cr_expect_eq(json_array_size(reqs), 1, "a server took the run up");
  json_decref(reqs);
  const char *res[] = {"run",   "--db",     pg.url, "--state-dir",
                       a.state, "--resume", id,     NULL};
  sbx_run(&r, ms.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  sbx_run_free(&r);
  json_t *v = test_server_wait(&a, id, "completed", 10000);
  cr_expect_str_eq(json_string_value(json_object_get(v, "origin")), "cli");
  json_decref(v);
  bool ended = false;
  json_t *evs = test_sse(&a, a.token, id, -1, 0, 10000, &ended);
  cr_expect(ended);
  size_t n = json_array_size(evs);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, n - 1), "event")),
      "run_finished");
  json_decref(evs);
  free(id);
}
