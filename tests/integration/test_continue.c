/* Conversations continued: `sbx run --continue RUN_ID PROMPT` starts a new
 * run of the completed run's agent on its whole conversation and PROMPT
 * (the SDK's result.to_input_list() plus the new message), or, with
 * model_settings.store on the Responses API, on PROMPT alone chained to
 * the last response (previous_response_id); and says no to what it cannot
 * continue. Real sbx, real sandboxd, the scripted model server. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];
static struct test_model_server srv;

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-continue-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  test_model_server_stop(&srv);
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(continue_run, .init = setup, .fini = teardown, .timeout = 180);

static const char *write_agent(const char *json) {
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", json));
  return path;
}

/* The id of the newest run of the store (new). */
static char *newest_id(void) {
  struct sbx_run_out r;
  const char *ls[] = {"runs", "ls", "--json", "--state-dir", state, NULL};
  sbx_run(&r, NULL, ls);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_error_t je;
  json_t *all = json_loads(r.out, 0, &je);
  cr_assert_not_null(all, "%s", r.out);
  char *id =
      strdup(json_string_value(json_object_get(json_array_get(all, 0), "id")));
  json_decref(all);
  sbx_run_free(&r);
  return id;
}

/* Runs AGENT on PROMPT (exit 0 expected, stdout WANT); its run id, the
 * newest of the store (new). */
static char *first_run(const char *agent, const char *prompt,
                       const char *want) {
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, agent, prompt, NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, want);
  sbx_run_free(&r);
  return newest_id();
}

/* sbx run --continue ID PROMPT into R. */
static void cont(struct sbx_run_out *r, const char *id, const char *prompt) {
  const char *argv[] = {"run", "--state-dir", state, "--continue",
                        id,    prompt,        NULL};
  sbx_run(r, srv.base_url, argv);
}

/* Whether ITEM is the user message TEXT, as sbx sends a prompt. */
static bool is_user(json_t *item, const char *text) {
  const char *c = json_string_value(json_object_get(item, "content"));
  const char *role = json_string_value(json_object_get(item, "role"));
  return c && role && strcmp(role, "user") == 0 && strcmp(c, text) == 0;
}

Test(continue_run, the_continuation_sends_the_whole_conversation) {
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"echo hi\"}}]},"
      " {\"text\": \"first answer\"},"
      " {\"text\": \"second answer\"}]",
      NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\"}");
  char *id = first_run(a, "one", "first answer\n");
  struct sbx_run_out r;
  cont(&r, id, "and then?");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "second answer\n");
  cr_expect(strstr(r.err, "the conversation goes on in a new sandbox"), "%s",
            r.err);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  cr_assert_eq(json_array_size(reqs), 3);
  json_t *before = json_object_get(
      json_object_get(json_array_get(reqs, 1), "body"), "input");
  json_t *body = json_object_get(json_array_get(reqs, 2), "body");
  json_t *in = json_object_get(body, "input");
  /* The first run's input, its answer, then the new message. */
  size_t n = json_array_size(before);
  cr_assert_eq(json_array_size(in), n + 2, "%s", json_dumps(in, 0));
  for (size_t i = 0; i < n; i++)
    cr_expect(json_equal(json_array_get(in, i), json_array_get(before, i)),
              "item %zu", i);
  cr_expect(is_user(json_array_get(in, 0), "one"));
  json_t *ans = json_array_get(in, n);
  cr_expect_str_eq(json_string_value(json_object_get(ans, "type")), "message");
  cr_expect_str_eq(
      json_string_value(json_object_get(
          json_array_get(json_object_get(ans, "content"), 0), "text")),
      "first answer");
  cr_expect(is_user(json_array_get(in, n + 1), "and then?"));
  cr_expect_null(json_object_get(body, "previous_response_id"));
  cr_expect_not_null(test_call_output(reqs, 2, "c1"));
  json_decref(reqs);
  /* A new run, recorded as continuing the first. */
  const char *ls[] = {"runs", "ls", "--json", "--state-dir", state, NULL};
  sbx_run(&r, NULL, ls);
  json_error_t je;
  json_t *all = json_loads(r.out, 0, &je);
  cr_assert_eq(json_array_size(all), 2, "%s", r.out);
  json_t *v = json_array_get(all, 0);
  cr_expect_str_neq(json_string_value(json_object_get(v, "id")), id);
  cr_expect_str_eq(json_string_value(json_object_get(v, "continues")), id);
  cr_expect_str_eq(json_string_value(json_object_get(v, "status")),
                   "completed");
  json_decref(all);
  sbx_run_free(&r);
  free(id);
}

