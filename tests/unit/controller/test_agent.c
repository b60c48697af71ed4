/* Each test runs in its own process (Criterion forks) inside a fresh temp
 * directory, so paths in messages are short and relative. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/errors.h"

static char tmpdir[] = "/tmp/sbx-test-agent-XXXXXX";

static void setup(void) {
  cr_assert_not_null(mkdtemp(tmpdir));
  cr_assert_eq(chdir(tmpdir), 0);
  cr_assert_eq(mkdir("agents", 0755), 0);
}

static int rm_one(const char *p, const struct stat *st, int type,
                  struct FTW *ftw) {
  (void)st;
  (void)type;
  (void)ftw;
  return remove(p);
}

static void teardown(void) {
  (void)chdir("/");
  (void)nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(agent, .init = setup, .fini = teardown);

/* Writes TEXT to PATH, making its parent directory. */
static void write_file(const char *path, const char *text) {
  char dir[256];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
    (void)mkdir(dir, 0755);
  }
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fputs(text, f) >= 0, 1);
  cr_assert_eq(fclose(f), 0);
}

/* Loads agents/a.json holding JSON and expects it to fail with ERR and MSG. */
static void expect_error(const char *json, int err, const char *msg) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  write_file("agents/a.json", json);
  int r = agent_load("agents/a.json", &s, &e);
  cr_expect_eq(r, err, "for %s: got %d (%s)", json, r, e.msg);
  cr_expect_str_eq(e.msg, msg, "for %s: got \"%s\"", json, e.msg);
  cr_expect_null(s, "no set on failure");
  agent_set_free(s);
}

Test(agent, full_definition) {
  write_file(
      "agents/main.json",
      "{\n"
      "  \"version\": 1,\n"
      "  \"name\": \"Main\",\n"
      "  \"model\": \"gpt-5.4\",\n"
      "  \"instructions\": \"Fix the failing test.\",\n"
      "  \"base_instructions\": \"You are a careful engineer.\",\n"
      "  \"default_manifest\": {\"root\": \"/workspace\", \"entries\": {}},\n"
      "  \"capabilities\": [\"shell\", \"filesystem\", \"compaction\"],\n"
      "  \"run_as\": \"  builder \",\n"
      "  \"model_settings\": {\n"
      "    \"temperature\": 0.25,\n"
      "    \"reasoning\": {\"effort\": \"high\"},\n"
      "    \"tool_choice\": \"exec_command\",\n"
      "    \"parallel_tool_calls\": false,\n"
      "    \"max_tokens\": 4096\n"
      "  },\n"
      "  \"output_type\": {\"type\": \"object\", \"properties\": {}},\n"
      "  \"max_turns\": 40,\n"
      "  \"handoffs\": [\"helper.json\", \"../shared/reviewer.json\"],\n"
      "  \"tools\": [{\"type\": \"agent_as_tool\", \"agent\": "
      "\"sub/worker.json\",\n"
      "             \"name\": \"run_worker\", \"description\": \"Does work.\","
      "\n"
      "             \"max_turns\": 3}],\n"
      "  \"api\": \"chat_completions\",\n"
      "  \"base_url\": \"https://api.example.com/v1\",\n"
      "  \"approvals\": {\"exec_command\": [\"git push\", \"rm \"],\n"
      "                \"apply_patch\": \"never\", \"run_worker\": "
      "\"always\"}\n"
      "}\n");
  write_file("agents/helper.json", "{\"name\": \"Helper\"}");
  write_file("shared/reviewer.json", "{\"name\": \"Reviewer\", \"handoffs\": "
                                     "[\"../agents/main.json\"]}");
  write_file("agents/sub/worker.json",
             "{\"name\": \"Worker\", \"model_settings\": "
             "{\"reasoning\": {\"effort\": \"xhigh\", \"summary\": "
             "\"auto\"}, \"tool_choice\": \"required\", \"truncation\": "
             "\"auto\", \"verbosity\": \"high\", \"store\": true}}");

  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/main.json", &s, &e), 0, "%s", e.msg);
  cr_assert_eq(s->n, 4);
  const struct agent *a = s->agents[0];
  cr_expect_eq(a->index, 0);
  cr_expect_str_eq(a->path, "agents/main.json");
  cr_expect_str_eq(a->name, "Main");
  cr_expect_str_eq(a->model, "gpt-5.4");
  cr_expect_str_eq(a->instructions, "Fix the failing test.");
  cr_expect_str_eq(a->base_instructions, "You are a careful engineer.");
  cr_assert(json_is_object(a->default_manifest));
  cr_expect_str_eq(
      json_string_value(json_object_get(a->default_manifest, "root")),
      "/workspace");
  cr_expect_eq(a->ncapabilities, 3);
  cr_expect_eq(a->capabilities[0], AGENT_CAP_SHELL);
  cr_expect_eq(a->capabilities[1], AGENT_CAP_FILESYSTEM);
  cr_expect_eq(a->capabilities[2], AGENT_CAP_COMPACTION);
  cr_expect_str_eq(a->run_as, "builder");
  /* The settings are kept as written, checked. */
  json_t *want = json_loads(
      "{\"temperature\": 0.25, \"reasoning\": {\"effort\": \"high\"}, "
      "\"tool_choice\": \"exec_command\", \"parallel_tool_calls\": false, "
      "\"max_tokens\": 4096}",
      0, NULL);
  cr_expect(json_equal(a->model_settings, want));
  json_decref(want);
  cr_expect(json_is_object(a->output_type));
  cr_expect_eq(a->max_turns, 40);
  cr_expect_eq(a->api, AGENT_API_CHAT_COMPLETIONS);
  cr_expect_str_eq(a->base_url, "https://api.example.com/v1");

  /* Handoffs: relative to agents/, loaded once, linked by pointer. */
  cr_assert_eq(a->nhandoffs, 2);
  cr_expect_str_eq(a->handoff_paths[1], "../shared/reviewer.json");
  const struct agent *helper = a->handoffs[0];
  const struct agent *reviewer = a->handoffs[1];
  cr_expect_str_eq(helper->name, "Helper");
  cr_expect_str_eq(helper->path, "agents/helper.json");
  cr_expect_str_eq(reviewer->name, "Reviewer");
  cr_expect_str_eq(reviewer->path, "agents/../shared/reviewer.json");
  cr_assert_eq(reviewer->nhandoffs, 1);
  cr_expect_eq(reviewer->handoffs[0], a, "the cycle leads back by pointer");

  /* The agent tool. */
  cr_assert_eq(a->ntools, 1);
  const struct agent_tool *t = &a->tools[0];
  cr_expect_str_eq(t->agent_path, "sub/worker.json");
  cr_expect_str_eq(t->name, "run_worker");
  cr_expect_str_eq(t->description, "Does work.");
  cr_expect_eq(t->max_turns, 3);
  cr_assert_not_null(t->agent);
  cr_expect_str_eq(t->agent->name, "Worker");
  cr_expect_str_eq(t->agent->path, "agents/sub/worker.json");
  cr_expect_str_eq(
      json_string_value(json_object_get(
          json_object_get(t->agent->model_settings, "reasoning"), "effort")),
      "xhigh");
  cr_expect_str_eq(json_string_value(json_object_get(t->agent->model_settings,
                                                     "tool_choice")),
                   "required");

  /* Every agent's index is its position. */
  for (size_t i = 0; i < s->n; i++)
    cr_expect_eq(s->agents[i]->index, i);

  /* Approvals, in file order. */
  cr_assert_eq(a->napprovals, 3);
  const struct agent_approval *ap = agent_find_approval(a, "exec_command");
  cr_assert_not_null(ap);
  cr_expect_eq(ap->mode, AGENT_APPROVAL_PREFIXES);
  cr_assert_eq(ap->nprefixes, 2);
  cr_expect_str_eq(ap->prefixes[0], "git push");
  cr_expect_str_eq(ap->prefixes[1], "rm ");
  cr_expect_eq(agent_find_approval(a, "apply_patch")->mode,
               AGENT_APPROVAL_NEVER);
  cr_expect_eq(agent_find_approval(a, "run_worker")->mode,
               AGENT_APPROVAL_ALWAYS);
  cr_expect_str_eq(a->approvals[1].tool, "apply_patch");
  cr_expect_null(agent_find_approval(a, "view_image"));
  agent_set_free(s);
}

