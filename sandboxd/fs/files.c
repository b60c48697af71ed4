/* File RPCs: stat, read, write, list, mkdir, remove, rename, chmod, chown and
 * exists.
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
 * followed. */
#include "sandboxd/fs/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandboxd/fs/resolve.h"
#include "sandboxd/users/userdb.h"
#include "shared/cleanup.h"
#include "shared/rand.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6, the same number on every arch */
#endif

/* Directory names a recursive list holds while sorting, across its levels. */
#define FILES_LIST_MAX_NAME_BYTES (64u << 20)
/* Room kept in a list reply for everything but the entries. */
#define FILES_REPLY_SLACK 4096

/* ---- errors ------------------------------------------------------------- */

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

int files_fail_path(struct rpc_call *c, int err, const char *what,
                    const char *path) {
  return files_fail_path_e(&c->err, err, what, path);
}

/* sbxd_openat that names the client's PATH in its error. */
static int open_beneath(struct rpc_call *c, int base, const char *rel,
                        int flags, mode_t mode, const char *what,
                        const char *path) {
  struct sbx_error e = {0};
  int fd = sbxd_openat(base, rel, flags, mode, &e);
  if (fd < 0)
    return files_fail_path(c, -fd, what, path);
  return fd;
}

/* Locates PATH and opens its parent directory (O_PATH); fills LOC. */
static int open_leaf_parent(struct rpc_call *c, const char *path,
                            bool for_write, struct sbxd_loc *loc,
                            const char *what) {
  int r = sbxd_locate(c->d, path, for_write, loc, &c->err);
  if (r < 0)
    return r;
  return open_beneath(c, loc->base_fd, loc->parent, O_PATH | O_DIRECTORY, 0,
                      what, path);
}

static bool is_base(const struct sbxd_loc *loc) {
  return strcmp(loc->rel, ".") == 0;
}

static int refuse_base(struct rpc_call *c, const struct sbxd_loc *loc,
                       const char *what, const char *path) {
  return rpc_fail(c, SBX_INVALID_ARGUMENT, EBUSY,
                  "%s \"%s\": it is the root "
                  "of the %s",
                  what, path, loc->grant < 0 ? "workspace" : "grant");
}

/* ---- replies ------------------------------------------------------------ */

