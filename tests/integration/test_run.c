/* sbx run end to end: the real sbx binary, a real sandboxd per run, and
 * the scripted model server on loopback. Each test scripts the model's
 * replies and then checks what sbx printed and what it sent back. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-run-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(run, .init = setup, .fini = teardown, .timeout = 120);

static const char *agent(const char *name, const char *json) {
  static char path[256];
  const char *p = test_write_file(dir, name, json);
  (void)snprintf(path, sizeof(path), "%s", p);
  return path;
}

static const char basic_agent[] =
    "{\"name\": \"Tester\", \"model\": \"test-model\",\n"
    " \"instructions\": \"Be brief.\",\n"
    " \"default_manifest\": {\"entries\": {\n"
    "   \"notes.txt\": {\"type\": \"file\", \"content\": "
    "\"alpha\\nbeta\\n\"},\n"
    "   \"pic.png\": {\"type\": \"file\", \"content_base64\": "
    "\"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+"
    "M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==\"},\n"
    "   \"src\": {\"type\": \"dir\", \"children\": {\"main.c\": "
    "{\"type\": \"file\", \"content\": \"int main(void) { return 0; }\\n\"}}}\n"
    " }}}\n";

static json_t *find_item(json_t *reqs, size_t n, const char *type,
                         const char *call_id) {
  json_t *input = json_object_get(
      json_object_get(json_array_get(reqs, n), "body"), "input");
  size_t i;
  json_t *it;
  json_array_foreach(input, i, it) {
    const char *t = json_string_value(json_object_get(it, "type"));
    const char *c = json_string_value(json_object_get(it, "call_id"));
    if (t && strcmp(t, type) == 0 &&
        (!call_id || (c && strcmp(c, call_id) == 0)))
      return it;
  }
  return NULL;
}

struct fixture {
  struct test_model_server srv;
  struct sbx_run_out out;
  json_t *reqs;
};

static void run_script(struct fixture *f, const char *script,
                       const char *agent_path, const char *const *extra) {
  test_model_server_start(&f->srv, script, NULL);
  const char *argv[32];
  size_t n = 0;
  argv[n++] = "run";
  /* The same runs on another backend (ctest registers this file twice). */
  const char *backend = getenv("SBX_TEST_BACKEND");
  if (backend && *backend) {
    if (strcmp(backend, "docker") == 0 && !getenv("DOCKER_HOST"))
      cr_assert_fail("DOCKER_HOST is unset: the docker runs need a container "
                     "engine; run `scripts/containers.sh` and export the "
                     "DOCKER_HOST it prints (`make check` does both)");
    argv[n++] = "--backend";
    argv[n++] = backend;
  }
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n++] = agent_path;
  argv[n++] = "Do the task.";
  argv[n] = NULL;
  sbx_run(&f->out, f->srv.base_url, argv);
  f->reqs = test_model_server_requests(&f->srv);
  test_model_server_stop(&f->srv);
}

static void fixture_free(struct fixture *f) {
  json_decref(f->reqs);
  sbx_run_free(&f->out);
}

Test(run, exec_command_reads_a_workspace_file) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"cat notes.txt\"}}]},"
             " {\"text\": \"The notes say alpha and beta.\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "The notes say alpha and beta.\n");
  cr_assert_eq(json_array_size(f.reqs), 2);
  const char *o = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strncmp(o, "Chunk ID: ", 10) == 0, "%s", o);
  cr_expect(strstr(o, "\nProcess exited with code 0\nOutput:\nalpha\nbeta\n") !=
                NULL,
            "%s", o);
  cr_expect(strstr(o, "Wall time: ") != NULL);
  /* The system prompt carries the SDK's sections in order. */
  const char *ins = json_string_value(json_object_get(
      json_object_get(json_array_get(f.reqs, 0), "body"), "instructions"));
  const char *a = strstr(ins, "# Agent instructions\n\nBe brief.");
  const char *c = strstr(ins, "# Sandbox capability instructions");
  const char *fs = strstr(ins, "# Filesystem\n");
  cr_expect(a && c && fs && a < c && c < fs, "%s", ins);
  cr_expect(strstr(ins, "notes.txt # ") != NULL);
  cr_expect(strstr(ins, "src/ # ") != NULL);
  cr_expect(strstr(ins, "  main.c # ") != NULL);
  fixture_free(&f);
}

