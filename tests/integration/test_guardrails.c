/* Guardrails end to end: the real sbx run, the scripted model server (a
 * second one for the guard agents, named by their base_url), and small
 * shell scripts as guardrail commands. Each test checks what a user sees:
 * the exit status, the error, the guardrail_tripped event, and what did
 * not run. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-guard-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(guardrails, .init = setup, .fini = teardown, .timeout = 120);

/* Writes the executable script NAME with BODY into the test dir. */
static void script(const char *name, const char *body) {
  char text[2048];
  (void)snprintf(text, sizeof(text), "#!/bin/sh\n%s\n", body);
  const char *p = test_write_file(dir, name, text);
  cr_assert_eq(chmod(p, 0755), 0);
}

/* The main agent: a command tool "mark" that creates the file "marked",
 * and the guardrail keys GUARDS (e.g. "\"input_guardrails\": [...]"). */
static const char *agent(const char *guards) {
  char text[2048];
  (void)snprintf(text, sizeof(text),
                 "{\"name\": \"Assistant\", \"capabilities\": [], %s,"
                 " \"tools\": [{\"type\": \"command\", \"name\": \"mark\","
                 " \"command\": [\"sh\", \"-c\", \"touch marked; echo ok\"]}]}",
                 guards);
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", text));
  return path;
}

/* A guard agent at guard.json talking to the model server at URL. */
static void guard_agent(const char *url) {
  char text[1024];
  (void)snprintf(text, sizeof(text),
                 "{\"name\": \"Guard\", \"capabilities\": [], \"base_url\": "
                 "\"%s\", \"output_type\": {\"type\": \"object\", "
                 "\"properties\": {\"tripwire_triggered\": {\"type\": "
                 "\"boolean\"}, \"output_info\": {\"type\": \"string\"}}, "
                 "\"required\": [\"tripwire_triggered\", \"output_info\"], "
                 "\"additionalProperties\": false}}",
                 url);
  (void)test_write_file(dir, "guard.json", text);
}

/* The main model: calls "mark", then answers "the answer". */
static const char main_script[] =
    "[{\"tool_calls\": [{\"name\": \"mark\", \"call_id\": \"m1\", "
    "\"arguments\": \"{}\"}]}, {\"text\": \"the answer\"}]";

struct result {
  struct sbx_run_out out;
  json_t *reqs; /* the main model's */
};

/* Runs the agent at PATH with --stream (with the guard model's SCRIPT
 * served when not NULL). */
static void run(struct result *res, const char *path, const char *script_main,
                const char *guard_script) {
  struct test_model_server g = {0};
  if (guard_script) {
    test_model_server_start(&g, guard_script, NULL);
    guard_agent(g.base_url);
  }
  struct test_model_server m;
  test_model_server_start(&m, script_main, NULL);
  char state[96];
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  const char *argv[] = {"run", "--stream",        "--state-dir", state,
                        path,  "my card is 4111", NULL};
  char cwd[4096];
  cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
  cr_assert_eq(chdir(dir), 0);
  sbx_run(&res->out, m.base_url, argv);
  cr_assert_eq(chdir(cwd), 0);
  res->reqs = test_model_server_requests(&m);
  test_model_server_stop(&m);
  if (guard_script)
    test_model_server_stop(&g);
}

static void result_free(struct result *r) {
  json_decref(r->reqs);
  sbx_run_free(&r->out);
}

/* The streamed event of TYPE (new), or NULL. */
static json_t *event(const struct result *r, const char *type) {
  const char *p = r->out.out;
  while (p && *p) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    json_t *ev = json_loadb(p, n, 0, NULL);
    const char *t = json_string_value(json_object_get(ev, "type"));
    if (t && strcmp(t, type) == 0)
      return ev;
    json_decref(ev);
    p = nl ? nl + 1 : NULL;
  }
  return NULL;
}

static bool marked(void) {
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/marked", dir);
  return access(p, F_OK) == 0;
}