Test(continue_run, with_store_only_the_new_input_goes_with_the_response_id) {
  test_model_server_start(
      &srv,
      "[{\"text\": \"first answer\", \"id\": \"resp_first\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
      "\"arguments\": {\"cmd\": \"echo two\"}}], \"id\": \"resp_call\"},"
      " {\"text\": \"second answer\", \"id\": \"resp_second\"}]",
      NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\", "
                              "\"model_settings\": {\"store\": true}}");
  char *id = first_run(a, "one", "first answer\n");
  struct sbx_run_out r;
  cont(&r, id, "and then?");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "second answer\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  cr_assert_eq(json_array_size(reqs), 3);
  /* The first call of the continuation: the new message alone. */
  json_t *b1 = json_object_get(json_array_get(reqs, 1), "body");
  cr_expect_str_eq(
      json_string_value(json_object_get(b1, "previous_response_id")),
      "resp_first");
  cr_expect(json_is_true(json_object_get(b1, "store")));
  json_t *in1 = json_object_get(b1, "input");
  cr_expect_eq(json_array_size(in1), 1, "%s", json_dumps(in1, 0));
  cr_expect(is_user(json_array_get(in1, 0), "and then?"));
  /* The next: the call's output alone, after the call's response. */
  json_t *b2 = json_object_get(json_array_get(reqs, 2), "body");
  cr_expect_str_eq(
      json_string_value(json_object_get(b2, "previous_response_id")),
      "resp_call");
  json_t *in2 = json_object_get(b2, "input");
  cr_expect_eq(json_array_size(in2), 1, "%s", json_dumps(in2, 0));
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(in2, 0), "type")),
      "function_call_output");
  json_decref(reqs);
  free(id);
}

Test(continue_run, the_chain_goes_on_from_the_continued_run_last_response) {
  test_model_server_start(&srv,
                          "[{\"text\": \"a1\", \"id\": \"resp_a1\"},"
                          " {\"text\": \"a2\", \"id\": \"resp_a2\"},"
                          " {\"text\": \"a3\", \"id\": \"resp_a3\"}]",
                          NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\", "
                              "\"model_settings\": {\"store\": true}}");
  char *id = first_run(a, "one", "a1\n");
  struct sbx_run_out r;
  cont(&r, id, "two");
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  char *id2 = newest_id();
  cont(&r, id2, "three");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "a3\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  json_t *b = json_object_get(json_array_get(reqs, 2), "body");
  cr_expect_str_eq(
      json_string_value(json_object_get(b, "previous_response_id")), "resp_a2");
  cr_expect_eq(json_array_size(json_object_get(b, "input")), 1);
  json_decref(reqs);
  free(id2);
  free(id);
}

/* What --continue cannot continue, each said with exit status 2. */
Test(continue_run, what_cannot_be_continued_is_refused) {
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"echo x\"}}]},"
      " {\"status\": 400},"
      " {\"delay_ms\": 8000, \"text\": \"slow\"}]",
      NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\", "
                              "\"approvals\": {\"exec_command\": "
                              "\"always\"}}");
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "go", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "%s", r.err);
  sbx_run_free(&r);
  char *paused = test_run_state(state);
  cr_assert_not_null(paused);
  cont(&r, paused, "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is waiting_approval: only a completed run's "
                          "conversation can be continued"),
            "%s", r.err);
  sbx_run_free(&r);
  /* Approved, it fails at its next model call (a 400): kept for a
   * retry, not continued. */
  const char *ok[] = {"approve", "--state-dir", state, paused, "w1", NULL};
  sbx_run(&r, NULL, ok);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", paused, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 1, "%s", r.err);
  sbx_run_free(&r);
  cont(&r, paused, "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "failed: its conversation stops in the middle of a "
                          "turn; retry it with `sbx run --resume"),
            "%s", r.err);
  sbx_run_free(&r);
  /* Cancelled: its conversation went with it. */
  const char *cancel[] = {"runs", "cancel", "--state-dir", state, paused, NULL};
  sbx_run(&r, NULL, cancel);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cont(&r, paused, "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is cancelled: only a completed run's"), "%s", r.err);
  sbx_run_free(&r);
  /* Still running: its model call takes a while. */
  const char *a2 =
      test_write_file(dir, "b.json", "{\"name\": \"B\", \"model\": \"m1\"}");
  const char *run2[] = {"run", "--state-dir", state, a2, "slowly", NULL};
  pid_t pid = sbx_spawn(srv.base_url, NULL, 0, run2);
  for (int i = 0; i < 200; i++) {
    json_t *reqs = test_model_server_requests(&srv);
    size_t n = json_array_size(reqs);
    json_decref(reqs);
    if (n >= 3)
      break;
    usleep(50000);
  }
  char *running = newest_id();
  cr_expect_str_neq(running, paused);
  cont(&r, running, "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is running: only a completed run's"), "%s", r.err);
  sbx_run_free(&r);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  free(running);
  free(paused);
  /* No such run; not a run id; not with --resume; not with AGENT.json. */
  cont(&r, "run_0123456789abcdef0123456789abcdef", "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "no run \"run_0123456789abcdef0123456789abcdef\""),
            "%s", r.err);
  sbx_run_free(&r);
  cont(&r, "state.json", "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "--continue takes a run id"), "%s", r.err);
  sbx_run_free(&r);
  const char *both[] = {"run", "--state-dir", state, "--resume",
                        "x",   "--continue",  "y",   NULL};
  sbx_run(&r, NULL, both);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "not both"), "%s", r.err);
  sbx_run_free(&r);
  const char *extra[] = {"run", "--state-dir", state, "--continue", "x",
                         a,     "more",        NULL};
  sbx_run(&r, NULL, extra);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "takes a PROMPT and no AGENT.json"), "%s", r.err);
  sbx_run_free(&r);
}

