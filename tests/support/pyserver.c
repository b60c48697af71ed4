#include "tests/support/pyserver.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_pyserver_start(const char *const *argv, const char *what, pid_t *pid) {
  int out[2];
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  pid_t parent = getpid();
  *pid = fork();
  cr_assert_geq(*pid, 0);
  if (*pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
      _exit(127);
    if (dup2(out[1], 1) < 0)
      _exit(127);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(out[1]);
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
    test_pyserver_stop(pid);
    cr_assert_fail("%s did not start (%s): got \"%s\"", what, argv[1], line);
  }
  return port;
}

void test_pyserver_stop(pid_t *pid) {
  if (*pid <= 0)
    return;
  (void)kill(*pid, SIGTERM);
  int status;
  for (int i = 0;; i++) {
    pid_t w = waitpid(*pid, &status, WNOHANG);
    if (w == *pid || (w < 0 && errno != EINTR))
      break;
    if (i == 500) {
      (void)kill(*pid, SIGKILL);
      (void)waitpid(*pid, &status, 0);
      break;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  *pid = 0;
}

json_t *test_jsonl_read(const char *path) {
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
  json_t *all = json_array();
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_error_t je;
    json_t *j = json_loadb(line, (size_t)len, 0, &je);
    cr_assert_not_null(j, "%s: a line that is not JSON: %s", path, je.text);
    json_array_append_new(all, j);
  }
  free(line);
  fclose(f);
  return all;
}
