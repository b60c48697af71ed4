/* The --stream event stream: real `sbx run --stream` output of scripted
 * runs checked line by line against tests/fixtures/events.schema.json, the
 * schema checked against docs/events.md, and the emitter itself (whole
 * lines from many threads, seq, timestamps). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/run/schema.h"
#include "controller/telemetry/events.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-events-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

TestSuite(events, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the schema ---------------------------------------------------------- */

static json_t *load_fixture(void) {
  json_error_t je;
  json_t *f = json_load_file(
      SBX_SOURCE_DIR "/tests/fixtures/events.schema.json", 0, &je);
  cr_assert_not_null(f, "events.schema.json: %s (line %d)", je.text, je.line);
  return f;
}

/* PROP, or the fixture's usage schema for {"$ref": "#/usage"} (borrowed). */
static json_t *resolve(json_t *fixture, json_t *prop) {
  const char *ref = json_string_value(json_object_get(prop, "$ref"));
  if (!ref)
    return prop;
  cr_assert_str_eq(ref, "#/usage");
  return json_object_get(fixture, "usage");
}

/* The full schema of event TYPE: the fixture's per-type schema with the
 * common fields merged in, references resolved and "type" pinned (new), or
 * NULL when the fixture has no such type. */
static json_t *event_schema(json_t *fixture, const char *type) {
  json_t *s = json_object_get(json_object_get(fixture, "events"), type);
  if (!s)
    return NULL;
  json_t *full = json_deep_copy(s);
  json_t *props = json_object_get(full, "properties");
  json_t *req = json_object_get(full, "required");
  const char *k;
  json_t *v;
  json_object_foreach(props, k, v) {
    json_t *r = resolve(fixture, v);
    if (r != v)
      json_object_set(props, k, r);
  }
  json_object_foreach(json_object_get(fixture, "common"), k, v) {
    json_object_set(props, k, v);
    json_array_append_new(req, json_string(k));
  }
  json_object_set_new(props, "type", json_pack("{s:s}", "const", type));
  return full;
}

/* Checks one event line against the fixture; returns the parsed event
 * (new) for further checks. */
static json_t *check_line(json_t *fixture, const char *line) {
  json_error_t je;
  json_t *ev = json_loads(line, 0, &je);
  cr_assert_not_null(ev, "not JSON (%s): %s", je.text, line);
  const char *type = json_string_value(json_object_get(ev, "type"));
  cr_assert_not_null(type, "no type: %s", line);
  json_t *schema = event_schema(fixture, type);
  cr_assert_not_null(schema, "event type \"%s\" is not documented: %s", type,
                     line);
  struct sbx_error e = {0};
  int r = schema_validate(schema, ev, &e);
  cr_expect_eq(r, 0, "%s event does not match the schema: %s\n%s", type, e.msg,
               line);
  json_decref(schema);
  return ev;
}

/* Every line of OUT checked; returns the events (new array). */
static json_t *check_stream(json_t *fixture, const char *out) {
  json_t *all = json_array();
  char *copy = strdup(out);
  char *save = NULL;
  for (char *line = strtok_r(copy, "\n", &save); line;
       line = strtok_r(NULL, "\n", &save))
    json_array_append_new(all, check_line(fixture, line));
  free(copy);
  return all;
}

static const char *type_of(json_t *ev) {
  return json_string_value(json_object_get(ev, "type"));
}

/* The first event of TYPE whose string field KEY is VAL (KEY may be NULL). */
static json_t *find_event(json_t *events, const char *type, const char *key,
                          const char *val) {
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) {
    if (strcmp(type_of(ev), type) != 0)
      continue;
    const char *v = key ? json_string_value(json_object_get(ev, key)) : NULL;
    if (!key || (v && strcmp(v, val) == 0))
      return ev;
  }
  return NULL;
}

static long long num(json_t *ev, const char *key) {
  return (long long)json_integer_value(json_object_get(ev, key));
}

static const char *str(json_t *ev, const char *key) {
  const char *s = json_string_value(json_object_get(ev, key));
  return s ? s : "(missing)";
}

/* Checks what holds for every stream: one run_id, seq 1..N in line order,
 * version 1, ordered timestamps, a first run_started and a last
 * run_finished or run_failed, and a finished event after each started
 * tool call. */
