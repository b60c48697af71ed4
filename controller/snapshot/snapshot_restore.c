/* snapshot_restore: the archive loaded and checked against its record,
 * the workspace cleared but for the excludes, and the archive imported
 * through sandboxd. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/net/http.h"
#include "controller/snapshot/snapshot_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"
#include "shared/path.h"

#define CLEAR_PASSES 64

/* Reads up to MAX bytes into BUF, fewer only at the end of the file. */
static int read_full(int fd, uint8_t *buf, size_t max, size_t *got) {
  size_t n = 0;
  while (n < max) {
    ssize_t k = read(fd, buf + n, max - n);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (k == 0)
      break;
    n += (size_t)k;
  }
  *got = n;
  return 0;
}

/* Removes everything in the workspace beneath DIR (normalized, "." for the
 * root) except the excluded paths and the directories leading to them. */
static int clear_dir(struct sbx_client *c, const char *dir,
                     const struct snapshot_excludes *ex, unsigned depth,
                     struct sbx_error *e) {
  if (depth > 256)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ELOOP,
                         "snapshot excludes are nested too deep");
  for (unsigned pass = 0; pass < CLEAR_PASSES; pass++) {
    Sbx__V1__FileList a = SBX__V1__FILE_LIST__INIT;
    a.path = (char *)dir;
    a.depth = 1;
    Sbx__V1__Response *r = NULL;
    int rc = sbx_file_list(c, &a, &r, e);
    if (rc < 0)
      return rc;
    Sbx__V1__FileListReply *l = r->file_list;
    bool removed_any = false;
    for (size_t i = 0; i < l->n_entries && rc == 0; i++) {
      const Sbx__V1__FileInfo *fi = l->entries[i];
      char child[SBX_PATH_MAX];
      if (sbx_path_join(dir, fi->path, child, sizeof(child)) < 0) {
        rc = sbx_error_set(e, SBX_INTERNAL, ENAMETOOLONG,
                           "workspace path too long under \"%s\"", dir);
        break;
      }
      bool keep = false, descend = false;
      for (size_t k = 0; k < ex->n; k++) {
        if (sbx_path_is_under(ex->v[k], child))
          keep = true;
        else if (sbx_path_is_under(child, ex->v[k]))
          descend = true;
      }
      if (keep)
        continue;
      if (descend && fi->type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY)
        rc = clear_dir(c, child, ex, depth + 1, e);
      else {
        rc = sbx_file_remove(c, child, true, true, e);
        removed_any = true;
      }
    }
    bool truncated = l->truncated;
    sbx_client_reply_free(r);
    if (rc < 0)
      return rc;
    if (!truncated || !removed_any)
      return 0;
  }
  return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                       "too many entries to clear in \"%s\"", dir);
}

/* Refuses a record that cannot be restored: snapshots were off, an
 * unknown type or fingerprint version, no SHA-256. */
static int check_record(const struct snapshot_record *rec,
                        struct sbx_error *e) {
  if (rec->type == SNAPSHOT_NONE)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no snapshot to restore (snapshots were off)");
  if (rec->type != SNAPSHOT_LOCAL && rec->type != SNAPSHOT_REMOTE)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown snapshot type %d", (int)rec->type);
  if (strcmp(rec->version, SNAPSHOT_FINGERPRINT_VERSION) != 0)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "snapshot fingerprint version \"%.*s\" is not "
                         "supported (only %s)",
                         64, rec->version, SNAPSHOT_FINGERPRINT_VERSION);
  if (strlen(rec->sha256) != 64)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the snapshot record has no sha256 fingerprint");
  return 0;
}

/* The archive as a file: the local snapshot, or a download of at most
 * MAX_INPUT bytes whose SHA-256 is checked against REC on the way
 * (*VERIFIED), before anything in the workspace changes. */
