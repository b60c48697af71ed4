/* ExecSignal, ExecResize, ExecList and ExecRelease: the RPCs that act on a
 * process's record rather than on its streams. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "sandboxd/proc/proc_internal.h"
#include "sandboxd/proc/tty.h"

/* The locked part of ExecSignal. */
static int exec_signal_locked(struct proc_table *t, struct rpc_call *c,
                              const void *req) {
  const Sbx__V1__ExecSignal *rq = req;
  struct proc *p = proc_find(t, rq->exec_id);
  if (!p)
    return proc_not_found(c, rq->exec_id);
  if (rq->signal <= 0 || rq->signal >= NSIG)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "signal %d is not a signal number", rq->signal);
  p->used = ++t->tick;
  /* Once reaped, the pid may belong to someone else; the group may still
   * hold background children while the output is open. */
  if (!p->running && (!rq->group || proc_output_closed(p)))
    return rpc_fail(c, SBX_CONFLICT, ESRCH, "exec %" PRIu64 " has exited",
                    p->id);
  if (kill(rq->group ? -p->pid : p->pid, rq->signal) < 0)
    return rpc_fail(c, errno == ESRCH ? SBX_CONFLICT : SBX_OK, errno,
                    "signal %d to exec %" PRIu64 ": %s", rq->signal, p->id,
                    strerror(errno));
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_EXEC_SIGNAL);
}

/* ExecSignal: a signal to the process, or to its group. */
int rpc_exec_signal(struct rpc_call *c) {
  return proc_call_locked(c, RPC_BODY(c, EXEC_SIGNAL, exec_signal),
                          exec_signal_locked);
}

/* The locked part of ExecResize. */
static int exec_resize_locked(struct proc_table *t, struct rpc_call *c,
                              const void *req) {
  const Sbx__V1__ExecResize *rq = req;
  struct proc *p = proc_find(t, rq->exec_id);
  if (!p)
    return proc_not_found(c, rq->exec_id);
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

/* ExecResize: the new size of a process's terminal. */
int rpc_exec_resize(struct rpc_call *c) {
  return proc_call_locked(c, RPC_BODY(c, EXEC_RESIZE, exec_resize),
                          exec_resize_locked);
}

/* The locked part of ExecList: the first max_list_entries records. */
static int exec_list_locked(struct proc_table *t, struct rpc_call *c) {
  Sbx__V1__ExecListReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__ExecListReply);
  if (!reply)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  sbx__v1__exec_list_reply__init(reply);
  size_t n = proc_min_u64(t->nprocs, c->d->limits.max_list_entries);
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

/* ExecList: the process records, running or finished. */
int rpc_exec_list(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return proc_no_table(c);
  pthread_mutex_lock(&t->mu);
  int r = exec_list_locked(t, c);
  pthread_mutex_unlock(&t->mu);
  return r;
}

/* ExecRelease: forgets a finished process and its output. */
int rpc_exec_release(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return proc_no_table(c);
  const Sbx__V1__ExecRelease *rq = RPC_BODY(c, EXEC_RELEASE, exec_release);
  if (!rq)
    return rpc_no_body(c);
  struct waiter *done = NULL;
  int r;
  pthread_mutex_lock(&t->mu);
  struct proc *p = proc_find(t, rq->exec_id);
  if (!p)
    r = proc_not_found(c, rq->exec_id);
  else if (p->running)
    r = rpc_fail(c, SBX_CONFLICT, EBUSY,
                 "exec %" PRIu64 " is still running: signal it first", p->id);
  else {
    proc_destroy(t, p, &done);
    r = rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_EXEC_RELEASE);
  }
  pthread_mutex_unlock(&t->mu);
  proc_complete_waiters(done);
  return r;
}
