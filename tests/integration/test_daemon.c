/* The daemon end to end: startup, auth, hello, idempotency, shutdown. */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/auth.h"
#include "shared/rand.h"
#include "tests/support/daemon.h"

Test(daemon, hello_reports_root_limits_and_version) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_hello(t.client, &r, &e), 0, "%s", e.msg);
  Sbx__V1__HelloReply *h = r->hello;
  cr_expect_eq(h->version, 1);
  cr_expect_str_eq(h->server_version, SBX_VERSION);
  char real[PATH_MAX];
  cr_assert_not_null(realpath(t.root, real));
  cr_expect_str_eq(h->root, real);
  cr_expect_eq(h->limits->max_processes, 64);
  cr_expect_eq(h->limits->retention_tail, 1u << 20);
  /* Archive limits that fit a large monorepo's checkout (500k files). */
  cr_expect_eq(h->limits->archive_max_members, 1000000);
  cr_expect_eq(h->limits->archive_max_input_bytes, 16ull << 30);
  cr_expect_eq(h->limits->archive_max_extracted_bytes, 64ull << 30);
  /* What a client may rely on; run_as only when sandboxd is root. */
  static const char *const want[] = {"exec", "archive", "exec_start_wait",
                                     "export_stream", "run_as"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    bool found = false;
    for (size_t j = 0; j < h->n_features; j++)
      found |= strcmp(h->features[j], want[i]) == 0;
    cr_expect(found || (strcmp(want[i], "run_as") == 0 && geteuid() != 0),
              "feature \"%s\" missing", want[i]);
  }
  sbx_client_reply_free(r);
  int st = test_daemon_stop(&t);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
}

Test(daemon, archive_limits_are_flags) {
  struct test_daemon t;
  const char *args[] = {"--archive-max-members",
                        "2000000",
                        "--archive-max-bytes",
                        "1048576",
                        "--archive-max-extracted-bytes",
                        "4096",
                        NULL};
  test_daemon_start(&t, args);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_hello(t.client, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->hello->limits->archive_max_members, 2000000);
  cr_expect_eq(r->hello->limits->archive_max_input_bytes, 1048576);
  cr_expect_eq(r->hello->limits->archive_max_extracted_bytes, 4096);
  sbx_client_reply_free(r);
  test_daemon_stop(&t);
}

Test(daemon, wrong_and_missing_token_are_refused) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct sbx_client *bad =
      test_daemon_client(&t, "0123456789abcdef0123456789abcdeX");
  struct sbx_error e = {0};
  cr_expect_eq(sbx_hello(bad, NULL, &e), -EKEYREJECTED);
  cr_expect_eq(e.code, SBX_UNAUTHENTICATED, "%s", e.msg);
  sbx_client_free(bad);
  struct sbx_client *none = test_daemon_client(&t, "");
  cr_expect_eq(sbx_hello(none, NULL, &e), -EKEYREJECTED);
  sbx_client_free(none);
  /* A prefix of the right token is not the token. */
  char prefix[33];
  memcpy(prefix, t.token, 32);
  prefix[32] = '\0';
  struct sbx_client *pre = test_daemon_client(&t, prefix);
  cr_expect_eq(sbx_hello(pre, NULL, &e), -EKEYREJECTED);
  sbx_client_free(pre);
  /* The right one still works afterwards. */
  cr_expect_eq(sbx_hello(t.client, NULL, &e), 0, "%s", e.msg);
  test_daemon_stop(&t);
}

/* A sandboxd that holds another secret (as an impostor on the socket
 * would, with a token it made up) is refused by the client before the
 * client's token goes out: the refusal is the client's own, naming the
 * socket, not sandboxd's "wrong or missing token". */
Test(daemon, a_sandboxd_with_another_secret_is_refused) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char other[SBX_TOKEN_HEX + 1];
  cr_assert_eq(sbx_random_hex(other, SBX_TOKEN_BYTES), 0);
  struct sbx_client *c = test_daemon_client(&t, other);
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  cr_expect_eq(sbx_exec_list(c, &r, &e), -EKEYREJECTED, "%s", e.msg);
  cr_expect_null(r);
  cr_expect_eq(e.code, SBX_UNAUTHENTICATED);
  cr_expect(strstr(e.msg, "did not prove it holds the sandbox's secret") &&
                strstr(e.msg, t.url),
            "%s", e.msg);
  cr_expect(!strstr(e.msg, "wrong or missing token"),
            "the token was sent and refused: %s", e.msg);
  sbx_client_free(c);
  test_daemon_stop(&t);
}

