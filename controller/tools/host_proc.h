/* Programs the controller runs on its own host for host tools (command
 * tools, stdio MCP servers): started with posix_spawn in their own process
 * group, with a small environment, pipes for stdin, stdout and stderr
 * (O_CLOEXEC on our side), and the default signal mask and dispositions.
 *
 * Thread-safety: one host_proc is used by one thread at a time, except
 * host_proc_kill, which any thread may call once the process is started. */
#ifndef SBX_HOST_PROC_H
#define SBX_HOST_PROC_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "shared/errors.h"

struct host_proc {
  pid_t pid;  /* 0 once reaped */
  pid_t pgid; /* its process group (its pid), 0 when never started */
  int in;     /* its stdin, or -1 */
  int out;    /* its stdout, or -1 */
  int err;    /* its stderr, or -1 */
};

/* Starts ARGV (argv[0] a path, or a name looked up in PATH) in DIR with
 * HOME, LOGNAME, PATH, SHELL, TERM and USER from our environment (as the
 * MCP SDKs pass them) and then ENV ("KEY=VALUE", may be NULL). -errno with
 * E naming the program when it cannot be started. */
int host_proc_start(struct host_proc *p, char *const argv[], const char *dir,
                    char *const env[], struct sbx_error *e);
/* Kills its process group with SIGKILL: the program and whatever it
 * left running there. */
void host_proc_kill(struct host_proc *p);
/* Closes our ends of the pipes, kills the group and reaps the process
 * (if not yet); *STATUS (may be NULL) gets the wait status. Accepts a
 * stopped one. */
void host_proc_stop(struct host_proc *p, int *status);
/* Waits for the process to exit; *STATUS gets the wait status. */
int host_proc_wait(struct host_proc *p, int *status);

/* Writes all of BUF to FD (a pipe), never raising SIGPIPE: -EPIPE when the
 * reader is gone. Blocks. */
int host_write_all(int fd, const void *buf, size_t len);

/* Blocks SIGPIPE in this thread (OLD gets the mask to restore), so that a
 * write to a pipe whose reader is gone fails with EPIPE; the restore
 * discards a SIGPIPE that came meanwhile. */
void host_sigpipe_block(sigset_t *old);
void host_sigpipe_restore(const sigset_t *old);

/* Describes a wait status for messages: "exited with status 3", "was
 * killed by signal 9". */
void host_proc_describe(int status, char *out, size_t cap);

#endif
