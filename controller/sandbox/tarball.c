#include "controller/sandbox/tarball.h"

#include "controller/sandbox/progress.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/path.h"

#define TREE_MAX_DEPTH 256
#define PULL_MAX_BYTES                                                         \
  (64ull << 30) /* archive bytes accepted from a sandbox                       \
                 */
/* How long a streamed export may send nothing before a pull gives up. */
#define PULL_STALL_NS (120ull * 1000000000ull)

static int tree_push(struct host_tree *t, const char *src, const char *name,
                     const struct stat *st, const char *link) {
  if (t->n >= TARBALL_MAX_ITEMS)
    return -E2BIG;
  if (t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 64;
    struct host_item *v = realloc(t->items, nc * sizeof(*v));
    if (!v)
      return -ENOMEM;
    t->items = v;
    t->cap = nc;
  }
  struct host_item *it = &t->items[t->n];
  memset(it, 0, sizeof(*it));
  it->st = *st;
  it->src = strdup(src);
  it->name = strdup(name);
  it->link = link ? strdup(link) : NULL;
  if (!it->src || !it->name || (link && !it->link)) {
    free(it->src);
    free(it->name);
    free(it->link);
    return -ENOMEM;
  }
  t->n++;
  return 0;
}

void host_tree_free(struct host_tree *t) {
  for (size_t i = 0; i < t->n; i++) {
    free(t->items[i].src);
    free(t->items[i].name);
    free(t->items[i].link);
  }
  free(t->items);
  t->items = NULL;
  t->n = t->cap = 0;
}

static int join(const char *a, const char *b, char *out, size_t n) {
  int k = *a && strcmp(a, ".") != 0 ? snprintf(out, n, "%s/%s", a, b)
                                    : snprintf(out, n, "%s", b);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

static int read_link(int dfd, const char *name, char *out, size_t n) {
  ssize_t k = readlinkat(dfd, name, out, n - 1);
  if (k < 0)
    return -errno;
  if ((size_t)k >= n - 1)
    return -ENAMETOOLONG;
  out[k] = '\0';
  return 0;
}

static int scan_dir(struct host_tree *t, int dfd, const char *src,
                    const char *name, unsigned flags, unsigned depth,
                    const char *what, struct sbx_error *e) {
  if (depth > TREE_MAX_DEPTH)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ELOOP,
                         "%s: directories nest deeper than %d at \"%s\"", what,
                         TREE_MAX_DEPTH, src);
  int fd = dup(dfd);
  if (fd < 0)
    return -errno;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -errno;
  }
  int r = 0;
  struct dirent *de;
  while (r == 0 && (errno = 0, de = readdir(d))) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    if (depth == 0 && (flags & HOST_TREE_SKIP_GIT) && strcmp(n, ".git") == 0)
      continue;
    char csrc[SBX_PATH_MAX], cname[SBX_PATH_MAX];
    if (join(src, n, csrc, sizeof(csrc)) < 0 ||
        join(name, n, cname, sizeof(cname)) < 0) {
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                        "%s: path too long under \"%s\"", what, src);
      break;
    }
    struct stat st;
    if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      r = sbx_error_set(e, SBX_OK, errno, "%s: cannot stat \"%s\": %m", what,
                        csrc);
      break;
    }
    if (S_ISLNK(st.st_mode)) {
      if (flags & HOST_TREE_REFUSE_SYMLINKS) {
        r = sbx_error_set(e, SBX_INVALID_ARGUMENT, ELOOP,
                          "%s: local_dir entries do not support symbolic "
                          "links: \"%s\"",
                          what, csrc);
        break;
      }
      char link[SBX_PATH_MAX];
      if ((r = read_link(dfd, n, link, sizeof(link))) < 0) {
        r = sbx_error_set(e, SBX_OK, -r, "%s: cannot read link \"%s\"", what,
                          csrc);
        break;
      }
      r = tree_push(t, csrc, cname, &st, link);
    } else if (S_ISREG(st.st_mode)) {
      r = tree_push(t, csrc, cname, &st, NULL);
    } else if (S_ISDIR(st.st_mode)) {
      r = tree_push(t, csrc, cname, &st, NULL);
      if (r < 0)
        break;
      int cfd = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0) {
        r = sbx_error_set(e, SBX_OK, errno, "%s: cannot open \"%s\": %m", what,
                          csrc);
        break;
      }
      struct stat cst;
      if (fstat(cfd, &cst) < 0 || cst.st_dev != st.st_dev ||
          cst.st_ino != st.st_ino) {
        close(cfd);
        r = sbx_error_set(e, SBX_CONFLICT, EAGAIN,
                          "%s: \"%s\" changed while it was being copied", what,
                          csrc);
        break;
      }
      r = scan_dir(t, cfd, csrc, cname, flags, depth + 1, what, e);
      close(cfd);
    } else if (!(flags & HOST_TREE_SKIP_OTHER)) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "%s: \"%s\" is not a file, directory or symbolic link",
                        what, csrc);
    }
    if (r == -E2BIG)
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "%s: more than %d files",
                        what, TARBALL_MAX_ITEMS);
  }
  if (r == 0 && errno != 0)
    r = sbx_error_set(e, SBX_OK, errno, "%s: cannot read \"%s\": %m", what,
                      src);
  closedir(d);
  return r;
}

