/* Runs that survive their controller's and their sandbox's death: a step
 * of any size is journaled, a resume after kill -9 repeats no model call
 * and no tool call, and a resume whose sandboxd is gone goes on in the
 * sandbox started again, or says which step failed and what to do. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-crash-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(crash, .init = setup, .fini = teardown, .timeout = 120);

/* Waits until SRV has received N requests (at most 20 s). */
static void wait_requests(const struct test_model_server *srv, size_t n) {
  for (int i = 0; i < 400; i++) {
    json_t *reqs = test_model_server_requests(srv);
    size_t have = json_array_size(reqs);
    json_decref(reqs);
    if (have >= n)
      return;
    usleep(50000);
  }
  cr_assert_fail("the model server never got %zu requests", n);
}

/* The number of requests in REQS whose input has N items: a model call
 * repeated by a resume sends the same input again. */
static size_t requests_with_input(json_t *reqs, size_t n) {
  size_t count = 0, i;
  json_t *r;
  json_array_foreach(reqs, i, r) {
    json_t *in = json_object_get(json_object_get(r, "body"), "input");
    if (json_array_size(in) == n)
      count++;
  }
  return count;
}

static const char big_then_slow[] =
    "{\"by_turn\": true, \"steps\": ["
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"head -c 6144 /dev/zero | tr -c x x; "
    "echo; echo one >> runs.log\"}}]},"
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
    "\"arguments\": {\"cmd\": \"sleep 2; echo two >> runs.log\", "
    "\"yield_time_ms\": 10000}},"
    " {\"name\": \"exec_command\", \"call_id\": \"c3\", "
    "\"arguments\": {\"cmd\": \"echo three >> runs.log\"}}]},"
    " {\"text\": \"(not used: after the second turn come three outputs)\"},"
    " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c4\", "
    "\"arguments\": {\"cmd\": \"cat runs.log\"}}]},"
    " {\"text\": \"done\"}]}";

/* Runs AGENT on "go" against SRV, kills sbx with SIGKILL a second after
 * SRV got N requests (a call still running), calls BETWEEN (if given) with
 * the run state's path, resumes the run and expects it to answer "done". */
static void kill_and_resume(const struct test_model_server *srv,
                            const char *agent, size_t n,
                            void (*between)(const char *rs)) {
  char errp[128];
  (void)snprintf(errp, sizeof(errp), "%s/err1", dir);
  const char *run[] = {"run", "--state-dir", state, agent, "go", NULL};
  pid_t pid = sbx_spawn(srv->base_url, errp, 0, run);
  wait_requests(srv, n);
  usleep(1000 * 1000);
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  _cleanup_free_ char *rs = test_run_state(state);
  cr_assert_not_null(rs, "the kill left no run state");
  if (between)
    between(rs);
  struct sbx_run_out r;
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv->base_url, res);
  cr_expect_eq(r.status, 0, "resume: %s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  cr_expect_null(strstr(r.err, "journal"), "%s", r.err);
  sbx_run_free(&r);
}

/* A step with a 6 KiB tool output is journaled whole: killed during the
 * next turn's calls (one done, one still running), the resumed run sends
 * no model request twice and runs neither call again. */
Test(crash, a_big_step_is_journaled_and_nothing_repeats) {
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  struct test_model_server srv;
  test_model_server_start(&srv, big_then_slow, NULL);
  kill_and_resume(&srv, a, 2, NULL); /* killed with c3 done, c2 sleeping */
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  /* Turns 1..4: inputs of 1, 3, 6 and 8 items, each sent once. */
  cr_expect_eq(json_array_size(reqs), 4, "model requests: %zu",
               json_array_size(reqs));
  cr_expect_eq(requests_with_input(reqs, 1), 1);
  cr_expect_eq(requests_with_input(reqs, 3), 1);
  const char *big = test_call_output(reqs, -1, "c1");
  cr_assert_not_null(big);
  cr_expect_gt(strlen(big), 6144, "c1's output: %zu bytes", strlen(big));
  const char *log = test_call_output(reqs, -1, "c4");
  cr_assert_not_null(log);
  /* Each command ran once: c3 before the kill, c2 finished after it. */
  cr_expect(strstr(log, "one\n") && strstr(log, "three\n") &&
                strstr(log, "two\n"),
            "%s", log);
  cr_expect_null(
      strstr(strstr(log, "three\n") ? strstr(log, "three\n") + 1 : log,
             "three\n"),
      "c3 ran twice: %s", log);
  json_decref(reqs);
}

