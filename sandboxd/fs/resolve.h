/* Opening client paths beneath the workspace root or a grant.
 *
 * Every file RPC goes through here: the path is checked with the shared path
 * rules (sbx_path_resolve), then opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) from the root's or the grant's directory fd, so
 * neither ".." nor a symlink can lead outside. Thread-safe. */
#ifndef SANDBOXD_RESOLVE_H
#define SANDBOXD_RESOLVE_H

#include <stdbool.h>
#include <sys/types.h>

#include "sandboxd/rpc/sandboxd.h"
#include "shared/errors.h"

/* Where a client path lands: BASE_FD (borrowed: the root's or a grant's
 * O_PATH fd) and REL beneath it ("." for the base itself). */
struct sbxd_loc {
  int base_fd;
  int grant; /* -1: the workspace */
  char rel[SBX_PATH_MAX];
  char parent[SBX_PATH_MAX]; /* REL's directory, "." when at the base */
  const char *name;          /* REL's last component, into rel; "." for base */
};

/* Checks PATH and fills OUT. FOR_WRITE refuses read-only grants (-EROFS). */
int sbxd_locate(struct sandboxd *d, const char *path, bool for_write,
                struct sbxd_loc *out, struct sbx_error *e);

/* openat2 of REL beneath BASE_FD with FLAGS|O_CLOEXEC and MODE, resolving
 * beneath the base with no magic links. Returns an fd or a negative errno
 * (-EXDEV for an escape attempt, reported in E as "escapes the workspace"). */
int sbxd_openat(int base_fd, const char *rel, int flags, mode_t mode,
                struct sbx_error *e);

/* sbxd_locate + sbxd_openat of the path itself. */
int sbxd_open(struct sandboxd *d, const char *path, int flags, mode_t mode,
              bool for_write, struct sbx_error *e);

/* Opens LOC's parent directory (O_PATH|O_DIRECTORY) so the leaf can be used
 * with the *at() calls without following it (lstat, unlink, rename...). */
int sbxd_open_parent(const struct sbxd_loc *loc, struct sbx_error *e);

/* Opens the directory PATH for use as a child's cwd (O_DIRECTORY, not
 * O_PATH, so fchdir works). */
int sbxd_open_dir(struct sandboxd *d, const char *path, struct sbx_error *e);

#endif
