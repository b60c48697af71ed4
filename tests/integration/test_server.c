/* sbx serve end to end: the real server process on SQLite, the scripted
 * model server, real sandboxes, real HTTP. Runs submitted, streamed,
 * approved, rejected, cancelled, retried; tokens and scopes; bad input;
 * idempotency keys; quotas; kill -9 and a restart mid-run. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_model_server ms;
static struct test_server srv;

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
}

TestSuite(server, .fini = stop_all, .timeout = 240);

/* The model server on SCRIPT and sbx serve with EXTRA flags. */
static void start(const char *script, const char *const *extra) {
  test_model_server_start(&ms, script, NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, extra);
}

static const char *const one_call =
    "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"echo hi > f; cat f\"}}]},"
    " {\"text\": \"done: hi\"}]";

#define AGENT_A "{\"name\": \"A\", \"model\": \"m1\"}"

/* "/v1/runs/ID" followed by TAIL. */
static const char *path_of(const char *id, const char *tail) {
  static char p[256];
  (void)snprintf(p, sizeof(p), "/v1/runs/%s%s", id, tail);
  return p;
}

Test(server, healthz_needs_no_token_and_the_api_does) {
  start("[]", NULL);
  struct test_http h;
  test_http(&h, &srv, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_eq(h.status, 200);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "status")), "ok");
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs", NULL, NULL, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  char *www = test_http_header(&h, "WWW-Authenticate");
  cr_expect_not_null(www);
  free(www);
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(h.json, "error"), "code")),
                   "unauthenticated");
  test_http_free(&h);
  /* A well-formed token that is not in the store. */
  test_http(&h, &srv, "GET", "/v1/runs",
            "sbx_000000000000_0000000000000000000000000000000000000000", NULL,
            NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  test_http_free(&h);
  /* A real token id with a wrong secret. */
  char bad[128];
  (void)snprintf(bad, sizeof(bad), "%s", srv.token);
  bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
  test_http(&h, &srv, "GET", "/v1/runs", bad, NULL, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect(json_is_array(json_object_get(h.json, "data")));
  test_http_free(&h);
}

Test(server, scopes_limit_what_a_token_may_do) {
  start("[]", NULL);
  char *reader = test_server_token(&srv, "reader", "read");
  struct test_http h;
  const char *body = "{\"agent\": " AGENT_A ", \"input\": \"x\"}";
  test_http(&h, &srv, "POST", "/v1/runs", reader, body, NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  cr_expect(strstr(h.body, "\\\"run\\\" scope") || strstr(h.body, "run"), "%s",
            h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/metrics", reader, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect(strstr(h.body, "# TYPE sbx_runs gauge"), "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", "/v1/runs/run_0/approvals/c1", reader,
            "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  test_http_free(&h);
  /* A removed token is refused at once. */
  struct sbx_run_out r;
  const char *rm[] = {"token", "rm",          "reader",  "--db",
                      srv.db,  "--state-dir", srv.state, NULL};
  sbx_run(&r, NULL, rm);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  test_http(&h, &srv, "GET", "/v1/runs", reader, NULL, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  test_http_free(&h);
  free(reader);
}

Test(server, a_run_completes_and_its_events_stream_in_order) {
  start(one_call, NULL);
  char *id = test_server_submit(&srv, AGENT_A, "say hi");
  cr_expect(strncmp(id, "run_", 4) == 0 && strlen(id) == 36, "%s", id);
  json_t *run = test_server_wait(&srv, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "done: hi");
  cr_expect_str_eq(json_string_value(json_object_get(run, "agent")), "A");
  cr_expect(json_is_object(json_object_get(run, "usage")));
  json_decref(run);
  bool ended = false;
  json_t *evs = test_sse(&srv, srv.token, id, -1, 0, 30000, &ended);
  cr_expect(ended, "the stream of a finished run ends");
  size_t n = json_array_size(evs);
  cr_assert_geq(n, 5, "%zu events", n);
  size_t i;
  json_t *ev;
  json_array_foreach(evs, i, ev) {
    cr_expect_eq(json_integer_value(json_object_get(ev, "id")),
                 (json_int_t)i + 1);
    json_t *d = json_object_get(ev, "data");
    cr_expect_eq(json_integer_value(json_object_get(d, "seq")),
                 (json_int_t)i + 1);
    cr_expect_str_eq(json_string_value(json_object_get(d, "type")),
                     json_string_value(json_object_get(ev, "event")));
    cr_expect_str_eq(json_string_value(json_object_get(d, "run_id")), id + 4);
  }
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, 0), "event")),
      "run_started");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, n - 1), "event")),
      "run_finished");
  json_decref(evs);
  free(id);
}

