/* The local store: <base>/<session-id>.tar.zst, written through a
 * temporary file and a rename, and its pruning. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/snapshot/snapshot_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"

/* Creates PATH and its missing parents; the ones created get MODE. */
static int mkdir_p(const char *path, mode_t mode, struct sbx_error *e) {
  _cleanup_free_ char *p = strdup(path);
  if (!p)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  size_t n = strlen(p);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0')
      continue;
    char saved = p[i];
    p[i] = '\0';
    if (mkdir(p, mode) < 0 && errno != EEXIST)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s", p,
                           strerror(errno));
    p[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
    return sbx_error_set(e, SBX_OK, ENOTDIR, "\"%s\" is not a directory", path);
  return 0;
}

int snapshot_default_base_dir(char **out, struct sbx_error *e) {
  *out = NULL;
  const char *xdg = getenv("XDG_STATE_HOME");
  if (xdg && xdg[0] == '/')
    *out = snapshot_join3(xdg, "/sbx/snapshots", "");
  else {
    const char *home = getenv("HOME");
    if (!home || home[0] != '/')
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                           "no snapshot directory: neither XDG_STATE_HOME nor "
                           "HOME is an absolute path");
    *out = snapshot_join3(home, "/.local/state/sbx/snapshots", "");
  }
  return *out ? 0 : sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
}

int snapshot_local_save(const struct snapshot_spec *spec,
                        struct snapshot_saver *s, const char *file,
                        struct snapshot_record *out, struct sbx_error *e) {
  _cleanup_free_ char *base = NULL;
  int r = 0;
  if (spec->base_dir)
    base = strdup(spec->base_dir);
  else
    r = snapshot_default_base_dir(&base, e);
  if (r < 0)
    return r;
  if (!base)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  r = mkdir_p(base, 0700, e);
  if (r < 0)
    return r;
  _cleanup_close_ int dfd =
      open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %s", base,
                         strerror(errno));
  _cleanup_free_ char *final = snapshot_join3(base, "/", file);
  _cleanup_free_ char *tmp = snapshot_join3(base, "/.", file);
  _cleanup_free_ char *tmpl = tmp ? snapshot_join3(tmp, ".", "XXXXXX") : NULL;
  if (!final || !tmpl)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  _cleanup_close_ int fd = mkostemp(tmpl, O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create a file in \"%s\": %s",
                         base, strerror(errno));
  for (;;) {
    const uint8_t *data = NULL;
    size_t len = 0;
    r = snapshot_export_next(&s->ex, SNAPSHOT_CHUNK_BYTES, &data, &len, e);
    if (r < 0 || len == 0)
      break;
    sbx_sha256_update(&s->sha, data, len);
    r = sbx_write_all(fd, data, len);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", tmpl,
                        strerror(-r));
      break;
    }
    snapshot_meter_report(&s->prog, s->ex.off, 0, false);
  }
  uint64_t ts = sbx_now_ns();
  if (r == 0 && fsync(fd) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot sync \"%s\": %s", tmpl,
                      strerror(errno));
  if (r == 0) {
    int fdc = TAKE_FD(fd);
    if (close(fdc) < 0)
      r = sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %s", tmpl,
                        strerror(errno));
  }
  if (r == 0 && rename(tmpl, final) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot rename \"%s\" to \"%s\": %s",
                      tmpl, final, strerror(errno));
  if (r < 0) {
    (void)unlink(tmpl);
    return r;
  }
  if (fsync(dfd) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot sync \"%s\": %s", base,
                         strerror(errno));
  log_debug("snapshot: fsync and rename took %.3f s",
            (double)(sbx_now_ns() - ts) / 1e9);
  out->location = TAKE_PTR(final);
  return 0;
}

int snapshot_local_open(const struct snapshot_record *rec,
                        struct sbx_error *e) {
  if (!rec->location)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the snapshot record has no location");
  int fd = open(rec->location, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return sbx_error_set(e, errno == ENOENT ? SBX_NOT_FOUND : SBX_OK, errno,
                         "cannot open snapshot \"%s\": %s", rec->location,
                         strerror(errno));
  return fd;
}

int snapshot_local_exists(const struct snapshot_record *rec, bool *exists,
                          struct sbx_error *e) {
  if (!rec->location)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the snapshot record has no location");
  struct stat st;
  if (lstat(rec->location, &st) == 0) {
    *exists = S_ISREG(st.st_mode);
    return 0;
  }
  if (errno == ENOENT)
    return 0;
  return sbx_error_set(e, SBX_OK, errno, "cannot stat \"%s\": %s",
                       rec->location, strerror(errno));
}

/* Whether S ends in SUFFIX. */
static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* A snapshot ("x.tar.zst", "x.tar") or a save's leftover (".x.tar.zst.*"). */
static bool prunable(const char *name) {
  if (name[0] == '.')
    return strstr(name, ".tar.") != NULL || ends_with(name, ".tar");
  return ends_with(name, ".tar.zst") || ends_with(name, ".tar");
}

int snapshot_prune(const char *base_dir, unsigned max_age_days,
                   unsigned *removed, struct sbx_error *e) {
  if (removed)
    *removed = 0;
  _cleanup_free_ char *def = NULL;
  if (!base_dir) {
    int r = snapshot_default_base_dir(&def, e);
    if (r < 0)
      return r;
    base_dir = def;
  }
  if (max_age_days == 0)
    max_age_days = SNAPSHOT_PRUNE_DAYS;
  int dfd = open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT)
      return 0;
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %s", base_dir,
                         strerror(errno));
  }
  DIR *dir = fdopendir(dfd);
  if (!dir) {
    int err = errno;
    (void)close(dfd);
    return sbx_error_set(e, SBX_OK, err, "cannot read \"%s\": %s", base_dir,
                         strerror(err));
  }
  time_t cutoff = time(NULL) - (time_t)max_age_days * 86400;
  int r = 0;
  struct dirent *de;
  while ((de = readdir(dir))) {
    if (!prunable(de->d_name))
      continue;
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode) || st.st_mtime >= cutoff)
      continue;
    if (unlinkat(dfd, de->d_name, 0) < 0) {
      if (errno != ENOENT && r == 0)
        r = sbx_error_set(e, SBX_OK, errno, "cannot remove \"%s/%s\": %s",
                          base_dir, de->d_name, strerror(errno));
      continue;
    }
    if (removed)
      (*removed)++;
  }
  (void)closedir(dir);
  return r;
}