/* A run in a developer-owned sandbox is continued in it while it is
 * there: the workspace goes on too; once it is removed, in a new one,
 * saying so. */
Test(continue_run, a_developer_sandbox_is_the_continuation_workspace) {
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"echo kept > note.txt\"}}]},"
      " {\"text\": \"written\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"cat note.txt\"}}]},"
      " {\"text\": \"read\"},"
      " {\"text\": \"fresh\"}]",
      NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\"}");
  const char *create[] = {"create", NULL};
  char *sb = sbx_sandbox_line(state, create);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, "--sandbox", sb,
                       a,     "write",       NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  char *id = newest_id();
  cont(&r, id, "read it");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "read\n");
  cr_expect(strstr(r.err, "in sandbox") && strstr(r.err, sb), "%s", r.err);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  const char *out = test_call_output(reqs, -1, "r1");
  cr_expect(out && strstr(out, "Output:\nkept\n"), "%s", out ? out : "-");
  json_decref(reqs);
  char *id2 = newest_id();
  const char *rm[] = {"rm", "--force", sb, NULL};
  sbx_sandbox_run(&r, state, rm);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cont(&r, id2, "again");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "fresh\n");
  cr_expect(strstr(r.err, "which is gone: the conversation goes on in a new "
                          "sandbox"),
            "%s", r.err);
  sbx_run_free(&r);
  free(id2);
  free(id);
  free(sb);
}

/* A chained continuation that fails is kept, and its retry goes on with
 * the chain where it stood: the last response's id, the items after it. */
Test(continue_run, a_chained_continuation_is_retried_on_its_chain) {
  test_model_server_start(
      &srv,
      "[{\"text\": \"a1\", \"id\": \"resp_a1\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"echo one\"}}], \"id\": \"resp_call\"},"
      " {\"status\": 500, \"headers\": {\"retry-after-ms\": \"1\"}, "
      "\"repeat\": 5},"
      " {\"text\": \"a2\", \"id\": \"resp_a2\"}]",
      NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\", "
                              "\"model_settings\": {\"store\": true}}");
  char *id = first_run(a, "one", "a1\n");
  struct sbx_run_out r;
  cont(&r, id, "two");
  cr_assert_eq(r.status, 1, "%s", r.err);
  cr_expect(strstr(r.err, "kept until"), "%s", r.err);
  sbx_run_free(&r);
  char *id2 = newest_id();
  const char *res[] = {"run", "--state-dir", state, "--resume", id2, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "a2\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  cr_assert_eq(json_array_size(reqs), 8);
  for (size_t i = 2; i < 8; i++) {
    json_t *b = json_object_get(json_array_get(reqs, i), "body");
    cr_expect_str_eq(
        json_string_value(json_object_get(b, "previous_response_id")),
        "resp_call", "request %zu", i);
    json_t *in = json_object_get(b, "input");
    cr_expect_eq(json_array_size(in), 1, "request %zu: %s", i,
                 json_dumps(in, 0));
    cr_expect_str_eq(
        json_string_value(json_object_get(json_array_get(in, 0), "type")),
        "function_call_output");
  }
  json_decref(reqs);
  free(id2);
  free(id);
}

/* A completed run whose conversation is not in the store (one of an sbx
 * that did not keep it) is refused, saying so; --resume of a completed
 * run points at --continue. */
Test(continue_run, a_run_without_its_conversation_is_refused) {
  test_model_server_start(&srv, "[{\"text\": \"done\"}]", NULL);
  const char *a = write_agent("{\"name\": \"A\", \"model\": \"m1\"}");
  char *id = first_run(a, "one", "done\n");
  struct sbx_run_out r;
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, NULL, res);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "is completed; nothing to resume (sbx run "
                          "--continue RUN_ID PROMPT goes on"),
            "%s", r.err);
  sbx_run_free(&r);
  char sql[160];
  (void)snprintf(sql, sizeof(sql),
                 "UPDATE runs SET state = NULL WHERE id = '%s'", id);
  test_store_exec(state, sql);
  cont(&r, id, "more");
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "kept no conversation to continue"), "%s", r.err);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  cr_expect_eq(json_array_size(reqs), 1, "no model call for a refusal");
  json_decref(reqs);
  free(id);
}