Test(server, a_reconnecting_stream_gets_every_later_event_once) {
  start("[{\"delay_ms\": 300, \"tool_calls\": [{\"name\": \"exec_command\", "
        "\"call_id\": \"c1\", \"arguments\": {\"cmd\": \"true\"}}]},"
        " {\"delay_ms\": 300, \"tool_calls\": [{\"name\": "
        "\"exec_command\", \"call_id\": \"c2\", \"arguments\": {\"cmd\": "
        "\"true\"}}]},"
        " {\"delay_ms\": 300, \"text\": \"ok\"}]",
        NULL);
  char *id = test_server_submit(&srv, AGENT_A, "go");
  json_t *all = json_array();
  long last = -1;
  bool ended = false;
  /* Three events at a time, as a client whose connection keeps dropping. */
  for (int round = 0; round < 100 && !ended; round++) {
    json_t *evs = test_sse(&srv, srv.token, id, last, 3, 30000, &ended);
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev) {
      json_array_append(all, ev);
      last = (long)json_integer_value(json_object_get(ev, "id"));
    }
    json_decref(evs);
  }
  cr_expect(ended);
  size_t n = json_array_size(all);
  cr_assert_geq(n, 8);
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(
        json_integer_value(json_object_get(json_array_get(all, i), "id")),
        (json_int_t)i + 1, "event %zu", i);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(all, n - 1), "event")),
      "run_finished");
  json_decref(all);
  /* ?after= is the same as Last-Event-ID. */
  struct test_http h;
  test_http(&h, &srv, "GET", path_of(id, "/events?after=x"), srv.token, NULL,
            NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
  free(id);
}

/* The threads of process PID now. */
static unsigned threads_of(pid_t pid) {
  char path[64], line[256];
  (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  unsigned long n = 0;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "Threads:", 8) == 0)
      n = strtoul(line + 8, NULL, 10);
  (void)fclose(f);
  return (unsigned)n;
}

Test(server, a_stream_whose_client_has_gone_lets_go_of_its_connection) {
  start("[{\"delay_ms\": 20000, \"text\": \"slow\"}]", NULL);
  char *id = test_server_submit(&srv, AGENT_A, "x");
  json_decref(test_server_wait(&srv, id, "running", 30000));
  /* The run starts threads of its own at first: count once they are. */
  unsigned before = threads_of(srv.pid);
  for (int same = 0, t = 0; same < 5 && t < 100; t++) {
    (void)usleep(100000);
    unsigned n = threads_of(srv.pid);
    same = n == before ? same + 1 : 0;
    before = n;
  }
  /* Clients that read the first event and go, as a page left would. */
  for (int i = 0; i < 8; i++) {
    bool ended = true;
    json_decref(test_sse(&srv, srv.token, id, -1, 1, 10000, &ended));
    cr_expect(!ended);
  }
  /* Each stream sees that its client has gone at its next look at the
   * store (a quarter of a second), and its connection and thread end;
   * they used to be kept until the next keep-alive failed (15 s), so that
   * clients coming and going could use up the connections. */
  unsigned now = threads_of(srv.pid);
  for (int t = 0; t < 40 && now > before; t++) {
    (void)usleep(50000);
    now = threads_of(srv.pid);
  }
  cr_expect_leq(now, before, "%u threads, %u before the streams", now, before);
  free(id);
}