static int open_archive(const struct snapshot_spec *spec,
                        const struct snapshot_record *rec, uint64_t max_input,
                        const char *where, snapshot_progress_fn progress,
                        void *progress_arg, bool *verified,
                        struct sbx_error *e) {
  if (rec->type == SNAPSHOT_LOCAL)
    return snapshot_local_open(rec, e);
  struct sbx_sha256 sha;
  sbx_sha256_init(&sha);
  struct snapshot_meter prog;
  snapshot_meter_begin(&prog, progress, progress_arg, "loading", rec->size);
  _cleanup_close_ int fd =
      snapshot_remote_download(spec, rec, max_input, &sha, &prog, e);
  uint8_t d[SBX_SHA256_BYTES];
  char hex[SBX_SHA256_HEX];
  sbx_sha256_final(&sha, d);
  if (fd < 0)
    return fd;
  sbx_sha256_hex(d, hex);
  if (strcmp(hex, rec->sha256) != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "snapshot %s does not match its fingerprint "
                         "(sha256 %s, expected %s): refusing to restore it",
                         where, hex, rec->sha256);
  *verified = true;
  return TAKE_FD(fd);
}

/* Refuses an archive file FD that is not REC's size. */
static int check_size(int fd, const struct snapshot_record *rec,
                      const char *where, struct sbx_error *e) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot stat snapshot \"%s\": %s",
                         where, strerror(errno));
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != rec->size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "snapshot %s has %jd bytes, its record says %" PRIu64
                         ": refusing to restore it",
                         where, (intmax_t)st.st_size, rec->size);
  return 0;
}

/* An import into sandboxd; open from its start until import_close. */
struct import {
  struct sbx_client *c;
  uint64_t handle;
  bool open;
};

/* Starts the import of the archive with LIM. Into an empty workspace
 * sandboxd extracts into a staging directory as the archive arrives: it
 * joins EX, so that the clearing leaves it alone. IM is open when the
 * import started, whatever the result. */
static int import_start(struct import *im, const struct snapshot_limits *lim,
                        struct snapshot_excludes *ex, struct sbx_error *e) {
  Sbx__V1__ArchiveLimits al = snapshot_limits_proto(lim);
  Sbx__V1__ArchiveImportStart a = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  a.path = (char *)".";
  a.limits = &al;
  a.compression = SBX__V1__COMPRESSION__COMPRESSION_AUTO;
  a.stage = true;
  Sbx__V1__Response *reply = NULL;
  int r = sbx_archive_import_start(im->c, &a, &reply, e);
  if (r < 0)
    return r;
  im->handle = reply->archive_import_start->handle;
  im->open = true;
  const char *staging[] = {reply->archive_import_start->staging_path, NULL};
  if (staging[0][0])
    r = snapshot_excludes_add(ex, staging, e);
  sbx_client_reply_free(reply);
  return r;
}

/* The archive read and hashed a chunk ahead of the sends, by a thread of
 * its own, so that the read and the SHA-256 (a fifth of a restore's
 * sending) overlap the writes into sandboxd. Chunks alternate between two
 * buffers; each is full (the reader's to fill once the sender let it go)
 * or not. Without the thread, the sender reads for itself. */
struct ahead {
  int fd;
  bool hash;
  struct sbx_sha256 sha; /* the reader's, whole once it has ended */
  uint8_t *buf[2];
  size_t len[2];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool full[2]; /* under mu */
  bool end;     /* under mu: the reader has ended: at the end, or ERR */
  bool stop;    /* under mu: the sender is done */
  int err;      /* under mu: the read's failure (negative errno) */
  pthread_t thread;
  bool started;
};

/* Reads chunk I into its buffer and hashes it: 0 with *N (0 at the
 * end), or a negative errno. */
static int ahead_fill(struct ahead *a, unsigned i, size_t *n) {
  int r = read_full(a->fd, a->buf[i], SNAPSHOT_CHUNK_BYTES, n);
  if (r == 0 && a->hash)
    sbx_sha256_update(&a->sha, a->buf[i], *n);
  return r;
}

static void *ahead_main(void *arg) {
  struct ahead *a = arg;
  for (unsigned i = 0;; i ^= 1) {
    pthread_mutex_lock(&a->mu);
    while (a->full[i] && !a->stop)
      (void)pthread_cond_wait(&a->cv, &a->mu);
    bool stop = a->stop;
    pthread_mutex_unlock(&a->mu);
    if (stop)
      break;
    size_t n = 0;
    int r = ahead_fill(a, i, &n);
    pthread_mutex_lock(&a->mu);
    a->len[i] = n;
    a->full[i] = r == 0 && n > 0;
    a->end = !a->full[i];
    a->err = r;
    (void)pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (a->end)
      break;
  }
  return NULL;
}

