/* Export: ArchiveExportStart (the archive written into the spool at once,
 * or by a producer thread of its own for a streamed export) and
 * ArchiveExportRead (ranges of the spool; for a streamed export, a bounded
 * wait for the producer). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

/* A read ahead of a streamed export's production waits for this many bytes
 * (or the end) at most STREAM_WAIT_MS; at most STREAM_WAITERS_MAX reads wait
 * at once, so waiting reads cannot take every worker for long. */
#define STREAM_MIN_REPLY (1u << 20)
#define STREAM_WAIT_MS 2000u
#define STREAM_WAITERS_MAX 2u

/* Tells the producer to stop at its next write and wakes waiting reads. */
void export_stream_cancel(struct xstream *s) {
  __atomic_store_n(&s->cancel, true, __ATOMIC_RELEASE);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Stops the producer (it checks for a cancel before every write) and frees
 * the stream. */
struct xstream *export_stream_free(struct xstream *s) {
  if (!s)
    return NULL;
  if (s->started) {
    export_stream_cancel(s);
    (void)pthread_join(s->thread, NULL);
  }
  if (s->dir_fd >= 0)
    (void)close(s->dir_fd);
  free(s->excl);
  free(s->excl_pool);
  export_skipped_fini(&s->skipped);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return NULL;
}

/* The producer of a streamed export: the archive into the spool, then the
 * result for the readers. */
static void *export_producer(void *arg) {
  struct xstream *s = arg;
  struct sbx_error e = {0};
  uint64_t total = 0;
  int r = export_tree(&s->lim, &e, s->dir_fd, s->spool_fd, s->excl, s->nexcl,
                      s->level, s, &s->skipped, &total);
  (void)close(s->dir_fd);
  s->dir_fd = -1;
  if (r < 0) {
    if (e.code == SBX_OK)
      e.code = sbx_code_from_errno(-r);
    log_debug("archive: streamed export stopped: %s", e.msg);
  }
  pthread_mutex_lock(&s->mu);
  s->done = true;
  s->err = r;
  if (r < 0)
    s->fail = e;
  else
    s->produced = total;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Sets X up as a streamed export and starts its producer; takes *DIR_FD,
 * *SPOOL and the excludes. */
static int export_stream_start(struct rpc_call *c, struct xfer *x, int *dir_fd,
                               int *spool, char **excl_pool, char ***excl,
                               size_t nexcl, int level) {
  struct xstream *s = calloc(1, sizeof(*s));
  if (!s)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  s->dir_fd = -1;
  int r = pthread_mutex_init(&s->mu, NULL);
  if (r != 0) {
    free(s);
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  }
  pthread_condattr_t ca;
  r = pthread_condattr_init(&ca);
  if (r == 0) {
    r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (r == 0)
      r = pthread_cond_init(&s->cv, &ca);
    (void)pthread_condattr_destroy(&ca);
  }
  if (r != 0) {
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  }
  s->lim = x->lim;
  s->dir_fd = TAKE_FD(*dir_fd);
  x->spool_fd = TAKE_FD(*spool);
  s->spool_fd = x->spool_fd;
  s->excl_pool = TAKE_PTR(*excl_pool);
  s->excl = TAKE_PTR(*excl);
  s->nexcl = nexcl;
  s->level = level;
  x->stream = s;
  r = pthread_create(&s->thread, NULL, export_producer, s);
  if (r != 0)
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  s->started = true;
  return 0;
}

/* ArchiveExportStart: checks the request, opens the directory and the
 * spool, and writes the archive (or starts its producer, streamed). */
int rpc_archive_export_start(struct rpc_call *c) {
  const Sbx__V1__ArchiveExportStart *rq =
      RPC_BODY(c, ARCHIVE_EXPORT_START, archive_export_start);
  if (!rq)
    return rpc_no_body(c);
  int r = xfer_table_check(c);
  if (r < 0)
    return r;
  int level = 0;
  switch (rq->compression) {
  case SBX__V1__COMPRESSION__COMPRESSION_NONE:
  case SBX__V1__COMPRESSION__COMPRESSION_AUTO:
    break;
  case SBX__V1__COMPRESSION__COMPRESSION_ZSTD:
    level = rq->zstd_level ? rq->zstd_level : 3;
    if (level < 1 || level > 19)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "zstd level %d is not between 1 and 19", level);
    break;
  default:
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown compression %d",
                    (int)rq->compression);
  }

  /* Excludes, normalized; "" or "." excludes everything. */
  _cleanup_free_ char *excl_pool = NULL;
  _cleanup_free_ char **excl = NULL;
  size_t nexcl = rq->n_excludes;
  if (nexcl > c->d->limits.max_list_entries)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "more than %" PRIu32 " excludes",
                    c->d->limits.max_list_entries);
  if (nexcl > 0) {
    /* A normalized path is at most one byte longer ("" becomes "."). */
    size_t total = 0;
    for (size_t i = 0; i < nexcl; i++)
      total += strlen(rq->excludes[i]) + 2;
    excl = calloc(nexcl, sizeof(*excl));
    excl_pool = malloc(total);
    if (!excl || !excl_pool)
      return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    char *out = excl_pool;
    for (size_t i = 0; i < nexcl; i++) {
      const char *in = rq->excludes[i];
      size_t len = strlen(in);
      struct sbx_error pe = {0};
      r = sbx_path_normalize_rel(in, len, out, len + 2,
                                 SBX_PATH_NO_DOTDOT | SBX_PATH_EMPTY_IS_ROOT,
                                 &pe);
      if (r < 0)
        return rpc_fail(c, SBX_INVALID_ARGUMENT, -r, "exclude: %s", pe.msg);
      excl[i] = out;
      if (strcmp(out, ".") == 0) {
        excl[0] = out;
        nexcl = 1;
        break;
      }
      out += strlen(out) + 1;
    }
  }

  _cleanup_close_ int dir_fd =
      sbxd_open(c->d, rq->path, O_RDONLY | O_DIRECTORY, 0, false, &c->err);
  if (dir_fd < 0)
    return dir_fd;
  _cleanup_close_ int spool = xfer_spool_open(&c->err);
  if (spool < 0)
    return spool;

  Sbx__V1__ArchiveStartReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveStartReply);
  struct xfer *x = calloc(1, sizeof(*x));
  if (!rep || !x) {
    free(x);
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  }
  x->kind = XFER_EXPORT;
  x->spool_fd = -1;
  x->dest_fd = -1;
  xfer_limits_make(&c->d->limits, rq->limits, &x->lim);
  r = xfer_table_insert(c, x);
  if (r < 0) {
    xfer_free(x);
    return r;
  }
  uint64_t total = 0;
  if (rq->stream) {
    r = export_stream_start(c, x, &dir_fd, &spool, &excl_pool, &excl, nexcl,
                            level);
    if (r < 0) {
      xfer_table_remove(c, x);
      return r;
    }
  } else {
    r = export_tree(&x->lim, &c->err, dir_fd, spool, excl, nexcl, level, NULL,
                    &x->skipped, &total);
    if (r < 0) {
      xfer_table_remove(c, x);
      return r;
    }
    x->spool_fd = TAKE_FD(spool);
    x->size = total;
    x->state = XFER_DONE;
  }
  (void)posix_fadvise(x->spool_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  sbx__v1__archive_start_reply__init(rep);
  rep->handle = x->handle;
  rep->total_bytes = total;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_EXPORT_START;
  c->resp->archive_export_start = rep;
  xfer_table_release(c, x);
  return 0;
}

