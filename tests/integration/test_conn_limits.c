/* Connection limits of a real sandboxd: the caps on connections in all and
 * on those without a valid token yet, the handshake timeout, and the memory
 * a flood of idle connections leaves behind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandboxd/server/server.h"
#include "shared/clock.h"
#include "tests/support/daemon.h"

/* What the daemon's RSS must come back under after a flood. */
#define RSS_AFTER_KIB (32 * 1024)

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  (void)nanosleep(&ts, NULL);
}

/* 20000 connections that send the SP header and never a request: the
 * daemon keeps at most its unauthenticated cap of them, serves the client
 * that had authenticated before and a newcomer at once, closes the idle
 * ones at the deadline, and its RSS comes back down. */
Test(conn_limits, an_idle_flood_is_capped_timed_out_and_its_memory_returned,
     .timeout = 180) {
  struct test_daemon t;
  const char *args[] = {"--handshake-timeout", "3", NULL};
  test_daemon_start(&t, args);
  struct sbx_error e = {0};
  cr_assert_eq(sbx_hello(t.client, NULL, &e), 0, "%s", e.msg);

  struct flood *f = test_daemon_flood(&t, 20000, FLOOD_SP_HEADER);
  fprintf(stderr, "%u of 20000 connected; VmRSS %ld KiB\n", flood_connected(f),
          flood_rss_kib(t.pid));
  cr_expect_geq(flood_connected(f), 19000u);
  uint64_t t0 = sbx_now_ms();
  cr_expect_eq(sbx_hello(t.client, NULL, &e), 0, "during the flood: %s", e.msg);
  cr_expect_lt(sbx_now_ms() - t0, 2000u, "a Hello during the flood");
  unsigned open = 0;
  cr_assert_eq(flood_wait_open(f, SERVER_MAX_UNAUTHENTICATED, 2000, &open), 0);
  cr_expect_leq(open, SERVER_MAX_UNAUTHENTICATED,
                "%u idle connections held (cap %d)", open,
                SERVER_MAX_UNAUTHENTICATED);

  /* A new client is served while the idle ones are still there. */
  struct sbx_client *late = test_daemon_client(&t, NULL);
  t0 = sbx_now_ms();
  cr_expect_eq(sbx_hello(late, NULL, &e), 0, "a new client: %s", e.msg);
  cr_expect_lt(sbx_now_ms() - t0, 2000u, "a new client's Hello");
  sbx_client_free(late);
  cr_assert_eq(flood_wait_open(f, 0, 4000, &open), 0);
  cr_expect_eq(open, 0, "%u idle connections left after the timeout", open);
  f = flood_stop(f);

  long after = flood_wait_rss(t.pid, RSS_AFTER_KIB, 5000);
  if (FLOOD_RSS_CHECKED)
    cr_expect_lt(after, RSS_AFTER_KIB, "VmRSS %ld KiB after the flood", after);
  else
    fprintf(stderr,
            "VmRSS %ld KiB after the flood (not checked under "
            "AddressSanitizer, which keeps freed memory)\n",
            after);
  cr_expect_eq(sbx_hello(t.client, NULL, &e), 0, "after the flood: %s", e.msg);
  test_daemon_stop(&t);
}

/* A REQ socket of the test's own that counts the ends of its connections
 * (its dialer connects again after one). */
struct watched {
  nng_socket s;
  atomic_int gone;
};

static void watched_gone(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)p;
  (void)ev;
  atomic_fetch_add(&((struct watched *)arg)->gone, 1);
}

static void watched_open(struct watched *w, const char *url) {
  atomic_init(&w->gone, 0);
  cr_assert_eq(nng_req0_open(&w->s), 0);
  cr_assert_eq(nng_pipe_notify(w->s, NNG_PIPE_EV_REM_POST, watched_gone, w), 0);
  cr_assert_eq(nng_socket_set_ms(w->s, NNG_OPT_RECVTIMEO, 5000), 0);
  cr_assert_eq(nng_dial(w->s, url, NULL, 0), 0);
}

