/* Run state, approvals and crash safety: runs that pause for approval and
 * are resumed from another process, and runs killed with SIGKILL at
 * several points and resumed to the same answer, with no tool call run
 * twice. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-resume-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

/* Removes every sandbox left in the state dir, then the temp dir. */
static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(resume, .init = setup, .fini = teardown, .timeout = 180);

static const char *write_agent(const char *json) {
  static char path[128];
  (void)snprintf(path, sizeof(path), "%s",
                 test_write_file(dir, "a.json", json));
  return path;
}

/* The run id that the stderr of a paused run names. */
static char *paused_state(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  size_t n = strcspn(p, " \n");
  cr_assert(strncmp(p + n, " is waiting for approval", 24) == 0, "%s", err);
  return strndup(p, n);
}

/* Approves CALL in the paused run state RS, resumes it against the model
 * server at BASE_URL and expects it to finish with WANT on stdout. */
static void approve_and_resume(const char *rs, const char *call,
                               const char *base_url, const char *want) {
  struct sbx_run_out r;
  const char *ok[] = {"approve", "--state-dir", state, rs, call, NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, want);
  sbx_run_free(&r);
}

Test(resume, paused_for_approval_approved_from_another_process) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"exec_command\": [\"cat\"]}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"echo made > made.txt\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"cat made.txt\"}}]},"
      " {\"text\": \"all done\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "make a file", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_state(r.err);
  sbx_run_free(&r);
  /* Nothing ran yet. */
  const char *bad[] = {"approve", "--state-dir", state, rs, "nope", NULL};
  sbx_run(&r, NULL, bad);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "has no call \"nope\" waiting for approval") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
  approve_and_resume(rs, "w1", srv.base_url, "all done\n");
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 3, "no model call was repeated");
  const char *w = test_call_output(reqs, -1, "w1");
  cr_assert_not_null(w);
  cr_expect(strstr(w, "Process exited with code 0") != NULL, "%s", w);
  const char *c = test_call_output(reqs, -1, "r1");
  cr_assert_not_null(c);
  cr_expect(strstr(c, "Output:\nmade\n") != NULL,
            "the approved call ran in "
            "the same sandbox: %s",
            c);
  /* A finished run keeps its conversation (for --continue), not its
   * sandboxes. */
  json_t *kept = test_run_state_json(state, rs);
  cr_expect_str_eq(json_string_value(json_object_get(kept, "status")),
                   "finished");
  json_decref(kept);
  char *status = test_run_status(state, rs);
  cr_expect_str_eq(status, "completed");
  free(status);
  json_decref(reqs);
  free(rs);
}

/* The SDK's reset_tool_choice holds across a kill: an agent that has
 * called tools is not forced to call one again by the process that
 * resumes it (the run state keeps which agents have called tools). */
Test(resume, tool_choice_stays_reset_after_a_resume) {
  const char *a = write_agent("{\"name\": \"A\", \"model_settings\": "
                              "{\"tool_choice\": \"required\"}}");
  static const char script[] =
      "{\"by_turn\": true, \"steps\": ["
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"true\"}}]},"
      " {\"delay_ms\": 3000, \"text\": \"all done\"}]}";
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  const char *run[] = {"run", "--state-dir", state, a, "go", NULL};
  pid_t pid = sbx_spawn(srv.base_url, NULL, 0, run);
  /* Killed while it waits for the second answer, its first turn done. */
  size_t n = 0;
  for (int i = 0; i < 400 && n < 2; i++) {
    (void)nanosleep(&(struct timespec){0, 25 * 1000 * 1000}, NULL);
    json_t *reqs = test_model_server_requests(&srv);
    n = json_array_size(reqs);
    json_decref(reqs);
  }
  cr_assert_eq(n, 2, "the second model call was never made");
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  char *rs = test_run_state(state);
  cr_assert_not_null(rs);
  struct sbx_run_out r;
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "all done\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_assert_eq(json_array_size(reqs), 3);
  json_t *b0 = json_object_get(json_array_get(reqs, 0), "body");
  json_t *b2 = json_object_get(json_array_get(reqs, 2), "body");
  cr_expect_str_eq(json_string_value(json_object_get(b0, "tool_choice")),
                   "required");
  cr_expect_null(json_object_get(b2, "tool_choice"),
                 "reset, also in the process that resumed");
  json_decref(reqs);
  free(rs);
}