Test(run, long_command_gets_a_session_then_write_stdin_polls_it) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"sleep 1; echo finished\", "
             "\"yield_time_ms\": 250}}]},"
             " {\"tool_calls\": [{\"name\": \"write_stdin\", \"call_id\": "
             "\"c2\", \"arguments\": {\"session_id\": 1, \"chars\": \"\", "
             "\"yield_time_ms\": 3000}}]},"
             " {\"tool_calls\": [{\"name\": \"write_stdin\", \"call_id\": "
             "\"c3\", \"arguments\": {\"session_id\": 1}}]},"
             " {\"text\": \"ok\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o1 = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o1);
  cr_expect(strstr(o1, "Process running with session ID 1\nOutput:\n") != NULL,
            "%s", o1);
  const char *o2 = test_call_output(f.reqs, 2, "c2");
  cr_assert_not_null(o2);
  cr_expect(strstr(o2, "Process exited with code 0\nOutput:\nfinished\n") !=
                NULL,
            "%s", o2);
  /* The finished session is forgotten. */
  const char *o3 = test_call_output(f.reqs, 3, "c3");
  cr_assert_not_null(o3);
  cr_expect(strstr(o3, "Process exited with code 1\nOutput:\nwrite_stdin "
                       "failed: session not found: 1") != NULL,
            "%s", o3);
  fixture_free(&f);
}

Test(run, tty_process_answers_input) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"read x; echo got:$x\", "
             "\"tty\": true, \"yield_time_ms\": 500}}]},"
             " {\"tool_calls\": [{\"name\": \"write_stdin\", \"call_id\": "
             "\"c2\", \"arguments\": {\"session_id\": 1, \"chars\": "
             "\"hello\\n\", \"yield_time_ms\": 3000}}]},"
             " {\"text\": \"ok\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o1 = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o1);
  cr_expect(strstr(o1, "Process running with session ID 1") != NULL, "%s", o1);
  const char *o2 = test_call_output(f.reqs, 2, "c2");
  cr_assert_not_null(o2);
  cr_expect(strstr(o2, "Process exited with code 0") != NULL, "%s", o2);
  cr_expect(strstr(o2, "got:hello") != NULL, "%s", o2);
  fixture_free(&f);
}

Test(run, apply_patch_success_and_failure_reach_the_model) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"apply_patch\": {\"type\": \"update_file\", \"path\": "
             "\"notes.txt\", \"diff\": \"@@\\n alpha\\n-beta\\n+gamma\\n\", "
             "\"call_id\": \"p1\"}},"
             " {\"apply_patch\": {\"type\": \"update_file\", \"path\": "
             "\"notes.txt\", \"diff\": \"@@\\n-nothing here\\n+x\\n\", "
             "\"call_id\": \"p2\"}},"
             " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c3\", \"arguments\": {\"cmd\": \"cat notes.txt\"}}]},"
             " {\"text\": \"patched\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *ok = find_item(f.reqs, 1, "apply_patch_call_output", "p1");
  cr_assert_not_null(ok);
  cr_expect_str_eq(json_string_value(json_object_get(ok, "status")),
                   "completed");
  json_t *bad = find_item(f.reqs, 2, "apply_patch_call_output", "p2");
  cr_assert_not_null(bad);
  cr_expect_str_eq(json_string_value(json_object_get(bad, "status")), "failed");
  const char *why = json_string_value(json_object_get(bad, "output"));
  cr_assert_not_null(why);
  cr_expect(strstr(why, "notes.txt") && strstr(why, "nothing here"), "%s", why);
  const char *o3 = test_call_output(f.reqs, 3, "c3");
  cr_assert_not_null(o3);
  cr_expect(strstr(o3, "Output:\nalpha\ngamma\n") != NULL, "%s", o3);
  fixture_free(&f);
}