Test(agent, defaults_and_nulls) {
  write_file("agents/a.json",
             "{\"name\": \"x\", \"model\": null, \"handoffs\": null,"
             " \"model_settings\": {\"temperature\": null}}");
  struct agent_set *s = NULL;
  cr_assert_eq(agent_load("agents/a.json", &s, NULL), 0);
  const struct agent *a = s->agents[0];
  cr_expect_eq(s->n, 1);
  cr_expect_null(a->model);
  cr_expect_null(a->instructions);
  cr_expect_null(a->default_manifest);
  cr_expect_null(a->run_as);
  cr_expect_eq(a->ncapabilities, 3);
  cr_expect_eq(a->capabilities[0], AGENT_CAP_FILESYSTEM);
  cr_expect_eq(a->capabilities[1], AGENT_CAP_SHELL);
  cr_expect_eq(a->capabilities[2], AGENT_CAP_COMPACTION);
  /* Given but empty: no settings, and not the model's defaults. */
  cr_assert(json_is_object(a->model_settings));
  cr_expect_eq(json_object_size(a->model_settings), 0);
  cr_expect_eq(a->max_turns, 0);
  cr_expect_eq(a->api, AGENT_API_RESPONSES);
  cr_expect_eq(a->nhandoffs + a->ntools + a->napprovals, 0);
  agent_set_free(s);

  /* An empty capability list means none. */
  write_file("agents/a.json", "{\"name\": \"x\", \"capabilities\": []}");
  cr_assert_eq(agent_load("agents/a.json", &s, NULL), 0);
  cr_expect_eq(s->agents[0]->ncapabilities, 0);
  agent_set_free(s);
  cr_expect_null(agent_set_free(NULL));
  cr_expect_str_eq(agent_capability_name(AGENT_CAP_COMPACTION), "compaction");
  cr_expect_null(agent_capability_name(AGENT_CAP_COUNT));
}

