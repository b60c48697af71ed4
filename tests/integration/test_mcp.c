/* MCP servers end to end: the real sbx run with the scripted model server,
 * against the real @modelcontextprotocol/server-everything from npm
 * (scripts/mcp-servers.sh installs it into the build tree) and, for what
 * a real server does not do on demand (crash, hang, change its tools, send
 * too much), tests/support/mcp_fake.py. Each test checks what the model
 * was sent: the tool list and the tools' outputs. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/pyserver.h"
#include "tests/support/sbxrun.h"

#define MCP_DIR SBX_BUILD_DIR "/mcp-servers"
#define EVERYTHING                                                             \
  MCP_DIR "/node_modules/@modelcontextprotocol/server-everything/dist/"        \
          "index.js"
#define FILESYSTEM                                                             \
  MCP_DIR "/node_modules/@modelcontextprotocol/server-filesystem/dist/"        \
          "index.js"
#define FAKE SBX_SOURCE_DIR "/tests/support/mcp_fake.py"

static char dir[64];
static char state[96];
static char fake_log[128];
static char trace[128];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-mcp-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  (void)snprintf(fake_log, sizeof(fake_log), "%s/fake.jsonl", dir);
  (void)snprintf(trace, sizeof(trace), "%s/spans.jsonl", dir);
  int rc = system("bash " SBX_SOURCE_DIR "/scripts/mcp-servers.sh " MCP_DIR);
  cr_assert_eq(rc, 0,
               "scripts/mcp-servers.sh could not install the MCP "
               "servers from npm (above)");
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(mcp, .init = setup, .fini = teardown, .timeout = 180);

/* An agent with the MCP servers SERVERS (JSON array text). */
static const char *agent(const char *servers) {
  char text[4096];
  (void)snprintf(text, sizeof(text),
                 "{\"name\": \"A\", \"capabilities\": [], \"mcp_servers\": "
                 "%s}",
                 servers);
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", text));
  return path;
}

/* The server-everything entry with the EXTRA keys (may be ""). */
static const char *everything(const char *extra) {
  static char s[1024];
  (void)snprintf(s, sizeof(s),
                 "[{\"name\": \"everything\", \"type\": \"stdio\", "
                 "\"command\": \"node\", \"args\": [\"" EVERYTHING
                 "\", \"stdio\"]%s}]",
                 extra);
  return s;
}

/* The fake server's entry with the EXTRA keys (may be ""). */
static const char *fake(const char *extra) {
  static char s[1024];
  (void)snprintf(s, sizeof(s),
                 "[{\"name\": \"fake\", \"type\": \"stdio\", \"command\": "
                 "\"python3\", \"args\": [\"" FAKE "\", \"%s\"]%s}]",
                 fake_log, extra);
  return s;
}

struct fixture {
  struct sbx_run_out out;
  json_t *reqs;
};

static void run_script(struct fixture *f, const char *agent_path,
                       const char *script) {
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  const char *argv[] = {"run", "--trace", trace, agent_path, "go", NULL};
  sbx_run(&f->out, srv.base_url, argv);
  f->reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
}

static void fixture_free(struct fixture *f) {
  json_decref(f->reqs);
  sbx_run_free(&f->out);
}

/* Whether request N offered the tool NAME; its index in *AT. */
static bool offers(json_t *reqs, size_t n, const char *name, size_t *at) {
  json_t *tools = json_object_get(
      json_object_get(json_array_get(reqs, n), "body"), "tools");
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *tn = json_string_value(json_object_get(t, "name"));
    if (tn && strcmp(tn, name) == 0) {
      if (at)
        *at = i;
      return true;
    }
  }
  return false;
}

