/* One state store for sbx run and sbx serve: a run of sbx run is seen by
 * a server on the same store (listed, its events streamed, decided on),
 * a server's run by `sbx runs`; neither executes the other's runs; a
 * cancel asked in the store stops a run of sbx run. Real `sbx serve`,
 * real `sbx run`, the scripted model server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_model_server ms;
static struct test_server srv;
static char agent[128];

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
}

TestSuite(runs_store, .fini = stop_all, .timeout = 240);

static void start(const char *script, const char *agent_json) {
  test_model_server_start(&ms, script, NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, NULL);
  (void)snprintf(agent, sizeof(agent), "%s",
                 test_write_file(srv.dir, "agent.json", agent_json));
  unsetenv("SBX_SERVER");
}

/* sbx ARGS... --state-dir (the server's), against the model server. */
static void local(struct sbx_run_out *r, const char *const *args) {
  const char *argv[32];
  size_t n = 0;
  argv[n++] = args[0];
  if (args[1] && strcmp(args[0], "runs") == 0)
    argv[n++] = args[1];
  argv[n++] = "--state-dir";
  argv[n++] = srv.state;
  for (size_t i = strcmp(args[0], "runs") == 0 && args[1] ? 2 : 1;
       args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_run(r, ms.base_url, argv);
}

/* The run id a paused `sbx run` named on stderr (new). */
static char *paused_id(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  return strndup(p, strcspn(p, " \n"));
}

/* The newest run of the store, as GET /v1/runs shows it (new). */
static json_t *newest_run(void) {
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/runs?limit=1", srv.token, NULL, NULL);
  cr_assert_eq(h.status, 200, "%s", h.body);
  json_t *run = json_incref(json_array_get(json_object_get(h.json, "data"), 0));
  test_http_free(&h);
  cr_assert_not_null(run, "no run listed");
  return run;
}

static const char *const one_call =
    "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"echo hi\"}}]},"
    " {\"text\": \"done: hi\"}]";

Test(runs_store, a_run_of_sbx_run_is_seen_by_the_server) {
  start(one_call, "{\"name\": \"Local\", \"model\": \"m1\"}");
  struct sbx_run_out r;
  const char *run[] = {"run", agent, "say hi", NULL};
  local(&r, run);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done: hi\n");
  sbx_run_free(&r);
  json_t *view = newest_run();
  const char *id = json_string_value(json_object_get(view, "id"));
  cr_expect_str_eq(json_string_value(json_object_get(view, "status")),
                   "completed");
  cr_expect_str_eq(json_string_value(json_object_get(view, "origin")), "cli");
  cr_expect_str_eq(json_string_value(json_object_get(view, "agent")), "Local");
  cr_expect_str_eq(json_string_value(json_object_get(view, "final_output")),
                   "done: hi");
  cr_expect_gt(json_integer_value(json_object_get(
                   json_object_get(view, "usage"), "total_tokens")),
               0);
  /* Its events, as the server streams them: the same as --stream's. */
  bool ended = false;
  json_t *evs = test_sse(&srv, srv.token, id, -1, 0, 10000, &ended);
  cr_expect(ended, "the stream of a finished run ends");
  size_t n = json_array_size(evs);
  cr_assert_gt(n, 3);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, 0), "event")),
      "run_started");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, n - 1), "event")),
      "run_finished");
  json_decref(evs);
  /* A server cannot retry it: sbx run executes its runs. */
  char path[128];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/retry", id);
  struct test_http h;
  test_http(&h, &srv, "POST", path, srv.token, NULL, NULL);
  cr_expect_eq(h.status, 409, "%s", h.body);
  test_http_free(&h);
  /* And sbx runs shows it too. */
  const char *ls[] = {"runs", "ls", NULL};
  local(&r, ls);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, id) && strstr(r.out, "completed") &&
                strstr(r.out, "Local"),
            "%s", r.out);
  sbx_run_free(&r);
  json_decref(view);
}

