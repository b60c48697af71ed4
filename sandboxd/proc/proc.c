/* Processes and PTYs: the table, its epoll thread and the Exec* RPCs.
 *
 * Locking: one mutex guards the whole table (records, output buffers, stdin
 * queues, parked reads). Handlers take it for short, non-blocking work
 * (copying output, a non-blocking write). The thread takes it after every
 * epoll_wait to read output, reap children, fire deadlines and complete the
 * parked reads that became ready; it calls rpc_complete only after
 * unlocking.
 *
 * epoll keys are (exec id << 3 | kind), never pointers: an event that
 * arrives for a record released meanwhile finds no record and is dropped. */
#include "sandboxd/proc/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/fs/resolve.h"
#include "sandboxd/proc/launch.h"
#include "sandboxd/proc/outbuf.h"
#include "sandboxd/proc/tty.h"
#include "sandboxd/seccomp/seccomp_filter.h"
#include "sandboxd/users/userdb.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define PROC_MAX_WAITERS 64            /* parked reads per process */
#define PROC_STDIN_MAX (1u << 20)      /* queued stdin bytes per process */
#define PROC_KEEP_RECENT 8             /* records pruning spares */
#define PROC_KILL_AFTER_MS 2000        /* TERM, then KILL this much later */
#define PROC_READ_CHUNK (64u << 10)    /* one read(2) of output */
#define PROC_READ_BUDGET (1u << 20)    /* per fd and wakeup, for fairness */
#define PROC_MAX_ARGS 4096             /* argv entries */
#define PROC_MAX_ENV 1024              /* request environment entries */
#define PROC_MAX_STRING (128u << 10)   /* one argument or NAME=value */
#define PROC_MAX_EXEC_BYTES (1u << 20) /* argv and environment together */
#define PROC_MAX_PATH_DIRS 64
#define PROC_SUMMARY_MAX 120
#define PROC_STASH 64          /* reaped children nobody claimed yet */
#define PROC_REAP_POLL_MS 1000 /* reap even without SIGCHLD, as a backstop */
#define PROC_KILL_REAP_MS                                                      \
  1000 /* after KILL, wait this long for the reaping                           \
        */
#define PROC_BASE_PATH                                                         \
  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
   * sleeps again). Work due earlier must wake it (wake_by). */
  uint64_t sleep_until_ms;
  struct seccomp_prog *seccomp;
  char self_name[USERDB_NAME_MAX]; /* USER when there is no run_as */
  struct reaped stash[PROC_STASH];
  size_t nstash;
  unsigned char rbuf[PROC_READ_CHUNK]; /* the thread's read buffer */
};

/* ---- small helpers ---------------------------------------------------- */

/* The filter this thread already carries for its children (see
 * proc_thread_init); NULL: its children load their own. Per thread by
 * nature: a seccomp filter belongs to the thread that attached it. */
static __thread const struct seccomp_prog *thread_filter;

static uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

static void wake(struct proc_table *t) {
  uint64_t one = 1;
  (void)!write(t->evfd, &one, sizeof(one));
}

/* Wakes the thread if it sleeps past DUE_MS (monotonic). Every wake-up is a
 * context switch on the exec path, so the common case, a deadline after the
 * thread's own, skips it; events on the fds wake it anyway. Locked. */
static void wake_by(struct proc_table *t, uint64_t due_ms) {
  if (due_ms < t->sleep_until_ms) {
    t->sleep_until_ms = 0;
    wake(t);
  }
}