/* The output of CALL_ID in request N (borrowed), whatever its type. */
static json_t *output_of(json_t *reqs, size_t n, const char *call_id) {
  json_t *input = json_object_get(
      json_object_get(json_array_get(reqs, n), "body"), "input");
  size_t i;
  json_t *it;
  json_array_foreach(input, i, it) {
    const char *c = json_string_value(json_object_get(it, "call_id"));
    const char *t = json_string_value(json_object_get(it, "type"));
    if (c && t && strcmp(c, call_id) == 0 &&
        strcmp(t, "function_call_output") == 0)
      return json_object_get(it, "output");
  }
  return NULL;
}

static bool has(const char *s, const char *sub) {
  return s && strstr(s, sub);
}

Test(mcp, everything_tools_are_listed_filtered_and_called) {
  const char *a = agent(
      everything(", \"allowed_tools\": [\"echo\", \"get-sum\", \"get-env\"], "
                 "\"blocked_tools\": [\"get-env\"]"));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": ["
             "{\"name\": \"echo\", \"call_id\": \"c1\", \"arguments\": "
             "{\"message\": \"hi there\"}},"
             "{\"name\": \"get-sum\", \"call_id\": \"c2\", \"arguments\": "
             "{\"a\": 2, \"b\": 3}}]},"
             " {\"text\": \"done\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  size_t at;
  cr_expect(offers(f.reqs, 0, "echo", &at));
  cr_expect(offers(f.reqs, 0, "get-sum", NULL));
  cr_expect(!offers(f.reqs, 0, "get-env", NULL), "blocked");
  cr_expect(!offers(f.reqs, 0, "get-tiny-image", NULL), "not allowed");
  json_t *t = json_array_get(
      json_object_get(json_object_get(json_array_get(f.reqs, 0), "body"),
                      "tools"),
      at);
  cr_expect_str_eq(json_string_value(json_object_get(t, "description")),
                   "Echoes back the input string");
  cr_expect(json_is_object(json_object_get(
                json_object_get(json_object_get(t, "parameters"), "properties"),
                "message")),
            "the server's input schema");
  cr_expect_str_eq(test_call_output(f.reqs, 1, "c1"), "Echo: hi there");
  cr_expect(has(test_call_output(f.reqs, 1, "c2"), "5"), "%s",
            test_call_output(f.reqs, 1, "c2"));
  fixture_free(&f);
}

Test(mcp, everything_error_result_and_structured_content_reach_the_model) {
  const char *a = agent(everything(", \"use_structured_content\": true"));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": ["
             "{\"name\": \"get-sum\", \"call_id\": \"e1\", \"arguments\": "
             "{\"a\": \"x\", \"b\": 2}},"
             "{\"name\": \"get-structured-content\", \"call_id\": \"s1\", "
             "\"arguments\": {\"location\": \"Chicago\"}},"
             "{\"name\": \"get-tiny-image\", \"call_id\": \"i1\", "
             "\"arguments\": {}}]},"
             " {\"text\": \"done\"}]");
  cr_expect_eq(f.out.status, 0, "an error result does not fail the run: %s",
               f.out.err);
  const char *e1 = test_call_output(f.reqs, 1, "e1");
  cr_expect(has(e1, "Input validation error"),
            "isError as the server said "
            "it: %s",
            e1);
  json_error_t je;
  json_t *sc = json_loads(test_call_output(f.reqs, 1, "s1"), 0, &je);
  cr_expect(json_is_number(json_object_get(sc, "temperature")),
            "structuredContent as JSON: %s", test_call_output(f.reqs, 1, "s1"));
  json_decref(sc);
  /* Text and an image: input parts, the image as a data URL. */
  json_t *img = output_of(f.reqs, 1, "i1");
  cr_assert(json_is_array(img), "parts");
  bool text = false, image = false;
  size_t i;
  json_t *part;
  json_array_foreach(img, i, part) {
    const char *t = json_string_value(json_object_get(part, "type"));
    const char *u = json_string_value(json_object_get(part, "image_url"));
    text = text || (t && strcmp(t, "input_text") == 0);
    image = image || (t && strcmp(t, "input_image") == 0 && u &&
                      strncmp(u, "data:image/png;base64,", 22) == 0);
  }
  cr_expect(text && image, "a text part and a data URL image");
  fixture_free(&f);
}