Test(run, view_image_returns_an_input_image) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"view_image\", \"call_id\": "
             "\"v1\", \"arguments\": {\"path\": \"pic.png\"}},"
             "                  {\"name\": \"view_image\", \"call_id\": "
             "\"v2\", \"arguments\": {\"path\": \"notes.txt\"}},"
             "                  {\"name\": \"view_image\", \"call_id\": "
             "\"v3\", \"arguments\": {\"path\": \"missing.png\"}}]},"
             " {\"text\": \"seen\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *v1 = find_item(f.reqs, 1, "function_call_output", "v1");
  cr_assert_not_null(v1);
  json_t *img = json_array_get(json_object_get(v1, "output"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(img, "type")),
                   "input_image");
  const char *url = json_string_value(json_object_get(img, "image_url"));
  cr_assert_not_null(url);
  cr_expect(strncmp(url, "data:image/png;base64,iVBORw0KGgo", 33) == 0, "%s",
            url);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "v2"),
                   "image path `notes.txt` is not a supported image file");
  cr_expect_str_eq(test_call_output(f.reqs, 1, "v3"),
                   "image path `missing.png` was not found");
  fixture_free(&f);
}

Test(run, output_is_truncated_to_max_output_tokens) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"seq 1 2000\", "
             "\"max_output_tokens\": 50}}]},"
             " {\"text\": \"ok\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "\nOriginal token count: 2224\nOutput:\nTotal output "
                      "lines: 2001\n\n1\n2\n") != NULL,
            "%s", o);
  cr_expect(strstr(o, "tokens truncated...") != NULL, "%s", o);
  cr_expect(strstr(o, "\n2000\n") != NULL, "the tail is kept: %s", o);
  fixture_free(&f);
}

/* Three calls of one response run at once: each marks its start and waits
 * (up to 10 s) for the other two, so run one after another the first
 * would say "alone"; their outputs still come in the calls' order. */
#define MEET(x)                                                                \
  "{\"name\": \"exec_command\", \"call_id\": \"" x "\", \"arguments\": "       \
  "{\"yield_time_ms\": 30000, \"cmd\": \"touch " x ".up; i=0; while [ $i -lt " \
  "200 ] && ! { [ -e a.up ] && [ -e b.up ] && [ -e c.up ]; }; do sleep 0.05; " \
  "i=$((i+1)); done; if [ -e a.up ] && [ -e b.up ] && [ -e c.up ]; then "      \
  "echo " x " met; else echo " x " alone; fi\"}}"

Test(run, parallel_calls_run_concurrently_in_order) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [" MEET("a") "," MEET("b") "," MEET(
                 "c") "]},"
                      " {\"text\": \"ok\"}]",
             agent("a.json", basic_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *input = json_object_get(
      json_object_get(json_array_get(f.reqs, 1), "body"), "input");
  const char *order[3] = {0};
  size_t k = 0, i;
  json_t *it;
  json_array_foreach(input, i, it) {
    const char *t = json_string_value(json_object_get(it, "type"));
    if (t && strcmp(t, "function_call_output") == 0 && k < 3)
      order[k++] = json_string_value(json_object_get(it, "call_id"));
  }
  cr_assert_eq(k, 3);
  cr_expect_str_eq(order[0], "a");
  cr_expect_str_eq(order[1], "b");
  cr_expect_str_eq(order[2], "c");
  static const char *const want[] = {"Output:\na met\n", "Output:\nb met\n",
                                     "Output:\nc met\n"};
  for (size_t n = 0; n < 3; n++) {
    const char *o = test_call_output(f.reqs, 1, order[n]);
    cr_expect(o && strstr(o, want[n]) != NULL, "%s", o ? o : "(none)");
  }
  fixture_free(&f);
}

Test(run, handoff_switches_the_agent) {
  agent("b.json", "{\"name\": \"Billing Expert\", \"instructions\": "
                  "\"You are the billing expert.\"}");
  const char *a = agent("a.json", "{\"name\": \"Triage\", \"instructions\": "
                                  "\"Route the request.\", \"handoffs\": "
                                  "[\"b.json\"]}");
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"transfer_to_billing_expert\", "
             "\"call_id\": \"h1\", \"arguments\": {}}]},"
             " {\"text\": \"billing answer\"}]",
             a, NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "billing answer\n");
  cr_assert_eq(json_array_size(f.reqs), 2);
  json_t *b0 = json_object_get(json_array_get(f.reqs, 0), "body");
  json_t *b1 = json_object_get(json_array_get(f.reqs, 1), "body");
  cr_expect(strstr(json_string_value(json_object_get(b0, "instructions")),
                   "Route the request.") != NULL);
  cr_expect(strstr(json_string_value(json_object_get(b1, "instructions")),
                   "You are the billing expert.") != NULL);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "h1"),
                   "{\"assistant\":\"Billing Expert\"}");
  fixture_free(&f);
}