static struct proc *find(struct proc_table *t, uint64_t id) {
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

static struct proc *find_running_pid(struct proc_table *t, pid_t pid) {
  for (size_t i = 0; i < t->nprocs; i++)
    if (t->procs[i]->running && t->procs[i]->pid == pid)
      return t->procs[i];
  return NULL;
}

static void ep_del(struct proc_table *t, int fd) {
  (void)epoll_ctl(t->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static int ep_set(struct proc_table *t, int op, int fd, uint32_t events,
                  uint64_t key) {
  struct epoll_event ev = {.events = events, .data.u64 = key};
  return epoll_ctl(t->epfd, op, fd, &ev) < 0 ? -errno : 0;
}

static bool stdin_open(const struct proc *p) {
  return p->tty ? !p->in_closed && p->out[0].fd >= 0 : p->in_fd >= 0;
}

/* Stops watching for stdin writability. */
static void stdin_disarm(struct proc_table *t, struct proc *p) {
  if (!p->in_armed)
    return;
  p->in_armed = false;
  if (p->tty) {
    if (p->out[0].fd >= 0)
      (void)ep_set(t, EPOLL_CTL_MOD, p->out[0].fd, EPOLLIN,
                   KEY(p->id, K_STDOUT));
  } else if (p->in_fd >= 0) {
    ep_del(t, p->in_fd);
  }
}

static int stdin_arm(struct proc_table *t, struct proc *p) {
  if (p->in_armed)
    return 0;
  int r = p->tty ? ep_set(t, EPOLL_CTL_MOD, p->out[0].fd, EPOLLIN | EPOLLOUT,
                          KEY(p->id, K_STDOUT))
                 : ep_set(t, EPOLL_CTL_ADD, p->in_fd, EPOLLOUT,
                          KEY(p->id, K_STDIN));
  if (r == 0)
    p->in_armed = true;
  return r;
}

/* Closes stdin and drops whatever was still queued. */
static void stdin_close(struct proc_table *t, struct proc *p) {
  stdin_disarm(t, p);
  if (p->tty) {
    p->in_closed = true;
  } else if (p->in_fd >= 0) {
    (void)close(p->in_fd);
    p->in_fd = -1;
  }
  sbx_buf_free(&p->inq);
  p->in_pos = 0;
  p->in_close = false;
}

static void stream_close(struct proc_table *t, struct proc *p, int i) {
  struct stream *s = &p->out[i];
  if (s->fd < 0)
    return;
  ep_del(t, s->fd);
  if (p->tty && i == K_STDOUT) {
    stdin_close(t, p); /* the master was the input too */
    /* Closing the master hangs the terminal up: SIGHUP for a process that
     * closed its fds on the way out but has not exited yet. Keep it open
     * until then. */
    if (p->running) {
      p->pty_hold = s->fd;
      s->fd = -1;
      return;
    }
  }
  (void)close(s->fd);
  s->fd = -1;
}

/* The exit is known: the pidfd has done its job. */
static void pidfd_release(struct proc_table *t, struct proc *p) {
  if (p->pidfd < 0)
    return;
  ep_del(t, p->pidfd);
  (void)close(p->pidfd);
  p->pidfd = -1;
}

static void pty_release(struct proc *p) {
  if (p->pty_hold >= 0)
    (void)close(p->pty_hold);
  p->pty_hold = -1;
}

/* Reads what stream I has now, up to BUDGET bytes; closes it at EOF. A PTY
 * master reports EIO once every slave fd is closed: that is its EOF. */
static void stream_drain(struct proc_table *t, struct proc *p, int i,
                         size_t budget) {
  struct stream *s = &p->out[i];
  size_t got = 0;
  while (s->fd >= 0 && got < budget) {
    ssize_t n = read(s->fd, t->rbuf, sizeof(t->rbuf));
    if (n > 0) {
      outbuf_append(&s->buf, t->rbuf, (size_t)n);
      got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n < 0 && errno != EIO)
      log_debug("exec %" PRIu64 ": reading %s: %s", p->id,
                i == K_STDOUT ? "stdout" : "stderr", strerror(errno));
    stream_close(t, p, i);
  }
}

/* Writes queued stdin bytes without blocking. */
static void stdin_flush(struct proc_table *t, struct proc *p) {
  int fd = p->tty ? (p->in_closed ? -1 : p->out[0].fd) : p->in_fd;
  while (fd >= 0 && p->in_pos < p->inq.len) {
    ssize_t n = write(fd, p->inq.data + p->in_pos, p->inq.len - p->in_pos);
    if (n > 0) {
      p->in_pos += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN) {
      if (stdin_arm(t, p) < 0)
        stdin_close(t, p);
      return;
    }
    /* EPIPE (nobody reads any more) or worse: input is over. */
    stdin_close(t, p);
    return;
  }
  sbx_buf_reset(&p->inq);
  p->in_pos = 0;
  stdin_disarm(t, p);
  if (p->in_close)
    stdin_close(t, p);
}

/* ---- reading replies -------------------------------------------------- */

static bool all_output_closed(const struct proc *p) {
  return p->out[0].fd < 0 && p->out[1].fd < 0;
}

static bool read_ready(const struct proc *p, const struct waiter *w) {
  const struct stream *s = &p->out[w->stream];
  uint64_t start;
  uint64_t avail = outbuf_avail(&s->buf, w->offset, &start);
  if (w->until_exit)
    return (!p->running && all_output_closed(p)) || avail >= w->max;
  /* The exit answers reads that were waiting for it; a later read of a
   * finished process whose output a background child holds open waits for
   * data like any other, rather than answering empty at once forever. */
  return avail > 0 || s->fd < 0 || (w->saw_running && !p->running);
}

/* Fills C's response with what W asks of P; 0 or -ENOMEM. */
static int fill_read(const struct proc *p, const struct waiter *w,
                     struct rpc_call *c) {
  const struct stream *s = &p->out[w->stream];
  Sbx__V1__ExecReadReply *r = sbx_arena_new(&c->arena, Sbx__V1__ExecReadReply);
  if (!r)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "exec %" PRIu64 ": out of memory",
                    p->id);
  sbx__v1__exec_read_reply__init(r);
  uint64_t start;
  size_t n = (size_t)min_u64(outbuf_avail(&s->buf, w->offset, &start), w->max);
  if (n > 0) {
    r->data.data = sbx_arena_alloc_raw(&c->arena, n);
    if (!r->data.data)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM,
                      "exec %" PRIu64 ": out of memory for %zu bytes", p->id,
                      n);
    outbuf_copy(&s->buf, start, r->data.data, n);
    r->data.len = n;
  }
  r->offset = start;
  r->next_offset = start + n;
  r->gap = start - w->offset;
  r->end_offset = s->buf.total;
  r->eof = s->fd < 0 && r->next_offset == s->buf.total;
  r->exited = !p->running;
  if (!p->running) {
    if (WIFSIGNALED(p->status)) {
      r->signal = WTERMSIG(p->status);
      r->exit_code = 128 + r->signal;
    } else {
      r->exit_code = WEXITSTATUS(p->status);
    }
  }
  r->timed_out = p->timed_out;
  if (w->start) {
    w->start->output = r;
    c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_START;
    c->resp->exec_start = w->start;
  } else {
    c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_READ;
    c->resp->exec_read = r;
  }
  return 0;
}

/* Moves P's parked reads that are ready (all of them when ALL, or their
 * deadline passed) to *DONE, filled. */
static void service_waiters(struct proc *p, uint64_t now, bool all,
                            struct waiter **done) {
  struct waiter **pw = &p->waiters;
  while (*pw) {
    struct waiter *w = *pw;
    if (all || now >= w->deadline_ms || read_ready(p, w)) {
      *pw = w->next;
      p->nwaiters--;
      w->rc = fill_read(p, w, w->c);
      w->next = *done;
      *done = w;
    } else {
      pw = &w->next;
    }
  }
}

/* Completes DONE; call without the lock. */
static void complete_waiters(struct waiter *done) {
  while (done) {
    struct waiter *next = done->next;
    rpc_complete(done->c, done->rc);
    free(done);
    done = next;
  }
}

/* ---- records ---------------------------------------------------------- */

/* Forgets P: completes its parked reads (into *DONE), closes its fds and
 * frees it. The process must have been reaped. */
static void proc_destroy(struct proc_table *t, struct proc *p,
                         struct waiter **done) {
  service_waiters(p, 0, true, done);
  stdin_close(t, p);
  for (int i = 0; i < 2; i++) {
    stream_close(t, p, i);
    outbuf_free(&p->out[i].buf);
  }
  pty_release(p);
  pidfd_release(t, p);
  for (size_t i = 0; i < t->nprocs; i++)
    if (t->procs[i] == p) {
      memmove(&t->procs[i], &t->procs[i + 1],
              (t->nprocs - i - 1) * sizeof(t->procs[0]));
      t->nprocs--;
      break;
    }
  free(p);
}

/* The record to prune for a new one: the least recently used finished one
 * that is not among the PROC_KEEP_RECENT most recently used, else the least
 * recently used finished one. NULL when all are running. */
static struct proc *prune_victim(struct proc_table *t) {
  uint64_t recent[PROC_KEEP_RECENT] = {0}; /* the largest ticks, descending */
  for (size_t i = 0; i < t->nprocs; i++) {
    uint64_t u = t->procs[i]->used;
    for (size_t k = 0; k < PROC_KEEP_RECENT; k++)
      if (u > recent[k]) {
        memmove(&recent[k + 1], &recent[k],
                (PROC_KEEP_RECENT - k - 1) * sizeof(recent[0]));
        recent[k] = u;
        break;
      }
  }
  uint64_t spare_from = recent[PROC_KEEP_RECENT - 1];
  struct proc *best = NULL, *best_spared = NULL;
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->running)
      continue;
    if (p->used < spare_from && (!best || p->used < best->used))
      best = p;
    if (!best_spared || p->used < best_spared->used)
      best_spared = p;
  }
  return best ? best : best_spared;
}

/* P's process has ended with STATUS: take the output it left in the pipes,
 * and close stdin (a pipe nobody will read). */
static void on_exit_status(struct proc_table *t, struct proc *p, int status) {
  p->running = false;
  p->status = status;
  for (int i = 0; i < 2; i++)
    stream_drain(t, p, i, SIZE_MAX);
  pty_release(p);
  pidfd_release(t, p);
  if (!p->tty)
    stdin_close(t, p);
}

static void stash_put(struct proc_table *t, pid_t pid, int status) {
  if (t->nstash == PROC_STASH) {
    memmove(&t->stash[0], &t->stash[1], (PROC_STASH - 1) * sizeof(t->stash[0]));
    t->nstash--;
  }
  t->stash[t->nstash++] = (struct reaped){pid, status};
  pthread_cond_broadcast(&t->reaped_cv);
}

static bool stash_take(struct proc_table *t, pid_t pid, int *status) {
  for (size_t i = 0; i < t->nstash; i++)
    if (t->stash[i].pid == pid) {
      *status = t->stash[i].status;
      memmove(&t->stash[i], &t->stash[i + 1],
              (t->nstash - i - 1) * sizeof(t->stash[0]));
      t->nstash--;
      return true;
    }
  return false;
}