static Sbx__V1__FileType file_type(mode_t m) {
  if (S_ISREG(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR;
  if (S_ISDIR(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
  if (S_ISLNK(m))
    return SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK;
  return SBX__V1__FILE_TYPE__FILE_TYPE_OTHER;
}

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
static Sbx__V1__FileInfo *file_info(struct sbx_arena *a, int dir_fd,
                                    const char *name, const struct stat *st,
                                    const char *reply_path) {
  Sbx__V1__FileInfo *fi = sbx_arena_new(a, Sbx__V1__FileInfo);
  if (!fi)
    return NULL;
  sbx__v1__file_info__init(fi);
  fi->path = sbx_arena_strdup(a, reply_path);
  if (!fi->path)
    return NULL;
  fi->type = file_type(st->st_mode);
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

/* ---- owners and modes --------------------------------------------------- */

/* Resolves USER and GROUP (names or numbers; empty: unchanged, -1) and
 * checks that sandboxd may set them: root may set any, others only their
 * own ids (a no-op the kernel allows). */
static int owner_ids(struct rpc_call *c, const char *user, const char *group,
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
static int check_mode(struct rpc_call *c, uint32_t mode) {
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
static int chmod_nofollow(int dir_fd, const char *name, mode_t mode) {
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

/* ---- directories -------------------------------------------------------- */

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
      open_beneath(c, base, ".", O_PATH | O_DIRECTORY, 0, NULL, path);
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
    int next = open_beneath(c, base, prefix, O_PATH | O_DIRECTORY, 0,
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

/* One open directory of a recursive walk. */
struct walk_level {
  DIR *dir;
  char *name; /* in its parent; NULL for the top */
  struct stat st;
};

/* Called for every entry beneath the top, children before their directory.
 * DIR_FD holds NAME. Returns 0 or a negative errno. */
typedef int (*walk_fn)(int dir_fd, const char *name, const struct stat *st,
                       void *arg);

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
static int walk_tree(struct sbx_error *e, int top, walk_fn fn, void *arg,
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
          r = sbx_error_set(e, SBX_OK, -r,
                            "%s \"%s\": failed on \"%s\" beneath "
                            "it: %s",
                            what, path, l->name,
                            sbx_strerror_lc(-r, eb, sizeof(eb)));
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
      r = sbx_error_set(e, SBX_OK, -r,
                        "%s \"%s\": failed on \"%s\" beneath it: %s", what,
                        path, n, sbx_strerror_lc(-r, eb, sizeof(eb)));
      break;
    }
  }
  while (sp > 0)
    walk_pop(&stack[--sp]);
  free(stack);
  return r;
}

/* ---- stat, exists ------------------------------------------------------- */

int rpc_file_stat(struct rpc_call *c) {
  const Sbx__V1__FileStat *m = RPC_BODY(c, FILE_STAT, file_stat);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  struct sbxd_loc loc;
  _cleanup_close_ int dfd = open_leaf_parent(c, path, false, &loc, NULL);
  if (dfd < 0)
    return dfd;
  struct stat st;
  if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return files_fail_path(c, errno, NULL, path);
  Sbx__V1__FileInfo *fi = file_info(&c->arena, dfd, loc.name, &st, path);
  if (!fi)
    return -ENOMEM;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_STAT;
  c->resp->file_stat = fi;
  return 0;
}

int rpc_file_exists(struct rpc_call *c) {
  const Sbx__V1__FileExists *m = RPC_BODY(c, FILE_EXISTS, file_exists);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  Sbx__V1__FileExistsReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__FileExistsReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__file_exists_reply__init(rep);
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, path, false, &loc, &c->err);
  if (r < 0)
    return r;
  struct sbx_error e = {0};
  _cleanup_close_ int dfd =
      sbxd_openat(loc.base_fd, loc.parent, O_PATH | O_DIRECTORY, 0, &e);
  struct stat st;
  int err = 0;
  if (dfd < 0)
    err = -dfd;
  else if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    rep->existence = SBX__V1__EXISTENCE__ABSENT;
  } else if (err) {
    return files_fail_path(c, err, NULL, path);
  } else {
    rep->existence = SBX__V1__EXISTENCE__EXISTS;
    rep->type = file_type(st.st_mode);
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_EXISTS;
  c->resp->file_exists = rep;
  return 0;
}

/* ---- read --------------------------------------------------------------- */

int rpc_file_read(struct rpc_call *c) {
  const Sbx__V1__FileRead *m = RPC_BODY(c, FILE_READ, file_read);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  if (m->offset > (uint64_t)INT64_MAX)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "read offset %llu is too large",
                    (unsigned long long)m->offset);
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, path, false, &loc, &c->err);
  if (r < 0)
    return r;
  /* Look before opening for reading, so a FIFO or device is never opened. */
  _cleanup_close_ int pfd =
      open_beneath(c, loc.base_fd, loc.rel, O_PATH, 0, "cannot read", path);
  if (pfd < 0)
    return pfd;
  struct stat st;
  if (fstat(pfd, &st) < 0)
    return files_fail_path(c, errno, "cannot read", path);
  if (S_ISDIR(st.st_mode))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EISDIR,
                    "cannot read \"%s\": is a directory", path);
  if (!S_ISREG(st.st_mode))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "cannot read \"%s\": not a regular file", path);
  _cleanup_close_ int fd =
      open_beneath(c, loc.base_fd, loc.rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0,
                   "cannot read", path);
  if (fd < 0)
    return fd;
  struct stat st2;
  if (fstat(fd, &st2) < 0)
    return files_fail_path(c, errno, "cannot read", path);
  if (st2.st_dev != st.st_dev || st2.st_ino != st.st_ino ||
      !S_ISREG(st2.st_mode))
    return rpc_fail(c, SBX_CONFLICT, EAGAIN,
                    "cannot read \"%s\": it changed while being opened", path);
  uint64_t size = st2.st_size > 0 ? (uint64_t)st2.st_size : 0;
  uint64_t cap = c->d->limits.max_read_bytes;
  uint64_t want = m->length && m->length < cap ? m->length : cap;
  uint64_t left = size > m->offset ? size - m->offset : 0;
  if (want > left)
    want = left;
  uint8_t *data = NULL;
  if (want) {
    data = sbx_arena_alloc_raw(&c->arena, (size_t)want);
    if (!data)
      return -ENOMEM;
  }
  size_t got = 0;
  bool hit_end = want == 0;
  while (got < want) {
    ssize_t n =
        pread(fd, data + got, (size_t)(want - got), (off_t)(m->offset + got));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return files_fail_path(c, errno, "cannot read", path);
    }
    if (n == 0) {
      hit_end = true;
      break;
    }
    got += (size_t)n;
  }
  Sbx__V1__FileReadReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__FileReadReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__file_read_reply__init(rep);
  rep->data.data = data;
  rep->data.len = got;
  rep->size = size;
  rep->eof = hit_end || m->offset + got >= size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_READ;
  c->resp->file_read = rep;
  return 0;
}

/* ---- write -------------------------------------------------------------- */

/* Writes all of DATA at OFF (or appending when OFF < 0). */
int files_write_all(int fd, const uint8_t *data, size_t len, int64_t off) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = off < 0 ? write(fd, data + done, len - done)
                        : pwrite(fd, data + done, len - done,
                                 (off_t)(off + (int64_t)done));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (n == 0)
      return -EIO;
    done += (size_t)n;
  }
  return 0;
}