int host_tree_scan(struct host_tree *t, int root_fd, const char *src,
                   const char *prefix, unsigned flags, const char *what,
                   struct sbx_error *e) {
  t->root_fd = root_fd;
  int fd = strcmp(src, ".") == 0
               ? openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
               : sbx_openat2(root_fd, src, O_RDONLY | O_DIRECTORY, 0,
                             RESOLVE_NO_SYMLINKS);
  if (fd < 0) {
    int err = fd == -1 ? errno : -fd;
    return sbx_error_set(e, SBX_OK, err, "%s: cannot open directory \"%s\": %s",
                         what, src, strerror(err));
  }
  int r = scan_dir(t, fd, src, prefix, flags, 0, what, e);
  close(fd);
  return r;
}

int host_tree_add(struct host_tree *t, int root_fd, const char *src,
                  const char *name, struct sbx_error *e) {
  t->root_fd = root_fd;
  struct stat st;
  if (fstatat(root_fd, src, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot stat \"%s\": %m", src);
  char link[SBX_PATH_MAX];
  int r = 0;
  if (S_ISLNK(st.st_mode) && (r = read_link(root_fd, src, link, sizeof(link))))
    return sbx_error_set(e, SBX_OK, -r, "cannot read link \"%s\"", src);
  if (!S_ISLNK(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a file, directory or symbolic link",
                         src);
  r = tree_push(t, src, name, &st, S_ISLNK(st.st_mode) ? link : NULL);
  return r < 0 ? sbx_error_set(e, SBX_OK, -r, "cannot add \"%s\"", src) : 0;
}

int host_item_open(const struct host_tree *t, const struct host_item *it,
                   const char *what, struct sbx_error *e) {
  int fd = sbx_openat2(t->root_fd, it->src, O_RDONLY | O_NOCTTY, 0,
                       RESOLVE_NO_SYMLINKS);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, -fd, "%s: cannot open \"%s\": %s", what,
                         it->src, strerror(-fd));
  struct stat st;
  if (fstat(fd, &st) < 0 || st.st_dev != it->st.st_dev ||
      st.st_ino != it->st.st_ino || !S_ISREG(st.st_mode)) {
    close(fd);
    return sbx_error_set(e, SBX_CONFLICT, EAGAIN,
                         "%s: \"%s\" changed while it was being copied", what,
                         it->src);
  }
  return fd;
}

static int ar_fail(struct archive *a, struct sbx_error *e, const char *what,
                   const char *doing) {
  return sbx_error_set(e, SBX_INTERNAL, EIO, "%s: %s: %s", what, doing,
                       archive_error_string(a) ? archive_error_string(a)
                                               : "libarchive error");
}

static int tmpfile_fd(void) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir)
    dir = "/tmp";
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  return fd < 0 ? -errno : fd;
}

