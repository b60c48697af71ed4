/* Workspace path rules.
 *
 * Paths from a client or a model are workspace-relative POSIX paths, or
 * absolute paths beneath an explicit grant. These functions are pure string
 * work; the file RPCs then resolve the result beneath an open directory fd
 * (openat2 RESOLVE_BENEATH), so symlinks cannot lead out either. */
#ifndef SBX_PATH_H
#define SBX_PATH_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/errors.h"

#define SBX_PATH_MAX 4096 /* bytes, including the NUL */
#define SBX_NAME_MAX 255  /* bytes in one component */

enum {
  /* Refuse every ".." segment, even one that does not escape (manifest keys).
   */
  SBX_PATH_NO_DOTDOT = 1 << 0,
  /* Refuse "\" and Windows drive prefixes such as "C:" (manifest paths). */
  SBX_PATH_POSIX_ONLY = 1 << 1,
  /* Accept "" as the root (tool paths); otherwise an empty path is refused. */
  SBX_PATH_EMPTY_IS_ROOT = 1 << 2,
};

/* Normalizes the relative path IN (LEN bytes, may hold NUL to be refused)
 * into OUT (OUTSZ bytes): "./a//b/" becomes "a/b", "a/../b" becomes "b", and
 * the root is ".". Refuses with -EINVAL: an absolute path, a ".." that climbs
 * above the start, an empty path (unless SBX_PATH_EMPTY_IS_ROOT), a NUL byte;
 * with -ENAMETOOLONG: a path or component over the limits. E may be NULL. */
int sbx_path_normalize_rel(const char *in, size_t len, char *out, size_t outsz,
                           unsigned flags, struct sbx_error *e);

/* Normalizes an absolute path: collapses "//", "." and ".." (never above /). */
int sbx_path_normalize_abs(const char *in, size_t len, char *out, size_t outsz,
                           struct sbx_error *e);

struct sbx_grant {
  char *path; /* absolute, normalized, not "/" */
  bool read_only;
};

/* Where a path lands: the workspace (grant == -1) or grants[grant], with REL
 * the normalized path relative to that root ("." for the root itself). */
struct sbx_resolved {
  int grant;
  char rel[SBX_PATH_MAX];
};

/* Resolves IN against the workspace whose absolute root is ROOT and the
 * GRANTS (longest match wins). A relative IN is workspace-relative. An
 * absolute IN under ROOT becomes workspace-relative; under a grant it maps
 * to that grant; anything else is -EACCES ("escapes the workspace root").
 * FOR_WRITE on a read-only grant is -EROFS. */
int sbx_path_resolve(const char *root, const struct sbx_grant *grants,
                     size_t ngrants, const char *in, size_t len, bool for_write,
                     struct sbx_resolved *out, struct sbx_error *e);

/* Joins two normalized paths ("." for the root) into OUT. */
int sbx_path_join(const char *a, const char *b, char *out, size_t outsz);

/* True when CHILD equals PARENT or lies beneath it (component-wise). */
bool sbx_path_is_under(const char *parent, const char *child);

#endif
