/* Output: each stream's pipe (or PTY master) read into its buffer as the
 * thread sees it readable, and ExecRead answered at once when there is data
 * at its offset (or the stream closed, or the process exited), else parked
 * until there is or its wait ends. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/proc/proc_internal.h"
#include "shared/clock.h"
#include "shared/log.h"

/* Closes P's output stream I and stops watching it. */
void proc_stream_close(struct proc_table *t, struct proc *p, int i) {
  struct stream *s = &p->out[i];
  if (s->fd < 0)
    return;
  if (!s->paused)
    proc_ep_del(t, s->fd);
  s->paused = false;
  if (p->tty && i == K_STDOUT) {
    proc_stdin_close(t, p); /* the master was the input too */
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

/* ---- holding the output for its reader (ExecStart.hold_ms) ---- */

bool proc_stream_held(const struct proc *p, const struct stream *s,
                      uint64_t now) {
  return p->hold_ms && now - s->read_ms < p->hold_ms;
}

/* How many more bytes S may take before the part its reader has not asked
 * for would outgrow what the buffer keeps (the head and the ring). */
static uint64_t hold_room(const struct stream *s) {
  uint64_t from =
      s->reader_off > s->buf.head_max ? s->reader_off : s->buf.head_max;
  uint64_t unread = s->buf.total > from ? s->buf.total - from : 0;
  return unread >= s->buf.tail_max ? 0 : s->buf.tail_max - unread;
}

int proc_stream_watch(struct proc_table *t, struct proc *p, int i) {
  const struct stream *s = &p->out[i];
  if (s->fd < 0 || s->paused)
    return 0;
  uint32_t ev = EPOLLIN;
  if (p->tty && i == K_STDOUT && p->in_armed)
    ev |= EPOLLOUT;
  return proc_ep_set(t, EPOLL_CTL_MOD, s->fd, ev, KEY(p->id, i));
}

/* Stops reading stream I of P: its fd leaves the epoll set (the EPOLLHUP
 * of a closed writer would wake the thread again and again). */
static void stream_pause(struct proc_table *t, struct proc *p, int i) {
  struct stream *s = &p->out[i];
  if (s->paused || s->fd < 0)
    return;
  proc_ep_del(t, s->fd);
  s->paused = true;
}

/* Reads stream I of P again after a pause: its fd back in the epoll set,
 * where what is waiting in the pipe wakes the thread at once. */
static void stream_resume(struct proc_table *t, struct proc *p, int i) {
  struct stream *s = &p->out[i];
  if (!s->paused)
    return;
  s->paused = false;
  if (s->fd < 0)
    return;
  uint32_t ev = EPOLLIN;
  if (p->tty && i == K_STDOUT && p->in_armed)
    ev |= EPOLLOUT;
  int r = proc_ep_set(t, EPOLL_CTL_ADD, s->fd, ev, KEY(p->id, i));
  if (r < 0) {
    /* Not watched, the stream would never end: read it to its end now,
     * dropping what the buffer cannot keep. */
    log_error("exec %" PRIu64 ": watching its output again: %s", p->id,
              strerror(-r));
    p->hold_ms = 0;
    proc_stream_drain(t, p, i, SIZE_MAX);
  }
}

void proc_stream_reader_at(struct proc_table *t, struct proc *p, int i,
                           uint64_t offset, uint64_t now) {
  struct stream *s = &p->out[i];
  if (offset > s->reader_off)
    s->reader_off = offset;
  s->read_ms = now;
  if (s->paused && hold_room(s) > 0)
    stream_resume(t, p, i);
}

void proc_stream_unhold(struct proc_table *t, struct proc *p) {
  p->hold_ms = 0;
  for (int i = 0; i < 2; i++)
    stream_resume(t, p, i);
}

void proc_stream_hold_expire(struct proc_table *t, struct proc *p, uint64_t now,
                             uint64_t *next) {
  for (int i = 0; i < 2; i++) {
    struct stream *s = &p->out[i];
    if (!s->paused)
      continue;
    if (!proc_stream_held(p, s, now))
      stream_resume(t, p, i);
    else if (s->read_ms + p->hold_ms < *next)
      *next = s->read_ms + p->hold_ms;
  }
}

/* Reads what stream I has now, up to BUDGET bytes; closes it at EOF. A PTY
 * master reports EIO once every slave fd is closed: that is its EOF. A
 * held stream is read only as far as its reader leaves room, then
 * paused. */
void proc_stream_drain(struct proc_table *t, struct proc *p, int i,
                       size_t budget) {
  struct stream *s = &p->out[i];
  size_t got = 0;
  uint64_t now = p->hold_ms ? sbx_now_ms() : 0;
  while (s->fd >= 0 && !s->paused && got < budget) {
    size_t want = sizeof(t->rbuf);
    if (p->hold_ms && proc_stream_held(p, s, now)) {
      uint64_t room = hold_room(s);
      if (room == 0) {
        stream_pause(t, p, i);
        return;
      }
      if (room < want)
        want = (size_t)room;
    }
    ssize_t n = read(s->fd, t->rbuf, want);
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
    proc_stream_close(t, p, i);
  }
}

/* Whether W's read of P can be answered now. */
static bool read_ready(const struct proc *p, const struct waiter *w) {
  const struct stream *s = &p->out[w->stream];
  uint64_t start;
  uint64_t avail = outbuf_avail(&s->buf, w->offset, &start);
  /* A paused stream gets no further until its reader reads. */
  if (w->until_exit)
    return (!p->running && proc_output_closed(p)) || avail >= w->max ||
           (s->paused && avail > 0);
  /* The exit answers reads that were waiting for it; a later read of a
   * finished process whose output a background child holds open waits for
   * data like any other, rather than answering empty at once forever. A
   * stream that closed before its process exited has nothing more to say
   * but the exit, so a read waits for that (or its deadline) rather than
   * answering empty at once, which would have its reader spin. */
  return avail > 0 || (s->fd < 0 && !p->running) ||
         (w->saw_running && !p->running);
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
  size_t n =
      (size_t)proc_min_u64(outbuf_avail(&s->buf, w->offset, &start), w->max);
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
void proc_service_waiters(struct proc *p, uint64_t now, bool all,
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
void proc_complete_waiters(struct waiter *done) {
  while (done) {
    struct waiter *next = done->next;
    rpc_complete(done->c, done->rc);
    free(done);
    done = next;
  }
}

/* Answers W's read of P at once when it is ready or WAIT_MS is 0, else
 * parks it: RPC_PENDING, and W's call is the process thread's. */
int proc_read_or_park(struct proc_table *t, struct proc *p,
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
  proc_wake_by(t, wp->deadline_ms);
  return RPC_PENDING;
}

/* Locked part of ExecRead: answers, or parks C (RPC_PENDING). */
static int exec_read_locked(struct proc_table *t, struct rpc_call *c,
                            const void *req) {
  const Sbx__V1__ExecRead *rq = req;
  struct proc *p = proc_find(t, rq->exec_id);
  if (!p)
    return proc_not_found(c, rq->exec_id);
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
  struct stream *s = &p->out[stream];
  if (rq->offset > s->buf.total)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the end of %s of exec %" PRIu64
                    " (%" PRIu64 " bytes)",
                    rq->offset, stream == K_STDOUT ? "stdout" : "stderr", p->id,
                    s->buf.total);
  p->used = ++t->tick;
  uint64_t now = sbx_now_ms();
  if (p->hold_ms)
    proc_stream_reader_at(t, p, stream, rq->offset, now);
  struct waiter w = {
      .c = c,
      .stream = stream,
      .offset = rq->offset,
      .max = proc_read_cap(c->d, rq->max_bytes),
      .until_exit = rq->until_exit,
      .saw_running = p->running,
      .deadline_ms = now + rq->wait_ms,
  };
  return proc_read_or_park(t, p, &w, rq->wait_ms);
}

/* ExecRead: output of a stream from an offset, now or once there is some. */
int rpc_exec_read(struct rpc_call *c) {
  /* Once parked (RPC_PENDING), C is the thread's: it may complete it as
   * soon as the lock is released. */
  return proc_call_locked(c, RPC_BODY(c, EXEC_READ, exec_read),
                          exec_read_locked);
}
