/* Command tools end to end: the real sbx run, the scripted model server,
 * and small shell scripts as the programs the agent file names. Each test
 * checks what the model was sent: the tool's definition and its output. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-cmdtool-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(command_tools, .init = setup, .fini = teardown, .timeout = 120);

/* Writes the executable script NAME with BODY into the test dir. */
static void script(const char *name, const char *body) {
  char text[2048];
  (void)snprintf(text, sizeof(text), "#!/bin/sh\n%s\n", body);
  const char *p = test_write_file(dir, name, text);
  cr_assert_eq(chmod(p, 0755), 0);
}

/* An agent with one command tool "lookup_price" running COMMAND (a JSON
 * array) with TIMEOUT seconds and the EXTRA keys (may be ""). */
static const char *agent(const char *command, int timeout, const char *extra) {
  char text[2048];
  (void)snprintf(
      text, sizeof(text),
      "{\"name\": \"Shop\", \"capabilities\": [], %s"
      " \"tools\": [{\"type\": \"command\", \"name\": \"lookup_price\","
      " \"description\": \"Looks a price up.\", \"parameters\": {\"type\": "
      "\"object\", \"properties\": {\"sku\": {\"type\": \"string\"}},"
      " \"required\": [\"sku\"]}, \"command\": %s, \"timeout_s\": %d}]}",
      extra, command, timeout);
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", text));
  return path;
}

struct fixture {
  struct sbx_run_out out;
  json_t *reqs;
};

/* Runs the agent at PATH against a model that calls lookup_price once with
 * ARGS (JSON text of the arguments string) and then answers "done". */
static void run_once(struct fixture *f, const char *path, const char *args) {
  char scr[1024];
  json_t *a = json_string(args);
  char *aj = json_dumps(a, JSON_ENCODE_ANY);
  (void)snprintf(scr, sizeof(scr),
                 "[{\"tool_calls\": [{\"name\": \"lookup_price\", "
                 "\"call_id\": \"p1\", \"arguments\": %s}]},"
                 " {\"text\": \"done\"}]",
                 aj);
  free(aj);
  json_decref(a);
  struct test_model_server srv;
  test_model_server_start(&srv, scr, NULL);
  const char *argv[] = {"run", path, "price of A1?", NULL};
  sbx_run(&f->out, srv.base_url, argv);
  f->reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
}

static void fixture_free(struct fixture *f) {
  json_decref(f->reqs);
  sbx_run_free(&f->out);
}

Test(command_tools, arguments_go_to_stdin_and_stdout_is_the_output) {
  script("price-tool", "printf 'args=%s argv=%s' \"$(cat)\" \"$1\"; pwd >&2");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\", \"--json\"]", 10, ""),
           "{\"sku\":\"A1\"}");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  json_t *tools = json_object_get(
      json_object_get(json_array_get(f.reqs, 0), "body"), "tools");
  json_t *t = json_array_get(tools, 0);
  cr_expect_str_eq(json_string_value(json_object_get(t, "name")),
                   "lookup_price");
  cr_expect_str_eq(json_string_value(json_object_get(t, "description")),
                   "Looks a price up.");
  cr_expect_not_null(json_object_get(
      json_object_get(json_object_get(t, "parameters"), "properties"), "sku"));
  cr_expect(json_is_false(json_object_get(t, "strict")));
  cr_expect_str_eq(test_call_output(f.reqs, 1, "p1"),
                   "args={\"sku\":\"A1\"} argv=--json");
  fixture_free(&f);
}

Test(command_tools, bad_json_arguments_are_reported_and_nothing_runs) {
  script("price-tool", "touch ran; echo ok");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\"]", 10, ""), "{\"sku\": ");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o = test_call_output(f.reqs, 1, "p1");
  cr_assert_not_null(o);
  static const char want[] = "An error occurred while parsing tool "
                             "arguments. Please try again with valid JSON. "
                             "Error: ";
  cr_expect(strncmp(o, want, strlen(want)) == 0, "%s", o);
  char ran[128];
  (void)snprintf(ran, sizeof(ran), "%s/ran", dir);
  cr_expect_neq(access(ran, F_OK), 0, "the command did not run");
  fixture_free(&f);
}

Test(command_tools, non_zero_exit_is_reported_with_its_stderr) {
  script("price-tool", "echo partial; echo 'no such sku' >&2; exit 3");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\"]", 10, ""), "{\"sku\":\"ZZ\"}");
  cr_expect_eq(f.out.status, 0, "a failed tool does not fail the run: %s",
               f.out.err);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "p1"),
                   "An error occurred while running the tool. Please try "
                   "again. Error: the command exited with status 3: no such "
                   "sku");
  fixture_free(&f);
}