int tarball_build(const struct host_tree *t, uint32_t uid, uint32_t gid,
                  const char *what, int *fdp, uint64_t *size,
                  struct sbx_error *e) {
  _cleanup_close_ int fd = tmpfile_fd();
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, -fd, "%s: cannot create a temp file: %s",
                         what, strerror(-fd));
  struct archive *a = archive_write_new();
  struct archive_entry *ent = archive_entry_new();
  _cleanup_free_ char *buf = malloc(1u << 20);
  int r = 0;
  if (!a || !ent || !buf) {
    r = -ENOMEM;
    goto out;
  }
  /* Names and link targets go as the bytes they are (pax hdrcharset
   * BINARY), never through the locale: a file name need not be UTF-8. */
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
      archive_write_set_format_option(a, "pax", "hdrcharset", "BINARY") !=
          ARCHIVE_OK ||
      archive_write_open_fd(a, fd) != ARCHIVE_OK) {
    r = ar_fail(a, e, what, "cannot start the archive");
    goto out;
  }
  for (size_t i = 0; i < t->n && r == 0; i++) {
    const struct host_item *it = &t->items[i];
    archive_entry_clear(ent);
    archive_entry_set_pathname(ent, it->name);
    archive_entry_set_uid(ent, uid);
    archive_entry_set_gid(ent, gid);
    archive_entry_set_mtime(ent, it->st.st_mtim.tv_sec, it->st.st_mtim.tv_nsec);
    archive_entry_set_perm(ent, it->st.st_mode & 01777);
    _cleanup_close_ int ffd = -1;
    if (S_ISDIR(it->st.st_mode)) {
      archive_entry_set_filetype(ent, AE_IFDIR);
    } else if (S_ISLNK(it->st.st_mode)) {
      archive_entry_set_filetype(ent, AE_IFLNK);
      archive_entry_set_symlink(ent, it->link);
    } else {
      archive_entry_set_filetype(ent, AE_IFREG);
      archive_entry_set_size(ent, it->st.st_size);
      ffd = host_item_open(t, it, what, e);
      if (ffd < 0) {
        r = ffd;
        break;
      }
    }
    if (archive_write_header(a, ent) != ARCHIVE_OK) {
      r = ar_fail(a, e, what, "cannot add a member");
      break;
    }
    if (ffd < 0)
      continue;
    int64_t left = it->st.st_size;
    while (left > 0) {
      size_t want = left < (int64_t)(1u << 20) ? (size_t)left : (1u << 20);
      ssize_t k = read(ffd, buf, want);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0) {
        r = sbx_error_set(e, k < 0 ? SBX_OK : SBX_CONFLICT,
                          k < 0 ? errno : EAGAIN,
                          "%s: \"%s\" %s while it was being copied", what,
                          it->src, k < 0 ? "could not be read" : "shrank");
        break;
      }
      if (archive_write_data(a, buf, (size_t)k) != k) {
        r = ar_fail(a, e, what, "cannot write a member");
        break;
      }
      left -= k;
    }
  }
  if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
    r = ar_fail(a, e, what, "cannot finish the archive");
out:
  if (a)
    archive_write_free(a);
  if (ent)
    archive_entry_free(ent);
  if (r < 0)
    return r;
  struct stat st;
  if (fstat(fd, &st) < 0)
    return -errno;
  *size = (uint64_t)st.st_size;
  *fdp = TAKE_FD(fd);
  return 0;
}

bool tarball_unsupported(int r, const struct sbx_error *e) {
  return r < 0 && e && e->code == SBX_NOT_SUPPORTED;
}

