/* The remote backend end to end: real sandboxd processes started here on
 * tls+tcp:// at distinct loopback addresses (127.0.0.2, .3, ...), with
 * certificates from sbx's CA (controller/ca/ca.h), claimed and used by the
 * built sbx, refused with a wrong certificate, and the error paths of the
 * backend's options and of sbx ca. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/ca/ca.h"
#include "shared/port.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char tmp[64], state[128], cadir[160];

static void setup(void) {
  (void)snprintf(tmp, sizeof(tmp), "/tmp/sbx-remote-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp));
  (void)snprintf(state, sizeof(state), "%s/state", tmp);
  (void)snprintf(cadir, sizeof(cadir), "%s/ca", tmp);
  struct sbx_error e = {0};
  cr_assert_eq(ca_init(cadir, NULL, &e), 0, "%s", e.msg);
}

static void teardown(void) {
  (void)test_rm_rf(tmp);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 180);

struct endpoint {
  pid_t pid;
  char url[64];
  char dir[192]; /* its host's files: workspace/, lease/, the TLS files */
};

/* Starts sandboxd on 127.0.0.X with a server certificate named CERT_NAME
 * (NULL: its address) from the CA in CA (NULL: the test's), and waits for
 * it to serve. */
static void endpoint_start(struct endpoint *ep, int x, const char *cert_name,
                           const char *ca) {
  char addr[32], p[4][256];
  (void)snprintf(addr, sizeof(addr), "127.0.0.%d", x);
  const char *name = cert_name ? cert_name : addr;
  ca = ca ? ca : cadir;
  (void)snprintf(ep->dir, sizeof(ep->dir), "%s/host-%d", tmp, x);
  cr_assert_eq(mkdir(ep->dir, 0700), 0);
  const char *sub[] = {"workspace", "lease"};
  for (int i = 0; i < 2; i++) {
    (void)snprintf(p[0], sizeof(p[0]), "%s/%s", ep->dir, sub[i]);
    cr_assert_eq(mkdir(p[0], 0700), 0);
  }
  (void)snprintf(p[0], sizeof(p[0]), "%s/server.crt", ep->dir);
  (void)snprintf(p[1], sizeof(p[1]), "%s/server.key", ep->dir);
  (void)snprintf(p[2], sizeof(p[2]), "%s/ca.pem", ep->dir);
  (void)snprintf(p[3], sizeof(p[3]), "%s/servers/%s.token", ca, name);
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  char tok[80];
  cr_assert_eq(ca_issue(ca, CA_SERVER, name, now - 60, now + 86400, p[0], p[1],
                        NULL, &e),
               0, "%s", e.msg);
  cr_assert_eq(ca_write_bundle(ca, p[2], &e), 0, "%s", e.msg);
  cr_assert_eq(ca_server_token(ca, name, true, tok, sizeof(tok), &e), 0, "%s",
               e.msg);
  uint16_t port = 0;
  cr_assert_eq(sbx_free_tcp_port(&port), 0);
  (void)snprintf(ep->url, sizeof(ep->url), "tls+tcp://%s:%u", addr, port);
  char root[256], lease[256], sd[256];
  (void)snprintf(root, sizeof(root), "%s/workspace", ep->dir);
  (void)snprintf(lease, sizeof(lease), "%s/lease", ep->dir);
  (void)snprintf(sd, sizeof(sd), "%s/sandboxd", SBX_BUILD_DIR);
  int rp[2];
  cr_assert_eq(pipe(rp), 0);
  ep->pid = fork();
  cr_assert(ep->pid >= 0);
  if (ep->pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(rp[0]);
    if (dup2(rp[1], 5) < 0)
      _exit(127);
    execl(sd, sd, "--listen", ep->url, "--root", root, "--grant", lease,
          "--token-file", p[3], "--tls-cert", p[0], "--tls-key", p[1],
          "--tls-ca", p[2], "--ready-fd", "5", (char *)NULL);
    _exit(127);
  }
  close(rp[1]);
  struct pollfd pfd = {.fd = rp[0], .events = POLLIN};
  char line[64];
  cr_assert_eq(poll(&pfd, 1, 10000), 1, "sandboxd at %s did not start",
               ep->url);
  cr_assert(read(rp[0], line, sizeof(line)) > 0, "sandboxd at %s failed",
            ep->url);
  close(rp[0]);
}

