/* The skills capability end to end: the real sbx, a real sandboxd per run
 * and the scripted model server. Skills come from a local directory, from
 * a bare git repository made here, or lazily through load_skill; each test
 * checks what the model was sent (instructions, tools, load_skill's
 * output) and what the workspace holds (read back with exec_command). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-skills-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(skills, .init = setup, .fini = teardown, .timeout = 180);

static const char fixer_md[] = "---\n"
                               "name: credit-fixer\n"
                               "description: >\n"
                               "  Fixes credit notes\n"
                               "  in shell repos.\n"
                               "---\n"
                               "# Credit fixer\n\nRun scripts/check.sh.\n";

/* DIR/skills/{fixer,plain}: a skill with front matter and a script, and
 * one without front matter. */
static void write_skills(const char *root) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/fixer", root);
  cr_assert_eq(mkdir(root, 0755), 0);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/fixer/scripts", root);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/plain", root);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/fixer", root);
  test_write_file(p, "SKILL.md", fixer_md);
  (void)snprintf(p, sizeof(p), "%s/fixer/scripts", root);
  test_write_file(p, "check.sh", "echo checked\n");
  (void)snprintf(p, sizeof(p), "%s/plain", root);
  test_write_file(p, "SKILL.md", "Just text.\n");
}

struct fixture {
  struct test_model_server srv;
  struct sbx_run_out out;
  json_t *reqs;
};

/* Runs AGENT_JSON on SCRIPT; with STATE and SANDBOX, in that live
 * sandbox. */
static void run_in(struct fixture *f, const char *script,
                   const char *agent_json, const char *state,
                   const char *sandbox) {
  const char *path = test_write_file(dir, "agent.json", agent_json);
  char agent_path[256];
  (void)snprintf(agent_path, sizeof(agent_path), "%s", path);
  test_model_server_start(&f->srv, script, NULL);
  const char *argv[] = {"run", agent_path, "Fix it with $credit-fixer.", NULL};
  const char *live[] = {"run",
                        "--state-dir",
                        state,
                        "--sandbox",
                        sandbox,
                        agent_path,
                        "Fix it with $credit-fixer.",
                        NULL};
  sbx_run(&f->out, f->srv.base_url, sandbox ? live : argv);
  f->reqs = test_model_server_requests(&f->srv);
  test_model_server_stop(&f->srv);
}

static void run_script(struct fixture *f, const char *script,
                       const char *agent_json) {
  run_in(f, script, agent_json, NULL, NULL);
}

static void fixture_free(struct fixture *f) {
  json_decref(f->reqs);
  sbx_run_free(&f->out);
}

static const char *instructions(json_t *reqs) {
  return json_string_value(json_object_get(
      json_object_get(json_array_get(reqs, 0), "body"), "instructions"));
}

static json_t *find_tool(json_t *reqs, const char *name) {
  json_t *tools = json_object_get(
      json_object_get(json_array_get(reqs, 0), "body"), "tools");
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && strcmp(n, name) == 0)
      return t;
  }
  return NULL;
}

static const char lazy_agent[] =
    "{\"name\": \"Fixer\", \"model\": \"test-model\", \"run_as\": \"worker\",\n"
    " \"capabilities\": [\"filesystem\", \"shell\", {\"type\": \"skills\",\n"
    "   \"lazy_from\": {\"type\": \"local_dir\", \"src\": \"skills\"}}]}\n";

