/* Tracing end to end: the real sbx binary with a real sandboxd, the
 * scripted model server, and a loopback OTLP/HTTP receiver
 * (tests/support/otlp_receiver.py) that records what sbx POSTs. Checks
 * the spans (names, parent links, one trace id per run, attributes, the
 * status of a failing tool), the --trace file, and that a collector that
 * is down or hangs changes neither the run's output nor its exit code and
 * costs at most the flush deadline. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-trace-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  /* Each test runs in its own process: these do not leak into others. */
  unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  unsetenv("OTEL_SDK_DISABLED");
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(trace, .init = setup, .fini = teardown, .timeout = 180);

static const char agent_json[] =
    "{\"name\": \"Tester\", \"model\": \"test-model\",\n"
    " \"default_manifest\": {\"entries\": {\"notes.txt\": {\"type\": "
    "\"file\", \"content\": \"alpha\\n\"}}}}\n";

/* Turn 1: a command that exits with 3 (a completed tool call) and a patch
 * that does not apply (a failed one); turn 2: the answer. */
static const char script[] =
    "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"cat notes.txt; exit 3\"}}],"
    " \"apply_patch\": {\"type\": \"update_file\", \"path\": \"missing.txt\", "
    "\"diff\": \"@@\\n-a\\n+b\\n\", \"call_id\": \"p1\"},"
    " \"usage\": {\"input_tokens\": 100, \"output_tokens\": 10}},"
    " {\"text\": \"done\", \"usage\": {\"input_tokens\": 200, "
    "\"output_tokens\": 20}}]";

/* A run of SCRIPT with the extra arguments EXTRA (may be NULL). */
static void run(const char *scr, const char *const *extra,
                struct sbx_run_out *out) {
  const char *a = test_write_file(dir, "a.json", agent_json);
  char agent[256];
  (void)snprintf(agent, sizeof(agent), "%s", a);
  struct test_model_server srv;
  test_model_server_start(&srv, scr, NULL);
  const char *argv[16];
  size_t n = 0;
  argv[n++] = "run";
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n++] = agent;
  argv[n++] = "Do the task.";
  argv[n] = NULL;
  sbx_run(out, srv.base_url, argv);
  test_model_server_stop(&srv);
}

/* ---- span checks --------------------------------------------------------- */

static const char *sv(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "";
}

/* The string form of attribute KEY of span S ("" when absent): a
 * stringValue, or the intValue's decimal string. */
static const char *attr(json_t *s, const char *key) {
  json_t *v = test_otlp_attr(s, key);
  if (!v)
    return "";
  if (json_object_get(v, "stringValue"))
    return sv(v, "stringValue");
  return sv(v, "intValue");
}

static json_t *by_name(json_t *spans, const char *name, size_t nth) {
  size_t i;
  json_t *s;
  json_array_foreach(spans, i, s) {
    if (strcmp(sv(s, "name"), name) == 0 && nth-- == 0)
      return s;
  }
  return NULL;
}

static json_t *by_id(json_t *spans, const char *id) {
  size_t i;
  json_t *s;
  json_array_foreach(spans, i, s) {
    if (strcmp(sv(s, "spanId"), id) == 0)
      return s;
  }
  return NULL;
}

static json_t *tool_span(json_t *spans, const char *call_id) {
  size_t i;
  json_t *s;
  json_array_foreach(spans, i, s) {
    if (strcmp(sv(s, "name"), "sbx.tool_call") == 0 &&
        strcmp(attr(s, "gen_ai.tool.call.id"), call_id) == 0)
      return s;
  }
  return NULL;
}

static json_t *parent_of(json_t *spans, json_t *s) {
  return by_id(spans, sv(s, "parentSpanId"));
}

static bool is_hex(const char *s, size_t n) {
  if (strlen(s) != n)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789abcdef", s[i]))
      return false;
  return true;
}

static unsigned long long nanos(json_t *s, const char *key) {
  return strtoull(sv(s, key), NULL, 10);
}

static int status_code(json_t *s) {
  return (int)json_integer_value(
      json_object_get(json_object_get(s, "status"), "code"));
}

/* Checks the spans of one run of SCRIPT: the names, one trace, the tree,
 * the times, the attributes and the statuses. */
