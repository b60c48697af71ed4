#include "sandboxd/fs/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "shared/fileio.h"

int sbxd_locate(struct sandboxd *d, const char *path, bool for_write,
                struct sbxd_loc *out, struct sbx_error *e) {
  struct sbx_resolved r;
  int rc = sbx_path_resolve(d->root, d->grants, d->ngrants, path, strlen(path),
                            for_write, &r, e);
  if (rc < 0)
    return rc;
  out->grant = r.grant;
  out->base_fd = r.grant < 0 ? d->root_fd : d->grant_fds[r.grant];
  memcpy(out->rel, r.rel, sizeof(out->rel));
  char *slash = strrchr(out->rel, '/');
  if (!slash) {
    out->parent[0] = '.';
    out->parent[1] = '\0';
    out->name = out->rel;
  } else {
    size_t n = (size_t)(slash - out->rel);
    memcpy(out->parent, out->rel, n);
    out->parent[n] = '\0';
    out->name = slash + 1;
  }
  return 0;
}

int sbxd_openat(int base_fd, const char *rel, int flags, mode_t mode,
                struct sbx_error *e) {
  int fd = sbx_openat2(base_fd, rel, flags, mode, 0);
  if (fd >= 0)
    return fd;
  int err = -fd;
  if (err == EXDEV)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EXDEV,
                         "path \"%s\" escapes the workspace root", rel);
  if (err == ELOOP)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ELOOP,
                         "path \"%s\": a symbolic link is in the way", rel);
  return sbx_error_set(e, SBX_OK, err, "\"%s\": %s", rel, strerror(err));
}

int sbxd_open(struct sandboxd *d, const char *path, int flags, mode_t mode,
              bool for_write, struct sbx_error *e) {
  struct sbxd_loc loc;
  int r = sbxd_locate(d, path, for_write, &loc, e);
  if (r < 0)
    return r;
  return sbxd_openat(loc.base_fd, loc.rel, flags, mode, e);
}

int sbxd_open_parent(const struct sbxd_loc *loc, struct sbx_error *e) {
  return sbxd_openat(loc->base_fd, loc->parent, O_PATH | O_DIRECTORY, 0, e);
}

int sbxd_open_dir(struct sandboxd *d, const char *path, struct sbx_error *e) {
  return sbxd_open(d, path, O_RDONLY | O_DIRECTORY, 0, false, e);
}