struct write_req {
  const Sbx__V1__FileWrite *m;
  const char *path;
  mode_t perm;
  uid_t uid;
  gid_t gid;
};

/* Writes in place: the leaf is opened O_NOFOLLOW in its parent, created
 * when missing (then with the requested mode). */
static int write_in_place(struct rpc_call *c, int dfd, const char *name,
                          const struct write_req *w, uint64_t *size) {
  const Sbx__V1__FileWrite *m = w->m;
  int flags = O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC;
  if (m->mode == SBX__V1__WRITE_MODE__WRITE_APPEND)
    flags |= O_APPEND;
  /* Refuse early what must not be opened for writing at all: a device or
   * FIFO (opening one can block or act), a directory, a link. */
  struct stat pre;
  if (fstatat(dfd, name, &pre, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISREG(pre.st_mode)) {
    if (m->mode == SBX__V1__WRITE_MODE__WRITE_CREATE)
      return files_fail_path(c, EEXIST, "cannot create", w->path);
    if (S_ISDIR(pre.st_mode))
      return files_fail_path(c, EISDIR, "cannot write", w->path);
    if (S_ISLNK(pre.st_mode))
      return rpc_fail(c, SBX_INVALID_ARGUMENT, ELOOP,
                      "cannot write \"%s\": it is a symbolic link (only an "
                      "atomic write replaces a link)",
                      w->path);
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "cannot write \"%s\": not a regular file", w->path);
  }
  _cleanup_close_ int fd = -1;
  bool created = false;
  for (int tries = 0; fd < 0; tries++) {
    if (tries == 8)
      return rpc_fail(c, SBX_CONFLICT, EAGAIN,
                      "cannot write \"%s\": it keeps appearing and vanishing",
                      w->path);
    fd = openat(dfd, name, flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      created = true;
      break;
    }
    if (errno != EEXIST)
      return files_fail_path(c, errno, "cannot write", w->path);
    if (m->mode == SBX__V1__WRITE_MODE__WRITE_CREATE)
      return files_fail_path(c, EEXIST, "cannot create", w->path);
    fd = openat(dfd, name, flags);
    if (fd < 0 && errno == ELOOP)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, ELOOP,
                      "cannot write \"%s\": it is a symbolic link (only an "
                      "atomic write replaces a link)",
                      w->path);
    if (fd < 0 && errno != ENOENT)
      return files_fail_path(c, errno, "cannot write", w->path);
  }
  struct stat st;
  int r = 0;
  if (fstat(fd, &st) < 0) {
    r = files_fail_path(c, errno, "cannot write", w->path);
  } else if (!S_ISREG(st.st_mode)) {
    r = rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                 "cannot write \"%s\": not a regular file", w->path);
  } else if (m->mode == SBX__V1__WRITE_MODE__WRITE_TRUNCATE && !created &&
             ftruncate(fd, 0) < 0) {
    r = files_fail_path(c, errno, "cannot truncate", w->path);
  } else {
    int64_t off = m->mode == SBX__V1__WRITE_MODE__WRITE_APPEND ? -1
                  : m->mode == SBX__V1__WRITE_MODE__WRITE_AT
                      ? (int64_t)m->offset
                      : 0;
    r = files_write_all(fd, m->data.data, m->data.len, off);
    if (r < 0)
      r = files_fail_path(c, -r, "cannot write", w->path);
  }
  if (r == 0 && (w->uid != (uid_t)-1 || w->gid != (gid_t)-1) &&
      fchown(fd, w->uid, w->gid) < 0)
    r = files_fail_path(c, errno, "cannot change the owner of", w->path);
  if (r == 0 && created && fchmod(fd, w->perm) < 0)
    r = files_fail_path(c, errno, "cannot change the mode of", w->path);
  if (r == 0 && fstat(fd, &st) < 0)
    r = files_fail_path(c, errno, "cannot write", w->path);
  if (r < 0) {
    if (created)
      (void)unlinkat(dfd, name, 0);
    return r;
  }
  *size = (uint64_t)st.st_size;
  return 0;
}