int tarball_push(struct sbx_client *c, int fd, uint64_t size, const char *dest,
                 struct progress_meter *progress, struct sbx_error *e) {
  Sbx__V1__ArchiveImportStart st = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  st.path = (char *)dest;
  st.compression = SBX__V1__COMPRESSION__COMPRESSION_NONE;
  st.stage = true; /* extracted as it arrives when DEST is empty */
  Sbx__V1__Response *resp = NULL;
  int r = sbx_archive_import_start(c, &st, &resp, e);
  if (r < 0)
    return r;
  uint64_t handle = resp->archive_import_start->handle;
  sbx_client_reply_free(resp);
  _cleanup_free_ char *buf = malloc(TARBALL_CHUNK);
  if (!buf) {
    r = -ENOMEM;
    goto out;
  }
  for (uint64_t off = 0; off < size && r == 0;) {
    size_t want =
        size - off < TARBALL_CHUNK ? (size_t)(size - off) : TARBALL_CHUNK;
    ssize_t k = pread(fd, buf, want, (off_t)off);
    if (k <= 0) {
      r = sbx_error_set(e, SBX_OK, k < 0 ? errno : EIO,
                        "cannot read the archive back");
      break;
    }
    uint64_t got = 0;
    r = sbx_archive_import_write(c, handle, off, buf, (size_t)k, &got, e);
    if (r == 0 && got != off + (uint64_t)k)
      r = sbx_error_set(
          e, SBX_INTERNAL, EPROTO, "sandboxd acknowledged %llu bytes, not %llu",
          (unsigned long long)got, (unsigned long long)(off + (uint64_t)k));
    off += (uint64_t)k;
    if (progress)
      progress_meter_update(progress, off, size, false);
  }
  if (r == 0) {
    r = sbx_archive_import_finish(c, handle, &resp, e);
    if (r == 0 && progress)
      progress_meter_update(progress, size, size, true);
    sbx_client_reply_free(resp);
  }
out:;
  /* Finished or not, the transfer's slot in sandboxd is free at once. */
  struct sbx_error ignored = {0};
  (void)sbx_archive_close(c, handle, &ignored);
  return r;
}

/* Checks a member name from the sandbox: relative, no "..", normalized. */
static int check_member(const char *name, char *out, size_t n) {
  if (!name || !*name || name[0] == '/')
    return -EINVAL;
  struct sbx_error ignored = {0};
  if (sbx_path_normalize_rel(name, strlen(name), out, n,
                             SBX_PATH_NO_DOTDOT | SBX_PATH_EMPTY_IS_ROOT,
                             &ignored) < 0)
    return -EINVAL;
  return 0;
}

SBX_DEFINE_CLEANUP(Sbx__V1__Response *, sbx_client_reply_free)

/* Frees a libarchive reader or writer; what they report on freeing an
 * archive that failed says nothing new. */
static void ar_read_freep(struct archive **a) {
  if (*a)
    (void)archive_read_free(*a);
}
static void ar_write_freep(struct archive **a) {
  if (*a)
    (void)archive_write_free(*a);
}

/* Spools the export HANDLE of SRC into FD until its end, at most
 * PULL_MAX_BYTES, checked as the bytes arrive. TOTAL is the size sandboxd
 * gave at the start, which must then be met exactly, or 0 while the
 * archive is produced (streamed). */
