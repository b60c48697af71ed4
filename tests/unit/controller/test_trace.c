/* Spans in process: the OTLP JSON encoding written to a --trace file,
 * attribute limits, header parsing, and the export queue's bound against
 * a receiver that never answers. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/telemetry/trace.h"
#include "tests/support/otlp_receiver.h"

static char dir[64];
static char path[128];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-trace-unit-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(path, sizeof(path), "%s/spans.jsonl", dir);
}

static void teardown(void) {
  (void)unlink(path);
  (void)rmdir(dir);
}

TestSuite(trace, .init = setup, .fini = teardown, .timeout = 60);

static json_t *read_spans(void) {
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f);
  json_t *all = json_array();
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    json_error_t je;
    json_t *s = json_loads(line, 0, &je);
    cr_assert_not_null(s, "%s: %s", je.text, line);
    json_array_append_new(all, s);
  }
  free(line);
  fclose(f);
  return all;
}

static const char *sv(json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : "";
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

Test(trace, file_spans_are_otlp_json_objects) {
  struct tracer *t = NULL;
  struct trace_options o = {.file = path};
  cr_assert_eq(trace_new(&o, &t, NULL), 0);
  cr_assert_not_null(t);
  struct trace_span *root = trace_start(t, "sbx.run");
  struct trace_span *child = trace_child(root, "sandbox.exec");
  trace_set_str(child, "s", "text");
  trace_set_int(child, "i", -42);
  trace_set_bool(child, "b", true);
  trace_set_double(child, "d", 1.5);
  trace_set_str(child, "s", "replaced");
  trace_set_str(child, "nul", NULL);
  trace_set_error(child, "failed: %d", 7);
  trace_end(child);
  char tid[33];
  trace_trace_id(root, tid);
  trace_end(root);
  struct trace_stats st;
  trace_get_stats(t, &st);
  cr_expect_eq(st.ended, 2);
  trace_free(t);

  json_t *spans = read_spans();
  cr_assert_eq(json_array_size(spans), 2);
  json_t *c = json_array_get(spans, 0);
  json_t *r = json_array_get(spans, 1);
  cr_expect_str_eq(sv(c, "name"), "sandbox.exec");
  cr_expect_str_eq(sv(r, "traceId"), tid);
  cr_expect_str_eq(sv(c, "traceId"), tid);
  cr_expect_str_eq(sv(c, "parentSpanId"), sv(r, "spanId"));
  cr_expect_null(json_object_get(r, "parentSpanId"));
  cr_expect_eq(strlen(sv(r, "spanId")), 16);
  cr_expect_eq(json_integer_value(json_object_get(c, "kind")), 3);
  cr_expect_eq(json_integer_value(json_object_get(r, "kind")), 1);
  json_t *want = json_pack(
      "[{s:s, s:{s:s}}, {s:s, s:{s:s}}, {s:s, s:{s:b}}, {s:s, s:{s:f}}]", "key",
      "s", "value", "stringValue", "replaced", "key", "i", "value", "intValue",
      "-42", "key", "b", "value", "boolValue", 1, "key", "d", "value",
      "doubleValue", 1.5);
  cr_expect(json_equal(json_object_get(c, "attributes"), want));
  json_decref(want);
  json_t *err = json_pack("{s:i, s:s}", "code", 2, "message", "failed: 7");
  json_t *ok = json_pack("{s:i}", "code", 1);
  cr_expect(json_equal(json_object_get(c, "status"), err));
  cr_expect(json_equal(json_object_get(r, "status"), ok));
  json_decref(err);
  json_decref(ok);
  unsigned long long s0 = strtoull(sv(r, "startTimeUnixNano"), NULL, 10);
  unsigned long long e0 = strtoull(sv(r, "endTimeUnixNano"), NULL, 10);
  unsigned long long s1 = strtoull(sv(c, "startTimeUnixNano"), NULL, 10);
  unsigned long long e1 = strtoull(sv(c, "endTimeUnixNano"), NULL, 10);
  cr_expect(s0 <= s1 && s1 <= e1 && e1 <= e0);
  cr_expect_lt(e0 - s0, 5000000000ull);
  cr_expect_gt(s0,
               (unsigned long long)time(NULL) * 1000000000ull - 60000000000ull);
  json_decref(spans);
}

Test(trace, attributes_are_bounded) {
  struct tracer *t = NULL;
  struct trace_options o = {.file = path};
  cr_assert_eq(trace_new(&o, &t, NULL), 0);
  struct trace_span *s = trace_start(t, "x");
  char key[16];
  for (int i = 0; i < TRACE_MAX_ATTRIBUTES + 6; i++) {
    (void)snprintf(key, sizeof(key), "k%d", i);
    trace_set_int(s, key, i);
  }
  trace_set_int(s, "k0", 99); /* an existing key is still replaced */
  trace_end(s);
  s = trace_start(t, "y");
  char *big = malloc(TRACE_MAX_VALUE + 10);
  memset(big, 'a', TRACE_MAX_VALUE + 9);
  memcpy(big + TRACE_MAX_VALUE - 1, "\xc3\xa9", 2); /* é across the cut */
  big[TRACE_MAX_VALUE + 9] = '\0';
  trace_set_str(s, "big", big);
  trace_set_str(s, "bad",
                "a\xff"
                "b");
  trace_end(s);
  free(big);
  trace_free(t);
  json_t *spans = read_spans();
  json_t *x = json_array_get(spans, 0);
  cr_expect_eq(json_array_size(json_object_get(x, "attributes")),
               TRACE_MAX_ATTRIBUTES);
  cr_expect_eq(json_integer_value(json_object_get(x, "droppedAttributesCount")),
               6);
  json_t *k0 = json_array_get(json_object_get(x, "attributes"), 0);
  cr_expect_str_eq(sv(json_object_get(k0, "value"), "intValue"), "99");
  json_t *y = json_array_get(spans, 1);
  json_t *a = json_object_get(
      json_array_get(json_object_get(y, "attributes"), 0), "value");
  cr_expect_eq(strlen(sv(a, "stringValue")), TRACE_MAX_VALUE - 1);
  a = json_object_get(json_array_get(json_object_get(y, "attributes"), 1),
                      "value");
  cr_expect_str_eq(sv(a, "stringValue"), "a\xef\xbf\xbd"
                                         "b");
  json_decref(spans);
}

