/* sbx serve in operation: HTTPS with and without client certificates and
 * the TLS flags' refusals; /metrics checked by promtool and scraped by a
 * real Prometheus; clients that are slow, never read, vanish or just hold
 * connections open, which must not hold up other clients, runs or a stop;
 * and a header block over the limit. Plain sockets where curl would be too
 * polite; every connection goes to 127.0.0.1. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shared/buf.h"
#include "shared/fileio.h"
#include "tests/support/certs.h"
#include "tests/support/model_server.h"
#include "tests/support/prometheus.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_model_server model;
static struct test_server srv;
static struct test_prometheus prom;
/* The test certificates (certs.h), in a directory of their own. */
static struct {
  char dir[64];
  char ca[128], crt[128], key[128], client_key[128];
} tls;

static void stop_all(void) {
  test_prometheus_stop(&prom);
  test_server_fini(&srv);
  test_model_server_stop(&model);
  if (tls.dir[0] && !getenv("SBX_TEST_KEEP"))
    (void)test_rm_rf(tls.dir);
}

TestSuite(server_ops, .fini = stop_all, .timeout = 240);

#define AGENT_A "{\"name\": \"A\", \"model\": \"m1\"}"
#define AGENT_ASK                                                              \
  "{\"name\": \"A\", \"model\": \"m1\", \"approvals\": {\"exec_command\": "    \
  "\"always\"}}"

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

/* The model server on SCRIPT and sbx serve, not started yet. */
static void init(const char *script) {
  test_model_server_start(&model, script, NULL);
  test_server_init(&srv, NULL, model.base_url);
}

/* The path of the test certificate file NAME into P (128 bytes). */
static void cert_path(char *p, const char *name) {
  (void)snprintf(p, 128, "%s/%s", tls.dir, name);
}

static void make_certs(void) {
  cr_assert_eq(test_make_certs(tls.dir, sizeof(tls.dir)), 0,
               "openssl could not make test certificates");
  cert_path(tls.ca, "ca.crt");
  cert_path(tls.crt, "server.crt");
  cert_path(tls.key, "server.key");
  cert_path(tls.client_key, "client.key");
}

/* sbx serve with the server certificate (make_certs first) and EXTRA
 * flags (at most 8); the requests of test_http trust the test CA. */
