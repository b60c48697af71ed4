/* sbx run speaks the Agents SDK's language: each test runs the real sbx
 * against the scripted model server and compares what the server received
 * with what @openai/agents 0.20.0 sends for the same agent (its texts byte
 * for byte where they are fixed), and what tools did with what the SDK's
 * tools do. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-sdk-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(run_sdk, .init = setup, .fini = teardown, .timeout = 120);

static const char *agent(const char *json) {
  static char path[256];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", json));
  return path;
}

struct fixture {
  struct test_model_server srv;
  struct sbx_run_out out;
  json_t *reqs;
};

/* Runs AGENT_JSON on SCRIPT with the prompt "Do the task.". */
static void run_script(struct fixture *f, const char *script,
                       const char *agent_json) {
  test_model_server_start(&f->srv, script, NULL);
  const char *argv[8];
  size_t n = 0;
  argv[n++] = "run";
  const char *backend = getenv("SBX_TEST_BACKEND");
  if (backend && *backend) {
    argv[n++] = "--backend";
    argv[n++] = backend;
  }
  argv[n++] = agent(agent_json);
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

static json_t *body(struct fixture *f, size_t n) {
  return json_object_get(json_array_get(f->reqs, n), "body");
}

/* Expects J to equal the JSON text WANT. */
static void expect_json(json_t *j, const char *want, const char *what) {
  json_error_t je;
  json_t *w = json_loads(want, JSON_DECODE_ANY, &je);
  cr_assert_not_null(w, "bad test JSON for %s: %s", what, je.text);
  char *got = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  cr_expect(json_equal(j, w), "%s: got %s, want %s", what,
            got ? got : "(nothing)", want);
  free(got);
  json_decref(w);
}

/* The tool NAME in request N's tools. */
static json_t *tool(struct fixture *f, size_t n, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(json_object_get(body(f, n), "tools"), i, t) {
    const char *tn = json_string_value(json_object_get(t, "name"));
    if (tn && strcmp(tn, name) == 0)
      return t;
  }
  return NULL;
}

/* The content of the chat "tool" message answering CALL_ID in request N. */
static const char *chat_output(struct fixture *f, size_t n,
                               const char *call_id) {
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(body(f, n), "messages"), i, m) {
    const char *id = json_string_value(json_object_get(m, "tool_call_id"));
    if (id && strcmp(id, call_id) == 0)
      return json_string_value(json_object_get(m, "content"));
  }
  return NULL;
}

/* What the SDK sent for an agent without model or model_settings, with
 * this manifest: captured from @openai/agents 0.20.0 (UnixLocal). */
static const char sdk_agent[] =
    "{\"name\": \"Tester\", \"instructions\": \"Be brief.\",\n"
    " \"default_manifest\": {\"entries\": {\n"
    "   \"notes.txt\": {\"type\": \"file\", \"content\": "
    "\"alpha\\nbeta\\n\"},\n"
    "   \"README.md\": {\"type\": \"file\", \"content\": \"hi\"},\n"
    "   \"img/dot.png\": {\"type\": \"file\", \"content\": \"x\"},\n"
    "   \"Zeta.txt\": {\"type\": \"file\", \"content\": \"z\"},\n"
    "   \"b.txt\": {\"type\": \"file\", \"content\": \"b\"},\n"
    "   \"src\": {\"type\": \"dir\", \"children\": {\n"
    "     \"main.c\": {\"type\": \"file\", \"content\": \"\"},\n"
    "     \"lib\": {\"type\": \"dir\", \"children\": {\n"
    "       \"a.c\": {\"type\": \"file\", \"content\": \"\"}}}}}}}}\n";

