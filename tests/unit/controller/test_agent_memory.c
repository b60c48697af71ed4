/* The memory capability in agent files (config/agent_memory.c) and the
 * pure parts of its run-time side: the SDK's truncation, its templates and
 * the place of its fragment in the instructions. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/run/instructions.h"
#include "controller/run/memory.h"
#include "shared/errors.h"

static char tmpdir[] = "/tmp/sbx-test-memory-XXXXXX";

static void setup(void) {
  cr_assert_not_null(mkdtemp(tmpdir));
  cr_assert_eq(chdir(tmpdir), 0);
}

static void teardown(void) {
  (void)unlink("a.json");
  (void)chdir("/");
  (void)rmdir(tmpdir);
}

TestSuite(agent_memory, .init = setup, .fini = teardown);

/* Loads a.json holding JSON: 0 and *S, or the error in E. */
static int load(const char *json, struct agent_set **s, struct sbx_error *e) {
  FILE *f = fopen("a.json", "w");
  cr_assert_not_null(f);
  cr_assert(fputs(json, f) >= 0);
  cr_assert_eq(fclose(f), 0);
  return agent_load("a.json", s, e);
}

static void expect_error(const char *json, const char *msg) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  int r = load(json, &s, &e);
  cr_expect_eq(r, -EINVAL, "for %s: got %d (%s)", json, r, e.msg);
  cr_expect_str_eq(e.msg, msg, "for %s: got \"%s\"", json, e.msg);
  agent_set_free(s);
}

#define CAPS(X)                                                                \
  "{\"name\": \"a\", \"capabilities\": [\"filesystem\", "                      \
  "\"shell\", " X "]}"

Test(agent_memory, the_string_is_the_sdks_default_memory) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(load(CAPS("\"memory\""), &s, &e), 0, "%s", e.msg);
  const struct agent_memory *m = s->agents[0]->memory;
  cr_assert_not_null(m);
  cr_expect(m->read && m->live_update && m->generate);
  cr_expect_str_eq(m->memories_dir, "memories");
  cr_expect_str_eq(m->sessions_dir, "sessions");
  cr_expect_str_eq(m->summary_file, "memory_summary.md");
  cr_expect_eq(m->max_raw_memories, 256);
  cr_expect_eq(m->phase_two_max_turns, 500);
  cr_expect_str_eq(m->phase_one_model, "gpt-5.4-mini");
  cr_expect_str_eq(m->phase_two_model, "gpt-5.4");
  char *st = json_dumps(m->phase_one_settings, JSON_COMPACT);
  cr_expect_str_eq(st, "{\"reasoning\":{\"effort\":\"medium\"}}");
  free(st);
  cr_expect_null(m->extra_prompt);
  agent_set_free(s);
  /* Without it, no memory. */
  cr_assert_eq(load("{\"name\": \"a\"}", &s, &e), 0, "%s", e.msg);
  cr_expect_null(s->agents[0]->memory);
  agent_set_free(s);
}