Test(run, agent_as_tool_runs_a_nested_run) {
  agent("helper.json", "{\"name\": \"Helper\", \"instructions\": \"You help.\","
                       " \"max_turns\": 3}");
  const char *a =
      agent("a.json", "{\"name\": \"Boss\", \"tools\": [{\"type\": "
                      "\"agent_as_tool\", \"agent\": \"helper.json\", "
                      "\"name\": \"ask_helper\", \"description\": \"Ask the "
                      "helper.\"}]}");
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"ask_helper\", \"call_id\": "
             "\"t1\", \"arguments\": {\"input\": \"what is 2+2?\"}}]},"
             " {\"text\": \"four\"},"
             " {\"text\": \"The helper says four.\"}]",
             a, NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "The helper says four.\n");
  cr_assert_eq(json_array_size(f.reqs), 3);
  json_t *nested = json_object_get(json_array_get(f.reqs, 1), "body");
  cr_expect(strstr(json_string_value(json_object_get(nested, "instructions")),
                   "You help.") != NULL);
  /* The nested run's prompt is a plain string, as the SDK sends it. */
  const char *q = json_string_value(json_object_get(
      json_array_get(json_object_get(nested, "input"), 0), "content"));
  cr_expect_str_eq(q, "what is 2+2?");
  cr_expect_str_eq(test_call_output(f.reqs, 2, "t1"), "four");
  fixture_free(&f);
}

static const char structured_agent[] =
    "{\"name\": \"S\", \"output_type\": {\"type\": \"object\", "
    "\"properties\": {\"answer\": {\"type\": \"string\"}}, \"required\": "
    "[\"answer\"], \"additionalProperties\": false}}";

Test(run, structured_output_is_validated) {
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"{\\\"answer\\\": \\\"42\\\"}\"}]",
             agent("s.json", structured_agent), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "{\"answer\": \"42\"}\n");
  json_t *fmt = json_object_get(
      json_object_get(json_object_get(json_array_get(f.reqs, 0), "body"),
                      "text"),
      "format");
  cr_expect_str_eq(json_string_value(json_object_get(fmt, "type")),
                   "json_schema");
  fixture_free(&f);

  struct fixture g = {0};
  run_script(&g, "[{\"text\": \"{\\\"answer\\\": 42}\"}]",
             agent("s.json", structured_agent), NULL);
  cr_expect_eq(g.out.status, 1);
  cr_expect(strstr(g.out.err, "/answer: expected string") != NULL, "%s",
            g.out.err);
  fixture_free(&g);
}

Test(run, server_errors_twice_then_success) {
  struct fixture f = {0};
  run_script(&f, "[{\"status\": 500}, {\"status\": 503}, {\"text\": \"fine\"}]",
             agent("a.json", "{\"name\": \"A\"}"), NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "fine\n");
  cr_expect_eq(json_array_size(f.reqs), 3);
  fixture_free(&f);
}

Test(run, garbage_from_the_server_fails_the_run) {
  struct fixture f = {0};
  run_script(&f, "[{\"garbage\": \"<html>oops\"}]",
             agent("a.json", "{\"name\": \"A\"}"), NULL);
  cr_expect_eq(f.out.status, 1);
  cr_expect(strstr(f.out.err, "invalid JSON") != NULL, "%s", f.out.err);
  fixture_free(&f);
}

Test(run, max_turns_exceeded) {
  struct fixture f = {0};
  const char *extra[] = {"--max-turns", "2", NULL};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"arguments\": "
             "{\"cmd\": \"true\"}}], \"repeat\": 5}]",
             agent("a.json", basic_agent), extra);
  cr_expect_eq(f.out.status, 1);
  cr_expect(strstr(f.out.err, "max turns (2) exceeded") != NULL, "%s",
            f.out.err);
  cr_expect_eq(json_array_size(f.reqs), 2);
  fixture_free(&f);
}