static void check_invariants(json_t *events) {
  size_t n = json_array_size(events);
  cr_assert_gt(n, 1);
  const char *run_id = str(json_array_get(events, 0), "run_id");
  const char *prev_ts = "";
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) {
    cr_expect_str_eq(str(ev, "run_id"), run_id);
    cr_expect_eq(num(ev, "seq"), (long long)i + 1);
    cr_expect_eq(num(ev, "version"), 1);
    const char *ts = str(ev, "timestamp");
    int y, mo, d, h, mi, s, ms;
    char z;
    cr_expect_eq(sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &y, &mo, &d, &h,
                        &mi, &s, &ms, &z),
                 8, "timestamp %s", ts);
    cr_expect_eq(z, 'Z', "timestamp %s", ts);
    cr_expect_geq(strcmp(ts, prev_ts), 0, "timestamps go back: %s", ts);
    prev_ts = ts;
    if (strcmp(type_of(ev), "tool_call_started") == 0) {
      bool found = false;
      for (size_t k = i + 1; k < n && !found; k++) {
        json_t *f = json_array_get(events, k);
        found = strcmp(type_of(f), "tool_call_finished") == 0 &&
                strcmp(str(f, "call_id"), str(ev, "call_id")) == 0;
      }
      cr_expect(found, "no tool_call_finished for %s", str(ev, "call_id"));
    }
  }
  cr_expect_str_eq(type_of(json_array_get(events, 0)), "run_started");
  const char *last = type_of(json_array_get(events, n - 1));
  cr_expect(strcmp(last, "run_finished") == 0 ||
                strcmp(last, "run_failed") == 0,
            "last event: %s", last);
}

static const char *write_agent(const char *name, const char *json) {
  static char path[256];
  (void)snprintf(path, sizeof(path), "%s", test_write_file(dir, name, json));
  return path;
}

static void run_stream(const char *script, const char *agent_path,
                       struct sbx_run_out *out) {
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  const char *argv[] = {"run", "--stream", agent_path, "Do the task.", NULL};
  sbx_run(out, srv.base_url, argv);
  test_model_server_stop(&srv);
}

/* ---- tests --------------------------------------------------------------- */