Test(skills, lazy_index_and_load_skill) {
  char root[128];
  (void)snprintf(root, sizeof(root), "%s/skills", dir);
  write_skills(root);
  if (geteuid() != 0)
    cr_skip_test("run_as needs root (sandboxd creates the user and "
                 "switches to it)");
  /* A developer-owned sandbox made for the agent (its run_as user), so
   * that the workspace can be read as root after the run: the local
   * backend's workspace root is root's alone. */
  char state[128], agent_path[256];
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  (void)snprintf(agent_path, sizeof(agent_path), "%s",
                 test_write_file(dir, "agent.json", lazy_agent));
  char *id = sbx_sandbox_line(
      state, (const char *const[]){"create", "--agent", agent_path, NULL});
  struct fixture f = {0};
  run_in(&f,
         "[{\"tool_calls\": [{\"name\": \"load_skill\", \"call_id\": \"c1\", "
         "\"arguments\": {\"skill_name\": \"credit-fixer\"}}]},"
         " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
         "\"arguments\": {\"cmd\": \"id -un\"}}]},"
         " {\"tool_calls\": [{\"name\": \"load_skill\", \"call_id\": \"c3\", "
         "\"arguments\": {\"skill_name\": \"fixer\"}},"
         " {\"name\": \"load_skill\", \"call_id\": \"c4\", "
         "\"arguments\": {\"skill_name\": \"nope\"}}]},"
         " {\"text\": \"done\"}]",
         lazy_agent, state, id);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 4);
  /* The skill is in the workspace, owned by run_as, and runs. */
  struct sbx_run_out ws = {0};
  sbx_sandbox_run(&ws, state,
                  (const char *const[]){
                      "exec", id, "--", "sh", "-c",
                      "stat -c '%U %n' .agents .agents/fixer "
                      ".agents/fixer/SKILL.md .agents/fixer/scripts/check.sh; "
                      "ls .agents; sh .agents/fixer/scripts/check.sh",
                      NULL});
  cr_expect_eq(ws.status, 0, "%s", ws.err);
  cr_expect_str_eq(ws.out, "worker .agents\nworker .agents/fixer\n"
                           "worker .agents/fixer/SKILL.md\n"
                           "worker .agents/fixer/scripts/check.sh\nfixer\n"
                           "checked\n");
  sbx_run_free(&ws);
  sbx_sandbox_remove_all(state);
  free(id);
  const char *ins = instructions(f.reqs);
  cr_assert_not_null(ins);
  const char *want =
      "# Sandbox capability instructions\n\nWhen using the shell:";
  cr_expect(strstr(ins, want) != NULL, "%s", ins);
  want = "\n\n## Skills\nA skill is a set of local instructions to follow that "
         "is stored in a `SKILL.md` file. Below is the list of skills that can "
         "be used. Each entry includes a name, description, and file path so "
         "you can open the source for full instructions when using a specific "
         "skill.\n\n### Available skills\n"
         "- credit-fixer: Fixes credit notes in shell repos. (file: "
         ".agents/fixer)\n"
         "- plain: No description provided. (file: .agents/plain)\n\n"
         "### Lazy loading\n- These skills are indexed for planning, but they "
         "are not materialized in the workspace yet.\n";
  cr_expect(strstr(ins, want) != NULL, "%s", ins);
  cr_expect(strstr(ins, "  1) After deciding to use a lazy skill, call "
                        "`load_skill` for that skill first, then open its "
                        "`SKILL.md`.\n") != NULL);
  /* The user's $mention goes to the model as written, as in the SDK. */
  char *input = json_dumps(
      json_object_get(json_object_get(json_array_get(f.reqs, 0), "body"),
                      "input"),
      0);
  cr_expect(input && strstr(input, "$credit-fixer") != NULL);
  free(input);
  json_t *t = find_tool(f.reqs, "load_skill");
  cr_assert_not_null(t);
  cr_expect_str_eq(json_string_value(json_object_get(t, "description")),
                   "Load a single lazily configured skill into the sandbox so "
                   "its SKILL.md, scripts, references, and assets can be read "
                   "from the workspace.");
  json_t *sn = json_object_get(
      json_object_get(json_object_get(t, "parameters"), "properties"),
      "skill_name");
  cr_expect_str_eq(json_string_value(json_object_get(sn, "type")), "string");
  cr_expect_eq(json_integer_value(json_object_get(sn, "minLength")), 1);
  cr_expect_str_eq(json_string_value(json_object_get(sn, "description")),
                   "Name of the lazily configured skill to materialize.");
  cr_expect_str_eq(test_call_output(f.reqs, 1, "c1"),
                   "{\"status\":\"loaded\",\"skill_name\":\"credit-fixer\","
                   "\"path\":\".agents/fixer\"}");
  const char *o = test_call_output(f.reqs, 2, "c2");
  cr_expect(o && strstr(o, "Output:\nworker\n") != NULL, "%s", o ? o : "-");
  cr_expect_str_eq(test_call_output(f.reqs, 3, "c3"),
                   "{\"status\":\"already_loaded\",\"skill_name\":\"credit-"
                   "fixer\",\"path\":\".agents/fixer\"}");
  cr_expect_str_eq(test_call_output(f.reqs, 3, "c4"),
                   "An error occurred while running the tool. Please try "
                   "again.");
  fixture_free(&f);
}

