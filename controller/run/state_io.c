/* Where the root run's state is kept (run_state.c decides what): the
 * run's row "run_<run id>" of the state store (run_options.store) and its
 * journal chunks there, for sbx run and sbx serve alike, so that any
 * process on the same database can go on with the run. A journal append
 * is one row: a kill leaves no partial line.
 *
 * The journal's appends are written by a thread of the run's own
 * (state/batcher.h), so that a step never waits for the store: what is
 * appended within RS_LINGER_MS is one row, one transaction. A failed
 * write is reported by the next append, by the state's replacement (which
 * waits for the journal first) and by rs_io_sync, which the runner calls
 * before a step's calls run: a call never runs unrecorded. A kill loses
 * at most the appends of that moment: a resume then goes on from the step
 * before. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/state/batcher.h"
#include "controller/state/store.h"
#include "shared/buf.h"
#include "shared/log.h"

#define RS_LINGER_MS 2 /* how long the appends of one moment gather */
/* The most the journal may hold (run_state.c's RS_JOURNAL_MAX), and so
 * what may wait for the writer. */
#define RS_QUEUE_MAX ((size_t)1 << 30)

struct rs_journal {
  struct batcher w;
  struct store *store; /* borrowed */
  char id[sizeof(((struct shared *)0)->rs_path)];
  struct sbx_buf q;        /* under w's lock: the text still to append */
  int err;                 /* under w's lock: the first write that failed */
  struct sbx_error failed; /* its error */
};

int rs_io_begin(struct shared *sh, struct sbx_error *e) {
  if (!sh->o->store)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL,
                         "a run with a state dir needs the state store");
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "run_%s", sh->run_id);
  /* A run that starts again from nothing (one that was stopped before
   * its first step was saved) drops what its first try appended. */
  return store_state_clear(sh->o->store, sh->rs_path, e);
}

/* Says which of the run's records a store error R (in E) is about. */
static int failed(struct shared *sh, const char *what, int r,
                  struct sbx_error *e) {
  char msg[sizeof(e->msg)];
  (void)snprintf(msg, sizeof(msg), "%s", e->msg);
  return sbx_error_set(e, e->code, -r, "cannot write the run %s of %s: %s",
                       what, sh->rs_path, msg);
}

/* Appends TEXT to the journal of SH now. */
static int append_now(struct shared *sh, const char *text, size_t len,
                      struct sbx_error *e) {
  int r = store_journal_append(sh->o->store, sh->rs_path, text, len, e);
  return r < 0 ? failed(sh, "journal", r, e) : 0;
}

static bool rj_queued(void *arg) {
  struct rs_journal *j = arg;
  return j->q.len > 0;
}

static void *rj_take(void *arg) {
  struct rs_journal *j = arg;
  struct sbx_buf *batch = malloc(sizeof(*batch));
  if (!batch)
    return NULL;
  *batch = j->q;
  sbx_buf_init(&j->q, RS_QUEUE_MAX);
  return batch;
}

static void rj_write(void *arg, void *p) {
  struct rs_journal *j = arg;
  struct sbx_buf *batch = p;
  struct sbx_error e = {0};
  int r = store_journal_append(j->store, j->id, batch->data, batch->len, &e);
  sbx_buf_free(batch);
  free(batch);
  if (r == 0)
    return;
  batcher_lock(&j->w);
  if (!j->err) {
    j->err = r;
    (void)sbx_error_set(&j->failed, e.code, -r,
                        "cannot write the run journal of %s: %s", j->id, e.msg);
  }
  batcher_unlock(&j->w);
}

static const struct batcher_ops rj_ops = {
    .queued = rj_queued, .take = rj_take, .write = rj_write};

/* The first failure of the journal's writer, if any, into E. */
static int rj_failed(struct rs_journal *j, struct sbx_error *e) {
  if (!j->err)
    return 0;
  *e = j->failed;
  return j->err;
}

