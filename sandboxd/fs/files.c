/* What the file RPCs share: errors that name the client's path, opening
 * beneath a base, the FileInfo of a reply. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/fs/resolve.h"

/* Fills C's error for ERR (positive) met on the client's PATH and returns
 * -ERR. WHAT names the operation ("cannot remove") or is NULL. */
int files_fail_path_e(struct sbx_error *e, int err, const char *what,
                      const char *path) {
  const char *w = what ? what : "";
  const char *sep = what ? " " : "";
  char b[128];
  switch (err) {
  case ENOENT:
    return sbx_error_set(e, SBX_NOT_FOUND, err,
                         "%s%s\"%s\": no such file or "
                         "directory",
                         w, sep, path);
  case EXDEV:
    return sbx_error_set(e, SBX_PERMISSION_DENIED, err,
                         "path \"%s\" escapes the workspace root", path);
  case ELOOP:
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, err,
                         "%s%s\"%s\": a symbolic link is in the way", w, sep,
                         path);
  case ENOTDIR:
    return sbx_error_set(
        e, SBX_INVALID_ARGUMENT, err,
        "%s%s\"%s\": a component of the path is not a directory", w, sep, path);
  case EISDIR:
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, err,
                         "%s%s\"%s\": is a directory", w, sep, path);
  case EEXIST:
    return sbx_error_set(e, SBX_ALREADY_EXISTS, err,
                         "%s%s\"%s\": already exists", w, sep, path);
  case ENOTEMPTY:
    return sbx_error_set(e, SBX_CONFLICT, err,
                         "%s%s\"%s\": directory not empty", w, sep, path);
  default:
    return sbx_error_set(e, SBX_OK, err, "%s%s\"%s\": %s", w, sep, path,
                         sbx_strerror_lc(err, b, sizeof(b)));
  }
}

/* Fills E for ERR (positive) met while changing PATH itself (BENEATH NULL)
 * or the entry BENEATH inside it, and returns -ERR: EMLINK and EAGAIN as
 * files_sole_link means them, anything else as files_fail_path_e would. */
int files_fail_at_e(struct sbx_error *e, int err, const char *what,
                    const char *path, const char *beneath) {
  char in[NAME_MAX + 32] = "it"; /* BENEATH is one component */
  if (beneath)
    (void)snprintf(in, sizeof(in), "\"%s\" beneath it", beneath);
  char b[128];
  switch (err) {
  case EMLINK:
    return sbx_error_set(e, SBX_PERMISSION_DENIED, err,
                         "%s \"%s\": %s has other hard links, which may lie "
                         "outside the workspace, and would change through "
                         "them too",
                         what, path, in);
  case EAGAIN:
    return sbx_error_set(e, SBX_CONFLICT, err,
                         "%s \"%s\": %s changed while it was being opened; "
                         "try again",
                         what, path, in);
  default:
    if (!beneath)
      return files_fail_path_e(e, err, what, path);
    return sbx_error_set(e, SBX_OK, err, "%s \"%s\": failed on %s: %s", what,
                         path, in, sbx_strerror_lc(err, b, sizeof(b)));
  }
}

/* files_fail_path_e into C's error. */
int files_fail_path(struct rpc_call *c, int err, const char *what,
                    const char *path) {
  return files_fail_path_e(&c->err, err, what, path);
}

/* sbxd_openat that names the client's PATH in its error. */
int files_open_beneath(struct rpc_call *c, int base, const char *rel, int flags,
                       mode_t mode, const char *what, const char *path) {
  struct sbx_error e = {0};
  int fd = sbxd_openat(base, rel, flags, mode, &e);
  if (fd < 0)
    return files_fail_path(c, -fd, what, path);
  return fd;
}

/* Locates PATH and opens its parent directory (O_PATH); fills LOC. */
int files_open_leaf_parent(struct rpc_call *c, const char *path, bool for_write,
                           struct sbxd_loc *loc, const char *what) {
  int r = sbxd_locate(c->d, path, for_write, loc, &c->err);
  if (r < 0)
    return r;
  return files_open_beneath(c, loc->base_fd, loc->parent, O_PATH | O_DIRECTORY,
                            0, what, path);
}

/* Opens LOC's parent into *DFD and lstats the leaf into ST: 0, or the
 * errno (positive) of what failed; a missing parent is ENOENT or ENOTDIR,
 * as for a missing leaf. */
