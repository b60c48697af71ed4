/* Export: a directory tree written as a pax tar (optionally zstd) into a
 * spool. The walk opens every entry beneath its directory's fd and never
 * follows a symbolic link; names are sorted, so the same tree gives the
 * same bytes. Files with holes are written as sparse members. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"

/* Data is copied through 64 KiB buffers: a read(2) and the write(2) that
 * follows stay in the CPU's cache, where 1 MiB ones went through memory
 * (export 8% slower on tmpfs; extraction reads the spool in blocks as
 * small, import_check.c). */
#define COPY_BUF_BYTES (64u << 10) /* file reads while exporting */
#define OUT_BUF_BYTES (1u << 20)   /* coalesced small archive writes */
#define DIRECT_WRITE (64u << 10)   /* larger writes bypass that buffer */
#define EXPORT_MAX_DEPTH 512       /* directory levels (fds held) */
#define ZERO_BUF_BYTES (1u << 20)  /* a sparse file's holes, written */
/* A sparse file keeps at most this many data regions; past them the rest of
 * the file is archived as data (holes as zeros). The map lives in the
 * member's data, and the import allows a member's headers and map 16 KiB
 * (import_check.c): 128 regions take at most 5.4 KiB. */
#define SPARSE_REGIONS_MAX 128

/* A data region of a sparse file. */
struct region {
  uint64_t off, len;
};

/* A regular file's data: the whole file, or (sparse) its data regions. */
struct file_map {
  bool sparse;
  size_t n;
  struct region r[SPARSE_REGIONS_MAX];
  uint64_t data; /* bytes in the regions (the size when not sparse) */
};

struct exporter {
  struct archive *a;
  struct archive_entry *ent;
  struct sbx_error *e;
  int err; /* the write callback's failure, when it has one */
  /* output: coalesced writes into the spool */
  int out_fd;
  uint64_t out_bytes;
  uint64_t max_out;
  struct xstream *stream; /* streamed: publish progress, honour a cancel */
  char *obuf;
  size_t olen;
  char *rbuf; /* file contents */
  char *zbuf; /* ZERO_BUF_BYTES of zeros, once a sparse file needs them */
  /* the member being written, relative to the exported directory */
  char path[SBX_PATH_MAX];
  char **excl;
  size_t nexcl;
  uint64_t members, max_members;
  uint64_t data_bytes, max_data;
  uint64_t names; /* bytes of names and symlink targets, as an import keeps */
  int root_fd;    /* the exported directory */
  struct export_links links;      /* files with several links, written last */
  struct export_skipped *skipped; /* files left out: links outside */
};

