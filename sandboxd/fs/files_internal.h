/* Private to the file RPCs (files.h is the contract), one concern a file:
 *   files.c       errors that name the client's path, opening beneath a
 *                 base, the FileInfo of a reply
 *   file_read.c   FileStat, FileExists, FileRead
 *   file_write.c  FileWrite, files_write_all
 *   file_list.c   FileList
 *   file_tree.c   FileMkdir, FileRemove, FileRename; mkdir -p, rm -r and
 *                 the recursive walk
 *   file_perms.c  FileChmod, FileChown; the owner and mode checks
 * Every function that fails returns a negative errno with C's (or E's)
 * error filled, naming the client's PATH. */
#ifndef SANDBOXD_FILES_INTERNAL_H
#define SANDBOXD_FILES_INTERNAL_H

#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "sandboxd/fs/files.h"
#include "sandboxd/fs/resolve.h"
#include "sandboxd/rpc/rpc.h"
#include "shared/arena.h"
#include "shared/errors.h"

/* A FileRead of at least this many bytes is read into the reply message as
 * it is packed (rpc_bulk) rather than through the arena. */
#define FILES_BULK_MIN (64u << 10)

/* ---- files.c ---- */

/* Fills E for ERR (positive) met on the client's PATH and returns -ERR.
 * WHAT names the operation ("cannot remove") or is NULL. */
int files_fail_path_e(struct sbx_error *e, int err, const char *what,
                      const char *path);
/* Fills E for ERR (positive) met while changing PATH itself (BENEATH NULL)
 * or the entry BENEATH inside it, and returns -ERR; EMLINK and EAGAIN are
 * the refusals of files_sole_link. */
int files_fail_at_e(struct sbx_error *e, int err, const char *what,
                    const char *path, const char *beneath);
/* Whether NAME in DIR_FD, whose open fd the caller holds (ST, its fstat),
 * is its inode's only name: 0, -EMLINK (other hard links: a change would
 * show through them, and they may lie outside the workspace) or -EAGAIN
 * (NAME was changed meanwhile). Directories pass. */
int files_sole_link(int dir_fd, const char *name, const struct stat *st);
/* sbxd_openat of REL beneath BASE; its error names PATH, after WHAT. */
int files_open_beneath(struct rpc_call *c, int base, const char *rel, int flags,
                       mode_t mode, const char *what, const char *path);
/* Locates PATH into LOC and opens its parent directory (O_PATH). */
int files_open_leaf_parent(struct rpc_call *c, const char *path, bool for_write,
                           struct sbxd_loc *loc, const char *what);
/* Whether LOC is its base itself: the workspace root or a grant. */
static inline bool files_is_base(const struct sbxd_loc *loc) {
  return strcmp(loc->rel, ".") == 0;
}
/* Opens LOC's parent into *DFD (O_PATH, -1 when it cannot be opened) and
 * lstats the leaf into ST: 0, or the errno (positive) of what failed. */
int files_lstat_leaf(const struct sbxd_loc *loc, int *dfd, struct stat *st);
/* Refuses WHAT on the base LOC (the client's PATH). */
int files_refuse_base(struct rpc_call *c, const struct sbxd_loc *loc,
                      const char *what, const char *path);
/* The reply's type of a file of mode M. */
Sbx__V1__FileType files_type(mode_t m);
/* A FileInfo in A for NAME in DIR_FD (stat ST), reported as REPLY_PATH,
 * with a symlink's target. NULL on OOM. */
Sbx__V1__FileInfo *files_info(struct sbx_arena *a, int dir_fd, const char *name,
                              const struct stat *st, const char *reply_path);

/* ---- file_tree.c ---- */

/* Called for every entry beneath the top, children before their directory.
 * DIR_FD holds NAME. Returns 0 or a negative errno. */
typedef int (*files_walk_fn)(int dir_fd, const char *name,
                             const struct stat *st, void *arg);
/* Walks the tree under the directory NAME in DIR_FD (NAME not followed),
 * calling FN for every entry beneath it, never following symlinks, at most
 * FILES_MAX_DEPTH levels deep. WHAT and PATH name errors in E. */
int files_walk_dir(struct sbx_error *e, int dir_fd, const char *name,
                   files_walk_fn fn, void *arg, const char *what,
                   const char *path);

/* ---- file_perms.c ---- */

/* Resolves USER and GROUP (names or numbers; empty: unchanged, -1) and
 * checks that sandboxd may set them. */
int files_owner_ids(struct rpc_call *c, const char *user, const char *group,
                    uid_t *uid, gid_t *gid);
/* Checks a requested permission MODE. */
int files_check_mode(struct rpc_call *c, uint32_t mode);
/* chmod of NAME in DIR_FD without following it; 0 or -errno (-EOPNOTSUPP
 * for a symlink, -EMLINK or -EAGAIN as files_sole_link refuses). */
int files_chmod_nofollow(int dir_fd, const char *name, mode_t mode);

#endif
