/* sbx --server URL: the commands as clients of a real sbx serve, with the
 * scripted model server: a run followed to its answer (also across a
 * server killed and restarted), --stream, a pause, approve, logs, ls,
 * show, cancel, and what is refused. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/port.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_model_server ms;
static struct test_server srv;
static char agent[128];

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
}

TestSuite(server_cli, .fini = stop_all, .timeout = 240);

static void start(const char *script, const char *agent_json,
                  const char *const *extra) {
  test_model_server_start(&ms, script, NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, extra);
  (void)snprintf(agent, sizeof(agent), "%s",
                 test_write_file(srv.dir, "agent.json", agent_json));
  setenv("SBX_TOKEN", srv.token, 1);
  unsetenv("SBX_SERVER");
}

/* sbx --server URL ARGS... */
static void client(struct sbx_run_out *r, const char *const *args) {
  const char *argv[32] = {"--server", srv.url};
  size_t n = 2;
  for (size_t i = 0; args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_run(r, NULL, argv);
}

static const char *const one_call =
    "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"echo hi\"}}]},"
    " {\"text\": \"done: hi\"}]";

Test(server_cli, a_run_is_followed_to_its_answer) {
  start(one_call, "{\"name\": \"A\", \"model\": \"m1\"}", NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", agent, "say hi", NULL};
  client(&r, run);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done: hi\n");
  sbx_run_free(&r);
  const char *ls[] = {"runs", "ls", "--json", NULL};
  client(&r, ls);
  cr_expect_eq(r.status, 0, "%s", r.err);
  json_t *list = json_loads(r.out, 0, NULL);
  cr_expect_eq(json_array_size(list), 1, "%s", r.out);
  const char *id =
      json_string_value(json_object_get(json_array_get(list, 0), "id"));
  cr_assert_not_null(id);
  char *rid = strdup(id);
  json_decref(list);
  sbx_run_free(&r);
  const char *show[] = {"runs", "show", rid, NULL};
  client(&r, show);
  cr_expect_eq(r.status, 0, "%s", r.err);
  json_t *j = json_loads(r.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "status")),
                   "completed");
  json_decref(j);
  sbx_run_free(&r);
  const char *logs[] = {"runs", "logs", rid, NULL};
  client(&r, logs);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"type\":\"run_started\"") &&
                strstr(r.out, "\"type\":\"run_finished\""),
            "%s", r.out);
  sbx_run_free(&r);
  const char *table[] = {"runs", "ls", "--status", "completed", NULL};
  client(&r, table);
  cr_expect(strstr(r.out, rid) && strstr(r.out, "completed"), "%s", r.out);
  sbx_run_free(&r);
  free(rid);
}

Test(server_cli, stream_prints_every_event_as_a_json_line) {
  start(one_call, "{\"name\": \"A\", \"model\": \"m1\"}", NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--stream", agent, "say hi", NULL};
  client(&r, run);
  cr_expect_eq(r.status, 0, "%s", r.err);
  size_t lines = 0;
  json_t *last = NULL;
  for (char *p = r.out, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
    json_decref(last);
    last = json_loadb(p, (size_t)(nl - p), 0, NULL);
    cr_expect_not_null(last, "%.*s", (int)(nl - p), p);
    cr_expect_eq(json_integer_value(json_object_get(last, "seq")),
                 (json_int_t)++lines);
  }
  cr_expect_geq(lines, 5);
  cr_expect_str_eq(json_string_value(json_object_get(last, "type")),
                   "run_finished");
  json_decref(last);
  sbx_run_free(&r);
}

Test(server_cli, a_paused_run_is_approved_and_its_logs_followed) {
  start(one_call,
        "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": "
        "{\"exec_command\": \"always\"}}",
        NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", agent, "say hi", NULL};
  client(&r, run);
  cr_expect_eq(r.status, 3, "%s", r.err);
  const char *p = strstr(r.err, "waiting for approval: ");
  cr_assert_not_null(p, "%s", r.err);
  char rid[64];
  (void)snprintf(rid, sizeof(rid), "%.36s",
                 p + strlen("waiting for approval: "));
  cr_expect(strstr(r.err, "approve"), "%s", r.err);
  sbx_run_free(&r);
  const char *nope[] = {"approve", rid, "c9", NULL};
  client(&r, nope);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "no call \"c9\""), "%s", r.err);
  sbx_run_free(&r);
  const char *ok[] = {"approve", rid, "c1", NULL};
  client(&r, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "approved c1\n");
  sbx_run_free(&r);
  const char *logs[] = {"runs", "logs", rid, "--follow", NULL};
  client(&r, logs);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"type\":\"run_paused\"") &&
                strstr(r.out, "\"type\":\"run_finished\""),
            "%s", r.out);
  sbx_run_free(&r);
}