static const char sdk_instructions_tail[] =
    "# Agent instructions\n\nBe brief.\n\n"
    "# Sandbox capability instructions\n\n"
    "When using the shell:\n"
    "- Use `exec_command` for shell execution.\n"
    "- If available, use `write_stdin` to interact with or poll running "
    "sessions.\n"
    "- To interrupt a long-running process via `write_stdin`, start it with "
    "`tty=true` and send Ctrl-C (`\\u0003`).\n"
    "- Prefer `rg` and `rg --files` for text/file discovery when available.\n"
    "- Avoid using Python scripts just to print large file chunks.\n\n"
    "# Filesystem\n"
    "You have access to a container with a filesystem. The filesystem layout "
    "is:\n\n"
    "/workspace\n"
    "b.txt # /workspace/b.txt\n"
    "dot.png # /workspace/img/dot.png\n"
    "notes.txt # /workspace/notes.txt\n"
    "README.md # /workspace/README.md\n"
    "src/ # /workspace/src\n"
    "  lib/ # /workspace/src/lib\n"
    "    a.c # /workspace/src/lib/a.c\n"
    "  main.c # /workspace/src/main.c\n"
    "Zeta.txt # /workspace/Zeta.txt";

static const char sdk_exec_command_params[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"cmd\":{\"type\":\"string\",\"description\":\"Shell command to "
    "execute.\"},"
    "\"workdir\":{\"description\":\"Optional working directory to run the "
    "command in; defaults to the turn cwd.\",\"anyOf\":[{\"type\":\"string\","
    "\"description\":\"Optional working directory to run the command in; "
    "defaults to the turn cwd.\"},{\"type\":\"null\"}]},"
    "\"shell\":{\"description\":\"Shell binary to launch. Defaults to the "
    "user's default shell.\",\"anyOf\":[{\"type\":\"string\",\"description\":"
    "\"Shell binary to launch. Defaults to the user's default shell.\"},"
    "{\"type\":\"null\"}]},"
    "\"login\":{\"type\":\"boolean\",\"description\":\"Whether to run the "
    "shell with -l/-i semantics. Defaults to true.\"},"
    "\"tty\":{\"type\":\"boolean\",\"description\":\"Whether to allocate a "
    "TTY for the command. Defaults to false (plain pipes); set to true to open "
    "a PTY and access TTY process.\"},"
    "\"yield_time_ms\":{\"type\":\"number\",\"description\":\"How long to wait "
    "(in milliseconds) for output before yielding.\"},"
    "\"max_output_tokens\":{\"description\":\"Maximum number of tokens to "
    "return. Excess output will be truncated.\",\"anyOf\":[{\"type\":"
    "\"number\",\"description\":\"Maximum number of tokens to return. Excess "
    "output will be truncated.\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"cmd\",\"workdir\",\"shell\",\"login\",\"tty\","
    "\"yield_time_ms\",\"max_output_tokens\"],\"additionalProperties\":false,"
    "\"$schema\":\"http://json-schema.org/draft-07/schema#\"}";

static const char sdk_write_stdin_params[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"session_id\":{\"type\":\"number\",\"description\":\"Identifier of the "
    "running unified exec session.\"},"
    "\"chars\":{\"type\":\"string\",\"description\":\"Bytes to write to stdin "
    "(may be empty to poll).\"},"
    "\"yield_time_ms\":{\"type\":\"number\",\"description\":\"How long to wait "
    "(in milliseconds) for output before yielding.\"},"
    "\"max_output_tokens\":{\"description\":\"Maximum number of tokens to "
    "return. Excess output will be truncated.\",\"anyOf\":[{\"type\":"
    "\"number\",\"description\":\"Maximum number of tokens to return. Excess "
    "output will be truncated.\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"session_id\",\"chars\",\"yield_time_ms\","
    "\"max_output_tokens\"],\"additionalProperties\":false,"
    "\"$schema\":\"http://json-schema.org/draft-07/schema#\"}";

Test(run_sdk, first_request_is_the_sdks) {
  struct fixture f = {0};
  run_script(
      &f,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
      "\"c1\", \"arguments\": {\"cmd\": \"echo \\\"$USER $TMPDIR\\\"\"}}]},"
      " {\"text\": \"done\"}]",
      sdk_agent);
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  json_t *b = body(&f, 0);

  /* The default model's settings; storage left to the server. */
  cr_expect_str_eq(json_string_value(json_object_get(b, "model")),
                   "gpt-5.6-luna");
  expect_json(json_object_get(b, "reasoning"), "{\"effort\": \"none\"}",
              "reasoning");
  expect_json(json_object_get(b, "text"), "{\"verbosity\": \"low\"}", "text");
  cr_expect_null(json_object_get(b, "store"), "store is not sent");
  expect_json(json_object_get(b, "include"), "[]", "include");

  /* The prompt is a plain string. */
  expect_json(json_object_get(b, "input"),
              "[{\"role\": \"user\", \"content\": \"Do the task.\"}]", "input");

  /* The instructions from "# Agent instructions" on, byte for byte. */
  const char *ins = json_string_value(json_object_get(b, "instructions"));
  cr_assert_not_null(ins);
  const char *tail = strstr(ins, "# Agent instructions");
  cr_assert_not_null(tail, "%s", ins);
  cr_expect_str_eq(tail, sdk_instructions_tail);

  /* The shell tools' schemas. */
  json_t *ec = tool(&f, 0, "exec_command");
  json_t *ws = tool(&f, 0, "write_stdin");
  cr_assert(ec && ws);
  _cleanup_free_ char *ecs =
      json_dumps(json_object_get(ec, "parameters"), JSON_COMPACT);
  cr_expect_str_eq(ecs, sdk_exec_command_params, "key order included");
  _cleanup_free_ char *wss =
      json_dumps(json_object_get(ws, "parameters"), JSON_COMPACT);
  cr_expect_str_eq(wss, sdk_write_stdin_params);

  /* The call's output item says it completed; the shell's environment. */
  json_t *input = json_object_get(body(&f, 1), "input");
  json_t *out = json_array_get(input, json_array_size(input) - 1);
  cr_expect_str_eq(json_string_value(json_object_get(out, "type")),
                   "function_call_output");
  cr_expect_str_eq(json_string_value(json_object_get(out, "status")),
                   "completed");
  const char *o = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "\nOutput:\nsandbox /tmp\n") != NULL, "%s", o);
  fixture_free(&f);
}