static void endpoint_stop(struct endpoint *ep) {
  if (ep->pid > 0) {
    (void)kill(ep->pid, SIGKILL);
    (void)waitpid(ep->pid, NULL, 0);
    ep->pid = 0;
  }
}

/* Whether the endpoint's host has FILE (relative to its directory). */
static bool has(const struct endpoint *ep, const char *file) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", ep->dir, file);
  return access(p, F_OK) == 0;
}

/* How many entries its workspace holds. */
static int workspace_entries(const struct endpoint *ep) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "ls -A %s/workspace | wc -l", ep->dir);
  FILE *f = popen(cmd, "r");
  int n = -1;
  cr_assert(f && fscanf(f, "%d", &n) == 1);
  pclose(f);
  return n;
}

/* sbx sandbox create --backend remote with ARGS; the result in R. */
static void create(struct sbx_run_out *r, const char *const *args) {
  const char *argv[24] = {"create", "--backend", "remote", "--ca-dir", cadir};
  size_t n = 5;
  for (size_t i = 0; args[i] && n < 23; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_sandbox_run(r, state, argv);
}

static const char agent_fmt[] =
    "{\"name\": \"Tester\", \"model\": \"test-model\", \"instructions\": "
    "\"Be brief.\", \"run_config\": {\"backend\": \"remote\", \"endpoints\": "
    "[%s], \"ca_dir\": \"%s\"},"
    " \"default_manifest\": {\"entries\": {\"notes.txt\": {\"type\": "
    "\"file\", \"content\": \"alpha\\nbeta\\n\"}}}}";

static const char *write_agent(const char *endpoints) {
  static char path[256];
  (void)snprintf(path, sizeof(path), "%s/agent.json", tmp);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, agent_fmt, endpoints, cadir);
  fclose(f);
  return path;
}

Test(remote, run_claims_an_endpoint_uses_it_and_leaves_it_clean) {
  struct endpoint a = {0};
  endpoint_start(&a, 2, NULL, NULL);
  char eps[128];
  (void)snprintf(eps, sizeof(eps), "\"%s\"", a.url);
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"cat notes.txt; pwd; touch made-here\"}}]},"
      " {\"text\": \"done\"}]",
      NULL);
  const char *argv[] = {"run",    "--state-dir", state, write_agent(eps),
                        "Do it.", NULL};
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url, argv);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  const char *o = test_call_output(reqs, 1, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "alpha\nbeta\n") != NULL, "%s", o);
  cr_expect(strstr(o, "/host-2/workspace\n") != NULL, "%s", o);
  /* Released: the workspace emptied, the lease given back. */
  cr_expect_eq(workspace_entries(&a), 0);
  cr_expect(!has(&a, "lease/claim"));
  json_decref(reqs);
  sbx_run_free(&r);
  endpoint_stop(&a);
}

/* The id a create printed, into ID. */
static void created_id(const struct sbx_run_out *r, char *id, size_t n) {
  (void)snprintf(id, n, "%.*s", (int)strcspn(r->out, "\n"), r->out);
}

/* Without --ca-dir, sbx's CA is the one in the state directory given
 * with --state-dir (sbx ca's default), not in the default one. */
Test(remote, the_ca_is_found_in_the_state_directory_given) {
  char own[320];
  (void)snprintf(own, sizeof(own), "%s/ca", state);
  struct sbx_error e = {0};
  cr_assert_eq(ca_init(own, NULL, &e), 0, "%s", e.msg);
  struct endpoint a = {0};
  endpoint_start(&a, 2, NULL, own);
  struct sbx_run_out r;
  const char *argv[] = {"create",     "--backend", "remote",
                        "--endpoint", a.url,       NULL};
  sbx_sandbox_run(&r, state, argv);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  char id[64];
  created_id(&r, id, sizeof(id));
  sbx_run_free(&r);
  const char *rm[] = {"rm", id, NULL};
  sbx_sandbox_run(&r, state, rm);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  endpoint_stop(&a);
}

/* SIGHUP makes sandboxd read its TLS files again: a client certificate
 * revoked in the new CA file is refused from then on, without a restart,
 * while the sandbox it serves goes on (its client reconnects); a CA file
 * that cannot be used leaves it serving with the old one. */