Test(runs_store, a_run_of_the_server_is_seen_by_sbx_runs) {
  start(one_call, "{\"name\": \"A\"}");
  char *id = test_server_submit(&srv,
                                "{\"name\": \"Served\", \"model\": "
                                "\"m1\"}",
                                "say hi");
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  struct sbx_run_out r;
  const char *ls[] = {"runs", "ls", "--json", NULL};
  local(&r, ls);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_error_t je;
  json_t *all = json_loads(r.out, 0, &je);
  cr_assert_not_null(all, "%s", r.out);
  json_t *v = json_array_get(all, 0);
  cr_expect_str_eq(json_string_value(json_object_get(v, "id")), id);
  cr_expect_str_eq(json_string_value(json_object_get(v, "origin")), "api");
  cr_expect_str_eq(json_string_value(json_object_get(v, "status")),
                   "completed");
  json_decref(all);
  sbx_run_free(&r);
  const char *show[] = {"runs", "show", id, NULL};
  local(&r, show);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"final_output\": \"done: hi\""), "%s", r.out);
  sbx_run_free(&r);
  const char *logs[] = {"runs", "logs", id, NULL};
  local(&r, logs);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"type\":\"run_started\"") &&
                strstr(r.out, "\"type\":\"run_finished\""),
            "%s", r.out);
  sbx_run_free(&r);
  /* What is not there, and what is not a command, say so. */
  const char *none[] = {"runs", "show", "run_0123456789abcdef0123456789abcdef",
                        NULL};
  local(&r, none);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "no run"), "%s", r.err);
  sbx_run_free(&r);
  const char *bad[] = {"runs", "ls", "--status", "done", NULL};
  local(&r, bad);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "unknown status \"done\""), "%s", r.err);
  sbx_run_free(&r);
  const char *opt[] = {"runs", "ls", "--follow", NULL};
  local(&r, opt);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "unknown option \"--follow\""), "%s", r.err);
  sbx_run_free(&r);
  const char *cancel[] = {"runs", "cancel", id, NULL};
  local(&r, cancel);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "is completed already"), "%s", r.err);
  sbx_run_free(&r);
  free(id);
}

/* A paused run of sbx run is approved through the server's API; no server
 * takes it up; sbx run --resume goes on with the decision. */
Test(runs_store, a_paused_run_of_sbx_run_is_approved_over_the_api) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
        "\"arguments\": {\"cmd\": \"echo approved\"}}]},"
        " {\"text\": \"finished\"}]",
        "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": "
        "{\"exec_command\": \"always\"}}");
  struct sbx_run_out r;
  const char *run[] = {"run", agent, "go", NULL};
  local(&r, run);
  cr_assert_eq(r.status, 3, "%s", r.err);
  char *id = paused_id(r.err);
  sbx_run_free(&r);
  json_t *view = test_server_wait(&srv, id, "waiting_approval", 10000);
  json_t *pend = json_object_get(view, "pending_approvals");
  cr_expect_eq(json_array_size(pend), 1);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(pend, 0), "call_id")),
      "c1");
  json_decref(view);
  char path[160];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/approvals/c1", id);
  struct test_http h;
  test_http(&h, &srv, "POST", path, srv.token, "{\"decision\": \"approve\"}",
            NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  /* Decided, queued, and left to sbx: no server asks the model again. */
  sleep(3);
  json_t *reqs = test_model_server_requests(&ms);
  cr_expect_eq(json_array_size(reqs), 1, "a server took the run up");
  json_decref(reqs);
  const char *twice[] = {"approve", id, "c1", NULL};
  local(&r, twice);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "has no call \"c1\" waiting"), "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--resume", id, NULL};
  local(&r, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "finished\n");
  sbx_run_free(&r);
  reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_assert_not_null(out);
  cr_expect(strstr(out, "approved"), "%s", out);
  json_decref(reqs);
  json_decref(test_server_wait(&srv, id, "completed", 10000));
  const char *again[] = {"run", "--resume", id, NULL};
  local(&r, again);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "is completed; nothing to resume"), "%s", r.err);
  sbx_run_free(&r);
  free(id);
}

/* A server's run is the server's to execute: sbx run --resume and
 * --continue refuse it. */