/* The Python SDK's names, mapped as OpenAIResponsesModel maps them. */
Test(run_sdk, model_settings_reach_the_responses_api) {
  struct fixture f = {0};
  run_script(
      &f, "[{\"text\": \"done\"}]",
      "{\"name\": \"T\", \"model\": \"gpt-5.4\", \"model_settings\": {"
      "\"temperature\": 0.5, \"top_p\": 0.9, \"max_tokens\": 300, "
      "\"truncation\": \"auto\", \"verbosity\": \"high\", \"store\": false, "
      "\"metadata\": {\"team\": \"x\"}, \"reasoning\": {\"effort\": \"xhigh\", "
      "\"summary\": \"auto\"}, \"parallel_tool_calls\": false, "
      "\"tool_choice\": \"auto\", \"response_include\": "
      "[\"reasoning.encrypted_content\"], \"prompt_cache_retention\": \"24h\", "
      "\"extra_headers\": {\"X-Team\": \"blue\"}, \"extra_query\": "
      "{\"tier\": \"flex\"}, \"extra_body\": {\"service_tier\": \"flex\"}}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *b = body(&f, 0);
  cr_expect_float_eq(json_number_value(json_object_get(b, "temperature")), 0.5,
                     1e-9);
  cr_expect_float_eq(json_number_value(json_object_get(b, "top_p")), 0.9, 1e-9);
  cr_expect_eq(json_integer_value(json_object_get(b, "max_output_tokens")),
               300);
  cr_expect_null(json_object_get(b, "max_tokens"));
  cr_expect_str_eq(json_string_value(json_object_get(b, "truncation")), "auto");
  expect_json(json_object_get(b, "text"), "{\"verbosity\": \"high\"}",
              "the agent's settings replace the model's defaults");
  cr_expect(json_is_false(json_object_get(b, "store")));
  expect_json(json_object_get(b, "metadata"), "{\"team\": \"x\"}", "metadata");
  expect_json(json_object_get(b, "reasoning"),
              "{\"effort\": \"xhigh\", \"summary\": \"auto\"}", "reasoning");
  cr_expect(json_is_false(json_object_get(b, "parallel_tool_calls")));
  cr_expect_str_eq(json_string_value(json_object_get(b, "tool_choice")),
                   "auto");
  expect_json(json_object_get(b, "include"),
              "[\"reasoning.encrypted_content\"]", "include");
  cr_expect_str_eq(
      json_string_value(json_object_get(b, "prompt_cache_retention")), "24h");
  cr_expect_str_eq(json_string_value(json_object_get(b, "service_tier")),
                   "flex");
  json_t *r0 = json_array_get(f.reqs, 0);
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(r0, "headers"), "x-team")),
                   "blue");
  cr_expect_str_eq(json_string_value(json_object_get(r0, "path")),
                   "/v1/responses?tier=flex");
  fixture_free(&f);
}