Test(mcp, everything_call_times_out_and_the_server_goes_on) {
  const char *a = agent(everything(", \"client_session_timeout_seconds\": 3"));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": [{\"name\": "
             "\"trigger-long-running-operation\", \"call_id\": \"t1\", "
             "\"arguments\": {\"duration\": 30, \"steps\": 5}}]},"
             " {\"tool_calls\": [{\"name\": \"echo\", \"call_id\": \"t2\", "
             "\"arguments\": {\"message\": \"still here\"}}]},"
             " {\"text\": \"done\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect(f.out.secs < 25, "took %.1f s", f.out.secs);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "t1"),
                   "An error occurred while running the tool. Please try "
                   "again. Error: Error invoking MCP tool "
                   "trigger-long-running-operation on server 'everything': "
                   "MCP server \"everything\" did not answer tools/call "
                   "within 3 s");
  cr_expect_str_eq(test_call_output(f.reqs, 2, "t2"), "Echo: still here");
  fixture_free(&f);
}

Test(mcp, require_approval_pauses_the_run) {
  const char *a = agent(everything(", \"require_approval\": {\"always\": "
                                   "{\"tool_names\": [\"echo\"]}}"));
  struct test_model_server srv;
  test_model_server_start(&srv,
                          "[{\"tool_calls\": [{\"name\": \"get-sum\", "
                          "\"call_id\": \"n1\", \"arguments\": {\"a\": 1, "
                          "\"b\": 1}}]},"
                          " {\"tool_calls\": [{\"name\": \"echo\", "
                          "\"call_id\": \"y1\", \"arguments\": {\"message\": "
                          "\"x\"}}]},"
                          " {\"text\": \"approved and done\"}]",
                          NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "go", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "echo waits for approval: %s", r.err);
  /* "sbx: run ID is waiting for approval" */
  const char *p = strstr(r.err, "sbx: run ");
  cr_assert_not_null(p, "%s", r.err);
  p += strlen("sbx: run ");
  char *rs = strndup(p, strcspn(p, " \n"));
  sbx_run_free(&r);
  const char *ok[] = {"approve", "--state-dir", state, rs, "y1", NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  /* The resumed run starts the server again for the approved call. */
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "approved and done\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 3);
  cr_expect(has(test_call_output(reqs, 1, "n1"), "2"),
            "get-sum ran without asking");
  cr_expect_str_eq(test_call_output(reqs, 2, "y1"), "Echo: x");
  json_decref(reqs);
  free(rs);
}

Test(mcp, filesystem_server_reads_within_its_root_only) {
  char root[128], servers[1024], script[1024];
  (void)snprintf(root, sizeof(root), "%s/files", dir);
  cr_assert_eq(mkdir(root, 0755), 0);
  test_write_file(root, "hello.txt", "hello from fs\n");
  (void)snprintf(servers, sizeof(servers),
                 "[{\"name\": \"fs\", \"type\": \"stdio\", \"command\": "
                 "\"node\", \"args\": [\"" FILESYSTEM "\", \"%s\"], "
                 "\"allowed_tools\": [\"read_text_file\", "
                 "\"list_directory\"]}]",
                 root);
  (void)snprintf(script, sizeof(script),
                 "[{\"tool_calls\": ["
                 "{\"name\": \"read_text_file\", \"call_id\": \"r1\", "
                 "\"arguments\": {\"path\": \"%s/hello.txt\"}},"
                 "{\"name\": \"read_text_file\", \"call_id\": \"r2\", "
                 "\"arguments\": {\"path\": \"/etc/passwd\"}},"
                 "{\"name\": \"list_directory\", \"call_id\": \"r3\", "
                 "\"arguments\": {\"path\": \"%s\"}}]},"
                 " {\"text\": \"done\"}]",
                 root, root);
  struct fixture f = {0};
  run_script(&f, agent(servers), script);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect(!offers(f.reqs, 0, "write_file", NULL), "not allowed");
  cr_expect_str_eq(test_call_output(f.reqs, 1, "r1"), "hello from fs\n");
  cr_expect(has(test_call_output(f.reqs, 1, "r2"), "Access denied"), "%s",
            test_call_output(f.reqs, 1, "r2"));
  cr_expect(has(test_call_output(f.reqs, 1, "r3"), "hello.txt"), "%s",
            test_call_output(f.reqs, 1, "r3"));
  /* The tool call's span names the server. */
  json_t *spans = test_jsonl_read(trace);
  size_t i, calls = 0;
  json_t *sp;
  json_array_foreach(spans, i, sp) {
    const char *name = json_string_value(json_object_get(sp, "name"));
    if (!name || strcmp(name, "sbx.tool_call") != 0)
      continue;
    calls++;
    json_t *v = test_otlp_attr(sp, "sbx.mcp.server");
    cr_expect_str_eq(json_string_value(json_object_get(v, "stringValue")),
                     "fs");
  }
  cr_expect_eq(calls, 3);
  json_decref(spans);
  fixture_free(&f);
}

/* The messages the fake server received (new array). */
static json_t *fake_messages(void) {
  json_t *all = json_array();
  FILE *fp = fopen(fake_log, "r");
  char line[65536];
  while (fp && fgets(line, sizeof(line), fp)) {
    json_error_t je;
    json_t *m = json_loads(line, 0, &je);
    if (m)
      json_array_append_new(all, m);
  }
  if (fp)
    fclose(fp);
  return all;
}

/* The first message with METHOD the fake server received (borrowed). */
static json_t *fake_find(json_t *msgs, const char *method) {
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    const char *mm = json_string_value(json_object_get(m, "method"));
    if (mm && strcmp(mm, method) == 0)
      return m;
  }
  return NULL;
}

