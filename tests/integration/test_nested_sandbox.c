/* Agents used as tools in their caller's live sandbox ("run_config":
 * {"sandbox": "parent"} on the agent_as_tool entry): the real sbx, a real
 * sandboxd and the scripted model server. The nested agent sees and writes
 * the caller's workspace, runs as its own run_as with its own turn budget,
 * and an approval it needs pauses the whole run, which resumes in the same
 * sandbox. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-nested-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(nested_sandbox, .init = setup, .fini = teardown, .timeout = 180);

/* Writes the two agents: Lead, with LEAD_EXTRA keys, which uses Explorer
 * (EXPLORER_JSON) as the tool "explore" with the entry's extra keys
 * TOOL_EXTRA. Returns Lead's path (static). */
static const char *agents(const char *lead_extra, const char *tool_extra,
                          const char *explorer_json) {
  static char path[256];
  (void)test_write_file(dir, "explorer.json", explorer_json);
  char lead[2048];
  (void)snprintf(lead, sizeof(lead),
                 "{\"name\": \"Lead\", \"default_manifest\": {%s\"entries\": "
                 "{\"lead.txt\": {\"type\": \"file\", \"content\": \"from "
                 "lead\\n\"}}}, \"tools\": [{\"type\": \"agent_as_tool\", "
                 "\"agent\": \"explorer.json\", \"name\": \"explore\"%s}]}",
                 lead_extra, tool_extra);
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "lead.json", lead));
  return path;
}

#define PARENT ", \"run_config\": {\"sandbox\": \"parent\"}"

/* Runs sbx run EXTRA... LEAD "Do the task." on SCRIPT into *OUT; the
 * requests the model server received into *REQS (new). */
static void run(const char *script, const char *lead, const char *const *extra,
                struct sbx_run_out *out, json_t **reqs) {
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  const char *argv[16];
  size_t n = 0;
  argv[n++] = "run";
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n++] = lead;
  argv[n++] = "Do the task.";
  argv[n] = NULL;
  sbx_run(out, srv.base_url, argv);
  *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
}

/* The events of TEXT (--stream's lines) of TYPE, in order (new). */
static json_t *events_of(const char *text, const char *type) {
  json_t *all = json_array();
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    json_error_t je;
    json_t *ev = json_loadb(p, len, 0, &je);
    const char *t = json_string_value(json_object_get(ev, "type"));
    if (t && strcmp(t, type) == 0)
      json_array_append(all, ev);
    json_decref(ev);
    p = nl ? nl + 1 : NULL;
  }
  return all;
}

static const char *sv(json_t *o, const char *key) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : "(none)";
}

/* How many tool_call_started events of TEXT are for CALL_ID. */
static size_t started(const char *text, const char *call_id) {
  json_t *evs = events_of(text, "tool_call_started");
  size_t n = 0;
  for (size_t i = 0; i < json_array_size(evs); i++)
    n += strcmp(sv(json_array_get(evs, i), "call_id"), call_id) == 0;
  json_decref(evs);
  return n;
}

/* Resumes the run RS with --stream against BASE_URL: expects it to finish
 * with WANT, and that it did not start the call DONE again. */
static void resume_to(const char *rs, const char *base_url, const char *want,
                      const char *done) {
  struct sbx_run_out r;
  sbx_run(&r, base_url,
          (const char *const[]){"run", "--state-dir", state, "--stream",
                                "--resume", rs, NULL});
  cr_expect_eq(r.status, 0, "%s", r.err);
  json_t *fin = events_of(r.out, "run_finished");
  cr_expect_str_eq(sv(json_array_get(fin, 0), "final_output"), want);
  json_decref(fin);
  cr_expect_eq(started(r.out, done), 0, "%s ran again:\n%s", done, r.out);
  cr_expect_eq(started(r.out, "t1"), 1, "%s", r.out);
  sbx_run_free(&r);
}

/* The explorer reads the lead's file and writes one of its own, which the
 * lead then reads. */
static const char share_script[] =
    "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
    "\"arguments\": {\"input\": \"look around\"}}]},"
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
    "\"arguments\": {\"cmd\": \"cat lead.txt && echo from-explorer > "
    "explorer.txt\"}}]},"
    " {\"text\": \"explored\"},"
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l1\", "
    "\"arguments\": {\"cmd\": \"cat explorer.txt\"}}]},"
    " {\"text\": \"done\"}]";

