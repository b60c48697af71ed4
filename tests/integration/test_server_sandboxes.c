/* The sandboxes API of sbx serve against real sandboxes: created for a
 * manifest, processes started with their output read by offset and their
 * stdin written, files put and got byte for byte, patches applied all or
 * nothing, sandboxes removed; and what is refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_server srv;
static struct test_model_server ms;

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
}

TestSuite(server_sandboxes, .fini = stop_all, .timeout = 240);

static void start(const char *const *extra) {
  test_server_init(&srv, NULL, NULL);
  test_server_start(&srv, extra);
}

static const char *p1(const char *id, const char *tail) {
  static char p[512];
  (void)snprintf(p, sizeof(p), "/v1/sandboxes/%s%s", id, tail);
  return p;
}

/* A new sandbox holding a.txt: its id (new). */
static char *create(void) {
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/sandboxes", srv.token,
            "{\"manifest\": {\"entries\": {\"a.txt\": {\"type\": \"file\", "
            "\"content\": \"hello\"}}}}",
            NULL);
  cr_assert_eq(h.status, 201, "%s", h.body);
  const char *id = json_string_value(json_object_get(h.json, "id"));
  cr_assert(id && strlen(id) == 12, "%s", h.body);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "backend")),
                   "local");
  char *out = strdup(id);
  test_http_free(&h);
  return out;
}

/* Starts BODY in sandbox ID: the exec id (new). */
static char *exec_start(const char *id, const char *body) {
  struct test_http h;
  test_http(&h, &srv, "POST", p1(id, "/execs"), srv.token, body, NULL);
  cr_assert_eq(h.status, 201, "%s: %s", body, h.body);
  char *x = strdup(json_string_value(json_object_get(h.json, "exec_id")));
  test_http_free(&h);
  return x;
}

/* All of STREAM of exec X from OFFSET until its end: the bytes (new) and
 * the exit code (-1 when none was given). */
static char *read_all(const char *id, const char *x, const char *stream,
                      long offset, int *code) {
  char *all = calloc(1, 1);
  size_t len = 0;
  *code = -1;
  for (int i = 0; i < 200; i++) {
    char tail[160];
    (void)snprintf(tail, sizeof(tail),
                   "/execs/%s/output?stream=%s&offset=%ld&wait_ms=2000", x,
                   stream, offset);
    struct test_http h;
    test_http(&h, &srv, "GET", p1(id, tail), srv.token, NULL, NULL);
    cr_assert_eq(h.status, 200, "%s", h.body);
    all = realloc(all, len + h.len + 1);
    memcpy(all + len, h.body, h.len);
    len += h.len;
    all[len] = '\0';
    char *next = test_http_header(&h, "Sbx-Next-Offset");
    char *eof = test_http_header(&h, "Sbx-Eof");
    char *ec = test_http_header(&h, "Sbx-Exit-Code");
    cr_assert_not_null(next);
    offset = strtol(next, NULL, 10);
    bool done = eof && strcmp(eof, "true") == 0 && ec;
    if (ec)
      *code = (int)strtol(ec, NULL, 10);
    free(next);
    free(eof);
    free(ec);
    test_http_free(&h);
    if (done)
      return all;
  }
  cr_assert_fail("the output of exec %s never ended", x);
  return all;
}

Test(server_sandboxes, a_process_runs_and_its_output_is_read_by_offset) {
  start(NULL);
  char *id = create();
  char *x = exec_start(
      id, "{\"command\": \"cat a.txt; echo; echo err >&2; exit 3\"}");
  int code;
  char *out = read_all(id, x, "stdout", 0, &code);
  cr_expect_str_eq(out, "hello\n");
  cr_expect_eq(code, 3);
  free(out);
  out = read_all(id, x, "stderr", 0, &code);
  cr_expect_str_eq(out, "err\n");
  free(out);
  out = read_all(id, x, "stdout", 2, &code);
  cr_expect_str_eq(out, "llo\n", "a read from offset 2");
  free(out);
  struct test_http h;
  char tail[96];
  (void)snprintf(tail, sizeof(tail), "/execs/%s", x);
  test_http(&h, &srv, "GET", p1(id, tail), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "status")),
                   "exited");
  cr_expect_eq(json_integer_value(json_object_get(h.json, "exit_code")), 3);
  cr_expect_eq(json_integer_value(json_object_get(h.json, "stdout_bytes")), 6);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/execs/999999"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  (void)snprintf(tail, sizeof(tail), "/execs/%s/output?stream=stdin", x);
  test_http(&h, &srv, "GET", p1(id, tail), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
  free(x);
  free(id);
}

/* With hold_s the process waits for its reader: output far beyond the
 * retention, read late, arrives whole. */