static void check_spans(json_t *spans) {
  const char *names[] = {"sbx.run",
                         "sbx.turn",
                         "sbx.model_call",
                         "sbx.tool_call",
                         "sandbox.create_session",
                         "sandbox.exec",
                         "sandbox.apply_patch",
                         "sandbox.cleanup",
                         "sandbox.shutdown"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_expect_not_null(by_name(spans, names[i], 0), "no %s span", names[i]);
  cr_expect_not_null(by_name(spans, "sbx.turn", 1), "a second turn");
  cr_expect_null(by_name(spans, "sbx.turn", 2), "a third turn");
  cr_expect_not_null(by_name(spans, "sbx.model_call", 1));
  cr_expect_null(by_name(spans, "sbx.run", 1), "one run span");

  json_t *root = by_name(spans, "sbx.run", 0);
  cr_assert_not_null(root);
  const char *trace_id = sv(root, "traceId");
  cr_expect(is_hex(trace_id, 32), "trace id %s", trace_id);
  cr_expect_null(json_object_get(root, "parentSpanId"));
  size_t i;
  json_t *s;
  json_array_foreach(spans, i, s) {
    cr_expect_str_eq(sv(s, "traceId"), trace_id, "%s", sv(s, "name"));
    cr_expect(is_hex(sv(s, "spanId"), 16), "span id %s", sv(s, "spanId"));
    cr_expect_leq(nanos(s, "startTimeUnixNano"), nanos(s, "endTimeUnixNano"));
    cr_expect_gt(nanos(s, "startTimeUnixNano"), 1600000000ull * 1000000000ull);
    for (size_t k = i + 1; k < json_array_size(spans); k++)
      cr_expect_str_neq(sv(s, "spanId"),
                        sv(json_array_get(spans, k), "spanId"));
    if (s == root)
      continue;
    json_t *p = parent_of(spans, s);
    cr_expect_not_null(p, "the parent of %s", sv(s, "name"));
    if (p) {
      cr_expect_geq(nanos(s, "startTimeUnixNano"),
                    nanos(p, "startTimeUnixNano"), "%s", sv(s, "name"));
      cr_expect_leq(nanos(s, "endTimeUnixNano"), nanos(p, "endTimeUnixNano"),
                    "%s", sv(s, "name"));
    }
  }

  /* The tree. */
  json_t *turn1 = by_name(spans, "sbx.turn", 0);
  json_t *turn2 = by_name(spans, "sbx.turn", 1);
  if (strcmp(attr(turn1, "sbx.turn"), "1") != 0) {
    json_t *t = turn1;
    turn1 = turn2;
    turn2 = t;
  }
  cr_expect_str_eq(attr(turn1, "sbx.turn"), "1");
  cr_expect_str_eq(attr(turn2, "sbx.turn"), "2");
  cr_expect_eq(parent_of(spans, turn1), root);
  cr_expect_eq(parent_of(spans, turn2), root);
  cr_expect_eq(parent_of(spans, by_name(spans, "sandbox.create_session", 0)),
               turn1);
  json_t *mc = by_name(spans, "sbx.model_call", 0);
  cr_expect(parent_of(spans, mc) == turn1 || parent_of(spans, mc) == turn2);
  json_t *c1 = tool_span(spans, "c1");
  json_t *p1 = tool_span(spans, "p1");
  cr_assert_not_null(c1);
  cr_assert_not_null(p1);
  cr_expect_eq(parent_of(spans, c1), turn1);
  cr_expect_eq(parent_of(spans, p1), turn1);
  json_t *exec = by_name(spans, "sandbox.exec", 0);
  json_t *patch = by_name(spans, "sandbox.apply_patch", 0);
  cr_expect_eq(parent_of(spans, exec), c1);
  cr_expect_eq(parent_of(spans, patch), p1);
  json_t *cleanup = by_name(spans, "sandbox.cleanup", 0);
  cr_expect_eq(parent_of(spans, cleanup), root);
  cr_expect_eq(parent_of(spans, by_name(spans, "sandbox.shutdown", 0)),
               cleanup);

  /* Attributes. */
  cr_expect(is_hex(attr(root, "sbx.run_id"), 32));
  cr_expect_str_eq(attr(root, "gen_ai.agent.name"), "Tester");
  cr_expect_str_eq(attr(root, "gen_ai.request.model"), "test-model");
  cr_expect_str_eq(attr(root, "sbx.backend"), "local");
  cr_expect_str_eq(attr(root, "sbx.turns"), "2");
  cr_expect_str_eq(attr(root, "gen_ai.usage.input_tokens"), "300");
  cr_expect_str_eq(attr(root, "gen_ai.usage.output_tokens"), "30");
  cr_expect_str_eq(attr(mc, "gen_ai.request.model"), "test-model");
  cr_expect_str_eq(attr(mc, "gen_ai.system"), "openai");
  cr_expect_str_neq(attr(mc, "gen_ai.usage.input_tokens"), "");
  cr_expect_str_eq(attr(turn1, "gen_ai.agent.name"), "Tester");
  cr_expect_str_eq(attr(turn1, "sbx.tool_calls"), "2");
  cr_expect_str_eq(attr(c1, "gen_ai.tool.name"), "exec_command");
  cr_expect_str_eq(attr(p1, "gen_ai.tool.name"), "apply_patch");
  cr_expect_str_eq(attr(exec, "sandbox.exec.exit_code"), "3");
  cr_expect_str_eq(attr(exec, "sandbox.exec.command"), "cat notes.txt; exit 3");
  json_t *running = test_otlp_attr(exec, "sandbox.exec.running");
  cr_expect(json_is_false(json_object_get(running, "boolValue")));
  cr_expect_eq(strlen(attr(exec, "sandbox.session_id")), 36, "%s",
               attr(exec, "sandbox.session_id"));
  cr_expect_str_eq(
      attr(by_name(spans, "sandbox.cleanup", 0), "sandbox.session_count"), "1");

  /* Statuses: ok, except the failing patch and its tool call. A command
   * that exits with 3 is a completed call. */
  json_array_foreach(spans, i, s) {
    if (s == p1 || s == patch)
      continue;
    cr_expect_eq(status_code(s), 1, "%s status", sv(s, "name"));
  }
  cr_expect_eq(status_code(p1), 2);
  cr_expect_eq(status_code(patch), 2);
  const char *msg = sv(json_object_get(p1, "status"), "message");
  cr_expect(strstr(msg, "missing.txt") != NULL, "%s", msg);
  cr_expect_str_eq(attr(p1, "sbx.tool.status"), "failed");
  cr_expect_str_eq(attr(c1, "sbx.tool.status"), "completed");
  cr_expect_eq(json_integer_value(json_object_get(mc, "kind")), 3);
  cr_expect_eq(json_integer_value(json_object_get(root, "kind")), 1);
}

/* ---- tests --------------------------------------------------------------- */

Test(trace, otlp_export_reaches_a_receiver_with_the_runs_spans) {
  struct test_otlp_receiver rcv;
  test_otlp_receiver_start(&rcv, false);
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.endpoint, 1);
  setenv("OTEL_EXPORTER_OTLP_HEADERS",
         "x-sbx-test = abc , authorization=Bearer%20tok", 1);
  struct sbx_run_out out;
  run(script, NULL, &out);
  json_t *reqs = test_otlp_receiver_requests(&rcv);
  test_otlp_receiver_stop(&rcv);
  cr_expect_eq(out.status, 0, "stderr: %s", out.err);
  cr_expect_str_eq(out.out, "done\n");
  cr_expect_null(strstr(out.err, "trace"), "stderr: %s", out.err);
  cr_assert_gt(json_array_size(reqs), 0);
  size_t i;
  json_t *r;
  json_array_foreach(reqs, i, r) {
    cr_expect_str_eq(sv(r, "path"), "/v1/traces");
    json_t *h = json_object_get(r, "headers");
    cr_expect_str_eq(sv(h, "content-type"), "application/json");
    cr_expect_str_eq(sv(h, "x-sbx-test"), "abc");
    cr_expect_str_eq(sv(h, "authorization"), "Bearer tok");
  }
  json_t *spans = test_otlp_spans(reqs);
  cr_expect_eq(json_array_size(spans), 12, "%zu spans", json_array_size(spans));
  json_t *res = json_object_get(json_array_get(spans, 0), "resource");
  cr_expect_str_eq(sv(test_otlp_attr(res, "service.name"), "stringValue"),
                   "sbx");
  check_spans(spans);
  json_decref(spans);
  json_decref(reqs);
  sbx_run_free(&out);
}