Test(runs_store, sbx_run_does_not_resume_a_run_of_the_server) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
        "\"arguments\": {\"cmd\": \"echo x\"}}]},"
        " {\"text\": \"finished\"}]",
        "{\"name\": \"A\"}");
  char *id = test_server_submit(&srv,
                                "{\"name\": \"S\", \"model\": \"m1\", "
                                "\"approvals\": {\"exec_command\": "
                                "\"always\"}}",
                                "go");
  json_decref(test_server_wait(&srv, id, "waiting_approval", 60000));
  struct sbx_run_out r;
  const char *res[] = {"run", "--resume", id, NULL};
  local(&r, res);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "was submitted to a server"), "%s", r.err);
  sbx_run_free(&r);
  const char *cont[] = {"run", "--continue", id, "more", NULL};
  local(&r, cont);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "was submitted to a server: sbx run continues only "
                          "its own runs"),
            "%s", r.err);
  sbx_run_free(&r);
  /* sbx reject on the store decides it; the server goes on. */
  const char *rej[] = {"reject", id, "c1", "--reason", "not now", NULL};
  local(&r, rej);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  json_t *reqs = test_model_server_requests(&ms);
  cr_expect_str_eq(test_call_output(reqs, -1, "c1"),
                   "The user rejected this tool call: not now");
  json_decref(reqs);
  free(id);
}

/* sbx runs cancel (or the API) stops a run that sbx run executes, at its
 * next step: here when the call's yield time is up, where the run would
 * otherwise go on to its answer. */
Test(runs_store, a_cancel_in_the_store_stops_a_run_of_sbx_run) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
        "\"arguments\": {\"cmd\": \"sleep 60\", \"yield_time_ms\": 3000}}]},"
        " {\"text\": \"not reached\"}]",
        "{\"name\": \"A\", \"model\": \"m1\"}");
  char errp[160];
  (void)snprintf(errp, sizeof(errp), "%s/err", srv.dir);
  const char *run[] = {"run", "--state-dir", srv.state, agent, "wait", NULL};
  pid_t pid = sbx_spawn(ms.base_url, errp, 0, run);
  json_t *view = NULL;
  for (int i = 0; i < 200; i++) {
    json_t *reqs = test_model_server_requests(&ms);
    size_t n = json_array_size(reqs);
    json_decref(reqs);
    if (n >= 1)
      break;
    usleep(50000);
  }
  view = newest_run();
  char *id = strdup(json_string_value(json_object_get(view, "id")));
  json_decref(view);
  struct sbx_run_out r;
  const char *cancel[] = {"runs", "cancel", id, NULL};
  local(&r, cancel);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  cr_expect(secs < 20, "sbx run went on for %.1f s after the cancel", secs);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
  json_decref(test_server_wait(&srv, id, "cancelled", 10000));
  free(id);
}

/* One sbx at a time goes on with a run: a --resume of a run that another
 * sbx is running is refused, naming that process, and once it has ended
 * the run can be taken up again. */
Test(runs_store, a_run_going_on_is_not_resumed_by_another_sbx) {
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
        "\"arguments\": {\"cmd\": \"sleep 60\", \"yield_time_ms\": 3000}}]},"
        " {\"text\": \"not reached\"}]",
        "{\"name\": \"A\", \"model\": \"m1\"}");
  char errp[160];
  (void)snprintf(errp, sizeof(errp), "%s/err", srv.dir);
  const char *run[] = {"run", "--state-dir", srv.state, agent, "wait", NULL};
  pid_t pid = sbx_spawn(ms.base_url, errp, 0, run);
  for (int i = 0; i < 200; i++) {
    json_t *reqs = test_model_server_requests(&ms);
    size_t n = json_array_size(reqs);
    json_decref(reqs);
    if (n >= 1)
      break;
    usleep(50000);
  }
  json_t *view = newest_run();
  char *id = strdup(json_string_value(json_object_get(view, "id")));
  json_decref(view);
  struct sbx_run_out r;
  const char *resume[] = {"run", "--resume", id, NULL};
  local(&r, resume);
  cr_expect_eq(r.status, 2, "%s", r.err);
  char want[96];
  (void)snprintf(want, sizeof(want), "is going on in another sbx (pid %d)",
                 (int)pid);
  cr_expect(strstr(r.err, want), "%s", r.err);
  sbx_run_free(&r);
  const char *cancel[] = {"runs", "cancel", id, NULL};
  local(&r, cancel);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  /* Its process is gone: the lock with it. The run was cancelled, which
   * a resume now says rather than that it is going on. */
  local(&r, resume);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is cancelled; nothing to resume"), "%s", r.err);
  sbx_run_free(&r);
  /* The lock's file went with it: none is left behind. */
  char lockp[512];
  (void)snprintf(lockp, sizeof(lockp), "%s/runs/%s.lock", srv.state, id);
  cr_expect_neq(access(lockp, F_OK), 0, "%s is left", lockp);
  free(id);
}