Test(nested_sandbox, works_in_the_callers_workspace) {
  const char *lead = agents("", PARENT, "{\"name\": \"Explorer\"}");
  struct sbx_run_out out;
  json_t *reqs;
  run(share_script, lead, (const char *const[]){"--stream", NULL}, &out, &reqs);
  cr_assert_eq(out.status, 0, "%s", out.err);
  cr_assert_eq(json_array_size(reqs), 5);
  const char *e1 = test_call_output(reqs, 2, "e1");
  cr_expect(e1 && strstr(e1, "Output:\nfrom lead\n"), "%s", e1 ? e1 : "-");
  cr_expect_str_eq(test_call_output(reqs, 3, "t1"), "explored");
  const char *l1 = test_call_output(reqs, 4, "l1");
  cr_expect(l1 && strstr(l1, "Output:\nfrom-explorer\n"), "%s", l1 ? l1 : "-");
  /* Its instructions describe the workspace it works in: the caller's. */
  const char *ins = json_string_value(json_object_get(
      json_object_get(json_array_get(reqs, 1), "body"), "instructions"));
  cr_expect(ins && strstr(ins, "lead.txt"), "%s", ins ? ins : "-");
  /* One sandbox: the explorer's is the lead's, attached, not created. */
  json_t *sbs = events_of(out.out, "sandbox_created");
  cr_assert_eq(json_array_size(sbs), 2, "%s", out.out);
  json_t *a = json_array_get(sbs, 0), *b = json_array_get(sbs, 1);
  cr_expect_str_eq(sv(a, "agent"), "Lead");
  cr_expect(json_is_false(json_object_get(a, "attached")));
  cr_expect_str_eq(sv(b, "agent"), "Explorer");
  cr_expect_eq(json_integer_value(json_object_get(b, "depth")), 1);
  cr_expect(json_is_true(json_object_get(b, "attached")));
  cr_expect_str_eq(sv(b, "session_id"), sv(a, "session_id"));
  json_decref(sbs);
  json_decref(reqs);
  sbx_run_free(&out);

  /* Without it, the explorer has a workspace of its own. */
  lead = agents("", "", "{\"name\": \"Explorer\"}");
  run(share_script, lead, NULL, &out, &reqs);
  e1 = test_call_output(reqs, 2, "e1");
  cr_expect(e1 && strstr(e1, "No such file"), "%s", e1 ? e1 : "-");
  l1 = test_call_output(reqs, 4, "l1");
  cr_expect(l1 && strstr(l1, "No such file"), "%s", l1 ? l1 : "-");
  json_decref(reqs);
  sbx_run_free(&out);
}

/* With --sandbox, the caller's sandbox is the developer's: the explorer
 * works there too, and leaves it running. */
