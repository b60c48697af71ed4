/* Input: a process's stdin queue (at most PROC_STDIN_MAX bytes), written
 * without blocking by ExecWrite and, when the pipe is full, by the thread
 * once it is writable again; closing it after the queue when asked. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "sandboxd/proc/proc_internal.h"

/* Whether P's stdin can still take input. */
static bool stdin_open(const struct proc *p) {
  return p->tty ? !p->in_closed && p->out[0].fd >= 0 : p->in_fd >= 0;
}

/* Stops watching for stdin writability. */
static void stdin_disarm(struct proc_table *t, struct proc *p) {
  if (!p->in_armed)
    return;
  p->in_armed = false;
  if (p->tty) {
    (void)proc_stream_watch(t, p, K_STDOUT);
  } else if (p->in_fd >= 0) {
    proc_ep_del(t, p->in_fd);
  }
}

/* Watches for stdin writability: the thread writes the rest of the queue
 * then. */
static int stdin_arm(struct proc_table *t, struct proc *p) {
  if (p->in_armed)
    return 0;
  if (p->tty) {
    /* The master carries both ways; a paused one is watched for both
     * again when its reader reads. */
    p->in_armed = true;
    int r = proc_stream_watch(t, p, K_STDOUT);
    if (r < 0)
      p->in_armed = false;
    return r;
  }
  int r =
      proc_ep_set(t, EPOLL_CTL_ADD, p->in_fd, EPOLLOUT, KEY(p->id, K_STDIN));
  if (r == 0)
    p->in_armed = true;
  return r;
}

/* Closes stdin and drops whatever was still queued. */
void proc_stdin_close(struct proc_table *t, struct proc *p) {
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

/* Writes queued stdin bytes without blocking. */
void proc_stdin_flush(struct proc_table *t, struct proc *p) {
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
        proc_stdin_close(t, p);
      return;
    }
    /* EPIPE (nobody reads any more) or worse: input is over. */
    proc_stdin_close(t, p);
    return;
  }
  sbx_buf_reset(&p->inq);
  p->in_pos = 0;
  stdin_disarm(t, p);
  if (p->in_close)
    proc_stdin_close(t, p);
}

/* The locked part of ExecWrite: queues the data and writes what the pipe
 * takes now. */
static int exec_write_locked(struct proc_table *t, struct rpc_call *c,
                             const void *req) {
  const Sbx__V1__ExecWrite *rq = req;
  struct proc *p = proc_find(t, rq->exec_id);
  if (!p)
    return proc_not_found(c, rq->exec_id);
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
  proc_stdin_flush(
      t, p); /* whatever the pipe takes now; the thread does the rest */
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

/* ExecWrite: input for a process's stdin, and its end when asked. */
int rpc_exec_write(struct rpc_call *c) {
  return proc_call_locked(c, RPC_BODY(c, EXEC_WRITE, exec_write),
                          exec_write_locked);
}