int files_lstat_leaf(const struct sbxd_loc *loc, int *dfd, struct stat *st) {
  struct sbx_error e = {0};
  *dfd = sbxd_openat(loc->base_fd, loc->parent, O_PATH | O_DIRECTORY, 0, &e);
  if (*dfd < 0)
    return -*dfd;
  if (fstatat(*dfd, loc->name, st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno;
  return 0;
}

/* Whether NAME in DIR_FD, a file the caller holds open (ST: its fstat, made
 * just after the open), is its inode's only name: 0; -EMLINK when the inode
 * has other links (they may lie outside the workspace, and a change made
 * through one name shows through all); -EAGAIN when NAME no longer names
 * it. Directories pass: they cannot be hard-linked.
 *
 * A rename over NAME drops the old inode's count before the name moves on,
 * so for a moment NAME shows the inode with its other links only, maybe
 * all outside. Renaming NAME onto itself does nothing but wait for the
 * directory's lock, so any such rename has finished when NAME is looked at
 * again; an inode linked back meanwhile has a new ctime (fine-grained once
 * ST queried it, since Linux 6.13 on ext4, xfs, btrfs and tmpfs; within one
 * clock tick before that). */
int files_sole_link(int dir_fd, const char *name, const struct stat *st) {
  if (S_ISDIR(st->st_mode))
    return 0;
  if (st->st_nlink > 1)
    return -EMLINK;
  struct stat now;
  if (renameat(dir_fd, name, dir_fd, name) < 0 ||
      fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? -EAGAIN : -errno;
  if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
    return -EAGAIN;
  if (now.st_nlink > 1)
    return -EMLINK;
  if (now.st_ctim.tv_sec != st->st_ctim.tv_sec ||
      now.st_ctim.tv_nsec != st->st_ctim.tv_nsec)
    return -EAGAIN;
  return 0;
}

/* Refuses WHAT on the base LOC itself, which no RPC may remove, move or
 * write over. */
int files_refuse_base(struct rpc_call *c, const struct sbxd_loc *loc,
                      const char *what, const char *path) {
  return rpc_fail(c, SBX_INVALID_ARGUMENT, EBUSY,
                  "%s \"%s\": it is the root "
                  "of the %s",
                  what, path, loc->grant < 0 ? "workspace" : "grant");
}

/* The reply's type of a file of mode M. */
Sbx__V1__FileType files_type(mode_t m) {
  if (S_ISREG(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR;
  if (S_ISDIR(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
  if (S_ISLNK(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK;
  return SBX__V1__FILE_TYPE__FILE_TYPE_OTHER;
}

/* ST's mtime in nanoseconds, saturated at the int64 limits. */
static int64_t mtime_ns(const struct stat *st) {
  int64_t ns;
  if (__builtin_mul_overflow((int64_t)st->st_mtim.tv_sec, (int64_t)1000000000,
                             &ns) ||
      __builtin_add_overflow(ns, (int64_t)st->st_mtim.tv_nsec, &ns))
    return st->st_mtim.tv_sec < 0 ? INT64_MIN : INT64_MAX;
  return ns;
}

/* A FileInfo for NAME in DIR_FD (stat ST), reported as REPLY_PATH; its link
 * target is read for a symlink. NULL on OOM. */
Sbx__V1__FileInfo *files_info(struct sbx_arena *a, int dir_fd, const char *name,
                              const struct stat *st, const char *reply_path) {
  Sbx__V1__FileInfo *fi = sbx_arena_new(a, Sbx__V1__FileInfo);
  if (!fi)
    return NULL;
  sbx__v1__file_info__init(fi);
  fi->path = sbx_arena_strdup(a, reply_path);
  if (!fi->path)
    return NULL;
  fi->type = files_type(st->st_mode);
  fi->mode = st->st_mode & 07777;
  fi->uid = st->st_uid;
  fi->gid = st->st_gid;
  fi->size = st->st_size > 0 ? (uint64_t)st->st_size : 0;
  fi->mtime_ns = mtime_ns(st);
  fi->nlink = (uint32_t)st->st_nlink;
  if (S_ISLNK(st->st_mode)) {
    char t[SBX_PATH_MAX];
    ssize_t n = readlinkat(dir_fd, name, t, sizeof(t));
    if (n >= 0 && (size_t)n < sizeof(t)) {
      fi->link_target = sbx_arena_strndup(a, t, (size_t)n);
      if (!fi->link_target)
        return NULL;
    }
  }
  return fi;
}
