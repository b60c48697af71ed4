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

/* Opens NAME in DIR_FD without following it (O_PATH) and fills ST: an fd
 * of an inode that had no name but NAME when it was checked
 * (files_sole_link), so a mode or owner set through it changes nothing
 * outside; or a negative errno. A name swapped after the check does not
 * matter: the change goes through the fd. */
static int open_sole(int dir_fd, const char *name, struct stat *st) {
  _cleanup_close_ int fd =
      openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  if (fstat(fd, st) < 0)
    return -errno;
  int r = files_sole_link(dir_fd, name, st);
  if (r < 0)
    return r;
  return TAKE_FD(fd);
}

/* chmod of NAME in DIR_FD without following it, refused (-EMLINK) when its
 * inode has other links: through an O_PATH fd with fchmodat2's
 * AT_EMPTY_PATH (-EOPNOTSUPP for a symlink); before Linux 6.6 (or where
 * seccomp refuses fchmodat2), through the same inode opened for reading
 * (then regular files and directories only). */
int files_chmod_nofollow(int dir_fd, const char *name, mode_t mode) {
  struct stat st;
  _cleanup_close_ int fd = open_sole(dir_fd, name, &st);
  if (fd < 0)
    return fd;
  if (S_ISLNK(st.st_mode))
    return -EOPNOTSUPP;
  if (syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0)
    return 0;
  if (errno != ENOSYS && errno != EPERM && errno != EINVAL)
    return -errno;
  int saved = errno;
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return saved == EPERM ? -EPERM : -EOPNOTSUPP;
  _cleanup_close_ int rfd = openat(
      dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (rfd < 0)
    return errno == ELOOP ? -EAGAIN : -errno;
  struct stat now;
  if (fstat(rfd, &now) < 0)
    return -errno;
  if (now.st_dev != st.st_dev || now.st_ino != st.st_ino)
    return -EAGAIN;
  return fchmod(rfd, mode) < 0 ? -errno : 0;
}

/* One change applied to a tree: FN with ARG on each entry, LINKS when it
 * changes symbolic links too, WHAT for messages. */
struct tree_op {
  files_walk_fn fn;
  void *arg;
  bool links;
  const char *what;
};

/* A files_walk_fn: refuses (-EMLINK) an entry with other hard links that
 * the tree_op ARG would change, so that a recursive change is refused
 * before it starts rather than half done. The change itself checks again
 * (open_sole): this pass only spares a refused request its partial work. */
static int check_sole(int dir_fd, const char *name, const struct stat *st,
                      void *arg) {
  (void)dir_fd;
  (void)name;
  const struct tree_op *op = arg;
  if (S_ISDIR(st->st_mode) || (S_ISLNK(st->st_mode) && !op->links))
    return 0;
  return st->st_nlink > 1 ? -EMLINK : 0;
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

/* A files_walk_fn: the owner ARG on an entry, a link itself included,
 * refused (-EMLINK) when its inode has other links. */
static int chown_one(int dir_fd, const char *name, const struct stat *st,
                     void *arg) {
  (void)st;
  const struct owner *o = arg;
  struct stat cur;
  _cleanup_close_ int fd = open_sole(dir_fd, name, &cur);
  if (fd < 0)
    return fd;
  return fchownat(fd, "", o->uid, o->gid, AT_EMPTY_PATH) < 0 ? -errno : 0;
}

/* Applies OP to NAME in DFD (stat ST, the client's PATH) and, when
 * RECURSIVE and it is a directory, to everything beneath it first, once no
 * entry beneath it turned out to have other hard links. */
static int apply_tree(struct rpc_call *c, int dfd, const char *name,
                      const struct stat *st, bool recursive, struct tree_op *op,
                      const char *path) {
  if (S_ISDIR(st->st_mode) && recursive) {
    int r = files_walk_dir(&c->err, dfd, name, check_sole, op, op->what, path);
    if (r == 0)
      r = files_walk_dir(&c->err, dfd, name, op->fn, op->arg, op->what, path);
    if (r < 0)
      return r;
  }
  int r = op->fn(dfd, name, st, op->arg);
  if (r < 0)
    return files_fail_at_e(&c->err, -r, op->what, path, NULL);
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
  struct tree_op op = {chmod_one, &mode, false, "cannot change the mode of"};
  r = apply_tree(c, dfd, loc.name, &st, m->recursive, &op, path);
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
  struct tree_op op = {chown_one, &o, true, "cannot change the owner of"};
  r = apply_tree(c, dfd, loc.name, &st, m->recursive, &op, path);
  if (r < 0)
    return r;
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_CHOWN);
}