Test(agent, bad_keys_and_types) {
  expect_error("{\"name\": \"a\", \"modle\": \"gpt-5\"}", -EINVAL,
               "agents/a.json: unknown key \"modle\"");
  expect_error("{\"model\": \"gpt-5\"}", -EINVAL,
               "agents/a.json: missing required key \"name\"");
  expect_error("{\"name\": 7}", -EINVAL,
               "agents/a.json: \"name\" must be a non-empty string (got "
               "integer)");
  expect_error("{\"name\": null}", -EINVAL,
               "agents/a.json: \"name\" must be a non-empty string (got null)");
  expect_error("{\"name\": \"\"}", -EINVAL,
               "agents/a.json: \"name\" must not be empty");
  expect_error("{\"name\": \"a\", \"instructions\": [\"x\"]}", -EINVAL,
               "agents/a.json: \"instructions\" must be a string (got array)");
  expect_error("{\"name\": \"a\", \"max_turns\": \"5\"}", -EINVAL,
               "agents/a.json: \"max_turns\" must be an integer (got string)");
  expect_error("{\"name\": \"a\", \"max_turns\": 2.5}", -EINVAL,
               "agents/a.json: \"max_turns\" must be an integer (got number)");
  expect_error("{\"name\": \"a\", \"max_turns\": 0}", -EINVAL,
               "agents/a.json: \"max_turns\" must be at least 1 (got 0)");
  expect_error("{\"name\": \"a\", \"default_manifest\": []}", -EINVAL,
               "agents/a.json: \"default_manifest\" must be an object (got "
               "array)");
  expect_error("{\"name\": \"a\", \"output_type\": \"string\"}", -EINVAL,
               "agents/a.json: \"output_type\" must be an object (got "
               "string)");
  expect_error("{\"name\": \"a\", \"api\": \"completions\"}", -EINVAL,
               "agents/a.json: \"api\" must be \"responses\" or "
               "\"chat_completions\" (got \"completions\")");
  expect_error("{\"name\": \"a\", \"api\": true}", -EINVAL,
               "agents/a.json: \"api\" must be \"responses\" or "
               "\"chat_completions\" (got boolean)");
  expect_error("{\"name\": \"a\", \"base_url\": \"ftp://example.com\"}",
               -EINVAL,
               "agents/a.json: \"base_url\" must be an http:// or https:// "
               "URL without spaces (got \"ftp://example.com\")");
  expect_error("{\"name\": \"a\", \"run_as\": \"bad user\"}", -EINVAL,
               "agents/a.json: \"run_as\" must be a user name of at most 32 "
               "letters, digits, \".\", \"_\" or \"-\" (got \"bad user\")");
  expect_error("{\"name\": \"a\", \"run_as\": {\"uid\": 5}}", -EINVAL,
               "agents/a.json: unknown key \"run_as.uid\"");
  expect_error("{\"name\": \"a\", \"version\": 2}", -EINVAL,
               "agents/a.json: \"version\" must be 1 (got 2)");
  expect_error("[{\"name\": \"a\"}]", -EINVAL,
               "agents/a.json: an agent definition must be a JSON object (got "
               "array)");
}

Test(agent, bad_capabilities) {
  expect_error("{\"name\": \"a\", \"capabilities\": \"shell\"}", -EINVAL,
               "agents/a.json: \"capabilities\" must be an array of "
               "capability names (got string)");
  expect_error("{\"name\": \"a\", \"capabilities\": [\"shell\", "
               "\"network\"]}",
               -EINVAL,
               "agents/a.json: \"capabilities[1]\" must be one of "
               "\"filesystem\", \"shell\", \"compaction\", \"skills\", "
               "\"memory\" (got \"network\")");
  expect_error("{\"name\": \"a\", \"capabilities\": [\"shell\", \"shell\"]}",
               -EINVAL, "agents/a.json: \"capabilities[1]\" repeats \"shell\"");
  /* The SDK's Skills() without a source is refused there too. */
  expect_error("{\"name\": \"a\", \"capabilities\": [\"shell\", "
               "\"skills\"]}",
               -EINVAL,
               "agents/a.json: \"capabilities[1]\": skills capability "
               "requires `skills`, `from`, or `lazy_from`: write {\"type\": "
               "\"skills\", \"from\" or \"lazy_from\": {\"type\": "
               "\"local_dir\", \"src\": ...}}");
  expect_error("{\"name\": \"a\", \"capabilities\": [{\"type\": "
               "\"network\"}]}",
               -EINVAL,
               "agents/a.json: \"capabilities[0].type\" must be one of "
               "\"filesystem\", \"shell\", \"compaction\", \"skills\", "
               "\"memory\" (got \"network\")");
  expect_error("{\"name\": \"a\", \"capabilities\": [\"memory\", "
               "{\"type\": \"memory\"}]}",
               -EINVAL,
               "agents/a.json: \"capabilities[1]\" repeats \"memory\"");
}