Test(server_cli, a_run_is_cancelled_from_the_command_line) {
  start("[{\"delay_ms\": 20000, \"text\": \"late\"}]",
        "{\"name\": \"A\", \"model\": \"m1\"}", NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--detach", agent, "wait", NULL};
  client(&r, run);
  cr_expect_eq(r.status, 0, "%s", r.err);
  char rid[64];
  (void)snprintf(rid, sizeof(rid), "%.36s", r.out);
  sbx_run_free(&r);
  json_decref(test_server_wait(&srv, rid, "running", 30000));
  const char *cancel[] = {"runs", "cancel", rid, NULL};
  client(&r, cancel);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  json_decref(test_server_wait(&srv, rid, "cancelled", 15000));
  const char *again[] = {"runs", "cancel", rid, NULL};
  client(&r, again);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "cancelled already"), "%s", r.err);
  sbx_run_free(&r);
}

Test(server_cli, the_client_comes_back_after_the_server_restarts) {
  uint16_t port = 0;
  cr_assert_eq(sbx_free_tcp_port(&port), 0);
  cr_assert_gt(port, 0);
  char listen[64];
  (void)snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
  const char *extra[] = {"--listen", listen, "--lease-seconds", "3", NULL};
  start("{\"by_turn\": true, \"steps\": ["
        "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
        "\"c1\", \"arguments\": {\"cmd\": \"echo once\"}}]},"
        " {\"delay_ms\": 4000, \"text\": \"finished\"}]}",
        "{\"name\": \"A\", \"model\": \"m1\"}", extra);
  char out[128];
  (void)snprintf(out, sizeof(out), "%s/client.out", srv.dir);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    execl(test_sbx_path(), test_sbx_path(), "--server", srv.url, "run", agent,
          "count", (char *)NULL);
    _exit(127);
  }
  sleep(2); /* the tool call ran; the model is slow */
  test_server_kill(&srv, SIGKILL);
  test_server_start(&srv, extra);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d", st);
  FILE *f = fopen(out, "r");
  char buf[256] = "";
  cr_assert_not_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  cr_expect_str_eq(buf, "finished\n");
}

Test(server_cli, what_the_client_refuses) {
  start("[]", "{\"name\": \"A\", \"model\": \"m1\"}", NULL);
  struct sbx_run_out r;
  const char *flag[] = {"run", "--backend", "docker", agent, "x", NULL};
  client(&r, flag);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "not supported with --server"), "%s", r.err);
  sbx_run_free(&r);
  const char *sb[] = {"sandbox", "save", "a", NULL};
  client(&r, sb);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "not supported with --server"), "%s", r.err);
  sbx_run_free(&r);
  const char *other[] = {"decide", NULL};
  client(&r, other);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "not supported with --server"), "%s", r.err);
  sbx_run_free(&r);
  const char *bad[] = {"run", "/no/such/agent.json", "x", NULL};
  client(&r, bad);
  cr_expect_eq(r.status, 2, "%s", r.err);
  sbx_run_free(&r);
  setenv("SBX_TOKEN",
         "sbx_000000000000_0000000000000000000000000000000000000000", 1);
  const char *ls[] = {"runs", "ls", NULL};
  client(&r, ls);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "not valid"), "%s", r.err);
  sbx_run_free(&r);
  const char *url[] = {"--server", "ftp://x", "runs", "ls", NULL};
  sbx_run(&r, NULL, url);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "http://"), "%s", r.err);
  sbx_run_free(&r);
  const char *local[] = {"runs", "frob", NULL};
  sbx_run(&r, NULL, local);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "usage: sbx runs ls|show|cancel|logs"), "%s", r.err);
  sbx_run_free(&r);
}