static int ahead_start(struct ahead *a, int fd, bool hash) {
  memset(a, 0, sizeof(*a));
  a->fd = fd;
  a->hash = hash;
  sbx_sha256_init(&a->sha);
  a->buf[0] = malloc(SNAPSHOT_CHUNK_BYTES);
  a->buf[1] = malloc(SNAPSHOT_CHUNK_BYTES);
  if (!a->buf[0] || !a->buf[1]) {
    free(a->buf[0]);
    free(a->buf[1]);
    return -ENOMEM;
  }
  (void)pthread_mutex_init(&a->mu, NULL);
  (void)pthread_cond_init(&a->cv, NULL);
  a->started = pthread_create(&a->thread, NULL, ahead_main, a) == 0;
  return 0;
}

/* Chunk I (they come 0, 1, 0, ...): its bytes *BUF and *N, 0 at the
 * end; chunk I is the sender's until ahead_done. */
static int ahead_next(struct ahead *a, unsigned i, const uint8_t **buf,
                      size_t *n) {
  *buf = a->buf[i];
  if (!a->started)
    return ahead_fill(a, i, n);
  pthread_mutex_lock(&a->mu);
  while (!a->full[i] && !a->end)
    (void)pthread_cond_wait(&a->cv, &a->mu);
  int r = a->full[i] ? 0 : a->err;
  *n = a->full[i] ? a->len[i] : 0;
  pthread_mutex_unlock(&a->mu);
  return r;
}

/* The sender is done with chunk I: the reader may fill it again. */
static void ahead_done(struct ahead *a, unsigned i) {
  if (!a->started)
    return;
  pthread_mutex_lock(&a->mu);
  a->full[i] = false;
  (void)pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

/* Stops the reader: the hash is whole when it had reached the end. */
static void ahead_stop(struct ahead *a) {
  if (a->started) {
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    (void)pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    (void)pthread_join(a->thread, NULL);
  }
  (void)pthread_cond_destroy(&a->cv);
  (void)pthread_mutex_destroy(&a->mu);
  free(a->buf[0]);
  free(a->buf[1]);
}

/* Sends the archive in FD to the import, hashing it unless it was
 * VERIFIED on the way in; refuses it when its size or SHA-256 is not
 * REC's. *SENT counts the bytes sent. */
static int import_send(struct import *im, int fd,
                       const struct snapshot_record *rec, const char *where,
                       bool verified, struct snapshot_meter *prog,
                       uint64_t *sent, struct sbx_error *e) {
  struct ahead a;
  if (ahead_start(&a, fd, !verified) < 0)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  uint64_t off = 0;
  int r = 0;
  for (unsigned i = 0; r == 0; i ^= 1) {
    size_t n = 0;
    const uint8_t *buf;
    r = ahead_next(&a, i, &buf, &n);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot read snapshot \"%s\": %s", where,
                        strerror(-r));
      break;
    }
    if (n == 0)
      break;
    if (n > rec->size - off) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                        "snapshot %s grew while it was read", where);
      break;
    }
    uint64_t received = 0;
    r = sbx_archive_import_write(im->c, im->handle, off, buf, n, &received, e);
    ahead_done(&a, i);
    if (r < 0)
      break;
    off += n;
    if (received != off)
      r = sbx_error_set(e, SBX_INTERNAL, EPROTO,
                        "sandboxd acknowledged %" PRIu64 " of %" PRIu64
                        " archive bytes",
                        received, off);
    snapshot_meter_report(prog, off, 0, false);
  }
  ahead_stop(&a);
  *sent = off;
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256_final(&a.sha, d);
  if (r == 0 && off != rec->size)
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                      "snapshot %s has %" PRIu64
                      " bytes, its record says %" PRIu64
                      ": refusing to restore it",
                      where, off, rec->size);
  if (r == 0 && !verified) {
    char hex[SBX_SHA256_HEX];
    sbx_sha256_hex(d, hex);
    if (strcmp(hex, rec->sha256) != 0)
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                        "snapshot %s does not match its fingerprint "
                        "(sha256 %s, expected %s): refusing to restore it",
                        where, hex, rec->sha256);
  }
  return r;
}