/* Reaps every exited child. A child not (yet) in the table is kept in the
 * stash: an ExecStart that has not inserted its record, or another
 * module's child (proc_wait_pid). */
static void reap(struct proc_table *t) {
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid <= 0)
      return;
    struct proc *p = find_running_pid(t, pid);
    if (p)
      on_exit_status(t, p, status);
    else
      stash_put(t, pid, status);
  }
}

/* Sends SIG to P's process group; false when the group is gone. */
static bool signal_group(struct proc *p, int sig) {
  return kill(-p->pid, sig) == 0;
}

static void fire_deadlines(struct proc_table *t, uint64_t now) {
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->term_at_ms && now >= p->term_at_ms) {
      p->term_at_ms = 0;
      /* The group outlives its leader while a background child holds the
       * output open: the timeout is for all of it. */
      if (p->running || !all_output_closed(p)) {
        log_debug("exec %" PRIu64 ": timed out, terminating its group", p->id);
        p->timed_out = true;
        (void)signal_group(p, SIGTERM);
        p->kill_at_ms = now + PROC_KILL_AFTER_MS;
      }
    }
    if (p->kill_at_ms && now >= p->kill_at_ms) {
      p->kill_at_ms = 0;
      if (signal_group(p, 0))
        (void)signal_group(p, SIGKILL);
    }
  }
}

/* epoll_wait's timeout: the nearest deadline, or -1. */
static int next_timeout(struct proc_table *t, uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->running)
      next = min_u64(next, now + PROC_REAP_POLL_MS);
    if (p->term_at_ms)
      next = min_u64(next, p->term_at_ms);
    if (p->kill_at_ms)
      next = min_u64(next, p->kill_at_ms);
    for (struct waiter *w = p->waiters; w; w = w->next)
      next = min_u64(next, w->deadline_ms);
  }
  if (next == UINT64_MAX)
    return -1;
  if (next <= now)
    return 0;
  return (int)min_u64(next - now, INT_MAX);
}