/* SH's journal writer, made on the first append (MAKE): the calls'
 * threads append too, so it is made and looked up under sh->rs_mu. NULL
 * without one, or out of memory. */
static struct rs_journal *rj_of(struct shared *sh, bool make) {
  pthread_mutex_lock(&sh->rs_mu);
  struct rs_journal *j = sh->rj;
  if (!j && make && (j = calloc(1, sizeof(*j)))) {
    j->store = sh->o->store;
    (void)snprintf(j->id, sizeof(j->id), "%s", sh->rs_path);
    sbx_buf_init(&j->q, RS_QUEUE_MAX);
    if (batcher_start(&j->w, RS_LINGER_MS, &rj_ops, j) < 0) {
      free(j);
      j = NULL;
    }
    sh->rj = j;
  }
  pthread_mutex_unlock(&sh->rs_mu);
  return j;
}

int rs_io_append(struct shared *sh, const char *text, size_t len,
                 struct sbx_error *e) {
  struct rs_journal *j = rj_of(sh, true);
  if (!j)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot write the run journal: out of memory");
  if (!j->w.started)
    return append_now(sh, text, len, e);
  batcher_lock(&j->w);
  int r = rj_failed(j, e);
  bool first = j->q.len == 0;
  if (r == 0 && (r = sbx_buf_append(&j->q, text, len)) < 0)
    r = sbx_error_set(e, r == -E2BIG ? SBX_LIMIT_EXCEEDED : SBX_INTERNAL, -r,
                      "cannot write the run journal of %s: %s", sh->rs_path,
                      r == -E2BIG ? "the journal waiting for the store is "
                                    "over its limit"
                                  : strerror(-r));
  if (r == 0 && first)
    batcher_queued(&j->w);
  batcher_unlock(&j->w);
  return r;
}

int rs_io_sync(struct shared *sh, struct sbx_error *e) {
  struct rs_journal *j = rj_of(sh, false);
  if (!j)
    return 0;
  batcher_flush(&j->w);
  batcher_lock(&j->w);
  int r = rj_failed(j, e);
  batcher_unlock(&j->w);
  return r;
}

void rs_io_close(struct shared *sh) {
  struct rs_journal *j = rj_of(sh, false);
  if (!j)
    return;
  struct sbx_error e = {0};
  if (rs_io_sync(sh, &e) < 0)
    log_warn("%s", e.msg);
  batcher_stop(&j->w);
  sbx_buf_free(&j->q);
  free(j);
  pthread_mutex_lock(&sh->rs_mu);
  sh->rj = NULL;
  pthread_mutex_unlock(&sh->rs_mu);
}

int rs_io_put(struct shared *sh, const char *text, size_t len,
              struct sbx_error *e) {
  int r = rs_io_sync(sh, e);
  if (r < 0)
    return r;
  r = store_state_put(sh->o->store, sh->rs_path, text, len, e);
  return r < 0 ? failed(sh, "state", r, e) : 0;
}

int rs_io_read(struct shared *sh, const char *where, size_t max, char **state,
               size_t *slen, char **journal, size_t *jlen,
               struct sbx_error *e) {
  *state = *journal = NULL;
  *slen = *jlen = 0;
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "%s", where);
  struct store *st = sh->o->store;
  if (!st)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL,
                         "resuming a run needs the state store");
  int r = store_state_get(st, where, state, slen, e);
  if (r == 0 && *slen == 0)
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "run %s has no state", where);
  if (r == 0)
    r = store_journal_read(st, where, max, journal, jlen, e);
  return r;
}

int rs_io_cut(struct shared *sh, size_t keep, struct sbx_error *e) {
  int r = rs_io_sync(sh, e);
  return r < 0 ? r : store_journal_cut(sh->o->store, sh->rs_path, keep, e);
}

void rs_io_remove(struct shared *sh) {
  struct sbx_error e = {0};
  rs_io_close(sh);
  (void)store_state_clear(sh->o->store, sh->rs_path, &e);
}