Test(run, stream_prints_events) {
  struct fixture f = {0};
  const char *extra[] = {"--stream", NULL};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"echo hi\"}}]},"
             " {\"text\": \"streamed answer\"}]",
             agent("a.json", basic_agent), extra);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *want[] = {"run_started",        "tool_call_started",
                        "tool_call_finished", "turn_finished",
                        "text_delta",         "run_finished"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    char pat[64];
    (void)snprintf(pat, sizeof(pat), "\"type\":\"%s\"", want[i]);
    cr_expect(strstr(f.out.out, pat) != NULL, "no %s event in:\n%s", want[i],
              f.out.out);
  }
  /* Every line is a JSON object. */
  char *save = NULL;
  for (char *line = strtok_r(f.out.out, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save)) {
    json_error_t je;
    json_t *ev = json_loads(line, 0, &je);
    cr_expect(json_is_object(ev), "not JSON: %s", line);
    json_decref(ev);
  }
  fixture_free(&f);
}

Test(run, record_then_replay_without_a_server) {
  char rec[256];
  (void)snprintf(rec, sizeof(rec), "%s/rec.jsonl", dir);
  const char *a = agent("a.json", basic_agent);
  struct fixture f = {0};
  const char *extra[] = {"--record", rec, NULL};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"wc -l notes.txt\"}}]},"
             " {\"text\": \"two lines\"}]",
             a, extra);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  fixture_free(&f);
  struct sbx_run_out r;
  const char *argv[] = {"run", "--replay", rec, a, "Do the task.", NULL};
  sbx_run(&r, "http://127.0.0.1:1/v1", argv);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "two lines\n");
  cr_expect(strstr(r.err, "replayed 2 recorded model responses") != NULL, "%s",
            r.err);
  sbx_run_free(&r);
  /* Another prompt is refused at the first call, before any tool runs. */
  const char *other[] = {"run", "--replay", rec, a, "Do another task.", NULL};
  sbx_run(&r, "http://127.0.0.1:1/v1", other);
  cr_expect_eq(r.status, 1, "stderr: %s", r.err);
  cr_expect(strstr(r.err, "replay refused: the user message (input item 1) "
                          "differs from the recording's first request"),
            "%s", r.err);
  cr_expect_str_eq(r.out, "");
  sbx_run_free(&r);
}

Test(run, usage_and_config_errors_exit_2) {
  struct {
    const char *args[8];
    const char *want;
  } cases[] = {
      {{"run", NULL}, "expected AGENT.json and PROMPT"},
      {{"run", "--max-turns", "0", "a", "b", NULL}, "--max-turns"},
      {{"run", "--backend", "nope", "a", "b", NULL}, "unknown backend"},
      {{"run", "--cwd", "../x", "a", "b", NULL}, "--cwd"},
      {{"run", "/nonexistent/agent.json", "p", NULL},
       "/nonexistent/agent.json"},
      {{"frobnicate", NULL}, "unknown command"},
      {{"run", "--record", "x", "--replay", "y", "a", "b", NULL},
       "cannot be combined"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out r;
    sbx_run(&r, NULL, cases[i].args);
    cr_expect_eq(r.status, 2, "case %zu: status %d", i, r.status);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "case %zu: %s", i, r.err);
    sbx_run_free(&r);
  }
  const char *bad = agent("bad.json", "{\"name\": \"A\", \"modle\": \"x\"}");
  struct sbx_run_out r;
  const char *argv[] = {"run", bad, "p", NULL};
  sbx_run(&r, NULL, argv);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "unknown key \"modle\"") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *help[] = {"run", "--help", NULL};
  sbx_run(&r, NULL, help);
  cr_expect_eq(r.status, 0);
  cr_expect(strstr(r.out, "--replay FILE") != NULL);
  sbx_run_free(&r);
}

/* The backends' flags and run_config are checked against the backend the
 * run uses, before any sandbox exists; each refusal names the flag, or the
 * file and the key. */
