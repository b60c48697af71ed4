/* Processes and PTYs: exec start/read/write/signal/resize/list/release.
 *
 * One thread (epoll) owns every child pipe and PTY master plus a signalfd for
 * SIGCHLD. Output is kept per stream, addressed by byte offset: the first
 * limits.retention_head bytes and a ring of the last limits.retention_tail
 * bytes; a read of dropped bytes reports a gap. Long-poll reads park their
 * rpc_call and are completed by the epoll thread when data or exit arrives,
 * or when wait_ms passes (a timerfd). A process outlives any request or
 * client; release forgets a finished one. At most limits.max_processes
 * records exist: exited ones are pruned least recently used first.
 *
 * Children get a clean environment (PATH, HOME, LANG, TERM, USER, SHELL,
 * PWD plus the request's variables), their own process group, the seccomp
 * filter of d->seccomp, and the run_as user's identity (when sandboxd is
 * root). A timeout TERMs the whole group, then KILLs it 2 s later. */
#ifndef SANDBOXD_PROC_H
#define SANDBOXD_PROC_H

#include <sys/types.h>

#include "rpc.h"

/* Creates the table and starts its thread. SIGCHLD must already be blocked
 * in every thread (main does it before any thread starts). */
int proc_table_new(struct sandboxd *d, struct proc_table **out);
/* Kills every process group (TERM, then KILL after GRACE_MS), completes
 * parked reads, stops the thread, frees. Accepts NULL. */
void proc_table_free(struct proc_table *t, unsigned grace_ms);
/* The first half of proc_table_free, for a daemon that must answer every
 * parked read before its server goes away: refuses new starts
 * (UNAVAILABLE), kills every group as proc_kill_all, then answers every
 * parked read now and later reads at once. The other RPCs keep working;
 * free the table (after the server) with proc_table_free. Accepts NULL. */
void proc_table_shutdown(struct proc_table *t, unsigned grace_ms);
/* Kills every process group (TERM, KILL after GRACE_MS); keeps the table. */
void proc_kill_all(struct proc_table *t, unsigned grace_ms);

/* Waits until the child PID, started by another module (useradd, tar...),
 * has exited, and returns its wait status in *STATUS. The table's thread
 * reaps every child of sandboxd (waitpid(-1), so that orphans reparented to
 * a sandboxd running as PID 1 or subreaper do not pile up as zombies), so
 * other modules must wait here instead of calling waitpid themselves.
 * Blocking (pool threads only). TIMEOUT_MS 0 waits forever; -ETIMEDOUT.
 * The last 64 unclaimed statuses are kept, so wait soon after starting. */
int proc_wait_pid(struct proc_table *t, pid_t pid, int *status,
                  unsigned timeout_ms);

/* The RPCs. A read reply's exit_code is 128 + the signal when the process
 * was killed by one (as a shell reports it), with signal set.
 * Errors: NOT_FOUND for an unknown exec id; CONFLICT for writing to or
 * releasing what cannot take it (exited, still running, stdin closed);
 * LIMIT_EXCEEDED for a full table (all running), 64 reads parked on one
 * process, or more than 1 MiB of stdin queued; INVALID_ARGUMENT for a
 * malformed request. */
int rpc_exec_start(struct rpc_call *c); /* blocking: runs on the pool */
int rpc_exec_read(struct rpc_call *c);  /* may return RPC_PENDING */
int rpc_exec_write(struct rpc_call *c);
int rpc_exec_signal(struct rpc_call *c);
int rpc_exec_resize(struct rpc_call *c);
int rpc_exec_list(struct rpc_call *c);
int rpc_exec_release(struct rpc_call *c);

#endif
