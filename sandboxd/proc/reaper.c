#include "sandboxd/proc/reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shared/log.h"

/* The most groups the reaper keeps; sandboxd's process limit is below. */
#define REAPER_MAX 65536

/* How often the reaper forgets the groups that have emptied. */
#define REAPER_PRUNE_MS 1000

/* A message: the id of a group to kill when sandboxd dies. */
typedef int32_t reaper_msg;

/* CLOCK_MONOTONIC in milliseconds (async-signal-safe). */
static uint64_t now_ms(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Drops from GROUPS (*N of them) each group with no process left, so that
 * its id, free for reuse, is never killed. */
static void prune(pid_t *groups, size_t *n) {
  for (size_t i = 0; i < *n;)
    if (kill(-groups[i], 0) < 0 && errno == ESRCH)
      groups[i] = groups[--*n];
    else
      i++;
}

/* The reaper's loop: keeps the groups it is told of while they have
 * processes (a command that exited may leave some behind) until sandboxd's
 * end of the pipe closes, then kills them. Only async-signal-safe calls. */
static void reaper_main(int rfd) {
  static pid_t groups[REAPER_MAX];
  size_t n = 0;
  uint64_t last = now_ms();
  for (;;) {
    struct pollfd pf = {.fd = rfd, .events = POLLIN};
    int pr = poll(&pf, 1, REAPER_PRUNE_MS);
    if (pr < 0 && errno != EINTR)
      break;
    /* Every second, however busy the pipe. */
    if (now_ms() - last >= REAPER_PRUNE_MS) {
      prune(groups, &n);
      last = now_ms();
    }
    if (pr <= 0)
      continue;
    reaper_msg m;
    ssize_t k = read(rfd, &m, sizeof(m));
    if (k < 0 && errno == EINTR)
      continue;
    if (k != (ssize_t)sizeof(m))
      break; /* sandboxd is gone (or wrote nonsense: treat it so) */
    if (m <= 1)
      continue;
    if (n == REAPER_MAX)
      prune(groups, &n);
    if (n < REAPER_MAX)
      groups[n++] = m;
  }
  for (size_t i = 0; i < n; i++)
    (void)kill(-groups[i], SIGKILL);
  _exit(0);
}

int reaper_start(int *fd) {
  *fd = -1;
  if (getpid() == 1)
    return 0;
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    (void)close(p[0]);
    (void)close(p[1]);
    return -err;
  }
  if (pid == 0) {
    /* Nothing of sandboxd's but the read end and stderr. */
    (void)close(p[1]);
    if (p[0] != 3 && (dup2(p[0], 3) < 0 || close(p[0]) < 0))
      _exit(1);
    (void)syscall(SYS_close_range, 4, ~0u, 0);
    (void)prctl(PR_SET_NAME, "sandboxd-reaper");
    /* Signals to sandboxd's group (a terminal's ^C) must not stop it
     * before sandboxd has gone. */
    (void)signal(SIGINT, SIG_IGN);
    (void)signal(SIGHUP, SIG_IGN);
    (void)signal(SIGTERM, SIG_IGN);
    reaper_main(3);
  }
  (void)close(p[0]);
  *fd = p[1];
  return 0;
}

/* A lost message is logged, not fatal. */
void reaper_add(int fd, pid_t pgid) {
  if (fd < 0)
    return;
  reaper_msg m = (int32_t)pgid;
  ssize_t k;
  do
    k = write(fd, &m, sizeof(m));
  while (k < 0 && errno == EINTR);
  if (k != (ssize_t)sizeof(m))
    log_debug("reaper: cannot record group %d: %m", (int)pgid);
}
