#include "sandboxd/proc/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/seccomp/seccomp_filter.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The child's stack: it makes syscalls and little else. */
#define LAUNCH_STACK_SIZE (64u << 10)

/* The step a child failed at; the names go into error messages. */
enum launch_step {
  STEP_NONE = 0,
  STEP_SESSION,
  STEP_TTY,
  STEP_STDIO,
  STEP_CWD,
  STEP_GROUPS,
  STEP_GID,
  STEP_UID,
  STEP_FDS,
  STEP_CAPS,
  STEP_SECCOMP,
  STEP_EXEC,
};

static const char *const step_names[] = {
    [STEP_NONE] = "start",
    [STEP_SESSION] = "new session or process group",
    [STEP_TTY] = "controlling terminal",
    [STEP_STDIO] = "standard input and output",
    [STEP_CWD] = "working directory",
    [STEP_GROUPS] = "setgroups",
    [STEP_GID] = "setresgid",
    [STEP_UID] = "setresuid",
    [STEP_FDS] = "closing file descriptors",
    [STEP_CAPS] = "dropping capabilities",
    [STEP_SECCOMP] = "seccomp filter",
    [STEP_EXEC] = "exec",
};

/* Shared between parent and child (CLONE_VM): the child writes, the parent
 * reads after the child has exec'd (nothing written) or exited. */
struct child_ctx {
  const struct launch_plan *p;
  volatile int step;
  volatile int err;
};

/* What follows runs in the child, on its own stack but in the parent's
 * memory: only syscalls, no allocation, no locks, nothing that ASan would
 * track (its shadow of this stack would outlive the stack). The ids are
 * changed with raw syscalls: glibc's setresuid would ask every thread of
 * the *parent* to change too. */
#define CHILD __attribute__((no_sanitize("address"), noinline))

CHILD static void child_fail(struct child_ctx *c, int step, int err) {
  c->step = step;
  c->err = err ? err : EIO;
  syscall(SYS_exit_group, 127);
  for (;;)
    ;
}

CHILD static void child_reset_signals(void) {
  static const struct sigaction dfl = {.sa_handler = SIG_DFL};
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      (void)sigaction(sig, &dfl, NULL); /* glibc-internal ones: EINVAL */
}

CHILD static void child_close_fds(struct child_ctx *c) {
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0)
    return;
  if (errno != ENOSYS && errno != EINVAL)
    child_fail(c, STEP_FDS, errno);
  /* Before Linux 5.9: one by one, up to the limit. */
  struct rlimit rl;
  if (syscall(SYS_getrlimit, RLIMIT_NOFILE, &rl) < 0)
    child_fail(c, STEP_FDS, errno);
  long max = rl.rlim_cur > 65536 ? 65536 : (long)rl.rlim_cur;
  for (long fd = 3; fd < max; fd++)
    (void)syscall(SYS_close, fd);
}

/* The capabilities an isolated sandbox's commands keep, as a container
 * engine's default set: enough for root to own and chmod files, switch
 * users and bind low ports inside; not mount, ptrace, module, raw I/O,
 * network administration or anything else of CAP_SYS_ADMIN's. They act
 * within the sandbox's user namespace only. */
#define KEEP_CAPS                                                              \
  ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) |   \
   (1ull << CAP_FSETID) | (1ull << CAP_KILL) | (1ull << CAP_SETGID) |          \
   (1ull << CAP_SETUID) | (1ull << CAP_SETPCAP) |                              \
   (1ull << CAP_NET_BIND_SERVICE) | (1ull << CAP_SYS_CHROOT) |                 \
   (1ull << CAP_AUDIT_WRITE))

/* Drops every other capability from the bounding set (needs CAP_SETPCAP,
 * so before the ids change). */
CHILD static void child_drop_bounding(struct child_ctx *c) {
  for (int cap = 0; cap < 64; cap++) {
    if (KEEP_CAPS & (1ull << cap))
      continue;
    if (syscall(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
      if (errno == EINVAL)
        break; /* past the kernel's last capability */
      child_fail(c, STEP_CAPS, errno);
    }
  }
}

/* Limits the sets to what the bounding set kept, and forbids gaining
 * privileges by exec (setuid files, file capabilities). */
CHILD static void child_limit_caps(struct child_ctx *c) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) < 0)
    child_fail(c, STEP_CAPS, errno);
  for (int i = 0; i < 2; i++) {
    uint32_t keep = (uint32_t)(KEEP_CAPS >> (32 * i));
    d[i].effective &= keep;
    d[i].permitted &= keep;
    d[i].inheritable = 0;
  }
  if (syscall(SYS_capset, &h, d) < 0 ||
      syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) <
          0 ||
      syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    child_fail(c, STEP_CAPS, errno);
}

