/* The tree operations: FileMkdir (and mkdir -p), FileRemove (and rm -r)
 * and FileRename, with the recursive walk that removes, changes modes and
 * changes owners without following a symbolic link. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"

/* ---- the recursive walk ---- */

/* One open directory of a recursive walk. */
struct walk_level {
  DIR *dir;
  char *name; /* in its parent; NULL for the top */
  struct stat st;
};

/* Closes the walk's level L and frees its name. */
static void walk_pop(struct walk_level *l) {
  if (l->dir)
    (void)closedir(l->dir);
  free(l->name);
  l->dir = NULL;
  l->name = NULL;
}

/* Walks the tree under the directory TOP (an O_RDONLY|O_DIRECTORY fd, taken),
 * calling FN for every entry beneath it, never following symlinks, at most
 * FILES_MAX_DEPTH levels deep. WHAT and PATH name errors. */
static int walk_tree(struct sbx_error *e, int top, files_walk_fn fn, void *arg,
                     const char *what, const char *path) {
  struct walk_level *stack = calloc(FILES_MAX_DEPTH, sizeof(*stack));
  if (!stack) {
    close(top);
    return -ENOMEM;
  }
  size_t sp = 0;
  int r = 0;
  char eb[128];
  stack[0].dir = fdopendir(top);
  if (!stack[0].dir) {
    r = files_fail_path_e(e, errno, what, path);
    close(top);
    free(stack);
    return r;
  }
  sp = 1;
  while (sp > 0) {
    struct walk_level *l = &stack[sp - 1];
    int dfd = dirfd(l->dir);
    errno = 0;
    struct dirent *de = readdir(l->dir);
    if (!de) {
      if (errno) {
        r = files_fail_path_e(e, errno, what, path);
        break;
      }
      if (sp > 1) {
        struct walk_level *p = &stack[sp - 2];
        r = fn(dirfd(p->dir), l->name, &l->st, arg);
        if (r < 0) {
          r = files_fail_at_e(e, -r, what, path, l->name);
          break;
        }
      }
      walk_pop(l);
      sp--;
      continue;
    }
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    struct stat st;
    if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT)
        continue;
      r = sbx_error_set(e, SBX_OK, errno,
                        "%s \"%s\": cannot stat \"%s\" beneath "
                        "it: %s",
                        what, path, n, sbx_strerror_lc(errno, eb, sizeof(eb)));
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      if (sp == FILES_MAX_DEPTH) {
        r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, ELOOP,
                          "%s \"%s\": more than %d "
                          "directory levels",
                          what, path, FILES_MAX_DEPTH);
        break;
      }
      int cfd = openat(
          dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (cfd < 0) {
        if (errno == ENOENT)
          continue;
        r = sbx_error_set(e, SBX_OK, errno,
                          "%s \"%s\": cannot open \"%s\" beneath "
                          "it: %s",
                          what, path, n,
                          sbx_strerror_lc(errno, eb, sizeof(eb)));
        break;
      }
      struct walk_level *cl = &stack[sp];
      cl->name = strdup(n);
      cl->dir = cl->name ? fdopendir(cfd) : NULL;
      if (!cl->dir) {
        r = -errno;
        close(cfd);
        free(cl->name);
        cl->name = NULL;
        break;
      }
      cl->st = st;
      sp++;
      continue;
    }
    r = fn(dfd, n, &st, arg);
    if (r < 0) {
      r = files_fail_at_e(e, -r, what, path, n);
      break;
    }
  }
  while (sp > 0)
    walk_pop(&stack[--sp]);
  free(stack);
  return r;
}

/* Walks the directory NAME in DIR_FD, opened without following it, as
 * walk_tree does. */