/* Reads a --trace file: one span object per line (new array). */
static json_t *read_trace_file(const char *path) {
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  json_t *spans = json_array();
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    json_error_t je;
    json_t *s = json_loads(line, 0, &je);
    cr_assert(json_is_object(s), "not a span object: %s", line);
    json_array_append_new(spans, s);
  }
  free(line);
  fclose(f);
  return spans;
}

Test(trace, trace_file_has_one_span_per_line_and_matches_the_events) {
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/spans.jsonl", dir);
  const char *extra[] = {"--stream", "--trace", path, NULL};
  struct sbx_run_out out;
  run(script, extra, &out);
  cr_expect_eq(out.status, 0, "stderr: %s", out.err);
  json_t *spans = read_trace_file(path);
  cr_expect_eq(json_array_size(spans), 12);
  check_spans(spans);
  /* run_started names the trace; every event's run_id is on the root. */
  json_error_t je;
  char *nl = strchr(out.out, '\n');
  cr_assert_not_null(nl);
  json_t *started = json_loadb(out.out, (size_t)(nl - out.out), 0, &je);
  cr_assert_not_null(started, "%s", je.text);
  cr_expect_str_eq(sv(started, "type"), "run_started");
  json_t *root = by_name(spans, "sbx.run", 0);
  cr_expect_str_eq(sv(started, "trace_id"), sv(root, "traceId"));
  cr_expect_str_eq(sv(started, "run_id"), attr(root, "sbx.run_id"));
  json_decref(started);
  json_decref(spans);
  sbx_run_free(&out);

  /* A second run appends its own trace. */
  run(script, extra, &out);
  cr_expect_eq(out.status, 0, "stderr: %s", out.err);
  spans = read_trace_file(path);
  cr_expect_eq(json_array_size(spans), 24);
  cr_expect_str_neq(sv(json_array_get(spans, 0), "traceId"),
                    sv(json_array_get(spans, 12), "traceId"));
  json_decref(spans);
  sbx_run_free(&out);

  const char *bad[] = {"--trace", "/nonexistent/dir/spans.jsonl", NULL};
  run(script, bad, &out);
  cr_expect_eq(out.status, 2);
  cr_expect(strstr(out.err, "/nonexistent/dir/spans.jsonl") != NULL, "%s",
            out.err);
  sbx_run_free(&out);
}