Test(agent, bad_model_settings) {
  expect_error("{\"name\": \"a\", \"model_settings\": 1}", -EINVAL,
               "agents/a.json: \"model_settings\" must be an object (got "
               "integer)");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"top_k\": 5}}", -EINVAL,
               "agents/a.json: unknown key \"model_settings.top_k\"");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"temperature\": "
               "2.5}}",
               -EINVAL,
               "agents/a.json: \"model_settings.temperature\" must be between "
               "0 and 2 (got 2.5)");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"temperature\": "
               "-1}}",
               -EINVAL,
               "agents/a.json: \"model_settings.temperature\" must be between "
               "0 and 2 (got -1)");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"temperature\": "
               "\"hot\"}}",
               -EINVAL,
               "agents/a.json: \"model_settings.temperature\" must be a "
               "number (got string)");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"reasoning\": "
               "{\"effort\": \"extreme\"}}}",
               -EINVAL,
               "agents/a.json: \"model_settings.reasoning.effort\" must be "
               "\"none\", \"minimal\", \"low\", \"medium\", \"high\" or "
               "\"xhigh\" (got \"extreme\")");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"reasoning\": "
               "{\"generate\": \"auto\"}}}",
               -EINVAL,
               "agents/a.json: unknown key "
               "\"model_settings.reasoning.generate\"");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"reasoning_effort\": \"high\"}}",
               -EINVAL,
               "agents/a.json: unknown key "
               "\"model_settings.reasoning_effort\" (the SDK's name is "
               "\"reasoning\": {\"effort\": ...})");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"tool_choice\": 5}}",
               -EINVAL,
               "agents/a.json: \"model_settings.tool_choice\" must be "
               "\"auto\", \"required\", \"none\" or a tool name (got "
               "integer)");
  expect_error("{\"name\": \"a\", \"model_settings\": {\"tool_choice\": "
               "\"run it\"}}",
               -EINVAL,
               "agents/a.json: \"model_settings.tool_choice\" must be "
               "\"auto\", \"required\", \"none\" or a tool name of at most 64 "
               "letters, digits, \"_\" or \"-\" (got \"run it\")");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"parallel_tool_calls\": \"yes\"}}",
               -EINVAL,
               "agents/a.json: \"model_settings.parallel_tool_calls\" must be "
               "a boolean (got string)");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"max_tokens\": 0}}",
               -EINVAL,
               "agents/a.json: \"model_settings.max_tokens\" must be "
               "between 1 and 2147483647 (got 0)");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"max_output_tokens\": 10}}",
               -EINVAL,
               "agents/a.json: unknown key "
               "\"model_settings.max_output_tokens\" (the SDK's name is "
               "\"max_tokens\")");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"extra_headers\": {\"X-A\": \"a\\nb\"}}}",
               -EINVAL,
               "agents/a.json: \"model_settings.extra_headers.X-A\" must not "
               "hold control characters");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"extra_headers\": {\"X A\": \"b\"}}}",
               -EINVAL,
               "agents/a.json: \"model_settings.extra_headers.X A\": the name "
               "must be an HTTP header name");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"top_logprobs\": 21}}",
               -EINVAL,
               "agents/a.json: \"model_settings.top_logprobs\" must be "
               "between 0 and 20 (got 21)");
}

/* A key the agent's API cannot carry is refused, wherever "api" stands. */
Test(agent, settings_an_api_cannot_carry) {
  expect_error("{\"name\": \"a\", \"model_settings\": {\"truncation\": "
               "\"auto\"}, \"api\": \"chat_completions\"}",
               -EINVAL,
               "agents/a.json: \"model_settings.truncation\" cannot be sent "
               "to the chat_completions API (\"api\": \"chat_completions\")");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"response_include\": [\"reasoning.encrypted_content\"]}, "
               "\"api\": \"chat_completions\"}",
               -EINVAL,
               "agents/a.json: \"model_settings.response_include\" cannot be "
               "sent to the chat_completions API (\"api\": "
               "\"chat_completions\")");
  expect_error("{\"name\": \"a\", \"api\": \"chat_completions\", "
               "\"model_settings\": {\"reasoning\": {\"summary\": "
               "\"auto\"}}}",
               -EINVAL,
               "agents/a.json: \"model_settings.reasoning.summary\" cannot be "
               "sent to the chat_completions API (\"api\": "
               "\"chat_completions\"): it takes only reasoning.effort");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"frequency_penalty\": 0.5}}",
               -EINVAL,
               "agents/a.json: \"model_settings.frequency_penalty\" cannot be "
               "sent to the responses API (\"api\": \"responses\")");
  expect_error("{\"name\": \"a\", \"model_settings\": "
               "{\"include_usage\": true}}",
               -EINVAL,
               "agents/a.json: \"model_settings.include_usage\" cannot be "
               "sent to the responses API (\"api\": \"responses\")");
}

Test(agent, bad_tools_and_approvals) {
  expect_error("{\"name\": \"a\", \"tools\": {}}", -EINVAL,
               "agents/a.json: \"tools\" must be an array of tool objects (got "
               "object)");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"function\", "
               "\"name\": \"f\", \"parameters\": {}}]}",
               -EINVAL,
               "agents/a.json: \"tools[0].type\" must be \"agent_as_tool\" "
               "or \"command\" (got \"function\")");
  expect_error("{\"name\": \"a\", \"tools\": [{\"agent\": \"b.json\"}]}",
               -EINVAL,
               "agents/a.json: missing required key \"tools[0].type\"");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": "
               "\"agent_as_tool\"}]}",
               -EINVAL,
               "agents/a.json: missing required key \"tools[0].agent\"");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"agent_as_tool\", "
               "\"agent\": \"b.json\", \"strict\": true}]}",
               -EINVAL, "agents/a.json: unknown key \"tools[0].strict\"");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"agent_as_tool\", "
               "\"agent\": \"b.json\", \"max_turns\": -3}]}",
               -EINVAL,
               "agents/a.json: \"tools[0].max_turns\" must be at least 1 (got "
               "-3)");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"agent_as_tool\", "
               "\"agent\": \"b.json\", \"name\": \"x\"}, {\"type\": "
               "\"agent_as_tool\", \"agent\": \"c.json\", \"name\": \"x\"}]}",
               -EINVAL,
               "agents/a.json: \"tools[1].name\" repeats \"x\" of "
               "\"tools[0]\"");
  expect_error("{\"name\": \"a\", \"approvals\": [\"exec_command\"]}", -EINVAL,
               "agents/a.json: \"approvals\" must be an object of tool names "
               "(got array)");
  expect_error("{\"name\": \"a\", \"approvals\": {\"exec_command\": "
               "\"sometimes\"}}",
               -EINVAL,
               "agents/a.json: \"approvals.exec_command\" must be \"always\", "
               "\"never\" or an array of command prefixes (got "
               "\"sometimes\")");
  expect_error("{\"name\": \"a\", \"approvals\": {\"exec_command\": "
               "[\"git \", 3]}}",
               -EINVAL,
               "agents/a.json: \"approvals.exec_command[1]\" must be a "
               "command prefix string (got integer)");
  expect_error("{\"name\": \"a\", \"approvals\": {\"exec_command\": "
               "[]}}",
               -EINVAL,
               "agents/a.json: \"approvals.exec_command\" lists no command "
               "prefix (\"never\" says that none needs approval)");
  expect_error("{\"name\": \"a\", \"approvals\": {\"exec_command\": "
               "[\"\"]}}",
               -EINVAL,
               "agents/a.json: \"approvals.exec_command[0]\" must not be "
               "empty");
  expect_error("{\"name\": \"a\", \"handoffs\": [\"b.json\", 4]}", -EINVAL,
               "agents/a.json: \"handoffs[1]\" must be a path string (got "
               "integer)");
}