/* Renames TMP over NAME in DFD; with NOREPLACE, fails -EEXIST when NAME
 * exists (linkat where the filesystem has no RENAME_NOREPLACE). */
static int rename_into_place(int dfd, const char *tmp, const char *name,
                             bool noreplace) {
  if (!noreplace)
    return renameat(dfd, tmp, dfd, name) < 0 ? -errno : 0;
  if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0)
    return 0;
  if (errno != EINVAL && errno != ENOSYS)
    return -errno;
  if (linkat(dfd, tmp, dfd, name, 0) < 0)
    return -errno;
  (void)unlinkat(dfd, tmp, 0);
  return 0;
}

/* Writes a temporary file beside the leaf, fsyncs it and renames it into
 * place: readers see the old or the new file, never a part. Replacing keeps
 * an existing regular file's mode (and, as root, owner); a symlink leaf is
 * replaced, not followed. */
static int write_atomic(struct rpc_call *c, int dfd, const char *name,
                        const struct write_req *w, uint64_t *size) {
  const Sbx__V1__FileWrite *m = w->m;
  bool create = m->mode == SBX__V1__WRITE_MODE__WRITE_CREATE;
  mode_t perm = w->perm;
  uid_t uid = w->uid;
  gid_t gid = w->gid;
  struct stat old;
  if (fstatat(dfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0) {
    if (create)
      return files_fail_path(c, EEXIST, "cannot create", w->path);
    if (S_ISDIR(old.st_mode))
      return files_fail_path(c, EISDIR, "cannot write", w->path);
    if (S_ISREG(old.st_mode)) {
      perm = old.st_mode & 07777;
      if (c->d->is_root) {
        if (uid == (uid_t)-1)
          uid = old.st_uid;
        if (gid == (gid_t)-1)
          gid = old.st_gid;
      }
    }
  } else if (errno != ENOENT) {
    return files_fail_path(c, errno, "cannot write", w->path);
  }
  char tmp[32];
  _cleanup_close_ int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    char hex[17];
    int r = sbx_random_hex(hex, 8);
    if (r < 0)
      return rpc_fail(c, SBX_INTERNAL, -r, "no randomness for a temp name");
    (void)snprintf(tmp, sizeof(tmp), ".sbx-%s.tmp", hex);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
    if (fd < 0 && (errno != EEXIST || tries == 4))
      return files_fail_path(c, errno, "cannot create a temporary file beside",
                             w->path);
  }
  int r = files_write_all(fd, m->data.data, m->data.len, 0);
  if (r < 0)
    r = files_fail_path(c, -r, "cannot write", w->path);
  if (r == 0 && (uid != (uid_t)-1 || gid != (gid_t)-1) &&
      fchown(fd, uid, gid) < 0)
    r = files_fail_path(c, errno, "cannot change the owner of", w->path);
  if (r == 0 && fchmod(fd, perm) < 0)
    r = files_fail_path(c, errno, "cannot change the mode of", w->path);
  struct stat st;
  if (r == 0 && (fsync(fd) < 0 || fstat(fd, &st) < 0))
    r = files_fail_path(c, errno, "cannot write", w->path);
  if (r == 0) {
    r = rename_into_place(dfd, tmp, name, create);
    if (r < 0)
      r = files_fail_path(c, -r, create ? "cannot create" : "cannot replace",
                          w->path);
  }
  if (r < 0) {
    (void)unlinkat(dfd, tmp, 0);
    return r;
  }
  /* The rename is durable once the directory is: best effort. */
  _cleanup_close_ int sync_fd =
      openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (sync_fd >= 0)
    (void)fsync(sync_fd);
  *size = (uint64_t)st.st_size;
  return 0;
}