static const char from_agent_fmt[] =
    "{\"name\": \"Fixer\", \"model\": \"test-model\",\n"
    " \"capabilities\": [{\"type\": \"skills\", \"skills_path\": \"kit/sk\",\n"
    "   \"from\": %s}, \"shell\"]}\n";

/* Runs the "from" agent with SOURCE and checks that both skills are in
 * the instructions, listed from the workspace, and on disk. */
static void check_from(const char *source) {
  char agent[1024];
  (void)snprintf(agent, sizeof(agent), from_agent_fmt, source);
  struct fixture f = {0};
  run_script(&f,
             "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
             "\"c1\", \"arguments\": {\"cmd\": \"cat kit/sk/fixer/SKILL.md; "
             "ls -a kit/sk\"}}]}, {\"text\": \"done\"}]",
             agent);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  cr_assert_eq(json_array_size(f.reqs), 2);
  const char *ins = instructions(f.reqs);
  cr_assert_not_null(ins);
  /* Skills comes first in this agent's capabilities, so its fragment
   * does too. */
  cr_expect(strstr(ins, "# Sandbox capability instructions\n\n## Skills\n") !=
                NULL,
            "%s", ins);
  cr_expect(strstr(ins, "### Available skills\n- credit-fixer: Fixes credit "
                        "notes in shell repos. (file: kit/sk/fixer)\n- plain: "
                        "No description provided. (file: kit/sk/plain)\n\n"
                        "### How to use skills\n- Discovery: The list above "
                        "is the skills available in this session") != NULL,
            "%s", ins);
  cr_expect(strstr(ins, "### Lazy loading") == NULL);
  cr_expect(strstr(ins, ".\n\nWhen using the shell:") != NULL);
  cr_expect_null(find_tool(f.reqs, "load_skill"));
  const char *o = test_call_output(f.reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, fixer_md) != NULL, "%s", o);
  cr_expect(strstr(o, "fixer\nplain\n") != NULL, "%s", o);
  cr_expect(strstr(o, ".git") == NULL, "%s", o);
  fixture_free(&f);
}

Test(skills, from_local_dir) {
  char root[128];
  (void)snprintf(root, sizeof(root), "%s/skills", dir);
  write_skills(root);
  check_from("{\"type\": \"local_dir\", \"src\": \"skills\"}");
}

Test(skills, from_bare_git_repo) {
  char root[128], cmd[1024], src[256];
  (void)snprintf(root, sizeof(root), "%s/work", dir);
  cr_assert_eq(mkdir(root, 0755), 0);
  (void)snprintf(src, sizeof(src), "%s/work/skills", dir);
  write_skills(src);
  (void)snprintf(
      cmd, sizeof(cmd),
      "set -e; cd %s; git init -q --bare repo.git; cd work; git init -q; "
      "git add -A; git -c user.name=t -c user.email=t@t commit -qm skills; "
      "git push -q ../repo.git HEAD:refs/heads/main 2>/dev/null",
      dir);
  cr_assert_eq(system(cmd), 0);
  char source[512];
  (void)snprintf(source, sizeof(source),
                 "{\"type\": \"git_repo\", \"url\": \"file://%s/repo.git\", "
                 "\"ref\": \"main\", \"subpath\": \"skills\"}",
                 dir);
  check_from(source);
}

/* Runs sbx with AGENT and expects a configuration error naming WANT. */
static void refused(const char *agent, const char *want) {
  const char *path = test_write_file(dir, "bad.json", agent);
  char p[256];
  (void)snprintf(p, sizeof(p), "%s", path);
  struct sbx_run_out out = {0};
  const char *argv[] = {"run", p, "x", NULL};
  sbx_run(&out, "http://127.0.0.1:9/v1", argv);
  cr_expect_eq(out.status, 2, "%s: %s", want, out.err);
  cr_expect(strstr(out.err, want) != NULL, "want %s, got %s", want, out.err);
  sbx_run_free(&out);
}

#define AGENT(caps)                                                            \
  "{\"name\": \"A\", \"model\": \"m\", \"capabilities\": [" caps "]}"