Test(agent, bad_json_names_line_and_column) {
  expect_error("{\"name\": \"a\",", -EINVAL,
               "agents/a.json:1:13: string or '}' expected near end of file");
  expect_error("{\"name\": \"a\",\n \"name\": \"b\"}", -EINVAL,
               "agents/a.json:2:7: duplicate object key near '\"name\"'");
}

Test(agent, missing_file_and_missing_handoff) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(agent_load("agents/none.json", &s, &e), -ENOENT);
  cr_expect_eq(e.code, SBX_NOT_FOUND);
  cr_expect_str_eq(e.msg,
                   "agents/none.json: cannot open: No such file or directory");
  expect_error("{\"name\": \"a\", \"handoffs\": [\"missing.json\"]}", -ENOENT,
               "agents/missing.json: cannot open (\"handoffs[0]\" of "
               "agents/a.json): No such file or directory");
  /* An error in a referenced file names that file. */
  write_file("agents/b.json", "{\"name\": \"b\", \"max_turns\": 0}");
  expect_error("{\"name\": \"a\", \"handoffs\": [\"b.json\"]}", -EINVAL,
               "agents/b.json: \"max_turns\" must be at least 1 (got 0)");
  expect_error("{\"name\": \"a\", \"handoffs\": [\"b.json\", \"./b.json\"]}",
               -EINVAL,
               "agents/b.json: \"max_turns\" must be at least 1 (got 0)");
  write_file("agents/b.json", "{\"name\": \"b\"}");
  expect_error("{\"name\": \"a\", \"handoffs\": [\"b.json\", \"./b.json\"]}",
               -EINVAL,
               "agents/a.json: \"handoffs[1]\" is the same agent file as "
               "\"handoffs[0]\"");
}

Test(agent, not_a_regular_file_or_too_big) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(mkdir("agents/dir.json", 0755), 0);
  cr_expect_eq(agent_load("agents/dir.json", &s, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "agents/dir.json: not a regular file");

  int fd = open("agents/big.json", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, AGENT_MAX_FILE_BYTES + 1), 0);
  close(fd);
  cr_expect_eq(agent_load("agents/big.json", &s, &e), -EFBIG);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED);
  cr_expect_str_eq(e.msg, "agents/big.json: file is larger than 4194304 bytes");
  cr_expect_null(s);
}

Test(agent, handoff_cycles_load_each_file_once) {
  /* a -> b -> c -> a, and a hands off to itself. */
  write_file("agents/a.json",
             "{\"name\": \"A\", \"handoffs\": [\"b.json\", \"a.json\"]}");
  write_file("agents/b.json", "{\"name\": \"B\", \"handoffs\": [\"c.json\"]}");
  write_file("agents/c.json",
             "{\"name\": \"C\", \"handoffs\": [\"./a.json\", \"b.json\"]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  cr_assert_eq(s->n, 3);
  struct agent *a = s->agents[0], *b = s->agents[1], *c = s->agents[2];
  cr_expect_str_eq(a->name, "A");
  cr_expect_str_eq(b->name, "B");
  cr_expect_str_eq(c->name, "C");
  cr_expect_eq(a->handoffs[0], b);
  cr_expect_eq(a->handoffs[1], a);
  cr_expect_eq(b->handoffs[0], c);
  cr_expect_eq(c->handoffs[0], a);
  cr_expect_eq(c->handoffs[1], b);
  agent_set_free(s);
}

Test(agent, relative_and_absolute_handoff_paths) {
  write_file("agents/team/lead.json",
             "{\"name\": \"Lead\", \"handoffs\": [\"../common/qa.json\", "
             "\"dev.json\"]}");
  write_file("agents/common/qa.json",
             "{\"name\": \"QA\", \"tools\": [{\"type\": \"agent_as_tool\", "
             "\"agent\": \"../team/dev.json\"}]}");
  char abs[512];
  snprintf(abs, sizeof(abs), "%s/agents/team/lead.json", tmpdir);
  write_file("agents/team/dev.json", "{\"name\": \"Dev\"}");
  char dev[1024];
  snprintf(dev, sizeof(dev), "{\"name\": \"Top\", \"handoffs\": [\"%s\"]}",
           abs);
  write_file("top.json", dev);

  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("top.json", &s, &e), 0, "%s", e.msg);
  cr_assert_eq(s->n, 4);
  const struct agent *lead = s->agents[0]->handoffs[0];
  cr_expect_str_eq(lead->name, "Lead");
  cr_expect_str_eq(lead->path, abs);
  cr_expect_str_eq(lead->handoffs[0]->name, "QA");
  cr_expect_str_eq(lead->handoffs[1]->name, "Dev");
  const struct agent *qa = lead->handoffs[0];
  cr_expect_eq(qa->tools[0].agent, lead->handoffs[1],
               "qa's tool and lead's handoff are one agent");
  cr_expect_null(qa->tools[0].name);
  agent_set_free(s);

  /* A path is relative to the file that names it, not to the cwd. */
  write_file("dev.json", "{\"name\": \"WrongDev\"}");
  cr_assert_eq(agent_load("agents/team/lead.json", &s, &e), 0, "%s", e.msg);
  cr_expect_str_eq(s->agents[0]->handoffs[1]->name, "Dev");
  agent_set_free(s);
}