Test(events, stream_of_a_scripted_run_matches_the_schema) {
  write_agent("helper.json",
              "{\"name\": \"Helper\", \"model\": \"test-model\", "
              "\"capabilities\": [\"shell\"]}");
  write_agent("sub.json", "{\"name\": \"Sub\", \"model\": \"test-model\", "
                          "\"capabilities\": []}");
  const char *main_agent = write_agent(
      "main.json",
      "{\"name\": \"Main\", \"model\": \"test-model\",\n"
      " \"default_manifest\": {\"entries\": {\"notes.txt\": {\"type\": "
      "\"file\", \"content\": \"alpha\\n\"}}},\n"
      " \"handoffs\": [\"helper.json\"],\n"
      " \"tools\": [{\"type\": \"agent_as_tool\", \"agent\": \"sub.json\", "
      "\"name\": \"ask_sub\"}]}\n");
  /* Turn 1: a command, a patch that does not apply and the agent tool
   * (whose nested run answers from step 2); turn 2: a handoff; turn 3:
   * the helper's answer. */
  const char *script =
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"cat notes.txt\"}},"
      "  {\"name\": \"ask_sub\", \"call_id\": \"c3\", \"arguments\": "
      "{\"input\": \"help\"}}],"
      " \"apply_patch\": {\"type\": \"update_file\", \"path\": "
      "\"missing.txt\", \"diff\": \"@@\\n-a\\n+b\\n\", \"call_id\": \"p1\"},"
      " \"usage\": {\"input_tokens\": 100, \"output_tokens\": 10}},"
      " {\"text\": \"sub answer\", \"usage\": {\"input_tokens\": 20, "
      "\"output_tokens\": 2}},"
      " {\"tool_calls\": [{\"name\": \"transfer_to_helper\", \"call_id\": "
      "\"h1\", \"arguments\": {}}], \"usage\": {\"input_tokens\": 200, "
      "\"output_tokens\": 3}},"
      " {\"text\": \"final answer\", \"usage\": {\"input_tokens\": 300, "
      "\"output_tokens\": 4, \"reasoning_tokens\": 1, \"cached_tokens\": "
      "7}}]";
  struct sbx_run_out out;
  run_stream(script, main_agent, &out);
  cr_assert_eq(out.status, 0, "stderr: %s\nstdout: %s", out.err, out.out);
  json_t *fixture = load_fixture();
  json_t *events = check_stream(fixture, out.out);
  check_invariants(events);

  const char *seen[] = {
      "run_started",       "sandbox_created",    "text_delta",
      "tool_call_started", "tool_call_finished", "agent_tool_started",
      "handoff",           "turn_finished",      "run_finished"};
  for (size_t i = 0; i < sizeof(seen) / sizeof(seen[0]); i++)
    cr_expect_not_null(find_event(events, seen[i], NULL, NULL), "no %s in:\n%s",
                       seen[i], out.out);

  json_t *ev = find_event(events, "run_started", NULL, NULL);
  cr_expect_str_eq(str(ev, "agent"), "Main");
  cr_expect_str_eq(str(ev, "model"), "test-model");
  cr_expect_str_eq(str(ev, "backend"), "local");
  cr_expect(json_is_null(json_object_get(ev, "trace_id")));

  ev = find_event(events, "tool_call_finished", "call_id", "c1");
  cr_assert_not_null(ev);
  cr_expect_str_eq(str(ev, "status"), "completed");
  cr_expect(strstr(str(ev, "output"), "alpha") != NULL, "%s",
            str(ev, "output"));
  cr_expect(json_is_null(json_object_get(ev, "error")));

  ev = find_event(events, "tool_call_started", "call_id", "p1");
  cr_assert_not_null(ev);
  cr_expect_str_eq(str(ev, "name"), "apply_patch");
  cr_expect(strstr(str(ev, "arguments"), "\"missing.txt\"") != NULL);
  ev = find_event(events, "tool_call_finished", "call_id", "p1");
  cr_assert_not_null(ev);
  cr_expect_str_eq(str(ev, "status"), "failed");
  cr_expect(strstr(str(ev, "error"), "missing.txt") != NULL, "%s",
            str(ev, "error"));

  ev = find_event(events, "agent_tool_started", NULL, NULL);
  cr_expect_str_eq(str(ev, "agent"), "Sub");
  cr_expect_str_eq(str(ev, "parent_agent"), "Main");
  cr_expect_str_eq(str(ev, "call_id"), "c3");
  cr_expect_eq(num(ev, "depth"), 1);
  ev = find_event(events, "turn_finished", "agent", "Sub");
  cr_assert_not_null(ev);
  cr_expect_eq(num(ev, "depth"), 1);
  cr_expect_eq(num(ev, "turn"), 1);
  ev = find_event(events, "tool_call_finished", "call_id", "c3");
  cr_expect_str_eq(str(ev, "output"), "sub answer");

  ev = find_event(events, "handoff", NULL, NULL);
  cr_expect_str_eq(str(ev, "from"), "Main");
  cr_expect_str_eq(str(ev, "to"), "Helper");
  cr_expect_str_eq(str(ev, "call_id"), "h1");
  cr_expect_eq(num(ev, "turn"), 2);
  ev = find_event(events, "sandbox_created", "agent", "Helper");
  cr_expect_not_null(ev, "the helper's sandbox");
  cr_expect(json_is_false(json_object_get(ev, "attached")));
  cr_expect_eq(json_object_size(json_object_get(ev, "exposed_ports")), 0);

  /* The deltas of the last turn are its text. */
  char text[64] = "";
  size_t i;
  json_t *x;
  json_array_foreach(events, i, x) {
    if (strcmp(type_of(x), "text_delta") == 0 && num(x, "turn") == 3)
      strncat(text, str(x, "delta"), sizeof(text) - strlen(text) - 1);
  }
  cr_expect_str_eq(text, "final answer");

  /* Usage: per turn, and the totals of the run with the nested run. */
  ev = find_event(events, "turn_finished", "agent", "Helper");
  json_t *u = json_object_get(ev, "usage");
  cr_expect_eq(num(u, "input_tokens"), 300);
  cr_expect_eq(num(u, "cached_tokens"), 7);
  ev = find_event(events, "run_finished", NULL, NULL);
  cr_expect_str_eq(str(ev, "agent"), "Helper");
  cr_expect_str_eq(str(ev, "final_output"), "final answer");
  cr_expect_eq(num(ev, "turns"), 3);
  u = json_object_get(ev, "usage");
  cr_expect_eq(num(u, "input_tokens"), 620);
  cr_expect_eq(num(u, "output_tokens"), 19);
  cr_expect_eq(num(u, "total_tokens"), 639);
  cr_expect_eq(num(u, "reasoning_tokens"), 1);

  json_decref(events);
  json_decref(fixture);
  sbx_run_free(&out);
}