/* Writes helper.json holding HELPER and the agent "Boss", which has it as
 * its tool ask_helper; Boss's path goes to PATH. */
static void boss(char path[128], const char *helper) {
  (void)test_write_file(dir, "helper.json", helper);
  const char *a = test_write_file(
      dir, "a.json",
      "{\"name\": \"Boss\", \"tools\": [{\"type\": \"agent_as_tool\", "
      "\"agent\": \"helper.json\", \"name\": \"ask_helper\", "
      "\"description\": \"Ask the helper.\"}]}");
  (void)snprintf(path, 128, "%s", a);
}

/* Boss's call of its helper, in a scripted response's tool_calls. */
#define ASK_HELPER_T1                                                          \
  "{\"name\": \"ask_helper\", \"call_id\": \"t1\", \"arguments\": "            \
  "{\"input\": \"help\"}}"

/* A run nested in a tool call (an agent used as a tool) is journaled too:
 * killed while the nested agent's second call runs, the resumed run goes
 * on inside the nested run, so that none of its model requests is sent
 * again and neither of its calls runs twice. */
Test(crash, a_nested_run_is_journaled_and_nothing_repeats) {
  char ap[128];
  boss(ap, "{\"name\": \"Helper\"}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [" ASK_HELPER_T1 "]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"h1\", "
      "\"arguments\": {\"cmd\": \"echo one >> runs.log\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"h2\", "
      "\"arguments\": {\"cmd\": \"sleep 2; echo two >> runs.log; cat "
      "runs.log\", \"yield_time_ms\": 10000}}]},"
      " {\"text\": \"helped\"},"
      " {\"text\": \"done\"}]",
      NULL);
  kill_and_resume(&srv, ap, 3, NULL); /* killed with h1 done, h2 sleeping */
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 5, "model requests: %zu",
               json_array_size(reqs));
  /* The nested run's last request carries h2's output: each command ran
   * once, h2 finished after the kill. */
  const char *log = test_call_output(reqs, 3, "h2");
  cr_assert_not_null(log);
  cr_expect(strstr(log, "Output:\none\ntwo\n") != NULL, "%s", log);
  cr_expect_str_eq(test_call_output(reqs, 4, "t1"), "helped");
  json_decref(reqs);
}

/* Removes from the journal of the run RS the output line of call t1, as
 * a kill between the end of t1's nested run and that line would have left
 * it. */
static void drop_t1_output(const char *rs) {
  _cleanup_free_ char *text = test_journal_read(state, rs);
  char *kept = calloc(1, strlen(text) + 1);
  cr_assert_not_null(kept);
  bool dropped = false;
  for (char *line = text, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    cr_assert_not_null(nl, "a partial journal line: %s", line);
    *nl = '\0';
    if (strstr(line, "\"sbx.call_output\"") &&
        strstr(line, "\"call_id\":\"t1\"")) {
      dropped = true;
      continue;
    }
    strcat(kept, line);
    strcat(kept, "\n");
  }
  cr_assert(dropped, "no output line of t1 in the journal of %s", rs);
  test_journal_write(state, rs, kept);
  free(kept);
}

/* A nested run that had answered when the kill came, before its call's
 * output was recorded, gives that answer on resume without asking the
 * model again (and leaves no sandbox behind). */
Test(crash, a_nested_run_that_had_answered_is_not_asked_again) {
  char ap[128];
  boss(ap, "{\"name\": \"Helper\"}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [" ASK_HELPER_T1 ","
      " {\"name\": \"exec_command\", \"call_id\": \"c2\", "
      "\"arguments\": {\"cmd\": \"sleep 3; echo slow\", \"yield_time_ms\": "
      "10000}}]},"
      " {\"text\": \"helped\"},"
      " {\"text\": \"done\"}]",
      NULL);
  kill_and_resume(&srv, ap, 2, drop_t1_output); /* t1 done, c2 sleeping */
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 3, "model requests: %zu",
               json_array_size(reqs));
  cr_expect_str_eq(test_call_output(reqs, 2, "t1"), "helped");
  json_decref(reqs);
  char sbs[160];
  (void)snprintf(sbs, sizeof(sbs), "%s/sandboxes", state);
  DIR *d = opendir(sbs);
  size_t n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)))
    n += strstr(de->d_name, ".json") != NULL;
  if (d)
    closedir(d);
  cr_expect_eq(n, 0u, "sandboxes left recorded after the run");
}

