/* FileStat, FileExists and FileRead: looking at a path without changing
 * it. A stat reports a symbolic link itself; a read follows it, within
 * the base, and never opens what is not a regular file. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"

/* FileStat: a path's FileInfo, of a symbolic link itself. */
int rpc_file_stat(struct rpc_call *c) {
  const Sbx__V1__FileStat *m = RPC_BODY(c, FILE_STAT, file_stat);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  struct sbxd_loc loc;
  _cleanup_close_ int dfd = files_open_leaf_parent(c, path, false, &loc, NULL);
  if (dfd < 0)
    return dfd;
  struct stat st;
  if (fstatat(dfd, loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return files_fail_path(c, errno, NULL, path);
  Sbx__V1__FileInfo *fi = files_info(&c->arena, dfd, loc.name, &st, path);
  if (!fi)
    return -ENOMEM;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_STAT;
  c->resp->file_stat = fi;
  return 0;
}

/* FileExists: whether a path exists (a dangling link does) and its type. */
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
  _cleanup_close_ int dfd = -1;
  struct stat st;
  int err = files_lstat_leaf(&loc, &dfd, &st);
  if (err == ENOENT || err == ENOTDIR) {
    rep->existence = SBX__V1__EXISTENCE__ABSENT;
  } else if (err) {
    return files_fail_path(c, err, NULL, path);
  } else {
    rep->existence = SBX__V1__EXISTENCE__EXISTS;
    rep->type = files_type(st.st_mode);
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_EXISTS;
  c->resp->file_exists = rep;
  return 0;
}

/* FileRead: up to max_read_bytes of a regular file from an offset. */
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
  _cleanup_close_ int pfd = files_open_beneath(c, loc.base_fd, loc.rel, O_PATH,
                                               0, "cannot read", path);
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
  _cleanup_close_ int fd = files_open_beneath(c, loc.base_fd, loc.rel,
                                              O_RDONLY | O_NOCTTY | O_NONBLOCK,
                                              0, "cannot read", path);
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
  Sbx__V1__FileReadReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__FileReadReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__file_read_reply__init(rep);
  rep->size = size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_READ;
  c->resp->file_read = rep;
  if (c->bulk_ok && want >= FILES_BULK_MIN) {
    /* Read when the reply is packed, into the message itself. */
    rep->data.len = (size_t)want;
    rep->eof = m->offset + want >= size;
    c->bulk.field = &rep->data;
    c->bulk.offset = m->offset;
    c->bulk.eof = &rep->eof;
    c->bulk.fd = TAKE_FD(fd);
    return 0;
  }
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
  rep->data.data = data;
  rep->data.len = got;
  rep->eof = hit_end || m->offset + got >= size;
  return 0;
}