Test(nested_sandbox, works_in_the_developers_sandbox_with_the_caller) {
  const char *lead = agents("", PARENT, "{\"name\": \"Explorer\"}");
  char *id = sbx_sandbox_line(state, (const char *const[]){"create", NULL});
  cr_assert_not_null(id);
  id[strcspn(id, "\n")] = '\0';
  struct sbx_run_out out;
  sbx_sandbox_run(&out, state,
                  (const char *const[]){"exec", id, "--", "sh", "-c",
                                        "echo by-dev > dev.txt", NULL});
  cr_assert_eq(out.status, 0, "%s", out.err);
  sbx_run_free(&out);
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
      "\"arguments\": {\"input\": \"look\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
      "\"arguments\": {\"cmd\": \"cat dev.txt lead.txt && echo by-explorer > "
      "explorer.txt\"}}]},"
      " {\"text\": \"explored\"},"
      " {\"text\": \"done\"}]";
  json_t *reqs;
  run(script, lead,
      (const char *const[]){"--state-dir", state, "--sandbox", id, NULL}, &out,
      &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  const char *e1 = test_call_output(reqs, 2, "e1");
  cr_expect(e1 && strstr(e1, "Output:\nby-dev\nfrom lead\n"), "%s",
            e1 ? e1 : "-");
  json_decref(reqs);
  sbx_run_free(&out);
  /* The sandbox is still there, with what the explorer wrote. */
  sbx_sandbox_run(
      &out, state,
      (const char *const[]){"exec", id, "--", "cat", "explorer.txt", NULL});
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_str_eq(out.out, "by-explorer\n");
  sbx_run_free(&out);
  free(id);
}

Test(nested_sandbox, its_run_as_applies) {
  if (geteuid() != 0)
    cr_skip_test("run_as needs root (sandboxd creates the user and "
                 "switches to it)");
  const char *lead =
      agents("\"users\": [\"sbxnestu\"], ", PARENT,
             "{\"name\": \"Explorer\", \"run_as\": \"sbxnestu\"}");
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
      "\"arguments\": {\"input\": \"who are you?\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
      "\"arguments\": {\"cmd\": \"id -un && echo x > /tmp/by-explorer && "
      "stat -c %U lead.txt\"}}]},"
      " {\"text\": \"I am sbxnestu\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l1\", "
      "\"arguments\": {\"cmd\": \"id -un; stat -c %U /tmp/by-explorer\"}}]},"
      " {\"text\": \"done\"}]";
  struct sbx_run_out out;
  json_t *reqs;
  run(script, lead, NULL, &out, &reqs);
  cr_assert_eq(out.status, 0, "%s", out.err);
  const char *e1 = test_call_output(reqs, 2, "e1");
  cr_expect(e1 && strstr(e1, "Output:\nsbxnestu\n"), "%s", e1 ? e1 : "-");
  const char *l1 = test_call_output(reqs, 4, "l1");
  cr_expect(l1 && strstr(l1, "Output:\nroot\nsbxnestu\n"), "%s", l1 ? l1 : "-");
  json_decref(reqs);
  sbx_run_free(&out);

  /* A run_as the caller's sandbox does not have fails the run, naming it. */
  lead =
      agents("", PARENT, "{\"name\": \"Explorer\", \"run_as\": \"nobodyx\"}");
  run(script, lead, NULL, &out, &reqs);
  cr_expect_eq(out.status, 2, "%s", out.err);
  cr_expect(strstr(out.err, "run_as \"nobodyx\" of agent \"Explorer\" is not a "
                            "user of its caller's sandbox"),
            "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);
}

Test(nested_sandbox, its_max_turns_applies) {
  const char *lead = agents("", PARENT ", \"max_turns\": 2",
                            "{\"name\": \"Explorer\", \"max_turns\": 9}");
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
      "\"arguments\": {\"input\": \"loop\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
      "\"arguments\": {\"cmd\": \"true\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e2\", "
      "\"arguments\": {\"cmd\": \"true\"}}]},"
      " {\"text\": \"never asked\"}]";
  struct sbx_run_out out;
  json_t *reqs;
  run(script, lead, NULL, &out, &reqs);
  cr_expect_eq(out.status, 1, "%s", out.err);
  cr_expect(strstr(out.err, "max turns (2) exceeded"), "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 3);
  json_decref(reqs);
  sbx_run_free(&out);
}

/* The run id that the stderr of a paused run names (new). */
static char *paused_run(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  size_t n = strcspn(p, " \n");
  cr_assert(strncmp(p + n, " is waiting for approval", 24) == 0, "%s", err);
  return strndup(p, n);
}

Test(nested_sandbox, approval_inside_pauses_the_run_and_resumes_there) {
  const char *lead =
      agents("", PARENT,
             "{\"name\": \"Explorer\", \"approvals\": {\"exec_command\": "
             "\"always\"}}");
  /* After a first turn, the lead counts in the same turn as, and in
   * parallel with, the explorer: that call is done when the run pauses,
   * and not run again. */
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"s0\", "
      "\"arguments\": {\"cmd\": \"true\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l0\", "
      "\"arguments\": {\"cmd\": \"echo once >> count.txt\"}}, {\"name\": "
      "\"explore\", \"call_id\": \"t1\", \"arguments\": {\"input\": "
      "\"write\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
      "\"arguments\": {\"cmd\": \"echo approved > approved.txt\"}}]},"
      " {\"text\": \"written\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l1\", "
      "\"arguments\": {\"cmd\": \"cat approved.txt count.txt\"}}]},"
      " {\"text\": \"all done\"}]";
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url,
          (const char *const[]){"run", "--state-dir", state, "--stream", lead,
                                "Do the task.", NULL});
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_run(r.err);
  /* The approval is the explorer's, named in the events. */
  json_t *ap = events_of(r.out, "approval_requested");
  cr_assert_eq(json_array_size(ap), 1, "%s", r.out);
  json_t *a = json_array_get(ap, 0);
  cr_expect_str_eq(sv(a, "agent"), "Explorer");
  cr_expect_eq(json_integer_value(json_object_get(a, "depth")), 1);
  cr_expect_str_eq(sv(a, "call_id"), "e1");
  json_decref(ap);
  json_t *fin = events_of(r.out, "tool_call_finished");
  const char *t1_status = NULL;
  for (size_t i = 0; i < json_array_size(fin); i++)
    if (strcmp(sv(json_array_get(fin, i), "call_id"), "t1") == 0)
      t1_status = sv(json_array_get(fin, i), "status");
  cr_expect(t1_status && strcmp(t1_status, "paused") == 0, "%s", r.out);
  json_decref(fin);
  json_t *paused = events_of(r.out, "run_paused");
  cr_expect_eq(json_array_size(paused), 1, "%s", r.out);
  json_decref(paused);
  sbx_run_free(&r);

  sbx_run(
      &r, NULL,
      (const char *const[]){"approve", "--state-dir", state, rs, "e1", NULL});
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  resume_to(rs, srv.base_url, "all done", "l0");
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 6, "no model call was repeated");
  const char *e1 = test_call_output(reqs, 3, "e1");
  cr_expect(e1 && strstr(e1, "Process exited with code 0"), "%s",
            e1 ? e1 : "-");
  /* The nested conversation went on from where it paused. */
  json_t *in = json_object_get(json_object_get(json_array_get(reqs, 3), "body"),
                               "input");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(in, 0), "content")),
      "write");
  cr_expect_str_eq(test_call_output(reqs, 4, "t1"), "written");
  const char *l1 = test_call_output(reqs, 5, "l1");
  cr_expect(l1 && strstr(l1, "Output:\napproved\nonce\nProcess") == NULL &&
                strstr(l1, "Output:\napproved\nonce\n"),
            "the approved call wrote in the lead's sandbox, and l0 ran "
            "once: %s",
            l1 ? l1 : "-");
  char *status = test_run_status(state, rs);
  cr_expect_str_eq(status ? status : "", "completed");
  free(status);
  json_decref(reqs);
  free(rs);
}