Test(remote, sighup_takes_a_new_revocation_list_without_a_restart) {
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  char crt[256], key[256], pem[256];
  (void)snprintf(crt, sizeof(crt), "%s/clients/later.crt", cadir);
  (void)snprintf(key, sizeof(key), "%s/clients/later.key", cadir);
  cr_assert_eq(ca_issue(cadir, CA_CLIENT, "later", now - 60, now + 86400, crt,
                        key, NULL, &e),
               0, "%s", e.msg);
  struct endpoint a = {0}, b = {0};
  endpoint_start(&a, 2, NULL, NULL);
  endpoint_start(&b, 3, NULL, NULL);
  struct sbx_run_out r;
  const char *on_a[] = {"--endpoint", a.url, NULL};
  create(&r, on_a);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char id[64];
  created_id(&r, id, sizeof(id));
  sbx_run_free(&r);
  const char *later[] = {"--endpoint", b.url, "--client", "later", NULL};
  create(&r, later);
  cr_expect_eq(r.status, 0, "before the revocation: %s", r.err);
  sbx_run_free(&r);
  size_t n = 0;
  cr_assert_eq(ca_revoke(cadir, "later", &n, &e), 0, "%s", e.msg);
  sbx_sandbox_remove_all(state);
  create(&r, on_a);
  cr_assert_eq(r.status, 0, "%s", r.err);
  created_id(&r, id, sizeof(id));
  sbx_run_free(&r);
  /* The new CA file on both hosts, then SIGHUP. */
  const struct endpoint *eps[] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    (void)snprintf(pem, sizeof(pem), "%s/ca.pem", eps[i]->dir);
    cr_assert_eq(ca_write_bundle(cadir, pem, &e), 0, "%s", e.msg);
    cr_assert_eq(kill(eps[i]->pid, SIGHUP), 0);
  }
  usleep(300 * 1000);
  create(&r, later);
  cr_expect_neq(r.status, 0, "revoked, yet accepted");
  cr_expect(strstr(r.err, "alert certificate revoked"), "%s", r.err);
  sbx_run_free(&r);
  const char *exec[] = {"exec", id, "--", "echo", "still here", NULL};
  sbx_sandbox_run(&r, state, exec);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "still here\n");
  sbx_run_free(&r);
  /* A CA file that cannot be used: b serves on with the one it has. */
  (void)snprintf(pem, sizeof(pem), "%s/ca.pem", b.dir);
  FILE *f = fopen(pem, "w");
  cr_assert_not_null(f);
  fputs("not a certificate\n", f);
  fclose(f);
  cr_assert_eq(kill(b.pid, SIGHUP), 0);
  usleep(300 * 1000);
  const char *on_b[] = {"--endpoint", b.url, NULL};
  create(&r, on_b);
  cr_expect_eq(r.status, 0, "after a bad reload: %s", r.err);
  sbx_run_free(&r);
  cr_expect_eq(kill(b.pid, 0), 0, "sandboxd stopped on a bad reload");
  sbx_sandbox_remove_all(state);
  endpoint_stop(&a);
  endpoint_stop(&b);
}

Test(remote, an_endpoint_is_claimed_by_one_sandbox_at_a_time) {
  struct endpoint a = {0}, b = {0};
  endpoint_start(&a, 2, NULL, NULL);
  endpoint_start(&b, 3, NULL, NULL);
  /* Two controllers at once on one endpoint: exactly one gets it. */
  pid_t kids[2];
  for (int i = 0; i < 2; i++) {
    kids[i] = fork();
    cr_assert(kids[i] >= 0);
    if (kids[i] == 0) {
      struct sbx_run_out r;
      const char *args[] = {"--endpoint", a.url, NULL};
      create(&r, args);
      _exit(r.status);
    }
  }
  int ok = 0;
  for (int i = 0; i < 2; i++) {
    int st = 0;
    cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
    ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  cr_expect_eq(ok, 1, "%d of two controllers claimed one endpoint", ok);
  cr_expect(has(&a, "lease/claim"));
  /* The next one is told why, and with a second endpoint takes that. */
  struct sbx_run_out r;
  const char *one[] = {"--endpoint", a.url, NULL};
  create(&r, one);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "is claimed") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *two[] = {"--endpoint", a.url, "--endpoint", b.url, NULL};
  create(&r, two);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(has(&b, "lease/claim"));
  sbx_run_free(&r);
  /* Removing them gives both back. */
  sbx_sandbox_remove_all(state);
  cr_expect(!has(&a, "lease/claim"));
  cr_expect(!has(&b, "lease/claim"));
  endpoint_stop(&a);
  endpoint_stop(&b);
}