#define AGENT_ASK                                                              \
  "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": {\"exec_command\": "    \
  "\"always\"}}"

Test(server, an_approval_from_a_second_client_lets_the_run_finish) {
  start(one_call, NULL);
  char *id = test_server_submit(&srv, AGENT_ASK, "say hi");
  json_t *run = test_server_wait(&srv, id, "waiting_approval", 60000);
  json_t *pend = json_object_get(run, "pending_approvals");
  cr_assert_eq(json_array_size(pend), 1, "%s", json_dumps(run, 0));
  json_t *p0 = json_array_get(pend, 0);
  cr_expect_str_eq(json_string_value(json_object_get(p0, "call_id")), "c1");
  cr_expect_str_eq(json_string_value(json_object_get(p0, "tool")),
                   "exec_command");
  cr_expect(
      strstr(json_string_value(json_object_get(p0, "arguments")), "echo hi"));
  json_decref(run);
  char *approver = test_server_token(&srv, "person", "approve");
  struct test_http h;
  test_http(&h, &srv, "POST", path_of(id, "/approvals/nope"), approver,
            "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 409, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", path_of(id, "/approvals/c1"), approver,
            "{\"decision\": \"maybe\"}", NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", path_of(id, "/approvals/c1"), approver,
            "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  run = test_server_wait(&srv, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "done: hi");
  json_decref(run);
  test_http(&h, &srv, "POST", path_of(id, "/approvals/c1"), approver,
            "{\"decision\": \"approve\"}", NULL);
  cr_expect_eq(h.status, 409, "deciding twice: %s", h.body);
  test_http_free(&h);
  /* The tool ran once, after the approval: its output reached the model. */
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "hi"), "%s", out ? out : "(none)");
  json_decref(reqs);
  free(approver);
  free(id);
}

Test(server, a_rejection_and_its_reason_reach_the_model) {
  start(one_call, NULL);
  char *id = test_server_submit(&srv, AGENT_ASK, "say hi");
  json_decref(test_server_wait(&srv, id, "waiting_approval", 60000));
  struct test_http h;
  test_http(&h, &srv, "POST", path_of(id, "/approvals/c1"), srv.token,
            "{\"decision\": \"reject\", \"reason\": \"no writing files\"}",
            NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "no writing files"), "%s", out ? out : "(none)");
  json_decref(reqs);
  free(id);
}

Test(server, a_cancelled_run_stops_and_says_so) {
  start("[{\"delay_ms\": 20000, \"text\": \"too late\"}]", NULL);
  char *id = test_server_submit(&srv, AGENT_A, "wait");
  json_decref(test_server_wait(&srv, id, "running", 30000));
  struct test_http h;
  test_http(&h, &srv, "POST", path_of(id, "/cancel"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 202, "%s", h.body);
  test_http_free(&h);
  json_t *run = test_server_wait(&srv, id, "cancelled", 10000);
  cr_expect(json_is_null(json_object_get(run, "final_output")));
  json_decref(run);
  bool ended = false;
  json_t *evs = test_sse(&srv, srv.token, id, -1, 0, 10000, &ended);
  cr_expect(ended);
  size_t n = json_array_size(evs);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(evs, n - 1), "event")),
      "run_cancelled");
  json_decref(evs);
  test_http(&h, &srv, "POST", path_of(id, "/cancel"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 409, "%s", h.body);
  test_http_free(&h);
  free(id);
}