/* Tells a streamed export's readers that ex->out_bytes are in the spool. */
static void ex_publish(struct exporter *ex) {
  struct xstream *s = ex->stream;
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  s->produced = ex->out_bytes;
  if (s->waiting && s->produced >= s->wake_at)
    pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Writes the coalesced output to the spool and publishes it. */
static int ex_flush(struct exporter *ex) {
  if (ex->olen == 0)
    return 0;
  int r = sbx_write_all(ex->out_fd, ex->obuf, ex->olen);
  if (r < 0)
    return r;
  ex->out_bytes += ex->olen;
  ex->olen = 0;
  ex_publish(ex);
  return 0;
}

/* Whether a streamed export was closed; then fails with ex->err set. Checked
 * before every write and every chunk read from a file (compression may
 * hold back its output for long). */
static bool ex_cancelled(struct exporter *ex) {
  if (!ex->stream || !__atomic_load_n(&ex->stream->cancel, __ATOMIC_ACQUIRE))
    return false;
  ex->err =
      sbx_error_set(ex->e, SBX_UNAVAILABLE, ECANCELED, "the export was closed");
  return true;
}

/* libarchive's output: small writes (headers, small files) are coalesced;
 * large ones (file data) go straight to the spool after a flush, with no
 * extra copy. */
static la_ssize_t ex_write_cb(struct archive *a, void *cd, const void *buf,
                              size_t n) {
  struct exporter *ex = cd;
  if (ex_cancelled(ex)) {
    archive_set_error(a, ECANCELED, "export closed");
    return -1;
  }
  if (ex->out_bytes + ex->olen + n > ex->max_out) {
    ex->err = sbx_error_set(
        ex->e, SBX_LIMIT_EXCEEDED, EFBIG,
        "the archive would be larger than %" PRIu64 " bytes", ex->max_out);
    archive_set_error(a, EFBIG, "archive too large");
    return -1;
  }
  int r = 0;
  if (n >= DIRECT_WRITE) {
    r = ex_flush(ex);
    if (r == 0)
      r = sbx_write_all(ex->out_fd, buf, n);
    if (r == 0) {
      ex->out_bytes += n;
      ex_publish(ex);
    }
  } else {
    if (ex->olen + n > OUT_BUF_BYTES)
      r = ex_flush(ex);
    if (r == 0) {
      memcpy(ex->obuf + ex->olen, buf, n);
      ex->olen += n;
    }
  }
  if (r < 0) {
    ex->err = sbx_error_set(ex->e, SBX_OK, -r,
                            "cannot write the archive's temporary file: %s",
                            strerror(-r));
    archive_set_error(a, -r, "write failed");
    return -1;
  }
  return (la_ssize_t)n;
}

/* Whether the member at ex->path is, or is beneath, an excluded path. */
static bool ex_excluded(const struct exporter *ex) {
  for (size_t i = 0; i < ex->nexcl; i++)
    if (sbx_path_is_under(ex->excl[i], ex->path))
      return true;
  return false;
}

/* Writes the header of the member at ex->path; MAP (may be NULL) gives a
 * sparse file's data regions. */
static int ex_header(struct exporter *ex, const struct stat *st,
                     const char *symlink, const char *hardlink,
                     const struct file_map *map) {
  char q[NAME_SHOWN + 4];
  if (++ex->members > ex->max_members)
    return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the tree has more than %" PRIu64
                         " entries to archive",
                         ex->max_members);
  ex->names += strlen(ex->path) + 1 + (symlink ? strlen(symlink) + 1 : 0);
  if (ex->names > NAME_POOL_MAX)
    return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the tree's names and link targets exceed %u bytes",
                         NAME_POOL_MAX);
  struct archive_entry *ent = archive_entry_clear(ex->ent);
  archive_entry_copy_pathname(ent, ex->path);
  archive_entry_set_mode(ent, st->st_mode);
  archive_entry_set_uid(ent, st->st_uid);
  archive_entry_set_gid(ent, st->st_gid);
  archive_entry_set_mtime(ent, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
  if (hardlink) {
    archive_entry_copy_hardlink(ent, hardlink);
    archive_entry_set_size(ent, 0);
  } else if (S_ISREG(st->st_mode)) {
    archive_entry_set_size(ent, st->st_size);
  } else {
    archive_entry_set_size(ent, 0);
  }
  if (symlink)
    archive_entry_copy_symlink(ent, symlink);
  if (map && map->sparse) {
    for (size_t i = 0; i < map->n; i++)
      archive_entry_sparse_add_entry(ent, (la_int64_t)map->r[i].off,
                                     (la_int64_t)map->r[i].len);
    if (map->n == 0) /* all hole: libarchive wants one entry */
      archive_entry_sparse_add_entry(ent, st->st_size, 0);
  }
  int r = archive_write_header(ex->a, ent);
  if (r < ARCHIVE_WARN) {
    if (ex->err)
      return ex->err;
    return xfer_la_fail(ex->e, ex->a, "cannot write the archive");
  }
  if (r == ARCHIVE_WARN)
    log_debug("archive: \"%s\": %s", xfer_shown(ex->path, q),
              archive_error_string(ex->a));
  return 0;
}

/* The data of the regular file FD (ST) into MAP: its data regions when it
 * has holes (SEEK_DATA/SEEK_HOLE; a file whose blocks cover its size is not
 * asked), else the whole file. A file system that cannot tell gives the
 * whole file. */
static void file_map(int fd, const struct stat *st, struct file_map *map) {
  uint64_t size = (uint64_t)st->st_size;
  map->sparse = false;
  map->n = 0;
  map->data = size;
  if (size == 0 || (uint64_t)st->st_blocks * 512 >= size)
    return;
  uint64_t off = 0, data = 0;
  size_t n = 0;
  while (off < size) {
    off_t d = lseek(fd, (off_t)off, SEEK_DATA);
    if (d < 0 && errno == ENXIO)
      break; /* a hole to the end */
    if (d < 0 || (uint64_t)d < off)
      return;
    if ((uint64_t)d >= size)
      break;
    off_t e = lseek(fd, d, SEEK_HOLE);
    if (e <= d)
      return;
    uint64_t end = (uint64_t)e < size ? (uint64_t)e : size;
    if (n == SPARSE_REGIONS_MAX - 1)
      end = size; /* the rest as data */
    map->r[n++] = (struct region){.off = (uint64_t)d, .len = end - (uint64_t)d};
    data += end - (uint64_t)d;
    off = end;
  }
  if (n == 1 && map->r[0].off == 0 && map->r[0].len == size)
    return; /* no hole after all */
  map->sparse = true;
  map->n = n;
  map->data = data;
}