Test(agent_memory, the_object_takes_the_python_sdks_fields) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  int r = load(
      CAPS("{\"type\": \"memory\", \"layout\": {\"memories_dir\": "
           "\"./mem//\", \"sessions_dir\": \"logs/runs\", \"summary_file\": "
           "\"sum.md\"}, \"read\": {\"live_update\": false}, \"generate\": "
           "{\"max_raw_memories_for_consolidation\": 7, \"phase_one_model\": "
           "\"m1\", \"phase_two_model\": \"m2\", \"phase_one_model_settings\": "
           "{\"temperature\": 0.5}, \"phase_two_model_settings\": {}, "
           "\"phase_two_max_turns\": 9, \"extra_prompt\": \"Keep names.\"}}"),
      &s, &e);
  cr_assert_eq(r, 0, "%s", e.msg);
  const struct agent_memory *m = s->agents[0]->memory;
  cr_expect(m->read && !m->live_update && m->generate);
  cr_expect_str_eq(m->memories_dir, "mem");
  cr_expect_str_eq(m->sessions_dir, "logs/runs");
  cr_expect_str_eq(m->summary_file, "sum.md");
  cr_expect_eq(m->max_raw_memories, 7);
  cr_expect_eq(m->phase_two_max_turns, 9);
  cr_expect_str_eq(m->phase_one_model, "m1");
  cr_expect_str_eq(m->phase_two_model, "m2");
  cr_expect_eq(
      json_real_value(json_object_get(m->phase_one_settings, "temperature")),
      0.5);
  cr_expect_eq(json_object_size(m->phase_two_settings), 0);
  cr_expect_str_eq(m->extra_prompt, "Keep names.");
  agent_set_free(s);
  /* "generate": false (or null) reads only; "read": false generates only,
   * and then needs neither shell nor filesystem. */
  cr_assert_eq(
      load(CAPS("{\"type\": \"memory\", \"generate\": false}"), &s, &e), 0,
      "%s", e.msg);
  cr_expect(s->agents[0]->memory->read && !s->agents[0]->memory->generate);
  agent_set_free(s);
  cr_assert_eq(load("{\"name\": \"a\", \"capabilities\": [{\"type\": "
                    "\"memory\", \"read\": null, \"generate\": true}]}",
                    &s, &e),
               0, "%s", e.msg);
  cr_expect(!s->agents[0]->memory->read && s->agents[0]->memory->generate);
  agent_set_free(s);
  /* Read-only memory needs shell, not filesystem. */
  cr_assert_eq(load("{\"name\": \"a\", \"capabilities\": [\"shell\", "
                    "{\"type\": \"memory\", \"read\": {\"live_update\": "
                    "false}}]}",
                    &s, &e),
               0, "%s", e.msg);
  agent_set_free(s);
}

Test(agent_memory, bad_options_are_refused_by_name) {
  expect_error(CAPS("{\"type\": \"memory\", \"store\": {}}"),
               "a.json: unknown key \"capabilities[2].store\"");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"memoriesDir\": "
                    "\"m\"}}"),
               "a.json: unknown key \"capabilities[2].layout.memoriesDir\"");
  expect_error(CAPS("{\"type\": \"memory\", \"read\": {\"liveUpdate\": "
                    "true}}"),
               "a.json: unknown key \"capabilities[2].read.liveUpdate\"");
  expect_error(CAPS("{\"type\": \"memory\", \"generate\": {\"model\": "
                    "\"x\"}}"),
               "a.json: unknown key \"capabilities[2].generate.model\"");
  expect_error(CAPS("{\"type\": \"memory\", \"read\": 1}"),
               "a.json: \"capabilities[2].read\" must be an object, true, "
               "false or null (got integer)");
  expect_error(CAPS("{\"type\": \"memory\", \"read\": {\"live_update\": "
                    "\"yes\"}}"),
               "a.json: \"capabilities[2].read.live_update\" must be a "
               "boolean (got string)");
  expect_error(CAPS("{\"type\": \"memory\", \"generate\": "
                    "{\"max_raw_memories_for_consolidation\": 4097}}"),
               "a.json: \"capabilities[2].generate.max_raw_memories_for_"
               "consolidation\" must be an integer between 1 and 4096 (got "
               "4097)");
  expect_error(CAPS("{\"type\": \"memory\", \"generate\": "
                    "{\"phase_two_max_turns\": 0}}"),
               "a.json: \"capabilities[2].generate.phase_two_max_turns\" must "
               "be an integer between 1 and 100000 (got 0)");
  expect_error(CAPS("{\"type\": \"memory\", \"generate\": "
                    "{\"phase_one_model\": 5}}"),
               "a.json: \"capabilities[2].generate.phase_one_model\" must be "
               "a string (got integer)");
  expect_error(CAPS("{\"type\": \"memory\", \"generate\": "
                    "{\"phase_one_model_settings\": {\"top_k\": 1}}}"),
               "a.json: unknown key \"capabilities[2].generate.phase_one_"
               "model_settings.top_k\"");
  expect_error(CAPS("{\"type\": \"memory\", \"read\": false, \"generate\": "
                    "null}"),
               "a.json: \"capabilities[2]\": Memory requires at least one of "
               "`read` or `generate`.");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"memories_dir\": "
                    "\"../up\"}}"),
               "a.json: \"capabilities[2].layout.memories_dir\" must be "
               "relative to the sandbox workspace root, non-empty, and must "
               "not escape root, got: ../up");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"sessions_dir\": "
                    "\"/abs\"}}"),
               "a.json: \"capabilities[2].layout.sessions_dir\" must be "
               "relative to the sandbox workspace root, non-empty, and must "
               "not escape root, got: /abs");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"memories_dir\": "
                    "\".\"}}"),
               "a.json: \"capabilities[2].layout.memories_dir\" must be "
               "relative to the sandbox workspace root, non-empty, and must "
               "not escape root, got: .");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"summary_file\": "
                    "\"a/b.md\"}}"),
               "a.json: \"capabilities[2].layout.summary_file\" must be a "
               "file name, got: a/b.md");
  expect_error(CAPS("{\"type\": \"memory\", \"layout\": {\"sessions_dir\": "
                    "\"memories\"}}"),
               "a.json: \"capabilities[2].layout\": memories_dir and "
               "sessions_dir are the same directory \"memories\"");
}