/* Expects a create against URL (with EXTRA args) to be refused before it
 * claims anything, saying REASON. */
static void expect_refused(const struct endpoint *ep, const char *const *args,
                           const char *why, const char *reason) {
  struct sbx_run_out r;
  create(&r, args);
  cr_expect_neq(r.status, 0, "%s: accepted", why);
  cr_expect(strstr(r.err, "no free remote endpoint") != NULL, "%s: %s", why,
            r.err);
  cr_expect(strstr(r.err, reason) != NULL, "%s: %s", why, r.err);
  cr_expect(!has(ep, "lease/claim"), "%s: the lease was taken", why);
  sbx_run_free(&r);
}

Test(remote, wrong_certificates_are_refused) {
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  char crt[256], key[256];
  /* A client certificate that expired yesterday, and one revoked before
   * sandboxd started (it reads its CA file's revocation list). */
  (void)snprintf(crt, sizeof(crt), "%s/clients/old.crt", cadir);
  (void)snprintf(key, sizeof(key), "%s/clients/old.key", cadir);
  cr_assert_eq(ca_issue(cadir, CA_CLIENT, "old", now - 2 * 86400, now - 86400,
                        crt, key, NULL, &e),
               0, "%s", e.msg);
  (void)snprintf(crt, sizeof(crt), "%s/clients/gone.crt", cadir);
  (void)snprintf(key, sizeof(key), "%s/clients/gone.key", cadir);
  cr_assert_eq(ca_issue(cadir, CA_CLIENT, "gone", now - 60, now + 86400, crt,
                        key, NULL, &e),
               0, "%s", e.msg);
  size_t n = 0;
  cr_assert_eq(ca_revoke(cadir, "gone", &n, &e), 0, "%s", e.msg);
  cr_assert_eq(n, 1);
  struct endpoint a = {0}, b = {0};
  endpoint_start(&a, 2, NULL, NULL);
  const char *expired[] = {"--endpoint", a.url, "--client", "old", NULL};
  expect_refused(&a, expired, "an expired client certificate",
                 "refused the TLS handshake (sbx's client certificate");
  const char *revoked[] = {"--endpoint", a.url, "--client", "gone", NULL};
  expect_refused(&a, revoked, "a revoked client certificate",
                 "alert certificate revoked");
  /* A client certificate of another CA, with the right CA and token. */
  char other[192], cmd[1024];
  (void)snprintf(other, sizeof(other), "%s/other-ca", tmp);
  cr_assert_eq(ca_init(other, NULL, &e), 0, "%s", e.msg);
  (void)snprintf(crt, sizeof(crt), "%s/clients/default.crt", other);
  (void)snprintf(key, sizeof(key), "%s/clients/default.key", other);
  cr_assert_eq(ca_issue(other, CA_CLIENT, "default", now - 60, now + 86400, crt,
                        key, NULL, &e),
               0, "%s", e.msg);
  (void)snprintf(cmd, sizeof(cmd),
                 "cp %s/ca.pem %s/ca.pem && cp %s/servers/* "
                 "%s/servers/",
                 cadir, other, cadir, other);
  cr_assert_eq(system(cmd), 0);
  const char *foreign[] = {"--endpoint", a.url, "--ca-dir", other, NULL};
  expect_refused(&a, foreign, "a client certificate of another CA",
                 "alert unknown ca");
  /* The valid client certificate is taken there. */
  struct sbx_run_out ok;
  const char *valid[] = {"--endpoint", a.url, NULL};
  create(&ok, valid);
  cr_expect_eq(ok.status, 0, "%s", ok.err);
  sbx_run_free(&ok);
  cr_expect(has(&a, "lease/claim"));
  /* A sandboxd whose certificate names another sandbox (127.0.0.2's, at
   * 127.0.0.3): sbx dials it by name and refuses it. */
  endpoint_start(&b, 3, "sandbox-b", NULL);
  char ep[256];
  (void)snprintf(ep, sizeof(ep), "[{\"url\": \"%s\", \"name\": \"127.0.0.2\"}]",
                 b.url);
  const char *spoof[] = {"-o", "endpoints=", NULL};
  char opt[300];
  (void)snprintf(opt, sizeof(opt), "endpoints=%s", ep);
  spoof[1] = opt;
  expect_refused(&b, spoof, "a server certificate for another name",
                 "sbx refuses the certificate of sandboxd at");
  /* The same sandboxd under its own name, and the valid client: taken. */
  (void)snprintf(opt, sizeof(opt),
                 "endpoints=[{\"url\": \"%s\", \"name\": \"sandbox-b\"}]",
                 b.url);
  struct sbx_run_out r;
  create(&r, spoof);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cr_expect(has(&b, "lease/claim"));
  sbx_sandbox_remove_all(state);
  endpoint_stop(&a);
  endpoint_stop(&b);
}