Test(agent, cycle_through_agent_as_tool_is_refused) {
  write_file("agents/a.json",
             "{\"name\": \"A\", \"tools\": [{\"type\": \"agent_as_tool\", "
             "\"agent\": \"b.json\"}]}");
  write_file("agents/b.json", "{\"name\": \"B\", \"handoffs\": [\"a.json\"]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(agent_load("agents/a.json", &s, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "agents/a.json: \"tools[0].agent\" (agents/b.json) "
                          "leads back to this agent: agents used as tools may "
                          "not form a cycle");
  cr_expect_null(s);

  /* An agent that is its own tool. */
  write_file("agents/a.json",
             "{\"name\": \"A\", \"tools\": [{\"type\": \"agent_as_tool\", "
             "\"agent\": \"a.json\"}]}");
  cr_expect_eq(agent_load("agents/a.json", &s, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "agents/a.json: \"tools[0].agent\" (agents/a.json) "
                          "leads back to this agent: agents used as tools may "
                          "not form a cycle");

  /* The same tool from two agents is no cycle. */
  write_file("agents/a.json",
             "{\"name\": \"A\", \"handoffs\": [\"b.json\"], \"tools\": "
             "[{\"type\": \"agent_as_tool\", \"agent\": \"c.json\"}]}");
  write_file("agents/b.json",
             "{\"name\": \"B\", \"handoffs\": [\"a.json\"], \"tools\": "
             "[{\"type\": \"agent_as_tool\", \"agent\": \"c.json\"}]}");
  write_file("agents/c.json", "{\"name\": \"C\"}");
  cr_expect_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  cr_expect_eq(s->n, 3);
  agent_set_free(s);
}

Test(agent, depth_and_count_limits) {
  /* A chain f0 -> f1 -> ... -> f17: 17 levels below the first file. */
  char path[64], text[128];
  for (int i = 0; i <= AGENT_MAX_DEPTH + 1; i++) {
    snprintf(path, sizeof(path), "agents/f%d.json", i);
    snprintf(text, sizeof(text),
             "{\"name\": \"f%d\", \"handoffs\": [\"f%d.json\"]}", i, i + 1);
    if (i == AGENT_MAX_DEPTH + 1)
      snprintf(text, sizeof(text), "{\"name\": \"f%d\"}", i);
    write_file(path, text);
  }
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(agent_load("agents/f1.json", &s, &e), 0, "16 levels: %s", e.msg);
  cr_expect_eq(s ? s->n : 0, AGENT_MAX_DEPTH + 1);
  s = agent_set_free(s);
  cr_expect_eq(agent_load("agents/f0.json", &s, &e), -E2BIG);
  cr_expect_str_eq(e.msg, "agents/f17.json: agent files nested more than 16 "
                          "deep (\"handoffs[0]\" of agents/f16.json)");

  /* 65 files named by one. */
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 1 << 16);
  cr_assert_eq(sbx_buf_append_str(&b, "{\"name\": \"hub\", \"handoffs\": ["),
               0);
  for (int i = 0; i < AGENT_MAX_AGENTS; i++) {
    snprintf(path, sizeof(path), "agents/n%d.json", i);
    write_file(path, "{\"name\": \"n\"}");
    cr_assert_eq(sbx_buf_printf(&b, "%s\"n%d.json\"", i ? ", " : "", i), 0);
  }
  cr_assert_eq(sbx_buf_append_str(&b, "]}"), 0);
  write_file("agents/hub.json", b.data);
  cr_expect_eq(agent_load("agents/hub.json", &s, &e), -E2BIG);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED);
  cr_expect_str_eq(e.msg, "agents/n63.json: more than 64 agent files in one "
                          "set (\"handoffs[63]\" of agents/hub.json)");
}