/* An agent used as a tool whose call needs approval cannot pause the run
 * (the approval would have no run state to wait in): the run fails saying
 * so and what to do, instead of answering the call with nothing. */
Test(crash, a_nested_run_that_needs_approval_fails_clearly) {
  char ap[128];
  boss(ap, "{\"name\": \"Helper\", \"approvals\": {\"exec_command\": "
           "\"always\"}}");
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [" ASK_HELPER_T1 "]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"h1\", "
      "\"arguments\": {\"cmd\": \"echo one\"}}]},"
      " {\"text\": \"not reached\"}]",
      NULL);
  struct sbx_run_out r;
  /* Not kept for a retry (test_retry.c has those). */
  const char *run[] = {"run", "--state-dir", state, "--keep-failed", "0",
                       ap,    "go",          NULL};
  sbx_run(&r, srv.base_url, run);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 1, "%s", r.err);
  cr_expect(strstr(r.err, "a tool call of agent \"Helper\", used as a tool, "
                          "needs approval") != NULL,
            "%s", r.err);
  cr_expect(strstr(r.err, "--approve ask") != NULL, "%s", r.err);
  sbx_run_free(&r);
  _cleanup_free_ char *rs = test_run_state(state);
  cr_expect_null(rs, "a failed run leaves no state: %s", rs);
}

/* The text of the file at PATH (new). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  char *buf = calloc(1, 1 << 16);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* A journal that cannot be written fails the run with the reason, instead
 * of the run going on unrecorded: here the store refuses a journal chunk
 * over 4 KiB, as a full disk would, and c1's 6 KiB output does not fit.
 * The journal is written behind the run, so the failure may be noticed
 * only at the next step, but before any of that step's calls run: c2,
 * which would leave a file behind, never runs. */
Test(crash, a_journal_write_that_fails_fails_the_run) {
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  char marker[128], script[1024];
  (void)snprintf(marker, sizeof(marker), "%s/c2-ran", dir);
  (void)snprintf(
      script, sizeof(script),
      "{\"by_turn\": true, \"steps\": ["
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"head -c 6144 /dev/zero | tr -c x x\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c2\", "
      "\"arguments\": {\"cmd\": \"touch %s\"}}]},"
      " {\"text\": \"done\"}]}",
      marker);
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  char errp[128];
  (void)snprintf(errp, sizeof(errp), "%s/err1", dir);
  test_store_exec(state, "CREATE TRIGGER full BEFORE INSERT ON journal "
                         "WHEN length(NEW.text) > 4096 BEGIN "
                         "SELECT RAISE(ABORT, 'database or disk is full'); "
                         "END;");
  const char *run[] = {"run", "--state-dir", state, "--isolation", "none",
                       a,     "go",          NULL};
  pid_t pid = sbx_spawn(srv.base_url, errp, 0, run);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  _cleanup_free_ char *err = slurp(errp);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, err);
  cr_expect(strstr(err, "cannot write the run journal of run_") != NULL, "%s",
            err);
  cr_expect(strstr(err, "database or disk is full") != NULL, "%s", err);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_leq(json_array_size(reqs), 2, "the run went on: %zu requests",
                json_array_size(reqs));
  json_decref(reqs);
  cr_expect_neq(access(marker, F_OK), 0,
                "c2 ran although c1's output was "
                "not recorded");
}

/* The id of the one sandbox recorded in STATE into ID, and the pid of its
 * sandboxd. */
static pid_t the_sandbox(char id[64]) {
  char sbs[160];
  (void)snprintf(sbs, sizeof(sbs), "%s/sandboxes", state);
  DIR *d = opendir(sbs);
  cr_assert_not_null(d, "no sandbox recorded");
  pid_t pid = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n <= 5 || n >= 64 || strcmp(de->d_name + n - 5, ".json") != 0)
      continue;
    char p[512];
    (void)snprintf(p, sizeof(p), "%s/%s", sbs, de->d_name);
    json_error_t je;
    json_t *rec = json_load_file(p, 0, &je);
    pid = (pid_t)json_integer_value(
        json_object_get(json_object_get(rec, "local"), "pid"));
    json_decref(rec);
    (void)snprintf(id, 64, "%.*s", (int)(n - 5), de->d_name);
  }
  closedir(d);
  cr_assert_gt(pid, 0, "no sandboxd pid in the record");
  return pid;
}