Test(trace, headers_are_parsed_and_checked) {
  char **h = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(trace_parse_headers(" a=b , C-Key = x%20y%3D ,, k=", &h, &e), 0,
               "%s", e.msg);
  cr_expect_str_eq(h[0], "a: b");
  cr_expect_str_eq(h[1], "C-Key: x y=");
  cr_expect_str_eq(h[2], "k: ");
  cr_expect_null(h[3]);
  for (size_t i = 0; h[i]; i++)
    free(h[i]);
  free(h);
  const char *bad[] = {"novalue", "=x", "a b=c", "a=x%0d%0aInjected: 1",
                       "a:b=c"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    h = NULL;
    cr_expect_eq(trace_parse_headers(bad[i], &h, &e), -EINVAL, "%s", bad[i]);
    cr_expect_null(h);
  }
  char many[1024] = "";
  for (int i = 0; i <= TRACE_MAX_HEADERS; i++)
    strncat(many, "k=v,", sizeof(many) - strlen(many) - 1);
  cr_expect_eq(trace_parse_headers(many, &h, &e), -EINVAL);
}

/* Ending spans never waits for the collector: with a receiver that never
 * answers, spans past the queue are dropped and counted, and trace_free
 * gives up at the flush deadline. */
Test(trace, full_queue_drops_and_free_keeps_the_deadline) {
  struct test_otlp_receiver rcv;
  test_otlp_receiver_start(&rcv, true);
  struct tracer *t = NULL;
  struct trace_options o = {.endpoint = rcv.endpoint,
                            .queue_max = 4,
                            .batch_max = 1,
                            .interval_ms = 10,
                            .flush_ms = 300};
  cr_assert_eq(trace_new(&o, &t, NULL), 0);
  struct trace_span *first = trace_start(t, "first");
  trace_end(first);
  /* Wait until the one-span request is stuck at the receiver. */
  for (int i = 0; i < 500; i++) {
    json_t *reqs = test_otlp_receiver_requests(&rcv);
    size_t n = json_array_size(reqs);
    json_decref(reqs);
    if (n)
      break;
    usleep(10000);
  }
  double t0 = now_s();
  for (int i = 0; i < 100; i++)
    trace_end(trace_start(t, "more"));
  double ended = now_s() - t0;
  struct trace_stats st;
  trace_get_stats(t, &st);
  cr_expect_eq(st.ended, 101);
  cr_expect_eq(st.dropped, 96, "dropped %llu", (unsigned long long)st.dropped);
  cr_expect_lt(ended, 0.5, "ending 100 spans took %.3f s", ended);
  t0 = now_s();
  trace_free(t);
  double freed = now_s() - t0;
  cr_expect_lt(freed, 0.3 + 0.5, "trace_free took %.3f s", freed);
  cr_expect_geq(freed, 0.25, "trace_free took %.3f s", freed);
  json_t *reqs = test_otlp_receiver_requests(&rcv);
  cr_expect_eq(json_array_size(reqs), 1);
  json_decref(reqs);
  test_otlp_receiver_stop(&rcv);
}

Test(trace, nothing_to_do_without_a_file_or_endpoint) {
  struct tracer *t = (struct tracer *)1;
  struct trace_options o = {0};
  cr_assert_eq(trace_new(&o, &t, NULL), 0);
  cr_expect_null(t);
  cr_expect_null(trace_start(NULL, "x"));
  cr_expect_null(trace_child(NULL, "x"));
  char tid[33] = "x";
  trace_trace_id(NULL, tid);
  cr_expect_str_eq(tid, "");
  struct trace_options bad = {.file = "/nonexistent/dir/f"};
  struct sbx_error e = {0};
  cr_expect_eq(trace_new(&bad, &t, &e), -ENOENT);
  cr_expect(strstr(e.msg, "/nonexistent/dir/f") != NULL, "%s", e.msg);
}
