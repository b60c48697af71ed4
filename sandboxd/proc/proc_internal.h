/* Private to the process table (proc.h is the contract), one concern a
 * file:
 *   proc.c          the table, its epoll thread, reaping, deadlines,
 *                   records
 *   exec_start.c    ExecStart: the start planned, the child launched, its
 *                   record inserted
 *   exec_read.c     output: the pipes read into the buffers, ExecRead
 *                   answered at once or parked until it can be
 *   exec_write.c    input: the stdin queue, ExecWrite
 *   exec_control.c  ExecSignal, ExecResize, ExecList, ExecRelease
 *
 * Locking: one mutex guards the whole table (records, output buffers, stdin
 * queues, parked reads). Handlers take it for short, non-blocking work
 * (copying output, a non-blocking write). The thread takes it after every
 * epoll_wait to read output, reap children, fire deadlines and complete the
 * parked reads that became ready; it calls rpc_complete only after
 * unlocking. Every function here whose comment says "Locked" is called
 * with it held.
 *
 * epoll keys are (exec id << 3 | kind), never pointers: an event that
 * arrives for a record released meanwhile finds no record and is dropped.
 *
 * What ExecStart and ExecRead run on every call (the lookup, the wake-ups,
 * the epoll changes) is static inline here: those are the hot paths
 * (bench/RESULTS.md). */
#ifndef SANDBOXD_PROC_INTERNAL_H
#define SANDBOXD_PROC_INTERNAL_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>
#include <unistd.h>

#include "sandboxd/proc/outbuf.h"
#include "sandboxd/proc/proc.h"
#include "sandboxd/rpc/rpc.h"
#include "sandboxd/seccomp/seccomp_filter.h"
#include "shared/buf.h"

#define PROC_MAX_WAITERS 64         /* parked reads per process */
#define PROC_STDIN_MAX (1u << 20)   /* queued stdin bytes per process */
#define PROC_READ_CHUNK (64u << 10) /* one read(2) of output */
#define PROC_HOLD_WINDOW (8u << 20) /* least ring of a held stream */
#define PROC_HOLD_PIPE (1u << 20)   /* stdout pipe of a held command */
#define PROC_SUMMARY_MAX 120
#define PROC_STASH 64          /* reaped children nobody claimed yet */
#define PROC_REAP_POLL_MS 1000 /* reap even without SIGCHLD, as a backstop */

enum { K_STDOUT = 0, K_STDERR = 1, K_STDIN = 2, K_EXIT = 3, K_SPECIAL = 7 };
#define KEY(id, kind) (((uint64_t)(id) << 3) | (uint64_t)(kind))
#define KEY_WAKE KEY(0, K_SPECIAL)
#define KEY_SIGCHLD KEY(1, K_SPECIAL)

/* A parked ExecRead. */
struct waiter {
  struct waiter *next;
  struct rpc_call *c;
  int stream;
  uint64_t offset;
  uint32_t max;
  bool until_exit;
  bool saw_running; /* the process ran when the read came */
  uint64_t deadline_ms;
  /* An ExecStart that waits: the read goes into this reply's output. */
  Sbx__V1__ExecStartReply *start;
  int rc; /* the result, once filled */
};

struct stream {
  int fd; /* read end (a tty's stdout: the PTY master); -1 once closed */
  struct outbuf buf;
  /* Holding (ExecStart.hold_ms): where its reader last asked to read, and
   * when; paused while that leaves no room, fd then out of the epoll set. */
  uint64_t reader_off;
  uint64_t read_ms;
  bool paused;
};

struct proc {
  uint64_t id;
  pid_t pid; /* also the process group id */
  bool tty;
  bool running; /* not reaped yet */
  bool timed_out;
  int status;          /* wait status once reaped */
  uint64_t term_at_ms; /* timeout: TERM the group then (0: none) */
  uint64_t kill_at_ms; /* KILL the group then (0: none) */
  uint32_t hold_ms;    /* ExecStart.hold_ms */
  struct stream out[2];
  int in_fd;      /* stdin pipe's write end; -1: none or closed (tty: unused) */
  int pty_hold;   /* the PTY master after its EOF, kept until the reaping */
  int pidfd;      /* readable at exit; -1 once reaped (or no pidfds) */
  bool in_closed; /* a tty's input was closed (its master is gone) */
  bool in_close;  /* close stdin once the queue is written */
  bool in_armed;  /* waiting for EPOLLOUT */
  struct sbx_buf inq;
  size_t in_pos; /* written part of inq */
  uint64_t used; /* LRU tick */
  uint64_t started_ms;
  char summary[PROC_SUMMARY_MAX + 1];
  struct waiter *waiters;
  unsigned nwaiters;
};