int files_walk_dir(struct sbx_error *e, int dir_fd, const char *name,
                   files_walk_fn fn, void *arg, const char *what,
                   const char *path) {
  int top =
      openat(dir_fd, name,
             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (top < 0)
    return files_fail_path_e(e, errno, what, path);
  return walk_tree(e, top, fn, arg, what, path);
}

/* ---- mkdir ---- */

/* mkdir -p of REL beneath BASE: each missing level is made with MODE in its
 * parent (an fd opened beneath BASE), then opened beneath BASE again, so a
 * symlink on the way may lead elsewhere inside but never out. Returns an
 * O_PATH fd of REL. */
int files_mkdir_p(struct rpc_call *c, int base, const char *rel, mode_t mode,
                  const char *path) {
  struct sbx_error e = {0};
  int fd = sbxd_openat(base, rel, O_PATH | O_DIRECTORY, 0, &e);
  if (fd >= 0 || fd != -ENOENT)
    return fd >= 0 ? fd : files_fail_path(c, -fd, "cannot create", path);
  _cleanup_close_ int cur =
      files_open_beneath(c, base, ".", O_PATH | O_DIRECTORY, 0, NULL, path);
  if (cur < 0)
    return cur;
  char prefix[SBX_PATH_MAX];
  size_t rl = strlen(rel);
  if (rl >= sizeof(prefix))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                    "path \"%s\" is too long", path);
  memcpy(prefix, rel, rl + 1);
  size_t i = 0;
  while (i < rl) {
    size_t end = i;
    while (end < rl && prefix[end] != '/')
      end++;
    prefix[end] = '\0';
    if (mkdirat(cur, prefix + i, mode) < 0 && errno != EEXIST)
      return files_fail_path(c, errno, "cannot create", path);
    int next = files_open_beneath(c, base, prefix, O_PATH | O_DIRECTORY, 0,
                                  "cannot create", path);
    if (next < 0)
      return next;
    close(cur);
    cur = next;
    if (end < rl)
      prefix[end] = '/';
    i = end + 1;
  }
  return TAKE_FD(cur);
}

/* FileMkdir: a directory with the mode asked, and with parents its
 * missing parents; an existing one is fine with parents. */
int rpc_file_mkdir(struct rpc_call *c) {
  const Sbx__V1__FileMkdir *m = RPC_BODY(c, FILE_MKDIR, file_mkdir);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  int r = files_check_mode(c, m->mode);
  if (r < 0)
    return r;
  mode_t mode = m->mode ? m->mode : 0755;
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, path, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (files_is_base(&loc)) {
    if (!m->parents)
      return files_fail_path(c, EEXIST, "cannot create directory", path);
    return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_MKDIR);
  }
  _cleanup_close_ int dfd = -1;
  if (m->parents)
    dfd = files_mkdir_p(c, loc.base_fd, loc.parent, 0755, path);
  else
    dfd = files_open_beneath(c, loc.base_fd, loc.parent, O_PATH | O_DIRECTORY,
                             0, "cannot create directory", path);
  if (dfd < 0)
    return dfd;
  if (mkdirat(dfd, loc.name, 0700) < 0) {
    int err = errno;
    struct stat st;
    if (err == EEXIST && m->parents) {
      /* An existing directory, or a link to one inside, is fine. */
      _cleanup_close_ int fd =
          files_open_beneath(c, loc.base_fd, loc.rel, O_PATH | O_DIRECTORY, 0,
                             "cannot create directory", path);
      if (fd >= 0)
        return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_MKDIR);
      if (fd != -ENOTDIR)
        return fd;
      sbx_error_clear(&c->err);
    }
    if (err == EEXIST &&
        fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISDIR(st.st_mode))
      return rpc_fail(c, SBX_ALREADY_EXISTS, EEXIST,
                      "cannot create directory \"%s\": a file of that name "
                      "exists",
                      path);
    return files_fail_path(c, err, "cannot create directory", path);
  }
  r = files_chmod_nofollow(dfd, loc.name, mode);
  if (r < 0)
    return files_fail_at_e(&c->err, -r, "cannot change the mode of", path,
                           NULL);
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_MKDIR);
}

/* ---- remove ---- */

/* A files_walk_fn: removes an entry (a directory once it is empty). */
static int remove_one(int dir_fd, const char *name, const struct stat *st,
                      void *arg) {
  (void)arg;
  return unlinkat(dir_fd, name, S_ISDIR(st->st_mode) ? AT_REMOVEDIR : 0) < 0
             ? -errno
             : 0;
}

/* rm -r of the directory NAME in DIR_FD, never following a link. */
int files_remove_tree(int dir_fd, const char *name, const char *path,
                      struct sbx_error *e) {
  int r =
      files_walk_dir(e, dir_fd, name, remove_one, NULL, "cannot remove", path);
  if (r == 0 && unlinkat(dir_fd, name, AT_REMOVEDIR) < 0)
    r = files_fail_path_e(e, errno, "cannot remove", path);
  return r;
}