/* Writes LEN zero bytes of the member's data: a hole of a sparse file
 * (libarchive skips it) or what a file that shrank meanwhile lacks. */
static int ex_zeros(struct exporter *ex, uint64_t len) {
  if (len > 0 && !ex->zbuf) {
    ex->zbuf = calloc(1, ZERO_BUF_BYTES);
    if (!ex->zbuf)
      return sbx_error_set(ex->e, SBX_OK, ENOMEM, "out of memory");
  }
  while (len > 0) {
    size_t n = len < ZERO_BUF_BYTES ? (size_t)len : ZERO_BUF_BYTES;
    la_ssize_t w = archive_write_data(ex->a, ex->zbuf, n);
    if (w <= 0) {
      if (ex->err)
        return ex->err;
      return xfer_la_fail(ex->e, ex->a, "cannot write the archive");
    }
    len -= (uint64_t)w;
  }
  return 0;
}

/* Copies LEN bytes of FD from OFF into the archive; zeros stand for what a
 * file that shrank meanwhile no longer has. */
static int ex_copy(struct exporter *ex, int fd, uint64_t off, uint64_t len) {
  char q[NAME_SHOWN + 4];
  while (len > 0) {
    if (ex_cancelled(ex))
      return ex->err;
    size_t want = len < COPY_BUF_BYTES ? (size_t)len : COPY_BUF_BYTES;
    ssize_t n = pread(fd, ex->rbuf, want, (off_t)off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot read \"%s\": %s",
                           xfer_shown(ex->path, q), strerror(errno));
    }
    if (n == 0)
      return ex_zeros(ex, len); /* shrank meanwhile */
    la_ssize_t w = archive_write_data(ex->a, ex->rbuf, (size_t)n);
    if (w < 0) {
      if (ex->err)
        return ex->err;
      return xfer_la_fail(ex->e, ex->a, "cannot write the archive");
    }
    off += (uint64_t)n;
    len -= (uint64_t)n;
  }
  return 0;
}

/* Archives the open regular file FD (ST) at ex->path: its header, then its
 * data; a sparse file as its data regions and holes, so that it stays
 * sparse and its holes cost nothing. */
static int ex_file_data(struct exporter *ex, int fd, const struct stat *st) {
  struct file_map map;
  file_map(fd, st, &map);
  ex->data_bytes += map.data;
  if (ex->data_bytes > ex->max_data)
    return sbx_error_set(
        ex->e, SBX_LIMIT_EXCEEDED, EFBIG,
        "the tree holds more than %" PRIu64 " bytes to archive", ex->max_data);
  int r = ex_header(ex, st, NULL, NULL, &map);
  if (r < 0)
    return r;
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint64_t size = (uint64_t)st->st_size;
  if (!map.sparse)
    return ex_copy(ex, fd, 0, size);
  /* Every byte up to the size goes through libarchive, which writes the
   * regions and skips the holes (it must be given the holes too). */
  uint64_t pos = 0;
  for (size_t i = 0; i < map.n && r == 0; i++) {
    r = ex_zeros(ex, map.r[i].off - pos);
    if (r == 0)
      r = ex_copy(ex, fd, map.r[i].off, map.r[i].len);
    pos = map.r[i].off + map.r[i].len;
  }
  if (r == 0)
    r = ex_zeros(ex, size - pos);
  return r;
}

/* Notes ex->path as a link of the file ST, which has more than one: it
 * waits for the end of the walk (ex_links), when all its links in the tree
 * are known. */
static int ex_note_link(struct exporter *ex, const struct stat *st) {
  int r = export_links_note(&ex->links, st->st_dev, st->st_ino, ex->path);
  if (r == -E2BIG)
    return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the tree's hard-linked names exceed %u bytes",
                         NAME_POOL_MAX);
  return r < 0 ? sbx_error_set(ex->e, SBX_OK, -r, "out of memory") : 0;
}