Test(mcp, list_changed_refreshes_the_tools_and_a_hang_is_cancelled) {
  const char *a = agent(fake(", \"client_session_timeout_seconds\": 2"));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": ["
             "{\"name\": \"add\", \"call_id\": \"a1\", \"arguments\": "
             "{\"a\": 2, \"b\": 40}},"
             "{\"name\": \"grow\", \"call_id\": \"g1\", \"arguments\": {}}]},"
             " {\"tool_calls\": ["
             "{\"name\": \"extra\", \"call_id\": \"x1\", \"arguments\": {}},"
             "{\"name\": \"hang\", \"call_id\": \"h1\", \"arguments\": {}}]},"
             " {\"text\": \"done\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 3);
  cr_expect(offers(f.reqs, 0, "hang", NULL), "the second page was listed");
  cr_expect(!offers(f.reqs, 0, "extra", NULL));
  cr_expect(offers(f.reqs, 1, "extra", NULL), "listed again after "
                                              "list_changed");
  cr_expect_str_eq(test_call_output(f.reqs, 1, "a1"), "42",
                   "progress and the server's ping did not get in the way");
  cr_expect_str_eq(test_call_output(f.reqs, 2, "x1"), "extra ran");
  cr_expect(has(test_call_output(f.reqs, 2, "h1"), "did not answer tools/call "
                                                   "within 2 s"),
            "%s", test_call_output(f.reqs, 2, "h1"));
  json_t *msgs = fake_messages();
  json_t *init = fake_find(msgs, "initialize");
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(init, "params"), "protocolVersion")),
                   "2025-11-25");
  cr_expect_not_null(fake_find(msgs, "notifications/initialized"));
  /* The reply to the server's ping, and the cancellation of the hang. */
  bool pong = false;
  json_int_t hang_id = -1;
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    json_t *id = json_object_get(m, "id");
    if (json_is_string(id) && strcmp(json_string_value(id), "srv-1") == 0 &&
        json_object_get(m, "result"))
      pong = true;
    json_t *p = json_object_get(m, "params");
    const char *name = json_string_value(json_object_get(p, "name"));
    if (name && strcmp(name, "hang") == 0)
      hang_id = json_integer_value(id);
  }
  cr_expect(pong, "the server's ping was answered");
  json_t *cancel = fake_find(msgs, "notifications/cancelled");
  cr_expect_not_null(cancel);
  cr_expect_eq(json_integer_value(json_object_get(
                   json_object_get(cancel, "params"), "requestId")),
               hang_id);
  json_decref(msgs);
  fixture_free(&f);
}