/* A raw Hello with NONCE (LEN bytes) and TOKEN (NULL: none) to T. */
static Sbx__V1__Response *raw_hello(struct test_daemon *t, const uint8_t *nonce,
                                    size_t len, const char *token) {
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  req.version = 1;
  req.id = "challenge-1";
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  req.hello = &h;
  h.client_version = 1;
  h.client_nonce.data = (uint8_t *)nonce;
  h.client_nonce.len = len;
  if (token) {
    req.token.data = (uint8_t *)token;
    req.token.len = strlen(token);
  }
  uint8_t buf[512];
  size_t n = sbx__v1__request__pack(&req, buf);
  return test_daemon_raw_call(t->url, buf, n);
}

/* sandboxd proves that it holds the token to a peer without it, and tells
 * that peer nothing more; with the token the reply is whole and proved. */
Test(daemon, hello_challenge_gets_a_proof_and_nothing_else) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint8_t nonce[SBX_HELLO_NONCE_BYTES];
  cr_assert_eq(sbx_random_bytes(nonce, sizeof(nonce)), 0);
  const uint8_t *secret = (const uint8_t *)t.token;
  Sbx__V1__Response *r = raw_hello(&t, nonce, sizeof(nonce), NULL);
  cr_assert_eq(r->body_case, SBX__V1__RESPONSE__BODY_HELLO, "error: %s",
               r->error ? r->error->message : "");
  Sbx__V1__HelloReply *h = r->hello;
  cr_expect_eq(h->version, 1);
  cr_expect(sbx_hello_proof_ok(secret, strlen(t.token), nonce, h->proof.data,
                               h->proof.len),
            "the proof is HMAC-SHA256(token, context || nonce)");
  cr_expect_str_eq(h->root, "", "a stranger learns no root");
  cr_expect_str_eq(h->server_version, "");
  cr_expect_eq(h->n_features, 0);
  cr_expect_null(h->limits);
  cr_expect_eq(h->n_grants, 0);
  sbx__v1__response__free_unpacked(r, NULL);

  /* With the token: everything, and the proof. */
  r = raw_hello(&t, nonce, sizeof(nonce), t.token);
  cr_assert_eq(r->body_case, SBX__V1__RESPONSE__BODY_HELLO);
  cr_expect_not_null(r->hello->limits);
  cr_expect_neq(r->hello->root[0], '\0');
  cr_expect(sbx_hello_proof_ok(secret, strlen(t.token), nonce,
                               r->hello->proof.data, r->hello->proof.len));
  bool flagged = false;
  for (size_t i = 0; i < r->hello->n_features; i++)
    flagged |= strcmp(r->hello->features[i], "hello_proof") == 0;
  cr_expect(flagged, "the \"hello_proof\" feature is announced");
  sbx__v1__response__free_unpacked(r, NULL);

  /* Without a nonce of the right size, no token is no answer. */
  r = raw_hello(&t, nonce, 16, NULL);
  cr_expect_eq(r->body_case, SBX__V1__RESPONSE__BODY__NOT_SET);
  cr_expect_eq(r->error->code, SBX__V1__CODE__UNAUTHENTICATED);
  sbx__v1__response__free_unpacked(r, NULL);
  test_daemon_stop(&t);
}

Test(daemon, socket_is_private) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct stat st;
  cr_assert_eq(stat(t.url + 6, &st), 0);
  cr_expect_eq(st.st_mode & 0077, 0, "socket mode %o", st.st_mode & 0777);
  test_daemon_stop(&t);
}

Test(daemon, malformed_requests_get_clear_errors) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  /* Garbage bytes. */
  Sbx__V1__Response *r = test_daemon_raw_call(t.url, "\xff\xff\xff\xff", 4);
  cr_expect_eq(r->error->code, SBX__V1__CODE__INVALID_ARGUMENT);
  sbx__v1__response__free_unpacked(r, NULL);

  /* A bad id, the right token, wrong version, unknown body. */
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  req.hello = &h;
  req.token.data = (uint8_t *)t.token;
  req.token.len = strlen(t.token);
  req.version = 1;
  req.id = "bad id!";
  uint8_t buf[512];
  size_t n = sbx__v1__request__pack(&req, buf);
  r = test_daemon_raw_call(t.url, buf, n);
  cr_expect_eq(r->error->code, SBX__V1__CODE__INVALID_ARGUMENT);
  cr_expect(strstr(r->error->message, "request id") != NULL);
  sbx__v1__response__free_unpacked(r, NULL);

  req.id = "v2";
  req.version = 2;
  n = sbx__v1__request__pack(&req, buf);
  r = test_daemon_raw_call(t.url, buf, n);
  cr_expect_eq(r->error->code, SBX__V1__CODE__VERSION_MISMATCH);
  cr_expect_str_eq(r->id, "v2");
  sbx__v1__response__free_unpacked(r, NULL);

  req.version = 1;
  req.id = "nobody";
  req.body_case = SBX__V1__REQUEST__BODY__NOT_SET;
  n = sbx__v1__request__pack(&req, buf);
  r = test_daemon_raw_call(t.url, buf, n);
  cr_expect_eq(r->error->code, SBX__V1__CODE__NOT_SUPPORTED);
  sbx__v1__response__free_unpacked(r, NULL);
  test_daemon_stop(&t);
}