static int pull_spool(struct sbx_client *c, uint64_t handle, uint64_t total,
                      const char *src, int fd, struct progress_meter *progress,
                      struct sbx_error *e) {
  uint64_t off = 0, last_ns = sbx_now_ns();
  for (bool eof = false; !eof;) {
    _cleanup_(sbx_client_reply_freep) Sbx__V1__Response *resp = NULL;
    int r = sbx_archive_export_read(c, handle, off, TARBALL_CHUNK, &resp, e);
    if (r < 0)
      return r;
    const ProtobufCBinaryData *d = &resp->archive_export_read->data;
    eof = resp->archive_export_read->eof;
    bool bad =
        total && (d->len > total - off || (eof && off + d->len != total) ||
                  (d->len == 0 && !eof));
    if (bad)
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "sandboxd sent more or less than the archive");
    if (d->len > PULL_MAX_BYTES - off)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "the archive of \"%s\" is larger than %llu bytes",
                           src, PULL_MAX_BYTES);
    if (d->len == 0 && !eof) {
      /* Still being produced: sandboxd waited; ask again, not forever. */
      if (sbx_now_ns() - last_ns > PULL_STALL_NS)
        return sbx_error_set(
            e, SBX_UNAVAILABLE, ETIMEDOUT,
            "the archive of \"%s\" made no progress for %llu s", src,
            PULL_STALL_NS / 1000000000ull);
      (void)usleep(10000);
      continue;
    }
    last_ns = sbx_now_ns();
    /* Files with hard links outside SRC were left out (the client checked
     * the names printable): say which. */
    const Sbx__V1__ArchiveExportReadReply *x = resp->archive_export_read;
    for (size_t i = 0; eof && i < x->n_skipped; i++)
      log_warn("\"%s\" in \"%s\" was not copied: it has hard links outside "
               "it",
               x->skipped[i], src);
    if (eof && x->skipped_count > x->n_skipped)
      log_warn("and %llu more files with hard links outside \"%s\" were not "
               "copied",
               (unsigned long long)(x->skipped_count - x->n_skipped), src);
    if (pwrite(fd, d->data, d->len, (off_t)off) != (ssize_t)d->len)
      return sbx_error_set(e, SBX_OK, errno, "cannot spool the archive: %m");
    off += d->len;
    if (progress)
      progress_meter_update(progress, off, total, eof);
  }
  return 0;
}

/* Extracts member ENT of A through W beneath HOST_DEST. The sandbox is not
 * trusted: the member's name and a hard link's target must be relative
 * and stay beneath; devices and fifos are left out. *NFILES counts the
 * regular files. */
static int extract_member(struct archive *a, struct archive *w,
                          struct archive_entry *ent, const char *host_dest,
                          uint64_t *nfiles, struct sbx_error *e) {
  char rel[SBX_PATH_MAX];
  /* The bytes of the name (a BINARY header), else its UTF-8. */
  const char *name = archive_entry_pathname(ent);
  if (!name)
    name = archive_entry_pathname_utf8(ent);
  if (check_member(name, rel, sizeof(rel)) < 0)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "the sandbox sent a member with a bad name");
  mode_t ft = archive_entry_filetype(ent);
  if (ft != AE_IFREG && ft != AE_IFDIR && ft != AE_IFLNK)
    return 0; /* devices, fifos: not copied out */
  if (strcmp(rel, ".") == 0 && ft != AE_IFDIR)
    return 0;
  const char *hl = archive_entry_hardlink(ent);
  if (!hl)
    hl = archive_entry_hardlink_utf8(ent);
  char hrel[SBX_PATH_MAX], hfull[SBX_PATH_MAX * 2];
  if (hl) {
    if (check_member(hl, hrel, sizeof(hrel)) < 0)
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "the sandbox sent a hard link with a bad target");
    (void)snprintf(hfull, sizeof(hfull), "%s/%s", host_dest, hrel);
    archive_entry_set_hardlink(ent, hfull);
  }
  char full[SBX_PATH_MAX * 2];
  int n = snprintf(full, sizeof(full), "%s/%s", host_dest, rel);
  if (n < 0 || (size_t)n >= sizeof(full))
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                         "path too long under \"%s\"", host_dest);
  archive_entry_set_pathname(ent, full);
  if (ft == AE_IFLNK && !archive_entry_symlink(ent) &&
      archive_entry_symlink_utf8(ent)) {
    /* A UTF-8 target this locale cannot show: its bytes, as they are. */
    const char *tgt = archive_entry_symlink_utf8(ent);
    archive_entry_copy_symlink(ent, tgt);
  }
  archive_entry_set_perm(ent, archive_entry_perm(ent) & 01777);
  if (ft == AE_IFREG && !hl)
    (*nfiles)++;
  int k = archive_write_header(w, ent);
  if (k != ARCHIVE_OK && k != ARCHIVE_WARN)
    return ar_fail(w, e, full, "cannot extract");
  if (ft == AE_IFREG && archive_entry_size(ent) > 0) {
    const void *blk;
    size_t len;
    la_int64_t boff;
    while ((k = archive_read_data_block(a, &blk, &len, &boff)) == ARCHIVE_OK)
      if (archive_write_data_block(w, blk, len, boff) != ARCHIVE_OK)
        return ar_fail(w, e, full, "cannot write");
    if (k != ARCHIVE_EOF)
      return ar_fail(a, e, full, "cannot read");
  }
  if (archive_write_finish_entry(w) != ARCHIVE_OK)
    return ar_fail(w, e, full, "cannot finish");
  return 0;
}