/* The same names on Chat Completions, as OpenAIChatCompletionsModel maps
 * them; what that API cannot carry is refused before any request. */
Test(run_sdk, model_settings_reach_chat_completions) {
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"api\": "
             "\"chat_completions\", \"model_settings\": {"
             "\"max_tokens\": 300, \"frequency_penalty\": 0.5, "
             "\"presence_penalty\": 0.25, \"verbosity\": \"low\", "
             "\"reasoning\": {\"effort\": \"minimal\"}, \"top_logprobs\": 2, "
             "\"store\": true}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *b = body(&f, 0);
  cr_expect_eq(json_integer_value(json_object_get(b, "max_tokens")), 300);
  cr_expect_float_eq(json_number_value(json_object_get(b, "frequency_penalty")),
                     0.5, 1e-9);
  cr_expect_float_eq(json_number_value(json_object_get(b, "presence_penalty")),
                     0.25, 1e-9);
  cr_expect_str_eq(json_string_value(json_object_get(b, "verbosity")), "low");
  cr_expect_str_eq(json_string_value(json_object_get(b, "reasoning_effort")),
                   "minimal");
  cr_expect_eq(json_integer_value(json_object_get(b, "top_logprobs")), 2);
  cr_expect(json_is_true(json_object_get(b, "logprobs")));
  cr_expect(json_is_true(json_object_get(b, "store")));
  fixture_free(&f);

  struct fixture g = {0};
  run_script(&g, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"api\": "
             "\"chat_completions\", \"model_settings\": {\"truncation\": "
             "\"auto\"}}");
  cr_expect_eq(g.out.status, 2, "stderr: %s", g.out.err);
  cr_expect(strstr(g.out.err, "\"model_settings.truncation\" cannot be sent "
                              "to the chat_completions API") != NULL,
            "%s", g.out.err);
  cr_expect_eq(json_array_size(g.reqs), 0, "nothing was sent");
  fixture_free(&g);
}

/* The hosted tool's create_file gives a file without a final newline, and
 * its update_file keeps a missing one, as the SDK's applyDiff does. */
Test(run_sdk, hosted_apply_patch_has_the_sdks_line_ends) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"apply_patch\": {\"type\": \"create_file\", \"path\": "
             "\"new.txt\", \"diff\": \"+alpha\\n+beta\\n\", \"call_id\": "
             "\"p1\"}},"
             " {\"apply_patch\": {\"type\": \"update_file\", \"path\": "
             "\"README.md\", \"diff\": \"@@\\n-hi\\n+ho\\n\", \"call_id\": "
             "\"p2\"}},"
             " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c3\", \"arguments\": {\"cmd\": \"cat new.txt; echo '|'; cat "
             "README.md; echo '|'\"}}]},"
             " {\"text\": \"done\"}]",
             sdk_agent);
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *o = test_call_output(f.reqs, -1, "c3");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "\nOutput:\nalpha\nbeta|\nho|\n") != NULL, "%s", o);
  fixture_free(&f);
}

/* A "*** Begin Patch" text gets Codex's line ends: the update of a file
 * without a final newline gets one, and a last line replaced by an empty
 * one stays; context ending in Unicode whitespace matches. */