/* Archives the regular file NAME in DFD (lstat'ed as LST), or notes it for
 * later when it has more than one link. */
static int ex_file(struct exporter *ex, int dfd, const char *name,
                   const struct stat *lst) {
  char q[NAME_SHOWN + 4];
  if (lst->st_nlink > 1)
    return ex_note_link(ex, lst);
  _cleanup_close_ int fd = openat(
      dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return 0; /* removed meanwhile */
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot read \"%s\": %s",
                         xfer_shown(ex->path, q), strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot stat \"%s\": %s",
                         xfer_shown(ex->path, q), strerror(errno));
  if (!S_ISREG(st.st_mode))
    return 0; /* replaced by something else meanwhile */
  if (st.st_nlink > 1)
    return ex_note_link(ex, &st); /* linked meanwhile */
  return ex_file_data(ex, fd, &st);
}

/* Finds the first of file K's paths that is still K beneath the exported
 * directory (not through a link): its path in ex->path, its stat in *ST.
 * 0, or -ENOENT when none is (all removed or replaced meanwhile). Only
 * looks (O_PATH): a file left out need not be readable. */
static int ex_link_find(struct exporter *ex, const struct export_link *k,
                        struct stat *st) {
  uint32_t at = UINT32_MAX;
  for (const char *p; (p = export_links_path(&ex->links, k, &at));) {
    int fd = sbx_openat2(ex->root_fd, p, O_PATH | O_NOFOLLOW, 0,
                         RESOLVE_NO_SYMLINKS);
    if (fd < 0)
      continue; /* changed meanwhile */
    int r = fstat(fd, st);
    (void)close(fd);
    if (r == 0 && S_ISREG(st->st_mode) && st->st_dev == k->dev &&
        st->st_ino == k->ino) {
      (void)snprintf(ex->path, sizeof(ex->path), "%s", p);
      return 0;
    }
  }
  return -ENOENT;
}

/* Opens ex->path, file K, for reading; its stat in *ST. -ENOENT when it
 * changed meanwhile. */
static int ex_link_open(struct exporter *ex, const struct export_link *k,
                        struct stat *st) {
  char q[NAME_SHOWN + 4];
  int fd = sbx_openat2(ex->root_fd, ex->path,
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0,
                       RESOLVE_NO_SYMLINKS);
  if (fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV)
    return -ENOENT;
  if (fd < 0)
    return sbx_error_set(ex->e, SBX_OK, -fd, "cannot read \"%s\": %s",
                         xfer_shown(ex->path, q), strerror(-fd));
  if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_dev == k->dev &&
      st->st_ino == k->ino)
    return fd;
  (void)close(fd);
  return -ENOENT;
}

/* Archives the files with more than one link, in the order they were met:
 * each as a regular file at its first path and hard links at the others.
 * A file with links outside the exported tree (more links than the walk
 * met) is left out, each of its paths named in ex->skipped: its contents
 * are not the tree's to give (another sandbox's token, a cache outside the
 * workspace), and a hard link out of the archive cannot be restored. */
static int ex_links(struct exporter *ex) {
  for (size_t i = 0; i < ex->links.n; i++) {
    const struct export_link *k = &ex->links.v[i];
    struct stat st;
    if (ex_link_find(ex, k, &st) < 0)
      continue;
    /* Opened only when it is to be archived; then its stat is the fd's. */
    _cleanup_close_ int fd = -1;
    if (st.st_nlink <= k->seen) {
      fd = ex_link_open(ex, k, &st);
      if (fd == -ENOENT)
        continue;
      if (fd < 0)
        return fd;
    }
    uint32_t at = UINT32_MAX;
    if (st.st_nlink > k->seen) {
      for (const char *p; (p = export_links_path(&ex->links, k, &at));)
        if (ex->skipped && export_skipped_add(ex->skipped, p) < 0)
          return sbx_error_set(ex->e, SBX_OK, ENOMEM, "out of memory");
      continue;
    }
    char first[SBX_PATH_MAX];
    memcpy(first, ex->path, sizeof(first));
    int r = ex_file_data(ex, fd, &st);
    for (const char *p;
         r == 0 && (p = export_links_path(&ex->links, k, &at));) {
      if (strcmp(p, first) == 0)
        continue;
      (void)snprintf(ex->path, sizeof(ex->path), "%s", p);
      r = ex_header(ex, &st, NULL, first, NULL);
    }
    if (r < 0)
      return r;
  }
  return 0;
}