int rpc_file_write(struct rpc_call *c) {
  const Sbx__V1__FileWrite *m = RPC_BODY(c, FILE_WRITE, file_write);
  if (!m)
    return rpc_no_body(c);
  struct write_req w = {.m = m, .path = m->path ? m->path : ""};
  switch (m->mode) {
  case SBX__V1__WRITE_MODE__WRITE_TRUNCATE:
  case SBX__V1__WRITE_MODE__WRITE_CREATE:
    break;
  case SBX__V1__WRITE_MODE__WRITE_APPEND:
  case SBX__V1__WRITE_MODE__WRITE_AT:
    if (m->atomic)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "cannot write \"%s\": atomic writes replace the whole "
                      "file (use WRITE_TRUNCATE or WRITE_CREATE)",
                      w.path);
    break;
  default:
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "cannot write \"%s\": unknown write mode %d", w.path,
                    (int)m->mode);
  }
  if (m->offset && m->mode != SBX__V1__WRITE_MODE__WRITE_AT)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "cannot write \"%s\": an offset needs WRITE_AT", w.path);
  if (m->offset > (uint64_t)INT64_MAX - m->data.len)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EFBIG,
                    "cannot write \"%s\": offset %llu is too large", w.path,
                    (unsigned long long)m->offset);
  int r = check_mode(c, m->perm);
  if (r < 0)
    return r;
  w.perm = m->perm ? m->perm : 0644;
  r = owner_ids(c, m->owner, m->group, &w.uid, &w.gid);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, w.path, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (is_base(&loc))
    return refuse_base(c, &loc, "cannot write", w.path);
  _cleanup_close_ int dfd = -1;
  if (m->parents)
    dfd = files_mkdir_p(c, loc.base_fd, loc.parent, 0755, w.path);
  else
    dfd = open_beneath(c, loc.base_fd, loc.parent, O_PATH | O_DIRECTORY, 0,
                       "cannot write", w.path);
  if (dfd < 0)
    return dfd;
  uint64_t size = 0;
  r = m->atomic ? write_atomic(c, dfd, loc.name, &w, &size)
                : write_in_place(c, dfd, loc.name, &w, &size);
  if (r < 0)
    return r;
  Sbx__V1__FileWriteReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__FileWriteReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__file_write_reply__init(rep);
  rep->size = size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_WRITE;
  c->resp->file_write = rep;
  return 0;
}

/* ---- list --------------------------------------------------------------- */

/* The smallest names of one directory, in order once read. */
struct names {
  char **v;
  size_t n, cap;
};

static void names_free(struct names *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

static void heap_down(char **v, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && strcmp(v[l], v[m]) > 0)
      m = l;
    if (r < n && strcmp(v[r], v[m]) > 0)
      m = r;
    if (m == i)
      return;
    char *t = v[i];
    v[i] = v[m];
    v[m] = t;
    i = m;
  }
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads DIR's names, keeping the CAP smallest (a max-heap), then sorts
 * them. *BYTES counts the bytes held, refused past FILES_LIST_MAX_NAME_BYTES.
 */