/* Counts the lines of TEXT that contain NEEDLE. */
static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
    n++;
  return n;
}

/* "... (D dropped from a full queue, ..." from the warning; -1 if none. */
static long long dropped(const char *err) {
  const char *p = strstr(err, "were not exported");
  if (!p)
    return -1;
  p = strchr(p, '(');
  return p ? strtoll(p + 1, NULL, 10) : -1;
}

/* What a run prints and how it ends without any tracing. */
struct baseline {
  struct sbx_run_out ok, failed;
};

static const char failing_script[] =
    "[{\"tool_calls\": [{\"name\": \"no_such_tool\", \"call_id\": \"x1\", "
    "\"arguments\": {}}]}]";

static void baseline_runs(struct baseline *b) {
  unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  run(script, NULL, &b->ok);
  run(failing_script, NULL, &b->failed);
  cr_assert_eq(b->ok.status, 0, "%s", b->ok.err);
  cr_assert_eq(b->failed.status, 1, "%s", b->failed.err);
}

/* The run's output and exit code are the baseline's. */
static void expect_same(const struct sbx_run_out *got,
                        const struct sbx_run_out *want) {
  cr_expect_eq(got->status, want->status, "stderr: %s", got->err);
  cr_expect_str_eq(got->out, want->out);
  const char *first = strstr(want->err, "sbx: ");
  if (first) {
    char line[256];
    (void)snprintf(line, sizeof(line), "%.*s", (int)strcspn(first, "\n"),
                   first);
    cr_expect(strstr(got->err, line) != NULL, "want %s in: %s", line, got->err);
  }
}

