/* Processes: the table and its epoll thread. The thread reads output,
 * writes queued stdin, reaps every child of sandboxd, fires timeouts and
 * completes the parked reads that became ready; the table's records are
 * made by ExecStart (exec_start.c) and forgotten here. */
#include <errno.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/proc/proc_internal.h"
#include "sandboxd/seccomp/seccomp_filter.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define PROC_KEEP_RECENT 8          /* records pruning spares */
#define PROC_KILL_AFTER_MS 2000     /* TERM, then KILL this much later */
#define PROC_READ_BUDGET (1u << 20) /* per fd and wakeup, for fairness */
#define PROC_KILL_REAP_MS 1000      /* after KILL, wait this long for reaping */

/* The filter this thread already carries for its children (see
 * proc_thread_init). */
__thread const struct seccomp_prog *proc_thread_filter;

/* ---- records ---------------------------------------------------------- */

/* The record of the running process PID, or NULL: the ids are the
 * table's order, pids are not. Locked. */
static struct proc *find_running_pid(struct proc_table *t, pid_t pid) {
  for (size_t i = 0; i < t->nprocs; i++)
    if (t->procs[i]->running && t->procs[i]->pid == pid)
      return t->procs[i];
  return NULL;
}

/* The exit is known: the pidfd has done its job. */
static void pidfd_release(struct proc_table *t, struct proc *p) {
  if (p->pidfd < 0)
    return;
  proc_ep_del(t, p->pidfd);
  (void)close(p->pidfd);
  p->pidfd = -1;
}

/* Closes the PTY master kept open after its EOF: the process is reaped. */
static void pty_release(struct proc *p) {
  if (p->pty_hold >= 0)
    (void)close(p->pty_hold);
  p->pty_hold = -1;
}

/* Forgets P: completes its parked reads (into *DONE), closes its fds and
 * frees it. The process must have been reaped. */