Test(events, stream_of_a_failed_run_matches_the_schema) {
  const char *a =
      write_agent("a.json", "{\"name\": \"A\", \"model\": \"test-model\", "
                            "\"capabilities\": [\"shell\"]}");
  struct sbx_run_out out;
  run_stream("[{\"tool_calls\": [{\"name\": \"no_such_tool\", \"call_id\": "
             "\"x1\", \"arguments\": {}}]}]",
             a, &out);
  cr_expect_eq(out.status, 1, "stderr: %s", out.err);
  json_t *fixture = load_fixture();
  json_t *events = check_stream(fixture, out.out);
  check_invariants(events);
  json_t *ev = find_event(events, "tool_call_finished", "call_id", "x1");
  cr_assert_not_null(ev, "%s", out.out);
  cr_expect_str_eq(str(ev, "status"), "failed");
  cr_expect(json_is_null(json_object_get(ev, "output")));
  cr_expect(strstr(str(ev, "error"), "no_such_tool") != NULL);
  ev = find_event(events, "run_failed", NULL, NULL);
  cr_assert_not_null(ev, "%s", out.out);
  cr_expect(strstr(str(ev, "error"), "no_such_tool") != NULL);
  cr_expect(strstr(out.err, str(ev, "error")) != NULL,
            "stderr and the event differ: %s", out.err);
  cr_expect_str_eq(str(ev, "code"), "INTERNAL");
  cr_expect_eq(num(ev, "exit_code"), 1);
  cr_expect_eq(num(ev, "turns"), 1);
  cr_expect_null(find_event(events, "turn_finished", NULL, NULL));
  json_decref(events);
  sbx_run_free(&out);

  /* A configuration error (the run's --cwd does not exist): exit 2. */
  struct test_model_server srv;
  test_model_server_start(&srv, "[{\"text\": \"x\"}]", NULL);
  const char *argv[] = {"run", "--stream", "--cwd", "nope", a, "p", NULL};
  sbx_run(&out, srv.base_url, argv);
  test_model_server_stop(&srv);
  cr_expect_eq(out.status, 2, "stderr: %s", out.err);
  events = check_stream(fixture, out.out);
  check_invariants(events);
  ev = find_event(events, "run_failed", NULL, NULL);
  cr_assert_not_null(ev, "%s", out.out);
  cr_expect_eq(num(ev, "exit_code"), 2);
  cr_expect_str_eq(str(ev, "code"), "INVALID_ARGUMENT");
  json_decref(events);
  json_decref(fixture);
  sbx_run_free(&out);
}

/* Runs "sbx ARGV..." without a model server. */
static void sbx_plain(struct sbx_run_out *o, const char *const *argv) {
  sbx_run(o, NULL, argv);
}

/* A run in a developer-owned sandbox (sbx run --sandbox): sandbox_created
 * says attached, with the exposed ports; the trace has sandbox.start
 * rather than sandbox.create_session, and no sandbox.shutdown. */
