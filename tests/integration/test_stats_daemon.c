/* sandboxd's Stats RPC and its stopping by itself (--expires-at,
 * --idle-timeout), against the real binary: what counts as activity
 * (not Hello, not Stats), that its processes die with it, and the
 * refusals of bad values and of a time to live already over. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "tests/support/daemon.h"
#include "tests/support/sbxrun.h"

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whether T's sandboxd has exited by itself within MS: its status then,
 * and T left for test_daemon_stop to clean up; -1 when it still runs. */
static int exited_within(struct test_daemon *t, unsigned ms) {
  for (unsigned waited = 0; waited <= ms; waited += 20) {
    int st = 0;
    if (waitpid(t->pid, &st, WNOHANG) == t->pid) {
      t->pid = 0;
      t->client = sbx_client_free(t->client);
      return st;
    }
    sleep_ms(20);
  }
  return -1;
}

/* Starts "sleep 60" in T's sandbox: its pid. */
static pid_t start_sleeper(struct test_daemon *t) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"sleep", "60", NULL};
  st.argv = argv;
  st.n_argv = 2;
  st.no_stdin = true;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_start(t->client, &st, &r, &e), 0, "%s", e.msg);
  uint64_t id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  cr_assert_eq(sbx_exec_list(t->client, &r, &e), 0, "%s", e.msg);
  pid_t pid = 0;
  for (size_t i = 0; i < r->exec_list->n_execs; i++)
    if (r->exec_list->execs[i]->exec_id == id)
      pid = r->exec_list->execs[i]->pid;
  sbx_client_reply_free(r);
  cr_assert_gt(pid, 0);
  return pid;
}

Test(stats_daemon, reports_processes_memory_and_disk) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char blob[100000];
  memset(blob, 'x', sizeof(blob));
  blob[sizeof(blob) - 1] = '\0';
  test_write_file(t.root, "blob.txt", blob);
  pid_t sleeper = start_sleeper(&t);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_stats(t.client, true, &r, &e), 0, "%s", e.msg);
  const Sbx__V1__StatsReply *s = r->stats;
  cr_expect(strcmp(s->source, "proc") == 0 || strcmp(s->source, "cgroup") == 0,
            "%s", s->source);
  cr_expect_geq(s->pids, 2, "sandboxd and the sleeper");
  cr_expect_gt(s->memory_bytes, 0);
  cr_expect_geq(s->disk_bytes, sizeof(blob) - 4096, "%llu",
                (unsigned long long)s->disk_bytes);
  cr_expect_eq(s->disk_entries, 1);
  cr_expect_not(s->disk_truncated);
  cr_expect_eq(s->expires_at, 0);
  cr_expect_eq(s->idle_timeout_s, 0);
  sbx_client_reply_free(r);
  /* Without disk: no walk. */
  cr_assert_eq(sbx_stats(t.client, false, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->stats->disk_bytes, 0);
  sbx_client_reply_free(r);
  (void)sleeper;
  test_daemon_stop(&t);
}

Test(stats_daemon, a_wrong_token_gets_no_stats) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct sbx_client *bad =
      test_daemon_client(&t, "0123456789abcdef0123456789abcdeX");
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_expect_lt(sbx_stats(bad, true, &r, &e), 0);
  cr_expect_eq(e.code, SBX_UNAUTHENTICATED, "%s", e.msg);
  cr_expect_null(r);
  sbx_client_free(bad);
  test_daemon_stop(&t);
}

/* A Stats from a newer client, with a field this sandboxd does not know,
 * is answered: unknown fields are ignored (DESIGN.md's wire protocol). */
Test(stats_daemon, unknown_fields_in_a_stats_request_are_ignored) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.version = 1;
  req.id = "stats-1";
  req.token.data = (uint8_t *)t.token;
  req.token.len = strlen(t.token);
  uint8_t buf[512];
  size_t n = sbx__v1__request__pack(&req, buf);
  /* Field 90 (Stats), 4 bytes: disk = true, and field 15 = 42. */
  static const uint8_t stats[] = {0xd2, 0x05, 0x04, 0x08, 0x01, 0x78, 0x2a};
  memcpy(buf + n, stats, sizeof(stats));
  Sbx__V1__Response *r = test_daemon_raw_call(t.url, buf, n + sizeof(stats));
  cr_assert_not_null(r);
  cr_expect(!r->error || r->error->code == SBX__V1__CODE__OK, "%s",
            r->error ? r->error->message : "");
  cr_assert_eq(r->body_case, SBX__V1__RESPONSE__BODY_STATS);
  cr_expect_geq(r->stats->pids, 1);
  sbx__v1__response__free_unpacked(r, NULL);
  test_daemon_stop(&t);
}

/* Hello and Stats, as ls, info and stats send them, are no activity: the
 * sandbox stops after its idle timeout while they keep coming, ten a
 * second (were they activity, it would run on as long as they come; the
 * loop gives up after 30 s, which only a load far beyond any test's
 * could stretch it to). No upper bound on the time: a loaded machine may
 * be slow to stop a daemon. */
