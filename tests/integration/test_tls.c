/* sandboxd over tls+tcp:// with client-certificate verification. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/server/server.h"
#include "tests/support/certs.h"
#include "tests/support/daemon.h"
#include "tests/support/sbxrun.h"

static char certs[64];

/* The certificates of every test here (certs.h). */
static void make_certs(void) {
  cr_assert_eq(test_make_certs(certs, sizeof(certs)), 0,
               "openssl could not make test certificates");
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t l = sizeof(a);
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &l), 0);
  close(s);
  return ntohs(a.sin_port);
}

static struct sbx_client *tls_client(struct test_daemon *t, const char *who) {
  char ca[128], crt[128], key[128];
  (void)snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
  (void)snprintf(crt, sizeof(crt), "%s/%s.crt", certs, who);
  (void)snprintf(key, sizeof(key), "%s/%s.key", certs, who);
  struct sbx_client_config cfg = {
      .url = t->url,
      .token = (const uint8_t *)t->token,
      .token_len = strlen(t->token),
      .tls_ca = ca,
      .tls_cert = who ? crt : NULL,
      .tls_key = who ? key : NULL,
      .tls_server_name = "localhost",
      .timeout_ms = 1500,
      .retries = 1,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "%s", e.msg);
  return c;
}

/* Starts sandboxd on a free loopback port with the server certificate,
 * and EXTRA arguments (NULL-terminated, at most 8; may be NULL). */
static void start_tls_with(struct test_daemon *t, const char *const *extra) {
  char url[64], cert[128], key[128], ca[128];
  (void)snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%d", free_port());
  (void)snprintf(cert, sizeof(cert), "%s/server.crt", certs);
  (void)snprintf(key, sizeof(key), "%s/server.key", certs);
  (void)snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
  const char *args[20] = {"--listen",  url, "--tls-cert", cert,
                          "--tls-key", key, "--tls-ca",   ca};
  for (size_t i = 0; extra && extra[i] && i < 8; i++)
    args[8 + i] = extra[i];
  test_daemon_start(t, args);
}

static void start_tls(struct test_daemon *t) {
  start_tls_with(t, NULL);
}

static void cleanup_certs(void) {
  (void)test_rm_rf(certs);
}

/* One timeout for the suite (the flood test needs most of it): a Test's
 * own .timeout in a suite that has one makes Criterion leak 48 bytes. */
TestSuite(tls, .init = make_certs, .fini = cleanup_certs, .timeout = 120);

Test(tls, client_with_a_certificate_from_the_ca_is_served) {
  struct test_daemon t;
  start_tls(&t);
  struct sbx_client *c = tls_client(&t, "client");
  struct sbx_error e = {0};
  cr_expect_eq(sbx_hello(c, NULL, &e), 0, "%s", e.msg);
  t.client = c;
  test_daemon_stop(&t);
}

Test(tls, client_without_or_with_a_foreign_certificate_is_refused) {
  struct test_daemon t;
  start_tls(&t);
  struct sbx_error e = {0};
  struct sbx_client *none = tls_client(&t, NULL);
  cr_expect_lt(sbx_hello(none, NULL, &e), 0, "no client certificate");
  sbx_client_free(none);
  struct sbx_client *rogue = tls_client(&t, "rogue");
  cr_expect_lt(sbx_hello(rogue, NULL, &e), 0, "certificate of another CA");
  sbx_client_free(rogue);
  test_daemon_stop(&t);
}

/* Peers that hang up during the TLS or SP handshake, and clients refused
 * for their certificate, leave the listener serving. */
Test(tls, hung_up_handshakes_do_not_stop_the_listener) {
  struct test_daemon t;
  start_tls(&t);
  test_daemon_hang_ups(t.url, 120);
  struct sbx_error e = {0};
  struct sbx_client *rogue = tls_client(&t, "rogue");
  cr_expect_lt(sbx_hello(rogue, NULL, &e), 0, "certificate of another CA");
  sbx_client_free(rogue);
  test_daemon_hang_ups(t.url, 30);
  struct sbx_client *c = tls_client(&t, "client");
  cr_expect_eq(sbx_hello(c, NULL, &e), 0, "%s", e.msg);
  t.client = c;
  test_daemon_stop(&t);
}

/* 3000 connections that never begin the TLS handshake: nng keeps at most
 * --max-unauthenticated of them in their handshake (the oldest make room
 * for newer ones), an authenticated client and a new one are served
 * meanwhile, the handshake timeout closes the rest, and the daemon's RSS
 * comes back down. */
Test(tls, a_handshake_flood_is_capped_timed_out_and_its_memory_returned) {
  struct test_daemon t;
  const char *extra[] = {"--handshake-timeout", "2", NULL};
  start_tls_with(&t, extra);
  struct sbx_error e = {0};
  t.client = tls_client(&t, "client");
  cr_assert_eq(sbx_hello(t.client, NULL, &e), 0, "%s", e.msg);
  struct flood *f = test_daemon_flood(&t, 3000, FLOOD_SILENT);
  fprintf(stderr, "%u of 3000 connected; VmRSS %ld KiB\n", flood_connected(f),
          flood_rss_kib(t.pid));
  unsigned open = 0;
  cr_assert_eq(flood_wait_open(f, SERVER_MAX_UNAUTHENTICATED, 1000, &open), 0);
  cr_expect_leq(open, SERVER_MAX_UNAUTHENTICATED,
                "%u connections held in their handshake (cap %d)", open,
                SERVER_MAX_UNAUTHENTICATED);
  cr_expect_eq(sbx_hello(t.client, NULL, &e), 0, "during the flood: %s", e.msg);
  struct sbx_client *late = tls_client(&t, "client");
  cr_expect_eq(sbx_hello(late, NULL, &e), 0, "a new client: %s", e.msg);
  sbx_client_free(late);
  cr_assert_eq(flood_wait_open(f, 0, 4000, &open), 0);
  cr_expect_eq(open, 0, "%u handshakes left after the timeout", open);
  f = flood_stop(f);
  long after = flood_wait_rss(t.pid, 32 * 1024, 5000);
  if (FLOOD_RSS_CHECKED)
    cr_expect_lt(after, 32 * 1024, "VmRSS %ld KiB after the flood", after);
  else
    fprintf(stderr,
            "VmRSS %ld KiB after the flood (not checked under "
            "AddressSanitizer, which keeps freed memory)\n",
            after);
  test_daemon_stop(&t);
}

Test(tls, tls_listen_needs_all_three_files) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "echo 0123456789abcdef0123 | %s --listen "
                 "tls+tcp://127.0.0.1:%d --root /tmp --token-fd 0 2>&1 | "
                 "grep -q -- '--tls-cert, --tls-key and --tls-ca'",
                 test_sandboxd_path(), free_port());
  cr_expect_eq(system(cmd), 0);
}