Test(events, stream_of_a_run_in_a_developer_owned_sandbox) {
  char state[128], tmp[128], trace[128];
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  (void)snprintf(trace, sizeof(trace), "%s/spans.jsonl", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  const char *a =
      write_agent("dev.json", "{\"name\": \"Dev\", \"model\": \"test-model\", "
                              "\"capabilities\": [\"shell\"]}");
  struct sbx_run_out o;
  sbx_plain(&o, (const char *const[]){"sandbox", "--state-dir", state, "create",
                                      "--agent", a, "--expose", "8080", NULL});
  cr_assert_eq(o.status, 0, "create: %s", o.err);
  char id[32];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(o.out, "\n"), o.out);
  sbx_run_free(&o);

  struct test_model_server srv;
  test_model_server_start(&srv, "[{\"text\": \"ok\"}]", NULL);
  sbx_run(&o, srv.base_url,
          (const char *const[]){"run", "--stream", "--trace", trace,
                                "--sandbox", id, "--state-dir", state,
                                "--expose", "8080", a, "p", NULL});
  test_model_server_stop(&srv);
  struct sbx_run_out rm;
  sbx_plain(&rm, (const char *const[]){"sandbox", "--state-dir", state, "rm",
                                       "--force", id, NULL});
  cr_expect_eq(rm.status, 0, "rm: %s", rm.err);
  sbx_run_free(&rm);

  cr_assert_eq(o.status, 0, "stderr: %s", o.err);
  json_t *fixture = load_fixture();
  json_t *events = check_stream(fixture, o.out);
  check_invariants(events);
  json_t *ev = find_event(events, "sandbox_created", NULL, NULL);
  cr_assert_not_null(ev, "%s", o.out);
  cr_expect(json_is_true(json_object_get(ev, "attached")));
  const char *ep = json_string_value(
      json_object_get(json_object_get(ev, "exposed_ports"), "8080"));
  cr_expect(ep && *ep, "%s", o.out);
  json_decref(events);
  json_decref(fixture);
  sbx_run_free(&o);

  FILE *f = fopen(trace, "re");
  cr_assert_not_null(f);
  char line[8192];
  int start = 0, create = 0, shutdown = 0;
  while (fgets(line, sizeof(line), f)) {
    start += strstr(line, "\"name\":\"sandbox.start\"") != NULL;
    create += strstr(line, "\"name\":\"sandbox.create_session\"") != NULL;
    shutdown += strstr(line, "\"name\":\"sandbox.shutdown\"") != NULL;
  }
  fclose(f);
  cr_expect_eq(start, 1);
  cr_expect_eq(create, 0);
  cr_expect_eq(shutdown, 0);
}

/* Every event function, approval_requested included (the approvals work
 * emits it), writes what the schema says. */
Test(events, every_typed_event_matches_the_schema) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cr_assert_not_null(f);
  struct events *ev = NULL;
  cr_assert_eq(events_new(f, "0123456789abcdef0123456789abcdef", &ev, NULL), 0);
  struct events_where w = {"A", 0, 1};
  struct model_usage u = {1, 2, 3, 4, 5};
  json_t *out = json_string("ok");
  json_t *img = json_pack("[{s:s, s:s}]", "type", "input_image", "image_url",
                          "data:image/png;base64,AA==");
  events_run_started(ev, "A", "local", "m", 10, NULL);
  events_run_started(ev, "A", "local", "m", 10,
                     "0123456789abcdef0123456789abcdef");
  json_t *ports = json_pack("{s:s}", "8080", "127.0.0.1:49153");
  events_sandbox_created(ev, &w, "uuid", "local", false, NULL);
  events_sandbox_created(ev, &w, "uuid", "docker", true, ports);
  json_decref(ports);
  events_agent_tool_started(ev, &(struct events_where){"B", 1, 0}, "A", "c0");
  events_text_delta(ev, &w, "bad \xff utf-8", 11);
  events_tool_call_started(ev, &w, "exec_command", "c1", "{}");
  events_approval_requested(ev, &w, "exec_command", "c1", "{}", "/tmp/rs.json");
  events_approval_requested(ev, &w, "exec_command", "c1", "{}", NULL);
  events_tool_call_finished(ev, &w, "exec_command", "c1", "completed", out,
                            NULL, 3);
  events_tool_call_finished(ev, &w, "view_image", "c2", "completed", img, NULL,
                            3);
  events_tool_call_finished(ev, &w, "x", "c3", "failed", NULL, "boom", 0);
  events_handoff(ev, &w, "B", "h1");
  json_t *info = json_pack("{s:s}", "reason", "pii");
  events_guardrail_tripped(ev, &w, "no_pii", "input", info);
  events_guardrail_tripped(ev, &w, "policy", "output", NULL);
  json_decref(info);
  events_turn_finished(ev, &w, "m", 2, &u);
  events_run_finished(ev, "B", "answer", 2, &u, 10);
  events_run_failed(ev, "max turns (1) exceeded", "LIMIT_EXCEEDED", 1, 1, &u,
                    10);
  events_run_paused(ev, "/tmp/rs.json", 1);
  events_run_cancelled(ev, 1, &u, 10);
  events_run_cancelled(ev, 0, NULL, 0);
  events_free(ev);
  fclose(f);
  json_decref(out);
  json_decref(img);
  json_t *fixture = load_fixture();
  json_t *events = check_stream(fixture, buf);
  cr_expect_eq(json_array_size(events), 21);
  json_t *d = find_event(events, "text_delta", NULL, NULL);
  cr_expect_str_eq(str(d, "delta"), "bad \xef\xbf\xbd utf-8");
  cr_expect_not_null(
      find_event(events, "approval_requested", "run_state", "/tmp/rs.json"));
  /* Each documented type was written. */
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(fixture, "events"), k, v)
      cr_expect_not_null(find_event(events, k, NULL, NULL), "no %s", k);
  json_decref(events);
  json_decref(fixture);
  free(buf);
}