Test(remote, option_errors) {
  char pool[256], bad[256];
  (void)snprintf(pool, sizeof(pool), "%s/pool.json", tmp);
  (void)snprintf(bad, sizeof(bad), "%s/bad.json", tmp);
  FILE *f = fopen(bad, "w");
  cr_assert_not_null(f);
  fputs("{\"endpoints\": [", f);
  fclose(f);
  f = fopen(pool, "w");
  cr_assert_not_null(f);
  fputs("{\"endpoints\": []}", f);
  fclose(f);
  static const struct {
    const char *args[6];
    const char *want;
  } cases[] = {
      {{NULL}, "needs endpoints or a pool file"},
      {{"--endpoint", "tcp://127.0.0.2:7443"}, "speaks mutual TLS only"},
      {{"--endpoint", "tls+tcp://127.0.0.2"}, "is not tls+tcp://HOST:PORT"},
      {{"--endpoint", "tls+tcp://127.0.0.2:x"}, "is not tls+tcp://HOST:PORT"},
      {{"-o", "endpoints=[{\"url\": \"tls+tcp://h:1\", \"port\": \"1\"}]"},
       "unknown key or not a string \"port\""},
      {{"-o", "endpoints=[{\"name\": \"x\"}]"}, "expected a URL or an object"},
      {{"-o", "endpoints=[{\"url\": \"tls+tcp://h:1\", \"name\": \"A_B\"}]"},
       "bad name \"A_B\""},
      {{"-o", "endpoints=[]"}, "expected a non-empty array"},
      {{"--pool", "/nonexistent/pool.json"}, "pool:"},
      {{"--pool", NULL}, "pool: expected a non-empty array"},
      {{"--pool", NULL}, "pool:"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--client", "Bad/Name"},
       "client: bad name"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--ca-dir", ""},
       "ca_dir: expected a directory"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--expose", "80"},
       "does not support exposed ports"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--seccomp", "off"},
       "does not support a seccomp mode"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--ttl", "1h"},
       "does not support an expiry or idle timeout"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--idle-timeout", "60"},
       "does not support an expiry or idle timeout"},
      {{"--endpoint", "tls+tcp://127.0.0.2:7443", "--ca-dir", "/nonexistent"},
       "no CA in \"/nonexistent\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *args[8] = {0};
    for (size_t k = 0; k < 6 && cases[i].args[k]; k++)
      args[k] = cases[i].args[k];
    if (strcmp(cases[i].args[0] ? cases[i].args[0] : "", "--pool") == 0 &&
        !cases[i].args[1])
      args[1] = strstr(cases[i].want, "non-empty") ? pool : bad;
    struct sbx_run_out r;
    create(&r, args);
    cr_expect_eq(r.status, 2, "case %zu: %d %s", i, r.status, r.err);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "case %zu: %s", i, r.err);
    sbx_run_free(&r);
  }
  /* An endpoint where nothing listens is skipped, and named. */
  struct sbx_run_out r;
  const char *none[] = {"--endpoint", "tls+tcp://127.0.0.2:1", NULL};
  create(&r, none);
  cr_expect_eq(r.status, 1, "%s", r.err);
  cr_expect(strstr(r.err, "no free remote endpoint of 1") != NULL, "%s", r.err);
  sbx_run_free(&r);
}