Test(stats_daemon, idle_timeout_is_not_reset_by_hello_or_stats) {
  struct test_daemon t;
  const char *args[] = {"--idle-timeout", "2", NULL};
  test_daemon_start(&t, args);
  uint64_t t0 = sbx_now_ms();
  int st = -1;
  while (st < 0 && sbx_now_ms() - t0 < 30000) {
    struct sbx_error e = {0};
    Sbx__V1__Response *r = NULL;
    if (sbx_stats(t.client, false, &r, &e) == 0) {
      cr_expect_eq(r->stats->idle_timeout_s, 2);
      sbx_client_reply_free(r);
    }
    st = exited_within(&t, 100);
  }
  uint64_t took = sbx_now_ms() - t0;
  cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "sandboxd still runs after %llu ms of Stats, or failed: %d",
            (unsigned long long)took, st);
  cr_expect(took >= 1900, "stopped after %llu ms, before its idle timeout",
            (unsigned long long)took);
  test_daemon_stop(&t);
}

/* Requests (here exec_list) are activity: the sandbox outlives its idle
 * timeout while they come, then stops once they cease, killing its
 * processes. */
Test(stats_daemon, requests_keep_it_running_then_it_stops_idle) {
  struct test_daemon t;
  const char *args[] = {"--idle-timeout", "1", NULL};
  test_daemon_start(&t, args);
  pid_t sleeper = start_sleeper(&t);
  for (int i = 0; i < 8; i++) {
    Sbx__V1__Response *r = NULL;
    struct sbx_error e = {0};
    cr_assert_eq(sbx_exec_list(t.client, &r, &e), 0, "%s", e.msg);
    sbx_client_reply_free(r);
    sleep_ms(300);
  }
  cr_expect_eq(exited_within(&t, 0), -1, "stopped while in use");
  /* Waits generously: a loaded machine may be slow to stop a daemon. */
  int st = exited_within(&t, 20000);
  cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  for (int i = 0; i < 100 && kill(sleeper, 0) == 0; i++)
    sleep_ms(50);
  cr_expect(kill(sleeper, 0) < 0 && errno == ESRCH,
            "the sandbox's process outlived it");
  test_daemon_stop(&t);
}

Test(stats_daemon, stops_at_its_time_to_live) {
  struct test_daemon t;
  char at[32];
  (void)snprintf(at, sizeof(at), "%lld", (long long)time(NULL) + 2);
  const char *args[] = {"--expires-at", at, NULL};
  test_daemon_start(&t, args);
  pid_t sleeper = start_sleeper(&t);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_stats(t.client, false, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->stats->expires_at, strtoll(at, NULL, 10));
  sbx_client_reply_free(r);
  /* Activity does not extend a time to live. */
  for (int i = 0; i < 4; i++) {
    (void)sbx_exec_list(t.client, &r, &e);
    sbx_client_reply_free(r);
    r = NULL;
    sleep_ms(200);
  }
  int st = exited_within(&t, 20000);
  cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  for (int i = 0; i < 100 && kill(sleeper, 0) == 0; i++)
    sleep_ms(50);
  cr_expect(kill(sleeper, 0) < 0 && errno == ESRCH,
            "the sandbox's process outlived it");
  test_daemon_stop(&t);
}

/* Runs sandboxd with ARGS (after --listen, --root and --token-file of a
 * throwaway directory): its exit status, its stderr in ERR. */
static int run_sandboxd(const char *args, char *err, size_t n) {
  char dir[] = "/tmp/sbx-expiry-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  test_write_file(dir, "token", "0123456789abcdef0123456789abcdef\n");
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "chmod 600 %s/token; timeout 10 %s --listen ipc://%s/s "
                 "--root %s --token-file %s/token %s 2> %s/err",
                 dir, test_sandboxd_path(), dir, dir, dir, args, dir);
  int st = system(cmd);
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/err", dir);
  FILE *f = fopen(p, "r");
  size_t k = f ? fread(err, 1, n - 1, f) : 0;
  err[k] = '\0';
  if (f)
    fclose(f);
  (void)test_rm_rf(dir);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(stats_daemon, refuses_bad_values_and_a_time_to_live_already_over) {
  char err[2048];
  static const struct {
    const char *args, *want;
    int status;
  } cases[] = {
      {"--idle-timeout 0", "--idle-timeout \"0\": expected", 2},
      {"--idle-timeout 5m", "--idle-timeout \"5m\": expected", 2},
      {"--expires-at -3", "--expires-at \"-3\": expected", 2},
      {"--expires-at 1000", "time to live has ended", 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int st = run_sandboxd(cases[i].args, err, sizeof(err));
    cr_expect_eq(st, cases[i].status, "%s: %d (%s)", cases[i].args, st, err);
    cr_expect(strstr(err, cases[i].want), "%s: %s", cases[i].args, err);
  }
}