static int read_names(DIR *dir, size_t cap, struct names *out, size_t *bytes) {
  out->n = 0;
  out->cap = cap < 64 ? cap : 64;
  if (out->cap == 0)
    return 0;
  out->v = malloc(out->cap * sizeof(char *));
  if (!out->v)
    return -ENOMEM;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(dir);
    if (!de)
      break;
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    if (out->n == cap) {
      if (strcmp(n, out->v[0]) >= 0)
        continue;
      size_t ol = strlen(out->v[0]) + 1, nl = strlen(n) + 1;
      char *s = strdup(n);
      if (!s)
        return -ENOMEM;
      free(out->v[0]);
      out->v[0] = s;
      *bytes = *bytes - ol + nl;
      heap_down(out->v, out->n, 0);
      continue;
    }
    if (out->n == out->cap) {
      size_t nc = out->cap * 2 < cap ? out->cap * 2 : cap;
      char **nv = realloc(out->v, nc * sizeof(char *));
      if (!nv)
        return -ENOMEM;
      out->v = nv;
      out->cap = nc;
    }
    size_t nl = strlen(n) + 1;
    if (*bytes + nl > FILES_LIST_MAX_NAME_BYTES)
      return -E2BIG;
    char *s = strdup(n);
    if (!s)
      return -ENOMEM;
    *bytes += nl;
    /* Sift up. */
    size_t i = out->n++;
    out->v[i] = s;
    while (i > 0) {
      size_t p = (i - 1) / 2;
      if (strcmp(out->v[p], out->v[i]) >= 0)
        break;
      char *t = out->v[p];
      out->v[p] = out->v[i];
      out->v[i] = t;
      i = p;
    }
  }
  if (errno)
    return -errno;
  qsort(out->v, out->n, sizeof(char *), cmp_names);
  return 0;
}

struct list_level {
  DIR *dir;
  struct names names;
  size_t next;
  size_t plen; /* this directory's path (relative to the listed one) */
};

struct list_state {
  struct list_level *stack;
  size_t sp;
  size_t name_bytes;
  Sbx__V1__FileInfo **v; /* malloc'd; the entries are in the arena */
  size_t n, cap;
};

/* Closes the innermost directory and frees its names. */
static void list_pop(struct list_state *s) {
  struct list_level *l = &s->stack[--s->sp];
  for (size_t j = 0; j < l->names.n; j++)
    s->name_bytes -= strlen(l->names.v[j]) + 1;
  names_free(&l->names);
  if (l->dir)
    (void)closedir(l->dir);
  l->dir = NULL;
}

static void list_state_free(struct list_state *s) {
  while (s->sp > 0)
    list_pop(s);
  free(s->stack);
  free(s->v);
}

/* Pushes the directory FD (taken) whose path is PLEN bytes of the path
 * buffer, reading at most CAP names. */
static int list_push(struct rpc_call *c, struct list_state *s, int fd,
                     size_t plen, size_t cap, const char *path) {
  struct list_level *l = &s->stack[s->sp];
  memset(l, 0, sizeof(*l));
  l->dir = fdopendir(fd);
  if (!l->dir) {
    int err = errno;
    close(fd);
    return files_fail_path(c, err, "cannot list", path);
  }
  l->plen = plen;
  s->sp++;
  int r = read_names(l->dir, cap, &l->names, &s->name_bytes);
  if (r == -E2BIG)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "cannot list \"%s\": too many names to sort (lower the "
                    "depth or the limit)",
                    path);
  if (r < 0)
    return files_fail_path(c, -r, "cannot list", path);
  return 0;
}