/* Returns true when the event says a child exited (reap then). */
static bool on_event(struct proc_table *t, uint64_t key, uint32_t events) {
  struct proc *p = find(t, key >> 3);
  if (!p)
    return false; /* released meanwhile */
  int kind = (int)(key & 7);
  if (kind == K_EXIT)
    return true;
  if (kind == K_STDIN || (p->tty && (events & (EPOLLOUT | EPOLLERR))))
    stdin_flush(t, p);
  if ((kind == K_STDOUT || kind == K_STDERR) &&
      (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
    stream_drain(t, p, kind, PROC_READ_BUDGET);
  return false;
}

static void drain_fd(int fd) {
  unsigned char buf[sizeof(struct signalfd_siginfo) * 8];
  while (read(fd, buf, sizeof(buf)) > 0)
    ;
}

static void *proc_thread(void *arg) {
  struct proc_table *t = arg;
  struct epoll_event evs[64];
  pthread_mutex_lock(&t->mu);
  while (!t->stop) {
    uint64_t now0 = sbx_now_ms();
    int timeout = next_timeout(t, now0);
    t->sleep_until_ms = timeout < 0 ? UINT64_MAX : now0 + (uint64_t)timeout;
    pthread_mutex_unlock(&t->mu);
    int n = epoll_wait(t->epfd, evs, (int)SBX_ARRAY_SIZE(evs), timeout);
    int err = errno;
    pthread_mutex_lock(&t->mu);
    t->sleep_until_ms = 0;
    if (t->stop)
      break;
    if (n < 0 && err != EINTR) {
      log_error("processes: epoll_wait: %s", strerror(err));
      pthread_mutex_unlock(&t->mu);
      (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
      pthread_mutex_lock(&t->mu);
      continue;
    }
    bool must_reap = n == 0;
    for (int i = 0; i < n; i++) {
      uint64_t key = evs[i].data.u64;
      if (key == KEY_WAKE || key == KEY_SIGCHLD) {
        drain_fd(key == KEY_WAKE ? t->evfd : t->sigfd);
        must_reap = true;
      } else if (on_event(t, key, evs[i].events)) {
        must_reap = true;
      }
    }
    if (must_reap)
      reap(t);
    uint64_t now = sbx_now_ms();
    fire_deadlines(t, now);
    struct waiter *done = NULL;
    for (size_t i = 0; i < t->nprocs; i++)
      if (t->procs[i]->waiters)
        service_waiters(t->procs[i], now, false, &done);
    if (done) {
      t->completing = true;
      pthread_mutex_unlock(&t->mu);
      complete_waiters(done);
      pthread_mutex_lock(&t->mu);
      t->completing = false;
      pthread_cond_broadcast(&t->idle_cv);
    }
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

/* ---- table ------------------------------------------------------------ */

static void table_close(struct proc_table *t) {
  if (t->epfd >= 0)
    (void)close(t->epfd);
  if (t->evfd >= 0)
    (void)close(t->evfd);
  if (t->sigfd >= 0)
    (void)close(t->sigfd);
  seccomp_prog_free(t->seccomp);
  free(t->procs);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->reaped_cv);
  pthread_cond_destroy(&t->idle_cv);
  free(t);
}

int proc_table_new(struct sandboxd *d, struct proc_table **out) {
  *out = NULL;
  sigset_t cur;
  if (pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0 ||
      sigismember(&cur, SIGCHLD) != 1) {
    log_error("processes: SIGCHLD must be blocked before the table starts");
    return -EINVAL;
  }
  /* A write to a closed stdin must fail with EPIPE, not end sandboxd.
   * Children get default dispositions back. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
    (void)signal(SIGPIPE, SIG_IGN);

  struct proc_table *t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  t->d = d;
  t->epfd = t->evfd = t->sigfd = -1;
  t->next_id = 1;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->reaped_cv, NULL);
  pthread_cond_init(&t->idle_cv, NULL);
  int r = 0;
  t->cap = d->limits.max_processes;
  if (t->cap > 0 && !(t->procs = calloc(t->cap, sizeof(t->procs[0])))) {
    r = -ENOMEM;
    goto fail;
  }
  r = seccomp_prog_build(d->seccomp, &t->seccomp);
  if (r < 0) {
    log_error("processes: cannot build the seccomp filter: %s", strerror(-r));
    goto fail;
  }
  struct userdb_user self;
  char uid[24];
  (void)snprintf(uid, sizeof(uid), "%u", (unsigned)d->uid);
  if (userdb_user(NULL, uid, &self) == 0 && self.name[0])
    (void)snprintf(t->self_name, sizeof(t->self_name), "%s", self.name);
  else
    (void)snprintf(t->self_name, sizeof(t->self_name), "%s", uid);

  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  t->epfd = epoll_create1(EPOLL_CLOEXEC);
  t->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  t->sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (t->epfd < 0 || t->evfd < 0 || t->sigfd < 0) {
    r = -errno;
    goto fail;
  }
  if ((r = ep_set(t, EPOLL_CTL_ADD, t->evfd, EPOLLIN, KEY_WAKE)) < 0 ||
      (r = ep_set(t, EPOLL_CTL_ADD, t->sigfd, EPOLLIN, KEY_SIGCHLD)) < 0)
    goto fail;
  r = -pthread_create(&t->thread, NULL, proc_thread, t);
  if (r < 0)
    goto fail;
  t->thread_started = true;
  *out = t;
  return 0;
fail:
  table_close(t);
  return r;
}

/* True while any of the table's processes or their groups may still run. */
static bool any_alive(struct proc_table *t) {
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->running || (!all_output_closed(p) && signal_group(p, 0)))
      return true;
  }
  return false;
}

static void signal_all(struct proc_table *t, int sig) {
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    /* A finished record's group may live on in a background child that
     * still holds the output open. */
    if (p->running || !all_output_closed(p))
      (void)signal_group(p, sig);
  }
}

/* Waits up to MS for every process to be gone; true if they are. */
static bool wait_all_gone(struct proc_table *t, unsigned ms) {
  uint64_t end = sbx_now_ms() + ms;
  for (;;) {
    pthread_mutex_lock(&t->mu);
    bool alive = any_alive(t);
    pthread_mutex_unlock(&t->mu);
    if (!alive)
      return true;
    if (sbx_now_ms() >= end)
      return false;
    wake(t); /* reap now rather than at the next poll */
    (void)nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  }
}

void proc_kill_all(struct proc_table *t, unsigned grace_ms) {
  if (!t)
    return;
  pthread_mutex_lock(&t->mu);
  signal_all(t, SIGTERM);
  pthread_mutex_unlock(&t->mu);
  if (wait_all_gone(t, grace_ms))
    return;
  pthread_mutex_lock(&t->mu);
  signal_all(t, SIGKILL);
  pthread_mutex_unlock(&t->mu);
  if (!wait_all_gone(t, PROC_KILL_REAP_MS))
    log_warn("processes: some processes survived SIGKILL");
}

void proc_table_shutdown(struct proc_table *t, unsigned grace_ms) {
  if (!t)
    return;
  pthread_mutex_lock(&t->mu);
  t->closing = true;
  pthread_mutex_unlock(&t->mu);
  proc_kill_all(t, grace_ms);
  struct waiter *done = NULL;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nprocs; i++)
    service_waiters(t->procs[i], 0, true, &done);
  /* Reads the thread took off the table before are answered too. */
  while (t->completing)
    pthread_cond_wait(&t->idle_cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
  complete_waiters(done);
}

void proc_table_free(struct proc_table *t, unsigned grace_ms) {
  if (!t)
    return;
  proc_table_shutdown(t, grace_ms);
  pthread_mutex_lock(&t->mu);
  t->stop = true;
  pthread_mutex_unlock(&t->mu);
  wake(t);
  if (t->thread_started)
    pthread_join(t->thread, NULL);
  /* The thread is gone: reap what is left, then answer the parked reads
   * with what there is and forget everything. */
  pthread_mutex_lock(&t->mu);
  reap(t);
  struct waiter *done = NULL;
  while (t->nprocs > 0)
    proc_destroy(t, t->procs[t->nprocs - 1], &done);
  pthread_mutex_unlock(&t->mu);
  complete_waiters(done);
  table_close(t);
}

void proc_thread_init(struct proc_table *t) {
  if (!t || !t->seccomp || thread_filter == t->seccomp)
    return;
  int r = seccomp_prog_load(t->seccomp);
  if (r < 0) {
    log_debug("processes: a worker cannot carry the seccomp filter (%s); its "
              "children load their own",
              strerror(-r));
    return;
  }
  thread_filter = t->seccomp;
}

int proc_wait_pid(struct proc_table *t, pid_t pid, int *status,
                  unsigned timeout_ms) {
  struct timespec until = sbx_deadline_in(CLOCK_REALTIME, timeout_ms);
  int r = 0;
  pthread_mutex_lock(&t->mu);
  wake(t);
  while (!stash_take(t, pid, status)) {
    int w = timeout_ms ? pthread_cond_timedwait(&t->reaped_cv, &t->mu, &until)
                       : pthread_cond_wait(&t->reaped_cv, &t->mu);
    if (w == ETIMEDOUT) {
      r = stash_take(t, pid, status) ? 0 : -ETIMEDOUT;
      break;
    }
  }
  pthread_mutex_unlock(&t->mu);
  return r;
}

/* ---- ExecStart -------------------------------------------------------- */

/* Everything a start needs, prepared before the child exists. */
struct start_plan {
  struct sbx_arena a; /* the strings and arrays below */
  char **argv;
  size_t argc;
  char **envp;
  size_t nenv;
  char **paths;
  const char *shell;
  char pwd[SBX_PATH_MAX * 2];
  int cwd_fd;
  bool set_ids;
  struct userdb_user user;
  const char *home;
  const char *user_name;
  size_t bytes; /* argv + environment, for the limit */
};

static void start_plan_done(struct start_plan *sp) {
  sbx_arena_reset(&sp->a);
  if (sp->cwd_fd >= 0)
    (void)close(sp->cwd_fd);
}

static bool env_name_valid(const char *s) {
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
    return false;
  for (s++; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
          (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

/* Accounts one argv or environment string against the limits. */
static int count_string(struct rpc_call *c, struct start_plan *sp,
                        const char *what, size_t len) {
  if (len > PROC_MAX_STRING)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "%s is too long (%zu bytes, at most %u)", what, len,
                    PROC_MAX_STRING);
  sp->bytes += len + 1;
  if (sp->bytes > PROC_MAX_EXEC_BYTES)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "arguments and environment exceed %u bytes",
                    PROC_MAX_EXEC_BYTES);
  return 0;
}

/* Sets NAME=VALUE in the environment being built, replacing an earlier
 * NAME. */
static int env_set(struct rpc_call *c, struct start_plan *sp, const char *name,
                   const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  int r = count_string(c, sp, "an environment variable", nl + 1 + vl);
  if (r < 0)
    return r;
  char *kv = sbx_arena_alloc_raw(&sp->a, nl + vl + 2);
  if (!kv)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  memcpy(kv, name, nl);
  kv[nl] = '=';
  memcpy(kv + nl + 1, value, vl + 1);
  for (size_t i = 0; i < sp->nenv; i++)
    if (strncmp(sp->envp[i], name, nl) == 0 && sp->envp[i][nl] == '=') {
      sp->envp[i] = kv;
      return 0;
    }
  sp->envp[sp->nenv++] = kv;
  return 0;
}

static const char *env_get(const struct start_plan *sp, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < sp->nenv; i++)
    if (strncmp(sp->envp[i], name, nl) == 0 && sp->envp[i][nl] == '=')
      return sp->envp[i] + nl + 1;
  return NULL;
}

/* The files to try for NAME: itself when it has a slash, else NAME in each
 * directory of PATH (an empty entry is the working directory). */
static int plan_paths(struct rpc_call *c, struct start_plan *sp,
                      const char *name) {
  sp->paths = sbx_arena_new_array(&sp->a, char *, PROC_MAX_PATH_DIRS + 1);
  if (!sp->paths)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  if (strchr(name, '/')) {
    sp->paths[0] = (char *)name;
    return 0;
  }
  const char *path = env_get(sp, "PATH");
  if (!path)
    path = "";
  size_t n = 0, nl = strlen(name);
  for (const char *p = path; n < PROC_MAX_PATH_DIRS;) {
    const char *end = strchrnul(p, ':');
    size_t dl = (size_t)(end - p);
    if (dl == 0) {
      p = ".";
      dl = 1;
    }
    if (dl + 1 + nl < PATH_MAX) {
      char *f = sbx_arena_alloc_raw(&sp->a, dl + nl + 2);
      if (!f)
        return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
      memcpy(f, p, dl);
      f[dl] = '/';
      memcpy(f + dl + 1, name, nl + 1);
      sp->paths[n++] = f;
    }
    if (!*end)
      break;
    p = end + 1;
  }
  if (n == 0)
    return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                    "exec \"%s\": not found (PATH is empty)", name);
  return 0;
}

static const char *default_shell(bool login) {
  if (login && access("/bin/bash", X_OK) == 0)
    return "/bin/bash";
  return "/bin/sh";
}

/* argv, from the request's argv or its command. */
static int plan_argv(struct rpc_call *c, struct start_plan *sp,
                     const Sbx__V1__ExecStart *st) {
  bool has_cmd = st->command && st->command[0];
  if ((st->n_argv > 0) == has_cmd)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "exec start needs exactly one of argv and command");
  sp->shell = st->shell && st->shell[0] ? st->shell : default_shell(st->login);
  if (has_cmd) {
    sp->argc = 3;
    sp->argv = sbx_arena_new_array(&sp->a, char *, 4);
    if (!sp->argv)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    sp->argv[0] = (char *)sp->shell;
    sp->argv[1] = st->login ? "-lc" : "-c";
    sp->argv[2] = st->command;
  } else {
    if (st->n_argv > PROC_MAX_ARGS)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "too many arguments (%zu, at most %u)", st->n_argv,
                      PROC_MAX_ARGS);
    if (!st->argv[0][0])
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "argv[0] is empty");
    sp->argc = st->n_argv;
    sp->argv = sbx_arena_new_array(&sp->a, char *, st->n_argv + 1);
    if (!sp->argv)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    memcpy(sp->argv, st->argv, st->n_argv * sizeof(char *));
  }
  for (size_t i = 0; i < sp->argc; i++) {
    int r = count_string(c, sp, "an argument", strlen(sp->argv[i]));
    if (r < 0)
      return r;
  }
  return 0;
}