Test(run_sdk, begin_patch_text_has_codexs_line_ends) {
  struct fixture f = {0};
  run_script(
      &f,
      "[{\"tool_calls\": [{\"name\": \"apply_patch\", \"call_id\": \"p1\", "
      "\"arguments\": {\"patch\": \"*** Begin Patch\\n*** Update File: "
      "a.txt\\n@@\\n a\\n-b\\n+\\n*** Update File: u.txt\\n@@\\n "
      "foo\\n-bar\\n+baz\\n*** End Patch\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
      "\"arguments\": {\"cmd\": \"od -An -c a.txt; cat u.txt\"}}]},"
      " {\"text\": \"done\"}]",
      "{\"name\": \"T\", \"model\": \"m\", \"api\": \"chat_completions\",\n"
      " \"default_manifest\": {\"entries\": {\n"
      "   \"a.txt\": {\"type\": \"file\", \"content\": \"a\\nb\"},\n"
      "   \"u.txt\": {\"type\": \"file\", \"content\": "
      "\"foo\\u2028\\nbar\\n\"}}}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  /* The SDK's text transport's tools. */
  json_t *tools = json_object_get(body(&f, 0), "tools");
  cr_assert_eq(json_array_size(tools), 4);
  json_t *vi = json_object_get(json_array_get(tools, 0), "function");
  cr_expect_str_eq(json_string_value(json_object_get(vi, "description")),
                   "Returns an image from a path in the sandbox workspace or "
                   "an explicitly granted sandbox path as a data URL or "
                   "reference string.");
  json_t *ap = json_object_get(json_array_get(tools, 1), "function");
  cr_expect_str_eq(json_string_value(json_object_get(ap, "description")),
                   "Applies a create, update, move, or delete file patch in "
                   "the sandbox workspace. Accepts a freeform patch string or "
                   "structured apply_patch operations.");
  cr_expect(json_is_false(json_object_get(ap, "strict")));
  const char *p = chat_output(&f, 1, "p1");
  cr_assert_not_null(p);
  cr_expect_str_eq(p, "Patch applied.\nPatch applied.",
                   "the SDK's, one a file");
  const char *o = chat_output(&f, 2, "c2");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "a  \\n  \\n\n") != NULL, "a, an empty line: %s", o);
  cr_expect(strstr(o, "baz\n") != NULL, "%s", o);
  fixture_free(&f);
}

/* An output_type that is not an object goes wrapped, as the Python SDK's
 * AgentOutputSchema wraps it; the answer is unwrapped. */
Test(run_sdk, output_type_not_an_object_is_wrapped) {
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"{\\\"response\\\": \\\"forty-two\\\"}\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"output_type\": "
             "{\"type\": \"string\"}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_expect_str_eq(f.out.out, "forty-two\n");
  expect_json(json_object_get(json_object_get(body(&f, 0), "text"), "format"),
              "{\"type\": \"json_schema\", \"name\": \"final_output\", "
              "\"schema\": {\"type\": \"object\", \"properties\": "
              "{\"response\": {\"type\": \"string\"}}, \"required\": "
              "[\"response\"], \"additionalProperties\": false}, "
              "\"strict\": true}",
              "text.format");
  fixture_free(&f);
}

/* A reusable prompt goes on the wire as the SDK sends it; without a model
 * of the agent's own the prompt's model applies (no "model", no default
 * settings), and a model given is sent. */