Test(resume, rejected_call_reason_reaches_the_model) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"exec_command\": \"always\"}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"x1\", "
      "\"arguments\": {\"cmd\": \"rm -rf /tmp/whatever\"}}]},"
      " {\"text\": \"ok, not deleting\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "clean up", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "%s", r.err);
  char *rs = paused_state(r.err);
  sbx_run_free(&r);
  const char *rej[] = {"reject", "--state-dir", state,       rs,
                       "x1",     "--reason",    "too risky", NULL};
  sbx_run(&r, NULL, rej);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "ok, not deleting\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_str_eq(test_call_output(reqs, -1, "x1"),
                   "The user rejected this tool call: too risky");
  json_decref(reqs);
  free(rs);
}

Test(resume, killed_at_five_points_resumes_to_the_same_answer) {
  const char *a = write_agent("{\"name\": \"A\"}");
  static const char script[] =
      "{\"by_turn\": true, \"steps\": ["
      " {\"delay_ms\": 400, \"tool_calls\": [{\"name\": \"exec_command\", "
      "\"call_id\": \"c1\", \"arguments\": {\"cmd\": \"echo one >> "
      "runs.log; sleep 1\"}}]},"
      " {\"delay_ms\": 400, \"tool_calls\": [{\"name\": \"exec_command\", "
      "\"call_id\": \"c2\", \"arguments\": {\"cmd\": \"echo two >> "
      "runs.log; sleep 1\"}}]},"
      " {\"delay_ms\": 400, \"tool_calls\": [{\"name\": \"exec_command\", "
      "\"call_id\": \"c3\", \"arguments\": {\"cmd\": \"cat runs.log\"}}]},"
      " {\"delay_ms\": 400, \"text\": \"the log has two lines\"}]}";
  /* Milliseconds after start: during the first model call, during the
   * first command, during the second model call, during the second
   * command, during the last model calls. */
  const int kill_at[] = {250, 1100, 1700, 2600, 3500};
  for (size_t k = 0; k < sizeof(kill_at) / sizeof(kill_at[0]); k++) {
    char runs[160];
    (void)snprintf(runs, sizeof(runs), "%s/runs", state);
    (void)test_rm_rf(runs);
    struct test_model_server srv;
    test_model_server_start(&srv, script, NULL);
    const char *run[] = {"run", "--state-dir", state, a, "log twice", NULL};
    pid_t pid = sbx_spawn(srv.base_url, NULL, 0, run);
    struct timespec ts = {kill_at[k] / 1000, (kill_at[k] % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    char *rs = test_run_state(state);
    /* From the first model answer on, a state exists to resume from. */
    if (kill_at[k] >= 1000)
      cr_expect_not_null(rs, "kill at %d ms left no run state", kill_at[k]);
    struct sbx_run_out r;
    if (rs) {
      const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
      sbx_run(&r, srv.base_url, res);
    } else {
      /* Killed before the first state was written: start again. */
      sbx_run(&r, srv.base_url, run);
    }
    cr_expect_eq(r.status, 0, "kill at %d ms: %s", kill_at[k], r.err);
    cr_expect_str_eq(r.out, "the log has two lines\n", "kill at %d ms",
                     kill_at[k]);
    sbx_run_free(&r);
    json_t *reqs = test_model_server_requests(&srv);
    test_model_server_stop(&srv);
    const char *log = test_call_output(reqs, -1, "c3");
    cr_assert_not_null(log, "kill at %d ms: no cat output", kill_at[k]);
    cr_expect(strstr(log, "Output:\none\ntwo\n") != NULL,
              "kill at %d ms: each command ran once: %s", kill_at[k], log);
    json_decref(reqs);
    free(rs);
  }
}

/* What a kill can leave at the end of the journal (items without their
 * checkpoint, half a line) and checkpoints that do not fit are ignored,
 * and the journal is cut back. */
Test(resume, journal_tail_left_by_a_kill_is_ignored) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"exec_command\": [\"echo\"]}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"t1\", "
      "\"arguments\": {\"cmd\": \"echo one\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"t2\", "
      "\"arguments\": {\"cmd\": \"echo two > two.txt\"}}]},"
      " {\"text\": \"finished\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "go", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_state(r.err);
  sbx_run_free(&r);
  /* The journal so far: 5 items and a checkpoint from the end of turn 1. */
  _cleanup_free_ char *text = test_journal_read(state, rs);
  cr_expect(strstr(text, "{\"sbx.checkpoint\":") != NULL, "%s", text);
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 1 << 20);
  cr_assert_eq(
      sbx_buf_printf(&b,
                     "%s"
                     "{\"type\": \"message\", \"role\": \"user\", "
                     "\"content\": \"INJECTED-1\"}\n"
                     "{\"sbx.checkpoint\": {\"seq\": 1, \"items_count\": 6, "
                     "\"status\": \"running\"}}\n"
                     "{\"sbx.checkpoint\": {\"seq\": 99, \"items_count\": 2, "
                     "\"status\": \"running\"}}\n"
                     "{\"type\": \"message\", \"role\": \"user\", "
                     "\"content\": \"INJECTED-2",
                     text),
      0);
  test_journal_write(state, rs, b.data);
  approve_and_resume(rs, "t2", srv.base_url, "finished\n");
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_assert_eq(json_array_size(reqs), 3);
  json_t *last = json_object_get(
      json_object_get(json_array_get(reqs, 2), "body"), "input");
  char *dump = json_dumps(last, JSON_COMPACT);
  cr_expect(strstr(dump, "INJECTED") == NULL, "%s", dump);
  /* user, t1 call and output, t2 call and output */
  cr_expect_eq(json_array_size(last), 5, "%s", dump);
  free(dump);
  json_decref(reqs);
  free(rs);
}