/* Waits (bounded) until the streamed export S has produced the bytes a read
 * at OFFSET of at most MAX wants, or has ended; the bytes in the spool go to
 * *SIZE and whether production is complete to *DONE. A production error
 * fails the read. */
static int stream_wait(struct rpc_call *c, struct xstream *s, uint64_t offset,
                       uint64_t max, uint64_t *size, bool *done) {
  struct archive_table *t = c->d->archives;
  if (offset > s->lim.input_bytes)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the largest archive (%" PRIu64
                    " bytes)",
                    offset, s->lim.input_bytes);
  uint64_t want = max < STREAM_MIN_REPLY ? max : STREAM_MIN_REPLY;
  uint64_t want_end = offset > UINT64_MAX - want ? UINT64_MAX : offset + want;
  pthread_mutex_lock(&s->mu);
  bool ready = s->done || s->produced >= want_end;
  pthread_mutex_unlock(&s->mu);
  bool stopping = __atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE);
  if (!ready && !stopping &&
      __atomic_add_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL) <=
          STREAM_WAITERS_MAX) {
    struct timespec dl = sbx_deadline_in(CLOCK_MONOTONIC, STREAM_WAIT_MS);
    pthread_mutex_lock(&s->mu);
    s->waiting = true;
    s->wake_at = want_end;
    while (!s->done && s->produced < want_end &&
           !__atomic_load_n(&s->cancel, __ATOMIC_ACQUIRE))
      if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
        break;
    s->waiting = false;
    pthread_mutex_unlock(&s->mu);
    (void)__atomic_sub_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL);
  } else if (!ready && !stopping) {
    (void)__atomic_sub_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL);
  }
  pthread_mutex_lock(&s->mu);
  *size = s->produced;
  *done = s->done;
  int err = s->done ? s->err : 0;
  if (err < 0)
    c->err = s->fail;
  pthread_mutex_unlock(&s->mu);
  if (err < 0)
    return err;
  if (!*done && __atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE))
    return rpc_fail(c, SBX_UNAVAILABLE, ESHUTDOWN, "sandboxd is shutting down");
  return 0;
}