Test(agent_memory, capability_objects_and_requirements) {
  expect_error(CAPS("{\"layout\": {}}"),
               "a.json: \"capabilities[2]\" has no \"type\"");
  expect_error(CAPS("{\"type\": \"network\"}"),
               "a.json: \"capabilities[2].type\" must be one of "
               "\"filesystem\", \"shell\", \"compaction\", \"skills\", "
               "\"memory\" (got \"network\")");
  expect_error("{\"name\": \"a\", \"capabilities\": [{\"type\": \"shell\"}]}",
               "a.json: \"capabilities[0]\": the \"shell\" capability takes "
               "no options; write it as the string \"shell\"");
  expect_error(CAPS("\"memory\", \"memory\""),
               "a.json: \"capabilities[3]\" repeats \"memory\"");
  /* The SDK's requirements: shell to read, filesystem to update. */
  expect_error("{\"name\": \"a\", \"capabilities\": [\"memory\"]}",
               "a.json: \"capabilities\": memory requires missing "
               "capabilities: filesystem, shell");
  expect_error("{\"name\": \"a\", \"capabilities\": [\"shell\", "
               "\"memory\"]}",
               "a.json: \"capabilities\": memory requires missing "
               "capabilities: filesystem");
  expect_error("{\"name\": \"a\", \"capabilities\": [{\"type\": \"memory\", "
               "\"read\": {\"live_update\": false}}]}",
               "a.json: \"capabilities\": memory requires missing "
               "capabilities: shell");
}

Test(agent_memory, its_directories_join_the_manifest) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(load(CAPS("\"memory\""), &s, &e), 0, "%s", e.msg);
  json_t *m = agent_memory_manifest(s->agents[0], NULL);
  char *t = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(t, "{\"entries\":{\"memories\":{\"type\":\"dir\"},"
                      "\"sessions\":{\"type\":\"dir\"}}}");
  free(t);
  json_decref(m);
  /* An entry that overlaps one of them keeps it out. */
  json_t *given = json_pack("{s:{s:{s:s, s:s}}}", "entries", "memories/a.md",
                            "type", "file", "content", "x");
  m = agent_memory_manifest(s->agents[0], given);
  t = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(t, "{\"entries\":{\"memories/a.md\":{\"content\":\"x\","
                      "\"type\":\"file\"},\"sessions\":{\"type\":\"dir\"}}}");
  free(t);
  json_decref(m);
  json_decref(given);
  agent_set_free(s);
  /* Read-only, no generation: neither. */
  cr_assert_eq(load(CAPS("{\"type\": \"memory\", \"read\": {\"live_update\": "
                         "false}, \"generate\": false}"),
                    &s, &e),
               0, "%s", e.msg);
  m = agent_memory_manifest(s->agents[0], NULL);
  t = json_dumps(m, JSON_COMPACT);
  cr_expect_str_eq(t, "{\"entries\":{}}");
  free(t);
  json_decref(m);
  agent_set_free(s);
}

