/* Workspace snapshots: the workspace exported by sandboxd as a pax tar
 * (zstd by default), stored in a local directory or at an HTTP URL, and
 * imported back through sandboxd, which checks the archive before it
 * writes anything.
 *
 * Kinds (struct snapshot_spec.type):
 *   local   <base>/<session-id>.tar.zst (.tar uncompressed); base is
 *           spec.base_dir, else $XDG_STATE_HOME/sbx/snapshots (absolute
 *           only), else ~/.local/state/sbx/snapshots; created 0700. Written
 *           to a temporary name in the same directory, fsynced, renamed over
 *           the previous snapshot of the session, and the directory fsynced.
 *   remote  plain HTTP: PUT of the archive (Content-Length known), GET into
 *           a temporary file, HEAD for existence; works with nginx WebDAV
 *           and presigned S3 URLs. spec.url is the object URL, or a prefix
 *           ending in '/' to which "<session-id>.tar.zst" is appended. The
 *           bearer token comes from the environment variable spec.token_env
 *           (default SBX_SNAPSHOT_TOKEN) at each use; when it is unset or
 *           empty no Authorization header is sent (leave it unset for
 *           presigned URLs). The token is never kept.
 *   none    save discards: the record says "none" and nothing is exported.
 *
 * The fingerprint is the SHA-256 of the archive's bytes as stored, version
 * "workspace_tar_sha256_v1". sandboxd's export is deterministic (same tree,
 * same bytes), so the fingerprint of an unchanged workspace equals the
 * snapshot's: snapshot_fingerprint computes it, and snapshot_restore skips a
 * restore when the caller's current fingerprint matches the record's.
 *
 * Records hold no credentials: a remote location is the URL without user,
 * password, query and fragment (a presigned URL's signature stays in the
 * spec); errors name URLs the same way.
 *
 * Errors: 0 or a negative errno, with E (optional) filled for a person:
 *   -EINVAL   a bad spec, session id, URL or exclude
 *   -ENOENT   no snapshot (type none; a missing local file; HTTP 404)
 *   -EACCES   HTTP 401 or 403 ("401 from URL: unauthorized ...")
 *   -EBADMSG  the archive does not match the record's fingerprint or size
 *   -EFBIG    the archive is larger than the input limit
 *   -ENOTSUP  an unknown fingerprint version
 *   -EIO      another HTTP status ("500 from URL: <first line of body>")
 *   transport errors as in http.h, sandboxd's errors as in client.h (a tar
 *   bomb or a "../" member is refused by sandboxd's import, LIMIT_EXCEEDED
 *   or INVALID_ARGUMENT), and file system errnos naming the path.
 *
 * Thread-safety: calls are independent; one sandbox's client may be shared
 * (client.h). Progress callbacks run on the calling thread. */
#ifndef SBX_SNAPSHOT_H
#define SBX_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "controller/backend/backend.h"
#include "shared/errors.h"

#define SNAPSHOT_FINGERPRINT_VERSION "workspace_tar_sha256_v1"
#define SNAPSHOT_TOKEN_ENV "SBX_SNAPSHOT_TOKEN"
#define SNAPSHOT_PRUNE_DAYS 30
/* The default archive limits, sandboxd's: a checkout of a large monorepo
 * (500k files and their directories) fits twice over. The SDK's
 * DEFAULT_SANDBOX_ARCHIVE_LIMITS (100000 members, 1 GiB, 4 GiB) do not. */
#define SNAPSHOT_MAX_INPUT_BYTES (16ull << 30)
#define SNAPSHOT_MAX_EXTRACTED_BYTES (64ull << 30)
#define SNAPSHOT_MAX_MEMBERS 1000000ull

enum snapshot_type {
  SNAPSHOT_NONE = 0,
  SNAPSHOT_LOCAL = 1,
  SNAPSHOT_REMOTE = 2,
};

enum snapshot_compression {
  SNAPSHOT_ZSTD = 0, /* the default */
  SNAPSHOT_UNCOMPRESSED = 1,
};

/* Archive limits of a snapshot, applied by the save (sandboxd refuses an
 * export the restore would refuse, and says why) and by the restore; a 0
 * field takes the default. sandboxd's own limits (its --archive-max-*
 * flags) lower them, never raise them. */
struct snapshot_limits {
  uint64_t max_input_bytes;     /* the archive; default 16 GiB */
  uint64_t max_extracted_bytes; /* its data, holes not counted; 64 GiB */
  uint64_t max_members;         /* default 1000000 */
};

/* Everything borrowed. */
struct snapshot_spec {
  enum snapshot_type type;
  const char *base_dir;  /* local; NULL: the default (see above) */
  const char *url;       /* remote: object URL or prefix ending in '/' */
  const char *token_env; /* remote; NULL: SNAPSHOT_TOKEN_ENV */
  enum snapshot_compression compression;
  /* Workspace-relative paths left out of the archive and kept by a
   * restore's clearing (ephemeral entries, mounts); NULL-terminated, may be
   * NULL. "" or "." stands for the whole workspace. */
  const char *const *excludes;
  struct snapshot_limits limits;
};

struct snapshot_record {
  enum snapshot_type type;
  char *location;   /* new: a local path or a redacted URL; NULL for none */
  char sha256[65];  /* lowercase hex of the archive; "" for none */
  uint64_t size;    /* archive bytes */
  char version[32]; /* SNAPSHOT_FINGERPRINT_VERSION; "" for none */
  /* What a save left out: files with hard links outside the workspace
   * (their contents are not the workspace's). The first (at most 100)
   * paths, new, printable UTF-8, and how many in all. For the person who
   * asked for the snapshot; not part of a session state. */
  char **skipped;
  size_t nskipped;
  uint64_t skipped_total;
};