Test(resume, resume_errors) {
  struct sbx_run_out r;
  const char *missing[] = {
      "run", "--state-dir", state, "--resume", "/nonexistent/state.json", NULL};
  sbx_run(&r, NULL, missing);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--resume takes a run id") != NULL, "%s", r.err);
  cr_expect(strstr(r.err, "kept in the state store, not in files") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
  const char *unknown[] = {"run",
                           "--state-dir",
                           state,
                           "--resume",
                           "run_0123456789abcdef0123456789abcdef",
                           NULL};
  sbx_run(&r, NULL, unknown);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "no run \"run_0123456789abcdef0123456789abcdef\" "
                          "in the state store") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
  const char *jp = "run_x";
  const char *bad[] = {"run", "--state-dir", state, "--resume", jp, NULL};
  sbx_run(&r, NULL, bad);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "not \"run_x\"") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *baddb[] = {"run",       "--state-dir", state, "--db",
                         "mysql://x", "a.json",      "p",   NULL};
  sbx_run(&r, NULL, baddb);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "mysql://x") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *extra[] = {"run", "--resume", jp, "a.json", "p", NULL};
  sbx_run(&r, NULL, extra);
  cr_expect_eq(r.status, 2);
  sbx_run_free(&r);
  const char *noargs[] = {"approve", NULL};
  sbx_run(&r, NULL, noargs);
  cr_expect_eq(r.status, 2);
  sbx_run_free(&r);
  const char *ask[] = {"run", "--approve", "maybe", "a", "b", NULL};
  sbx_run(&r, NULL, ask);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "expected ask or stop") != NULL, "%s", r.err);
  sbx_run_free(&r);
  static const struct {
    const char *flag, *value, *want;
  } snaps[] = {
      {"--snapshot", "remote", "remote snapshots are for sbx sandbox save"},
      {"--snapshot", "noop",
       "--snapshot \"noop\": a run's snapshots are "
       "local or none"},
      {"--snapshot-dir", "", "--snapshot-dir \"\": an empty path"},
  };
  for (size_t i = 0; i < sizeof(snaps) / sizeof(snaps[0]); i++) {
    const char *args[] = {"run", snaps[i].flag, snaps[i].value, "a", "b", NULL};
    sbx_run(&r, NULL, args);
    cr_expect_eq(r.status, 2, "%s", snaps[i].value);
    cr_expect(strstr(r.err, snaps[i].want) != NULL, "%s", r.err);
    sbx_run_free(&r);
  }
  /* Settings that would do nothing are refused by name. */
  const char *never[] = {"run",   "--approve", "ask", "--snapshot",
                         "local", "a",         "b",   NULL};
  sbx_run(&r, NULL, never);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "--snapshot: a run with --approve ask never "
                          "pauses") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
  /* The run starts in one sandbox: a second source of it is refused. */
  static const struct {
    const char *f1, *v1, *f2, *v2, *want;
  } twice[] = {
      {"--session", "st.json", "--sandbox", "abc",
       "--session cannot be combined with --sandbox"},
      {"--session", "st.json", "--resume", "run_x",
       "--session cannot be combined with --resume"},
      {"--sandbox", "abc", "--resume", "run_x",
       "--sandbox cannot be combined with --resume"},
  };
  for (size_t i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
    bool res = strcmp(twice[i].f2, "--resume") == 0;
    const char *args[] = {"run",       twice[i].f1, twice[i].v1,
                          twice[i].f2, twice[i].v2, res ? NULL : "a",
                          "b",         NULL};
    sbx_run(&r, NULL, args);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, twice[i].want) != NULL, "%s", r.err);
    sbx_run_free(&r);
  }
  const char *a = write_agent("{\"name\": \"A\"}");
  const char *nodir[] = {
      "run", "--state-dir", state, "--snapshot", "none", "--snapshot-dir", dir,
      a,     "a prompt",    NULL};
  sbx_run(&r, NULL, nodir);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "--snapshot-dir: the run takes no snapshots") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
}