Test(agent, command_tools_and_mcp_servers) {
  write_file("agents/a.json",
             "{\"name\": \"a\", \"tools\": [{\"type\": \"command\", "
             "\"name\": \"price\", \"command\": [\"./bin/price\", \"-j\"]},"
             " {\"type\": \"command\", \"name\": \"sum\", \"command\": "
             "[\"python3\"], \"timeout_s\": 5, \"description\": \"Adds.\"}],"
             " \"mcp_servers\": [{\"name\": \"ev\", \"type\": \"stdio\", "
             "\"command\": \"node\", \"args\": [\"server.js\"], \"env\": "
             "{\"K\": \"v\"}, \"allowed_tools\": [\"echo\"], "
             "\"require_approval\": {\"always\": {\"tool_names\": "
             "[\"echo\"]}}, \"client_session_timeout_seconds\": 1.5}]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  const struct agent *a = s->agents[0];
  cr_assert_eq(a->ncommands, 2);
  cr_expect_eq(a->ntools, 0);
  char cwd[512];
  cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
  char want[600];
  (void)snprintf(want, sizeof(want), "%s/agents/./bin/price", cwd);
  cr_expect_str_eq(a->commands[0].argv[0], want, "relative to the file");
  cr_expect_str_eq(a->commands[0].argv[1], "-j");
  cr_expect_null(a->commands[0].argv[2]);
  cr_expect_eq(a->commands[0].timeout_s, 60);
  cr_expect_str_eq(a->commands[1].argv[0], "python3", "looked up in PATH");
  cr_expect_eq(a->commands[1].timeout_s, 5);
  cr_expect_not_null(agent_find_command(a, "sum"));
  cr_assert_eq(a->nmcp_servers, 1);
  const struct agent_mcp_server *m = &a->mcp_servers[0];
  cr_expect_str_eq(m->argv[0], "node");
  cr_expect_str_eq(m->argv[1], "server.js");
  cr_expect_str_eq(m->env[0], "K=v");
  cr_expect_str_eq(m->allowed[0], "echo");
  cr_expect_eq(m->timeout_ms, 1500);
  cr_assert_eq(m->napprovals, 1);
  cr_expect(m->approvals[0].always);
  agent_set_free(s);
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"command\", "
               "\"name\": \"p\"}]}",
               -EINVAL,
               "agents/a.json: missing required key \"tools[0].command\"");
  expect_error("{\"name\": \"a\", \"tools\": [{\"type\": \"command\", "
               "\"name\": \"p\", \"command\": [\"x\"], \"timeout_s\": 0}]}",
               -EINVAL,
               "agents/a.json: \"tools[0].timeout_s\" must be between 1 and "
               "3600 seconds (got 0)");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"streamable_http\", \"url\": \"ftp://x/mcp\"}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].url\" must be an http:// or "
               "https:// URL without spaces (got \"ftp://x/mcp\")");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"streamable_http\", \"url\": \"http://x/mcp\", "
               "\"command\": \"node\"}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].command\" is not a key of a "
               "\"streamable_http\" server");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"streamable_http\"}]}",
               -EINVAL,
               "agents/a.json: missing required key \"mcp_servers[0].url\"");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"x\", "
               "\"require_approval\": \"sometimes\"}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].require_approval\" must be "
               "\"always\", \"never\", a boolean or an object of tool names "
               "(got \"sometimes\")");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"x\", "
               "\"require_approval\": {\"echo\": true}}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].require_approval.echo\" must "
               "be \"always\" or \"never\" (got boolean)");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"streamable_http\", \"url\": \"http://x/mcp\", "
               "\"headers\": {\"Bad Name\": \"v\"}}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].headers\" has a bad header "
               "\"Bad Name\"");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"x\", "
               "\"client_session_timeout_seconds\": 0}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[0].client_session_timeout_"
               "seconds\" must be a number of seconds above 0 and at most "
               "3600");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"x\", \"cache\": 1}]}",
               -EINVAL, "agents/a.json: unknown key \"mcp_servers[0].cache\"");
  expect_error("{\"name\": \"a\", \"mcp_servers\": [{\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"x\"}, {\"name\": \"w\", "
               "\"type\": \"stdio\", \"command\": \"y\"}]}",
               -EINVAL,
               "agents/a.json: \"mcp_servers[1].name\" repeats \"w\" of "
               "\"mcp_servers[0]\"");
}

Test(agent, api_key_env_is_a_variable_name) {
  write_file("agents/a.json", "{\"name\": \"a\", \"api_key_env\": "
                              "\"GROQ_API_KEY\"}");
  struct agent_set *s = NULL;
  cr_assert_eq(agent_load("agents/a.json", &s, NULL), 0);
  cr_expect_str_eq(s->agents[0]->api_key_env, "GROQ_API_KEY");
  agent_set_free(s);
  expect_error("{\"name\": \"a\", \"api_key_env\": \"1KEY\"}", -EINVAL,
               "agents/a.json: \"api_key_env\" must be an environment "
               "variable name: letters, digits and \"_\", not starting with "
               "a digit (got \"1KEY\")");
  expect_error("{\"name\": \"a\", \"api_key_env\": \"A-B\"}", -EINVAL,
               "agents/a.json: \"api_key_env\" must be an environment "
               "variable name: letters, digits and \"_\", not starting with "
               "a digit (got \"A-B\")");
}

/* "prompt": the Responses API's reusable prompt, kept as the SDK sends it
 * (variables always present); what it cannot hold is refused by name. */
