/* An agent_as_tool entry's "run_config": {"sandbox": "parent"}: read, and
 * every way it can be wrong refused at load time, naming the file and the
 * key. Each test runs in its own process inside a fresh temp directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "shared/errors.h"

static char tmpdir[] = "/tmp/sbx-test-parent-sandbox-XXXXXX";

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

TestSuite(parent_sandbox, .init = setup, .fini = teardown);

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fputs(text, f) >= 0, 1);
  cr_assert_eq(fclose(f), 0);
}

/* Loads agents/a.json holding JSON (agents/e.json is the explorer) and
 * expects it to fail with MSG. */
static void expect_error(const char *json, const char *msg) {
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  write_file("agents/a.json", json);
  int r = agent_load("agents/a.json", &s, &e);
  cr_expect_eq(r, -EINVAL, "for %s: got %d (%s)", json, r, e.msg);
  cr_expect_str_eq(e.msg, msg, "for %s", json);
  cr_expect_null(s);
  agent_set_free(s);
}

#define TOOL(run_config)                                                       \
  "{\"name\": \"Lead\", \"tools\": [{\"type\": \"agent_as_tool\", "            \
  "\"agent\": \"e.json\", \"run_config\": " run_config "}]}"

Test(parent_sandbox, is_read_per_entry) {
  write_file("agents/e.json", "{\"name\": \"Explorer\", \"run_as\": \"bob\"}");
  write_file("agents/a.json",
             "{\"name\": \"Lead\", \"tools\": ["
             "{\"type\": \"agent_as_tool\", \"agent\": \"e.json\", "
             "\"name\": \"explore\", \"run_config\": {\"sandbox\": "
             "\"parent\"}},"
             "{\"type\": \"agent_as_tool\", \"agent\": \"e.json\", "
             "\"name\": \"explore_alone\", \"run_config\": {\"sandbox\": "
             "null}},"
             "{\"type\": \"agent_as_tool\", \"agent\": \"e.json\", "
             "\"name\": \"explore_own\"}]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  cr_assert_eq(s->agents[0]->ntools, 3);
  cr_expect(s->agents[0]->tools[0].parent_sandbox);
  cr_expect(!s->agents[0]->tools[1].parent_sandbox);
  cr_expect(!s->agents[0]->tools[2].parent_sandbox);
  agent_set_free(s);
}

Test(parent_sandbox, other_values_and_keys_are_refused_by_name) {
  write_file("agents/e.json", "{\"name\": \"Explorer\"}");
  expect_error(TOOL("{\"sandbox\": \"own\"}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" must be "
               "\"parent\" (got \"own\"): without it the agent gets a sandbox "
               "of its own");
  expect_error(TOOL("{\"sandbox\": true}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" must be "
               "\"parent\" (got boolean)");
  expect_error(TOOL("\"parent\""), "agents/a.json: \"tools[0].run_config\" "
                                   "must be an object (got string)");
  expect_error(TOOL("{\"sandbox\": \"parent\", \"backend\": \"docker\"}"),
               "agents/a.json: \"tools[0].run_config.backend\" is not "
               "supported: the run_config of an agent used as a tool takes "
               "only \"sandbox\"; a run has one backend and one set of its "
               "options, the starting agent's run_config");
}

Test(parent_sandbox, is_not_an_agents_own_run_config) {
  expect_error("{\"name\": \"Explorer\", \"run_config\": {\"sandbox\": "
               "\"parent\"}}",
               "agents/a.json: \"run_config.sandbox\" is not an agent's own "
               "setting: it goes in the run_config of the \"agent_as_tool\" "
               "entry that uses this agent (\"tools\" of the calling agent's "
               "file)");
}

Test(parent_sandbox, the_caller_must_have_a_sandbox) {
  write_file("agents/e.json", "{\"name\": \"Explorer\"}");
  expect_error("{\"name\": \"Lead\", \"capabilities\": [\"compaction\"], "
               "\"tools\": [{\"type\": \"agent_as_tool\", \"agent\": "
               "\"e.json\", \"run_config\": {\"sandbox\": \"parent\"}}]}",
               "agents/a.json: \"tools[0].run_config.sandbox\" is \"parent\", "
               "but agent \"Lead\" has no sandbox to share: give it the "
               "\"filesystem\" or \"shell\" capability or a default_manifest");
  /* A manifest alone gives it one. */
  write_file("agents/a.json",
             "{\"name\": \"Lead\", \"capabilities\": [], \"default_manifest\": "
             "{}, \"tools\": [{\"type\": \"agent_as_tool\", \"agent\": "
             "\"e.json\", \"run_config\": {\"sandbox\": \"parent\"}}]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  agent_set_free(s);
}

Test(parent_sandbox, the_agent_used_must_work_in_it_without_a_manifest) {
  write_file("agents/e.json",
             "{\"name\": \"Explorer\", \"capabilities\": [\"compaction\"]}");
  expect_error(TOOL("{\"sandbox\": \"parent\"}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" is \"parent\", "
               "but agent \"Explorer\" (agents/e.json) has neither the "
               "\"filesystem\" nor the \"shell\" capability: it would not use "
               "the sandbox");
  write_file("agents/e.json",
             "{\"name\": \"Explorer\", \"default_manifest\": {}}");
  expect_error(TOOL("{\"sandbox\": \"parent\"}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" is \"parent\": "
               "agent \"Explorer\" (agents/e.json) works in the sandbox of "
               "agent \"Lead\", where its default_manifest would not apply; "
               "list what it needs in the default_manifest of \"Lead\"");
  /* Nor skills from a source, which would be a manifest entry. */
  (void)mkdir("agents/skills", 0755);
  write_file("agents/e.json",
             "{\"name\": \"Explorer\", \"capabilities\": [\"shell\", "
             "{\"type\": \"skills\", \"from\": {\"type\": \"local_dir\", "
             "\"src\": \"skills\"}}]}");
  expect_error(TOOL("{\"sandbox\": \"parent\"}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" is \"parent\": "
               "agent \"Explorer\" (agents/e.json) works in the sandbox of "
               "agent \"Lead\", where its skills from would not apply; list "
               "what it needs in the default_manifest of \"Lead\"");
  /* Nor may an agent it hands off to bring one. */
  write_file("agents/e.json",
             "{\"name\": \"Explorer\", \"handoffs\": [\"f.json\"]}");
  write_file("agents/f.json",
             "{\"name\": \"Fixer\", \"default_manifest\": {}}");
  expect_error(TOOL("{\"sandbox\": \"parent\"}"),
               "agents/a.json: \"tools[0].run_config.sandbox\" is \"parent\": "
               "agent \"Fixer\" (agents/f.json) works in the sandbox of agent "
               "\"Lead\", where its default_manifest would not apply; list "
               "what it needs in the default_manifest of \"Lead\"");
}