Test(server_cli, sandboxes_are_made_used_and_removed_through_the_server) {
  start("[]", "{\"name\": \"A\"}", NULL);
  const char *man =
      test_write_file(srv.dir, "m.json",
                      "{\"entries\": {\"a.txt\": {\"type\": \"file\", "
                      "\"content\": \"from the manifest\\n\"}}}");
  char mpath[128];
  (void)snprintf(mpath, sizeof(mpath), "%s", man);
  struct sbx_run_out r;
  const char *create[] = {"sandbox", "create", "--manifest", mpath, NULL};
  client(&r, create);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char id[32];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  cr_expect_eq(strlen(id), 12, "%s", r.out);
  sbx_run_free(&r);
  const char *ls[] = {"sandbox", "ls", NULL};
  client(&r, ls);
  cr_expect(strstr(r.out, id), "%s", r.out);
  cr_expect(strstr(r.out, "Z\n") && !strstr(r.out, "(null)"),
            "its creation time is shown: %s", r.out);
  sbx_run_free(&r);
  const char *exec[] = {"sandbox", "exec", "-e",
                        "X=42",    id,     "--",
                        "sh",      "-c",   "cat a.txt; echo err $X >&2; exit 4",
                        NULL};
  client(&r, exec);
  cr_expect_eq(r.status, 4, "%s", r.err);
  cr_expect_str_eq(r.out, "from the manifest\n");
  cr_expect_str_eq(r.err, "err 42\n");
  sbx_run_free(&r);
  const char *big[] = {"sandbox", "exec",    id,          "--", "head",
                       "-c",      "3000000", "/dev/zero", NULL};
  client(&r, big);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *info[] = {"sandbox", "info", id, NULL};
  client(&r, info);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"backend\": \"local\""), "%s", r.out);
  sbx_run_free(&r);
  const char *rm[] = {"sandbox", "rm", id, NULL};
  client(&r, rm);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  client(&r, info);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "no sandbox"), "%s", r.err);
  sbx_run_free(&r);
  client(&r, exec);
  cr_expect_neq(r.status, 0);
  sbx_run_free(&r);
  const char *bad[] = {"sandbox", "exec", id, "sh", NULL};
  client(&r, bad);
  cr_expect_eq(r.status, 2, "%s", r.err);
  sbx_run_free(&r);
}

/* Runs "INPUT | sbx --server URL ARGS" through the shell: its stdout
 * (new) and exit code. */