/* The identity: run_as's, or sandboxd's own. */
static int plan_user(struct rpc_call *c, struct start_plan *sp,
                     const Sbx__V1__ExecStart *st) {
  struct proc_table *t = c->d->procs;
  sp->home = c->d->root;
  sp->user_name = t->self_name;
  if (!st->run_as || !st->run_as[0])
    return 0;
  int r = userdb_user(NULL, st->run_as, &sp->user);
  if (r == -ENOENT)
    return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "user \"%s\" not found",
                    st->run_as);
  if (r == -EINVAL)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "run_as \"%s\" is not a user name or uid", st->run_as);
  if (r < 0)
    return rpc_fail(c, SBX_OK, -r, "looking up user \"%s\": %s", st->run_as,
                    strerror(-r));
  if (!c->d->is_root) {
    if (sp->user.uid != c->d->uid)
      return rpc_fail(c, SBX_PERMISSION_DENIED, EPERM,
                      "run_as needs sandboxd to run as root");
  } else {
    sp->set_ids = true;
  }
  sp->user_name = sp->user.name;
  if (sp->user.home[0])
    sp->home = sp->user.home;
  return 0;
}

/* The working directory, opened beneath the root or a grant, and its
 * absolute path as the child sees it (PWD). */
static int plan_cwd(struct rpc_call *c, struct start_plan *sp,
                    const Sbx__V1__ExecStart *st) {
  const char *cwd = st->cwd ? st->cwd : "";
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, cwd, false, &loc, &c->err);
  if (r < 0)
    return r;
  r = sbxd_openat(loc.base_fd, loc.rel, O_RDONLY | O_DIRECTORY, 0, &c->err);
  if (r < 0) {
    if (r == -ENOENT || r == -ENOTDIR)
      return rpc_fail(c, SBX_OK, -r, "working directory \"%s\": %s", cwd,
                      strerror(-r));
    return r;
  }
  sp->cwd_fd = r;
  const char *base = loc.grant < 0 ? c->d->root : c->d->grants[loc.grant].path;
  bool at_base = strcmp(loc.rel, ".") == 0;
  bool slash = strcmp(base, "/") == 0;
  (void)snprintf(sp->pwd, sizeof(sp->pwd), "%s%s%s", base,
                 at_base || slash ? "" : "/", at_base ? "" : loc.rel);
  return 0;
}

/* The clean base environment plus the request's variables. */
static int plan_env(struct rpc_call *c, struct start_plan *sp,
                    const Sbx__V1__ExecStart *st) {
  if (st->n_env > PROC_MAX_ENV)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "too many environment variables (%zu, at most %u)",
                    st->n_env, PROC_MAX_ENV);
  sp->envp = sbx_arena_new_array(&sp->a, char *, st->n_env + 8 + 1);
  if (!sp->envp)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  const char *base[][2] = {
      {"PATH", PROC_BASE_PATH}, {"HOME", sp->home},
      {"LANG", "C.UTF-8"},      {"TERM", st->tty ? "xterm-256color" : "dumb"},
      {"USER", sp->user_name},  {"LOGNAME", sp->user_name},
      {"SHELL", sp->shell},     {"PWD", sp->pwd},
  };
  int r;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(base); i++)
    if ((r = env_set(c, sp, base[i][0], base[i][1])) < 0)
      return r;
  for (size_t i = 0; i < st->n_env; i++) {
    const Sbx__V1__EnvVar *v = st->env[i];
    const char *name = v && v->name ? v->name : "";
    if (!env_name_valid(name))
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "environment variable name \"%.64s\" is not valid "
                      "(letters, digits and _, not starting with a digit)",
                      name);
    if ((r = env_set(c, sp, name, v->value ? v->value : "")) < 0)
      return r;
  }
  return 0;
}

static void make_summary(const struct start_plan *sp,
                         const Sbx__V1__ExecStart *st, char *out) {
  char buf[PROC_SUMMARY_MAX + 8];
  size_t n = 0;
  buf[0] = '\0';
  if (st->command && st->command[0]) {
    (void)snprintf(buf, sizeof(buf), "%s", st->command);
  } else {
    for (size_t i = 0; i < sp->argc && n < sizeof(buf) - 1; i++) {
      int k =
          snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? " " : "", sp->argv[i]);
      n = k < 0 ? n : min_u64(n + (size_t)k, sizeof(buf) - 1);
    }
  }
  n = strlen(buf);
  if (n > PROC_SUMMARY_MAX) { /* cut before a character, not inside one */
    n = PROC_SUMMARY_MAX;
    while (n > 0 && ((unsigned char)buf[n] & 0xc0) == 0x80)
      n--;
    buf[n] = '\0';
  }
  for (char *p = buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = ' ';
  memcpy(out, buf, n + 1);
}

/* The fds of one start: the child's ends and ours. */
struct start_fds {
  int child_in, child_out, child_err; /* child_err may equal child_out */
  int out, err, in;                   /* ours; -1 when absent */
};