/* Lets sandboxd check the archive and extract it; its counts into RES. */
static int import_finish(struct import *im, struct snapshot_restore_result *res,
                         struct sbx_error *e) {
  Sbx__V1__Response *reply = NULL;
  int r = sbx_archive_import_finish(im->c, im->handle, &reply, e);
  if (r == 0) {
    res->members = reply->archive_import_finish->members;
    res->extracted_bytes = reply->archive_import_finish->extracted_bytes;
    sbx_client_reply_free(reply);
  }
  return r;
}

/* Closes the import, whatever came of it: a failure is only logged. */
static void import_close(struct import *im) {
  if (!im->open)
    return;
  struct sbx_error ignored = {0};
  if (sbx_archive_close(im->c, im->handle, &ignored) < 0)
    log_debug("snapshot: closing import %016" PRIx64 ": %s", im->handle,
              ignored.msg);
  im->open = false;
}

int snapshot_restore(const struct snapshot_spec *spec,
                     const struct snapshot_record *rec, struct sandbox *sb,
                     const struct snapshot_limits *limits,
                     const char *current_fingerprint,
                     struct snapshot_restore_result *res,
                     snapshot_progress_fn progress, void *progress_arg,
                     struct sbx_error *e) {
  struct snapshot_restore_result dummy;
  if (!res)
    res = &dummy;
  memset(res, 0, sizeof(*res));
  int r = check_record(rec, e);
  if (r < 0)
    return r;
  if (current_fingerprint && strcmp(current_fingerprint, rec->sha256) == 0) {
    res->skipped = true;
    return 0;
  }
  struct snapshot_limits lim =
      snapshot_limits_or_defaults(limits ? limits
                                  : spec ? &spec->limits
                                         : NULL);
  const char *where = rec->location ? rec->location : "(no location)";
  if (rec->size > lim.max_input_bytes) {
    char sz[32];
    http_format_size((size_t)lim.max_input_bytes, sz, sizeof(sz));
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "snapshot %s (%" PRIu64
                         " bytes) is larger than the input limit of %s",
                         where, rec->size, sz);
  }
  bool verified = false;
  _cleanup_close_ int fd = open_archive(spec, rec, lim.max_input_bytes, where,
                                        progress, progress_arg, &verified, e);
  if (fd < 0)
    return fd;
  if ((r = check_size(fd, rec, where, e)) < 0)
    return r;
  _cleanup_(snapshot_excludes_free) struct snapshot_excludes ex = {0};
  if ((r = snapshot_excludes_make(spec, NULL, &ex, e)) < 0)
    return r;

  /* Send it to sandboxd, hashing a local file on the way. Nothing is
   * extracted in place before the finish. */
  struct import im = {.c = sb->client};
  r = import_start(&im, &lim, &ex, e);
  if (!im.open)
    return r;
  struct snapshot_meter prog;
  snapshot_meter_begin(&prog, progress, progress_arg, "restoring", rec->size);
  uint64_t off = 0;
  if (r == 0)
    r = import_send(&im, fd, rec, where, verified, &prog, &off, e);
  /* Verified: make room, then let sandboxd check and extract. */
  uint64_t t0 = sbx_now_ns();
  log_debug("snapshot: sent and checked %" PRIu64 " bytes in %.3f s", off,
            (double)(t0 - prog.start_ns) / 1e9);
  if (r == 0)
    r = clear_dir(sb->client, ".", &ex, 0, e);
  uint64_t t1 = sbx_now_ns();
  if (r == 0)
    r = import_finish(&im, res, e);
  log_debug("snapshot: cleared in %.3f s, extracted in %.3f s",
            (double)(t1 - t0) / 1e9, (double)(sbx_now_ns() - t1) / 1e9);
  import_close(&im);
  if (r < 0)
    return r;
  snapshot_meter_report(&prog, off, res->members, true);
  return 0;
}
