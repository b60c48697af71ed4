/* Processes and PTYs: exec start/read/write/signal/resize/list/release.
 *
 * One thread (epoll) owns every child pipe and PTY master, a pidfd per child
 * (its exit), a signalfd for SIGCHLD (orphans) and an eventfd to wake it.
 * Output is kept per stream, addressed by byte offset: the first
 * limits.retention_head bytes and a ring of the last limits.retention_tail
 * bytes (outbuf.h); a read of dropped bytes reports a gap. A read answers at
 * once when there is data at its offset or the stream is closed; otherwise
 * it parks its rpc_call until data comes, the stream closes, the process
 * exits, or wait_ms passes (the thread's epoll timeout). With until_exit it
 * waits for the exit and all output closed, or max_bytes ready. A process
 * outlives any request or client; release forgets a finished one. At most
 * limits.max_processes records exist: when full, a finished one is pruned,
 * least recently used first, sparing the 8 most recently used if it can.
 *
 * Children (launch.h) get a clean environment (PATH, HOME, LANG, TERM,
 * USER and LOGNAME "sandbox" or the run_as user's name, SHELL, PWD,
 * TMPDIR=/tmp, plus the request's variables), their own
 * process group (a session with a PTY), the seccomp filter of d->seccomp,
 * and the run_as user's identity (when sandboxd is root). A timeout TERMs
 * the whole group, then KILLs it 2 s later; it also ends what a finished
 * leader left running with the output open. A PTY master stays open until
 * its process is reaped (closing it would SIGHUP a process on its way out).
 *
 * Thread-safety: every function here may be called from any thread. */
#ifndef SANDBOXD_PROC_H
#define SANDBOXD_PROC_H

#include <sys/types.h>

#include "sandboxd/rpc/rpc.h"

/* Creates the table and starts its thread. SIGCHLD must already be blocked
 * in every thread (main does it before any thread starts); -EINVAL when it
 * is not blocked in the calling one. Sets SIGPIPE to SIG_IGN if it was
 * SIG_DFL (a write to a closed stdin must fail, not end sandboxd). */
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

/* Loads the children's seccomp filter (with NO_NEW_PRIVS and without
 * CAP_SYS_PTRACE in the bounding set, as each child would) into the calling
 * thread, once, so that the children it starts inherit the attached filter
 * instead of compiling and attaching a copy each: attaching costs about
 * 200 us a start on a loaded 2-vCPU VM (bench/RESULTS.md), inheriting costs
 * nothing. For the worker pool's threads, which run every ExecStart; none
 * of their other work needs a syscall the filter refuses. A thread that
 * never called this, or where loading failed, still starts children: they
 * load the filter themselves. Accepts NULL. */
void proc_thread_init(struct proc_table *t);

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