/* Kills sbx (PID) and the sandboxd of its run during the second turn's
 * calls, as a power cut of both would; returns the run state's path (new)
 * and the sandbox's id in ID. */
static char *kill_both(const struct test_model_server *srv, char id[64]) {
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  char errp[128];
  (void)snprintf(errp, sizeof(errp), "%s/err1", dir);
  const char *run[] = {"run", "--state-dir", state, a, "go", NULL};
  pid_t pid = sbx_spawn(srv->base_url, errp, 0, run);
  wait_requests(srv, 2);
  usleep(1000 * 1000);
  pid_t sd = the_sandbox(id);
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  cr_assert_eq(kill(sd, SIGKILL), 0);
  char proc[64];
  (void)snprintf(proc, sizeof(proc), "/proc/%d", (int)sd);
  for (int i = 0; i < 200 && access(proc, F_OK) == 0; i++)
    usleep(10000);
  cr_assert_neq(access(proc, F_OK), 0, "sandboxd %d did not die", (int)sd);
  char *rs = test_run_state(state);
  cr_assert_not_null(rs, "the kill left no run state");
  return rs;
}

/* Both sbx and the run's sandboxd killed: the resumed run starts the
 * sandbox again over its workspace and goes on; the call that was done is
 * not run again, the one the kill interrupted is. */
Test(crash, resume_after_both_die_goes_on_in_the_sandbox_started_again) {
  struct test_model_server srv;
  test_model_server_start(&srv, big_then_slow, NULL);
  char id[64];
  _cleanup_free_ char *rs = kill_both(&srv, id);
  struct sbx_run_out r;
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  cr_expect_eq(r.status, 0, "resume: %d %s", r.status, r.err);
  cr_expect_str_eq(r.out, "done\n");
  cr_expect(strstr(r.err, "was not running; started it again") != NULL, "%s",
            r.err);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(json_array_size(reqs), 4, "model requests: %zu",
               json_array_size(reqs));
  const char *log = test_call_output(reqs, -1, "c4");
  cr_assert_not_null(log);
  cr_expect(strstr(log, "one\nthree\ntwo\n") != NULL, "%s", log);
  json_decref(reqs);
}

/* A resume whose sandbox was removed says at which step it stopped and
 * what to do. */
Test(crash, resume_without_its_sandbox_names_the_step_and_the_remedy) {
  struct test_model_server srv;
  test_model_server_start(&srv, big_then_slow, NULL);
  char id[64];
  _cleanup_free_ char *rs = kill_both(&srv, id);
  const char *rm[] = {"rm", "-f", id, NULL};
  struct sbx_run_out r;
  sbx_sandbox_run(&r, state, rm);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", rs, NULL};
  sbx_run(&r, srv.base_url, res);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 1, "resume: %d %s", r.status, r.err);
  cr_expect(strstr(r.err, "at turn 2: the sandbox") != NULL, "%s", r.err);
  cr_expect(strstr(r.err, id) != NULL, "%s", r.err);
  cr_expect(strstr(r.err, "run the prompt again") != NULL, "%s", r.err);
  sbx_run_free(&r);
}

/* A model server that accepts and never answers, or stops in the middle
 * of a stream, fails the run after the timeout given, with one retry, and
 * the message names the timeout and the policy. */
Test(crash, a_hung_model_server_is_given_up_on) {
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  static const char *const scripts[] = {
      "[{\"delay_ms\": 30000, \"text\": \"late\", \"repeat\": 3}]",
      "[{\"stall_ms\": 30000, \"text\": \"late\", \"repeat\": 3}]",
  };
  static const char *const want[] = {
      "sent nothing for 1000 ms after the request (first_byte timeout)",
      "sent nothing more for 1000 ms (idle timeout)",
  };
  for (size_t k = 0; k < 2; k++) {
    struct test_model_server srv;
    test_model_server_start(&srv, scripts[k], NULL);
    /* Its own state dir: the failed run keeps its sandbox there, and the
     * teardown ends it. */
    const char *run[] = {"run",
                         "--state-dir",
                         state,
                         "--isolation",
                         "none",
                         "--model-timeouts",
                         "first_byte=1,idle=1",
                         k ? "--stream" : "--max-turns",
                         k ? "--max-turns" : "5",
                         k ? "5" : a,
                         k ? a : "go",
                         k ? "go" : NULL,
                         NULL};
    struct sbx_run_out r;
    sbx_run(&r, srv.base_url, run);
    json_t *reqs = test_model_server_requests(&srv);
    test_model_server_stop(&srv);
    cr_expect_eq(r.status, 1, "%zu: %d %s", k, r.status, r.err);
    cr_expect(strstr(r.err, want[k]) != NULL, "%zu: %s", k, r.err);
    cr_expect(strstr(r.err, "after 1 retry; a timeout is retried once"),
              "%zu: %s", k, r.err);
    cr_expect_eq(json_array_size(reqs), 2, "%zu: %zu requests", k,
                 json_array_size(reqs));
    json_decref(reqs);
    sbx_run_free(&r);
  }
}