CHILD static void child_exec(struct child_ctx *c) {
  const struct launch_plan *p = c->p;
  static const sigset_t empty;
  int err = ENOENT;
  bool denied = false;
  for (char *const *path = p->paths; *path; path++) {
    (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, NSIG / 8);
    syscall(SYS_execve, *path, p->argv, p->envp);
    err = errno;
    /* As execvp: look further on "not here", remember "not allowed". */
    if (err == EACCES)
      denied = true;
    else if (err != ENOENT && err != ENOTDIR && err != ESTALE &&
             err != ENODEV && err != ETIMEDOUT)
      break;
  }
  if (denied && (err == ENOENT || err == ENOTDIR))
    err = EACCES;
  child_fail(c, STEP_EXEC, err);
}

CHILD static int child_main(void *arg) {
  struct child_ctx *c = arg;
  const struct launch_plan *p = c->p;
  if (p->tty) {
    if (syscall(SYS_setsid) < 0)
      child_fail(c, STEP_SESSION, errno);
    if (syscall(SYS_ioctl, p->fd_in, TIOCSCTTY, 0) < 0)
      child_fail(c, STEP_TTY, errno);
  } else if (syscall(SYS_setpgid, 0, 0) < 0) {
    child_fail(c, STEP_SESSION, errno);
  }
  /* All three are above 2, so none is overwritten before it is copied. */
  if (syscall(SYS_dup3, p->fd_in, 0, 0) < 0 ||
      syscall(SYS_dup3, p->fd_out, 1, 0) < 0 ||
      syscall(SYS_dup3, p->fd_err, 2, 0) < 0)
    child_fail(c, STEP_STDIO, errno);
  if (syscall(SYS_fchdir, p->cwd_fd) < 0)
    child_fail(c, STEP_CWD, errno);
  if (p->drop_caps)
    child_drop_bounding(c);
  if (p->set_ids) {
    if (syscall(SYS_setgroups, p->ngroups, p->groups) < 0)
      child_fail(c, STEP_GROUPS, errno);
    if (syscall(SYS_setresgid, p->gid, p->gid, p->gid) < 0)
      child_fail(c, STEP_GID, errno);
    if (syscall(SYS_setresuid, p->uid, p->uid, p->uid) < 0)
      child_fail(c, STEP_UID, errno);
  }
  if (p->drop_caps)
    child_limit_caps(c);
  child_reset_signals();
  child_close_fds(c);
  int r = seccomp_prog_load(p->seccomp);
  if (r < 0)
    child_fail(c, STEP_SECCOMP, -r);
  child_exec(c);
  return 127;
}

int launch_start(const struct launch_plan *p, pid_t *pid, int *pidfd,
                 struct sbx_error *e) {
  if (pidfd)
    *pidfd = -1;
  if (p->fd_in < 3 || p->fd_out < 3 || p->fd_err < 3 || !p->paths[0])
    return sbx_error_set(e, SBX_INTERNAL, EINVAL,
                         "starting \"%s\": bad launch plan", p->name);
  /* The child runs on this while we sleep (CLONE_VFORK), as musl's
   * posix_spawn does: a fresh mapping per start would cost an mmap, page
   * faults and an munmap whose TLB shootdown reaches every CPU that runs one
   * of our threads. */
  _Alignas(64) unsigned char stack[LAUNCH_STACK_SIZE];
  struct child_ctx c = {.p = p};
  /* No handler of ours may run in the child before its dispositions are
   * reset: block everything; the child unblocks just before execve. */
  sigset_t all, old;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_SETMASK, &all, &old);
  int fd = -1;
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD | (pidfd ? CLONE_PIDFD : 0);
  int child = clone(child_main, stack + LAUNCH_STACK_SIZE, flags, &c, &fd);
  if (child < 0 && errno == EINVAL && pidfd) /* a kernel before 5.2 */
    child =
        clone(child_main, stack + LAUNCH_STACK_SIZE, flags & ~CLONE_PIDFD, &c);
  int clone_err = errno;
  (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (child < 0)
    return sbx_error_set(e, SBX_OK, clone_err, "starting \"%s\": %s", p->name,
                         strerror(clone_err));
  if (c.step == STEP_NONE) {
    *pid = child;
    if (pidfd)
      *pidfd = fd;
    return 0;
  }
  if (fd >= 0)
    (void)close(fd);
  /* The child has exited (or is about to): reap it unless the process
   * thread already did (ECHILD). */
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR)
    ;
  int err = c.err;
  if (c.step == STEP_EXEC)
    return sbx_error_set(e, SBX_OK, err, "exec \"%s\": %s", p->name,
                         strerror(err));
  return sbx_error_set(e, SBX_OK, err, "starting \"%s\": %s: %s", p->name,
                       step_names[c.step], strerror(err));
}