Test(daemon, startup_errors_are_clear) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "%s --listen tcp://127.0.0.1:1 --root /tmp --token-fd 0 "
                 "</dev/null 2>&1 | grep -q 'refusing plain tcp'",
                 test_sandboxd_path());
  cr_expect_eq(system(cmd), 0, "plain tcp is refused without --insecure");
  (void)snprintf(cmd, sizeof(cmd),
                 "echo 0123456789abcdef0123 | %s --listen ipc:///tmp/x.sock "
                 "--root /nonexistent-dir --token-fd 0 2>&1 | grep -q "
                 "nonexistent-dir",
                 test_sandboxd_path());
  cr_expect_eq(system(cmd), 0, "a missing root is named");
  (void)snprintf(cmd, sizeof(cmd),
                 "echo short | %s --listen ipc:///tmp/x.sock --root /tmp "
                 "--token-fd 0 2>&1 | grep -q 'at least 16 bytes'",
                 test_sandboxd_path());
  cr_expect_eq(system(cmd), 0, "a short token is refused");
  (void)snprintf(cmd, sizeof(cmd), "%s --bogus 2>/dev/null; test $? -eq 2",
                 test_sandboxd_path());
  cr_expect_eq(system(cmd), 0, "unknown options exit 2");
  (void)snprintf(cmd, sizeof(cmd),
                 "%s --help | grep -q -- --token-fd && %s --version | grep -q "
                 "%s",
                 test_sandboxd_path(), test_sandboxd_path(), SBX_VERSION);
  cr_expect_eq(system(cmd), 0, "help and version");
  /* The isolation flags: each bad value named, and none without
   * --isolate (it would do nothing). */
  static const char *const bad[][2] = {
      {"--isolate --network bridge", "--network \"bridge\": expected user or "
                                     "none"},
      {"--isolate --uid-map 5", "--uid-map \"5\": expected HOST:COUNT"},
      {"--isolate --forward 0:80", "--forward \"0:80\": expected "
                                   "HOSTPORT:PORT"},
      {"--isolate --bind rel:/x", "--bind \"rel:/x\": expected SRC:DST[:ro]"},
      {"--isolate --root-at /", "--root-at \"/\": expected an absolute path"},
      {"--isolate --hostname a_b", "--hostname \"a_b\": expected a host name"},
      {"--isolate --cpus 2000", "--cpus \"2000\": expected a number of CPUs"},
      {"--isolate --memory-bytes -1", "--memory-bytes \"-1\""},
      {"--isolate --workspace-bytes 10", "--workspace-bytes \"10\""},
      {"--pids-limit 10", "--pids-limit needs --isolate"},
      {"--isolate --listen tcp://127.0.0.1:1 --insecure --root /tmp "
       "--token-fd 0",
       "--isolate serves on ipc://PATH only"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    (void)snprintf(cmd, sizeof(cmd),
                   "echo 0123456789abcdef0123 | %s %s 2>&1 | grep -qF -- '%s'",
                   test_sandboxd_path(), bad[i][0], bad[i][1]);
    cr_expect_eq(system(cmd), 0, "%s: says %s", bad[i][0], bad[i][1]);
  }
}

/* --install PATH copies sandboxd there, executable, and exits; a path
 * that cannot be written is named and leaves nothing behind. */