Test(server, a_failed_run_is_retried_from_its_last_step) {
  /* The second model call fails the run; the retry asks again and the
   * tool call that ran before the failure does not run again. */
  start("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo x >> n; wc -l < n\"}}]},"
        " {\"status\": 400},"
        " {\"text\": \"finished\"}]",
        NULL);
  char *id = test_server_submit(&srv, AGENT_A, "count");
  json_t *run = test_server_wait(&srv, id, "failed", 60000);
  json_t *err = json_object_get(run, "error");
  cr_expect(json_is_string(json_object_get(err, "message")), "%s",
            json_dumps(run, 0));
  json_decref(run);
  struct test_http h;
  test_http(&h, &srv, "POST", path_of(id, "/retry"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 202, "%s", h.body);
  test_http_free(&h);
  run = test_server_wait(&srv, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "finished");
  json_decref(run);
  json_t *reqs = test_model_server_requests(&ms);
  cr_expect_eq(json_array_size(reqs), 3);
  const char *out = test_call_output(reqs, 2, "c1");
  cr_expect(out && strstr(out, "Output:\n1\n"), "the tool ran once: %s",
            out ? out : "(none)");
  json_decref(reqs);
  test_http(&h, &srv, "POST", path_of(id, "/retry"), srv.token, NULL, NULL);
  cr_expect_eq(h.status, 409, "a completed run: %s", h.body);
  test_http_free(&h);
  free(id);
}

Test(server, an_idempotency_key_returns_the_first_answer) {
  start("[{\"text\": \"a\"}, {\"text\": \"b\"}]", NULL);
  const char *body = "{\"agent\": " AGENT_A ", \"input\": \"x\"}";
  const char *key[] = {"Idempotency-Key: k-1", NULL};
  struct test_http a, b, c;
  test_http(&a, &srv, "POST", "/v1/runs", srv.token, body, key);
  test_http(&b, &srv, "POST", "/v1/runs", srv.token, body, key);
  cr_expect_eq(a.status, 201, "%s", a.body);
  cr_expect_eq(b.status, 201, "%s", b.body);
  cr_expect_str_eq(json_string_value(json_object_get(a.json, "id")),
                   json_string_value(json_object_get(b.json, "id")));
  char *rep = test_http_header(&b, "Idempotent-Replayed");
  cr_expect(rep && strcmp(rep, "true") == 0);
  free(rep);
  test_http(&c, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": " AGENT_A ", \"input\": \"other\"}", key);
  cr_expect_eq(c.status, 422, "%s", c.body);
  test_http_free(&c);
  test_http(&c, &srv, "GET", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(json_array_size(json_object_get(c.json, "data")), 1,
               "one run made: %s", c.body);
  test_http_free(&c);
  test_http_free(&a);
  test_http_free(&b);
}

/* The token refused() posts with (NULL: the admin token). */
static const char *refuse_token;

/* POST BODY to /v1/runs expecting STATUS and a message holding WANT. */
static void refused(const char *body, long status, const char *want) {
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/runs",
            refuse_token ? refuse_token : srv.token, body, NULL);
  cr_expect_eq(h.status, status, "%s: %ld %s", body, h.status, h.body);
  const char *msg = json_string_value(
      json_object_get(json_object_get(h.json, "error"), "message"));
  cr_expect(msg && strstr(msg, want), "%s: %s", body, h.body);
  test_http_free(&h);
}

Test(server, bad_requests_are_refused_with_a_reason) {
  const char *extra[] = {"--max-body", "4096", NULL};
  start("[]", extra);
  refused("{", 400, "not JSON");
  refused("[1]", 400, "JSON object");
  refused("{\"input\": \"x\"}", 400, "\"agent\" is required");
  refused("{\"agent\": " AGENT_A "}", 400, "\"input\" is required");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"extra\": 1}", 400,
          "unknown member \"extra\"");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"max_turns\": 0}", 400,
          "max_turns");
  refused("{\"agent\": {\"name\": \"A\", \"colour\": 1}, \"input\": \"x\"}",
          422, "colour");
  refused("{\"agent\": {\"name\": \"A\", \"default_manifest\": {\"entries\": "
          "{\"etc\": {\"type\": \"local_dir\", \"src\": \"/etc\"}}}}, "
          "\"input\": \"x\"}",
          422, "local_dir");
  refused("{\"agent\": {\"name\": \"A\", \"handoffs\": [\"b.json\"]}, "
          "\"input\": \"x\"}",
          422, "agent");
  /* Programs on the server's host, even for the operator's token. */
  refused("{\"agent\": {\"name\": \"A\", \"tools\": [{\"type\": "
          "\"command\", \"name\": \"t\", \"command\": [\"/bin/id\"]}]}, "
          "\"input\": \"x\"}",
          422, "\"tools[0]\": command tools run programs on the server's host");
  refused("{\"agent\": {\"name\": \"A\", \"mcp_servers\": [{\"name\": "
          "\"m\", \"type\": \"stdio\", \"command\": \"/bin/id\"}]}, "
          "\"input\": \"x\"}",
          422, "\"mcp_servers[0]\": stdio MCP servers are programs on the");
  /* Skills are read from the host (a lazy source when the file loads). */
  refused("{\"agent\": {\"name\": \"A\", \"capabilities\": [\"shell\", "
          "{\"type\": \"skills\", \"lazy_from\": {\"type\": \"local_dir\", "
          "\"src\": \"/etc\"}}]}, \"input\": \"x\"}",
          422, "\"capabilities[1]\": a skills capability reads the server's");
  refused("{\"agent\": {\"name\": \"A\", \"output_guardrails\": [{\"name\": "
          "\"g\", \"command\": [\"/bin/true\"]}]}, \"input\": \"x\"}",
          422,
          "\"output_guardrails[0]\": command guardrails run programs on the "
          "server's host");
  refused("{\"agent\": {\"name\": \"A\", \"input_guardrails\": [{\"name\": "
          "\"g\", \"agent\": \"/etc/passwd\"}]}, \"input\": \"x\"}",
          422, "\"input_guardrails[0]\": guard agents are other agent files");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"sandbox_id\": \"s\"}",
          422, "no sandbox \"s\"");
  /* Not done rather than ignored: the server's runs publish no ports. */
  refused("{\"agent\": {\"name\": \"A\", \"run_config\": "
          "{\"exposed_ports\": [8000]}}, \"input\": \"x\"}",
          422, "\"run_config.exposed_ports\" is not supported by sbx serve");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"run_config\": "
          "{\"exposed_ports\": [8000]}}",
          422, "\"run_config.exposed_ports\" is not supported by sbx serve");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"sandbox_id\": 1}", 400,
          "sandbox_id");
  /* What would reach the server's own host is the operator's to set: an
   * admin token's, not another's. */
  char *runner = test_server_token(&srv, "runner", "run");
  refuse_token = runner;
  refused("{\"agent\": {\"name\": \"A\", \"run_config\": {\"isolation\": "
          "\"none\"}}, \"input\": \"x\"}",
          403, "may be only namespaces");
  refused("{\"agent\": " AGENT_A ", \"input\": \"x\", \"run_config\": "
          "{\"isolation\": \"none\"}}",
          403, "may be only namespaces");
  refused("{\"agent\": {\"name\": \"A\", \"run_config\": {\"backend\": "
          "\"docker\", \"mounts\": [{\"type\": \"bind\", \"source\": "
          "\"/\", \"target\": \"/host\"}]}}, \"input\": \"x\"}",
          403, "reaches the server's own host");
  refused("{\"agent\": {\"name\": \"A\", \"run_config\": {\"backend\": "
          "\"docker\", \"host\": \"tcp://127.0.0.1:1\"}}, \"input\": \"x\"}",
          403, "reaches the server's own host");
  refused("{\"agent\": {\"name\": \"A\", \"base_url\": "
          "\"http://127.0.0.1:1/v1\"}, \"input\": \"x\"}",
          403, "base_url");
  refused("{\"agent\": {\"name\": \"A\", \"mcp_servers\": [{\"name\": "
          "\"m\", \"type\": \"streamable_http\", \"url\": "
          "\"http://127.0.0.1:1/mcp\"}]}, \"input\": \"x\"}",
          403, "\"mcp_servers\" would have the server connect");
  refuse_token = NULL;
  free(runner);
  struct test_http ok;
  test_http(&ok, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": {\"name\": \"A\", \"base_url\": "
            "\"http://127.0.0.1:1/v1\"}, \"input\": \"x\"}",
            NULL);
  cr_expect_eq(ok.status, 201, "the operator may: %s", ok.body);
  test_http_free(&ok);
  test_http(&ok, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": {\"name\": \"A\", \"run_config\": {\"backend\": "
            "\"docker\", \"host\": \"unix:///nonexistent.sock\"}}, "
            "\"input\": \"x\"}",
            NULL);
  cr_expect_eq(ok.status, 201, "the operator may: %s", ok.body);
  test_http_free(&ok);
  char big[8192];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  char body[9000];
  (void)snprintf(body, sizeof(body),
                 "{\"agent\": " AGENT_A ", \"input\": \"%s\"}", big);
  refused(body, 413, "limit of 4096");
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/runs/run_missing", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/nothing", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "DELETE", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 405, "%s", h.body);
  char *allow = test_http_header(&h, "Allow");
  cr_expect(allow && strstr(allow, "GET") && strstr(allow, "POST"), "%s",
            allow ? allow : "(none)");
  free(allow);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs?status=bogus", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs?limit=0", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 400, "%s", h.body);
  test_http_free(&h);
}