int rpc_file_list(struct rpc_call *c) {
  const Sbx__V1__FileList *m = RPC_BODY(c, FILE_LIST, file_list);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  size_t limit = c->d->limits.max_list_entries;
  if (m->limit && m->limit < limit)
    limit = m->limit;
  size_t depth = m->depth < 1 ? 1 : m->depth;
  if (depth > FILES_MAX_DEPTH)
    depth = FILES_MAX_DEPTH;
  uint64_t budget = c->d->limits.max_message_bytes > FILES_REPLY_SLACK * 2
                        ? c->d->limits.max_message_bytes - FILES_REPLY_SLACK
                        : FILES_REPLY_SLACK;
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, path, false, &loc, &c->err);
  if (r < 0)
    return r;
  int top =
      open_beneath(c, loc.base_fd, loc.rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK,
                   0, "cannot list", path);
  if (top < 0)
    return top;
  struct list_state s = {0};
  s.stack = calloc(depth, sizeof(*s.stack));
  if (!s.stack) {
    close(top);
    return -ENOMEM;
  }
  char rel[SBX_PATH_MAX];
  char eb[128];
  rel[0] = '\0';
  uint64_t used = 0;
  bool truncated = false;
  r = list_push(c, &s, top, 0, limit + 1, path);
  while (r == 0 && s.sp > 0) {
    struct list_level *l = &s.stack[s.sp - 1];
    if (l->next == l->names.n) {
      list_pop(&s);
      continue;
    }
    const char *name = l->names.v[l->next++];
    size_t nl = strlen(name);
    size_t need = l->plen + (l->plen ? 1 : 0) + nl;
    if (need >= sizeof(rel)) {
      r = rpc_fail(c, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                   "cannot list \"%s\": a path beneath it is too long", path);
      break;
    }
    size_t o = l->plen;
    if (o)
      rel[o++] = '/';
    memcpy(rel + o, name, nl + 1);
    int dfd = dirfd(l->dir);
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT)
        continue;
      r = files_fail_path(c, errno, "cannot list", path);
      break;
    }
    if (s.n == limit) {
      truncated = true;
      break;
    }
    Sbx__V1__FileInfo *fi = file_info(&c->arena, dfd, name, &st, rel);
    if (!fi) {
      r = -ENOMEM;
      break;
    }
    uint64_t cost = need + 64 + (fi->link_target ? strlen(fi->link_target) : 0);
    if (used + cost > budget) {
      truncated = true;
      break;
    }
    used += cost;
    if (s.n == s.cap) {
      size_t nc = s.cap ? s.cap * 2 : 64;
      Sbx__V1__FileInfo **nv = realloc(s.v, nc * sizeof(*nv));
      if (!nv) {
        r = -ENOMEM;
        break;
      }
      s.v = nv;
      s.cap = nc;
    }
    s.v[s.n++] = fi;
    if (S_ISDIR(st.st_mode) && s.sp < depth) {
      int cfd =
          openat(dfd, name,
                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (cfd < 0) {
        if (errno == ENOENT)
          continue;
        r = rpc_fail(c, SBX_OK, errno,
                     "cannot list \"%s\": cannot open "
                     "\"%s\" beneath it: %s",
                     path, rel, sbx_strerror_lc(errno, eb, sizeof(eb)));
        break;
      }
      r = list_push(c, &s, cfd, need, limit - s.n + 1, path);
    }
  }
  Sbx__V1__FileListReply *rep = NULL;
  if (r == 0) {
    rep = sbx_arena_new(&c->arena, Sbx__V1__FileListReply);
    Sbx__V1__FileInfo **v =
        s.n ? sbx_arena_new_array(&c->arena, Sbx__V1__FileInfo *, s.n) : NULL;
    if (!rep || (s.n && !v)) {
      r = -ENOMEM;
    } else {
      sbx__v1__file_list_reply__init(rep);
      if (s.n)
        memcpy(v, s.v, s.n * sizeof(*v));
      rep->entries = v;
      rep->n_entries = s.n;
      rep->truncated = truncated;
    }
  }
  list_state_free(&s);
  if (r < 0)
    return r;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_LIST;
  c->resp->file_list = rep;
  return 0;
}

/* ---- mkdir -------------------------------------------------------------- */