/* The message of the run_failed event, or "". */
static const char *failure(const struct result *r, json_t **keep) {
  *keep = event(r, "run_failed");
  const char *m = json_string_value(json_object_get(*keep, "error"));
  return m ? m : "";
}

Test(guardrails, input_command_trips_before_any_tool_runs) {
  script("check-input", "cat > seen.json; echo '{\"tripwire_triggered\": "
                        "true, \"output_info\": {\"reason\": \"pii\"}}'");
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"no_pii\", \"command\": "
            "[\"./check-input\"], \"timeout_s\": 10}]"),
      main_script, NULL);
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(
      strstr(r.out.err, "Input guardrail triggered: {\"reason\":\"pii\"}"),
      "%s", r.out.err);
  cr_expect_not(marked(), "no tool of the first turn ran");
  json_t *ev = event(&r, "guardrail_tripped");
  cr_assert_not_null(ev, "%s", r.out.out);
  cr_expect_str_eq(json_string_value(json_object_get(ev, "guardrail")),
                   "no_pii");
  cr_expect_str_eq(json_string_value(json_object_get(ev, "kind")), "input");
  cr_expect_str_eq(json_string_value(json_object_get(ev, "agent")),
                   "Assistant");
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(ev, "output_info"), "reason")),
                   "pii");
  json_decref(ev);
  json_t *f;
  cr_expect(strstr(failure(&r, &f), "Input guardrail triggered"));
  json_decref(f);
  /* The run's record names the guardrail; its state is not kept for a
   * resume: the same input would trip it again. */
  char state[96];
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  const char *ls[] = {"runs", "ls", "--json", "--state-dir", state, NULL};
  struct sbx_run_out o;
  sbx_run(&o, NULL, ls);
  json_t *rows = json_loads(o.out, 0, NULL);
  json_t *row = json_array_get(rows, 0);
  cr_expect_str_eq(json_string_value(json_object_get(row, "status")), "failed");
  json_t *g = json_object_get(json_object_get(row, "error"), "guardrail");
  cr_expect_str_eq(json_string_value(json_object_get(g, "name")), "no_pii");
  cr_expect_str_eq(json_string_value(json_object_get(g, "kind")), "input");
  const char *id = json_string_value(json_object_get(row, "id"));
  cr_expect_not(id && test_run_has_state(state, id));
  json_decref(rows);
  sbx_run_free(&o);
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/seen.json", dir);
  json_t *seen = json_load_file(p, 0, NULL);
  cr_assert_not_null(seen, "the command got JSON on stdin");
  cr_expect_str_eq(json_string_value(json_object_get(seen, "guardrail")),
                   "no_pii");
  cr_expect_str_eq(json_string_value(json_object_get(seen, "kind")), "input");
  cr_expect_str_eq(json_string_value(json_object_get(seen, "agent")),
                   "Assistant");
  cr_expect_str_eq(json_string_value(json_object_get(seen, "input")),
                   "my card is 4111");
  json_decref(seen);
  result_free(&r);
}

Test(guardrails, input_command_that_passes_lets_the_run_finish) {
  script("check-input", "cat >/dev/null; echo '{\"tripwire_triggered\": "
                        "false}'");
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"no_pii\", \"command\": "
            "[\"./check-input\"]}]"),
      main_script, NULL);
  cr_expect_eq(r.out.status, 0, "stderr: %s", r.out.err);
  cr_expect(marked());
  json_t *ev = event(&r, "guardrail_tripped");
  cr_expect_null(ev);
  json_decref(ev);
  ev = event(&r, "run_finished");
  cr_expect_not_null(ev);
  json_decref(ev);
  result_free(&r);
}