static void start_fds_close(struct start_fds *f) {
  int *all[] = {&f->child_in, &f->child_out, &f->child_err,
                &f->out,      &f->err,       &f->in};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(all); i++) {
    if (*all[i] < 0)
      continue;
    for (size_t j = i + 1; j < SBX_ARRAY_SIZE(all); j++)
      if (*all[j] == *all[i])
        *all[j] = -1;
    (void)close(*all[i]);
    *all[i] = -1;
  }
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -errno;
  return 0;
}

/* A pipe with both ends above 2: [0] read, [1] write; O_CLOEXEC. */
static int make_pipe(int p[2]) {
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  for (int i = 0; i < 2; i++) {
    int fd = launch_fd_above_stdio(p[i]);
    if (fd < 0) {
      if (i == 0)
        (void)close(p[1]);
      else
        (void)close(p[0]);
      return fd;
    }
    p[i] = fd;
  }
  return 0;
}

static int open_fds(struct rpc_call *c, const Sbx__V1__ExecStart *st,
                    struct start_fds *f) {
  int r;
  if (st->tty) {
    if (st->rows > 65535 || st->cols > 65535)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "terminal size %ux%u is too large", st->rows, st->cols);
    int m, s;
    if ((r = tty_open(st->rows, st->cols, &m, &s)) < 0)
      return rpc_fail(c, SBX_OK, -r, "opening a terminal: %s", strerror(-r));
    f->out = m;
    if ((s = launch_fd_above_stdio(s)) < 0)
      return rpc_fail(c, SBX_OK, -s, "opening a terminal: %s", strerror(-s));
    f->child_in = f->child_out = f->child_err = s;
    return 0;
  }
  int p[2];
  if ((r = make_pipe(p)) < 0)
    return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
  f->out = p[0];
  f->child_out = p[1];
  if (st->stderr_to_stdout) {
    f->child_err = f->child_out;
  } else {
    if ((r = make_pipe(p)) < 0)
      return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
    f->err = p[0];
    f->child_err = p[1];
  }
  if (st->no_stdin) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      /* No /dev/null in this sandbox: a pipe nobody writes to is as
       * empty. */
      if ((r = make_pipe(p)) < 0)
        return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
      (void)close(p[1]);
      fd = p[0];
    }
    if ((fd = launch_fd_above_stdio(fd)) < 0)
      return rpc_fail(c, SBX_OK, -fd, "opening /dev/null: %s", strerror(-fd));
    f->child_in = fd;
  } else {
    if ((r = make_pipe(p)) < 0)
      return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
    f->child_in = p[0];
    f->in = p[1];
  }
  int ours[] = {f->out, f->err, f->in};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ours); i++)
    if (ours[i] >= 0 && (r = set_nonblock(ours[i])) < 0)
      return rpc_fail(c, SBX_OK, -r, "pipe: %s", strerror(-r));
  return 0;
}

/* Reserves a slot for one more record, pruning a finished one if the table
 * is full. Locked. */
static int reserve_slot(struct proc_table *t, struct rpc_call *c,
                        struct waiter **done) {
  if (t->closing)
    return rpc_fail(c, SBX_UNAVAILABLE, ESHUTDOWN, "sandboxd is shutting down");
  while (t->nprocs + t->starting >= t->cap) {
    struct proc *victim = t->nprocs > 0 ? prune_victim(t) : NULL;
    if (!victim)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, EAGAIN,
                      "too many processes: all %u are running "
                      "(max_processes)",
                      t->d->limits.max_processes);
    log_debug("exec %" PRIu64 ": pruned to make room", victim->id);
    proc_destroy(t, victim, done);
  }
  t->starting++;
  return 0;
}

/* Inserts the started process; returns its record or NULL (then the group
 * was killed). Locked. */
static struct proc *insert(struct proc_table *t, struct rpc_call *c,
                           const Sbx__V1__ExecStart *st,
                           const struct start_plan *sp, struct start_fds *f,
                           pid_t pid, int pidfd) {
  struct proc *p = calloc(1, sizeof(*p));
  if (!p) {
    if (pidfd >= 0)
      (void)close(pidfd);
    (void)kill(-pid, SIGKILL);
    (void)rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    return NULL;
  }
  p->id = t->next_id;
  p->pid = pid;
  p->tty = st->tty;
  p->running = true;
  p->started_ms = sbx_wall_ms();
  p->used = ++t->tick;
  if (st->timeout_ms)
    p->term_at_ms = sbx_now_ms() + st->timeout_ms;
  make_summary(sp, st, p->summary);
  sbx_buf_init(&p->inq, PROC_STDIN_MAX);
  for (int i = 0; i < 2; i++)
    outbuf_init(&p->out[i].buf, t->d->limits.retention_head,
                t->d->limits.retention_tail);
  p->out[K_STDOUT].fd = -1;
  p->out[K_STDERR].fd = -1;
  p->in_fd = -1;
  p->pty_hold = -1;
  p->pidfd = -1;
  int r = ep_set(t, EPOLL_CTL_ADD, f->out, EPOLLIN, KEY(p->id, K_STDOUT));
  if (r == 0 && f->err >= 0) {
    r = ep_set(t, EPOLL_CTL_ADD, f->err, EPOLLIN, KEY(p->id, K_STDERR));
    if (r < 0)
      ep_del(t, f->out);
  }
  if (r < 0) {
    if (pidfd >= 0)
      (void)close(pidfd);
    (void)kill(-pid, SIGKILL);
    free(p);
    (void)rpc_fail(c, SBX_OK, -r, "watching the output of \"%s\": %s",
                   sp->argv[0], strerror(-r));
    return NULL;
  }
  p->out[K_STDOUT].fd = TAKE_FD(f->out);
  p->out[K_STDERR].fd = TAKE_FD(f->err);
  p->in_fd = TAKE_FD(f->in);
  /* The exit shows on the pidfd even where SIGCHLD goes astray (a thread
   * that does not block it); the signalfd still reaps orphans. */
  if (pidfd >= 0 &&
      ep_set(t, EPOLL_CTL_ADD, pidfd, EPOLLIN, KEY(p->id, K_EXIT)) == 0)
    p->pidfd = pidfd;
  else if (pidfd >= 0)
    (void)close(pidfd);
  t->next_id++;
  t->procs[t->nprocs++] = p;
  int status;
  if (stash_take(t, pid, &status)) /* it was quicker than us */
    on_exit_status(t, p, status);
  return p;
}

/* The largest data chunk a read may return. */
static uint32_t read_cap(const struct sandboxd *d, uint32_t asked) {
  uint64_t cap = d->limits.max_read_bytes;
  /* Room for the rest of the reply within a message. */
  if (d->limits.max_message_bytes > 4096)
    cap = min_u64(cap, d->limits.max_message_bytes - 4096);
  if (asked > 0)
    cap = min_u64(cap, asked);
  return (uint32_t)(cap > 0 ? cap : 1);
}

/* Answers W's read of P at once when it is ready or WAIT_MS is 0, else
 * parks it: RPC_PENDING, and W's call is the process thread's. */