void proc_destroy(struct proc_table *t, struct proc *p, struct waiter **done) {
  proc_service_waiters(p, 0, true, done);
  proc_stdin_close(t, p);
  for (int i = 0; i < 2; i++) {
    proc_stream_close(t, p, i);
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

/* Reserves a slot for one more record, pruning a finished one if the table
 * is full. Locked. */
int proc_reserve_slot(struct proc_table *t, struct rpc_call *c,
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

/* P's process has ended with STATUS: take the output it left in the pipes,
 * and close stdin (a pipe nobody will read). */
void proc_on_exit(struct proc_table *t, struct proc *p, int status) {
  p->running = false;
  p->status = status;
  for (int i = 0; i < 2; i++)
    proc_stream_drain(t, p, i, SIZE_MAX);
  pty_release(p);
  pidfd_release(t, p);
  if (!p->tty)
    proc_stdin_close(t, p);
}

/* ---- the thread ------------------------------------------------------- */

/* Keeps the status of the reaped child PID, which no record claims yet,
 * dropping the oldest when the stash is full; wakes proc_wait_pid. */
static void stash_put(struct proc_table *t, pid_t pid, int status) {
  if (t->nstash == PROC_STASH) {
    memmove(&t->stash[0], &t->stash[1], (PROC_STASH - 1) * sizeof(t->stash[0]));
    t->nstash--;
  }
  t->stash[t->nstash++] = (struct reaped){pid, status};
  pthread_cond_broadcast(&t->reaped_cv);
}

/* Takes PID's status out of the stash: true if it was there. Locked. */
bool proc_stash_take(struct proc_table *t, pid_t pid, int *status) {
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
      proc_on_exit(t, p, status);
    else
      stash_put(t, pid, status);
  }
}

/* Sends SIG to P's process group; false when the group is gone. */
static bool signal_group(struct proc *p, int sig) {
  return kill(-p->pid, sig) == 0;
}

/* Timeouts due by NOW: TERM the group, then KILL it PROC_KILL_AFTER_MS
 * later. Locked. */
static void fire_deadlines(struct proc_table *t, uint64_t now) {
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->term_at_ms && now >= p->term_at_ms) {
      p->term_at_ms = 0;
      /* The group outlives its leader while a background child holds the
       * output open: the timeout is for all of it. */
      if (p->running || !proc_output_closed(p)) {
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

/* epoll_wait's timeout: the nearest deadline, or -1. On the way, streams
 * whose reader stopped reading for their hold_ms are read on. */
static int next_timeout(struct proc_table *t, uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    if (p->running)
      next = proc_min_u64(next, now + PROC_REAP_POLL_MS);
    if (p->term_at_ms)
      next = proc_min_u64(next, p->term_at_ms);
    if (p->kill_at_ms)
      next = proc_min_u64(next, p->kill_at_ms);
    for (struct waiter *w = p->waiters; w; w = w->next)
      next = proc_min_u64(next, w->deadline_ms);
    if (p->hold_ms)
      proc_stream_hold_expire(t, p, now, &next);
  }
  if (next == UINT64_MAX)
    return -1;
  if (next <= now)
    return 0;
  return (int)proc_min_u64(next - now, INT_MAX);
}

/* Returns true when the event says a child exited (reap then). */
static bool on_event(struct proc_table *t, uint64_t key, uint32_t events) {
  struct proc *p = proc_find(t, key >> 3);
  if (!p)
    return false; /* released meanwhile */
  int kind = (int)(key & 7);
  if (kind == K_EXIT)
    return true;
  if (kind == K_STDIN || (p->tty && (events & (EPOLLOUT | EPOLLERR))))
    proc_stdin_flush(t, p);
  if ((kind == K_STDOUT || kind == K_STDERR) &&
      (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
    proc_stream_drain(t, p, kind, PROC_READ_BUDGET);
  return false;
}

/* Empties the eventfd or the signalfd FD (non-blocking). */
static void drain_fd(int fd) {
  unsigned char buf[sizeof(struct signalfd_siginfo) * 8];
  while (read(fd, buf, sizeof(buf)) > 0)
    ;
}

/* The table's thread: sleeps in epoll_wait until an fd event, a wake-up
 * or the nearest deadline, then does the work that came due and completes
 * the reads that became ready. */
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
        proc_service_waiters(t->procs[i], now, false, &done);
    if (done) {
      t->completing = true;
      pthread_mutex_unlock(&t->mu);
      proc_complete_waiters(done);
      pthread_mutex_lock(&t->mu);
      t->completing = false;
      pthread_cond_broadcast(&t->idle_cv);
    }
  }
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

/* ---- table ------------------------------------------------------------ */

/* Frees T and what proc_table_new made; the thread is not running. */
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
  if ((r = proc_ep_set(t, EPOLL_CTL_ADD, t->evfd, EPOLLIN, KEY_WAKE)) < 0 ||
      (r = proc_ep_set(t, EPOLL_CTL_ADD, t->sigfd, EPOLLIN, KEY_SIGCHLD)) < 0)
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
    if (p->running || (!proc_output_closed(p) && signal_group(p, 0)))
      return true;
  }
  return false;
}

/* Sends SIG to every group that may still run. Locked. */
static void signal_all(struct proc_table *t, int sig) {
  for (size_t i = 0; i < t->nprocs; i++) {
    struct proc *p = t->procs[i];
    /* A finished record's group may live on in a background child that
     * still holds the output open. */
    if (p->running || !proc_output_closed(p))
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
    proc_wake(t); /* reap now rather than at the next poll */
    (void)nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  }
}

void proc_kill_all(struct proc_table *t, unsigned grace_ms) {
  if (!t)
    return;
  pthread_mutex_lock(&t->mu);
  /* Nobody is to read what they still write: let it go, so that their
   * output ends. */
  for (size_t i = 0; i < t->nprocs; i++)
    proc_stream_unhold(t, t->procs[i]);
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
    proc_service_waiters(t->procs[i], 0, true, &done);
  /* Reads the thread took off the table before are answered too. */
  while (t->completing)
    pthread_cond_wait(&t->idle_cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
  proc_complete_waiters(done);
}

void proc_table_free(struct proc_table *t, unsigned grace_ms) {
  if (!t)
    return;
  proc_table_shutdown(t, grace_ms);
  pthread_mutex_lock(&t->mu);
  t->stop = true;
  pthread_mutex_unlock(&t->mu);
  proc_wake(t);
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
  proc_complete_waiters(done);
  table_close(t);
}

void proc_thread_init(struct proc_table *t) {
  if (!t || !t->seccomp || proc_thread_filter == t->seccomp)
    return;
  int r = seccomp_prog_load(t->seccomp);
  if (r < 0) {
    log_debug("processes: a worker cannot carry the seccomp filter (%s); its "
              "children load their own",
              strerror(-r));
    return;
  }
  proc_thread_filter = t->seccomp;
}

int proc_wait_pid(struct proc_table *t, pid_t pid, int *status,
                  unsigned timeout_ms) {
  struct timespec until = sbx_deadline_in(CLOCK_REALTIME, timeout_ms);
  int r = 0;
  pthread_mutex_lock(&t->mu);
  proc_wake(t);
  while (!proc_stash_take(t, pid, status)) {
    int w = timeout_ms ? pthread_cond_timedwait(&t->reaped_cv, &t->mu, &until)
                       : pthread_cond_wait(&t->reaped_cv, &t->mu);
    if (w == ETIMEDOUT) {
      r = proc_stash_take(t, pid, status) ? 0 : -ETIMEDOUT;
      break;
    }
  }
  pthread_mutex_unlock(&t->mu);
  return r;
}
