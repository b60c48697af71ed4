#include "shared/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/rand.h"

int sbx_read_file(const char *path, size_t max, char **out, size_t *len) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return -errno;
  struct sbx_buf b;
  sbx_buf_init(&b, max);
  for (;;) {
    int r = sbx_buf_reserve(&b, 65536 < max ? 65536 : 1);
    if (r == -E2BIG) {
      /* Full: one more byte would exceed MAX only if the file has more. */
      char c;
      ssize_t k = read(fd, &c, 1);
      sbx_buf_free(&b);
      return k > 0 ? -EFBIG : (k < 0 ? -errno : -EFBIG);
    }
    if (r < 0) {
      sbx_buf_free(&b);
      return r;
    }
    size_t room = b.cap - b.len - 1;
    if (room > max - b.len)
      room = max - b.len;
    ssize_t k = read(fd, b.data + b.len, room ? room : 1);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int err = errno;
      sbx_buf_free(&b);
      return -err;
    }
    if (k == 0)
      break;
    if ((size_t)k > max - b.len) {
      sbx_buf_free(&b);
      return -EFBIG;
    }
    b.len += (size_t)k;
    b.data[b.len] = '\0';
  }
  *out = sbx_buf_steal(&b, len);
  return *out ? 0 : -ENOMEM;
}

int sbx_openat2(int dirfd, const char *path, int flags, unsigned mode,
                uint64_t resolve) {
  bool creates = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
  struct open_how how = {
      .flags = (uint64_t)(flags | O_CLOEXEC),
      .mode = creates ? mode : 0,
      .resolve = resolve | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
  };
  for (;;) {
    long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    if (fd >= 0)
      return (int)fd;
    if (errno != EINTR && errno != EAGAIN)
      return -errno;
  }
}

int sbx_write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return k < 0 ? -errno : -EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int write_replace(const char *path, const void *data, size_t len,
                         unsigned mode, bool sync) {
  char tmp[PATH_MAX];
  char rnd[17];
  int r = sbx_random_hex(rnd, 8);
  if (r < 0)
    return r;
  int n = snprintf(tmp, sizeof(tmp), "%s.tmp-%s", path, rnd);
  if (n < 0 || (size_t)n >= sizeof(tmp))
    return -ENAMETOOLONG;
  int fd =
      open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return -errno;
  r = sbx_write_all(fd, data, len);
  if (r == 0 && fchmod(fd, mode) < 0)
    r = -errno;
  if (r == 0 && sync && fsync(fd) < 0)
    r = -errno;
  if (close(fd) < 0 && r == 0)
    r = -errno;
  if (r == 0 && rename(tmp, path) < 0)
    r = -errno;
  if (r < 0) {
    (void)unlink(tmp);
    return r;
  }
  if (!sync)
    return 0;
  /* Make the rename durable. */
  char dir[PATH_MAX];
  memcpy(dir, path, strlen(path) + 1);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    memcpy(dir, ".", 2);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return 0;
}

int sbx_write_file_atomic(const char *path, const void *data, size_t len,
                          unsigned mode) {
  return write_replace(path, data, len, mode, true);
}

int sbx_write_file_replace(const char *path, const void *data, size_t len,
                           unsigned mode) {
  return write_replace(path, data, len, mode, false);
}

int sbx_fd_above_stdio(int fd) {
  if (fd < 0 || fd > 2)
    return fd;
  int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int err = errno;
  (void)close(fd);
  return nfd < 0 ? -err : nfd;
}