static int read_or_park(struct proc_table *t, struct proc *p,
                        const struct waiter *w, uint32_t wait_ms) {
  struct rpc_call *c = w->c;
  if (wait_ms == 0 || read_ready(p, w) || t->closing)
    return fill_read(p, w, c);
  if (p->nwaiters >= PROC_MAX_WAITERS)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, EAGAIN,
                    "too many reads are waiting on exec %" PRIu64 " (%u)",
                    p->id, PROC_MAX_WAITERS);
  struct waiter *wp = malloc(sizeof(*wp));
  if (!wp)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  *wp = *w;
  wp->next = p->waiters;
  p->waiters = wp;
  p->nwaiters++;
  /* Data, exit and closed output wake the thread; the deadline may not. */
  wake_by(t, wp->deadline_ms);
  return RPC_PENDING;
}

int rpc_exec_start(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return rpc_fail(c, SBX_UNAVAILABLE, EAGAIN, "processes are not available");
  const Sbx__V1__ExecStart *st = RPC_BODY(c, EXEC_START, exec_start);
  if (!st)
    return rpc_no_body(c);

  _cleanup_(start_plan_done) struct start_plan sp = {.cwd_fd = -1};
  int r;
  if ((r = plan_argv(c, &sp, st)) < 0 || (r = plan_user(c, &sp, st)) < 0 ||
      (r = plan_cwd(c, &sp, st)) < 0 || (r = plan_env(c, &sp, st)) < 0 ||
      (r = plan_paths(c, &sp, sp.argv[0])) < 0)
    return r;
  Sbx__V1__ExecStartReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__ExecStartReply);
  if (!reply)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  sbx__v1__exec_start_reply__init(reply);

  _cleanup_(start_fds_close) struct start_fds f = {-1, -1, -1, -1, -1, -1};
  if ((r = open_fds(c, st, &f)) < 0)
    return r;

  struct waiter *done = NULL;
  pthread_mutex_lock(&t->mu);
  r = reserve_slot(t, c, &done);
  pthread_mutex_unlock(&t->mu);
  complete_waiters(done);
  if (r < 0)
    return r;

  struct launch_plan plan = {
      .name = sp.argv[0],
      .argv = sp.argv,
      .paths = sp.paths,
      .envp = sp.envp,
      .cwd_fd = sp.cwd_fd,
      .fd_in = f.child_in,
      .fd_out = f.child_out,
      .fd_err = f.child_err,
      .tty = st->tty,
      .set_ids = sp.set_ids,
      .uid = sp.user.uid,
      .gid = sp.user.gid,
      .groups = sp.user.groups,
      .ngroups = sp.user.ngroups,
      /* Inherited when this thread carries it already. */
      .seccomp = thread_filter == t->seccomp ? NULL : t->seccomp,
  };
  pid_t pid = -1;
  int pidfd = -1;
  r = launch_start(&plan, &pid, &pidfd, &c->err);

  pthread_mutex_lock(&t->mu);
  t->starting--;
  if (r == 0 && t->closing) {
    /* The table shut down while this one started: it must not outlive
     * the kill. The thread reaps it. */
    (void)kill(-pid, SIGKILL);
    if (pidfd >= 0)
      (void)close(pidfd);
    r = rpc_fail(c, SBX_UNAVAILABLE, ESHUTDOWN, "sandboxd is shutting down");
  }
  struct proc *p = r < 0 ? NULL : insert(t, c, st, &sp, &f, pid, pidfd);
  if (p) {
    reply->exec_id = p->id;
    reply->pid = pid;
    /* Its exit wakes the thread through the pidfd (or SIGCHLD); its
     * deadlines, and the reaping poll without a pidfd, may need a wake. */
    uint64_t due =
        p->pidfd >= 0 ? UINT64_MAX : sbx_now_ms() + PROC_REAP_POLL_MS;
    if (p->term_at_ms)
      due = min_u64(due, p->term_at_ms);
    wake_by(t, due);
    log_debug("exec %" PRIu64 ": started \"%s\" as pid %d", p->id, sp.argv[0],
              (int)pid);
    if (st->wait_ms > 0) {
      /* The reply, output and all, must stay small enough to be kept for
       * a retry: a retried start must not run the command twice. */
      struct waiter w = {
          .c = c,
          .stream = K_STDOUT,
          .max = (uint32_t)min_u64(read_cap(c->d, st->max_bytes),
                                   RPC_CACHE_REPLY_MAX - 4096),
          .until_exit = true,
          .saw_running = true,
          .deadline_ms = sbx_now_ms() + st->wait_ms,
          .start = reply,
      };
      /* Once parked, C is the thread's: touch nothing after unlocking. */
      r = read_or_park(t, p, &w, st->wait_ms);
      pthread_mutex_unlock(&t->mu);
      return r;
    }
  }
  pthread_mutex_unlock(&t->mu);
  if (r < 0)
    return r;
  if (!p)
    return -EIO;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_START;
  c->resp->exec_start = reply;
  return 0;
}

/* ---- the other RPCs --------------------------------------------------- */

static int no_table(struct rpc_call *c) {
  return rpc_fail(c, SBX_UNAVAILABLE, EAGAIN, "processes are not available");
}

static int not_found(struct rpc_call *c, uint64_t id) {
  return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "exec %" PRIu64 " not found", id);
}

/* Locked part of ExecRead: answers, or parks C (RPC_PENDING). */
static int exec_read_locked(struct proc_table *t, struct rpc_call *c,
                            const Sbx__V1__ExecRead *rq) {
  struct proc *p = find(t, rq->exec_id);
  if (!p)
    return not_found(c, rq->exec_id);
  if (rq->stream != SBX__V1__STREAM__STDOUT &&
      rq->stream != SBX__V1__STREAM__STDERR)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown stream %d",
                    (int)rq->stream);
  int stream = rq->stream == SBX__V1__STREAM__STDOUT ? K_STDOUT : K_STDERR;
  if (p->tty && stream == K_STDERR)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "exec %" PRIu64 " has a terminal: all its output is on "
                    "stdout",
                    p->id);
  const struct stream *s = &p->out[stream];
  if (rq->offset > s->buf.total)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the end of %s of exec %" PRIu64
                    " (%" PRIu64 " bytes)",
                    rq->offset, stream == K_STDOUT ? "stdout" : "stderr", p->id,
                    s->buf.total);
  p->used = ++t->tick;
  struct waiter w = {
      .c = c,
      .stream = stream,
      .offset = rq->offset,
      .max = read_cap(c->d, rq->max_bytes),
      .until_exit = rq->until_exit,
      .saw_running = p->running,
      .deadline_ms = sbx_now_ms() + rq->wait_ms,
  };
  return read_or_park(t, p, &w, rq->wait_ms);
}

int rpc_exec_read(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  const Sbx__V1__ExecRead *rq = RPC_BODY(c, EXEC_READ, exec_read);
  if (!rq)
    return rpc_no_body(c);
  pthread_mutex_lock(&t->mu);
  /* Once parked (RPC_PENDING), C is the thread's: it may complete it as
   * soon as the lock is released. */
  int r = exec_read_locked(t, c, rq);
  pthread_mutex_unlock(&t->mu);
  return r;
}