static int ex_dir(struct exporter *ex, int dfd, size_t plen, unsigned depth);

/* Archives one entry NAME of DFD; ex->path holds its relative path. */
static int ex_entry(struct exporter *ex, int dfd, const char *name, size_t clen,
                    unsigned depth) {
  char q[NAME_SHOWN + 4];
  struct stat st;
  if (ex_cancelled(ex))
    return ex->err;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT)
      return 0;
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot stat \"%s\": %s",
                         xfer_shown(ex->path, q), strerror(errno));
  }
  switch (st.st_mode & S_IFMT) {
  case S_IFREG:
    return ex_file(ex, dfd, name, &st);
  case S_IFLNK: {
    char target[SBX_PATH_MAX];
    ssize_t n = readlinkat(dfd, name, target, sizeof(target));
    if (n < 0) {
      if (errno == ENOENT || errno == EINVAL)
        return 0;
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot read link \"%s\": %s",
                           xfer_shown(ex->path, q), strerror(errno));
    }
    if ((size_t)n >= sizeof(target))
      return sbx_error_set(ex->e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "the target of \"%s\" is too long",
                           xfer_shown(ex->path, q));
    target[n] = '\0';
    return ex_header(ex, &st, target, NULL, NULL);
  }
  case S_IFDIR: {
    if (depth >= EXPORT_MAX_DEPTH)
      return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, ELOOP,
                           "\"%s\" is nested more than %d directories deep",
                           xfer_shown(ex->path, q), EXPORT_MAX_DEPTH);
    _cleanup_close_ int cfd =
        openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0) {
      if (errno == ENOENT)
        return 0;
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot open \"%s\": %s",
                           xfer_shown(ex->path, q), strerror(errno));
    }
    if (fstat(cfd, &st) < 0)
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot stat \"%s\": %s",
                           xfer_shown(ex->path, q), strerror(errno));
    int r = ex_header(ex, &st, NULL, NULL, NULL);
    if (r < 0)
      return r;
    return ex_dir(ex, cfd, clen, depth + 1);
  }
  default:
    return 0; /* sockets, fifos and devices are not archived */
  }
}

/* qsort's order of directory entries: bytewise, the same on every host. */
static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Archives the contents of DFD (whose relative path is ex->path[0..plen)) in
 * name order, so the same tree gives the same archive. */
static int ex_dir(struct exporter *ex, int dfd, size_t plen, unsigned depth) {
  char q[NAME_SHOWN + 4];
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot list \"%s\": %s",
                         plen ? xfer_shown(ex->path, q) : ".", strerror(errno));
  DIR *dir = fdopendir(fd);
  if (!dir) {
    int err = errno;
    (void)close(fd);
    return sbx_error_set(ex->e, SBX_OK, err, "cannot list \"%s\": %s",
                         plen ? xfer_shown(ex->path, q) : ".", strerror(err));
  }
  /* Names go into one pool, then an array of pointers into it is sorted. */
  _cleanup_free_ char *pool = NULL;
  size_t used = 0, cap = 0, count = 0;
  int r = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(dir);
    if (!de) {
      if (errno != 0)
        r = sbx_error_set(ex->e, SBX_OK, errno, "cannot list \"%s\": %s",
                          plen ? xfer_shown(ex->path, q) : ".",
                          strerror(errno));
      break;
    }
    const char *n = de->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
      continue;
    if (count >= ex->max_members + ex->nexcl) {
      r = sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, E2BIG,
                        "the tree has more than %" PRIu64 " entries to archive",
                        ex->max_members);
      break;
    }
    size_t len = strlen(n) + 1;
    if (used + len > cap) {
      size_t ncap = cap ? cap * 2 : 4096;
      while (ncap < used + len)
        ncap *= 2;
      char *np = realloc(pool, ncap);
      if (!np) {
        r = sbx_error_set(ex->e, SBX_OK, ENOMEM, "out of memory");
        break;
      }
      pool = np;
      cap = ncap;
    }
    memcpy(pool + used, n, len);
    used += len;
    count++;
  }
  (void)closedir(dir);
  if (r < 0)
    return r;
  _cleanup_free_ char **names = calloc(count ? count : 1, sizeof(*names));
  if (!names)
    return sbx_error_set(ex->e, SBX_OK, ENOMEM, "out of memory");
  for (size_t i = 0, off = 0; i < count; i++) {
    names[i] = pool + off;
    off += strlen(pool + off) + 1;
  }
  qsort(names, count, sizeof(*names), cmp_names);

  for (size_t i = 0; i < count; i++) {
    size_t nl = strlen(names[i]);
    size_t clen = plen ? plen + 1 + nl : nl;
    if (clen >= sizeof(ex->path))
      return sbx_error_set(ex->e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "a path beneath \"%s\" is too long",
                           plen ? xfer_shown(ex->path, q) : ".");
    if (plen)
      ex->path[plen] = '/';
    memcpy(ex->path + (plen ? plen + 1 : 0), names[i], nl + 1);
    if (!ex_excluded(ex)) {
      r = ex_entry(ex, dfd, names[i], clen, depth);
      if (r < 0)
        return r;
    }
    ex->path[plen] = '\0';
  }
  return 0;
}