Test(agent_memory, truncation_is_the_sdks) {
  char *t = memory_truncate_tokens("short", 5, 2);
  cr_expect_str_eq(t, "short");
  free(t);
  /* 20 bytes in a budget of 2 tokens (8 bytes): 4 + 4 kept, 12 removed,
   * which is 3 tokens. */
  t = memory_truncate_tokens("abcdefghijklmnopqrst", 20, 2);
  cr_expect_str_eq(t, "abcd...3 tokens truncated...qrst");
  free(t);
  /* A character that does not fit whole is left out of either half. */
  t = memory_truncate_tokens("abc\xc3\xa9"
                             "0123456789xyz",
                             18, 2);
  cr_expect_str_eq(t, "abc...3 tokens truncated...9xyz");
  free(t);
  t = memory_truncate_tokens("abc0123456789\xc3\xa9xyz", 18, 2);
  cr_expect_str_eq(t, "abc0...3 tokens truncated...xyz");
  free(t);
  /* The summary's budget is 15,000 tokens: 60,000 bytes. */
  size_t n = 60001;
  char *big = malloc(n + 1);
  memset(big, 'a', n);
  big[n] = '\0';
  t = memory_truncate_tokens(big, n, MEMORY_SUMMARY_MAX_TOKENS);
  cr_expect(strstr(t, "...1 tokens truncated..."), "%.80s", t);
  cr_expect_eq(strlen(t), 60000 + strlen("...1 tokens truncated..."));
  free(t);
  t = memory_truncate_tokens(big, 60000, MEMORY_SUMMARY_MAX_TOKENS);
  cr_expect_eq(strlen(t), 60000);
  free(t);
  free(big);
}

Test(agent_memory, templates_fill_in_order) {
  char *t = memory_render("{a} and {{ b }} and {a}", "a", "x{b}", "{{ b }}",
                          "y", NULL);
  cr_expect_str_eq(t, "x{b} and y and x{b}");
  free(t);
  char *x = memory_extra_section("  \n ");
  cr_expect_str_eq(x, "");
  free(x);
  x = memory_extra_section(" Keep names. ");
  cr_expect(strncmp(x, "\n=====", 6) == 0, "%s", x);
  cr_expect(strstr(x, "DEVELOPER-SPECIFIC EXTRA GUIDANCE"), "%s", x);
  cr_expect(strstr(x, "\n\nKeep names.\n"), "%s", x);
  free(x);
}

/* The fragments are joined in the order given (the agent's capability
 * order, which request.c follows). */
Test(agent_memory, the_fragment_follows_the_capability_order) {
  const char *memory = "## Memory\n\nM\n";
  struct instructions_input in = {
      .base = "B",
      .fragments = {instructions_shell_fragment, memory},
      .nfragments = 2,
      .root = "/workspace"};
  char *t = instructions_build(&in);
  char want[4096];
  (void)snprintf(want, sizeof(want),
                 "B\n\n# Sandbox capability instructions\n\n%s\n\n## "
                 "Memory\n\nM\n",
                 instructions_shell_fragment);
  cr_expect_str_eq(t, want);
  free(t);
  in.fragments[0] = memory;
  in.fragments[1] = instructions_shell_fragment;
  t = instructions_build(&in);
  (void)snprintf(want, sizeof(want),
                 "B\n\n# Sandbox capability instructions\n\n## "
                 "Memory\n\nM\n\n\n%s",
                 instructions_shell_fragment);
  cr_expect_str_eq(t, want);
  free(t);
  in.nfragments = 1;
  t = instructions_build(&in);
  cr_expect_str_eq(t, "B\n\n# Sandbox capability instructions\n\n## "
                      "Memory\n\nM\n");
  free(t);
}

/* Agent instructions go in as written, as the SDK adds them: phase one's
 * prompt ends with a newline, which stays. */
Test(agent_memory, agent_instructions_are_kept_as_written) {
  struct instructions_input in = {
      .base = "B", .agent = "Do it.\n", .root = "/workspace"};
  char *t = instructions_build(&in);
  cr_expect_str_eq(t, "B\n\n# Agent instructions\n\nDo it.\n");
  free(t);
  t = memory_replace_all("{\n  \"a\": \"x\\\": y\"\n}", "\": ", "\":");
  cr_expect_str_eq(t, "{\n  \"a\":\"x\\\":y\"\n}");
  free(t);
}
