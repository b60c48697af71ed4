/* The export of a workspace from sandboxd, read ahead by a thread while
 * the caller stores and hashes it, and snapshot_fingerprint, the hash of an
 * export that is not stored. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/net/http.h"
#include "controller/snapshot/snapshot_internal.h"
#include "shared/log.h"

/* How long a streamed export may send nothing before we give up. */
#define EXPORT_STALL_NS (120ull * 1000000000ull)

/* Keeps the paths the eof reply R says sandboxd left out (checked by the
 * client: few, printable) in X. */
static int keep_skipped(struct snapshot_exporter *x,
                        const Sbx__V1__ArchiveExportReadReply *r,
                        struct sbx_error *e) {
  x->skipped_total = r->skipped_count;
  if (r->n_skipped == 0)
    return 0;
  x->skipped = calloc(r->n_skipped, sizeof(char *));
  if (!x->skipped)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  for (size_t i = 0; i < r->n_skipped; i++) {
    x->skipped[i] = strdup(r->skipped[i]);
    if (!x->skipped[i])
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    x->nskipped++;
  }
  return 0;
}

/* Fetches chunk after chunk until eof, an error or a stop. A size given at
 * start must be met exactly (the sandbox may lie); a streamed archive is
 * held to x->max as it arrives. */
static void *export_reader(void *arg) {
  struct snapshot_exporter *x = arg;
  uint64_t off = 0, last_ns = sbx_now_ns();
  int r = 0;
  bool eof = false;
  struct sbx_error e = {0};
  while (!eof) {
    pthread_mutex_lock(&x->mu);
    while (x->qcount == SNAPSHOT_PREFETCH && !x->stop)
      pthread_cond_wait(&x->cv, &x->mu);
    bool stop = x->stop;
    pthread_mutex_unlock(&x->mu);
    if (stop)
      break;
    uint64_t want = SNAPSHOT_CHUNK_BYTES;
    if (x->total && x->total - off < want)
      want = x->total - off;
    Sbx__V1__Response *rep = NULL;
    r = sbx_archive_export_read(x->client, x->handle, off, (uint32_t)want, &rep,
                                &e);
    if (r < 0)
      break;
    Sbx__V1__ArchiveExportReadReply *c = rep->archive_export_read;
    eof = c->eof;
    if (eof && (r = keep_skipped(x, c, &e)) < 0) {
      sbx_client_reply_free(rep);
      break;
    }
    if (x->total && (c->data.len > want || c->data.len == 0 ||
                     eof != (off + c->data.len == x->total))) {
      r = sbx_error_set(&e, SBX_INTERNAL, EPROTO,
                        "sandboxd sent %zu archive bytes at offset %" PRIu64
                        " of %" PRIu64,
                        c->data.len, off, x->total);
      sbx_client_reply_free(rep);
      break;
    }
    if (c->data.len > x->max - off) {
      char sz[32];
      http_format_size((size_t)x->max, sz, sizeof(sz));
      r = sbx_error_set(&e, SBX_LIMIT_EXCEEDED, EFBIG,
                        "the workspace archive is larger than the snapshot "
                        "limit of %s",
                        sz);
      sbx_client_reply_free(rep);
      break;
    }
    if (c->data.len == 0) {
      sbx_client_reply_free(rep);
      if (eof)
        break;
      /* Still being produced: sandboxd waited; ask again, not forever. */
      if (sbx_now_ns() - last_ns > EXPORT_STALL_NS) {
        r = sbx_error_set(&e, SBX_UNAVAILABLE, ETIMEDOUT,
                          "the workspace archive made no progress for %llu s",
                          EXPORT_STALL_NS / 1000000000ull);
        break;
      }
      (void)usleep(10000);
      continue;
    }
    last_ns = sbx_now_ns();
    off += c->data.len;
    pthread_mutex_lock(&x->mu);
    x->q[(x->qhead + x->qcount) % SNAPSHOT_PREFETCH] = rep;
    x->qcount++;
    x->fetched = off;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
  }
  pthread_mutex_lock(&x->mu);
  x->done = true;
  x->eof = eof && r == 0;
  x->err = r;
  if (r < 0)
    x->rerr = e;
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

/* Starts the export and its reader. STREAM: sandboxd produces the archive
 * while it is read (its size is then unknown until the end). */
int snapshot_export_open(struct snapshot_exporter *x, struct sandbox *sb,
                         const struct snapshot_excludes *ex,
                         enum snapshot_compression comp,
                         const struct snapshot_limits *lim, bool stream,
                         struct sbx_error *e) {
  uint64_t max_bytes = lim ? lim->max_input_bytes : UINT64_MAX;
  *x = (struct snapshot_exporter){.client = sb->client, .max = max_bytes};
  Sbx__V1__ArchiveLimits al = SBX__V1__ARCHIVE_LIMITS__INIT;
  if (lim)
    al = snapshot_limits_proto(lim);
  Sbx__V1__ArchiveExportStart a = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  a.limits = lim ? &al : NULL;
  a.path = (char *)".";
  a.stream = stream;
  a.excludes = ex->v;
  a.n_excludes = ex->n;
  a.compression = comp == SNAPSHOT_UNCOMPRESSED
                      ? SBX__V1__COMPRESSION__COMPRESSION_NONE
                      : SBX__V1__COMPRESSION__COMPRESSION_ZSTD;
  Sbx__V1__Response *r = NULL;
  int rc = sbx_archive_export_start(sb->client, &a, &r, e);
  if (rc < 0)
    return rc;
  x->handle = r->archive_export_start->handle;
  x->total = r->archive_export_start->total_bytes;
  x->open = true;
  sbx_client_reply_free(r);
  if (x->total > max_bytes) {
    char sz[32];
    http_format_size((size_t)max_bytes, sz, sizeof(sz));
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "the workspace archive (%" PRIu64
                         " bytes) is larger than the snapshot limit of %s",
                         x->total, sz);
  }
  if ((rc = pthread_mutex_init(&x->mu, NULL)) != 0)
    return sbx_error_set(e, SBX_OK, rc, "cannot create a mutex: %s",
                         strerror(rc));
  if ((rc = pthread_cond_init(&x->cv, NULL)) != 0) {
    pthread_mutex_destroy(&x->mu);
    return sbx_error_set(e, SBX_OK, rc, "cannot create a condition: %s",
                         strerror(rc));
  }
  if ((rc = pthread_create(&x->thread, NULL, export_reader, x)) != 0) {
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    return sbx_error_set(e, SBX_OK, rc, "cannot start a thread: %s",
                         strerror(rc));
  }
  x->started = true;
  return 0;
}

