/* snapshot_save: the export of a workspace, stored locally or over HTTP
 * under the session's id, hashed on the way. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "controller/snapshot/snapshot_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define SESSION_ID_MAX 128

/* The file name extension of an archive compressed as C. */
static const char *ext_of(enum snapshot_compression c) {
  return c == SNAPSHOT_UNCOMPRESSED ? ".tar" : ".tar.zst";
}

/* Whether S can name a snapshot file: letters, digits, '.', '_', '-',
 * not starting with '.', at most SESSION_ID_MAX. */
static bool session_id_valid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SESSION_ID_MAX || s[0] == '.')
    return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
      return false;
  }
  return true;
}

int snapshot_save(const struct snapshot_spec *spec, struct sandbox *sb,
                  const char *session_id, const char *const *excludes,
                  struct snapshot_record *out, snapshot_progress_fn progress,
                  void *progress_arg, struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  if (!spec || spec->type == SNAPSHOT_NONE) {
    out->type = SNAPSHOT_NONE;
    return 0;
  }
  if (spec->type != SNAPSHOT_LOCAL && spec->type != SNAPSHOT_REMOTE)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown snapshot type %d", (int)spec->type);
  const char *sid = session_id ? session_id : sb->session_id;
  if (!session_id_valid(sid))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "session id \"%.*s\" cannot name a snapshot", 64, sid);
  _cleanup_free_ char *file =
      snapshot_join3(sid, ext_of(spec->compression), "");
  if (!file)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  struct snapshot_excludes ex;
  int r = snapshot_excludes_make(spec, excludes, &ex, e);
  if (r < 0)
    return r;

  struct snapshot_saver s = {0};
  uint64_t t0 = sbx_now_ns();
  struct snapshot_meter arch;
  snapshot_meter_begin(&arch, progress, progress_arg, "archiving", 0);
  snapshot_meter_report(&arch, 0, 0, false);
  /* A local file is written as the archive is produced; an upload needs
   * its length first. */
  struct snapshot_limits lim = snapshot_limits_or_defaults(&spec->limits);
  r = snapshot_export_open(&s.ex, sb, &ex, spec->compression, &lim,
                           spec->type == SNAPSHOT_LOCAL, e);
  snapshot_excludes_free(&ex);
  if (r == 0) {
    if (s.ex.total)
      log_debug("snapshot: sandboxd archived %" PRIu64 " bytes in %.3f s",
                s.ex.total, (double)(sbx_now_ns() - t0) / 1e9);
    else
      log_debug("snapshot: sandboxd started a streamed export in %.3f s",
                (double)(sbx_now_ns() - t0) / 1e9);
    t0 = sbx_now_ns();
    arch.total = s.ex.total;
    snapshot_meter_report(&arch, s.ex.total, 0, true);
    sbx_sha256_init(&s.sha);
    snapshot_meter_begin(&s.prog, progress, progress_arg, "saving", s.ex.total);
    if (spec->type == SNAPSHOT_LOCAL)
      r = snapshot_local_save(spec, &s, file, out, e);
    else
      r = snapshot_remote_save(spec, &s, file, out, e);
    uint8_t d[SBX_SHA256_BYTES];
    sbx_sha256_final(&s.sha, d);
    sbx_sha256_hex(d, out->sha256);
  }
  if (r == 0) {
    /* The whole archive was read: the reader wrote these before its last
     * chunk, and writes nothing more. */
    out->skipped = TAKE_PTR(s.ex.skipped);
    out->nskipped = s.ex.nskipped;
    out->skipped_total = s.ex.skipped_total;
    s.ex.nskipped = 0;
  }
  snapshot_export_close(&s.ex);
  if (r < 0) {
    snapshot_record_clear(out);
    return r;
  }
  log_debug("snapshot: stored %s in %.3f s", out->location,
            (double)(sbx_now_ns() - t0) / 1e9);
  snapshot_meter_report(&s.prog, s.ex.off, 0, true);
  out->type = spec->type;
  out->size = s.ex.off;
  (void)snprintf(out->version, sizeof(out->version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  return 0;
}