/* Whether PID runs (a zombie left to be reaped does not). */
static bool alive(int pid) {
  char p[64], st[512] = "";
  (void)snprintf(p, sizeof(p), "/proc/%d/stat", pid);
  FILE *fp = fopen(p, "r");
  if (!fp)
    return false;
  size_t n = fread(st, 1, sizeof(st) - 1, fp);
  fclose(fp);
  st[n] = '\0';
  const char *rp = strrchr(st, ')');
  return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

Test(command_tools, timeout_kills_the_process_group) {
  script("price-tool", "sleep 30 & echo $! > child.pid; sleep 30");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\"]", 1, ""), "{\"sku\":\"A1\"}");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect(f.out.secs < 20, "took %.1f s", f.out.secs);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "p1"),
                   "An error occurred while running the tool. Please try "
                   "again. Error: the command timed out after 1 s");
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/child.pid", dir);
  FILE *fp = fopen(p, "r");
  cr_assert_not_null(fp);
  int pid = 0;
  cr_assert_eq(fscanf(fp, "%d", &pid), 1);
  fclose(fp);
  usleep(200 * 1000);
  cr_expect(!alive(pid), "the background child was killed too");
  fixture_free(&f);
}

Test(command_tools, what_it_leaves_running_is_killed_when_it_ends) {
  script("price-tool",
         "sleep 30 >/dev/null 2>&1 & echo $! > child.pid; echo 12.50");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\"]", 10, ""), "{\"sku\":\"A1\"}");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect(f.out.secs < 20, "took %.1f s", f.out.secs);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "p1"), "12.50\n");
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/child.pid", dir);
  FILE *fp = fopen(p, "r");
  cr_assert_not_null(fp);
  int pid = 0;
  cr_assert_eq(fscanf(fp, "%d", &pid), 1);
  fclose(fp);
  usleep(200 * 1000);
  cr_expect(!alive(pid), "the background child was killed");
  fixture_free(&f);
}

Test(command_tools, oversized_output_is_refused) {
  script("price-tool", "head -c 2000000 /dev/zero | tr '\\0' a");
  struct fixture f = {0};
  run_once(&f, agent("[\"./price-tool\"]", 10, ""), "{\"sku\":\"A1\"}");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "p1"),
                   "An error occurred while running the tool. Please try "
                   "again. Error: the command's output is larger than "
                   "1048576 bytes");
  fixture_free(&f);
}

Test(command_tools, approval_applies_by_tool_name) {
  script("price-tool", "touch ran; echo 12.50");
  const char *a = agent("[\"./price-tool\"]", 10,
                        "\"approvals\": {\"lookup_price\": \"always\"},");
  struct test_model_server srv;
  test_model_server_start(&srv,
                          "[{\"tool_calls\": [{\"name\": \"lookup_price\", "
                          "\"call_id\": \"p1\", \"arguments\": {\"sku\": "
                          "\"A1\"}}]}, {\"text\": \"it costs 12.50\"}]",
                          NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "price?", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char ran[128];
  (void)snprintf(ran, sizeof(ran), "%s/ran", dir);
  cr_expect_neq(access(ran, F_OK), 0, "nothing ran before the approval");
  /* "sbx: run ID is waiting for approval" */
  const char *p = strstr(r.err, "sbx: run ");
  cr_assert_not_null(p, "%s", r.err);
  p += strlen("sbx: run ");
  char *rs = strndup(p, strcspn(p, " \n"));
  sbx_run_free(&r);
  const char *ok[] = {"approve", "--state-dir", state, rs, "p1", NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "it costs 12.50\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_str_eq(test_call_output(reqs, -1, "p1"), "12.50\n");
  cr_expect_eq(access(ran, F_OK), 0, "the approved call ran");
  json_decref(reqs);
  free(rs);
}

/* An approval for a tool the agent does not have would decide nothing: a
 * misspelt name is refused (exit 2) before the model is asked. */
Test(command_tools, approval_for_no_tool_of_the_agent_is_refused) {
  script("price-tool", "echo 12.50");
  static const struct {
    const char *approvals, *want;
  } cases[] = {
      {"\"approvals\": {\"lookup_prices\": \"always\"},",
       "\"approvals.lookup_prices\" names no tool the agent has, so it "
       "would decide nothing"},
      /* The shell capability's tool, but the agent has no capabilities. */
      {"\"approvals\": {\"exec_command\": [\"ls\"]},",
       "\"approvals.exec_command\" names no tool the agent has"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *a = agent("[\"./price-tool\"]", 10, cases[i].approvals);
    struct test_model_server srv;
    test_model_server_start(&srv, "[{\"text\": \"hi\"}]", NULL);
    struct sbx_run_out r;
    const char *run[] = {"run", "--state-dir", state, a, "price?", NULL};
    sbx_run(&r, srv.base_url, run);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "%s", r.err);
    json_t *reqs = test_model_server_requests(&srv);
    cr_expect_eq(json_array_size(reqs), 0, "no model call");
    json_decref(reqs);
    test_model_server_stop(&srv);
    sbx_run_free(&r);
  }
}