/* The error message of H (borrowed), or "". */
static const char *error_message(const struct test_http *h) {
  const char *m = json_string_value(
      json_object_get(json_object_get(h->json, "error"), "message"));
  return m ? m : "";
}

Test(server, bytes_that_are_not_utf8_are_quoted_in_the_error) {
  start("[]", NULL);
  /* Messages quote the path or a query argument, which may hold any byte
   * (percent-decoded); they used to make the JSON fail, answered as an
   * out-of-memory 500. Each byte that is not UTF-8 is now U+FFFD. */
  static const struct {
    const char *path;
    long status;
  } cases[] = {
      {"/%E0", 404},
      {"/v1/runs/run_%FF", 404},
      {"/v1/runs?status=%C3", 400},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct test_http h;
    test_http(&h, &srv, "GET", cases[i].path, srv.token, NULL, NULL);
    cr_expect_eq(h.status, cases[i].status, "%s: %ld %s", cases[i].path,
                 h.status, h.body);
    cr_expect(strstr(error_message(&h), "\xef\xbf\xbd"), "%s: %s",
              cases[i].path, h.body);
    test_http_free(&h);
  }
  /* A message is cut at 1 KiB, which may fall inside a character: a status
   * of 600 e-acutes (2 bytes each), quoted after 16 bytes, is cut in the
   * middle of one. */
  char path[4096] = "/v1/runs?status=";
  size_t n = strlen(path);
  for (int i = 0; i < 600; i++, n += 6)
    memcpy(path + n, "%C3%A9", 7);
  struct test_http h;
  test_http(&h, &srv, "GET", path, srv.token, NULL, NULL);
  cr_expect_eq(h.status, 400, "%ld %.300s", h.status, h.body);
  cr_expect(strstr(error_message(&h), "unknown status"), "%.300s", h.body);
  test_http_free(&h);
}