Test(trace, unreachable_endpoint_changes_nothing_and_warns_once) {
  struct baseline b;
  baseline_runs(&b);
  char url[64];
  (void)snprintf(url, sizeof(url), "http://127.0.0.1:%d", test_closed_port());
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url, 1);
  /* Many small batches: many failed requests, one warning. */
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1", 1);
  setenv("OTEL_BSP_SCHEDULE_DELAY", "20", 1);
  struct sbx_run_out ok, failed;
  run(script, NULL, &ok);
  run(failing_script, NULL, &failed);
  expect_same(&ok, &b.ok);
  expect_same(&failed, &b.failed);
  for (int i = 0; i < 2; i++) {
    struct sbx_run_out *r = i ? &failed : &ok;
    const struct sbx_run_out *base = i ? &b.failed : &b.ok;
    cr_expect_leq(r->secs, base->secs + 2.0 + 1.5,
                  "took %.2f s, without tracing %.2f s", r->secs, base->secs);
    cr_expect_eq(count_lines(r->err, "warning: trace: exporting spans to"), 1,
                 "stderr: %s", r->err);
    cr_expect(strstr(r->err, "Connection refused") ||
                  strstr(r->err, "cannot connect"),
              "stderr: %s", r->err);
    cr_expect_eq(count_lines(r->err, "spans were not exported"), 1,
                 "stderr: %s", r->err);
  }
  sbx_run_free(&ok);
  sbx_run_free(&failed);
  sbx_run_free(&b.ok);
  sbx_run_free(&b.failed);
}

Test(trace, hanging_receiver_costs_at_most_the_flush_deadline) {
  struct baseline b;
  baseline_runs(&b);
  struct test_otlp_receiver rcv;
  test_otlp_receiver_start(&rcv, true);
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.endpoint, 1);
  /* The first one-span request hangs; four spans fit in the queue; the
   * rest are dropped. */
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1", 1);
  setenv("OTEL_BSP_SCHEDULE_DELAY", "10", 1);
  struct sbx_run_out ok, failed;
  run(script, NULL, &ok);
  run(failing_script, NULL, &failed);
  json_t *reqs = test_otlp_receiver_requests(&rcv);
  test_otlp_receiver_stop(&rcv);
  cr_expect_geq(json_array_size(reqs), 1, "the receiver was asked");
  json_decref(reqs);
  expect_same(&ok, &b.ok);
  expect_same(&failed, &b.failed);
  for (int i = 0; i < 2; i++) {
    struct sbx_run_out *r = i ? &failed : &ok;
    const struct sbx_run_out *base = i ? &b.failed : &b.ok;
    cr_expect_leq(r->secs, base->secs + 2.0 + 1.5,
                  "took %.2f s, without tracing %.2f s", r->secs, base->secs);
    cr_expect_eq(count_lines(r->err, "spans were not exported"), 1,
                 "stderr: %s", r->err);
    cr_expect(strstr(r->err, "unsent at the 2000 ms flush deadline") != NULL,
              "stderr: %s", r->err);
  }
  /* The successful run ends 12 spans: at most 4 queued and 1 in flight. */
  cr_expect_geq(dropped(ok.err), 7, "stderr: %s", ok.err);
  sbx_run_free(&ok);
  sbx_run_free(&failed);
  sbx_run_free(&b.ok);
  sbx_run_free(&b.failed);
}

Test(trace, sdk_disabled_and_bad_endpoints_are_ignored) {
  struct test_otlp_receiver rcv;
  test_otlp_receiver_start(&rcv, false);
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.endpoint, 1);
  setenv("OTEL_SDK_DISABLED", "true", 1);
  struct sbx_run_out out;
  run(script, NULL, &out);
  cr_expect_eq(out.status, 0, "stderr: %s", out.err);
  sbx_run_free(&out);
  json_t *reqs = test_otlp_receiver_requests(&rcv);
  test_otlp_receiver_stop(&rcv);
  cr_expect_eq(json_array_size(reqs), 0);
  json_decref(reqs);

  unsetenv("OTEL_SDK_DISABLED");
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://example.invalid", 1);
  run(script, NULL, &out);
  cr_expect_eq(out.status, 0, "stderr: %s", out.err);
  cr_expect_str_eq(out.out, "done\n");
  cr_expect(strstr(out.err, "ignoring the OTLP endpoint") != NULL, "%s",
            out.err);
  sbx_run_free(&out);
}