/* sbx ca ARGS with --ca-dir DIR; the result in R. */
static void ca_cli(struct sbx_run_out *r, const char *dir,
                   const char *const *args) {
  const char *argv[16] = {"ca", "--ca-dir", dir};
  size_t n = 3;
  for (size_t i = 0; args[i] && n < 15; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_run(r, NULL, argv);
}

Test(remote, ca_commands_and_their_errors) {
  char fresh[192], out[192];
  (void)snprintf(fresh, sizeof(fresh), "%s/fresh/ca", tmp);
  (void)snprintf(out, sizeof(out), "%s/host", tmp);
  struct sbx_run_out r;
  const char *show[] = {"show", NULL};
  ca_cli(&r, fresh, show);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "no CA in") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *init[] = {"init", NULL};
  ca_cli(&r, fresh, init);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "made the CA") != NULL, "%s", r.out);
  sbx_run_free(&r);
  char key[256];
  (void)snprintf(key, sizeof(key), "%s/ca.key", fresh);
  struct stat st;
  cr_assert_eq(stat(key, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  ca_cli(&r, fresh, init);
  cr_expect(strstr(r.out, "kept the CA") != NULL, "%s", r.out);
  sbx_run_free(&r);
  const char *srv[] = {"issue-server", "web-1", "--out", out, NULL};
  ca_cli(&r, fresh, srv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *files[] = {"server.crt", "server.key", "ca.pem", "token"};
  for (size_t i = 0; i < 4; i++) {
    char p[300];
    (void)snprintf(p, sizeof(p), "%s/%s", out, files[i]);
    cr_expect_eq(access(p, R_OK), 0, "%s", p);
  }
  static const struct {
    const char *args[6];
    const char *want;
  } cases[] = {
      {{NULL}, "usage: sbx ca"},
      {{"bogus"}, "unknown subcommand \"bogus\""},
      {{"issue-server", "web-2"}, "--out DIR is required"},
      {{"issue-server", "Web_2", "--out", "/tmp"}, "bad name \"Web_2\""},
      {{"issue-client", "c", "--days", "0"}, "--days expects 1 to 3650"},
      {{"issue-client", "c", "--bogus"}, "unknown or incomplete option"},
      {{"issue-client"}, "expected one NAME"},
      {{"revoke", "nobody"}, "no client certificate \"nobody\""},
      {{"revoke", "web-1"}, "no client certificate \"web-1\""},
      {{"crl"}, "--out FILE is required"},
      {{"init", "extra"}, "expected no arguments"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ca_cli(&r, fresh, cases[i].args);
    cr_expect_eq(r.status, 2, "case %zu: %d %s", i, r.status, r.err);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "case %zu: %s", i, r.err);
    sbx_run_free(&r);
  }
  const char *cl[] = {"issue-client", "ctl", NULL};
  ca_cli(&r, fresh, cl);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *rv[] = {"revoke", "ctl", NULL};
  ca_cli(&r, fresh, rv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "revoked 1 certificate") != NULL, "%s", r.out);
  sbx_run_free(&r);
  const char *js[] = {"show", "--json", NULL};
  ca_cli(&r, fresh, js);
  json_t *o = json_loads(r.out, 0, NULL);
  cr_assert_not_null(o, "%s", r.out);
  cr_expect_eq(json_array_size(json_object_get(o, "issued")), 2);
  cr_expect_not_null(json_object_get(
      json_array_get(json_object_get(o, "issued"), 1), "revoked_at"));
  json_decref(o);
  sbx_run_free(&r);
}

/* deploy/systemd/sandboxd-remote.service, with the built sandboxd, passes
 * systemd-analyze verify. */
Test(remote, systemd_unit_verifies) {
  FILE *in =
      fopen(SBX_SOURCE_DIR "/deploy/systemd/sandboxd-remote.service", "r");
  cr_assert_not_null(in);
  char unit[256];
  (void)snprintf(unit, sizeof(unit), "%s/sandboxd-remote.service", tmp);
  FILE *out = fopen(unit, "w");
  cr_assert_not_null(out);
  char line[1024];
  bool exec = false;
  while (fgets(line, sizeof(line), in)) {
    char *p = strstr(line, "/usr/local/bin/sandboxd");
    exec |= p != NULL;
    if (p)
      fprintf(out, "%.*s%s/sandboxd%s", (int)(p - line), line, SBX_BUILD_DIR,
              p + strlen("/usr/local/bin/sandboxd"));
    else
      fputs(line, out);
  }
  fclose(in);
  fclose(out);
  cr_assert(exec, "the unit does not start /usr/local/bin/sandboxd");
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "systemd-analyze verify %s 2>&1", unit);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char said[4096] = "";
  size_t n = fread(said, 1, sizeof(said) - 1, p);
  said[n] = '\0';
  int st = pclose(p);
  cr_expect_eq(st, 0, "systemd-analyze verify: %s", said);
  cr_expect_eq(n, 0, "systemd-analyze verify: %s", said);
}