struct reaped {
  pid_t pid;
  int status;
};

struct proc_table {
  struct sandboxd *d;
  pthread_mutex_t mu;
  pthread_cond_t reaped_cv;
  struct proc **procs; /* by id, ascending */
  size_t nprocs;
  size_t cap;
  size_t starting; /* slots reserved by ExecStarts in progress */
  uint64_t next_id;
  uint64_t tick;
  int epfd;
  int evfd;
  int sigfd;
  pthread_t thread;
  bool thread_started;
  bool closing; /* proc_table_shutdown: no new starts or parked reads */
  bool stop;    /* the thread is to end */
  /* The thread is answering reads it took off the table: the server must
   * not free its calls until it is done (idle_cv). */
  bool completing;
  pthread_cond_t idle_cv;
  /* When the sleeping thread wakes up by itself (monotonic ms; UINT64_MAX:
   * only for an event; 0: it is awake and looks at the table before it
   * sleeps again). Work due earlier must wake it (proc_wake_by). */
  uint64_t sleep_until_ms;
  struct seccomp_prog *seccomp;
  struct reaped stash[PROC_STASH];
  size_t nstash;
  unsigned char rbuf[PROC_READ_CHUNK]; /* the thread's read buffer */
};

/* The filter this thread already carries for its children (see
 * proc_thread_init); NULL: its children load their own. Per thread by
 * nature: a seccomp filter belongs to the thread that attached it. */
extern __thread const struct seccomp_prog *proc_thread_filter;

/* The smaller of A and B. */
static inline uint64_t proc_min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* Wakes the thread: it looks at the table again. */
static inline void proc_wake(struct proc_table *t) {
  uint64_t one = 1;
  (void)!write(t->evfd, &one, sizeof(one));
}

/* Wakes the thread if it sleeps past DUE_MS (monotonic). Every wake-up is a
 * context switch on the exec path, so the common case, a deadline after the
 * thread's own, skips it; events on the fds wake it anyway. Locked. */
static inline void proc_wake_by(struct proc_table *t, uint64_t due_ms) {
  if (due_ms < t->sleep_until_ms) {
    t->sleep_until_ms = 0;
    proc_wake(t);
  }
}