struct snapshot_progress {
  const char *phase;    /* "archiving", "saving", "loading", "restoring" */
  uint64_t bytes_done;  /* of the archive */
  uint64_t bytes_total; /* 0 when not known yet */
  uint64_t files_done;  /* members, once sandboxd reports them; else 0 */
  double rate;          /* bytes per second since the phase began */
  bool finished;        /* the phase's last call */
};
/* Called at most 4 times a second per phase, plus once when a phase
 * finishes. */
typedef void (*snapshot_progress_fn)(void *arg,
                                     const struct snapshot_progress *p);

struct snapshot_restore_result {
  bool skipped; /* the workspace already matched the fingerprint */
  uint64_t members;
  uint64_t extracted_bytes;
};

/* Frees R's strings and zeroes it; accepts NULL. */
void snapshot_record_clear(struct snapshot_record *r);

/* The default local base directory into *OUT (new). */
int snapshot_default_base_dir(char **out, struct sbx_error *e);

/* Parses "local", "remote", "none" (also "noop") into *OUT; -EINVAL. */
int snapshot_type_parse(const char *s, enum snapshot_type *out);
const char *snapshot_type_name(enum snapshot_type t);

/* Exports SB's workspace (minus SPEC's excludes and EXCLUDES, both
 * NULL-terminated and optional) and stores it as SPEC says, under
 * SESSION_ID (NULL: SB's; letters, digits, '.', '_', '-'; at most 128).
 * On 0 *OUT is a new record (clear it with snapshot_record_clear); on
 * failure *OUT is cleared and nothing was stored (a local save leaves the
 * previous snapshot in place; a failed PUT may leave what the server kept).
 * The archive streams from sandboxd to the file or request body in chunks,
 * hashed on the way. sandboxd builds it within SPEC's limits, which the
 * restore applies: a workspace the restore would refuse (too many entries,
 * too much data) is refused now with LIMIT_EXCEEDED and the reason, and
 * nothing is stored. A file with hard links outside the workspace is left
 * out (its contents are not the workspace's) and named in OUT->skipped for
 * the caller to tell the person. Progress: "archiving" (sandboxd builds the
 * archive; one call before and one after), then "saving" (bytes stored). */
int snapshot_save(const struct snapshot_spec *spec, struct sandbox *sb,
                  const char *session_id, const char *const *excludes,
                  struct snapshot_record *out, snapshot_progress_fn progress,
                  void *progress_arg, struct sbx_error *e);

/* Restores REC into SB's workspace. Skipped (RES->skipped, 0) when
 * CURRENT_FINGERPRINT (hex, may be NULL) equals REC's. Otherwise loads the
 * archive (local file, or a GET into a temporary file bounded by the input
 * limit), checks its size and SHA-256 against REC before anything in the
 * workspace changes (a tampered archive is refused with -EBADMSG), clears
 * the workspace except SPEC's excludes (as the SDK does on resume), and
 * imports it through sandboxd with LIMITS (NULL: SPEC's), which refuses
 * bombs, "../" members and members beneath a symbolic link before it
 * writes (symbolic links are restored as they were saved, wherever they
 * point, and never followed). SPEC may be NULL; a remote restore uses
 * SPEC->url when given (an object URL, or a prefix to which the record's
 * file name is appended: presigned GET URLs differ from PUT ones), else
 * REC's location. RES may be NULL.
 * sandboxd checks the archive only at the end of the import, after the
 * clearing: an archive that matches its record but is refused (a tar bomb,
 * "../", a member beneath a link) leaves the workspace cleared, never
 * written outside.
 * Progress: "loading" (remote download), then "restoring" (bytes sent to
 * sandboxd; files_done set on the final call). */
int snapshot_restore(const struct snapshot_spec *spec,
                     const struct snapshot_record *rec, struct sandbox *sb,
                     const struct snapshot_limits *limits,
                     const char *current_fingerprint,
                     struct snapshot_restore_result *res,
                     snapshot_progress_fn progress, void *progress_arg,
                     struct sbx_error *e);

/* The fingerprint SB's workspace would have as a snapshot with SPEC (its
 * compression and excludes, plus EXCLUDES), into OUT (hex). Exports the
 * workspace and hashes it; nothing is stored. */
int snapshot_fingerprint(const struct snapshot_spec *spec, struct sandbox *sb,
                         const char *const *excludes, char out[65],
                         struct sbx_error *e);

/* Whether REC's archive is there: stat for local, HEAD for remote (with
 * SPEC's URL and token as in snapshot_restore). *EXISTS false on a 404 or a
 * missing file; other failures are errors. SPEC may be NULL. */
int snapshot_exists(const struct snapshot_spec *spec,
                    const struct snapshot_record *rec, bool *exists,
                    struct sbx_error *e);

/* Removes "*.tar.zst" and "*.tar" files in BASE_DIR (NULL: the default)
 * last modified more than MAX_AGE_DAYS (0: 30) days ago, and temporary
 * files of interrupted saves as old. *REMOVED (may be NULL) counts them. A
 * missing directory is not an error. */
int snapshot_prune(const char *base_dir, unsigned max_age_days,
                   unsigned *removed, struct sbx_error *e);

#endif