/* Puts the names S holds into REP (copies in C's arena, which outlives X). */
static int reply_skipped(struct rpc_call *c, const struct export_skipped *s,
                         Sbx__V1__ArchiveExportReadReply *rep) {
  rep->skipped_count = s->total;
  if (s->n == 0)
    return 0;
  rep->skipped = sbx_arena_alloc(&c->arena, s->n * sizeof(char *));
  if (!rep->skipped)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  for (size_t i = 0; i < s->n; i++) {
    size_t len = strlen(s->names[i]) + 1;
    rep->skipped[i] = sbx_arena_alloc(&c->arena, len);
    if (!rep->skipped[i])
      return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    memcpy(rep->skipped[i], s->names[i], len);
  }
  rep->n_skipped = s->n;
  return 0;
}

/* The read RQ of the export X, which the call holds busy. */
static int export_read(struct rpc_call *c, struct xfer *x, const void *arg) {
  const Sbx__V1__ArchiveExportRead *rq = arg;
  uint64_t max = c->d->limits.max_read_bytes;
  if (rq->max_bytes && rq->max_bytes < max)
    max = rq->max_bytes;
  /* The bytes readable now and whether that is the whole archive. */
  uint64_t size = x->size;
  bool done = true;
  if (x->stream) {
    int r = stream_wait(c, x->stream, rq->offset, max, &size, &done);
    if (r < 0)
      return r;
  }
  if (done && rq->offset > size)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the archive's end (%" PRIu64
                    " bytes)",
                    rq->offset, size);
  uint64_t left = rq->offset < size ? size - rq->offset : 0;
  size_t n = (size_t)(left < max ? left : max);
  Sbx__V1__ArchiveExportReadReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveExportReadReply);
  uint8_t *buf = sbx_arena_alloc_raw(&c->arena, n ? n : 1);
  if (!rep || !buf)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  size_t got = 0;
  while (got < n) {
    ssize_t k =
        pread(x->spool_fd, buf + got, n - got, (off_t)(rq->offset + got));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return rpc_fail(c, SBX_INTERNAL, k < 0 ? errno : EIO,
                      "cannot read the archive's temporary file: %s",
                      k < 0 ? strerror(errno) : "short read");
    got += (size_t)k;
  }
  sbx__v1__archive_export_read_reply__init(rep);
  rep->data.data = buf;
  rep->data.len = n;
  rep->offset = rq->offset;
  rep->eof = done && rq->offset + n == size;
  /* Production is over: the producer's list is no longer written. */
  if (rep->eof) {
    int r =
        reply_skipped(c, x->stream ? &x->stream->skipped : &x->skipped, rep);
    if (r < 0)
      return r;
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_EXPORT_READ;
  c->resp->archive_export_read = rep;
  return 0;
}

/* ArchiveExportRead: a range of the spool; for a streamed export, what the
 * producer has written, after a bounded wait for more. */
int rpc_archive_export_read(struct rpc_call *c) {
  const Sbx__V1__ArchiveExportRead *rq =
      RPC_BODY(c, ARCHIVE_EXPORT_READ, archive_export_read);
  if (!rq)
    return rpc_no_body(c);
  return xfer_table_run(c, rq->handle, XFER_EXPORT, export_read, rq);
}
