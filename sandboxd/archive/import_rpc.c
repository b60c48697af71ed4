/* Import: ArchiveImportStart (the destination made, a spool opened, maybe
 * staging started), ArchiveImportWrite (chunks appended to the spool at
 * their offset) and ArchiveImportFinish (a staged import's finish, or the
 * two passes over the spool: check everything, then extract). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "sandboxd/fs/files.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"

/* Creates REL (normalized, beneath BASE_FD) and its missing parents. */
static int mkdir_parents(int base_fd, const char *rel, struct sbx_error *e) {
  if (strcmp(rel, ".") == 0)
    return 0;
  char buf[SBX_PATH_MAX];
  size_t len = strlen(rel);
  memcpy(buf, rel, len + 1);
  for (size_t i = 0; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    buf[i] = '\0';
    char *slash = strrchr(buf, '/');
    const char *name = slash ? slash + 1 : buf;
    int pfd = base_fd;
    if (slash) {
      *slash = '\0';
      pfd = sbxd_openat(base_fd, buf, O_PATH | O_DIRECTORY, 0, e);
      *slash = '/';
      if (pfd < 0)
        return pfd;
    }
    int r = mkdirat(pfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
    if (pfd != base_fd)
      (void)close(pfd);
    if (r < 0)
      return sbx_error_set(e, SBX_OK, -r, "cannot create \"%s\": %s", buf,
                           strerror(-r));
    if (i < len)
      buf[i] = '/';
  }
  return 0;
}

/* ArchiveImportStart: makes the destination, opens a spool under a new
 * handle, and starts staging when asked and possible. */
int rpc_archive_import_start(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportStart *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_START, archive_import_start);
  if (!rq)
    return rpc_no_body(c);
  int r = xfer_table_check(c);
  if (r < 0)
    return r;
  switch (rq->compression) {
  case SBX__V1__COMPRESSION__COMPRESSION_NONE:
  case SBX__V1__COMPRESSION__COMPRESSION_ZSTD:
  case SBX__V1__COMPRESSION__COMPRESSION_AUTO:
    break;
  default:
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown compression %d",
                    (int)rq->compression);
  }
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, rq->path, true, &loc, &c->err);
  if (r < 0)
    return r;
  r = mkdir_parents(loc.base_fd, loc.rel, &c->err);
  if (r < 0)
    return r;
  _cleanup_close_ int dest =
      sbxd_openat(loc.base_fd, loc.rel, O_PATH | O_DIRECTORY, 0, &c->err);
  if (dest < 0)
    return dest;
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
  x->kind = XFER_IMPORT;
  x->state = XFER_OPEN;
  x->spool_fd = TAKE_FD(spool);
  x->dest_fd = TAKE_FD(dest);
  x->compression = rq->compression;
  xfer_limits_make(&c->d->limits, rq->limits, &x->lim);
  r = xfer_table_insert(c, x);
  if (r < 0) {
    xfer_free(x);
    return r;
  }
  sbx__v1__archive_start_reply__init(rep);
  if (rq->stage)
    stage_start(c, x, rq->path ? rq->path : "", &rep->staging_path);
  rep->handle = x->handle;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_START;
  c->resp->archive_import_start = rep;
  xfer_table_release(c, x);
  return 0;
}

/* Lets go of what the import X held once it is over (its staging, spool
 * and destination): only its answer stays, for a repeated finish, and the
 * table may give its slot to a new transfer (xfer_table_insert). */
static void import_settle(struct xfer *x, enum xfer_state state) {
  x->state = state;
  x->stage = stage_free(x->stage);
  if (x->spool_fd >= 0) {
    (void)close(x->spool_fd);
    x->spool_fd = -1;
  }
  if (x->dest_fd >= 0) {
    (void)close(x->dest_fd);
    x->dest_fd = -1;
  }
}

/* Marks X failed with C's error (kept for a repeated finish). */
static int xfer_fail(struct rpc_call *c, struct xfer *x, int r) {
  x->fail = c->err;
  if (x->fail.code == SBX_OK)
    x->fail.code = sbx_code_from_errno(r);
  import_settle(x, XFER_FAILED);
  return r;
}

/* Refuses a call on X, which is no longer open: its failure again, or
 * CONFLICT once it succeeded. */