Test(agent, prompt_reference) {
  write_file("agents/p.json",
             "{\"name\": \"P\", \"prompt\": {\"id\": \"pmpt_1\", \"version\": "
             "\"3\", \"variables\": {\"city\": \"Paris\", \"doc\": {\"type\": "
             "\"input_text\", \"text\": \"hi\"}}}}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/p.json", &s, &e), 0, "%s", e.msg);
  json_t *want = json_loads("{\"id\": \"pmpt_1\", \"version\": \"3\", "
                            "\"variables\": {\"city\": \"Paris\", \"doc\": "
                            "{\"type\": \"input_text\", \"text\": \"hi\"}}}",
                            0, NULL);
  cr_expect(json_equal(s->agents[0]->prompt, want));
  json_decref(want);
  agent_set_free(s);
  write_file("agents/q.json", "{\"name\": \"Q\", \"prompt\": {\"id\": \"p\"}}");
  cr_assert_eq(agent_load("agents/q.json", &s, &e), 0, "%s", e.msg);
  want = json_loads("{\"id\": \"p\", \"variables\": {}}", 0, NULL);
  cr_expect(json_equal(s->agents[0]->prompt, want));
  json_decref(want);
  agent_set_free(s);

  expect_error("{\"name\": \"a\", \"prompt\": \"pmpt_1\"}", -EINVAL,
               "agents/a.json: \"prompt\" must be an object (got string)");
  expect_error("{\"name\": \"a\", \"prompt\": {}}", -EINVAL,
               "agents/a.json: \"prompt\" needs an \"id\"");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"\"}}", -EINVAL,
               "agents/a.json: \"prompt.id\" must be a non-empty string (got "
               "string)");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"version\": 3}}",
               -EINVAL,
               "agents/a.json: \"prompt.version\" must be a non-empty string "
               "(got integer)");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"vars\": {}}}",
               -EINVAL, "agents/a.json: unknown key \"prompt.vars\"");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"variables\": "
               "[]}}",
               -EINVAL,
               "agents/a.json: \"prompt.variables\" must be an object (got "
               "array)");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"variables\": "
               "{\"n\": 3}}}",
               -EINVAL,
               "agents/a.json: \"prompt.variables.n\" must be a string or an "
               "input_text, input_image or input_file object (got integer)");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"variables\": "
               "{\"n\": {\"type\": \"text\"}}}}",
               -EINVAL,
               "agents/a.json: \"prompt.variables.n\" must be a string or an "
               "input_text, input_image or input_file object (got type "
               "\"text\")");
  expect_error("{\"name\": \"a\", \"prompt\": {\"id\": \"p\", \"variables\": "
               "{\"n\": {\"type\": \"input_text\"}}}}",
               -EINVAL,
               "agents/a.json: \"prompt.variables.n.text\" must be a string");
  expect_error("{\"name\": \"a\", \"api\": \"chat_completions\", \"prompt\": "
               "{\"id\": \"p\"}}",
               -EINVAL,
               "agents/a.json: \"prompt\": reusable prompts are only "
               "supported by the Responses API (\"api\": "
               "\"chat_completions\")");
}

/* "run_config": the backend and its options kept for the backend to
 * check, and "exposed_ports", every backend's, read here. */
Test(agent, run_config_backend_options_and_exposed_ports) {
  write_file("agents/a.json",
             "{\"name\": \"a\", \"run_config\": {\"backend\": \"docker\", "
             "\"image\": \"i\", \"exposed_ports\": [8000, 65535]}}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  const struct agent *a = s->agents[0];
  cr_expect_str_eq(a->run_backend, "docker");
  cr_expect_eq(json_object_size(a->run_options), 1, "only the image");
  cr_expect_str_eq(json_string_value(json_object_get(a->run_options, "image")),
                   "i");
  cr_assert_eq(a->n_run_ports, 2);
  cr_expect_eq(a->run_ports[0], 8000);
  cr_expect_eq(a->run_ports[1], 65535);
  agent_set_free(s);
  write_file("agents/a.json", "{\"name\": \"a\", \"run_config\": "
                              "{\"exposed_ports\": [22]}}");
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  cr_expect_null(s->agents[0]->run_options, "no backend options");
  cr_expect_eq(s->agents[0]->n_run_ports, 1);
  agent_set_free(s);
  expect_error("{\"name\": \"a\", \"run_config\": {\"exposed_ports\": 80}}",
               -EINVAL,
               "agents/a.json: \"run_config.exposed_ports\" must be an array "
               "of ports (got integer)");
  expect_error("{\"name\": \"a\", \"run_config\": {\"exposed_ports\": "
               "[80, 0]}}",
               -EINVAL,
               "agents/a.json: \"run_config.exposed_ports[1]\": Exposed ports "
               "must be integers between 1 and 65535.");
  expect_error("{\"name\": \"a\", \"run_config\": {\"exposed_ports\": "
               "[\"80\"]}}",
               -EINVAL,
               "agents/a.json: \"run_config.exposed_ports[0]\": Exposed ports "
               "must be integers between 1 and 65535.");
  expect_error("{\"name\": \"a\", \"run_config\": {\"exposed_ports\": "
               "[80, 80]}}",
               -EINVAL,
               "agents/a.json: \"run_config.exposed_ports\": port 80 is "
               "listed twice");
  char many[1024] = "{\"name\": \"a\", \"run_config\": {\"exposed_ports\": [1";
  for (int p = 2; p <= AGENT_MAX_PORTS + 1; p++)
    (void)snprintf(many + strlen(many), sizeof(many) - strlen(many), ", %d", p);
  (void)snprintf(many + strlen(many), sizeof(many) - strlen(many), "]}}");
  expect_error(many, -EINVAL,
               "agents/a.json: \"run_config.exposed_ports\" has more than 64 "
               "ports");
}

/* max_turns applies to the agent that starts a run: on one reached only
 * by handoff it would do nothing, and is refused; on one also used as a
 * tool it is that tool's limit. */
Test(agent, max_turns_of_a_handoff_only_agent_is_refused) {
  write_file("agents/a.json", "{\"name\": \"A\", \"handoffs\": [\"b.json\"]}");
  write_file("agents/b.json", "{\"name\": \"B\", \"max_turns\": 4}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(agent_load("agents/a.json", &s, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "agents/b.json: \"max_turns\" would do nothing: "
                          "agent \"B\" is reached only by handoff here, and "
                          "a run's turn limit is that of the agent that "
                          "starts it (agents/a.json)");
  cr_expect_null(s);
  /* Started by itself, its max_turns is the run's. */
  cr_expect_eq(agent_load("agents/b.json", &s, &e), 0, "%s", e.msg);
  agent_set_free(s);
  s = NULL;
  /* Also used as a tool: there it is the nested run's limit. */
  write_file("agents/a.json",
             "{\"name\": \"A\", \"handoffs\": [\"b.json\"], \"tools\": "
             "[{\"type\": \"agent_as_tool\", \"agent\": \"b.json\"}]}");
  cr_expect_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  agent_set_free(s);
}