/* The run id that the stderr of a paused run names. */
static char *paused_run(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  return strndup(p, strcspn(p, " \n"));
}

/* A run paused for approval on endpoint A, whose sandboxd is then killed:
 * resumed, it goes on at endpoint B from the run's snapshot. And a
 * sandboxd killed under a running command fails the run saying so. */
Test(remote, killed_endpoint_run_resumes_on_another) {
  struct endpoint a = {0}, b = {0};
  endpoint_start(&a, 2, NULL, NULL);
  endpoint_start(&b, 3, NULL, NULL);
  char eps[256], agent[1024];
  (void)snprintf(eps, sizeof(eps), "\"%s\", \"%s\"", a.url, b.url);
  (void)snprintf(agent, sizeof(agent), "%s", write_agent(eps));
  /* The same agent with approvals: mkdir passes, the rest asks. */
  char cmd[1200];
  (void)snprintf(cmd, sizeof(cmd),
                 "sed -i 's/^{/{\"approvals\": {\"exec_command\": "
                 "[\"mkdir\"]}, /' %s",
                 agent);
  cr_assert_eq(system(cmd), 0);
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"mkdir made-on-a\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"ls; pwd\"}}]},"
      " {\"text\": \"done\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, agent, "Do it.", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *id = paused_run(r.err);
  sbx_run_free(&r);
  cr_expect(has(&a, "lease/claim"), "the paused run holds endpoint A");
  cr_expect(has(&a, "workspace/made-on-a"));
  endpoint_stop(&a);
  const char *ok[] = {"approve", "--state-dir", state, id, "r1", NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  cr_expect(strstr(r.err, "is gone") != NULL, "%s", r.err);
  const char *o = test_call_output(reqs, -1, "r1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "made-on-a\n") != NULL, "the snapshot's: %s", o);
  cr_expect(strstr(o, "/host-3/workspace") != NULL, "on endpoint B: %s", o);
  cr_expect_eq(workspace_entries(&b), 0);
  cr_expect(!has(&b, "lease/claim"));
  json_decref(reqs);
  sbx_run_free(&r);
  free(id);

  /* Killed under a running command: a clear error, not a hang. */
  endpoint_start(&a, 4, NULL, NULL);
  (void)snprintf(eps, sizeof(eps), "\"%s\"", a.url);
  (void)snprintf(agent, sizeof(agent), "%s", write_agent(eps));
  char script[512];
  (void)snprintf(script, sizeof(script),
                 "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
                 "\"k1\", \"arguments\": {\"cmd\": \"kill -9 %d; sleep 30\", "
                 "\"yield_time_ms\": 20000}}]}, {\"text\": \"never\"}]",
                 (int)a.pid);
  test_model_server_start(&srv, script, NULL);
  const char *run2[] = {"run", "--state-dir", state,    "--heartbeat",
                        "2",   agent,         "Do it.", NULL};
  sbx_run(&r, srv.base_url, run2);
  reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect(r.secs < 60, "took %.1f s", r.secs);
  /* The model is told the command's sandbox went away; sbx says the
   * endpoint could not be released. */
  o = test_call_output(reqs, -1, "k1");
  cr_assert_not_null(o, "%s", r.err);
  cr_expect(strstr(o, "lost the connection to sandboxd at") != NULL, "%s", o);
  cr_expect(strstr(r.err, "cannot release tls+tcp://127.0.0.4:") != NULL, "%s",
            r.err);
  json_decref(reqs);
  sbx_run_free(&r);
  (void)waitpid(a.pid, NULL, 0);
  endpoint_stop(&b);
}