Test(server, an_agent_naming_other_files_is_refused_before_they_are_read) {
  start("[]", NULL);
  /* Handoffs and agents as tools name agent files on the server. They used
   * to be opened and parsed before being refused, and the parser's message
   * said whether each existed and how it began ("near 'root'"), and where
   * the server keeps its state. */
  static const char *const agents[] = {
      "{\"name\": \"A\", \"handoffs\": [\"/etc/passwd\"]}",
      "{\"name\": \"A\", \"handoffs\": [\"/no/such/file.json\"]}",
      "{\"name\": \"A\", \"handoffs\": [\"b.json\"]}",
      ("{\"name\": \"A\", \"tools\": [{\"type\": \"agent_as_tool\", "
       "\"agent\": \"/etc/hostname\"}]}"),
  };
  for (size_t i = 0; i < sizeof(agents) / sizeof(agents[0]); i++) {
    char body[512];
    (void)snprintf(body, sizeof(body), "{\"agent\": %s, \"input\": \"x\"}",
                   agents[i]);
    struct test_http h;
    test_http(&h, &srv, "POST", "/v1/runs", srv.token, body, NULL);
    cr_expect_eq(h.status, 422, "%s: %ld %s", agents[i], h.status, h.body);
    const char *msg = error_message(&h);
    cr_expect(strstr(msg, "handoffs and agents as tools name other agent "
                          "files"),
              "%s: %s", agents[i], h.body);
    cr_expect(!strstr(msg, "near") && !strstr(msg, "/etc/") &&
                  !strstr(msg, "No such file") && !strstr(msg, srv.state),
              "%s: %s", agents[i], h.body);
    test_http_free(&h);
  }
}

Test(server, runs_are_listed_by_status_in_pages) {
  start("[{\"text\": \"1\"}, {\"text\": \"2\"}, {\"text\": \"3\"}]", NULL);
  char *ids[3];
  for (int i = 0; i < 3; i++) {
    ids[i] = test_server_submit(&srv, AGENT_A, "x");
    json_decref(test_server_wait(&srv, ids[i], "completed", 60000));
  }
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/runs?limit=2&status=completed", srv.token,
            NULL, NULL);
  cr_assert_eq(h.status, 200, "%s", h.body);
  json_t *data = json_object_get(h.json, "data");
  cr_expect_eq(json_array_size(data), 2);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(data, 0), "id")),
      ids[2]);
  const char *next = json_string_value(json_object_get(h.json, "next_cursor"));
  cr_assert_not_null(next, "%s", h.body);
  char path[128];
  (void)snprintf(path, sizeof(path), "/v1/runs?limit=2&cursor=%s", next);
  struct test_http g;
  test_http(&g, &srv, "GET", path, srv.token, NULL, NULL);
  json_t *d2 = json_object_get(g.json, "data");
  cr_expect_eq(json_array_size(d2), 1, "%s", g.body);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(d2, 0), "id")), ids[0]);
  cr_expect(json_is_null(json_object_get(g.json, "next_cursor")));
  test_http_free(&g);
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs?status=failed", srv.token, NULL, NULL);
  cr_expect_eq(json_array_size(json_object_get(h.json, "data")), 0);
  test_http_free(&h);
  for (int i = 0; i < 3; i++)
    free(ids[i]);
}

