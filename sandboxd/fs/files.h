/* File RPCs: stat, read, write, list, mkdir, remove, rename, chmod, chown and
 * exists. All are blocking (they run on the worker pool).
 *
 * Every client path is checked by sbxd_locate and opened beneath the
 * workspace root or its grant with openat2 (RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS), so neither ".." nor a symlink leads outside.
 * Operations on the leaf that must not follow it work on the parent
 * directory's fd with the *at() calls; the leaf is then a single component
 * (never "." or "..") and AT_SYMLINK_NOFOLLOW / O_NOFOLLOW keep it from being
 * followed. Recursive walks go from directory fd to directory fd, opening
 * each child with O_NOFOLLOW, so they never leave the tree either.
 *
 * Symlinks at the leaf:
 *   stat, exists          report the link itself (lstat)
 *   read, list            follow it (openat2 keeps the target beneath)
 *   write                 refused unless atomic (the rename replaces the link)
 *   mkdir -p              an existing link to a directory counts as one
 *   remove, rename, chown act on the link itself
 *   chmod                 refused (a link has no mode of its own); skipped
 *                         when recursive
 * Symlinks met while recursing (list, remove, chmod, chown) are never
 * followed.
 *
 * Hard links: no RPC changes an inode that has other names, which may lie
 * outside the workspace (a file linked in from outside where the two share
 * a filesystem); reading one is what its link already allows.
 *   write            a whole-file write replaces the file (a new inode, the
 *                    old mode without setuid/setgid, as root the old owner);
 *                    an append or a write at an offset is refused
 *                    (PERMISSION_DENIED), as it would need the old data
 *                    copied from a file shared with who knows what
 *   chmod, chown     refused (PERMISSION_DENIED), also for such an entry met
 *                    while recursing; the tree is checked first, so a refused
 *                    request changes nothing unless the tree changes under it
 * Refused even when every other name is inside the workspace: a scan for
 * them cannot hold against a workload that moves its links while it runs,
 * and costs a walk of the workspace. Whether the inode has other names is
 * decided on the fd that is then changed (files_sole_link in
 * files_internal.h), after any rename over its name has finished. */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H

#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/rpc/rpc.h"

int rpc_file_stat(struct rpc_call *c);
int rpc_file_read(struct rpc_call *c);
int rpc_file_write(struct rpc_call *c);
int rpc_file_list(struct rpc_call *c);
int rpc_file_mkdir(struct rpc_call *c);
int rpc_file_remove(struct rpc_call *c);
int rpc_file_rename(struct rpc_call *c);
int rpc_file_chmod(struct rpc_call *c);
int rpc_file_chown(struct rpc_call *c);
int rpc_file_exists(struct rpc_call *c);

/* Helpers the patch and archive code share with the file RPCs. */

#define FILES_MAX_DEPTH 256 /* directory levels a recursive RPC descends */

/* Fills C's error for ERR (positive) met on the client's PATH and returns
 * -ERR. WHAT names the operation ("cannot remove") or is NULL. */
int files_fail_path(struct rpc_call *c, int err, const char *what,
                    const char *path);
/* rm -r of the directory NAME in DIR_FD, never following a symbolic link,
 * at most FILES_MAX_DEPTH levels deep; PATH names it in errors. 0 or -errno. */
int files_remove_tree(int dir_fd, const char *name, const char *path,
                      struct sbx_error *e);
/* mkdir -p of REL beneath BASE (each level opened beneath BASE again, so
 * no symlink leads out); returns an O_PATH fd of REL. PATH names it in
 * errors. */
int files_mkdir_p(struct rpc_call *c, int base, const char *rel, mode_t mode,
                  const char *path);
/* Writes all of DATA at OFF (appending when OFF < 0); 0 or -errno. */
int files_write_all(int fd, const uint8_t *data, size_t len, int64_t off);

#endif