Test(run, backend_flags_and_run_config_are_checked) {
  char a[256], b[256], c[256], d[256], h[256], h2[256], pok[256];
  (void)snprintf(pok, sizeof(pok), "%s", agent("ok.json", "{\"name\": \"A\"}"));
  (void)snprintf(a, sizeof(a), "%s",
                 agent("a.json", "{\"name\": \"A\", \"run_config\": "
                                 "{\"image\": \"x\"}}"));
  (void)snprintf(b, sizeof(b), "%s",
                 agent("b.json", "{\"name\": \"B\", \"run_config\": "
                                 "{\"backend\": \"docker\", "
                                 "\"network_mode\": \"host\"}}"));
  (void)snprintf(c, sizeof(c), "%s",
                 agent("c.json", "{\"name\": \"C\", \"run_config\": "
                                 "{\"backend\": \"docker\", "
                                 "\"image\": \"img\"}}"));
  (void)snprintf(d, sizeof(d), "%s",
                 agent("d.json", "{\"name\": \"D\", \"run_config\": "
                                 "{\"backend\": \"docker\", \"cpus\": "
                                 "\"two\"}}"));
  (void)snprintf(h, sizeof(h), "%s",
                 agent("h.json", "{\"name\": \"H\", \"handoffs\": "
                                 "[\"d.json\"]}"));
  (void)snprintf(h2, sizeof(h2), "%s",
                 agent("h2.json", "{\"name\": \"H\", \"handoffs\": "
                                  "[\"c.json\"]}"));
  struct {
    const char *args[8];
    const char *want;
  } cases[] = {
      {{"run", "--image", "x", pok, "p", NULL},
       "sbx run: --image needs --backend docker (this is backend local)"},
      {{"run", "--network", "bridge", pok, "p", NULL},
       "sbx run: --network \"bridge\": network_mode: expected \"none\""},
      {{"run", "--isolation", "nonee", pok, "p", NULL},
       "sbx run: --isolation \"nonee\": isolation: expected \"namespaces\" "
       "or \"none\""},
      {{"run", "--isolation", "none", "--network", "none", pok, "p", NULL},
       "isolation: \"none\" cannot limit or cut off the network"},
      {{"run", "--backend", "docker", "--network", "host", pok, "p", NULL},
       "sbx run: --network \"host\": network_mode \"host\" is not "
       "supported"},
      {{"run", "--backend", "vm", pok, "p", NULL},
       "unknown backend \"vm\" (available: local, docker, remote, "
       "kubernetes)"},
      {{"run", a, "p", NULL},
       "a.json: \"run_config.image\": backend local has no such option"},
      {{"run", b, "p", NULL},
       "b.json: run_config: network_mode \"host\" is not supported"},
      {{"run", "--backend", "local", c, "p", NULL},
       "--backend local replaces the run_config of"},
      {{"run", d, "p", NULL},
       "d.json: \"run_config.cpus\" must be a number (got string)"},
      /* Another agent's run_config is checked too, and must be the
       * starting agent's: it would not apply. */
      {{"run", h, "p", NULL},
       "d.json: \"run_config.cpus\" must be a number (got string)"},
      {{"run", h2, "p", NULL},
       "c.json: its run_config differs from the starting agent's"},
      /* -o KEY=VALUE: any option of the run's backend, checked as
       * run_config's are. */
      {{"run", "-o", "image=x", pok, "p", NULL},
       "sbx run: -o \"image=x\": \"image\": backend local has no such "
       "option"},
      {{"run", "-o", "pids_limit=many", pok, "p", NULL},
       "sbx run: -o \"pids_limit=many\": \"pids_limit\" must be an "
       "integer (got string)"},
      {{"run", "--option", "isolation=chroot", pok, "p", NULL},
       "-o \"isolation=chroot\": isolation: expected \"namespaces\" or "
       "\"none\""},
      {{"run", "-o", "workspace_bytes=10", pok, "p", NULL},
       "workspace_bytes: expected 0 or at least 4096"},
      {{"run", "-o", "network_mode", pok, "p", NULL},
       "-o network_mode: expected network_mode=VALUE"},
      {{"run", "-o", "=none", pok, "p", NULL},
       "-o \"=none\": expected KEY=VALUE"},
      {{"run", "--backend", "docker", "-o", "env=[1]", pok, "p", NULL},
       "-o \"env=[1]\": \"env\" must be an object of strings (got "
       "array)"},
      {{"run", "--env", "A=1", pok, "p", NULL},
       "--env needs --backend docker (this is backend local)"},
      /* The last of -o and a flag for the same key wins. */
      {{"run", "--memory-bytes", "1", "-o", "memory_bytes=2", pok, "p", NULL},
       "-o \"memory_bytes=2\": memory_bytes: expected 0 or at least"},
      {{"run", "-o", "memory_bytes=2", "--memory-bytes", "1", pok, "p", NULL},
       "--memory-bytes \"1\": memory_bytes: expected 0 or at least"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out r;
    sbx_run(&r, NULL, cases[i].args);
    cr_expect_eq(r.status, 2, "case %zu: status %d: %s", i, r.status, r.err);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "case %zu: %s", i, r.err);
    sbx_run_free(&r);
  }
}