static void start_tls(const char *const *extra) {
  init("[]");
  const char *args[16] = {"--tls-cert", tls.crt, "--tls-key", tls.key};
  size_t n = 4;
  for (size_t i = 0; extra && extra[i] && n < 15; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  test_server_start(&srv, args);
  (void)snprintf(srv.tls_ca, sizeof(srv.tls_ca), "%s", tls.ca);
}

/* Shows the client certificate WHO ("client", "rogue"; NULL: none). */
static void client_cert(const char *who) {
  srv.tls_cert[0] = srv.tls_key[0] = '\0';
  if (!who)
    return;
  (void)snprintf(srv.tls_cert, sizeof(srv.tls_cert), "%s/%s.crt", tls.dir, who);
  (void)snprintf(srv.tls_key, sizeof(srv.tls_key), "%s/%s.key", tls.dir, who);
}

/* The error code of an error answer, or "". */
static const char *error_code(const struct test_http *h) {
  const char *c = json_string_value(
      json_object_get(json_object_get(h->json, "error"), "code"));
  return c ? c : "";
}

static const char *error_message(const struct test_http *h) {
  const char *m = json_string_value(
      json_object_get(json_object_get(h->json, "error"), "message"));
  return m ? m : "";
}

Test(server_ops, https_is_served_with_the_certificate_given) {
  make_certs();
  start_tls(NULL);
  cr_expect(strncmp(srv.url, "https://127.0.0.1:", 18) == 0, "%s", srv.url);
  char *log = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(srv.log, 1u << 20, &log, &len), 0);
  cr_expect(strstr(log, "sbx serve: listening on https://127.0.0.1:"), "%s",
            log);
  free(log);
  struct test_http h;
  test_http(&h, &srv, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "status")), "ok");
  test_http_free(&h);
  test_http(&h, &srv, "GET", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  /* A client that does not trust the test CA refuses the server. */
  struct test_server untrusting = srv;
  untrusting.tls_ca[0] = '\0';
  int rc = test_http_try(&h, &untrusting, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_eq(rc, CURLE_PEER_FAILED_VERIFICATION, "%d %s", rc, h.error);
  test_http_free(&h);
  /* Plain HTTP to the TLS port gets no answer. */
  struct test_server plain = srv;
  (void)snprintf(plain.url, sizeof(plain.url), "http://127.0.0.1:%u",
                 test_server_port(&srv));
  rc = test_http_try(&h, &plain, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_neq(rc, CURLE_OK, "plain HTTP was answered %ld: %s", h.status,
                h.body);
  cr_expect_eq(h.status, 0);
  test_http_free(&h);
}

/* GET /v1/runs with the admin token, as the client certificate WHO, is
 * refused: a 401 saying a client certificate is needed. */
static void refused_without(const char *who) {
  client_cert(who);
  struct test_http h;
  int rc = test_http_try(&h, &srv, "GET", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(rc, CURLE_OK, "%s: %s", who ? who : "no certificate", h.error);
  cr_expect_eq(h.status, 401, "%s: %ld %s", who ? who : "none", h.status,
               h.body);
  cr_expect_str_eq(error_code(&h), "unauthenticated", "%s", h.body);
  cr_expect(strstr(error_message(&h), "client certificate"), "%s", h.body);
  cr_expect(!strstr(h.body, "\"data\""), "no runs listed: %s", h.body);
  test_http_free(&h);
}

Test(server_ops, a_client_ca_admits_only_the_certificates_it_signed) {
  make_certs();
  const char *extra[] = {"--tls-client-ca", tls.ca, NULL};
  start_tls(extra);
  client_cert("client");
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/runs", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect(json_is_array(json_object_get(h.json, "data")), "%s", h.body);
  test_http_free(&h);
  /* The certificate does not stand in for the token. */
  test_http(&h, &srv, "GET", "/v1/runs", NULL, NULL, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  cr_expect(!strstr(error_message(&h), "client certificate"), "%s", h.body);
  test_http_free(&h);
  refused_without(NULL);
  refused_without("rogue");
  /* Refused clients leave the server serving. */
  client_cert("client");
  test_http(&h, &srv, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
}

/* sbx serve with FLAGS (at most 8, NULL-terminated) exits 2 before
 * serving, saying WANT. */
static void serve_refused(const char *const *flags, const char *want) {
  const char *argv[20] = {"serve", "--listen",    "127.0.0.1:0", "--db",
                          srv.db,  "--state-dir", srv.state};
  size_t n = 7;
  for (size_t i = 0; flags[i] && n < 19; i++)
    argv[n++] = flags[i];
  argv[n] = NULL;
  struct sbx_run_out r;
  sbx_run(&r, NULL, argv);
  cr_expect_eq(r.status, 2, "%s %s: %d %s", flags[0], flags[1], r.status,
               r.err);
  cr_expect(strstr(r.err, want), "%s %s: %s", flags[0], flags[1], r.err);
  cr_expect(!strstr(r.err, "listening on"), "%s", r.err);
  sbx_run_free(&r);
}

Test(server_ops, tls_flags_that_cannot_work_are_refused_naming_the_file) {
  make_certs();
  test_server_init(&srv, NULL, NULL);
  const char *crt = tls.crt, *key = tls.key, *ca = tls.ca;
  const char *no_key[] = {"--tls-cert", crt, NULL};
  serve_refused(no_key, "both a certificate and its key");
  const char *no_cert[] = {"--tls-key", key, NULL};
  serve_refused(no_cert, "both a certificate and its key");
  char missing[128];
  cert_path(missing, "missing.crt");
  const char *unreadable[] = {"--tls-cert", missing, "--tls-key", key, NULL};
  serve_refused(unreadable, missing);
  const char *a_dir[] = {"--tls-cert", tls.dir, "--tls-key", key, NULL};
  serve_refused(a_dir, tls.dir);
  const char *ca_alone[] = {"--tls-client-ca", ca, NULL};
  serve_refused(ca_alone, "a client CA needs TLS");
  /* Readable files that are not what they are given as. */
  char want[256];
  const char *key_as_cert[] = {"--tls-cert", key, "--tls-key", key, NULL};
  (void)snprintf(want, sizeof(want), "certificate \"%s\"", key);
  serve_refused(key_as_cert, want);
  const char *cert_as_key[] = {"--tls-cert", crt, "--tls-key", crt, NULL};
  (void)snprintf(want, sizeof(want), "key \"%s\"", crt);
  serve_refused(cert_as_key, want);
  const char *wrong_key[] = {"--tls-cert", crt, "--tls-key", tls.client_key,
                             NULL};
  serve_refused(wrong_key, "is not the key of the certificate");
  const char *key_as_ca[] = {"--tls-cert",      crt, "--tls-key", key,
                             "--tls-client-ca", key, NULL};
  (void)snprintf(want, sizeof(want), "client CA \"%s\"", key);
  serve_refused(key_as_ca, want);
}

Test(server_ops, tls_may_listen_beyond_loopback) {
  make_certs();
  const char *extra[] = {"--listen", "0.0.0.0:0", NULL};
  start_tls(extra);
  cr_expect(strncmp(srv.url, "https://0.0.0.0:", 16) == 0, "%s", srv.url);
  (void)snprintf(srv.url, sizeof(srv.url), "https://127.0.0.1:%u",
                 test_server_port(&srv));
  struct test_http h;
  test_http(&h, &srv, "GET", "/healthz", NULL, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
}

/* The value of the single sample of QUERY (new), or NULL while there is
 * none. */
static char *sample(const char *query) {
  json_t *v = test_prometheus_query(&prom, query);
  const char *s = json_string_value(
      json_array_get(json_object_get(json_array_get(v, 0), "value"), 1));
  char *out = json_array_size(v) == 1 && s ? strdup(s) : NULL;
  json_decref(v);
  return out;
}

/* Whether sample(QUERY) is WANT. */
static bool sample_is(const char *query, const char *want) {
  char *v = sample(query);
  bool ok = v && strcmp(v, want) == 0;
  free(v);
  return ok;
}

/* The last scrape error of JOB's target (new; "" when none). */
static char *scrape_error(const char *job) {
  json_t *d = test_prometheus_get(&prom, "/api/v1/targets?state=active");
  json_t *targets = json_object_get(d, "activeTargets");
  size_t i;
  json_t *t;
  char *out = NULL;
  json_array_foreach(targets, i, t) {
    const char *j =
        json_string_value(json_object_get(json_object_get(t, "labels"), "job"));
    const char *err = json_string_value(json_object_get(t, "lastError"));
    if (j && err && strcmp(j, job) == 0)
      out = strdup(err);
  }
  json_decref(d);
  return out ? out : strdup("");
}

Test(server_ops, promtool_accepts_the_metrics_page) {
  if (!test_have_program("promtool"))
    cr_skip_test("promtool is not installed (scripts/install-deps.sh)");
  init("[{\"text\": \"done\"}]");
  test_server_start(&srv, NULL);
  char *id = test_server_submit(&srv, AGENT_A, "x");
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  free(id);
  struct test_http h;
  test_http(&h, &srv, "GET", "/v1/runs/run_missing", srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404);
  test_http_free(&h);
  char *reader = test_server_token(&srv, "scraper", "read");
  test_http(&h, &srv, "GET", "/metrics", reader, NULL, NULL);
  cr_assert_eq(h.status, 200, "%s", h.body);
  char *ctype = test_http_header(&h, "Content-Type");
  cr_expect(ctype && strncmp(ctype, "text/plain; version=0.0.4", 25) == 0, "%s",
            ctype ? ctype : "(none)");
  free(ctype);
  cr_expect(strstr(h.body, "\nsbx_runs{status=\"completed\"} 1\n"), "%s",
            h.body);
  cr_expect(strstr(h.body, "\nsbx_runs_ended_total 1\n"), "%s", h.body);
  cr_expect(strstr(h.body, "\nsbx_http_requests_total{code=\"4xx\"} 1\n"), "%s",
            h.body);
  char *out = NULL;
  int rc = test_promtool_check(h.body, &out);
  cr_expect_eq(rc, 0, "promtool check metrics: %d %s", rc, out);
  cr_expect_str_eq(out, "", "promtool check metrics: %s\n%s", out, h.body);
  free(out);
  test_http_free(&h);
  free(reader);
}

Test(server_ops, prometheus_scrapes_the_server_with_a_read_token) {
  if (!test_have_program("prometheus"))
    cr_skip_test("prometheus is not installed (scripts/install-deps.sh)");
  init("[]");
  test_server_start(&srv, NULL);
  char *reader = test_server_token(&srv, "scraper", "read");
  char target[64], wrong[128];
  (void)snprintf(target, sizeof(target), "127.0.0.1:%u",
                 test_server_port(&srv));
  /* The scraper's token with another secret. */
  (void)snprintf(wrong, sizeof(wrong), "%s", reader);
  size_t n = strlen(wrong);
  wrong[n - 1] = wrong[n - 1] == '0' ? '1' : '0';
  const struct test_scrape jobs[] = {{"sbx", target, reader},
                                     {"sbx_wrong_token", target, wrong}};
  test_prometheus_start(&prom, jobs, 2);
  bool up = false, down = false, runs = false;
  long t0 = now_ms();
  while (!(up && down && runs) && now_ms() - t0 < 30000) {
    usleep(250000);
    up = up || sample_is("up{job=\"sbx\"}", "1");
    down = down || sample_is("up{job=\"sbx_wrong_token\"}", "0");
    json_t *v = test_prometheus_query(&prom, "sbx_runs{job=\"sbx\"}");
    runs = runs || json_array_size(v) == 6;
    json_decref(v);
  }
  char *err = scrape_error("sbx_wrong_token"), *good = scrape_error("sbx");
  cr_expect(up, "up{job=\"sbx\"} is not 1 after 30 s: \"%s\"", good);
  cr_expect(runs, "sbx_runs has not its 6 series after 30 s");
  cr_expect(down, "up{job=\"sbx_wrong_token\"} is not 0 after 30 s");
  cr_expect(strstr(err, "401"), "the wrong token's scrape: \"%s\"", err);
  cr_expect(sample_is("sbx_runs{job=\"sbx\", status=\"queued\"}", "0"));
  cr_expect(sample_is("sbx_workers{job=\"sbx\"}", "16"));
  free(err);
  free(good);
  free(reader);
}

/* A TCP connection to PORT on 127.0.0.1; with RCVBUF, a receive buffer
 * that small from the start (set before connecting). */
static int connect_raw(unsigned port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
  if (rcvbuf)
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)),
                 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0,
               "connect to port %u: %s", port, strerror(errno));
  return fd;
}

/* Sends TEXT (N bytes); whether all of it went (the server may close a
 * connection it refuses before reading it all). */
static bool send_raw(int fd, const char *text, size_t n) {
  while (n) {
    ssize_t k = send(fd, text, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    text += k;
    n -= (size_t)k;
  }
  return true;
}

/* Reads FD into B until NEEDLE is in it (NULL: until the end), the peer
 * closes, or TIMEOUT_MS pass: whether NEEDLE came (NULL: the end). */
static bool read_raw(int fd, struct sbx_buf *b, const char *needle,
                     long timeout_ms) {
  long deadline = now_ms() + timeout_ms;
  for (;;) {
    if (needle && b->len && memmem(b->data, b->len, needle, strlen(needle)))
      return true;
    long left = deadline - now_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&p, 1, (int)left) <= 0)
      return false;
    char buf[65536];
    ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return !needle;
    cr_assert_eq(sbx_buf_append(b, buf, (size_t)k), 0);
  }
}

/* GET PATH with the admin token answers 200 in under 2 s. */
static void answers_promptly(const char *path) {
  long t0 = now_ms();
  struct test_http h;
  test_http(&h, &srv, "GET", path, srv.token, NULL, NULL);
  long ms = now_ms() - t0;
  cr_expect_eq(h.status, 200, "%s: %s", path, h.body);
  cr_expect_lt(ms, 2000, "GET %s took %ld ms", path, ms);
  test_http_free(&h);
}

Test(server_ops, clients_that_stop_mid_header_hold_up_no_one) {
  init("[]");
  test_server_start(&srv, NULL);
  unsigned port = test_server_port(&srv);
  int slow[4];
  static const char half[] = "GET /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Authoriz";
  for (int i = 0; i < 4; i++) {
    slow[i] = connect_raw(port, 0);
    cr_assert(send_raw(slow[i], half, sizeof(half) - 1));
  }
  answers_promptly("/healthz");
  answers_promptly("/v1/runs");
  answers_promptly("/metrics");
  /* The half requests are still waiting, unanswered and open. */
  for (int i = 0; i < 4; i++) {
    struct pollfd p = {.fd = slow[i], .events = POLLIN};
    cr_expect_eq(poll(&p, 1, 0), 0, "a half request was answered or closed");
    close(slow[i]);
  }
}

/* GET /v1/runs/ID/events on a new connection with a receive buffer of
 * RCVBUF bytes (0: the default): its fd, the answer not read. */
static int open_stream(const char *id, int rcvbuf) {
  int fd = connect_raw(test_server_port(&srv), rcvbuf);
  char req[512];
  int n = snprintf(req, sizeof(req),
                   "GET /v1/runs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Authorization: Bearer %s\r\n\r\n",
                   id, srv.token);
  cr_assert(n > 0 && (size_t)n < sizeof(req));
  cr_assert(send_raw(fd, req, (size_t)n));
  return fd;
}

/* The bytes the server's socket to the client on CLIENT_PORT has queued
 * and not had acknowledged (/proc/net/tcp's tx_queue), or -1. */
static long server_tx_queue(unsigned server_port, unsigned client_port) {
  FILE *f = fopen("/proc/net/tcp", "r");
  cr_assert_not_null(f);
  char line[512];
  long q = -1;
  while (q < 0 && fgets(line, sizeof(line), f)) {
    unsigned lport, rport;
    unsigned long laddr, raddr, tx, rx;
    if (sscanf(line, " %*u: %8lx:%4x %8lx:%4x %*x %8lx:%8lx", &laddr, &lport,
               &raddr, &rport, &tx, &rx) == 6 &&
        lport == server_port && rport == client_port)
      q = (long)tx;
  }
  fclose(f);
  return q;
}

/* The model's answer in the unread stream's run: large enough that its
 * events fill the kernel's buffers on both sides and leave the stream's
 * writer waiting on the client. */
#define BIG_TEXT ((size_t)3 << 20)

/* The script of one answer of BIG_TEXT bytes after DELAY_MS (new). */
static char *big_answer(long delay_ms) {
  char *text = malloc(BIG_TEXT + 1);
  cr_assert_not_null(text);
  memset(text, 'x', BIG_TEXT);
  text[BIG_TEXT] = '\0';
  json_t *script =
      json_pack("[{s:I, s:s}]", "delay_ms", (json_int_t)delay_ms, "text", text);
  free(text);
  char *s = json_dumps(script, JSON_COMPACT);
  json_decref(script);
  cr_assert_not_null(s);
  return s;
}

/* The whole event stream of the finished run ID, as bytes on the wire. */
static size_t stream_length(const char *id) {
  int fd = connect_raw(test_server_port(&srv), 0);
  char req[512];
  int n = snprintf(req, sizeof(req),
                   "GET /v1/runs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
                   id, srv.token);
  cr_assert(send_raw(fd, req, (size_t)n));
  struct sbx_buf b;
  sbx_buf_init(&b, 256u << 20);
  cr_expect(read_raw(fd, &b, NULL, 30000), "the stream did not end");
  close(fd);
  cr_expect(memmem(b.data, b.len, "event: run_finished", 19), "%.*s",
            (int)(b.len < 300 ? b.len : 300), b.data ? b.data : "");
  size_t len = b.len;
  sbx_buf_free(&b);
  return len;
}

Test(server_ops, a_stream_never_read_holds_up_neither_its_run_nor_a_stop) {
  char *script = big_answer(1000);
  init(script);
  free(script);
  test_server_start(&srv, NULL);
  char *id = test_server_submit(&srv, AGENT_A, "say a lot");
  int fd = open_stream(id, 1024);
  json_decref(test_server_wait(&srv, id, "completed", 60000));
  char path[128];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s", id);
  answers_promptly(path);
  answers_promptly("/healthz");
  /* The stream's writer is stuck: part of the stream is neither in the
   * client's receive buffer nor in the server's send queue. */
  struct sockaddr_in me;
  socklen_t ml = sizeof(me);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&me, &ml), 0);
  int unread = 0;
  cr_assert_eq(ioctl(fd, FIONREAD, &unread), 0);
  long queued = server_tx_queue(test_server_port(&srv), ntohs(me.sin_port));
  size_t total = stream_length(id);
  cr_assert_geq(queued, 0, "the server's socket is not in /proc/net/tcp");
  cr_assert_lt((size_t)unread + (size_t)queued, total,
               "the whole stream (%zu bytes) fit in the sockets' buffers "
               "(%d + %ld): nothing was held up",
               total, unread, queued);
  long ms = test_server_kill(&srv, SIGTERM);
  cr_expect_lt(ms, 5000, "SIGTERM took %ld ms with a stream unread", ms);
  close(fd);
  free(id);
}