Test(server, a_token_over_its_quota_is_told_when_to_come_back) {
  const char *extra[] = {"--max-runs", "1", NULL};
  start("[{\"delay_ms\": 3000, \"text\": \"slow\"}, {\"text\": \"next\"}]",
        extra);
  char *id = test_server_submit(&srv, AGENT_A, "x");
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": " AGENT_A ", \"input\": \"y\"}", NULL);
  cr_expect_eq(h.status, 429, "%s", h.body);
  char *ra = test_http_header(&h, "Retry-After");
  cr_expect_not_null(ra);
  free(ra);
  test_http_free(&h);
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  test_http(&h, &srv, "POST", "/v1/runs", srv.token,
            "{\"agent\": " AGENT_A ", \"input\": \"y\"}", NULL);
  cr_expect_eq(h.status, 201, "after the first ended: %s", h.body);
  test_http_free(&h);
  free(id);
}

Test(server, a_killed_server_s_run_goes_on_after_a_restart) {
  /* The tool runs, then the model is slow: the server is killed while it
   * waits, and the restarted one finishes the run without running the
   * tool again. */
  const char *extra[] = {"--lease-seconds", "3", NULL};
  start("{\"by_turn\": true, \"steps\": ["
        "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo x >> n; wc -l < n\"}}]},"
        " {\"delay_ms\": 4000, \"text\": \"finished\"}]}",
        extra);
  char *id = test_server_submit(&srv, AGENT_A, "count");
  bool ended = false;
  long last = -1;
  json_t *evs = test_sse(&srv, srv.token, id, -1, 0, 1500, &ended);
  size_t i;
  json_t *ev;
  bool tool_done = false;
  json_array_foreach(evs, i, ev) {
    last = (long)json_integer_value(json_object_get(ev, "id"));
    tool_done |= strcmp(json_string_value(json_object_get(ev, "event")),
                        "tool_call_finished") == 0;
  }
  json_decref(evs);
  cr_assert(tool_done, "the tool call finished before the kill");
  test_server_kill(&srv, SIGKILL);
  test_server_start(&srv, extra);
  json_t *run = test_server_wait(&srv, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "finished");
  json_decref(run);
  /* The stream goes on from where the client was, to the end. */
  evs = test_sse(&srv, srv.token, id, last, 0, 10000, &ended);
  cr_expect(ended);
  cr_expect_gt(json_array_size(evs), 0);
  cr_expect_eq(
      json_integer_value(json_object_get(json_array_get(evs, 0), "id")),
      last + 1);
  json_decref(evs);
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "Output:\n1\n"), "the tool ran once: %s",
            out ? out : "(none)");
  json_decref(reqs);
  free(id);
}

Test(server, a_stopped_server_s_run_goes_on_after_a_restart) {
  const char *extra[] = {"--lease-seconds", "3", NULL};
  start("{\"by_turn\": true, \"steps\": ["
        "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo x >> n; wc -l < n\"}}]},"
        " {\"delay_ms\": 3000, \"text\": \"finished\"}]}",
        extra);
  char *id = test_server_submit(&srv, AGENT_A, "count");
  bool ended = false;
  json_decref(test_sse(&srv, srv.token, id, -1, 0, 1500, &ended));
  test_server_kill(&srv, SIGTERM);
  test_server_start(&srv, extra);
  json_t *run = test_server_wait(&srv, id, "completed", 60000);
  cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                   "finished");
  json_decref(run);
  json_t *reqs = test_model_server_requests(&ms);
  const char *out = test_call_output(reqs, -1, "c1");
  cr_expect(out && strstr(out, "Output:\n1\n"), "the tool ran once: %s",
            out ? out : "(none)");
  json_decref(reqs);
  free(id);
}