Test(run, cwd_must_exist_and_anchors_relative_paths) {
  struct fixture f = {0};
  const char *extra[] = {"--cwd", "src", NULL};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"ls\"}}]},"
             " {\"text\": \"ok\"}]",
             agent("a.json", basic_agent), extra);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "Output:\nmain.c\n") != NULL, "%s", o);
  fixture_free(&f);
  struct fixture g = {0};
  const char *bad[] = {"--cwd", "nope", NULL};
  run_script(&g, "[{\"text\": \"never\"}]", agent("a.json", basic_agent), bad);
  cr_expect_eq(g.out.status, 2);
  cr_expect(strstr(g.out.err, "Sandbox working directory \"nope\" does not "
                              "exist") != NULL,
            "%s", g.out.err);
  fixture_free(&g);
}

/* The content of the tool message answering CALL_ID in chat request N. */
static const char *chat_tool_output(json_t *reqs, size_t n,
                                    const char *call_id) {
  json_t *msgs = json_object_get(
      json_object_get(json_array_get(reqs, n), "body"), "messages");
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *role = json_string_value(json_object_get(m, "role"));
    const char *c = json_string_value(json_object_get(m, "tool_call_id"));
    if (role && c && strcmp(role, "tool") == 0 && strcmp(c, call_id) == 0)
      return json_string_value(json_object_get(m, "content"));
  }
  return NULL;
}

Test(run, chat_completions_uses_the_function_apply_patch) {
  const char *a = agent(
      "c.json",
      "{\"name\": \"C\", \"api\": \"chat_completions\", \"default_manifest\": "
      "{\"entries\": {\"notes.txt\": {\"type\": \"file\", \"content\": "
      "\"alpha\\nbeta\\n\"}, \"pic.gif\": {\"type\": \"file\", \"content\": "
      "\"GIF89a\"}}}}");
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"apply_patch\", \"call_id\": "
             "\"p1\", \"arguments\": {\"patch\": \"*** Begin Patch\\n*** "
             "Update File: notes.txt\\n@@\\n alpha\\n-beta\\n+gamma\\n*** End "
             "Patch\\n\"}},"
             " {\"name\": \"apply_patch\", \"call_id\": \"p2\", \"arguments\": "
             "{\"type\": \"delete_file\", \"path\": \"missing.txt\"}},"
             " {\"name\": \"view_image\", \"call_id\": \"v1\", \"arguments\": "
             "{\"path\": \"pic.gif\"}}]},"
             " {\"text\": \"done\"}]",
             a, NULL);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(f.reqs, 0), "path")),
      "/v1/chat/completions");
  /* apply_patch is a function tool here, not the hosted one. */
  json_t *tools = json_object_get(
      json_object_get(json_array_get(f.reqs, 0), "body"), "tools");
  bool found = false;
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *n = json_string_value(
        json_object_get(json_object_get(t, "function"), "name"));
    found |= n && strcmp(n, "apply_patch") == 0;
  }
  cr_expect(found, "apply_patch function tool is offered");
  cr_expect_str_eq(chat_tool_output(f.reqs, 1, "p1"), "Patch applied.");
  const char *p2 = chat_tool_output(f.reqs, 1, "p2");
  cr_assert_not_null(p2);
  cr_expect(strncmp(p2, "Failed to apply patch: ", 23) == 0, "%s", p2);
  cr_expect(strstr(p2, "missing.txt") != NULL, "%s", p2);
  cr_expect_str_eq(chat_tool_output(f.reqs, 1, "v1"),
                   "data:image/gif;base64,R0lGODlh");
  fixture_free(&f);
}