Test(server_sandboxes, held_output_arrives_whole) {
  start(NULL);
  char *id = create();
  char *x = exec_start(id, "{\"command\": \"seq 1 400000\", \"hold_s\": 30}");
  (void)nanosleep(&(struct timespec){1, 0}, NULL);
  int code;
  char *out = read_all(id, x, "stdout", 0, &code);
  cr_expect_eq(code, 0);
  size_t cap = 3u << 20, len = 0;
  char *want = malloc(cap);
  cr_assert_not_null(want);
  for (int i = 1; i <= 400000; i++)
    len += (size_t)snprintf(want + len, cap - len, "%d\n", i);
  cr_expect_eq(strlen(out), len);
  cr_expect(strcmp(out, want) == 0, "every byte, in order");
  free(want);
  free(out);
  free(x);
  free(id);
}

Test(server_sandboxes, stdin_reaches_the_process_and_env_and_cwd_apply) {
  start(NULL);
  char *id = create();
  char *x = exec_start(id, "{\"cmd\": [\"cat\"]}");
  char tail[96];
  (void)snprintf(tail, sizeof(tail), "/execs/%s/stdin?close=1", x);
  struct test_http h;
  test_http_bytes(&h, &srv, "POST", p1(id, tail), srv.token, "abc\n", 4,
                  "application/octet-stream", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_eq(json_integer_value(json_object_get(h.json, "written")), 4);
  test_http_free(&h);
  int code;
  char *out = read_all(id, x, "stdout", 0, &code);
  cr_expect_str_eq(out, "abc\n");
  cr_expect_eq(code, 0);
  free(out);
  free(x);
  test_http_bytes(&h, &srv, "PUT", p1(id, "/files/d/.keep"), srv.token, "", 0,
                  "application/octet-stream", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  x = exec_start(id, "{\"command\": \"echo $GREETING; pwd\", \"cwd\": \"d\", "
                     "\"env\": {\"GREETING\": \"hi there\"}}");
  out = read_all(id, x, "stdout", 0, &code);
  cr_expect(strncmp(out, "hi there\n", 9) == 0 && strstr(out, "/d\n"), "%s",
            out);
  free(out);
  free(x);
  free(id);
}

Test(server_sandboxes, bad_execs_are_refused) {
  start(NULL);
  char *id = create();
  static const struct {
    const char *body;
    long status;
  } bad[] = {
      {"{}", 400},
      {"{\"cmd\": [], \"command\": \"x\"}", 400},
      {"{\"cmd\": \"ls\"}", 400},
      {"{\"cmd\": [1]}", 400},
      {"{\"command\": \"x\", \"timeout_s\": 0}", 400},
      {"{\"command\": \"x\", \"hold_s\": -1}", 400},
      {"{\"command\": \"x\", \"hold_s\": 3601}", 400},
      {"{\"command\": \"x\", \"hold_s\": \"5\"}", 400},
      {"{\"command\": \"x\", \"env\": {\"A\": 1}}", 400},
      {"{\"command\": \"x\", \"colour\": 1}", 400},
      {"{\"cmd\": [\"/no/such/program\"]}", 404},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct test_http h;
    test_http(&h, &srv, "POST", p1(id, "/execs"), srv.token, bad[i].body, NULL);
    cr_expect_eq(h.status, bad[i].status, "%s: %ld %s", bad[i].body, h.status,
                 h.body);
    test_http_free(&h);
  }
  char *reader = test_server_token(&srv, "reader", "read");
  struct test_http h;
  test_http(&h, &srv, "POST", p1(id, "/execs"), reader,
            "{\"command\": \"true\"}", NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, ""), reader, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  free(reader);
  free(id);
}

Test(server_sandboxes, files_go_in_and_out_byte_for_byte) {
  start(NULL);
  char *id = create();
  /* Every byte value, and a body of several chunks. */
  size_t big = (9u << 20) + 17;
  unsigned char *data = malloc(big);
  for (size_t i = 0; i < big; i++)
    data[i] = (unsigned char)(i * 7 + i / 251);
  struct test_http h;
  test_http_bytes(&h, &srv, "PUT", p1(id, "/files/dir/sub/f.bin"), srv.token,
                  data, big, "application/octet-stream", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_eq(json_integer_value(json_object_get(h.json, "size")),
               (json_int_t)big);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/files/dir/sub/f.bin"), srv.token, NULL,
            NULL);
  cr_expect_eq(h.status, 200);
  cr_expect_eq(h.len, big);
  cr_expect(h.len == big && memcmp(h.body, data, big) == 0, "same bytes");
  char *size = test_http_header(&h, "Sbx-File-Size");
  cr_expect(size && strtoull(size, NULL, 10) == big);
  free(size);
  test_http_free(&h);
  free(data);
  /* No temporary file is left beside it. */
  char *x = exec_start(id, "{\"command\": \"ls -A dir/sub\"}");
  int code;
  char *out = read_all(id, x, "stdout", 0, &code);
  cr_expect_str_eq(out, "f.bin\n");
  free(out);
  free(x);
  test_http(&h, &srv, "GET", p1(id, "/files/a.txt"), srv.token, NULL, NULL);
  cr_expect_str_eq(h.body, "hello");
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/files/missing"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http_bytes(&h, &srv, "PUT", p1(id, "/files/../outside"), srv.token, "x",
                  1, "application/octet-stream", NULL);
  cr_expect(h.status == 403 || h.status == 422,
            "a path out of the "
            "workspace: %ld %s",
            h.status, h.body);
  test_http_free(&h);
  test_http(&h, &srv, "DELETE", p1(id, "/files/dir"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 409, "a non-empty directory: %ld %s", h.status,
               h.body);
  test_http_free(&h);
  test_http(&h, &srv, "DELETE", p1(id, "/files/dir?recursive=true"), srv.token,
            NULL, NULL);
  cr_expect_eq(h.status, 204, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/files/dir/sub/f.bin"), srv.token, NULL,
            NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  free(id);
}

Test(server_sandboxes, a_patch_applies_whole_or_not_at_all) {
  start(NULL);
  char *id = create();
  const char *good = "*** Begin Patch\n*** Add File: b.txt\n+new\n"
                     "*** Update File: p.txt\n@@\n-one\n+one, two\n"
                     "*** End Patch\n";
  struct test_http h;
  test_http_bytes(&h, &srv, "PUT", p1(id, "/files/p.txt"), srv.token, "one\n",
                  4, "application/octet-stream", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  test_http_bytes(&h, &srv, "POST", p1(id, "/patch"), srv.token, good,
                  strlen(good), "text/plain", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_eq(json_array_size(json_object_get(h.json, "results")), 2, "%s",
               h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/files/p.txt"), srv.token, NULL, NULL);
  cr_expect_str_eq(h.body, "one, two\n");
  test_http_free(&h);
  const char *bad = "*** Begin Patch\n*** Add File: c.txt\n+c\n"
                    "*** Update File: missing.txt\n@@\n-x\n+y\n"
                    "*** End Patch\n";
  test_http_bytes(&h, &srv, "POST", p1(id, "/patch"), srv.token, bad,
                  strlen(bad), "text/plain", NULL);
  cr_expect(h.status == 404 || h.status == 422, "%ld %s", h.status, h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, "/files/c.txt"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "nothing of a failed patch is applied");
  test_http_free(&h);
  test_http_bytes(&h, &srv, "POST", p1(id, "/patch"), srv.token, "", 0,
                  "text/plain", NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
  free(id);
}

Test(server_sandboxes, sandboxes_are_listed_removed_and_limited) {
  const char *extra[] = {"--max-sandboxes", "1", NULL};
  start(extra);
  char *id = create();
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/sandboxes", srv.token, "{}", NULL);
  cr_expect_eq(h.status, 429, "%s", h.body);
  char *ra = test_http_header(&h, "Retry-After");
  cr_expect_not_null(ra);
  free(ra);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/sandboxes", srv.token, NULL, NULL);
  json_t *data = json_object_get(h.json, "data");
  cr_expect_eq(json_array_size(data), 1);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(data, 0), "id")), id);
  /* Its time as openapi.json says: RFC 3339, as a run's. */
  const char *created =
      json_string_value(json_object_get(json_array_get(data, 0), "created_at"));
  cr_expect(created && strlen(created) == 24 && created[4] == '-' &&
                created[10] == 'T' && created[23] == 'Z',
            "created_at: %s", created ? created : "(not a string)");
  test_http_free(&h);
  test_http(&h, &srv, "DELETE", p1(id, ""), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 204, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", p1(id, ""), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", p1(id, "/execs"), srv.token,
            "{\"command\": \"true\"}", NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "DELETE", p1(id, ""), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  char *again = create();
  free(again);
  free(id);
}

Test(server_sandboxes, bad_sandboxes_are_refused) {
  start(NULL);
  static const struct {
    const char *body, *want;
    long status;
  } bad[] = {
      {"{\"colour\": 1}", "unknown member", 400},
      {"{\"backend\": \"k8s\"}", "unknown backend", 422},
      {"{\"backend\": 1}", "backend", 400},
      {"{\"manifest\": {\"entries\": {\"e\": {\"type\": \"local_dir\", "
       "\"src\": \"/etc\"}}}}",
       "local_dir", 422},
      {"{\"manifest\": {\"entries\": {\"e\": {\"type\": \"nope\"}}}}", "type",
       422},
      {"{\"options\": {\"no_such_option\": 1}}", "no_such_option", 422},
      {"{\"options\": {\"isolation\": \"none\"}}", "namespaces", 403},
      {"{\"backend\": \"docker\", \"options\": {\"sandboxd_static\": "
       "\"/bin/sh\"}}",
       "server's own host", 403},
  };
  /* A token that is not the operator's (admin may set host options). */
  char *runner = test_server_token(&srv, "runner", "run,read");
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct test_http h;
    test_http(&h, &srv, "POST", "/v1/sandboxes", runner, bad[i].body, NULL);
    cr_expect_eq(h.status, bad[i].status, "%s: %ld %s", bad[i].body, h.status,
                 h.body);
    cr_expect(strstr(h.body, bad[i].want), "%s: %s", bad[i].body, h.body);
    test_http_free(&h);
  }
  free(runner);
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/sandboxes/0123456789ab", srv.token, NULL,
            NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/sandboxes", srv.token, NULL, NULL);
  cr_expect_eq(json_array_size(json_object_get(h.json, "data")), 0);
  test_http_free(&h);
}

Test(server_sandboxes, a_run_goes_on_in_a_sandbox_of_the_api) {
  test_model_server_start(
      &ms,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
      "\"c1\", \"arguments\": {\"cmd\": \"cat a.txt; echo made > "
      "made.txt\"}}]}, {\"text\": \"ok\"}]",
      NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, NULL);
  char *id = create();
  char body[512];
  (void)snprintf(body, sizeof(body),
                 "{\"agent\": {\"name\": \"A\", \"model\": \"m1\"}, "
                 "\"input\": \"x\", \"sandbox_id\": \"%s\"}",
                 id);
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/runs", srv.token, body, NULL);
  cr_assert_eq(h.status, 201, "%s", h.body);
  char *rid = strdup(json_string_value(json_object_get(h.json, "id")));
  test_http_free(&h);
  json_decref(test_server_wait(&srv, rid, "completed", 60000));
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "hello"), "the run saw the sandbox's file: %s",
            out ? out : "(none)");
  json_decref(reqs);
  /* The sandbox outlives the run, with what the run made. */
  test_http(&h, &srv, "GET", p1(id, "/files/made.txt"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_str_eq(h.body, "made\n");
  test_http_free(&h);
  /* Another token's sandbox, and one that does not exist. */
  char *other = test_server_token(&srv, "other", "run,read");
  test_http(&h, &srv, "POST", "/v1/runs", other, body, NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": {\"name\": \"A\"}, \"input\": \"x\", "
            "\"sandbox_id\": \"000000000000\"}",
            NULL);
  cr_expect_eq(h.status, 422, "%s", h.body);
  test_http_free(&h);
  free(other);
  free(rid);
  free(id);
}

Test(server_sandboxes,
     a_sandbox_restarted_behind_the_server_s_back_is_reattached) {
  test_server_init(&srv, NULL, NULL);
  test_server_start(&srv, NULL);
  char *id = create();
  char *x = exec_start(id, "{\"cmd\": [\"true\"]}");
  free(x);
  /* Stopped and started again from the command line: a new sandboxd. */
  struct sbx_run_out r;
  const char *stop[] = {"stop", id, NULL};
  sbx_sandbox_run(&r, srv.state, stop);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  struct test_http h;
  test_http(&h, &srv, "POST", p1(id, "/execs"), srv.token,
            "{\"cmd\": [\"true\"]}", NULL);
  cr_expect_eq(h.status, 503, "a stopped sandbox: %ld %s", h.status, h.body);
  test_http_free(&h);
  /* Its status says so, in the list and alone. */
  test_http(&h, &srv, "GET", p1(id, ""), srv.token, NULL, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "status")),
                   "stopped");
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/sandboxes", srv.token, NULL, NULL);
  cr_expect_str_eq(
      json_string_value(json_object_get(
          json_array_get(json_object_get(h.json, "data"), 0), "status")),
      "stopped");
  test_http_free(&h);
  const char *startc[] = {"start", id, NULL};
  sbx_sandbox_run(&r, srv.state, startc);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  test_http(&h, &srv, "GET", p1(id, ""), srv.token, NULL, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "status")),
                   "running");
  test_http_free(&h);
  test_http(&h, &srv, "POST", p1(id, "/execs"), srv.token,
            "{\"cmd\": [\"cat\", \"a.txt\"]}", NULL);
  cr_expect_eq(h.status, 201, "started again: %ld %s", h.status, h.body);
  test_http_free(&h);
  free(id);
}