static int exec_write_locked(struct proc_table *t, struct rpc_call *c,
                             const Sbx__V1__ExecWrite *rq) {
  struct proc *p = find(t, rq->exec_id);
  if (!p)
    return not_found(c, rq->exec_id);
  p->used = ++t->tick;
  if (!p->running)
    return rpc_fail(c, SBX_CONFLICT, EPIPE, "exec %" PRIu64 " has exited",
                    p->id);
  if (p->tty && rq->close)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "exec %" PRIu64 " has a terminal: write \\x04 (Ctrl-D) to "
                    "end its input instead of closing it",
                    p->id);
  if (!stdin_open(p) || p->in_close)
    return rpc_fail(c, SBX_CONFLICT, EPIPE,
                    "stdin of exec %" PRIu64 " is closed", p->id);
  size_t len = rq->data.len;
  if (len > 0) {
    if (p->inq.len - p->in_pos + len > PROC_STDIN_MAX)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, ENOBUFS,
                      "stdin of exec %" PRIu64 " has %zu bytes waiting; "
                      "%zu more would pass %u",
                      p->id, p->inq.len - p->in_pos, len, PROC_STDIN_MAX);
    if (p->in_pos > 0 && p->in_pos == p->inq.len) {
      sbx_buf_reset(&p->inq);
      p->in_pos = 0;
    }
    if (p->in_pos > 0 && p->inq.len + len > PROC_STDIN_MAX) {
      sbx_buf_consume(&p->inq, p->in_pos);
      p->in_pos = 0;
    }
    int r = sbx_buf_append(&p->inq, rq->data.data, len);
    if (r < 0)
      return rpc_fail(c, SBX_OK, -r, "stdin of exec %" PRIu64 ": %s", p->id,
                      strerror(-r));
  }
  if (rq->close)
    p->in_close = true;
  stdin_flush(t, p); /* whatever the pipe takes now; the thread does the rest */
  Sbx__V1__ExecWriteReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__ExecWriteReply);
  if (!reply)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  sbx__v1__exec_write_reply__init(reply);
  reply->written = len;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_WRITE;
  c->resp->exec_write = reply;
  return 0;
}

int rpc_exec_write(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  const Sbx__V1__ExecWrite *rq = RPC_BODY(c, EXEC_WRITE, exec_write);
  if (!rq)
    return rpc_no_body(c);
  pthread_mutex_lock(&t->mu);
  int r = exec_write_locked(t, c, rq);
  pthread_mutex_unlock(&t->mu);
  return r;
}

static int exec_signal_locked(struct proc_table *t, struct rpc_call *c,
                              const Sbx__V1__ExecSignal *rq) {
  struct proc *p = find(t, rq->exec_id);
  if (!p)
    return not_found(c, rq->exec_id);
  if (rq->signal <= 0 || rq->signal >= NSIG)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "signal %d is not a signal number", rq->signal);
  p->used = ++t->tick;
  /* Once reaped, the pid may belong to someone else; the group may still
   * hold background children while the output is open. */
  if (!p->running && (!rq->group || all_output_closed(p)))
    return rpc_fail(c, SBX_CONFLICT, ESRCH, "exec %" PRIu64 " has exited",
                    p->id);
  if (kill(rq->group ? -p->pid : p->pid, rq->signal) < 0)
    return rpc_fail(c, errno == ESRCH ? SBX_CONFLICT : SBX_OK, errno,
                    "signal %d to exec %" PRIu64 ": %s", rq->signal, p->id,
                    strerror(errno));
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_EXEC_SIGNAL);
}

int rpc_exec_signal(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  const Sbx__V1__ExecSignal *rq = RPC_BODY(c, EXEC_SIGNAL, exec_signal);
  if (!rq)
    return rpc_no_body(c);
  pthread_mutex_lock(&t->mu);
  int r = exec_signal_locked(t, c, rq);
  pthread_mutex_unlock(&t->mu);
  return r;
}

static int exec_resize_locked(struct proc_table *t, struct rpc_call *c,
                              const Sbx__V1__ExecResize *rq) {
  struct proc *p = find(t, rq->exec_id);
  if (!p)
    return not_found(c, rq->exec_id);
  if (!p->tty)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, ENOTTY,
                    "exec %" PRIu64 " has no terminal to resize", p->id);
  if (rq->rows == 0 || rq->cols == 0 || rq->rows > 65535 || rq->cols > 65535)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "terminal size %ux%u is not valid", rq->rows, rq->cols);
  p->used = ++t->tick;
  if (p->out[K_STDOUT].fd < 0)
    return rpc_fail(c, SBX_CONFLICT, EIO,
                    "the terminal of exec %" PRIu64 " is closed", p->id);
  int r = tty_resize(p->out[K_STDOUT].fd, rq->rows, rq->cols);
  if (r < 0)
    return rpc_fail(c, SBX_OK, -r,
                    "resizing the terminal of exec %" PRIu64 ": %s", p->id,
                    strerror(-r));
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_EXEC_RESIZE);
}

int rpc_exec_resize(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  const Sbx__V1__ExecResize *rq = RPC_BODY(c, EXEC_RESIZE, exec_resize);
  if (!rq)
    return rpc_no_body(c);
  pthread_mutex_lock(&t->mu);
  int r = exec_resize_locked(t, c, rq);
  pthread_mutex_unlock(&t->mu);
  return r;
}

static int exec_list_locked(struct proc_table *t, struct rpc_call *c) {
  Sbx__V1__ExecListReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__ExecListReply);
  if (!reply)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  sbx__v1__exec_list_reply__init(reply);
  size_t n = min_u64(t->nprocs, c->d->limits.max_list_entries);
  if (n > 0) {
    reply->execs = sbx_arena_new_array(&c->arena, Sbx__V1__ExecInfo *, n);
    Sbx__V1__ExecInfo *infos =
        sbx_arena_new_array(&c->arena, Sbx__V1__ExecInfo, n);
    if (!reply->execs || !infos)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
      const struct proc *p = t->procs[i];
      Sbx__V1__ExecInfo *e = &infos[i];
      sbx__v1__exec_info__init(e);
      e->exec_id = p->id;
      e->pid = p->pid;
      e->tty = p->tty;
      e->running = p->running;
      if (!p->running) {
        e->signal = WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0;
        e->exit_code = e->signal ? 128 + e->signal : WEXITSTATUS(p->status);
      }
      e->stdout_bytes = p->out[K_STDOUT].buf.total;
      e->stderr_bytes = p->out[K_STDERR].buf.total;
      e->started_unix_ms = p->started_ms;
      e->summary = sbx_arena_strdup(&c->arena, p->summary);
      if (!e->summary)
        return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
      reply->execs[i] = e;
    }
    reply->n_execs = n;
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_LIST;
  c->resp->exec_list = reply;
  return 0;
}

int rpc_exec_list(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  pthread_mutex_lock(&t->mu);
  int r = exec_list_locked(t, c);
  pthread_mutex_unlock(&t->mu);
  return r;
}

int rpc_exec_release(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return no_table(c);
  const Sbx__V1__ExecRelease *rq = RPC_BODY(c, EXEC_RELEASE, exec_release);
  if (!rq)
    return rpc_no_body(c);
  struct waiter *done = NULL;
  int r;
  pthread_mutex_lock(&t->mu);
  struct proc *p = find(t, rq->exec_id);
  if (!p)
    r = not_found(c, rq->exec_id);
  else if (p->running)
    r = rpc_fail(c, SBX_CONFLICT, EBUSY,
                 "exec %" PRIu64 " is still running: signal it first", p->id);
  else {
    proc_destroy(t, p, &done);
    r = rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_EXEC_RELEASE);
  }
  pthread_mutex_unlock(&t->mu);
  complete_waiters(done);
  return r;
}