/* Two levels down: Lead uses Explorer, which uses Digger, each in its
 * caller's sandbox. Digger's approval pauses the whole run; Explorer's
 * call done beside it in the same turn is not run again on the resume. */
Test(nested_sandbox, approval_two_levels_down_resumes_each_level) {
  (void)test_write_file(dir, "digger.json",
                        "{\"name\": \"Digger\", \"approvals\": "
                        "{\"exec_command\": \"always\"}}");
  (void)test_write_file(
      dir, "explorer.json",
      "{\"name\": \"Explorer\", \"tools\": [{\"type\": \"agent_as_tool\", "
      "\"agent\": \"digger.json\", \"name\": \"dig\"" PARENT "}]}");
  char lead[256];
  (void)snprintf(
      lead, sizeof(lead), "%s",
      test_write_file(dir, "lead.json",
                      "{\"name\": \"Lead\", \"tools\": [{\"type\": "
                      "\"agent_as_tool\", \"agent\": \"explorer.json\", "
                      "\"name\": \"explore\"" PARENT "}]}"));
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
      "\"arguments\": {\"input\": \"go\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"x1\", "
      "\"arguments\": {\"cmd\": \"true\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"x2\", "
      "\"arguments\": {\"cmd\": \"echo once >> count.txt\"}}, {\"name\": "
      "\"dig\", \"call_id\": \"d1\", \"arguments\": {\"input\": "
      "\"dig\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"g1\", "
      "\"arguments\": {\"cmd\": \"echo dug > dug.txt\"}}]},"
      " {\"text\": \"dug\"},"
      " {\"text\": \"explored\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l1\", "
      "\"arguments\": {\"cmd\": \"cat dug.txt count.txt\"}}]},"
      " {\"text\": \"all done\"}]";
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url,
          (const char *const[]){"run", "--state-dir", state, "--stream", lead,
                                "Do the task.", NULL});
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_run(r.err);
  json_t *ap = events_of(r.out, "approval_requested");
  cr_expect_str_eq(sv(json_array_get(ap, 0), "agent"), "Digger");
  cr_expect_eq(
      json_integer_value(json_object_get(json_array_get(ap, 0), "depth")), 2);
  json_decref(ap);
  sbx_run_free(&r);
  sbx_run(
      &r, NULL,
      (const char *const[]){"approve", "--state-dir", state, rs, "g1", NULL});
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  resume_to(rs, srv.base_url, "all done", "x2");
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 8, "no model call was repeated");
  const char *l1 = test_call_output(reqs, 7, "l1");
  cr_expect(l1 && strstr(l1, "Output:\ndug\nonce\n") &&
                !strstr(l1, "once\nonce"),
            "%s", l1 ? l1 : "-");
  json_decref(reqs);
  free(rs);
}

