/* A failed run of sbx run kept for a retry (--keep-failed): a model
 * outage fails it, its state and sandbox stay, `sbx run --resume` goes on
 * from its last step in the same workspace without running a tool call
 * again; not kept with 0, ended once its keep time passed or when it is
 * cancelled. Real sbx, real sandboxd, the scripted model server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-retry-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(retry, .init = setup, .fini = teardown, .timeout = 180);

static const char *write_agent(const char *json) {
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", json));
  return path;
}

/* A tool call that counts its runs in the workspace, then a model outage:
 * 500s past the client's four retries (each answered at once), then what
 * the retry gets: a call that reads the count, and the answer. */
static const char outage[] =
    "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"echo x >> n; wc -l < n\"}}]},"
    " {\"status\": 500, \"headers\": {\"retry-after-ms\": \"1\"}, "
    "\"repeat\": 5},"
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
    "\"arguments\": {\"cmd\": \"wc -l < n\"}}]},"
    " {\"text\": \"counted\"}]";

/* The run id that "sbx: run ID failed; ..." names on stderr (new). */
static char *kept_id(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  size_t n = strcspn(p, " \n");
  cr_assert(strncmp(p + n, " failed; its state and sandboxes are kept until",
                    47) == 0,
            "%s", err);
  return strndup(p, n);
}

/* The sandboxes of the state dir that are running. */
static size_t running_sandboxes(void) {
  struct sbx_run_out r;
  const char *ls[] = {"ls", "--json", NULL};
  sbx_sandbox_run(&r, state, ls);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_error_t je;
  json_t *all = json_loads(r.out, 0, &je);
  cr_assert_not_null(all, "%s", r.out);
  size_t n = 0, i;
  json_t *s;
  json_array_foreach(all, i, s) {
    const char *st = json_string_value(json_object_get(s, "status"));
    n += st && strcmp(st, "running") == 0;
  }
  json_decref(all);
  sbx_run_free(&r);
  return n;
}

/* `sbx runs show ID` (new). */
static json_t *show(const char *id) {
  struct sbx_run_out r;
  const char *argv[] = {"runs", "show", "--state-dir", state, id, NULL};
  sbx_run(&r, NULL, argv);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_error_t je;
  json_t *v = json_loads(r.out, 0, &je);
  cr_assert_not_null(v, "%s", r.out);
  sbx_run_free(&r);
  return v;
}

/* Runs the outage script's first part with the extra ARGS (up to 4):
 * the run fails (exit 1). Its stderr into R (the caller frees). */
static void fail_run(struct sbx_run_out *r, struct test_model_server *srv,
                     const char *const *args) {
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\"}");
  test_model_server_start(srv, outage, NULL);
  const char *argv[12] = {"run", "--state-dir", state};
  size_t n = 3;
  for (size_t i = 0; args && args[i] && n < 9; i++)
    argv[n++] = args[i];
  argv[n++] = a;
  argv[n++] = "count";
  argv[n] = NULL;
  sbx_run(r, srv->base_url, argv);
  cr_assert_eq(r->status, 1, "%s", r->err);
  cr_expect(strstr(r->err, "500") != NULL, "%s", r->err);
}

Test(retry, a_run_failed_by_a_model_outage_is_kept_and_resumed) {
  struct test_model_server srv;
  struct sbx_run_out r;
  fail_run(&r, &srv, NULL);
  char *id = kept_id(r.err);
  char want[160];
  (void)snprintf(want, sizeof(want),
                 "retry it from its last step with `sbx run --resume %s`", id);
  cr_expect(strstr(r.err, want) != NULL, "%s", r.err);
  sbx_run_free(&r);
  /* Kept: failed with its error, its state, its sandbox running. */
  cr_expect(test_run_has_state(state, id));
  cr_expect_eq(running_sandboxes(), 1);
  json_t *v = show(id);
  cr_expect_str_eq(json_string_value(json_object_get(v, "status")), "failed");
  const char *msg = json_string_value(
      json_object_get(json_object_get(v, "error"), "message"));
  cr_expect(msg && strstr(msg, "500"), "%s", msg ? msg : "(no error)");
  cr_expect(json_is_string(json_object_get(v, "retry_until")));
  json_decref(v);
  const char *ls[] = {"runs", "ls", "--state-dir", state, NULL};
  sbx_run(&r, NULL, ls);
  cr_expect(strstr(r.out, id) && strstr(r.out, "failed"), "%s", r.out);
  sbx_run_free(&r);
  /* The retry re-sends the model call that failed, in the same
   * workspace; c1 does not run again. */
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "counted\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 8, "1 + 5 failed + 2");
  const char *c2 = test_call_output(reqs, -1, "c2");
  cr_assert_not_null(c2);
  cr_expect(strstr(c2, "Output:\n1\n") != NULL,
            "c1 ran once, in the workspace the retry went on in: %s", c2);
  /* The retried call carries the same input as the failed ones. */
  json_t *failed = json_object_get(json_array_get(reqs, 1), "body");
  json_t *retried = json_object_get(json_array_get(reqs, 6), "body");
  cr_expect(json_equal(json_object_get(failed, "input"),
                       json_object_get(retried, "input")));
  json_decref(reqs);
  char *status = test_run_status(state, id);
  cr_expect_str_eq(status, "completed");
  free(status);
  cr_expect_eq(running_sandboxes(), 0, "the completed run closed its sandbox");
  v = show(id);
  cr_expect(json_is_null(json_object_get(v, "retry_until")));
  json_decref(v);
  free(id);
}