/* The record of exec ID, or NULL. Locked. */
static inline struct proc *proc_find(struct proc_table *t, uint64_t id) {
  /* Ids ascend with the index: binary search. */
  size_t lo = 0, hi = t->nprocs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->procs[mid]->id == id)
      return t->procs[mid];
    if (t->procs[mid]->id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Stops watching FD. */
static inline void proc_ep_del(struct proc_table *t, int fd) {
  (void)epoll_ctl(t->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* Adds (OP EPOLL_CTL_ADD) or changes the watch of FD for EVENTS under KEY. */
static inline int proc_ep_set(struct proc_table *t, int op, int fd,
                              uint32_t events, uint64_t key) {
  struct epoll_event ev = {.events = events, .data.u64 = key};
  return epoll_ctl(t->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

/* Whether both of P's output streams are closed (a tty has one). */
static inline bool proc_output_closed(const struct proc *p) {
  return p->out[0].fd < 0 && p->out[1].fd < 0;
}

/* The largest data chunk a read may return. */
static inline uint32_t proc_read_cap(const struct sandboxd *d, uint32_t asked) {
  uint64_t cap = d->limits.max_read_bytes;
  /* Room for the rest of the reply within a message. */
  if (d->limits.max_message_bytes > 4096)
    cap = proc_min_u64(cap, d->limits.max_message_bytes - 4096);
  if (asked > 0)
    cap = proc_min_u64(cap, asked);
  return (uint32_t)(cap > 0 ? cap : 1);
}

/* The handlers' answers for a daemon without processes and for an unknown
 * exec ID. */
static inline int proc_no_table(struct rpc_call *c) {
  return rpc_fail(c, SBX_UNAVAILABLE, EAGAIN, "processes are not available");
}

static inline int proc_not_found(struct rpc_call *c, uint64_t id) {
  return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "exec %" PRIu64 " not found", id);
}

/* The locked part of a handler; REQ is its request's body. */
typedef int (*proc_locked_fn)(struct proc_table *t, struct rpc_call *c,
                              const void *req);

/* The frame of a handler that works under the table's lock: no table, no
 * body (REQ NULL) and the lock itself. Inline, so that ExecRead calls its
 * FN directly. */
static inline int proc_call_locked(struct rpc_call *c, const void *req,
                                   proc_locked_fn fn) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return proc_no_table(c);
  if (!req)
    return rpc_no_body(c);
  pthread_mutex_lock(&t->mu);
  int r = fn(t, c, req);
  pthread_mutex_unlock(&t->mu);
  return r;
}

/* ---- the table (proc.c) ---- */

/* Reserves a slot for one more record, pruning a finished one (its parked
 * reads into *DONE) if the table is full. Locked. */
int proc_reserve_slot(struct proc_table *t, struct rpc_call *c,
                      struct waiter **done);
/* Forgets P: completes its parked reads (into *DONE), closes its fds and
 * frees it. The process must have been reaped. Locked. */
void proc_destroy(struct proc_table *t, struct proc *p, struct waiter **done);
/* P's process has ended with STATUS: its output is taken, stdin closed.
 * Locked. */
void proc_on_exit(struct proc_table *t, struct proc *p, int status);
/* Takes the status of the reaped child PID from the stash: true if it was
 * there. Locked. */
bool proc_stash_take(struct proc_table *t, pid_t pid, int *status);

/* ---- output (exec_read.c) ---- */

/* Reads what stream I of P has now, up to BUDGET bytes; closes it at EOF.
 * Locked. */
void proc_stream_drain(struct proc_table *t, struct proc *p, int i,
                       size_t budget);
/* Whether P's stream S is held for its reader at NOW (ExecStart.hold_ms):
 * started so and read within hold_ms. */
bool proc_stream_held(const struct proc *p, const struct stream *s,
                      uint64_t now);
/* The reader of P's stream I asks to read at OFFSET at NOW: what comes
 * before it is taken, and a paused stream with room again is read again.
 * Locked. */
void proc_stream_reader_at(struct proc_table *t, struct proc *p, int i,
                           uint64_t offset, uint64_t now);
/* Reads P's paused streams again whose reader has not read for hold_ms;
 * lowers *NEXT to when the others' holds end. Locked. */
void proc_stream_hold_expire(struct proc_table *t, struct proc *p, uint64_t now,
                             uint64_t *next);
/* Holds P's output no longer: its paused streams are read on. Locked. */
void proc_stream_unhold(struct proc_table *t, struct proc *p);
/* Sets what the thread watches on P's stream I (its output, and a
 * terminal's input when armed); nothing while paused. Locked. */
int proc_stream_watch(struct proc_table *t, struct proc *p, int i);
/* Closes stream I of P (a tty's master is kept until the reaping). Locked. */
void proc_stream_close(struct proc_table *t, struct proc *p, int i);
/* Answers W's read of P at once when it is ready or WAIT_MS is 0, else
 * parks a copy: RPC_PENDING, and W's call is the thread's. Locked. */
int proc_read_or_park(struct proc_table *t, struct proc *p,
                      const struct waiter *w, uint32_t wait_ms);
/* Moves P's parked reads that are ready (all of them when ALL, or their
 * deadline passed) to *DONE, filled. Locked. */
void proc_service_waiters(struct proc *p, uint64_t now, bool all,
                          struct waiter **done);
/* Completes DONE; call without the lock. */
void proc_complete_waiters(struct waiter *done);

/* ---- input (exec_write.c) ---- */

/* Writes queued stdin bytes without blocking. Locked. */
void proc_stdin_flush(struct proc_table *t, struct proc *p);
/* Closes stdin and drops whatever was still queued. Locked. */
void proc_stdin_close(struct proc_table *t, struct proc *p);

#endif