/* Frees what export_tree allocated for EX. */
static void exporter_fini(struct exporter *ex) {
  if (ex->a)
    archive_write_free(ex->a);
  if (ex->ent)
    archive_entry_free(ex->ent);
  export_links_fini(&ex->links);
  free(ex->obuf);
  free(ex->rbuf);
  free(ex->zbuf);
}

/* Writes the archive of DIR_FD into OUT_FD within the limits L; returns its
 * size in *TOTAL. With STREAM, publishes its progress there as it goes. */
int export_tree(const struct xfer_limits *l, struct sbx_error *e, int dir_fd,
                int out_fd, char **excl, size_t nexcl, int zstd_level,
                struct xstream *stream, struct export_skipped *skipped,
                uint64_t *total) {
  struct exporter ex = {
      .e = e,
      .out_fd = out_fd,
      .stream = stream,
      .root_fd = dir_fd,
      .skipped = skipped,
      .max_out = l->input_bytes,
      .excl = excl,
      .nexcl = nexcl,
      .max_members = l->members,
      .max_data = l->extracted_bytes,
  };
  int r = 0;
  ex.obuf = malloc(OUT_BUF_BYTES);
  ex.rbuf = malloc(COPY_BUF_BYTES);
  ex.a = archive_write_new();
  ex.ent = archive_entry_new();
  if (!ex.obuf || !ex.rbuf || !ex.a || !ex.ent) {
    r = sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    goto out;
  }
  /* Unblocked output: libarchive hands data straight to ex_write_cb, which
   * does its own buffering; the archive ends after its two zero blocks. */
  if (archive_write_set_format_pax(ex.a) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(ex.a, 0) != ARCHIVE_OK) {
    r = xfer_la_fail(e, ex.a, "cannot set up the archive");
    goto out;
  }
  if (zstd_level > 0) {
    char lv[16];
    (void)snprintf(lv, sizeof(lv), "%d", zstd_level);
    if (archive_write_add_filter_zstd(ex.a) != ARCHIVE_OK ||
        archive_write_set_filter_option(ex.a, "zstd", "compression-level",
                                        lv) != ARCHIVE_OK) {
      r = xfer_la_fail(e, ex.a, "cannot set up zstd compression");
      goto out;
    }
  }
  if (archive_write_open2(ex.a, &ex, NULL, ex_write_cb, NULL, NULL) !=
      ARCHIVE_OK) {
    r = ex.err ? ex.err : xfer_la_fail(e, ex.a, "cannot start the archive");
    goto out;
  }
  if (!(nexcl == 1 && strcmp(excl[0], ".") == 0)) {
    r = ex_dir(&ex, dir_fd, 0, 0);
    if (r == 0)
      r = ex_links(&ex);
    if (r < 0)
      goto out;
  }
  if (archive_write_close(ex.a) != ARCHIVE_OK) {
    r = ex.err ? ex.err : xfer_la_fail(e, ex.a, "cannot finish the archive");
    goto out;
  }
  r = ex_flush(&ex);
  if (r < 0) {
    r = sbx_error_set(e, SBX_OK, -r,
                      "cannot write the archive's temporary file: %s",
                      strerror(-r));
    goto out;
  }
  *total = ex.out_bytes;
out:
  exporter_fini(&ex);
  return r;
}