Test(mcp, a_crashing_server_fails_its_calls_not_the_run) {
  const char *a = agent(fake(""));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": [{\"name\": \"crash\", \"call_id\": \"c1\", "
             "\"arguments\": {}}]},"
             " {\"tool_calls\": [{\"name\": \"add\", \"call_id\": \"c2\", "
             "\"arguments\": {\"a\": 1, \"b\": 1}}]},"
             " {\"text\": \"carried on\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "carried on\n");
  const char *c1 = test_call_output(f.reqs, 1, "c1");
  cr_expect(has(c1, "An error occurred while running the tool. Please try "
                    "again. Error: Error invoking MCP tool crash on server "
                    "'fake': MCP server \"fake\" is gone (it exited)"),
            "%s", c1);
  cr_expect(has(test_call_output(f.reqs, 2, "c2"), "is gone"), "%s",
            test_call_output(f.reqs, 2, "c2"));
  fixture_free(&f);
}

Test(mcp, an_oversized_message_fails_the_call) {
  const char *a = agent(fake(""));
  struct fixture f = {0};
  run_script(&f, a,
             "[{\"tool_calls\": [{\"name\": \"big\", \"call_id\": \"b1\", "
             "\"arguments\": {}}]},"
             " {\"text\": \"ok\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *b1 = test_call_output(f.reqs, 1, "b1");
  cr_expect(has(b1, "it sent a message over the size limit"), "%s", b1);
  fixture_free(&f);
}

Test(mcp, a_server_that_cannot_start_fails_the_run_with_its_name) {
  const char *a = agent("[{\"name\": \"ghost\", \"type\": \"stdio\", "
                        "\"command\": \"/nonexistent/mcp-server\"}]");
  struct fixture f = {0};
  run_script(&f, a, "[{\"text\": \"never\"}]");
  cr_expect_neq(f.out.status, 0);
  cr_expect(has(f.out.err, "MCP server \"ghost\""), "%s", f.out.err);
  cr_expect(has(f.out.err, "/nonexistent/mcp-server"), "%s", f.out.err);
  cr_expect_eq(json_array_size(f.reqs), 0, "the model was not asked");
  fixture_free(&f);
}

Test(mcp, a_tool_name_the_agent_has_already_is_refused) {
  char text[2048];
  (void)snprintf(text, sizeof(text),
                 "{\"name\": \"A\", \"capabilities\": [], \"tools\": "
                 "[{\"type\": \"command\", \"name\": \"add\", \"command\": "
                 "[\"true\"]}], \"mcp_servers\": %s}",
                 fake(""));
  const char *a = test_write_file(dir, "a.json", text);
  struct fixture f = {0};
  run_script(&f, a, "[{\"text\": \"never\"}]");
  cr_expect_eq(f.out.status, 2, "a configuration error: %s", f.out.err);
  cr_expect(has(f.out.err, "an MCP server lists tool \"add\", which the "
                           "agent has already"),
            "%s", f.out.err);
  cr_expect_eq(json_array_size(f.reqs), 0);
  fixture_free(&f);
}

/* ---- Streamable HTTP ---------------------------------------------------- */

Test(mcp, everything_over_streamable_http) {
  const char *argv[] = {"python3", FAKE, "--run-http", EVERYTHING, NULL};
  pid_t pid = 0;
  int port = test_pyserver_start(argv, "server-everything over HTTP", &pid);
  char servers[512];
  (void)snprintf(servers, sizeof(servers),
                 "[{\"name\": \"web\", \"type\": \"streamable_http\", "
                 "\"url\": \"http://127.0.0.1:%d/mcp\", \"allowed_tools\": "
                 "[\"echo\", \"get-sum\"]}]",
                 port);
  struct fixture f = {0};
  run_script(&f, agent(servers),
             "[{\"tool_calls\": ["
             "{\"name\": \"echo\", \"call_id\": \"h1\", \"arguments\": "
             "{\"message\": \"over http\"}},"
             "{\"name\": \"get-sum\", \"call_id\": \"h2\", \"arguments\": "
             "{\"a\": \"x\", \"b\": 1}}]},"
             " {\"text\": \"done\"}]");
  test_pyserver_stop(&pid);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect(offers(f.reqs, 0, "echo", NULL));
  cr_expect(!offers(f.reqs, 0, "get-env", NULL));
  cr_expect_str_eq(test_call_output(f.reqs, 1, "h1"), "Echo: over http");
  cr_expect(has(test_call_output(f.reqs, 1, "h2"), "Input validation error"),
            "%s", test_call_output(f.reqs, 1, "h2"));
  fixture_free(&f);
}

Test(mcp, streamable_http_headers_session_list_changed_and_cancel) {
  const char *argv[] = {"python3", FAKE, fake_log, "--http", NULL};
  pid_t pid = 0;
  int port = test_pyserver_start(argv, "mcp_fake.py --http", &pid);
  char servers[512];
  (void)snprintf(servers, sizeof(servers),
                 "[{\"name\": \"fake\", \"type\": \"streamable_http\", "
                 "\"url\": \"http://127.0.0.1:%d/mcp\", \"headers\": "
                 "{\"X-Test\": \"secret-1\"}, "
                 "\"client_session_timeout_seconds\": 2}]",
                 port);
  struct fixture f = {0};
  run_script(&f, agent(servers),
             "[{\"tool_calls\": ["
             "{\"name\": \"add\", \"call_id\": \"a1\", \"arguments\": "
             "{\"a\": 1, \"b\": 2}},"
             "{\"name\": \"grow\", \"call_id\": \"g1\", \"arguments\": "
             "{}}]},"
             " {\"tool_calls\": ["
             "{\"name\": \"extra\", \"call_id\": \"x1\", \"arguments\": "
             "{}},"
             "{\"name\": \"hang\", \"call_id\": \"h1\", \"arguments\": "
             "{}}]},"
             " {\"text\": \"done\"}]");
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "a1"), "3");
  cr_expect(!offers(f.reqs, 0, "extra", NULL));
  cr_expect(offers(f.reqs, 1, "extra", NULL), "list_changed on the GET stream");
  cr_expect_str_eq(test_call_output(f.reqs, 2, "x1"), "extra ran");
  cr_expect(has(test_call_output(f.reqs, 2, "h1"), "did not answer tools/call "
                                                   "within 2 s"),
            "%s", test_call_output(f.reqs, 2, "h1"));
  test_pyserver_stop(&pid);
  json_t *msgs = fake_messages();
  size_t i;
  json_t *m;
  bool deleted = false, pong = false;
  json_array_foreach(msgs, i, m) {
    json_t *h = json_object_get(m, "headers");
    cr_expect_str_eq(json_string_value(json_object_get(h, "x-test")),
                     "secret-1", "the agent file's headers on every request");
    const char *method = json_string_value(json_object_get(m, "method"));
    const char *verb = json_string_value(json_object_get(m, "http"));
    if (method && strcmp(method, "initialize") == 0) {
      cr_expect_null(json_object_get(h, "mcp-session-id"));
      cr_expect(has(json_string_value(json_object_get(h, "accept")),
                    "text/event-stream"));
      continue;
    }
    cr_expect_str_eq(json_string_value(json_object_get(h, "mcp-session-id")),
                     "sess-1", "%s", method ? method : "a reply");
    cr_expect_str_eq(
        json_string_value(json_object_get(h, "mcp-protocol-version")),
        "2025-06-18");
    deleted = deleted || (verb && strcmp(verb, "DELETE") == 0);
    json_t *id = json_object_get(m, "id");
    pong = pong ||
           (json_is_string(id) && strcmp(json_string_value(id), "srv-1") == 0);
  }
  cr_expect(pong, "the server's ping was answered with a POST");
  json_t *get = NULL;
  json_array_foreach(msgs, i, m) {
    const char *verb = json_string_value(json_object_get(m, "http"));
    if (verb && strcmp(verb, "GET") == 0)
      get = m;
  }
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(get, "headers"), "accept")),
                   "text/event-stream", "the GET stream was opened");
  cr_expect(deleted, "the session was ended with a DELETE");
  cr_expect_not_null(fake_find(msgs, "notifications/initialized"));
  cr_expect_not_null(fake_find(msgs, "notifications/cancelled"));
  json_decref(msgs);
  fixture_free(&f);
}