/* Extracts the spooled archive of SRC in FD into HOST_DEST, member by
 * member, at most TARBALL_MAX_ITEMS. *FILES (may be NULL) counts the
 * regular files. */
static int pull_extract(int fd, const char *src, const char *host_dest,
                        uint64_t *files, struct sbx_error *e) {
  if (lseek(fd, 0, SEEK_SET) < 0)
    return -errno;
  _cleanup_(ar_read_freep) struct archive *a = archive_read_new();
  _cleanup_(ar_write_freep) struct archive *w = archive_write_disk_new();
  if (!a || !w)
    return -ENOMEM;
  (void)archive_read_support_format_tar(a);
  (void)archive_read_support_filter_none(a);
  (void)archive_read_support_filter_zstd(a);
  (void)archive_write_disk_set_options(
      w, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
             ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
             ARCHIVE_EXTRACT_UNLINK);
  if (archive_read_open_fd(a, fd, 1u << 20) != ARCHIVE_OK)
    return ar_fail(a, e, src, "cannot read the exported archive");
  uint64_t nfiles = 0, nmembers = 0;
  for (;;) {
    struct archive_entry *ent = NULL;
    int k = archive_read_next_header(a, &ent);
    if (k == ARCHIVE_EOF)
      break;
    if (k != ARCHIVE_OK && k != ARCHIVE_WARN)
      return ar_fail(a, e, src, "cannot read the exported archive");
    if (++nmembers > TARBALL_MAX_ITEMS)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "the archive of \"%s\" has more than %d members",
                           src, TARBALL_MAX_ITEMS);
    int r = extract_member(a, w, ent, host_dest, &nfiles, e);
    if (r < 0)
      return r;
  }
  int r = 0;
  if (archive_write_close(w) != ARCHIVE_OK)
    r = ar_fail(w, e, host_dest, "cannot finish extracting");
  if (files)
    *files = nfiles;
  return r;
}

int tarball_pull(struct sbx_client *c, const char *src, const char *host_dest,
                 struct progress_meter *progress, uint64_t *files,
                 struct sbx_error *e) {
  Sbx__V1__ArchiveExportStart st = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  st.path = (char *)src;
  st.stream = true;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_archive_export_start(c, &st, &resp, e);
  if (r < 0)
    return r;
  uint64_t handle = resp->archive_export_start->handle;
  /* 0 while the archive is produced (streamed); a sandboxd without streaming
   * gives the size. */
  uint64_t total = resp->archive_export_start->total_bytes;
  sbx_client_reply_free(resp);
  _cleanup_close_ int fd = tmpfile_fd();
  if (total > PULL_MAX_BYTES)
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                      "the archive of \"%s\" is larger than %llu bytes", src,
                      PULL_MAX_BYTES);
  else if (fd < 0)
    r = sbx_error_set(e, SBX_OK, -fd, "cannot create a temp file");
  if (r == 0)
    r = pull_spool(c, handle, total, src, fd, progress, e);
  if (r == 0)
    r = pull_extract(fd, src, host_dest, files, e);
  struct sbx_error ignored = {0};
  (void)sbx_archive_close(c, handle, &ignored);
  return r;
}