Test(server_ops, a_stream_client_that_vanished_holds_up_no_stop) {
  init("[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
       "\"arguments\": {\"cmd\": \"true\"}}]}, {\"text\": \"done\"}]");
  test_server_start(&srv, NULL);
  char *id = test_server_submit(&srv, AGENT_ASK, "ask first");
  json_decref(test_server_wait(&srv, id, "waiting_approval", 60000));
  /* One client reads to the pause (the stream stays open) and goes; one
   * goes as soon as it has asked. */
  int fd = open_stream(id, 0);
  struct sbx_buf b;
  sbx_buf_init(&b, 1u << 20);
  cr_expect(read_raw(fd, &b, "event: run_paused", 10000), "%.*s", (int)b.len,
            b.data ? b.data : "");
  sbx_buf_free(&b);
  close(fd);
  close(open_stream(id, 0));
  answers_promptly("/healthz");
  usleep(500000);
  long ms = test_server_kill(&srv, SIGTERM);
  cr_expect_lt(ms, 5000, "SIGTERM took %ld ms after a client vanished", ms);
  free(id);
}

Test(server_ops, fifty_idle_connections_leave_the_server_answering) {
  init("[]");
  test_server_start(&srv, NULL);
  int fds[50];
  for (int i = 0; i < 50; i++)
    fds[i] = connect_raw(test_server_port(&srv), 0);
  answers_promptly("/healthz");
  answers_promptly("/v1/runs");
  for (int i = 0; i < 50; i++)
    close(fds[i]);
  answers_promptly("/healthz");
}