Test(server, plain_http_off_loopback_needs_insecure) {
  test_model_server_start(&ms, "[]", NULL);
  test_server_init(&srv, NULL, ms.base_url);
  struct sbx_run_out r;
  const char *argv[] = {"serve", "--listen",    "0.0.0.0:0", "--db",
                        srv.db,  "--state-dir", srv.state,   NULL};
  sbx_run(&r, NULL, argv);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--insecure"), "%s", r.err);
  sbx_run_free(&r);
  /* --insecure would do nothing with TLS. */
  const char *both[] = {"serve",      "--listen",    "0.0.0.0:0", "--db",
                        srv.db,       "--state-dir", srv.state,   "--insecure",
                        "--tls-cert", "c.pem",       "--tls-key", "k.pem",
                        NULL};
  sbx_run(&r, NULL, both);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--insecure allows plain HTTP, but with --tls-cert"),
            "%s", r.err);
  sbx_run_free(&r);
  const char *bad[] = {"serve", "--listen", "nowhere", NULL};
  sbx_run(&r, NULL, bad);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "ADDR:PORT"), "%s", r.err);
  sbx_run_free(&r);
  const char *workers[] = {"serve", "--workers", "0", NULL};
  sbx_run(&r, NULL, workers);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--workers"), "%s", r.err);
  sbx_run_free(&r);
}

Test(server, tokens_are_made_listed_and_removed) {
  test_model_server_start(&ms, "[]", NULL);
  test_server_init(&srv, NULL, ms.base_url);
  struct sbx_run_out r;
  const char *dup[] = {"token", "create", "admin", "--db", srv.db, NULL};
  sbx_run(&r, NULL, dup);
  cr_expect_eq(r.status, 2, "a second token named admin: %s", r.err);
  sbx_run_free(&r);
  const char *bad[] = {"token",    "create", "x",    "--scopes",
                       "run,root", "--db",   srv.db, NULL};
  sbx_run(&r, NULL, bad);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "unknown scope \"root\""), "%s", r.err);
  sbx_run_free(&r);
  const char *ls[] = {"token", "ls", "--json", "--db", srv.db, NULL};
  sbx_run(&r, NULL, ls);
  cr_expect_eq(r.status, 0, "%s", r.err);
  json_t *list = json_loads(r.out, 0, NULL);
  cr_expect_eq(json_array_size(list), 1, "%s", r.out);
  json_t *t0 = json_array_get(list, 0);
  cr_expect_str_eq(json_string_value(json_object_get(t0, "name")), "admin");
  cr_expect_null(json_object_get(t0, "hash"), "the hash is never shown");
  cr_expect(!strstr(r.out, srv.token + 17), "nor the secret");
  json_decref(list);
  sbx_run_free(&r);
  const char *rm[] = {"token", "rm", "nobody", "--db", srv.db, NULL};
  sbx_run(&r, NULL, rm);
  cr_expect_eq(r.status, 1);
  sbx_run_free(&r);
}

Test(server, the_systemd_unit_verifies) {
  /* The unit as shipped, with the binary and settings of this build. */
  char dir[64] = "/tmp/sbx-unit-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  FILE *in = fopen(SBX_SOURCE_DIR "/deploy/systemd/sbx-server.service", "r");
  cr_assert_not_null(in);
  char unit[128];
  (void)snprintf(unit, sizeof(unit), "%s/sbx-server.service", dir);
  FILE *out = fopen(unit, "w");
  cr_assert_not_null(out);
  char line[1024];
  while (fgets(line, sizeof(line), in)) {
    char *p = strstr(line, "/usr/local/bin/sbx");
    if (p)
      fprintf(out, "%.*s%s%s", (int)(p - line), line, test_sbx_path(),
              p + strlen("/usr/local/bin/sbx"));
    else if (strncmp(line, "EnvironmentFile=", 16) == 0)
      fprintf(out, "EnvironmentFile=%s/deploy/systemd/server.env\n",
              SBX_SOURCE_DIR);
    else
      fputs(line, out);
  }
  fclose(in);
  fclose(out);
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "systemd-analyze verify %s 2>&1", unit);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char said[4096] = "";
  size_t n = fread(said, 1, sizeof(said) - 1, p);
  said[n] = '\0';
  int st = pclose(p);
  cr_expect_eq(st, 0, "systemd-analyze verify: %s", said);
  cr_expect_eq(n, 0, "systemd-analyze verify: %s", said);
  (void)test_rm_rf(dir);
}
