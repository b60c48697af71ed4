#include "otlp_receiver.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *receiver_path(void) {
  return SBX_SOURCE_DIR "/tests/support/otlp_receiver.py";
}

void test_otlp_receiver_start(struct test_otlp_receiver *r, bool hang) {
  memset(r, 0, sizeof(*r));
  (void)snprintf(r->dir, sizeof(r->dir), "/tmp/sbx-otlp-XXXXXX");
  cr_assert_not_null(mkdtemp(r->dir));
  (void)snprintf(r->requests_path, sizeof(r->requests_path),
                 "%s/requests.jsonl", r->dir);
  int fd =
      open(r->requests_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "open %s: %s", r->requests_path, strerror(errno));
  close(fd);

  int out[2];
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  const char *argv[] = {"python3", receiver_path(), r->requests_path,
                        hang ? "--hang" : NULL, NULL};
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
  r->pid = pid;

  char line[64] = {0};
  size_t got = 0;
  time_t deadline = time(NULL) + 20;
  while (got < sizeof(line) - 1 && !memchr(line, '\n', got) &&
         time(NULL) < deadline) {
    struct pollfd pfd = {.fd = out[0], .events = POLLIN};
    if (poll(&pfd, 1, 1000) <= 0)
      continue;
    ssize_t k = read(out[0], line + got, sizeof(line) - 1 - got);
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(out[0]);
  int port = 0;
  if (sscanf(line, "listening %d", &port) != 1 || port <= 0) {
    test_otlp_receiver_stop(r);
    cr_assert_fail("OTLP receiver did not start (%s): got \"%s\"",
                   receiver_path(), line);
  }
  r->port = port;
  (void)snprintf(r->endpoint, sizeof(r->endpoint), "http://127.0.0.1:%d", port);
}

void test_otlp_receiver_stop(struct test_otlp_receiver *r) {
  if (r->pid > 0) {
    (void)kill(r->pid, SIGTERM);
    int status;
    for (int i = 0;; i++) {
      pid_t w = waitpid(r->pid, &status, WNOHANG);
      if (w == r->pid || (w < 0 && errno != EINTR))
        break;
      if (i == 500) {
        (void)kill(r->pid, SIGKILL);
        (void)waitpid(r->pid, &status, 0);
        break;
      }
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    r->pid = 0;
  }
  if (r->dir[0]) {
    (void)unlink(r->requests_path);
    (void)rmdir(r->dir);
    r->dir[0] = '\0';
  }
}

json_t *test_otlp_receiver_requests(const struct test_otlp_receiver *r) {
  FILE *f = fopen(r->requests_path, "re");
  cr_assert_not_null(f, "open %s: %s", r->requests_path, strerror(errno));
  json_t *all = json_array();
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_error_t je;
    json_t *j = json_loadb(line, (size_t)len, 0, &je);
    cr_assert_not_null(j, "bad receiver log line: %s", je.text);
    json_array_append_new(all, j);
  }
  free(line);
  fclose(f);
  return all;
}

json_t *test_otlp_spans(json_t *requests) {
  json_t *out = json_array();
  size_t i, k, m, n;
  json_t *req, *rs, *ss, *span;
  json_array_foreach(requests, i, req) {
    json_t *body = json_object_get(req, "body");
    json_array_foreach(json_object_get(body, "resourceSpans"), k, rs) {
      json_t *resource = json_object_get(rs, "resource");
      json_array_foreach(json_object_get(rs, "scopeSpans"), m, ss) {
        json_array_foreach(json_object_get(ss, "spans"), n, span) {
          json_t *copy = json_deep_copy(span);
          json_object_set(copy, "resource", resource);
          json_array_append_new(out, copy);
        }
      }
    }
  }
  return out;
}

json_t *test_otlp_attr(json_t *obj, const char *key) {
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(obj, "attributes"), i, a) {
    const char *k = json_string_value(json_object_get(a, "key"));
    if (k && strcmp(k, key) == 0)
      return json_object_get(a, "value");
  }
  return NULL;
}