/* Sends a Hello with TOKEN on W; the reply's error code (0: none). */
static int watched_hello(struct watched *w, const char *token) {
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  req.hello = &h;
  req.token.data = (uint8_t *)token;
  req.token.len = strlen(token);
  req.version = 1;
  req.id = "watched-hello";
  uint8_t buf[512];
  size_t n = sbx__v1__request__pack(&req, buf);
  cr_assert_eq(nng_send(w->s, buf, n, 0), 0);
  char *reply = NULL;
  size_t rlen = 0;
  cr_assert_eq(nng_recv(w->s, &reply, &rlen, NNG_FLAG_ALLOC), 0);
  Sbx__V1__Response *r =
      sbx__v1__response__unpack(NULL, rlen, (uint8_t *)reply);
  nng_free(reply, rlen);
  cr_assert_not_null(r);
  int code = r->error ? (int)r->error->code : 0;
  sbx__v1__response__free_unpacked(r, NULL);
  return code;
}

/* The deadline closes a connection that has only sent a wrong token, and
 * leaves one that sent the right token alone however long it idles. */
Test(conn_limits, only_a_valid_token_stops_the_handshake_timeout) {
  struct test_daemon t;
  const char *args[] = {"--handshake-timeout", "1", NULL};
  test_daemon_start(&t, args);
  struct watched good, bad;
  watched_open(&good, t.url);
  watched_open(&bad, t.url);
  cr_expect_eq(watched_hello(&good, t.token), 0);
  cr_expect_eq(watched_hello(&bad, "0123456789abcdef0123456789abcdeX"),
               SBX__V1__CODE__UNAUTHENTICATED);
  sleep_ms(2500);
  cr_expect_eq(atomic_load(&good.gone), 0, "the authenticated one was closed");
  cr_expect_geq(atomic_load(&bad.gone), 1, "the other was left open");
  cr_expect_eq(watched_hello(&good, t.token), 0);
  (void)nng_close(good.s);
  (void)nng_close(bad.s);
  test_daemon_stop(&t);
}

/* With --max-connections 3 the fourth client, token and all, is refused
 * until one of the three leaves. */
Test(conn_limits, the_total_cap_refuses_even_clients_with_the_token) {
  struct test_daemon t;
  const char *args[] = {"--max-connections", "3", "--max-unauthenticated", "2",
                        NULL};
  test_daemon_start(&t, args);
  struct sbx_error e = {0};
  /* One after the other: three at once, none with the token yet, would be
   * one more than --max-unauthenticated. */
  struct sbx_client *c[3] = {t.client, NULL, NULL};
  for (int i = 0; i < 3; i++) {
    if (!c[i])
      c[i] = test_daemon_client(&t, NULL);
    cr_assert_eq(sbx_hello(c[i], NULL, &e), 0, "client %d: %s", i, e.msg);
  }
  struct sbx_client_config cfg = {
      .url = t.url,
      .token = (const uint8_t *)t.token,
      .token_len = strlen(t.token),
      .timeout_ms = 2500,
      .retries = 1,
  };
  struct sbx_client *fourth = NULL;
  cr_assert_eq(sbx_client_new(&cfg, &fourth, &e), 0, "%s", e.msg);
  cr_expect_lt(sbx_hello(fourth, NULL, &e), 0, "a fourth was served");
  /* The server forgets the one that left a moment after its hang-up. */
  c[2] = sbx_client_free(c[2]);
  int r = -1;
  for (uint64_t end = sbx_now_ms() + 3000; r < 0 && sbx_now_ms() < end;)
    if ((r = sbx_hello(fourth, NULL, &e)) < 0)
      sleep_ms(50);
  cr_expect_eq(r, 0, "once one left: %s", e.msg);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(sbx_hello(i < 2 ? c[i] : fourth, NULL, &e), 0, "%s", e.msg);
  sbx_client_free(fourth);
  sbx_client_free(c[1]);
  test_daemon_stop(&t);
}

/* The limits' flags are checked. */
Test(conn_limits, bad_limits_are_usage_errors) {
  static const char *const cases[][2] = {
      {"--max-connections 8 --max-unauthenticated 9",
       "--max-unauthenticated 9 is more than --max-connections 8"},
      {"--handshake-timeout 0", "expected 1..3600 seconds"},
      {"--max-connections 0", "expected 1..65536"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char cmd[1024];
    (void)snprintf(cmd, sizeof(cmd),
                   "d=$(mktemp -d) && echo 0123456789abcdef0123 | %s --listen "
                   "ipc://$d/s --root $d --token-fd 0 %s >$d/out 2>&1; "
                   "rc=$?; grep -qF -- '%s' $d/out; g=$?; rm -rf $d; "
                   "[ $rc -eq 2 ] && [ $g -eq 0 ]",
                   test_sandboxd_path(), cases[i][0], cases[i][1]);
    cr_expect_eq(system(cmd), 0, "%s", cases[i][0]);
  }
}