/* Kills the sandboxd of a new sandbox (CREATE's flags) while `sbx sandbox
 * exec` waits on a command of two sleeps: the exec must fail at once,
 * saying so, instead of after every attempt's timeout, and no sleep may
 * outlive the sandboxd. SALT makes the sleeps' length unique. */
static void kill_during_exec(const char *const *create, unsigned salt) {
  _cleanup_free_ char *id = sbx_sandbox_line(state, create);
  char sid[64];
  pid_t sd = the_sandbox(sid);
  cr_assert_str_eq(sid, id);
  char errp[128];
  (void)snprintf(errp, sizeof(errp), "%s/err", dir);
  /* Sleeps of a length no other test uses, to find them by. */
  char cmd[96], pat[64];
  unsigned secs = 3000 + ((unsigned)getpid() * 2 + salt) % 5000;
  (void)snprintf(cmd, sizeof(cmd), "sleep %u & sleep %u", secs, secs);
  (void)snprintf(pat, sizeof(pat), "pgrep -x -f 'sleep %u'", secs);
  const char *ex[] = {"sandbox", "exec", "--state-dir", state, id,
                      "--",      "sh",   "-c",          cmd,   NULL};
  pid_t pid = sbx_spawn(NULL, errp, 0, ex);
  usleep(800 * 1000);
  cr_assert_eq(kill(sd, SIGKILL), 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int st = 0;
  pid_t w = 0;
  /* The old client waited out 4 attempts of 31 s: give it 10 s. */
  for (int i = 0; i < 1000 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
    usleep(10000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (w == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  cr_expect_neq(w, 0, "sbx sandbox exec still waits 10 s after the kill");
  _cleanup_free_ char *err = slurp(errp);
  cr_expect(strstr(err, "has exited") != NULL, "%s", err);
  fprintf(stderr, "noticed in %ld ms\n",
          (long)((t1.tv_sec - t0.tv_sec) * 1000 +
                 (t1.tv_nsec - t0.tv_nsec) / 1000000));
  usleep(300 * 1000);
  FILE *ps = popen(pat, "r");
  char line[64] = "";
  cr_assert_not_null(ps);
  char *got = fgets(line, sizeof(line), ps);
  pclose(ps);
  cr_expect_null(got, "a command outlived its sandboxd: %s", line);
}

/* Isolated: the sandbox is a PID namespace that dies with its PID 1. */
Test(crash, a_killed_sandboxd_is_noticed_at_once) {
  const char *create[] = {"create", NULL};
  kill_during_exec(create, 0);
}

/* Unisolated too: the commands' process groups die with a killed
 * sandboxd (its reaper kills them), instead of going on under init. */
Test(crash, an_unisolated_sandbox_s_commands_die_with_it) {
  const char *create[] = {"create", "--isolation", "none", NULL};
  kill_during_exec(create, 1);
}

/* Unisolated, what a command that has exited left running in its process
 * group dies with sandboxd too. */
Test(crash, an_unisolated_sandbox_s_background_processes_die_with_it) {
  const char *create[] = {"create", "--isolation", "none", NULL};
  _cleanup_free_ char *id = sbx_sandbox_line(state, create);
  char sid[64];
  pid_t sd = the_sandbox(sid);
  char cmd[96], pat[64];
  unsigned secs = 3000 + ((unsigned)getpid() * 2 + 7) % 5000;
  (void)snprintf(cmd, sizeof(cmd), "sleep %u >/dev/null 2>&1 & echo started",
                 secs);
  (void)snprintf(pat, sizeof(pat), "pgrep -x -f 'sleep %u' >/dev/null", secs);
  const char *ex[] = {"exec", id, "--", "sh", "-c", cmd, NULL};
  struct sbx_run_out r;
  sbx_sandbox_run(&r, state, ex);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "started\n");
  sbx_run_free(&r);
  usleep(1500 * 1000); /* past the reaper's pruning of empty groups */
  cr_assert_eq(system(pat), 0, "the background sleep is not running");
  cr_assert_eq(kill(sd, SIGKILL), 0);
  int st = 1;
  for (int i = 0; i < 100 && (st = system(pat)) == 0; i++)
    usleep(50 * 1000);
  cr_expect_neq(st, 0, "a background process outlived its sandboxd");
}

/* The workspace directory on the host of the one recorded sandbox (new). */
static char *the_workspace(void) {
  char id[64];
  (void)the_sandbox(id);
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/sandboxes/%s.json", state, id);
  json_error_t je;
  json_t *rec = json_load_file(p, 0, &je);
  const char *ws = json_string_value(
      json_object_get(json_object_get(rec, "local"), "workspace"));
  cr_assert_not_null(ws, "no workspace in %s", p);
  char *out = strdup(ws);
  json_decref(rec);
  return out;
}

/* What a killed sandboxd left of its staging (an import's directory, the
 * temporary files of a write and a patch) is removed when the sandbox is
 * started again; files of the same look that are not its names stay. */
Test(crash, staging_leftovers_are_removed_on_start) {
  const char *create[] = {"create", NULL};
  _cleanup_free_ char *id = sbx_sandbox_line(state, create);
  _cleanup_free_ char *ws = the_workspace();
  char sid[64];
  pid_t sd = the_sandbox(sid);
  cr_assert_eq(kill(sd, SIGKILL), 0);
  char p[700];
  static const char *const gone[] = {
      ".sbx-import-00112233445566ff/d/f",
      "sub/.sbx-0123456789abcdef.tmp",
      "sub/deeper/.sbx-patch-fedcba9876543210.tmp",
  };
  static const char *const kept[] = {
      "sub/.sbx-notes.tmp",
      ".sbx-import-mine/f",
      "sub/.sbx-0123456789ABCDEF.tmp",
  };
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < 3; i++) {
      const char *rel = k ? kept[i] : gone[i];
      (void)snprintf(p, sizeof(p), "%s/%s", ws, rel);
      for (char *s = p + strlen(ws) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        (void)mkdir(p, 0755);
        *s = '/';
      }
      FILE *f = fopen(p, "w");
      cr_assert_not_null(f, "%s", p);
      fclose(f);
    }
  /* As the sandbox's sandboxd made them: owned by the workspace's owner. */
  struct stat wst;
  cr_assert_eq(stat(ws, &wst), 0);
  char cmd[800];
  (void)snprintf(cmd, sizeof(cmd), "chown -R %u:%u '%s'", (unsigned)wst.st_uid,
                 (unsigned)wst.st_gid, ws);
  cr_assert_eq(system(cmd), 0);
  for (int i = 0; i < 100; i++) {
    (void)snprintf(p, sizeof(p), "/proc/%d", (int)sd);
    if (access(p, F_OK) != 0)
      break;
    usleep(10000);
  }
  const char *start[] = {"start", id, NULL};
  struct sbx_run_out r;
  sbx_sandbox_run(&r, state, start);
  cr_assert_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  /* The sweep runs beside the daemon: give it a moment. */
  bool swept = false;
  for (int i = 0; i < 200 && !swept; i++) {
    swept = true;
    for (size_t k = 0; k < 3; k++) {
      (void)snprintf(p, sizeof(p), "%s/%s", ws, gone[k]);
      if (strncmp(gone[k], ".sbx-import", 11) == 0)
        (void)snprintf(p, sizeof(p), "%s/.sbx-import-00112233445566ff", ws);
      swept = swept && access(p, F_OK) != 0;
    }
    if (!swept)
      usleep(25000);
  }
  cr_expect(swept, "leftovers are still in %s", ws);
  for (size_t k = 0; k < 3; k++) {
    (void)snprintf(p, sizeof(p), "%s/%s", ws, kept[k]);
    cr_expect_eq(access(p, F_OK), 0, "%s was removed", kept[k]);
  }
}