Test(retry, keep_failed_0_keeps_nothing) {
  struct test_model_server srv;
  struct sbx_run_out r;
  const char *args[] = {"--keep-failed", "0", NULL};
  fail_run(&r, &srv, args);
  cr_expect(strstr(r.err, "kept until") == NULL, "%s", r.err);
  sbx_run_free(&r);
  test_model_server_stop(&srv);
  char *id = test_run_state(state);
  cr_expect_null(id, "no state kept");
  cr_expect_eq(running_sandboxes(), 0);
  free(id);
}

Test(retry, a_kept_run_whose_time_passed_is_ended) {
  struct test_model_server srv;
  struct sbx_run_out r;
  const char *args[] = {"--keep-failed", "2s", NULL};
  fail_run(&r, &srv, args);
  char *id = kept_id(r.err);
  sbx_run_free(&r);
  test_model_server_stop(&srv);
  cr_expect_eq(running_sandboxes(), 1);
  sleep(3);
  /* Any sbx runs on the store ends it. */
  const char *ls[] = {"runs", "ls", "--state-dir", state, NULL};
  sbx_run(&r, NULL, ls);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cr_expect_eq(running_sandboxes(), 0, "its sandbox was closed");
  cr_expect(!test_run_has_state(state, id), "its state was removed");
  json_t *v = show(id);
  cr_expect_str_eq(json_string_value(json_object_get(v, "status")), "failed");
  cr_expect(json_is_null(json_object_get(v, "retry_until")));
  json_decref(v);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, NULL, res);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "was kept for a retry until") &&
                strstr(r.err, "that time has passed") &&
                strstr(r.err, "it cannot be resumed"),
            "%s", r.err);
  sbx_run_free(&r);
  free(id);
}

/* The sweep at the start of sbx run, before a resume of the run itself:
 * the resume is refused, saying why. */
Test(retry, a_resume_after_the_keep_time_is_refused) {
  struct test_model_server srv;
  struct sbx_run_out r;
  const char *args[] = {"--keep-failed", "1s", NULL};
  fail_run(&r, &srv, args);
  char *id = kept_id(r.err);
  sbx_run_free(&r);
  sleep(2);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "that time has passed, so its sandboxes were "
                          "closed and its state removed"),
            "%s", r.err);
  sbx_run_free(&r);
  cr_expect_eq(running_sandboxes(), 0);
  cr_expect(!test_run_has_state(state, id));
  free(id);
}

Test(retry, a_cancelled_kept_run_is_ended) {
  struct test_model_server srv;
  struct sbx_run_out r;
  fail_run(&r, &srv, NULL);
  char *id = kept_id(r.err);
  sbx_run_free(&r);
  test_model_server_stop(&srv);
  const char *cancel[] = {"runs", "cancel", "--state-dir", state, id, NULL};
  sbx_run(&r, NULL, cancel);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  char *status = test_run_status(state, id);
  cr_expect_str_eq(status, "cancelled");
  free(status);
  cr_expect_eq(running_sandboxes(), 0);
  cr_expect(!test_run_has_state(state, id));
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, NULL, res);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is cancelled; nothing to resume"), "%s", r.err);
  sbx_run_free(&r);
  free(id);
}

Test(retry, keep_failed_refuses_what_it_cannot_take) {
  const char *bad[] = {"5", "-1s", "1w", "10mm", "", "367d", "s"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct sbx_run_out r;
    const char *argv[] = {"run",  "--state-dir", state, "--keep-failed",
                          bad[i], "a.json",      "p",   NULL};
    sbx_run(&r, NULL, argv);
    cr_expect_eq(r.status, 2, "\"%s\": %s", bad[i], r.err);
    cr_expect(strstr(r.err, "--keep-failed") != NULL, "%s", r.err);
    sbx_run_free(&r);
  }
}

/* An outage at the first model call, before any step was saved: the run
 * is kept all the same and its retry asks again. */
Test(retry, a_run_failed_at_its_first_call_is_kept_and_resumed) {
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\"}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"status\": 503, \"headers\": {\"retry-after-ms\": \"1\"}, "
      "\"repeat\": 5},"
      " {\"text\": \"back\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "hello", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 1, "%s", r.err);
  char *id = kept_id(r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "back\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_assert_eq(json_array_size(reqs), 6);
  json_t *in = json_object_get(json_object_get(json_array_get(reqs, 5), "body"),
                               "input");
  cr_expect_eq(json_array_size(in), 1, "the prompt alone, once");
  json_decref(reqs);
  free(id);
}