Test(daemon, install_copies_itself) {
  char dir[] = "/tmp/sbx-install-XXXXXX", cmd[1024];
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(cmd, sizeof(cmd),
                 "%s --install %s/sandboxd && test -x %s/sandboxd && "
                 "cmp -s %s %s/sandboxd && %s/sandboxd --version | grep -q %s",
                 test_sandboxd_path(), dir, dir, test_sandboxd_path(), dir, dir,
                 SBX_VERSION);
  cr_expect_eq(system(cmd), 0, "a copy that runs");
  (void)snprintf(cmd, sizeof(cmd),
                 "%s --install %s/missing/sandboxd 2>&1 | grep -qF -- "
                 "'--install \"%s/missing/sandboxd\": No such file or "
                 "directory' && test $(ls -A %s | wc -l) -eq 1",
                 test_sandboxd_path(), dir, dir, dir);
  cr_expect_eq(system(cmd), 0, "a missing directory is named");
  (void)snprintf(cmd, sizeof(cmd), "%s --install '' 2>/dev/null; test $? -eq 2",
                 test_sandboxd_path());
  cr_expect_eq(system(cmd), 0, "an empty path is a usage error");
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)system(cmd);
}

Test(daemon, repeated_mutating_request_runs_once) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  /* An append retried with the same id must append once and answer the
   * retry with the first reply (the size after the first append). */
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = "log.txt";
  w.data.data = (uint8_t *)"line\n";
  w.data.len = 5;
  w.mode = SBX__V1__WRITE_MODE__WRITE_APPEND;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_WRITE;
  req.file_write = &w;
  Sbx__V1__Response *a, *b;
  test_daemon_send_twice(&t, &req, "append-1", &a, &b);
  cr_assert_eq(a->body_case, SBX__V1__RESPONSE__BODY_FILE_WRITE);
  cr_assert_eq(b->body_case, SBX__V1__RESPONSE__BODY_FILE_WRITE);
  cr_expect_eq(a->file_write->size, 5);
  cr_expect_eq(b->file_write->size, 5, "the retry got the first reply");
  sbx__v1__response__free_unpacked(a, NULL);
  sbx__v1__response__free_unpacked(b, NULL);
  /* A new id appends again. */
  test_daemon_send_twice(&t, &req, "append-2", &a, &b);
  cr_expect_eq(a->file_write->size, 10);
  cr_expect_eq(b->file_write->size, 10);
  sbx__v1__response__free_unpacked(a, NULL);
  sbx__v1__response__free_unpacked(b, NULL);
  char path[256];
  (void)snprintf(path, sizeof(path), "%s/log.txt", t.root);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_size, 10, "two appends for four requests");
  test_daemon_stop(&t);
}

Test(daemon, tagged_requests_from_a_restarted_client_run_once) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t ids[2];
  for (int round = 0; round < 2; round++) {
    /* A fresh client each round, as after a controller restart. */
    struct sbx_client *c = test_daemon_client(&t, NULL);
    sbx_client_set_tag("run42-call_7");
    Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
    st.command = "echo x >> count";
    Sbx__V1__Response *r = NULL;
    struct sbx_error e = {0};
    cr_assert_eq(sbx_exec_start(c, &st, &r, &e), 0, "%s", e.msg);
    ids[round] = r->exec_start->exec_id;
    sbx_client_reply_free(r);
    /* Reads are not tagged: the wait below does not shift the ids. */
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = ids[round];
    rd.until_exit = true;
    rd.wait_ms = 5000;
    cr_assert_eq(sbx_exec_read(c, &rd, &r, &e), 0, "%s", e.msg);
    sbx_client_reply_free(r);
    sbx_client_set_tag(NULL);
    sbx_client_free(c);
  }
  cr_expect_eq(ids[0], ids[1], "the repeat got the first start's exec id");
  char path[256];
  (void)snprintf(path, sizeof(path), "%s/count", t.root);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_size, 2, "the command ran once");
  test_daemon_stop(&t);
}

/* Peers that hang up during the SP handshake (nng 1.5.2's issue 1518 in
 * Debian's build: the listener stopped for good) do not stop sandboxd from
 * serving: clients that come after them, and the one already connected. */
Test(daemon, hung_up_handshakes_do_not_stop_the_listener) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  test_daemon_hang_ups(t.url, 150);
  struct sbx_error e = {0};
  cr_expect_eq(sbx_hello(t.client, NULL, &e), 0, "connected client: %s", e.msg);
  for (int i = 0; i < 3; i++) {
    struct sbx_client *c = test_daemon_client(&t, NULL);
    cr_expect_eq(sbx_hello(c, NULL, &e), 0, "new client %d: %s", i, e.msg);
    sbx_client_free(c);
    test_daemon_hang_ups(t.url, 30);
  }
  test_daemon_stop(&t);
}
