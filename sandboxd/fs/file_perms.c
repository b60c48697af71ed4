/* Owners and modes: FileChmod and FileChown (recursively when asked), and
 * the checks and the chmod that never follows a link which FileWrite and
 * FileMkdir use too. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/users/userdb.h"
#include "shared/cleanup.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6, the same number on every arch */
#endif

/* Resolves USER and GROUP (names or numbers; empty: unchanged, -1) and
 * checks that sandboxd may set them: root may set any, others only their
 * own ids (a no-op the kernel allows). */
int files_owner_ids(struct rpc_call *c, const char *user, const char *group,
                    uid_t *uid, gid_t *gid) {
  *uid = (uid_t)-1;
  *gid = (gid_t)-1;
  if (user && *user) {
    struct userdb_user u;
    int r = userdb_user(NULL, user, &u);
    if (r == -ENOENT)
      return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "unknown user \"%s\"", user);
    if (r < 0)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, -r, "invalid user \"%s\"", user);
    *uid = u.uid;
  }
  if (group && *group) {
    int r = userdb_group(NULL, group, gid);
    if (r == -ENOENT)
      return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "unknown group \"%s\"", group);
    if (r < 0)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, -r, "invalid group \"%s\"",
                      group);
  }
  if (!c->d->is_root && ((*uid != (uid_t)-1 && *uid != c->d->uid) ||
                         (*gid != (gid_t)-1 && *gid != c->d->gid)))
    return rpc_fail(c, SBX_PERMISSION_DENIED, EPERM,
                    "changing the owner or group needs sandboxd to run as "
                    "root");
  return 0;
}

/* Checks a requested permission MODE. */
int files_check_mode(struct rpc_call *c, uint32_t mode) {
  if (mode & ~07777u)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "mode %#o has bits beyond 07777", mode);
  if ((mode & (S_ISUID | S_ISGID)) && !c->d->is_root)
    return rpc_fail(c, SBX_PERMISSION_DENIED, EPERM,
                    "setuid and setgid bits need sandboxd to run as root");
  return 0;
}

/* chmod of NAME in DIR_FD without following it: fchmodat2 with
 * AT_SYMLINK_NOFOLLOW (-EOPNOTSUPP for a symlink); before Linux 6.6, an fd
 * opened O_NOFOLLOW (then regular files and directories only). */
int files_chmod_nofollow(int dir_fd, const char *name, mode_t mode) {
  if (syscall(SYS_fchmodat2, dir_fd, name, mode, AT_SYMLINK_NOFOLLOW) == 0)
    return 0;
  if (errno != ENOSYS && errno != EPERM)
    return -errno;
  int saved = errno;
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return -errno;
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return saved == EPERM ? -EPERM : -EOPNOTSUPP;
  _cleanup_close_ int fd = openat(
      dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return errno == ELOOP ? -EOPNOTSUPP : -errno;
  return fchmod(fd, mode) < 0 ? -errno : 0;
}

/* A files_walk_fn: the mode ARG on an entry, skipping symbolic links. */
static int chmod_one(int dir_fd, const char *name, const struct stat *st,
                     void *arg) {
  if (S_ISLNK(st->st_mode))
    return 0; /* a link has no mode of its own; never follow it */
  return files_chmod_nofollow(dir_fd, name, *(mode_t *)arg);
}

struct owner {
  uid_t uid;
  gid_t gid;
};

/* A files_walk_fn: the owner ARG on an entry, a link itself included. */
static int chown_one(int dir_fd, const char *name, const struct stat *st,
                     void *arg) {
  (void)st;
  const struct owner *o = arg;
  return fchownat(dir_fd, name, o->uid, o->gid, AT_SYMLINK_NOFOLLOW) < 0
             ? -errno
             : 0;
}

/* Applies FN to NAME in DFD (stat ST, the client's PATH) and, when
 * RECURSIVE and it is a directory, to everything beneath it first. */
static int apply_tree(struct rpc_call *c, int dfd, const char *name,
                      const struct stat *st, bool recursive, files_walk_fn fn,
                      void *arg, const char *what, const char *path) {
  if (S_ISDIR(st->st_mode) && recursive) {
    int r = files_walk_dir(&c->err, dfd, name, fn, arg, what, path);
    if (r < 0)
      return r;
  }
  int r = fn(dfd, name, st, arg);
  if (r < 0)
    return files_fail_path(c, -r, what, path);
  return 0;
}

/* FileChmod: a mode on a path (not a symbolic link), recursively when
 * asked. */
int rpc_file_chmod(struct rpc_call *c) {
  const Sbx__V1__FileChmod *m = RPC_BODY(c, FILE_CHMOD, file_chmod);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  int r = files_check_mode(c, m->mode);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  _cleanup_close_ int dfd =
      files_open_leaf_parent(c, path, true, &loc, "cannot change the mode of");
  if (dfd < 0)
    return dfd;
  struct stat st;
  if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return files_fail_path(c, errno, "cannot change the mode of", path);
  /* A symlink named by the request itself is refused, not skipped. */
  if (S_ISLNK(st.st_mode))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, ELOOP,
                    "cannot change the mode of \"%s\": it is a symbolic link",
                    path);
  mode_t mode = m->mode;
  r = apply_tree(c, dfd, loc.name, &st, m->recursive, chmod_one, &mode,
                 "cannot change the mode of", path);
  if (r < 0)
    return r;
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_CHMOD);
}

/* FileChown: an owner and group on a path, recursively when asked. */
int rpc_file_chown(struct rpc_call *c) {
  const Sbx__V1__FileChown *m = RPC_BODY(c, FILE_CHOWN, file_chown);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  struct owner o;
  int r = files_owner_ids(c, m->user, m->group, &o.uid, &o.gid);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  _cleanup_close_ int dfd =
      files_open_leaf_parent(c, path, true, &loc, "cannot change the owner of");
  if (dfd < 0)
    return dfd;
  struct stat st;
  if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return files_fail_path(c, errno, "cannot change the owner of", path);
  r = apply_tree(c, dfd, loc.name, &st, m->recursive, chown_one, &o,
                 "cannot change the owner of", path);
  if (r < 0)
    return r;
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_CHOWN);
}