#define LAZY "\"lazy_from\": {\"type\": \"local_dir\", \"src\": \"skills\"}"

Test(skills, refused_configurations) {
  char root[128];
  (void)snprintf(root, sizeof(root), "%s/skills", dir);
  write_skills(root);
  refused(AGENT("\"skills\""),
          "\"capabilities[0]\": skills capability requires `skills`, `from`, "
          "or `lazy_from`");
  refused(AGENT("{\"type\": \"skills\"}"), "requires `skills`, `from`");
  refused(AGENT("{\"type\": \"skills\", " LAZY ", \"from\": {\"type\": "
                "\"local_dir\", \"src\": \"skills\"}}"),
          "accepts only one of `skills`, `from`, or `lazy_from`");
  refused(AGENT("{\"type\": \"skills\", " LAZY ", \"index\": []}"),
          "\"capabilities[0]\": unknown key \"index\"");
  refused(AGENT("{\"type\": \"skills\", \"skills\": []}"),
          "\"capabilities[0].skills\": inline skills are not supported");
  refused(AGENT("{\"type\": \"skills\", \"lazy_from\": {\"type\": "
                "\"local_dir\", \"src\": \"skills\", \"x\": 1}}"),
          "unknown key \"x\"");
  refused(AGENT("{\"type\": \"skills\", \"lazy_from\": {\"type\": "
                "\"git_repo\", \"url\": \"file:///x\"}}"),
          "lazy skill sources are local_dir only (got \"git_repo\")");
  refused(AGENT("{\"type\": \"skills\", \"from\": {\"type\": \"dir\"}}"),
          "skills from must be a directory-like entry: local_dir or git_repo "
          "(got \"dir\")");
  refused(AGENT("{\"type\": \"skills\", \"from\": {\"type\": \"local_dir\", "
                "\"src\": \"skills\", \"colour\": 1}}"),
          "colour");
  refused(AGENT("{\"type\": \"skills\", \"skills_path\": \"../up\", " LAZY "}"),
          "\"capabilities[0].skills_path\" must be a non-empty relative path");
  refused(AGENT("{\"type\": \"skills\", \"lazy_from\": {\"type\": "
                "\"local_dir\", \"src\": \"missing\"}}"),
          "\"capabilities[0].lazy_from.src\": \"missing\"");
  refused(AGENT("{\"type\": \"network\"}"),
          "\"capabilities[0].type\" must be one of");
  refused("{\"name\": \"A\", \"model\": \"m\", \"capabilities\": [{\"type\": "
          "\"skills\", \"from\": {\"type\": \"local_dir\", \"src\": "
          "\"skills\"}}], \"default_manifest\": {\"entries\": {\".agents/x\": "
          "{\"type\": \"file\", \"content\": \"\"}}}}",
          "bad.json: skills path overlaps existing manifest entries: "
          ".agents/x");
  refused("{\"name\": \"A\", \"model\": \"m\", \"capabilities\": [{\"type\": "
          "\"skills\", " LAZY "}], \"default_manifest\": {\"entries\": {"
          "\"b\": {\"type\": \"dir\"}, \"./.agents/y/\": {\"type\": \"dir\"}, "
          "\".agents/x\": {\"type\": \"dir\"}, \".agentsx\": {\"type\": "
          "\"dir\"}, \".\": {\"type\": \"dir\"}}}}",
          "bad.json: skills lazy_from path overlaps existing manifest "
          "entries: .agents/x, .agents/y");
}