static int xfer_refuse_finished(struct rpc_call *c, struct xfer *x) {
  if (x->state == XFER_FAILED)
    return sbx_error_set(&c->err, x->fail.code, x->fail.err ? x->fail.err : EIO,
                         "%s", x->fail.msg);
  return rpc_fail(c, SBX_CONFLICT, EALREADY,
                  "archive transfer %016" PRIx64 " is already finished",
                  x->handle);
}

/* The write RQ into the import X, which the call holds busy. */
static int import_write(struct rpc_call *c, struct xfer *x, const void *arg) {
  const Sbx__V1__ArchiveImportWrite *rq = arg;
  Sbx__V1__ArchiveImportWriteReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveImportWriteReply);
  if (!rep)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  if (x->state != XFER_OPEN)
    return xfer_refuse_finished(c, x);
  uint64_t off = rq->offset, len = rq->data.len;
  if (off > x->size)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the %" PRIu64 " bytes received",
                    off, x->size);
  /* A repeated chunk is acknowledged; only bytes past x->size are new. */
  if (off + len > x->size) {
    uint64_t skip = x->size - off;
    uint64_t add = len - skip;
    if (x->size + add > x->lim.input_bytes) {
      int r = rpc_fail(c, SBX_LIMIT_EXCEEDED, EFBIG,
                       "archive is larger than %" PRIu64 " bytes",
                       x->lim.input_bytes);
      return xfer_fail(c, x, r);
    }
    int r = files_write_all(x->spool_fd, rq->data.data + skip, (size_t)add,
                            (int64_t)x->size);
    if (r < 0)
      return rpc_fail(c, SBX_OK, -r,
                      "cannot write the archive's temporary file: %s",
                      strerror(-r));
    x->size += add;
    if (x->stage)
      stage_feed(x->stage, x->size);
  }
  sbx__v1__archive_import_write_reply__init(rep);
  rep->received = x->size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_WRITE;
  c->resp->archive_import_write = rep;
  return 0;
}

/* ArchiveImportWrite: appends a chunk to the spool at its offset; a
 * repeated chunk is acknowledged, not appended. */
int rpc_archive_import_write(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportWrite *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_WRITE, archive_import_write);
  if (!rq)
    return rpc_no_body(c);
  return xfer_table_run(c, rq->handle, XFER_IMPORT, import_write, rq);
}

/* The finish of an import that was not staged: pass 1 checks the whole
 * spool, pass 2 extracts it. X's counts are set when both succeed. */
static int finish_two_passes(struct rpc_call *c, struct xfer *x) {
  _cleanup_(import_fini) struct importer im = {
      .x = x,
      .d = c->d,
      .e = &c->err,
      .base = x->dest_fd,
      .pfd = -1,
  };
  import_map(&im);
  int r = import_check(&im);
  if (r == 0)
    r = extract_all(&im);
  if (r < 0)
    return r;
  x->members = im.n;
  x->extracted = im.written;
  return 0;
}

/* The finish of the import X, which the call holds busy. */
static int import_finish(struct rpc_call *c, struct xfer *x, const void *arg) {
  (void)arg;
  Sbx__V1__ArchiveImportFinishReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveImportFinishReply);
  if (!rep)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  if (x->state == XFER_FAILED)
    return xfer_refuse_finished(c, x);
  if (x->state == XFER_OPEN && x->stage) {
    int r = stage_finish(x->stage, c);
    x->stage = stage_free(x->stage);
    if (r < 0)
      return xfer_fail(c, x, r);
    if (r > 0)
      import_settle(x, XFER_DONE);
  }
  if (x->state == XFER_OPEN) {
    int r = finish_two_passes(c, x);
    if (r < 0)
      return xfer_fail(c, x, r);
    import_settle(x, XFER_DONE);
  }
  sbx__v1__archive_import_finish_reply__init(rep);
  rep->members = x->members;
  rep->extracted_bytes = x->extracted;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_FINISH;
  c->resp->archive_import_finish = rep;
  return 0;
}

/* ArchiveImportFinish: finishes a staged import, or checks and extracts
 * the spool; the answer is kept for a repeated finish. */
int rpc_archive_import_finish(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportFinish *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_FINISH, archive_import_finish);
  if (!rq)
    return rpc_no_body(c);
  return xfer_table_run(c, rq->handle, XFER_IMPORT, import_finish, rq);
}
