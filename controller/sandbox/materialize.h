/* Materialization: writing a manifest into a sandbox through sandboxd.
 *
 * Order: users and groups first (UsersEnsure), then entries, parents before
 * children, up to limits.manifest_entries at once; a local_dir copies its
 * files up to limits.local_dir_files at once (when it is copied file by
 * file); then each entry's group (FileChown) and permissions (FileChmod,
 * the SDK's 0755 when absent), children before parents; then the
 * environment. local_dir and git_repo trees go as one tar through the
 * archive RPCs when sandboxd serves them (the fast path), else file by
 * file.
 *
 * local_file and local_dir sources are resolved against BASE_DIR and must
 * lie beneath it or beneath one of the manifest's extra_path_grants; they
 * are opened without following any symlink (RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS), so nothing else on the host is readable through a
 * manifest. git_repo runs the host's git (clone into a temp dir, removed
 * afterwards) and copies the result in.
 *
 * A failure returns the first error, naming the entry; the caller closes a
 * sandbox it just created, so no half-built sandbox is left behind. */
#ifndef SBX_MATERIALIZE_H
#define SBX_MATERIALIZE_H

#include <stdbool.h>
#include <stddef.h>

#include "controller/backend/backend.h"
#include "controller/config/manifest.h"
#include "shared/errors.h"

#define MATERIALIZE_DEFAULT_LIMIT 4 /* the SDK's for both limits */
#define MATERIALIZE_MAX_THREADS 64  /* what "0, unlimited" means */

struct materialize_limits {
  unsigned manifest_entries; /* 0: unlimited (MATERIALIZE_MAX_THREADS) */
  unsigned local_dir_files;
};

struct materialize_options {
  struct materialize_limits limits;
  const char *base_dir; /* local sources; NULL: the current directory */
  bool no_archive;      /* copy trees file by file even with archive RPCs */
  bool progress;        /* show large copies' progress on stderr */
};

/* The SDK's defaults: 4 and 4. */
struct materialize_limits materialize_default_limits(void);

/* Parses "manifest_entries=N,local_dir_files=N" (either or both; N >= 0,
 * 0 for unlimited) over *OUT. */
int materialize_parse_limits(const char *spec, struct materialize_limits *out,
                             struct sbx_error *e);

/* Materializes all of M into SB: users, groups, entries, environment. */
int materialize_manifest(struct sandbox *sb, const struct manifest *m,
                         const struct materialize_options *o,
                         struct sbx_error *e);

/* Materializes only the entries of M at the N indices IDX (an additive
 * change to a live sandbox). */
int materialize_entries(struct sandbox *sb, const struct manifest *m,
                        const size_t *idx, size_t n,
                        const struct materialize_options *o,
                        struct sbx_error *e);

#endif