/* A reply that comes on the server's GET stream while the request's own
 * stream ended and is being resumed is the request's reply: the call ends
 * with it, not with the call's timeout. */
Test(mcp, a_reply_on_the_get_stream_ends_a_resumed_call) {
  const char *argv[] = {"python3", FAKE, fake_log, "--http", NULL};
  pid_t pid = 0;
  int port = test_pyserver_start(argv, "mcp_fake.py --http", &pid);
  char servers[512];
  (void)snprintf(servers, sizeof(servers),
                 "[{\"name\": \"fake\", \"type\": \"streamable_http\", "
                 "\"url\": \"http://127.0.0.1:%d/mcp\", "
                 "\"client_session_timeout_seconds\": 20}]",
                 port);
  struct fixture f = {0};
  run_script(&f, agent(servers),
             "[{\"tool_calls\": [{\"name\": \"elsewhere\", \"call_id\": "
             "\"e1\", \"arguments\": {}}]},"
             " {\"text\": \"ok\"}]");
  test_pyserver_stop(&pid);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "e1"), "came elsewhere");
  json_t *msgs = fake_messages();
  size_t i;
  json_t *m;
  bool resumed = false;
  json_array_foreach(msgs, i, m) {
    resumed = resumed || json_is_true(json_object_get(m, "resumed"));
  }
  cr_expect(resumed, "the call's stream was resumed with Last-Event-ID");
  json_decref(msgs);
  fixture_free(&f);
}