/* The record id of agent 0's sandbox in the run state RS (new). */
static char *state_sandbox(const char *rs) {
  json_t *j = test_run_state_json(state, rs);
  const char *id = json_string_value(json_object_get(
      json_object_get(json_object_get(j, "sandboxes"), "0"), "record"));
  cr_assert_not_null(id, "no sandbox in %s", rs);
  char *out = strdup(id);
  json_decref(j);
  return out;
}

/* How many files DIR holds (0 when it does not exist). */
static size_t files_in(const char *path) {
  DIR *d = opendir(path);
  size_t n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    n += de->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

/* A paused run snapshots its sandbox: when the sandbox is removed while
 * the run waits for approval, the resumed run goes on in a new sandbox
 * restored from the snapshot, says so, and removes the snapshot when it
 * ends. With --snapshot none there is nothing to go on from, and the
 * resume says so. */
Test(resume, a_removed_sandbox_is_restored_from_the_pause_snapshot) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"exec_command\": [\"mkdir\", "
      "\"ln\"]}}");
  const char *script =
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"mkdir -p d/made\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w2\", "
      "\"arguments\": {\"cmd\": \"ln -s /usr/bin/python3 d/py\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"ls d\"}}]},"
      " {\"text\": \"all done\"}]";
  char snaps[160];
  (void)snprintf(snaps, sizeof(snaps), "%s/snapshots", state);
  for (int none = 0; none < 2; none++) {
    struct test_model_server srv;
    test_model_server_start(&srv, script, NULL);
    struct sbx_run_out r;
    const char *run[] = {
        "run", "--state-dir", state, "--snapshot", none ? "none" : "local",
        a,     "make a file", NULL};
    sbx_run(&r, srv.base_url, run);
    cr_assert_eq(r.status, 3, "paused: %s", r.err);
    char *rs = paused_state(r.err);
    sbx_run_free(&r);
    cr_expect_eq(files_in(snaps), none ? 0u : 1u, "snapshots at the pause");
    char *id = state_sandbox(rs);
    const char *rm[] = {"rm", "-f", id, NULL};
    sbx_sandbox_run(&r, state, rm);
    cr_assert_eq(r.status, 0, "%s", r.err);
    sbx_run_free(&r);
    const char *ok[] = {"approve", "--state-dir", state, rs, "r1", NULL};
    sbx_run(&r, NULL, ok);
    cr_assert_eq(r.status, 0, "%s", r.err);
    sbx_run_free(&r);
    const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
    sbx_run(&r, srv.base_url, res);
    json_t *reqs = test_model_server_requests(&srv);
    test_model_server_stop(&srv);
    if (none) {
      cr_expect_eq(r.status, 1, "%s", r.err);
      cr_expect(strstr(r.err, "the run has no snapshot of it") != NULL, "%s",
                r.err);
    } else {
      cr_expect_eq(r.status, 0, "%s", r.err);
      cr_expect_str_eq(r.out, "all done\n");
      cr_expect(strstr(r.err, "restored from the run's snapshot of turn 3") !=
                    NULL,
                "%s", r.err);
      cr_expect(strstr(r.err, id) != NULL, "%s", r.err);
      const char *c = test_call_output(reqs, -1, "r1");
      cr_assert_not_null(c);
      cr_expect(strstr(c, "Output:\nmade\npy\n") != NULL,
                "the call ran in the restored workspace: %s", c);
      cr_expect_eq(json_array_size(reqs), 4, "no model call was repeated");
    }
    cr_expect_eq(files_in(snaps), 0u, "snapshots after the run");
    json_decref(reqs);
    sbx_run_free(&r);
    free(id);
    free(rs);
  }
}