Test(nested_sandbox, rejected_inside_reaches_the_nested_model) {
  const char *lead =
      agents("", PARENT,
             "{\"name\": \"Explorer\", \"approvals\": {\"exec_command\": "
             "\"always\"}}");
  static const char script[] =
      "[{\"tool_calls\": [{\"name\": \"explore\", \"call_id\": \"t1\", "
      "\"arguments\": {\"input\": \"delete\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"e1\", "
      "\"arguments\": {\"cmd\": \"rm lead.txt\"}}]},"
      " {\"text\": \"not deleted\"},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"l1\", "
      "\"arguments\": {\"cmd\": \"cat lead.txt\"}}]},"
      " {\"text\": \"kept\"}]";
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url,
          (const char *const[]){"run", "--state-dir", state, lead,
                                "Do the task.", NULL});
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_run(r.err);
  sbx_run_free(&r);
  sbx_run(&r, NULL,
          (const char *const[]){"reject", "--state-dir", state, rs, "e1",
                                "--reason", "keep it", NULL});
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  sbx_run(
      &r, srv.base_url,
      (const char *const[]){"run", "--state-dir", state, "--resume", rs, NULL});
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "kept\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_str_eq(test_call_output(reqs, 2, "e1"),
                   "The user rejected this tool call: keep it");
  const char *l1 = test_call_output(reqs, 4, "l1");
  cr_expect(l1 && strstr(l1, "Output:\nfrom lead\n"), "%s", l1 ? l1 : "-");
  json_decref(reqs);
  free(rs);
}

Test(nested_sandbox, refusals) {
  struct sbx_run_out out;
  json_t *reqs;
  /* No sandbox to share: refused before any model call. */
  (void)test_write_file(dir, "explorer.json", "{\"name\": \"Explorer\"}");
  const char *lead = test_write_file(
      dir, "nosb.json",
      "{\"name\": \"Lead\", \"capabilities\": [], \"tools\": [{\"type\": "
      "\"agent_as_tool\", \"agent\": \"explorer.json\", \"run_config\": "
      "{\"sandbox\": \"parent\"}}]}");
  char path[256];
  (void)snprintf(path, sizeof(path), "%s", lead);
  run(share_script, path, NULL, &out, &reqs);
  cr_expect_eq(out.status, 2, "%s", out.err);
  cr_expect(strstr(out.err, "nosb.json: \"tools[0].run_config.sandbox\" is "
                            "\"parent\", but agent \"Lead\" has no sandbox "
                            "to share"),
            "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 0);
  json_decref(reqs);
  sbx_run_free(&out);

  /* Another value, by name. */
  lead = agents("", ", \"run_config\": {\"sandbox\": \"new\"}",
                "{\"name\": \"Explorer\"}");
  run(share_script, lead, NULL, &out, &reqs);
  cr_expect_eq(out.status, 2, "%s", out.err);
  cr_expect(strstr(out.err, "\"tools[0].run_config.sandbox\" must be "
                            "\"parent\" (got \"new\")"),
            "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);

  /* An approval inside an agent with a sandbox of its own still cannot
   * pause the run. */
  lead = agents("", "",
                "{\"name\": \"Explorer\", \"approvals\": {\"exec_command\": "
                "\"always\"}}");
  run(share_script, lead, (const char *const[]){"--state-dir", state, NULL},
      &out, &reqs);
  cr_expect_eq(out.status, 1, "%s", out.err);
  cr_expect(strstr(out.err, "a run cannot pause inside an agent used as a "
                            "tool that has a sandbox of its own"),
            "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);
}