Test(run_sdk, prompt_reference_is_sent) {
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"prompt\": {\"id\": \"pmpt_1\", "
             "\"version\": \"2\", \"variables\": {\"city\": \"Paris\"}}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *b = body(&f, 0);
  expect_json(json_object_get(b, "prompt"),
              "{\"id\": \"pmpt_1\", \"version\": \"2\", \"variables\": "
              "{\"city\": \"Paris\"}}",
              "prompt");
  cr_expect_null(json_object_get(b, "model"), "the prompt's model applies");
  cr_expect_null(json_object_get(b, "reasoning"), "no default settings");
  cr_expect_null(json_object_get(b, "text"), "no default settings");
  fixture_free(&f);
  f = (struct fixture){0};

  run_script(&f, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"gpt-5.4\", \"prompt\": "
             "{\"id\": \"pmpt_1\"}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  b = body(&f, 0);
  cr_expect_str_eq(json_string_value(json_object_get(b, "model")), "gpt-5.4");
  expect_json(json_object_get(b, "prompt"),
              "{\"id\": \"pmpt_1\", \"variables\": {}}", "prompt");
  fixture_free(&f);
}

/* An agent's own key, by the name of its variable: sent as its bearer
 * token; unset, the run fails before any request, saying which. */
Test(run_sdk, api_key_env_names_the_agents_key) {
  static const char a[] = "{\"name\": \"T\", \"model\": \"m\", "
                          "\"api_key_env\": \"SBX_SDK_TEST_KEY\"}";
  struct fixture f = {0};
  unsetenv("SBX_SDK_TEST_KEY");
  run_script(&f, "[{\"text\": \"done\"}]", a);
  cr_expect_eq(f.out.status, 2, "a configuration error: %s", f.out.err);
  cr_expect(strstr(f.out.err, "agent \"T\": its api_key_env SBX_SDK_TEST_KEY "
                              "is not set") != NULL,
            "%s", f.out.err);
  cr_expect_eq(json_array_size(f.reqs), 0, "nothing was sent");
  fixture_free(&f);

  /* The server answers 401 to any other key than the agent's. */
  struct fixture g = {0};
  setenv("SBX_SDK_TEST_KEY", "key-of-t", 1);
  test_model_server_start(&g.srv, "[{\"text\": \"done\"}]", "key-of-t");
  const char *argv[] = {"run", agent(a), "Do the task.", NULL};
  sbx_run(&g.out, g.srv.base_url, argv);
  unsetenv("SBX_SDK_TEST_KEY");
  g.reqs = test_model_server_requests(&g.srv);
  test_model_server_stop(&g.srv);
  cr_expect_eq(g.out.status, 0, "stderr: %s", g.out.err);
  cr_expect_str_eq(g.out.out, "done\n");
  fixture_free(&g);
}

/* Once the agent has called a tool its tool_choice is not sent again (but
 * "none"), as the SDK's reset_tool_choice does: a forced call is not forced
 * for ever. */
Test(run_sdk, tool_choice_is_reset_after_a_tool_call) {
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"true\"}}]},"
             " {\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"model_settings\": "
             "{\"tool_choice\": \"required\"}}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  cr_expect_str_eq(
      json_string_value(json_object_get(body(&f, 0), "tool_choice")),
      "required");
  cr_expect_null(json_object_get(body(&f, 1), "tool_choice"));
  fixture_free(&f);
}

/* A handoff is offered after the agent's other tools, with the SDKs'
 * description, trailing space included. */
Test(run_sdk, handoffs_come_last_with_the_sdks_description) {
  (void)test_write_file(dir, "helper.json", "{\"name\": \"helper\"}");
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"handoffs\": "
             "[\"helper.json\"]}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *tools = json_object_get(body(&f, 0), "tools");
  cr_assert_eq(json_array_size(tools), 5);
  json_t *h = json_array_get(tools, 4);
  cr_expect_str_eq(json_string_value(json_object_get(h, "name")),
                   "transfer_to_helper");
  cr_expect_str_eq(json_string_value(json_object_get(h, "description")),
                   "Handoff to the helper agent to handle the request. ");
  fixture_free(&f);
}

/* An agent used as a tool is offered as the SDKs' as_tool offers it: no
 * description unless given, the input schema as zod renders it. */
Test(run_sdk, agent_as_tool_is_the_sdks) {
  (void)test_write_file(dir, "helper.json", "{\"name\": \"helper\"}");
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             "{\"name\": \"T\", \"model\": \"m\", \"tools\": [{\"type\": "
             "\"agent_as_tool\", \"agent\": \"helper.json\"}]}");
  cr_assert_eq(f.out.status, 0, "stderr: %s", f.out.err);
  json_t *t = tool(&f, 0, "helper");
  cr_assert_not_null(t);
  cr_expect_str_eq(json_string_value(json_object_get(t, "description")), "");
  _cleanup_free_ char *p =
      json_dumps(json_object_get(t, "parameters"), JSON_COMPACT);
  cr_expect_str_eq(p, "{\"$schema\":\"http://json-schema.org/draft-07/"
                      "schema#\",\"type\":\"object\",\"properties\":{\"input\":"
                      "{\"type\":\"string\"}},\"required\":[\"input\"],"
                      "\"additionalProperties\":false}");
  fixture_free(&f);
}
