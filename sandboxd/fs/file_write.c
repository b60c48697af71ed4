/* FileWrite: in place (the leaf opened without following it, created when
 * missing) or atomic (a temporary file beside it, fsynced, renamed over
 * it). No write goes through an inode with other hard links, which may lie
 * outside the workspace: a whole-file write replaces such a file, an append
 * or a write at an offset is refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"
#include "shared/rand.h"

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

/* The whole-file write beside and over the leaf (below), which also
 * replaces a file with other links. */
static int write_atomic(struct rpc_call *c, int dfd, const char *name,
                        const struct write_req *w, uint64_t *size);

/* What a refused in-place write of MODE was, for its message. */
static const char *in_place_what(Sbx__V1__WriteMode mode) {
  switch (mode) {
  case SBX__V1__WRITE_MODE__WRITE_APPEND:
    return "cannot append to";
  case SBX__V1__WRITE_MODE__WRITE_AT:
    return "cannot write at an offset into";
  default:
    return "cannot write";
  }
}

/* Writes in place: the leaf is opened O_NOFOLLOW in its parent, created
 * when missing (then with the requested mode). An existing leaf whose inode
 * has other links is replaced (WRITE_TRUNCATE) or refused (-EMLINK). */
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
  } else if (!created && (r = files_sole_link(dfd, name, &st)) < 0) {
    /* Other names share the inode (maybe from outside), or the name was
     * swapped: a whole-file write replaces the file. An append or an offset
     * write would first have to copy the old data, of any size, from a file
     * that is perhaps not the workspace's: it is refused with the reason. */
    if (m->mode == SBX__V1__WRITE_MODE__WRITE_TRUNCATE &&
        (r == -EMLINK || r == -EAGAIN))
      return write_atomic(c, dfd, name, w, size);
    r = files_fail_at_e(&c->err, -r, in_place_what(m->mode), w->path, NULL);
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
 * an existing regular file's mode (without setuid and setgid when it has
 * other links) and, as root, owner; a symlink leaf is replaced, not
 * followed. */
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
      /* A file with other links may be an outside one linked in (a setuid
       * program, say): its data is not kept, nor are its setuid bits. */
      if (old.st_nlink > 1)
        perm &= ~(mode_t)(S_ISUID | S_ISGID);
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

/* FileWrite: data written into a file (truncating, creating, appending or
 * at an offset), in place or atomically. */
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
  int r = files_check_mode(c, m->perm);
  if (r < 0)
    return r;
  w.perm = m->perm ? m->perm : 0644;
  r = files_owner_ids(c, m->owner, m->group, &w.uid, &w.gid);
  if (r < 0)
    return r;
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, w.path, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (files_is_base(&loc))
    return files_refuse_base(c, &loc, "cannot write", w.path);
  _cleanup_close_ int dfd = -1;
  if (m->parents)
    dfd = files_mkdir_p(c, loc.base_fd, loc.parent, 0755, w.path);
  else
    dfd = files_open_beneath(c, loc.base_fd, loc.parent, O_PATH | O_DIRECTORY,
                             0, "cannot write", w.path);
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