Test(guardrails, output_command_sees_the_final_output_and_trips) {
  script("check-output", "cat > seen.json; echo '{\"tripwire_triggered\": "
                         "true, \"output_info\": \"leak\"}'");
  struct result r = {0};
  run(&r,
      agent("\"output_guardrails\": [{\"name\": \"policy\", \"command\": "
            "[\"./check-output\"], \"timeout_s\": 10}]"),
      main_script, NULL);
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Output guardrail triggered: \"leak\""), "%s",
            r.out.err);
  cr_expect(marked(), "the tools ran: only the output is refused");
  cr_expect_null(strstr(r.out.out, "\"run_finished\""));
  json_t *ev = event(&r, "guardrail_tripped");
  cr_assert_not_null(ev);
  cr_expect_str_eq(json_string_value(json_object_get(ev, "kind")), "output");
  json_decref(ev);
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/seen.json", dir);
  json_t *seen = json_load_file(p, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(seen, "output")),
                   "the answer");
  cr_expect_str_eq(json_string_value(json_object_get(seen, "kind")), "output");
  json_decref(seen);
  result_free(&r);
}

Test(guardrails, output_command_that_passes_gives_the_output) {
  script("check-output",
         "cat >/dev/null; echo '{\"tripwire_triggered\": false}'");
  struct result r = {0};
  run(&r,
      agent("\"output_guardrails\": [{\"name\": \"policy\", \"command\": "
            "[\"./check-output\"]}]"),
      main_script, NULL);
  cr_expect_eq(r.out.status, 0, "stderr: %s", r.out.err);
  json_t *ev = event(&r, "run_finished");
  cr_expect_str_eq(json_string_value(json_object_get(ev, "final_output")),
                   "the answer");
  json_decref(ev);
  result_free(&r);
}

Test(guardrails, input_guard_agent_trips) {
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"no_pii\", \"agent\": "
            "\"guard.json\"}]"),
      main_script,
      "[{\"text\": \"{\\\"tripwire_triggered\\\": true, "
      "\\\"output_info\\\": \\\"card number\\\"}\"}]");
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Input guardrail triggered: \"card number\""),
            "%s", r.out.err);
  cr_expect_not(marked());
  json_t *ev = event(&r, "guardrail_tripped");
  cr_expect_not_null(ev);
  json_decref(ev);
  result_free(&r);
}

Test(guardrails, input_guard_agent_that_passes_lets_the_run_finish) {
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"no_pii\", \"agent\": "
            "\"guard.json\"}]"),
      main_script,
      "[{\"text\": \"{\\\"tripwire_triggered\\\": false, "
      "\\\"output_info\\\": \\\"fine\\\"}\"}]");
  cr_expect_eq(r.out.status, 0, "stderr: %s", r.out.err);
  cr_expect(marked());
  json_t *ev = event(&r, "run_finished");
  cr_expect_not_null(ev, "%s", r.out.out);
  json_decref(ev);
  result_free(&r);
}

Test(guardrails, output_guard_agent_gets_the_output_and_trips) {
  struct result r = {0};
  run(&r,
      agent("\"output_guardrails\": [{\"name\": \"policy\", \"agent\": "
            "\"guard.json\"}]"),
      main_script,
      "[{\"text\": \"{\\\"tripwire_triggered\\\": true, "
      "\\\"output_info\\\": \\\"off topic\\\"}\"}]");
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Output guardrail triggered: \"off topic\""),
            "%s", r.out.err);
  result_free(&r);
}

Test(guardrails, guard_agent_answer_that_does_not_fit_fails_the_run) {
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"no_pii\", \"agent\": "
            "\"guard.json\"}]"),
      main_script, "[{\"text\": \"yes it is fine\"}]");
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Input guardrail failed to complete: guardrail "
                              "\"no_pii\" of agent \"Assistant\""),
            "%s", r.out.err);
  cr_expect_not(marked());
  result_free(&r);
}