/* A GET /healthz whose header block holds a header of N bytes, on a raw
 * connection: the answer's status line (new); *CLOSED whether the server
 * closed the connection after it. */
static char *big_header_status(size_t n, bool *closed) {
  struct sbx_buf req;
  sbx_buf_init(&req, 1u << 20);
  cr_assert_eq(sbx_buf_append_str(&req, "GET /healthz HTTP/1.1\r\n"
                                        "Host: 127.0.0.1\r\nX-Big: "),
               0);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(sbx_buf_append(&req, "a", 1), 0);
  cr_assert_eq(sbx_buf_append_str(&req, "\r\n\r\n"), 0);
  int fd = connect_raw(test_server_port(&srv), 0);
  (void)send_raw(fd, req.data, req.len);
  sbx_buf_free(&req);
  struct sbx_buf b;
  sbx_buf_init(&b, 1u << 20);
  (void)read_raw(fd, &b, "\r\n\r\n", 10000);
  *closed = read_raw(fd, &b, NULL, 2000);
  close(fd);
  const char *cr = b.len ? memchr(b.data, '\r', b.len) : NULL;
  char *line = strndup(b.len ? b.data : "", cr ? (size_t)(cr - b.data) : 0);
  sbx_buf_free(&b);
  return line;
}

Test(server_ops, a_header_block_over_the_limit_gets_431) {
  init("[]");
  test_server_start(&srv, NULL);
  bool closed = false;
  char *st = big_header_status(16 << 10, &closed);
  cr_expect_str_eq(st, "HTTP/1.1 200 OK", "a 16 KiB header");
  cr_expect(!closed, "the connection of a served request stays open");
  free(st);
  st = big_header_status(64 << 10, &closed);
  cr_expect_str_eq(st, "HTTP/1.1 431 Request Header Fields Too Large",
                   "a 64 KiB header");
  cr_expect(closed, "the connection of a 431 is closed");
  free(st);
  answers_promptly("/healthz");
  answers_promptly("/v1/runs");
}
