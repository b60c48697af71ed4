/* Programs run on the controller's host for host tools: see host_proc.h. */
#include "controller/tools/host_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"

#define HOST_ENV_MAX 300

/* What the MCP SDKs pass on from the parent's environment. */
static const char *const inherited[] = {"HOME",  "LOGNAME", "PATH",
                                        "SHELL", "TERM",    "USER"};

static void close_fd(int *fd) {
  if (*fd >= 0)
    (void)close(*fd);
  *fd = -1;
}

/* The child's environment into ENVP (pointers into environ, ENV and BUF). */
static void build_env(char *const env[], const char **envp, char *buf,
                      size_t cap) {
  size_t n = 0, used = 0;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(inherited); i++) {
    const char *v = getenv(inherited[i]);
    if (!v)
      continue;
    int k = snprintf(buf + used, cap - used, "%s=%s", inherited[i], v);
    if (k < 0 || (size_t)k >= cap - used)
      continue;
    envp[n++] = buf + used;
    used += (size_t)k + 1;
  }
  for (size_t i = 0; env && env[i] && n < HOST_ENV_MAX - 1; i++)
    envp[n++] = env[i];
  envp[n] = NULL;
}

int host_proc_start(struct host_proc *p, char *const argv[], const char *dir,
                    char *const env[], struct sbx_error *e) {
  *p = (struct host_proc){.in = -1, .out = -1, .err = -1};
  int fds[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  for (int i = 0; i < 3; i++)
    if (pipe2(fds[i], O_CLOEXEC) < 0) {
      int err = errno;
      for (int j = 0; j < i; j++) {
        close_fd(&fds[j][0]);
        close_fd(&fds[j][1]);
      }
      return sbx_error_set(e, SBX_INTERNAL, err, "cannot make a pipe: %s",
                           strerror(err));
    }
  const char *envp[HOST_ENV_MAX];
  char envbuf[8192];
  build_env(env, envp, envbuf, sizeof(envbuf));
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  int r = posix_spawn_file_actions_init(&fa);
  if (r == 0 && (r = posix_spawnattr_init(&at)) != 0)
    posix_spawn_file_actions_destroy(&fa);
  if (r == 0) {
    (void)posix_spawn_file_actions_adddup2(&fa, fds[0][0], 0);
    (void)posix_spawn_file_actions_adddup2(&fa, fds[1][1], 1);
    (void)posix_spawn_file_actions_adddup2(&fa, fds[2][1], 2);
    if (dir)
      (void)posix_spawn_file_actions_addchdir_np(&fa, dir);
    sigset_t none, dfl;
    (void)sigemptyset(&none);
    (void)sigemptyset(&dfl);
    (void)sigaddset(&dfl, SIGPIPE);
    (void)sigaddset(&dfl, SIGINT);
    (void)sigaddset(&dfl, SIGTERM);
    (void)sigaddset(&dfl, SIGHUP);
    (void)posix_spawnattr_setsigmask(&at, &none);
    (void)posix_spawnattr_setsigdefault(&at, &dfl);
    (void)posix_spawnattr_setpgroup(&at, 0);
    (void)posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP |
                                            POSIX_SPAWN_SETSIGMASK |
                                            POSIX_SPAWN_SETSIGDEF);
    r = posix_spawnp(&p->pid, argv[0], &fa, &at, argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
  }
  close_fd(&fds[0][0]);
  close_fd(&fds[1][1]);
  close_fd(&fds[2][1]);
  if (r != 0) {
    p->pid = 0;
    close_fd(&fds[0][1]);
    close_fd(&fds[1][0]);
    close_fd(&fds[2][0]);
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, r, "cannot run \"%s\": %s",
                         argv[0], strerror(r));
  }
  p->pgid = p->pid;
  p->in = fds[0][1];
  p->out = fds[1][0];
  p->err = fds[2][0];
  return 0;
}

void host_proc_kill(struct host_proc *p) {
  if (p->pgid > 0)
    (void)kill(-p->pgid, SIGKILL);
}

int host_proc_wait(struct host_proc *p, int *status) {
  int st = 0;
  if (p->pid <= 0)
    return -ECHILD;
  while (waitpid(p->pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  p->pid = 0;
  *status = st;
  return 0;
}

void host_proc_stop(struct host_proc *p, int *status) {
  close_fd(&p->in);
  close_fd(&p->out);
  close_fd(&p->err);
  int st = 0;
  host_proc_kill(p);
  if (p->pid > 0)
    (void)host_proc_wait(p, &st);
  p->pgid = 0;
  if (status)
    *status = st;
}

void host_sigpipe_block(sigset_t *old) {
  sigset_t set;
  (void)sigemptyset(&set);
  (void)sigaddset(&set, SIGPIPE);
  (void)pthread_sigmask(SIG_BLOCK, &set, old);
}

void host_sigpipe_restore(const sigset_t *old) {
  sigset_t set;
  (void)sigemptyset(&set);
  (void)sigaddset(&set, SIGPIPE);
  struct timespec zero = {0, 0};
  while (sigtimedwait(&set, NULL, &zero) > 0)
    ;
  (void)pthread_sigmask(SIG_SETMASK, old, NULL);
}

int host_write_all(int fd, const void *buf, size_t len) {
  sigset_t old;
  host_sigpipe_block(&old);
  const char *s = buf;
  int r = 0;
  while (len > 0) {
    ssize_t k = write(fd, s, len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      r = -errno;
      break;
    }
    s += k;
    len -= (size_t)k;
  }
  host_sigpipe_restore(&old);
  return r;
}

void host_proc_describe(int status, char *out, size_t cap) {
  if (WIFEXITED(status))
    (void)snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    (void)snprintf(out, cap, "was killed by signal %d", WTERMSIG(status));
  else
    (void)snprintf(out, cap, "ended (wait status %d)", status);
}