Test(mcp, an_oversized_http_message_fails_the_call) {
  const char *argv[] = {"python3", FAKE, fake_log, "--http", NULL};
  pid_t pid = 0;
  int port = test_pyserver_start(argv, "mcp_fake.py --http", &pid);
  char servers[512];
  (void)snprintf(servers, sizeof(servers),
                 "[{\"name\": \"fake\", \"type\": \"streamable_http\", "
                 "\"url\": \"http://127.0.0.1:%d/mcp\"}]",
                 port);
  struct fixture f = {0};
  run_script(&f, agent(servers),
             "[{\"tool_calls\": [{\"name\": \"big\", \"call_id\": \"b1\", "
             "\"arguments\": {}}]},"
             " {\"tool_calls\": [{\"name\": \"add\", \"call_id\": \"b2\", "
             "\"arguments\": {\"a\": 2, \"b\": 2}}]},"
             " {\"text\": \"ok\"}]");
  test_pyserver_stop(&pid);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *b1 = test_call_output(f.reqs, 1, "b1");
  cr_expect(has(b1, "MCP server \"fake\" sent a message over 4194304 bytes"),
            "%s", b1);
  cr_expect_str_eq(test_call_output(f.reqs, 2, "b2"), "4",
                   "one oversized reply does not end an HTTP session");
  fixture_free(&f);
}
