/* Starting one child process: the part of exec that runs between clone and
 * execve. (Not spawn.h, which would hide <spawn.h>: sandboxd/ is on the
 * include path.)
 *
 * The caller (proc.c) prepares everything: argv, the environment, the list
 * of files to try (the PATH search), the fds, the identity and the seccomp
 * program. The child then makes only syscalls: it shares the parent's memory
 * (clone with CLONE_VM|CLONE_VFORK, as posix_spawn does), so it allocates
 * nothing and reports a failed step through that shared memory; the parent
 * sleeps until the child has exec'd or failed, so a failure becomes an
 * error reply ('exec "foo": No such file or directory') instead of a process
 * that exits 127. Thread-safe. */
#ifndef SANDBOXD_LAUNCH_H
#define SANDBOXD_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "shared/errors.h"

struct seccomp_prog;

struct launch_plan {
  const char *name;   /* the program as asked, for messages */
  char *const *argv;  /* NULL-terminated */
  char *const *paths; /* NULL-terminated files to try with execve, in order */
  char *const *envp;  /* NULL-terminated; the complete environment */
  int cwd_fd;         /* the child fchdir()s here */
  int fd_in;          /* become the child's 0, 1 and 2; each must be >= 3 */
  int fd_out;
  int fd_err;
  bool tty;     /* a new session with fd_in as its controlling terminal;
                   otherwise a new process group */
  bool set_ids; /* switch to uid/gid/groups (needs root) */
  uid_t uid;
  gid_t gid;
  const gid_t *groups;
  size_t ngroups;
  const struct seccomp_prog *seccomp; /* NULL: none */
  /* Keep only the capabilities a container's root has (launch.c), with
   * no way to gain more (bounding set, no_new_privs): an isolated
   * sandbox's commands. */
  bool drop_caps;
};

/* Starts the child described by P: its own process group (or session),
 * default signal dispositions and an empty signal mask, only fds 0-2 open,
 * cwd, identity, the seccomp filter, then execve of the first of P->paths
 * that can be executed. Returns 0 with *PID set, and *PIDFD (when not NULL)
 * a new O_CLOEXEC pidfd of the child, or -1 where the kernel has none
 * (before 5.2). Or a negative errno with E naming the step that failed (the
 * child is reaped then). Blocks until the child has exec'd; for pool
 * threads. */
int launch_start(const struct launch_plan *p, pid_t *pid, int *pidfd,
                 struct sbx_error *e);

#endif
