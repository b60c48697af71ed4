#include "tests/support/daemon.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/rand.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

const char *test_sandboxd_path(void) {
  const char *p = getenv("SBX_SANDBOXD");
  return p ? p : SBX_BUILD_DIR "/sandboxd";
}

struct sbx_client *test_daemon_client(struct test_daemon *t,
                                      const char *token) {
  const char *tok = token ? token : t->token;
  struct sbx_client_config cfg = {
      .url = t->url,
      .token = (const uint8_t *)tok,
      .token_len = strlen(tok),
      .timeout_ms = 10000,
      .retries = 1,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "client: %s", e.msg);
  return c;
}

void test_daemon_start(struct test_daemon *t, const char *const *args) {
  memset(t, 0, sizeof(*t));
  (void)snprintf(t->dir, sizeof(t->dir), "/tmp/sbx-it-XXXXXX");
  cr_assert_not_null(mkdtemp(t->dir));
  char run[96];
  (void)snprintf(t->root, sizeof(t->root), "%s/ws", t->dir);
  (void)snprintf(run, sizeof(run), "%s/run", t->dir);
  cr_assert_eq(mkdir(t->root, 0755), 0);
  cr_assert_eq(mkdir(run, 0700), 0);
  (void)snprintf(t->url, sizeof(t->url), "ipc://%s/sock", run);
  cr_assert_eq(sbx_random_hex(t->token, 32), 0);

  int tokp[2], readyp[2];
  cr_assert_eq(pipe2(tokp, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(readyp, O_CLOEXEC), 0);
  cr_assert_eq(write(tokp[1], t->token, strlen(t->token)),
               (ssize_t)strlen(t->token));
  close(tokp[1]);

  const char *argv[64];
  size_t n = 0;
  argv[n++] = test_sandboxd_path();
  argv[n++] = "--listen";
  argv[n++] = t->url;
  argv[n++] = "--root";
  argv[n++] = t->root;
  argv[n++] = "--token-fd";
  argv[n++] = "3";
  argv[n++] = "--ready-fd";
  argv[n++] = "4";
  for (size_t i = 0; args && args[i] && n < 62; i++) {
    argv[n++] = args[i];
    /* A later --listen wins in sandboxd; the clients follow it. */
    if (strcmp(args[i], "--listen") == 0 && args[i + 1])
      (void)snprintf(t->url, sizeof(t->url), "%s", args[i + 1]);
  }
  argv[n] = NULL;

  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* Move both above 4 first: either may already be fd 3 or 4. */
    int tok = fcntl(tokp[0], F_DUPFD, 10);
    int rdy = fcntl(readyp[1], F_DUPFD, 10);
    if (tok < 0 || rdy < 0 || dup2(tok, 3) < 0 || dup2(rdy, 4) < 0)
      _exit(127);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(tokp[0]);
  close(readyp[1]);
  t->pid = pid;
  struct pollfd pfd = {.fd = readyp[0], .events = POLLIN};
  int pr = poll(&pfd, 1, 10000);
  char line[256] = {0};
  ssize_t got = pr > 0 ? read(readyp[0], line, sizeof(line) - 1) : -1;
  close(readyp[0]);
  cr_assert_gt(got, 0, "sandboxd did not become ready (%s)",
               test_sandboxd_path());
  cr_assert(strncmp(line, "ready ", 6) == 0, "ready line: %s", line);
  if (strncmp(t->url, "ipc://", 6) == 0)
    t->client = test_daemon_client(t, NULL);
}

int test_daemon_stop(struct test_daemon *t) {
  int status = -1;
  if (t->client) {
    struct sbx_error e = {0};
    (void)sbx_shutdown(t->client, 100, &e);
    t->client = sbx_client_free(t->client);
  } else if (t->pid > 0) {
    kill(t->pid, SIGTERM);
  }
  if (t->pid > 0) {
    for (int i = 0; i < 500; i++) {
      pid_t w = waitpid(t->pid, &status, WNOHANG);
      if (w == t->pid)
        break;
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      if (i == 499) {
        kill(t->pid, SIGKILL);
        (void)waitpid(t->pid, &status, 0);
      }
    }
    t->pid = 0;
    /* An abort at shutdown (a race, an nng panic) is a failure too. */
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "sandboxd ended with status %#x", (unsigned)status);
  }
  char cmd[160];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", t->dir);
  (void)!system(cmd);
  return status;
}

Sbx__V1__Response *test_daemon_raw_call(const char *url, const void *buf,
                                        size_t len) {
  nng_socket s;
  cr_assert_eq(nng_req0_open(&s), 0);
  cr_assert_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000), 0);
  cr_assert_eq(nng_dial(s, url, NULL, 0), 0);
  cr_assert_eq(nng_send(s, (void *)buf, len, 0), 0);
  char *reply = NULL;
  size_t rlen = 0;
  cr_assert_eq(nng_recv(s, &reply, &rlen, NNG_FLAG_ALLOC), 0);
  Sbx__V1__Response *r =
      sbx__v1__response__unpack(NULL, rlen, (uint8_t *)reply);
  nng_free(reply, rlen);
  nng_close(s);
  cr_assert_not_null(r);
  return r;
}

void test_daemon_send_twice(struct test_daemon *t, Sbx__V1__Request *req,
                            const char *id, Sbx__V1__Response **a,
                            Sbx__V1__Response **b) {
  req->token.data = (uint8_t *)t->token;
  req->token.len = strlen(t->token);
  req->version = 1;
  req->id = (char *)id;
  size_t n = sbx__v1__request__get_packed_size(req);
  uint8_t *buf = malloc(n);
  cr_assert_not_null(buf);
  cr_assert_eq(sbx__v1__request__pack(req, buf), n);
  *a = test_daemon_raw_call(t->url, buf, n);
  *b = test_daemon_raw_call(t->url, buf, n);
  free(buf);
}

void test_daemon_hang_ups(const char *url, unsigned n) {
  struct sockaddr_storage ss;
  socklen_t salen = 0;
  cr_assert_eq(flood_sockaddr(url, &ss, &salen), 0, "%s", url);
  struct sockaddr *sa = (struct sockaddr *)&ss;
  static const char half[] = {0, 'S', 'P', 0};
  static const char wrong[] = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T'};
  for (unsigned i = 0; i < n; i++) {
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, sa, salen), 0, "connect %s: %s", url,
                 strerror(errno));
    if (i % 3 == 1)
      (void)!write(fd, half, sizeof(half));
    else if (i % 3 == 2)
      (void)!write(fd, wrong, sizeof(wrong));
    close(fd);
  }
}

struct flood *test_daemon_flood(struct test_daemon *t, unsigned n,
                                enum flood_mode mode) {
  struct flood *f = NULL;
  int r = flood_start(t->url, n, mode, &f);
  if (r == -EMFILE) {
    test_daemon_stop(t);
    cr_skip_test("the hard RLIMIT_NOFILE is below %d", FLOOD_PER_PROC + 64);
  }
  cr_assert_eq(r, 0, "flood of %s: %s", t->url, strerror(-r));
  return f;
}