static char *piped(const char *input, const char *args, int *code) {
  char cmd[2048];
  (void)snprintf(cmd, sizeof(cmd), "printf '%s' | %s --server %s %s 2>&1",
                 input, test_sbx_path(), srv.url, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char *out = calloc(1, 65536);
  size_t n = fread(out, 1, 65535, p);
  out[n] = '\0';
  int st = pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return out;
}

/* stdin, shell and cp through the server: a command reads this stdin to
 * its end, a shell reads its commands from a pipe and ends with it, and a
 * file whose name is not ASCII goes in and comes back. */
Test(server_cli, stdin_shell_and_cp_go_through_the_server) {
  start("[]", "{\"name\": \"A\"}", NULL);
  struct sbx_run_out r;
  const char *create[] = {"sandbox", "create", NULL};
  client(&r, create);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char id[32];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);
  char args[256];
  int code = -1;
  (void)snprintf(args, sizeof(args), "sandbox exec -i %s -- wc -l", id);
  char *out = piped("one\\ntwo\\nthree\\n", args, &code);
  cr_expect_eq(code, 0, "%s", out);
  cr_expect_str_eq(out, "3\n");
  free(out);
  (void)snprintf(args, sizeof(args), "sandbox shell %s", id);
  out = piped("cd /tmp && pwd\\necho $((6 * 7))\\nexit 5\\n", args, &code);
  cr_expect_eq(code, 5, "%s", out);
  cr_expect(strstr(out, "/tmp\n42\n"), "%s", out);
  free(out);
  (void)snprintf(args, sizeof(args), "sandbox apply-patch %s", id);
  out = piped("*** Begin Patch\\n*** Add File: p.txt\\n+patched\\n"
              "*** End Patch\\n",
              args, &code);
  cr_expect_eq(code, 0, "%s", out);
  cr_expect(strstr(out, "p.txt"), "%s", out);
  free(out);
  out = piped("*** Begin Patch\\n*** Update File: none.txt\\n@@\\n-x\\n+y\\n"
              "*** End Patch\\n",
              args, &code);
  cr_expect_eq(code, 2, "%s", out);
  free(out);
  const char *pcat[] = {"sandbox", "exec", id, "--", "cat", "p.txt", NULL};
  client(&r, pcat);
  cr_expect_str_eq(r.out, "patched\n");
  sbx_run_free(&r);
  /* cp: up, used, down, under a name of UTF-8 and one byte that is not. */
  const char *local = test_write_file(srv.dir, "in.txt", "über\n");
  char lp[128], dst[160], back[128];
  (void)snprintf(lp, sizeof(lp), "%s", local);
  (void)snprintf(dst, sizeof(dst), "%s:d/f\xc3\xbcr-\xff.txt", id);
  const char *up[] = {"sandbox", "cp", lp, dst, NULL};
  client(&r, up);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *cat[] = {"sandbox", "exec", id,         "--",
                       "sh",      "-c",   "cat d/f*", NULL};
  client(&r, cat);
  cr_expect_str_eq(r.out, "über\n");
  sbx_run_free(&r);
  (void)snprintf(back, sizeof(back), "%s/back.txt", srv.dir);
  const char *down[] = {"sandbox", "cp", dst, back, NULL};
  client(&r, down);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  FILE *f = fopen(back, "r");
  cr_assert_not_null(f);
  char got[32] = "";
  size_t n = fread(got, 1, sizeof(got) - 1, f);
  fclose(f);
  got[n] = '\0';
  cr_expect_str_eq(got, "über\n");
  /* What cp refuses, and a file that is not there. */
  const char *dir[] = {"sandbox", "cp", srv.dir, dst, NULL};
  client(&r, dir);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "not a regular file"), "%s", r.err);
  sbx_run_free(&r);
  const char *both[] = {"sandbox", "cp", dst, dst, NULL};
  client(&r, both);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "exactly one of them is ID:PATH"), "%s", r.err);
  sbx_run_free(&r);
  char missing[64];
  (void)snprintf(missing, sizeof(missing), "%s:nope.txt", id);
  const char *none[] = {"sandbox", "cp", missing, back, NULL};
  client(&r, none);
  cr_expect_eq(r.status, 2, "%s", r.err);
  sbx_run_free(&r);
  f = fopen(back, "r");
  cr_assert_not_null(f, "a failed copy left the old file alone");
  fclose(f);
  const char *rm[] = {"sandbox", "rm", id, NULL};
  client(&r, rm);
  sbx_run_free(&r);
}

/* sandbox create -o through the server: the option reaches the sandbox,
 * and what a request may not set is refused by the server's rules unless
 * the token is the operator's. */
Test(server_cli, sandbox_create_takes_backend_options) {
  start("[]", "{\"name\": \"A\"}", NULL);
  struct sbx_run_out r;
  const char *create[] = {
      "sandbox",  "create",        "-o", "network_mode=none",
      "--option", "pids_limit=64", NULL};
  client(&r, create);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char id[32];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);
  const char *net[] = {"sandbox",
                       "exec",
                       id,
                       "--",
                       "sh",
                       "-c",
                       "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
                       NULL};
  client(&r, net);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "lo\n", "network_mode none");
  sbx_run_free(&r);
  const char *bad[][2] = {
      {"pids_limit=many", "\"options.pids_limit\" must be an integer"},
      {"nope=1", "\"options.nope\": backend local has no such option"},
  };
  for (size_t i = 0; i < 2; i++) {
    const char *args[] = {"sandbox", "create", "-o", bad[i][0], NULL};
    client(&r, args);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, bad[i][1]) != NULL, "%s", r.err);
    sbx_run_free(&r);
  }
  char *runner = test_server_token(&srv, "runner", "run");
  setenv("SBX_TOKEN", runner, 1);
  const char *host[] = {"sandbox", "create", "-o", "isolation=none", NULL};
  client(&r, host);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "\"options.isolation\" may be only namespaces"), "%s",
            r.err);
  sbx_run_free(&r);
  const char *docker[] = {"sandbox", "create", "--backend",
                          "docker",  "-o",     "host=unix:///run/x.sock",
                          NULL};
  client(&r, docker);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "\"options.host\" reaches the server's own host"),
            "%s", r.err);
  sbx_run_free(&r);
  setenv("SBX_TOKEN", srv.token, 1);
  free(runner);
}