/* FileRemove: a file, a link or an empty directory; a directory and
 * everything beneath it when recursive. */
int rpc_file_remove(struct rpc_call *c) {
  const Sbx__V1__FileRemove *m = RPC_BODY(c, FILE_REMOVE, file_remove);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  Sbx__V1__FileRemoveReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__FileRemoveReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__file_remove_reply__init(rep);
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, path, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (files_is_base(&loc))
    return files_refuse_base(c, &loc, "cannot remove", path);
  _cleanup_close_ int dfd = -1;
  struct stat st;
  int err = files_lstat_leaf(&loc, &dfd, &st);
  if ((err == ENOENT || err == ENOTDIR) && m->missing_ok) {
    rep->removed = false;
  } else if (err) {
    return files_fail_path(c, err, "cannot remove", path);
  } else {
    if (S_ISDIR(st.st_mode) && m->recursive) {
      r = files_walk_dir(&c->err, dfd, loc.name, remove_one, NULL,
                         "cannot remove", path);
      if (r < 0)
        return r;
    }
    if (unlinkat(dfd, loc.name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0) {
      if (errno == ENOTEMPTY)
        return rpc_fail(c, SBX_CONFLICT, ENOTEMPTY,
                        "cannot remove \"%s\": directory not empty (use "
                        "recursive)",
                        path);
      return files_fail_path(c, errno, "cannot remove", path);
    }
    rep->removed = true;
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_REMOVE;
  c->resp->file_remove = rep;
  return 0;
}

/* ---- rename ---- */

/* FileRename: a move within one root (the workspace or one grant), not
 * over an existing target unless overwrite. */
int rpc_file_rename(struct rpc_call *c) {
  const Sbx__V1__FileRename *m = RPC_BODY(c, FILE_RENAME, file_rename);
  if (!m)
    return rpc_no_body(c);
  const char *from = m->from ? m->from : "";
  const char *to = m->to ? m->to : "";
  struct sbxd_loc lf, lt;
  int r = sbxd_locate(c->d, from, true, &lf, &c->err);
  if (r < 0)
    return r;
  r = sbxd_locate(c->d, to, true, &lt, &c->err);
  if (r < 0)
    return r;
  if (files_is_base(&lf))
    return files_refuse_base(c, &lf, "cannot move", from);
  if (files_is_base(&lt))
    return files_refuse_base(c, &lt, "cannot move onto", to);
  if (lf.grant != lt.grant)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EXDEV,
                    "cannot move \"%s\" to \"%s\": they are in different "
                    "roots (workspace or grants)",
                    from, to);
  _cleanup_close_ int ff = files_open_beneath(
      c, lf.base_fd, lf.parent, O_PATH | O_DIRECTORY, 0, "cannot move", from);
  if (ff < 0)
    return ff;
  _cleanup_close_ int tf =
      files_open_beneath(c, lt.base_fd, lt.parent, O_PATH | O_DIRECTORY, 0,
                         "cannot move onto", to);
  if (tf < 0)
    return tf;
  int rc =
      renameat2(ff, lf.name, tf, lt.name, m->overwrite ? 0 : RENAME_NOREPLACE);
  if (rc < 0 && !m->overwrite && (errno == EINVAL || errno == ENOSYS)) {
    /* No RENAME_NOREPLACE on this filesystem: check, then rename. */
    struct stat st;
    if (fstatat(tf, lt.name, &st, AT_SYMLINK_NOFOLLOW) == 0)
      errno = EEXIST;
    else
      rc = renameat(ff, lf.name, tf, lt.name);
  }
  if (rc < 0) {
    int err = errno;
    if (err == EXDEV)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EXDEV,
                      "cannot move \"%s\" to \"%s\": they are on different "
                      "filesystems",
                      from, to);
    if (err == EEXIST || (err == ENOTEMPTY && !m->overwrite))
      return rpc_fail(c, SBX_ALREADY_EXISTS, EEXIST,
                      "cannot move \"%s\" to \"%s\": the target exists", from,
                      to);
    if (err == EINVAL)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "cannot move \"%s\" into itself (\"%s\")", from, to);
    if (err == ENOENT) {
      struct stat st;
      if (fstatat(ff, lf.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return files_fail_path(c, ENOENT, "cannot move", from);
    }
    return files_fail_path(c, err, "cannot move onto", to);
  }
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_RENAME);
}