Test(skills, bad_and_oversized_skill_files) {
  char root[128], p[256];
  (void)snprintf(root, sizeof(root), "%s/skills", dir);
  write_skills(root);
  (void)snprintf(p, sizeof(p), "%s/skills/bad", dir);
  cr_assert_eq(mkdir(p, 0755), 0);
  test_write_file(p, "SKILL.md", "---\nname: b\xff\n---\n");
  refused(AGENT("{\"type\": \"skills\", " LAZY "}"), "bad SKILL.md: ");
  refused(AGENT("{\"type\": \"skills\", " LAZY "}"),
          "/skills/bad/SKILL.md is not UTF-8 text");
  size_t big = (256u << 10) + 1;
  char *text = malloc(big + 1);
  cr_assert_not_null(text);
  memset(text, 'x', big);
  text[big] = '\0';
  test_write_file(p, "SKILL.md", text);
  free(text);
  refused(AGENT("{\"type\": \"skills\", " LAZY "}"),
          "/skills/bad/SKILL.md is over 262144 bytes");
  /* At most 256 skills are read from a source. */
  cr_assert_eq(test_rm_rf(p), 0);
  for (int i = 0; i < 255; i++) {
    char d[256];
    (void)snprintf(d, sizeof(d), "%s/skills/s%03d", dir, i);
    cr_assert_eq(mkdir(d, 0755), 0);
    test_write_file(d, "SKILL.md", "x\n");
  }
  refused(AGENT("{\"type\": \"skills\", " LAZY "}"),
          "/skills\" holds more than 256 skills");
  for (int i = 0; i < 255; i++) {
    char d[256];
    (void)snprintf(d, sizeof(d), "%s/skills/s%03d", dir, i);
    cr_assert_eq(test_rm_rf(d), 0);
  }
  /* A symbolic link in the source is skipped, as the SDK skips it. */
  (void)snprintf(p, sizeof(p), "%s/skills/link", dir);
  cr_assert_eq(symlink("/etc", p), 0);
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             AGENT("\"shell\", {\"type\": \"skills\", " LAZY "}"));
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *ins = instructions(f.reqs);
  cr_assert_not_null(ins);
  cr_expect(strstr(ins, "(file: .agents/link)") == NULL, "%s", ins);
  cr_expect(strstr(ins, "(file: .agents/plain)") != NULL, "%s", ins);
  fixture_free(&f);
}

/* With a run cwd the listed paths and load_skill's are absolute, as the
 * SDK's modelResourcePath makes them. */
Test(skills, paths_are_absolute_with_a_run_cwd) {
  char root[128];
  (void)snprintf(root, sizeof(root), "%s/skills", dir);
  write_skills(root);
  const char *path = test_write_file(
      dir, "agent.json",
      "{\"name\": \"A\", \"model\": \"m\", \"default_manifest\": {\"entries\": "
      "{\"repo\": {\"type\": \"dir\"}}}, \"capabilities\": [\"shell\", "
      "{\"type\": \"skills\", " LAZY "}]}");
  char agent_path[256];
  (void)snprintf(agent_path, sizeof(agent_path), "%s", path);
  struct fixture f = {0};
  test_model_server_start(
      &f.srv,
      "[{\"tool_calls\": [{\"name\": \"load_skill\", \"call_id\": \"c1\", "
      "\"arguments\": {\"skill_name\": \"plain\"}}]}, {\"text\": \"done\"}]",
      NULL);
  const char *argv[] = {"run", "--cwd", "repo", agent_path, "x", NULL};
  sbx_run(&f.out, f.srv.base_url, argv);
  f.reqs = test_model_server_requests(&f.srv);
  test_model_server_stop(&f.srv);
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *ins = instructions(f.reqs);
  cr_assert_not_null(ins);
  cr_expect(strstr(ins, "- plain: No description provided. (file: "
                        "/workspace/.agents/plain)") != NULL,
            "%s", ins);
  cr_expect_str_eq(test_call_output(f.reqs, 1, "c1"),
                   "{\"status\":\"loaded\",\"skill_name\":\"plain\",\"path\":"
                   "\"/workspace/.agents/plain\"}");
  fixture_free(&f);
}

/* A "from" source without skills gets the SDK's discovery text. */
Test(skills, from_without_skills_says_where_to_discover_them) {
  char root[128];
  (void)snprintf(root, sizeof(root), "%s/empty", dir);
  cr_assert_eq(mkdir(root, 0755), 0);
  struct fixture f = {0};
  run_script(&f, "[{\"text\": \"done\"}]",
             AGENT("{\"type\": \"skills\", \"from\": {\"type\": "
                   "\"local_dir\", \"src\": \"empty\"}}"));
  cr_expect_eq(f.out.status, 0, "stderr: %s", f.out.err);
  const char *ins = instructions(f.reqs);
  cr_assert_not_null(ins);
  cr_expect(strstr(ins, "skill.\n\n### Skill source\n- Skills are materialized "
                        "under .agents. Discover available skills by "
                        "inspecting child directories and their SKILL.md "
                        "files at runtime.\n\n### How to use skills\n") != NULL,
            "%s", ins);
  fixture_free(&f);
}