/* ---- the document -------------------------------------------------------- */

/* The field tables of docs/events.md: {"common": {field: [types]},
 * "usage": {...}, "<event>": {...}} (new). */
static json_t *parse_doc(void) {
  FILE *f = fopen(SBX_SOURCE_DIR "/docs/events.md", "re");
  cr_assert_not_null(f, "docs/events.md");
  json_t *doc = json_object();
  json_t *section = NULL;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    if (strncmp(line, "## Common fields", 16) == 0 ||
        strncmp(line, "## The usage object", 19) == 0) {
      section = json_object();
      json_object_set_new(doc, line[3] == 'C' ? "common" : "usage", section);
      continue;
    }
    if (strncmp(line, "### `", 5) == 0) {
      char *end = strchr(line + 5, '`');
      cr_assert_not_null(end);
      *end = '\0';
      section = json_object();
      json_object_set_new(doc, line + 5, section);
      continue;
    }
    if (line[0] == '#') {
      section = NULL;
      continue;
    }
    /* | `field` | type | meaning | */
    if (!section || strncmp(line, "| `", 3) != 0)
      continue;
    char *name = line + 3;
    char *q = strchr(name, '`');
    cr_assert_not_null(q, "%s", line);
    *q = '\0';
    char *type = strstr(q + 1, "| ");
    cr_assert_not_null(type, "%s", name);
    type += 2;
    char *bar = strstr(type, " |");
    cr_assert_not_null(bar, "%s", name);
    *bar = '\0';
    json_t *types = json_array();
    const char *words[] = {"string", "integer", "boolean",
                           "array",  "object",  "null"};
    for (size_t i = 0; i < 6; i++)
      if (strstr(type, words[i]))
        json_array_append_new(types, json_string(words[i]));
    json_object_set_new(section, name, types);
  }
  free(line);
  fclose(f);
  return doc;
}

/* Whether DOC_TYPES (from the document) are the types PROP allows. */
static bool same_types(json_t *doc_types, json_t *prop) {
  json_t *t = json_object_get(prop, "type");
  json_t *want = json_is_array(t) ? json_incref(t) : json_pack("[O]", t);
  bool same = json_array_size(want) == json_array_size(doc_types);
  size_t i;
  json_t *x;
  json_array_foreach(want, i, x) {
    bool found = false;
    size_t k;
    json_t *y;
    json_array_foreach(doc_types, k, y) found |= json_equal(x, y);
    same = same && found;
  }
  json_decref(want);
  return same;
}

/* Every field of OBJ (a fixture schema's properties) is in DOC with the
 * same types, and DOC has no others. */
static void compare_fields(json_t *fixture, const char *what, json_t *doc,
                           json_t *props) {
  cr_assert_not_null(doc, "docs/events.md has no section for %s", what);
  const char *k;
  json_t *v;
  json_object_foreach(props, k, v) {
    json_t *d = json_object_get(doc, k);
    cr_expect_not_null(d, "%s.%s is in the schema but not in docs/events.md",
                       what, k);
    if (d)
      cr_expect(same_types(d, resolve(fixture, v)),
                "%s.%s: the document's type differs", what, k);
  }
  json_object_foreach(doc, k, v)
      cr_expect_not_null(json_object_get(props, k),
                         "%s.%s is documented but not in the schema", what, k);
}

Test(events, schema_fixture_matches_the_document) {
  json_t *fixture = load_fixture();
  json_t *doc = parse_doc();
  compare_fields(fixture, "common", json_object_get(doc, "common"),
                 json_object_get(fixture, "common"));
  compare_fields(
      fixture, "usage", json_object_get(doc, "usage"),
      json_object_get(json_object_get(fixture, "usage"), "properties"));
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(fixture, "events"), k, v) {
    compare_fields(fixture, k, json_object_get(doc, k),
                   json_object_get(v, "properties"));
  }
  json_object_foreach(doc, k, v) {
    if (strcmp(k, "common") && strcmp(k, "usage"))
      cr_expect_not_null(json_object_get(json_object_get(fixture, "events"), k),
                         "event %s is documented but not in the schema", k);
  }
  json_decref(doc);
  json_decref(fixture);
}