/* Runs sbx under `script` so that it has a terminal, feeding ANSWERS. */
static int run_in_pty(const char *base_url, const char *agent,
                      const char *answers, char **out) {
  char outp[160], cmd[2048];
  (void)snprintf(outp, sizeof(outp), "%s/pty.out", dir);
  (void)snprintf(
      cmd, sizeof(cmd),
      "printf '%s' | OPENAI_BASE_URL=%s OPENAI_API_KEY=k script -qec "
      "\"%s run --state-dir %s --approve ask %s 'do it'\" /dev/null "
      "> %s 2>&1",
      answers, base_url, test_sbx_path(), state, agent, outp);
  int st = system(cmd);
  FILE *f = fopen(outp, "r");
  cr_assert_not_null(f);
  size_t cap = 0;
  *out = NULL;
  (void)getdelim(out, &cap, '\0', f);
  fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(resume, approve_ask_asks_on_the_terminal) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"exec_command\": \"always\"}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "{\"by_turn\": true, \"steps\": ["
      "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"q1\", "
      "\"arguments\": {\"cmd\": \"echo it-ran\"}}]},"
      " {\"text\": \"done\"}]}",
      NULL);
  char *out = NULL;
  int rc = run_in_pty(srv.base_url, a, "y\\n", &out);
  cr_expect_eq(rc, 0, "%s", out);
  cr_expect(strstr(out, "Approve? [y/N]") != NULL, "%s", out);
  cr_expect(strstr(out, "done") != NULL, "%s", out);
  free(out);
  json_t *reqs = test_model_server_requests(&srv);
  const char *o = test_call_output(reqs, -1, "q1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "it-ran") != NULL, "%s", o);
  json_decref(reqs);
  /* Answering no, with a reason, rejects the call. */
  rc = run_in_pty(srv.base_url, a, "n\\nnot now\\n", &out);
  cr_expect_eq(rc, 0, "%s", out);
  free(out);
  reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_str_eq(test_call_output(reqs, -1, "q1"),
                   "The user rejected this tool call: not now");
  json_decref(reqs);
}

Test(resume, a_running_process_is_picked_up_after_a_pause) {
  const char *a = write_agent(
      "{\"name\": \"A\", \"approvals\": {\"view_image\": \"always\"}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"s1\", "
      "\"arguments\": {\"cmd\": \"sleep 1; echo late\", \"yield_time_ms\": "
      "250}}]},"
      " {\"tool_calls\": [{\"name\": \"view_image\", \"call_id\": \"v1\", "
      "\"arguments\": {\"path\": \"x.png\"}}]},"
      " {\"tool_calls\": [{\"name\": \"write_stdin\", \"call_id\": \"w1\", "
      "\"arguments\": {\"session_id\": 1, \"chars\": \"\", "
      "\"yield_time_ms\": 3000}}]},"
      " {\"text\": \"picked up\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, a, "wait", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "%s", r.err);
  char *rs = paused_state(r.err);
  sbx_run_free(&r);
  const char *ok[] = {"approve", "--state-dir", state, rs, "v1", NULL};
  sbx_run(&r, NULL, ok);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "picked up\n");
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  const char *s1 = test_call_output(reqs, -1, "s1");
  cr_assert_not_null(s1);
  cr_expect(strstr(s1, "Process running with session ID 1") != NULL, "%s", s1);
  const char *w1 = test_call_output(reqs, -1, "w1");
  cr_assert_not_null(w1);
  cr_expect(strstr(w1, "Process exited with code 0\nOutput:\nlate\n") != NULL,
            "the process started before the pause: %s", w1);
  json_decref(reqs);
  free(rs);
}

/* A run's --base-dir is recorded: a resume whose sandbox is gone, run
 * from another directory (one that holds decoys of the same names),
 * restores the sandbox with its manifest's local sources read where the
 * run first read them. */
Test(resume, a_restore_reads_local_sources_from_the_runs_base_dir) {
  char proj[128], data[160], elsewhere[128], adir[128];
  (void)snprintf(proj, sizeof(proj), "%s/proj", dir);
  (void)snprintf(data, sizeof(data), "%s/data", proj);
  (void)snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", dir);
  (void)snprintf(adir, sizeof(adir), "%s/agent", dir);
  cr_assert_eq(mkdir(proj, 0755) | mkdir(data, 0755) | mkdir(adir, 0755) |
                   mkdir(elsewhere, 0755),
               0);
  test_write_file(data, "real.txt", "real\n");
  test_write_file(proj, "secret.txt", "the real secret\n");
  (void)snprintf(data, sizeof(data), "%s/data", elsewhere);
  cr_assert_eq(mkdir(data, 0755), 0);
  test_write_file(data, "decoy.txt", "decoy\n");
  test_write_file(elsewhere, "secret.txt", "a decoy secret\n");
  char a[160];
  (void)snprintf(
      a, sizeof(a), "%s",
      test_write_file(adir, "a.json",
                      "{\"name\": \"A\", \"approvals\": {\"exec_command\": "
                      "\"always\"}, \"default_manifest\": {\"entries\": "
                      "{\"data\": {\"type\": \"local_dir\", \"src\": "
                      "\"data\"}, \"secret.txt\": {\"type\": \"local_file\", "
                      "\"src\": \"secret.txt\", \"ephemeral\": true}}}}"));
  const char *script =
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"cat secret.txt; ls data\"}}]},"
      " {\"text\": \"all done\"}]";
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  struct sbx_run_out r;
  cr_assert_eq(chdir(dir), 0);
  const char *run[] = {"run", "--state-dir", state, "--base-dir", "proj",
                       a,     "look",        NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *rs = paused_state(r.err);
  sbx_run_free(&r);
  char *id = state_sandbox(rs);
  const char *rm[] = {"rm", "-f", id, NULL};
  sbx_sandbox_run(&r, state, rm);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *ok[] = {"approve", "--state-dir", state, rs, "r1", NULL};
  sbx_run(&r, NULL, ok);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cr_assert_eq(chdir(elsewhere), 0);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.err, "restored from the run's snapshot") != NULL, "%s",
            r.err);
  const char *c = test_call_output(reqs, -1, "r1");
  cr_assert_not_null(c, "%s", r.err);
  cr_expect(strstr(c, "Output:\nthe real secret\nreal.txt\n") != NULL, "%s", c);
  json_decref(reqs);
  sbx_run_free(&r);
  free(id);
  free(rs);
}