/* A failing command: BODY as the script, WANT in the error. */
static void command_fails(const char *body, const char *timeout,
                          const char *want) {
  script("check", body);
  char guards[256];
  (void)snprintf(guards, sizeof(guards),
                 "\"input_guardrails\": [{\"name\": \"g\", \"command\": "
                 "[\"./check\"]%s}]",
                 timeout);
  struct result r = {0};
  run(&r, agent(guards), main_script, NULL);
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Input guardrail failed to complete"), "%s",
            r.out.err);
  cr_expect(strstr(r.out.err, want), "want %s: %s", want, r.out.err);
  cr_expect_not(marked());
  json_t *ev = event(&r, "guardrail_tripped");
  cr_expect_null(ev, "a failure is no tripwire");
  json_decref(ev);
  result_free(&r);
}

Test(guardrails, command_exit_status_fails_the_run) {
  command_fails("echo 'policy db down' >&2; exit 3", "",
                "the command exited with status 3: policy db down");
}

Test(guardrails, command_timeout_fails_the_run) {
  command_fails("sleep 30", ", \"timeout_s\": 1",
                "the command timed out after 1 s");
}

Test(guardrails, command_bad_json_fails_the_run) {
  command_fails("echo 'yes'", "", "the command's output is not JSON");
  command_fails("echo '{\"tripwire\": true}'", "",
                "not a JSON object with a boolean \"tripwire_triggered\"");
  command_fails("echo '{\"tripwire_triggered\": false, \"why\": 1}'", "",
                "unknown key \"why\"");
}

Test(guardrails, command_output_over_the_limit_fails_the_run) {
  command_fails("head -c 2000000 /dev/zero", "", "larger than");
}

Test(guardrails, missing_guard_agent_file_is_a_configuration_error) {
  struct result r = {0};
  run(&r,
      agent("\"input_guardrails\": [{\"name\": \"g\", \"agent\": "
            "\"nope.json\"}]"),
      main_script, NULL);
  cr_expect_eq(r.out.status, 2, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "nope.json: cannot open (\"input_guardrails[0]"
                              ".agent\""),
            "%s", r.out.err);
  result_free(&r);
}

/* An agent used as a tool runs its own guardrails, as the SDK's as_tool
 * runs a Runner: its output guardrail's tripwire stops the whole run. */
Test(guardrails, a_nested_agents_output_guardrail_stops_the_run) {
  script("check-output", "cat > seen.json; echo '{\"tripwire_triggered\": "
                         "true, \"output_info\": \"nested\"}'");
  (void)test_write_file(dir, "helper.json",
                        "{\"name\": \"Helper\", \"capabilities\": [], "
                        "\"output_guardrails\": [{\"name\": \"policy\", "
                        "\"command\": [\"./check-output\"]}]}");
  const char *a = test_write_file(
      dir, "lead.json",
      "{\"name\": \"Lead\", \"capabilities\": [], \"tools\": [{\"type\": "
      "\"agent_as_tool\", \"agent\": \"helper.json\"}]}");
  char path[128];
  (void)snprintf(path, sizeof(path), "%s", a);
  struct result r = {0};
  run(&r, path,
      "[{\"tool_calls\": [{\"name\": \"helper\", \"call_id\": \"h1\", "
      "\"arguments\": {\"input\": \"look\"}}]}, {\"text\": \"the secret\"}, "
      "{\"text\": \"never asked\"}]",
      NULL);
  cr_expect_eq(r.out.status, 1, "stderr: %s", r.out.err);
  cr_expect(strstr(r.out.err, "Output guardrail triggered: \"nested\" "
                              "(guardrail \"policy\" of agent \"Helper\")"),
            "%s", r.out.err);
  cr_expect_eq(json_array_size(r.reqs), 2, "the lead got no answer back");
  json_t *ev = event(&r, "guardrail_tripped");
  cr_assert_not_null(ev);
  cr_expect_str_eq(json_string_value(json_object_get(ev, "agent")), "Helper");
  cr_expect_eq(json_integer_value(json_object_get(ev, "depth")), 1);
  json_decref(ev);
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/seen.json", dir);
  json_t *seen = json_load_file(p, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(seen, "output")),
                   "the secret");
  json_decref(seen);
  result_free(&r);
}