/* ---- the emitter --------------------------------------------------------- */

struct writer {
  struct events *ev;
  int id;
};

static const char long_text[] =
    "some text that is long enough to tear if lines were written in pieces "
    "by several threads at once";

static void *write_many(void *arg) {
  struct writer *w = arg;
  for (int i = 0; i < 200; i++)
    events_text_delta(w->ev, &(struct events_where){"A", w->id, i}, long_text,
                      strlen(long_text));
  return NULL;
}

Test(events, concurrent_emitters_write_whole_lines_in_seq_order) {
  FILE *f = tmpfile();
  cr_assert_not_null(f);
  struct events *ev = NULL;
  cr_assert_eq(events_new(f, "0123456789abcdef0123456789abcdef", &ev, NULL), 0);
  pthread_t th[8];
  struct writer w[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (struct writer){ev, i};
    cr_assert_eq(pthread_create(&th[i], NULL, write_many, &w[i]), 0);
  }
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  events_free(ev);
  rewind(f);
  char *line = NULL;
  size_t cap = 0;
  long long n = 0;
  while (getline(&line, &cap, f) > 0) {
    json_error_t je;
    json_t *e = json_loads(line, 0, &je);
    cr_assert_not_null(e, "torn line %lld: %s", n + 1, line);
    cr_expect_eq(num(e, "seq"), ++n);
    cr_expect_str_eq(str(e, "delta"), long_text);
    json_decref(e);
  }
  free(line);
  fclose(f);
  cr_expect_eq(n, 1600);
}

Test(events, timestamps_are_rfc3339_utc_with_milliseconds) {
  char ts[32];
  events_format_timestamp(0, ts);
  cr_expect_str_eq(ts, "1970-01-01T00:00:00.000Z");
  events_format_timestamp(1717243200123ull, ts);
  cr_expect_str_eq(ts, "2024-06-01T12:00:00.123Z");
  events_format_timestamp(1709251199999ull, ts); /* a leap day */
  cr_expect_str_eq(ts, "2024-02-29T23:59:59.999Z");
}

Test(events, null_emitter_does_nothing) {
  events_emit(NULL, "x", json_object());
  events_run_started(NULL, "A", "local", "m", 1, NULL);
  events_text_delta(NULL, &(struct events_where){"A", 0, 1}, "x", 1);
  events_run_failed(NULL, "e", "INTERNAL", 1, 0, NULL, 0);
}

/* ---- the sink ------------------------------------------------------------ */

struct sunk {
  uint64_t seq[8];
  char type[8][32];
  char line[8][512];
  size_t n;
};

static void sink(void *arg, uint64_t seq, const char *type, const char *line,
                 size_t len) {
  struct sunk *s = arg;
  cr_assert_lt(s->n, 8);
  s->seq[s->n] = seq;
  (void)snprintf(s->type[s->n], sizeof(s->type[0]), "%s", type);
  cr_expect_eq(strlen(line), len, "the line is NUL-terminated at LEN");
  (void)snprintf(s->line[s->n], sizeof(s->line[0]), "%.*s", (int)len, line);
  s->n++;
}

Test(events, a_sink_gets_each_event_numbered_after_the_last_seq) {
  struct sunk s = {0};
  struct events *ev = NULL;
  cr_assert_eq(events_new_sink(sink, &s, NULL,
                               "0123456789abcdef0123456789abcdef", 41, &ev,
                               NULL),
               0);
  events_run_started(ev, "A", "local", "m", 10, NULL);
  events_run_cancelled(ev, 0, NULL, 0);
  events_free(ev);
  cr_assert_eq(s.n, 2);
  cr_expect_eq(s.seq[0], 42);
  cr_expect_eq(s.seq[1], 43);
  cr_expect_str_eq(s.type[0], "run_started");
  cr_expect_str_eq(s.type[1], "run_cancelled");
  json_t *j = json_loads(s.line[1], 0, NULL);
  cr_assert_not_null(j, "%s", s.line[1]);
  cr_expect_eq(json_integer_value(json_object_get(j, "seq")), 43);
  cr_expect_null(strchr(s.line[1], '\n'));
  json_decref(j);
}