int rpc_file_mkdir(struct rpc_call *c) {
  const Sbx__V1__FileMkdir *m = RPC_BODY(c, FILE_MKDIR, file_mkdir);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  int r = check_mode(c, m->mode);
  if (r < 0)
    return r;
  mode_t mode = m->mode ? m->mode : 0755;
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, path, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (is_base(&loc)) {
    if (!m->parents)
      return files_fail_path(c, EEXIST, "cannot create directory", path);
    return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_MKDIR);
  }
  _cleanup_close_ int dfd = -1;
  if (m->parents)
    dfd = files_mkdir_p(c, loc.base_fd, loc.parent, 0755, path);
  else
    dfd = open_beneath(c, loc.base_fd, loc.parent, O_PATH | O_DIRECTORY, 0,
                       "cannot create directory", path);
  if (dfd < 0)
    return dfd;
  if (mkdirat(dfd, loc.name, 0700) < 0) {
    int err = errno;
    struct stat st;
    if (err == EEXIST && m->parents) {
      /* An existing directory, or a link to one inside, is fine. */
      _cleanup_close_ int fd =
          open_beneath(c, loc.base_fd, loc.rel, O_PATH | O_DIRECTORY, 0,
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
  r = chmod_nofollow(dfd, loc.name, mode);
  if (r < 0)
    return files_fail_path(c, -r, "cannot change the mode of", path);
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_FILE_MKDIR);
}

/* ---- remove ------------------------------------------------------------- */

static int remove_one(int dir_fd, const char *name, const struct stat *st,
                      void *arg) {
  (void)arg;
  return unlinkat(dir_fd, name, S_ISDIR(st->st_mode) ? AT_REMOVEDIR : 0) < 0
             ? -errno
             : 0;
}

int files_remove_tree(int dir_fd, const char *name, const char *path,
                      struct sbx_error *e) {
  int top =
      openat(dir_fd, name,
             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (top < 0)
    return files_fail_path_e(e, errno, "cannot remove", path);
  int r = walk_tree(e, top, remove_one, NULL, "cannot remove", path);
  if (r == 0 && unlinkat(dir_fd, name, AT_REMOVEDIR) < 0)
    r = files_fail_path_e(e, errno, "cannot remove", path);
  return r;
}

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
  if (is_base(&loc))
    return refuse_base(c, &loc, "cannot remove", path);
  struct sbx_error e = {0};
  _cleanup_close_ int dfd =
      sbxd_openat(loc.base_fd, loc.parent, O_PATH | O_DIRECTORY, 0, &e);
  struct stat st;
  int err = 0;
  if (dfd < 0)
    err = -dfd;
  else if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    err = errno;
  if ((err == ENOENT || err == ENOTDIR) && m->missing_ok) {
    rep->removed = false;
  } else if (err) {
    return files_fail_path(c, err, "cannot remove", path);
  } else {
    if (S_ISDIR(st.st_mode) && m->recursive) {
      int top =
          openat(dfd, loc.name,
                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (top < 0)
        return files_fail_path(c, errno, "cannot remove", path);
      r = walk_tree(&c->err, top, remove_one, NULL, "cannot remove", path);
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

/* ---- rename ------------------------------------------------------------- */

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
  if (is_base(&lf))
    return refuse_base(c, &lf, "cannot move", from);
  if (is_base(&lt))
    return refuse_base(c, &lt, "cannot move onto", to);
  if (lf.grant != lt.grant)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EXDEV,
                    "cannot move \"%s\" to \"%s\": they are in different "
                    "roots (workspace or grants)",
                    from, to);
  _cleanup_close_ int ff = open_beneath(
      c, lf.base_fd, lf.parent, O_PATH | O_DIRECTORY, 0, "cannot move", from);
  if (ff < 0)
    return ff;
  _cleanup_close_ int tf =
      open_beneath(c, lt.base_fd, lt.parent, O_PATH | O_DIRECTORY, 0,
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

/* ---- chmod, chown ------------------------------------------------------- */

static int chmod_one(int dir_fd, const char *name, const struct stat *st,
                     void *arg) {
  if (S_ISLNK(st->st_mode))
    return 0; /* a link has no mode of its own; never follow it */
  return chmod_nofollow(dir_fd, name, *(mode_t *)arg);
}

struct owner {
  uid_t uid;
  gid_t gid;
};

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
                      const struct stat *st, bool recursive, walk_fn fn,
                      void *arg, const char *what, const char *path) {
  if (S_ISDIR(st->st_mode) && recursive) {
    int top =
        openat(dfd, name,
               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (top < 0)
      return files_fail_path(c, errno, what, path);
    int r = walk_tree(&c->err, top, fn, arg, what, path);
    if (r < 0)
      return r;
  }
  int r = fn(dfd, name, st, arg);
  if (r < 0)
    return files_fail_path(c, -r, what, path);
  return 0;
}

int rpc_file_chmod(struct rpc_call *c) {
  const Sbx__V1__FileChmod *m = RPC_BODY(c, FILE_CHMOD, file_chmod);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  int r = check_mode(c, m->mode);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  _cleanup_close_ int dfd =
      open_leaf_parent(c, path, true, &loc, "cannot change the mode of");
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

int rpc_file_chown(struct rpc_call *c) {
  const Sbx__V1__FileChown *m = RPC_BODY(c, FILE_CHOWN, file_chown);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  struct owner o;
  int r = owner_ids(c, m->user, m->group, &o.uid, &o.gid);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  _cleanup_close_ int dfd =
      open_leaf_parent(c, path, true, &loc, "cannot change the owner of");
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