/* The next piece of the archive, at most MAX bytes, into *DATA and *LEN;
 * *LEN is 0 at the end. The bytes stay valid until the next call. */
int snapshot_export_next(struct snapshot_exporter *x, size_t max,
                         const uint8_t **data, size_t *len,
                         struct sbx_error *e) {
  if (x->pos == x->len) {
    sbx_client_reply_free(x->reply);
    x->reply = NULL;
    x->data = NULL;
    x->len = x->pos = 0;
    pthread_mutex_lock(&x->mu);
    while (x->qcount == 0 && !x->done)
      pthread_cond_wait(&x->cv, &x->mu);
    Sbx__V1__Response *rep = NULL;
    if (x->qcount > 0) {
      rep = x->q[x->qhead];
      x->qhead = (x->qhead + 1) % SNAPSHOT_PREFETCH;
      x->qcount--;
      pthread_cond_broadcast(&x->cv);
    }
    int err = x->err;
    bool eof = x->eof;
    pthread_mutex_unlock(&x->mu);
    if (!rep) {
      if (err < 0) {
        if (e)
          *e = x->rerr;
        return err;
      }
      if (eof) {
        *len = 0;
        return 0;
      }
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "the archive ended after %" PRIu64 " bytes", x->off);
    }
    x->reply = rep;
    x->data = rep->archive_export_read->data.data;
    x->len = rep->archive_export_read->data.len;
  }
  size_t n = x->len - x->pos;
  if (n > max)
    n = max;
  *data = x->data + x->pos;
  *len = n;
  x->pos += n;
  x->off += n;
  return 0;
}

void snapshot_export_close(struct snapshot_exporter *x) {
  if (x->started) {
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    (void)pthread_join(x->thread, NULL);
    for (size_t i = 0; i < x->qcount; i++)
      sbx_client_reply_free(x->q[(x->qhead + i) % SNAPSHOT_PREFETCH]);
    x->qcount = 0;
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    x->started = false;
  }
  sbx_client_reply_free(x->reply);
  x->reply = NULL;
  for (size_t i = 0; i < x->nskipped; i++)
    free(x->skipped[i]);
  free(x->skipped);
  x->skipped = NULL;
  x->nskipped = 0;
  if (x->open) {
    struct sbx_error ignored = {0};
    if (sbx_archive_close(x->client, x->handle, &ignored) < 0)
      log_debug("snapshot: closing export %016" PRIx64 ": %s", x->handle,
                ignored.msg);
    x->open = false;
  }
}

int snapshot_fingerprint(const struct snapshot_spec *spec, struct sandbox *sb,
                         const char *const *excludes, char out[65],
                         struct sbx_error *e) {
  out[0] = '\0';
  struct snapshot_excludes ex;
  int r = snapshot_excludes_make(spec, excludes, &ex, e);
  if (r < 0)
    return r;
  struct snapshot_exporter x;
  r = snapshot_export_open(
      &x, sb, &ex, spec ? spec->compression : SNAPSHOT_ZSTD, NULL, true, e);
  snapshot_excludes_free(&ex);
  struct sbx_sha256 sha;
  sbx_sha256_init(&sha);
  while (r == 0) {
    const uint8_t *data = NULL;
    size_t len = 0;
    r = snapshot_export_next(&x, SNAPSHOT_CHUNK_BYTES, &data, &len, e);
    if (r < 0 || len == 0)
      break;
    sbx_sha256_update(&sha, data, len);
  }
  snapshot_export_close(&x);
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256_final(&sha, d);
  if (r == 0)
    sbx_sha256_hex(d, out);
  return r;
}
