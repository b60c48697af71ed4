#include "model_server.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *test_model_server_path(void) {
  return SBX_SOURCE_DIR "/tests/support/model_server.py";
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
  size_t n = strlen(text);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
}

void test_model_server_start(struct test_model_server *s, const char *script,
                             const char *api_key) {
  memset(s, 0, sizeof(*s));
  (void)snprintf(s->dir, sizeof(s->dir), "/tmp/sbx-model-XXXXXX");
  cr_assert_not_null(mkdtemp(s->dir));
  (void)snprintf(s->script_path, sizeof(s->script_path), "%s/script.json",
                 s->dir);
  (void)snprintf(s->requests_path, sizeof(s->requests_path),
                 "%s/requests.jsonl", s->dir);
  write_file(s->script_path, script);
  write_file(s->requests_path, "");

  int out[2];
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  const char *argv[8];
  size_t n = 0;
  argv[n++] = "python3";
  argv[n++] = test_model_server_path();
  argv[n++] = s->script_path;
  argv[n++] = s->requests_path;
  if (api_key) {
    argv[n++] = "--api-key";
    argv[n++] = api_key;
  }
  argv[n] = NULL;
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
      _exit(127);
    if (dup2(out[1], 1) < 0)
      _exit(127);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
  s->pid = pid;

  char line[64] = {0};
  size_t got = 0;
  uint64_t deadline = (uint64_t)time(NULL) + 20;
  while (got < sizeof(line) - 1 && !memchr(line, '\n', got) &&
         (uint64_t)time(NULL) < deadline) {
    struct pollfd pfd = {.fd = out[0], .events = POLLIN};
    if (poll(&pfd, 1, 1000) <= 0)
      continue;
    ssize_t r = read(out[0], line + got, sizeof(line) - 1 - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(out[0]);
  int port = 0;
  if (sscanf(line, "listening %d", &port) != 1 || port <= 0) {
    test_model_server_stop(s);
    cr_assert_fail("model server did not start (%s): got \"%s\"",
                   test_model_server_path(), line);
  }
  s->port = port;
  (void)snprintf(s->base_url, sizeof(s->base_url), "http://127.0.0.1:%d/v1",
                 port);
}

void test_model_server_stop(struct test_model_server *s) {
  if (s->pid > 0) {
    (void)kill(s->pid, SIGTERM);
    int status;
    for (int i = 0;; i++) {
      pid_t w = waitpid(s->pid, &status, WNOHANG);
      if (w == s->pid || (w < 0 && errno != EINTR))
        break;
      if (i == 500) {
        (void)kill(s->pid, SIGKILL);
        (void)waitpid(s->pid, &status, 0);
        break;
      }
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    s->pid = 0;
  }
  if (s->dir[0]) {
    (void)unlink(s->script_path);
    (void)unlink(s->requests_path);
    (void)rmdir(s->dir);
    s->dir[0] = '\0';
  }
}

json_t *test_model_server_requests(const struct test_model_server *s) {
  FILE *f = fopen(s->requests_path, "re");
  cr_assert_not_null(f, "open %s: %s", s->requests_path, strerror(errno));
  json_t *all = json_array();
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_error_t jerr;
    json_t *j = json_loadb(line, (size_t)len, 0, &jerr);
    cr_assert_not_null(j, "bad request log line: %s", jerr.text);
    json_array_append_new(all, j);
  }
  free(line);
  fclose(f);
  return all;
}

int test_closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}
