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

static char tmpdir[] = "/tmp/sbx-test-guard-XXXXXX";

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

TestSuite(agent_guardrails, .init = setup, .fini = teardown);

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

#define GUARD_OK                                                               \
  "{\"name\": \"G\", \"output_type\": {\"type\": \"object\", \"properties\": " \
  "{\"tripwire_triggered\": {\"type\": \"boolean\"}}}}"

Test(agent_guardrails, both_kinds_are_read) {
  write_file("agents/guard.json", GUARD_OK);
  write_file(
      "agents/a.json",
      "{\"name\": \"A\", \"input_guardrails\": [{\"name\": \"no_pii\", "
      "\"agent\": \"guard.json\"}], \"output_guardrails\": [{\"name\": "
      "\"policy\", \"command\": [\"./check-output\", \"-v\"], "
      "\"timeout_s\": 10}, {\"name\": \"p2\", \"command\": [\"true\"]}]}");
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load("agents/a.json", &s, &e), 0, "%s", e.msg);
  const struct agent *a = s->agents[0];
  cr_assert_eq(a->ninput_guardrails, 1);
  cr_expect_str_eq(a->input_guardrails[0].name, "no_pii");
  cr_assert_not_null(a->input_guardrails[0].agent);
  cr_expect_str_eq(a->input_guardrails[0].agent->name, "G");
  cr_expect_null(a->input_guardrails[0].argv);
  cr_assert_eq(a->noutput_guardrails, 2);
  const struct agent_guardrail *g = &a->output_guardrails[0];
  cr_expect_str_eq(g->name, "policy");
  cr_expect_eq(g->timeout_s, 10);
  cr_expect_str_eq(g->argv[1], "-v");
  cr_expect_null(g->argv[2]);
  /* A relative program with a slash is taken from the file's directory;
   * a bare name is looked up in PATH. */
  char want[4200];
  (void)snprintf(want, sizeof(want), "%s/agents/./check-output", tmpdir);
  cr_expect_str_eq(g->argv[0], want);
  cr_expect_str_eq(a->output_guardrails[1].argv[0], "true");
  cr_expect_eq(a->output_guardrails[1].timeout_s, 60);
  agent_set_free(s);
}

Test(agent_guardrails, bad_keys_are_refused) {
  expect_error("{\"name\": \"A\", \"input_guardrails\": {}}", -EINVAL,
               "agents/a.json: \"input_guardrails\" must be an array of "
               "guardrail objects (got object)");
  expect_error("{\"name\": \"A\", \"input_guardrails\": [1]}", -EINVAL,
               "agents/a.json: \"input_guardrails[0]\" must be an object "
               "(got integer)");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"command\": "
               "[\"x\"]}]}",
               -EINVAL,
               "agents/a.json: missing required key "
               "\"output_guardrails[0].name\"");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"a b\", "
               "\"command\": [\"x\"]}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0].name\" must be a name "
               "of 1 to 64 letters, digits, \"_\" or \"-\"");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"g\"}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0]\" must have either "
               "\"agent\" (a guard agent file) or \"command\" (a program), "
               "not neither");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"g\", "
               "\"command\": [\"x\"], \"agent\": \"g.json\"}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0]\" must have either "
               "\"agent\" (a guard agent file) or \"command\" (a program), "
               "not both");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"g\", "
               "\"command\": []}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0].command\" must not be "
               "empty");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"g\", "
               "\"command\": [\"x\"], \"timeout_s\": 0}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0].timeout_s\" must be "
               "between 1 and 3600 seconds (got 0)");
  expect_error("{\"name\": \"A\", \"input_guardrails\": [{\"name\": \"g\", "
               "\"command\": [\"x\"], \"run_in_parallel\": false}]}",
               -EINVAL,
               "agents/a.json: unknown key "
               "\"input_guardrails[0].run_in_parallel\" (a guardrail has "
               "\"name\", and \"agent\" or \"command\" with \"timeout_s\")");
  expect_error("{\"name\": \"A\", \"input_guardrails\": [{\"name\": \"g\", "
               "\"command\": [\"x\"]}, {\"name\": \"g\", \"command\": "
               "[\"y\"]}]}",
               -EINVAL,
               "agents/a.json: \"input_guardrails[1].name\" repeats \"g\" of "
               "\"input_guardrails[0]\"");
  write_file("agents/guard.json", GUARD_OK);
  expect_error("{\"name\": \"A\", \"input_guardrails\": [{\"name\": \"g\", "
               "\"agent\": \"guard.json\", \"timeout_s\": 5}]}",
               -EINVAL,
               "agents/a.json: \"input_guardrails[0].timeout_s\" is not "
               "supported for a guard agent: it is a command's; a guard "
               "agent's run is bounded by its max_turns");
}

Test(agent_guardrails, guard_agents_are_checked) {
  expect_error("{\"name\": \"A\", \"input_guardrails\": [{\"name\": \"g\", "
               "\"agent\": \"none.json\"}]}",
               -ENOENT,
               "agents/none.json: cannot open (\"input_guardrails[0].agent\" "
               "of agents/a.json): No such file or directory");
  write_file("agents/guard.json", "{\"name\": \"G\"}");
  expect_error("{\"name\": \"A\", \"output_guardrails\": [{\"name\": \"g\", "
               "\"agent\": \"guard.json\"}]}",
               -EINVAL,
               "agents/a.json: \"output_guardrails[0].agent\": the guard "
               "agent agents/guard.json must have an output_type with a "
               "boolean \"tripwire_triggered\" property (and optionally "
               "\"output_info\")");
  /* A guard agent whose own guardrail leads back: nested runs without
   * end. */
  write_file("agents/guard.json",
             "{\"name\": \"G\", \"output_type\": {\"type\": \"object\", "
             "\"properties\": {\"tripwire_triggered\": {\"type\": "
             "\"boolean\"}}}, \"input_guardrails\": [{\"name\": \"g\", "
             "\"agent\": \"a.json\"}]}");
  expect_error("{\"name\": \"A\", \"output_type\": {\"type\": \"object\", "
               "\"properties\": {\"tripwire_triggered\": {\"type\": "
               "\"boolean\"}}}, \"input_guardrails\": [{\"name\": \"g\", "
               "\"agent\": \"guard.json\"}]}",
               -EINVAL,
               "agents/a.json: the guard agent agents/guard.json leads back "
               "to this agent: guard agents may not form a cycle");
}
