/* Import, pass 2: writing the members pass 1 checked beneath the
 * destination, every path opened with RESOLVE_NO_SYMLINKS: directories,
 * files (by a few threads from a mapped, uncompressed spool), links, and
 * last the directories' modes, owners and times. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "sandboxd/fs/files.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

/* Opens (creating as needed) the parent directory of member I and returns it
 * (borrowed) in *PFD with the member's last component in *NAME. */
int extract_parent(struct importer *im, size_t i, int *pfd, const char **name) {
  char q[NAME_SHOWN + 4];
  const char *p = import_path(im, i);
  const char *slash = memrchr(p, '/', im->m[i].plen);
  *name = slash ? slash + 1 : p;
  if (!slash) {
    *pfd = im->base;
    return 0;
  }
  size_t n = (size_t)(slash - p);
  if (im->pfd >= 0 && strlen(im->parent) == n &&
      memcmp(im->parent, p, n) == 0) {
    *pfd = im->pfd;
    return 0;
  }
  if (im->pfd >= 0)
    (void)close(im->pfd);
  im->pfd = -1;
  memcpy(im->parent, p, n);
  im->parent[n] = '\0';
  int fd = sbx_openat2(im->base, im->parent, O_PATH | O_DIRECTORY, 0,
                       RESOLVE_NO_SYMLINKS);
  if (fd < 0) {
    /* Create the missing directories one by one. */
    char buf[SBX_PATH_MAX];
    memcpy(buf, im->parent, n + 1);
    fd = openat(im->base, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    char *s = buf;
    while (fd >= 0 && s) {
      char *e = strchr(s, '/');
      if (e)
        *e = '\0';
      int next =
          sbx_openat2(fd, s, O_PATH | O_DIRECTORY, 0, RESOLVE_NO_SYMLINKS);
      if (next == -ENOTDIR || next == -ELOOP) {
        /* Only a directory member may replace what is there (checked). */
        ssize_t a = import_lookup(im, buf, strlen(buf));
        if (a >= 0 && im->m[a].type == M_DIR && unlinkat(fd, s, 0) == 0)
          next = -ENOENT;
      }
      if (next == -ENOENT) {
        if (mkdirat(fd, s, 0755) < 0 && errno != EEXIST)
          next = -errno;
        else
          next =
              sbx_openat2(fd, s, O_PATH | O_DIRECTORY, 0, RESOLVE_NO_SYMLINKS);
      }
      (void)close(fd);
      fd = next;
      if (e)
        *e = '/';
      s = e ? e + 1 : NULL;
    }
    if (fd < 0)
      return sbx_error_set(im->e, SBX_OK, -fd,
                           "cannot create the directory of \"%s\": %s",
                           xfer_shown(p, q), strerror(-fd));
  }
  im->pfd = fd;
  *pfd = fd;
  return 0;
}

/* The times to set on member MM: its mtime when it has one, never atime. */
static void member_times(const struct member *mm, struct timespec ts[2]) {
  ts[0] = (struct timespec){.tv_nsec = UTIME_OMIT};
  if (mm->has_mtime)
    ts[1] = (struct timespec){.tv_sec = mm->mtime, .tv_nsec = mm->mtime_ns};
  else
    ts[1] = (struct timespec){.tv_nsec = UTIME_OMIT};
}

/* Creates member I's regular file NAME in PFD (replacing what is there)
 * and returns its descriptor. */
static int file_create(const struct importer *im, size_t i, int pfd,
                       const char *name, struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  const char *p = import_path(im, i);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(pfd, name, flags, 0600);
  if (fd < 0 && errno == EEXIST) {
    if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
      return sbx_error_set(e, SBX_OK, errno, "cannot replace \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
    fd = openat(pfd, name, flags, 0600);
  }
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  return fd;
}

/* Writes a block of member I's data into FD at OFF. */
static int file_write(const struct importer *im, size_t i, int fd,
                      const void *buf, size_t len, uint64_t off,
                      struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  int r = files_write_all(fd, buf, len, (int64_t)off);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s",
                         xfer_shown(import_path(im, i), q), strerror(-r));
  return 0;
}

/* Gives member I's file FD, whose data ends at END, its size (a hole at the
 * end of a sparse file), owner, mode and times. */
static int file_finish(const struct importer *im, size_t i, int fd,
                       uint64_t end, struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = import_path(im, i);
  if (end < mm->size && ftruncate(fd, (off_t)mm->size) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  if (im->d->is_root && fchown(fd, mm->uid, mm->gid) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot chown \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  if (fchmod(fd, mm->mode & 0777) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot chmod \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  struct timespec ts[2];
  member_times(mm, ts);
  if (futimens(fd, ts) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot set the times of \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  return 0;
}

/* The next block of member I's data from A: 1 and the block, 0 at its end.
 * Checks the block against the header and the limit on extracted bytes. */
static int im_block(struct importer *im, struct archive *a, size_t i,
                    const void **buf, size_t *len, uint64_t *off,
                    uint64_t *end) {
  char q[NAME_SHOWN + 4];
  int r = import_data_block(im, a, i, buf, len, off, end);
  if (r <= 0)
    return r;
  im->written += *len;
  if (im->written > im->x->lim.extracted_bytes)
    return sbx_error_set(
        im->e, SBX_LIMIT_EXCEEDED, EFBIG,
        "archive extracts to more than %" PRIu64 " bytes (at member \"%s\")",
        im->x->lim.extracted_bytes, xfer_shown(import_path(im, i), q));
  return 1;
}

/* What is done with a block of member I's data: BUF, LEN bytes at OFF. */
typedef int (*block_fn)(struct importer *im, size_t i, const void *buf,
                        size_t len, uint64_t off, void *arg);

/* Calls FN with each block of member I's data as it is read from A. */
static int im_blocks(struct importer *im, struct archive *a, size_t i,
                     block_fn fn, void *arg) {
  for (uint64_t end = 0;;) {
    const void *buf = NULL;
    size_t len = 0;
    uint64_t off = 0;
    int r = im_block(im, a, i, &buf, &len, &off, &end);
    if (r <= 0)
      return r;
    r = fn(im, i, buf, len, off, arg);
    if (r < 0)
      return r;
  }
}

struct file_out {
  int fd;
  uint64_t end; /* where the data written so far ends */
};

/* A block_fn: writes the block into the file of ARG (a file_out). */
static int write_block(struct importer *im, size_t i, const void *buf,
                       size_t len, uint64_t off, void *arg) {
  struct file_out *fo = arg;
  int r = file_write(im, i, fo->fd, buf, len, off, im->e);
  if (r == 0 && off + len > fo->end)
    fo->end = off + len;
  return r;
}

/* Writes member I, a regular file, as its data are read from A. */
int extract_file(struct importer *im, struct archive *a, size_t i, int pfd,
                 const char *name) {
  _cleanup_close_ int fd = file_create(im, i, pfd, name, im->e);
  if (fd < 0)
    return fd;
  struct file_out fo = {.fd = fd};
  int r = im_blocks(im, a, i, write_block, &fo);
  if (r < 0)
    return r;
  return file_finish(im, i, fd, fo.end, im->e);
}

/* ---- files written by threads ---- */

/* When the spool is mapped and not compressed, every block of member data
 * libarchive returns is a pointer into the mapping, valid until pass 2 ends.
 * Pass 2 then makes the directories and lists the regular files with their
 * blocks as it reads the headers; the files are written next, by this
 * thread and, with more than one CPU, by a few others taking runs of the
 * list; links come last. File data are most of an extraction's time: two
 * threads write them 1.3x to 2x as fast as one (tmpfs, ext4). The threads
 * take work from a shared counter and wake nobody, so there is no hand-off
 * per file (a wake-up per file cost more than it saved). */

#define WRITERS_MAX 4      /* threads, this one included */
#define WRITER_MIN_FILES 8 /* regular files per thread */
#define WRITER_RUN 8       /* files taken at a time */

struct wblock {
  const void *p;
  size_t len;
  uint64_t off;
};

struct wfile {
  size_t i;         /* the member */
  size_t blk, nblk; /* its blocks in files.blk */
};

struct files {
  const struct importer *im;
  struct wfile *f;
  size_t n, cap;
  struct wblock *blk;
  size_t nblk, bcap;
  size_t next; /* atomic: the first file not taken */
  bool failed; /* atomic: stop taking files */
  pthread_mutex_t mu;
  int err; /* under mu: the first failure */
  struct sbx_error fail;
};

/* Reads member I's data (pointers into the mapping) and lists the file. */
static int list_block(struct importer *im, size_t i, const void *buf,
                      size_t len, uint64_t off, void *arg) {
  (void)i;
  struct files *fs = arg;
  const char *lo = im->map, *hi = lo + im->maplen;
  if ((const char *)buf < lo || len > (size_t)(hi - (const char *)buf))
    return sbx_error_set(im->e, SBX_INTERNAL, EIO,
                         "archive data outside the mapped archive");
  struct wblock *nb =
      xfer_grow(fs->blk, &fs->bcap, fs->nblk + 1, sizeof(*fs->blk));
  if (!nb)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  fs->blk = nb;
  fs->blk[fs->nblk++] = (struct wblock){.p = buf, .len = len, .off = off};
  fs->f[fs->n].nblk++;
  return 0;
}

/* Lists member I, a regular file, with its blocks from A, for the
 * writer threads. */
static int files_add(struct importer *im, struct files *fs, struct archive *a,
                     size_t i) {
  struct wfile *nf = xfer_grow(fs->f, &fs->cap, fs->n + 1, sizeof(*fs->f));
  if (!nf)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  fs->f = nf;
  fs->f[fs->n] = (struct wfile){.i = i, .blk = fs->nblk};
  int r = im_blocks(im, a, i, list_block, fs);
  if (r < 0)
    return r;
  fs->n++;
  return 0;
}

/* Writes file F in its parent directory *PFD, which this thread opened for
 * PARENT (the cache of extract_parent, one per thread; the directories exist).
 */
static int files_write_one(struct files *fs, const struct wfile *f,
                           char parent[SBX_PATH_MAX], int *pfd,
                           struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  const struct importer *im = fs->im;
  const char *p = import_path(im, f->i);
  size_t plen = im->m[f->i].plen;
  const char *slash = memrchr(p, '/', plen);
  const char *name = slash ? slash + 1 : p;
  int dir = im->base;
  if (slash) {
    size_t n = (size_t)(slash - p);
    if (*pfd < 0 || strlen(parent) != n || memcmp(parent, p, n) != 0) {
      if (*pfd >= 0)
        (void)close(*pfd);
      memcpy(parent, p, n);
      parent[n] = '\0';
      *pfd = sbx_openat2(im->base, parent, O_PATH | O_DIRECTORY, 0,
                         RESOLVE_NO_SYMLINKS);
      if (*pfd < 0)
        return sbx_error_set(e, SBX_OK, -*pfd,
                             "cannot open the directory of \"%s\": %s",
                             xfer_shown(p, q), strerror(-*pfd));
    }
    dir = *pfd;
  }
  _cleanup_close_ int fd = file_create(im, f->i, dir, name, e);
  if (fd < 0)
    return fd;
  uint64_t end = 0;
  for (size_t k = 0; k < f->nblk; k++) {
    const struct wblock *b = &fs->blk[f->blk + k];
    int r = file_write(im, f->i, fd, b->p, b->len, b->off, e);
    if (r < 0)
      return r;
    if (b->off + b->len > end)
      end = b->off + b->len;
  }
  return file_finish(im, f->i, fd, end, e);
}

/* A writer thread (this one too): takes runs of WRITER_RUN files until
 * none is left or one failed; the first failure is kept for files_write. */
static void *files_work(void *arg) {
  struct files *fs = arg;
  char parent[SBX_PATH_MAX];
  int pfd = -1;
  while (!__atomic_load_n(&fs->failed, __ATOMIC_RELAXED)) {
    size_t k = __atomic_fetch_add(&fs->next, WRITER_RUN, __ATOMIC_RELAXED);
    if (k >= fs->n)
      break;
    size_t end = fs->n - k < WRITER_RUN ? fs->n : k + WRITER_RUN;
    for (; k < end; k++) {
      struct sbx_error e = {0};
      int r = files_write_one(fs, &fs->f[k], parent, &pfd, &e);
      if (r < 0) {
        __atomic_store_n(&fs->failed, true, __ATOMIC_RELAXED);
        pthread_mutex_lock(&fs->mu);
        if (fs->err == 0) {
          fs->err = r;
          fs->fail = e;
        }
        pthread_mutex_unlock(&fs->mu);
        break;
      }
    }
  }
  if (pfd >= 0)
    (void)close(pfd);
  return NULL;
}

/* Writes the listed files: this thread and, when there are enough files
 * and CPUs, up to WRITERS_MAX - 1 others. */
static int files_write(struct importer *im, struct files *fs) {
  cpu_set_t cpus;
  unsigned want = 1;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
    want = (unsigned)CPU_COUNT(&cpus);
  if (want > WRITERS_MAX)
    want = WRITERS_MAX;
  if (want > fs->n / WRITER_MIN_FILES)
    want = (unsigned)(fs->n / WRITER_MIN_FILES);
  pthread_t th[WRITERS_MAX];
  unsigned nth = 0;
  while (nth + 1 < want && pthread_create(&th[nth], NULL, files_work, fs) == 0)
    nth++;
  files_work(fs);
  for (unsigned k = 0; k < nth; k++)
    (void)pthread_join(th[k], NULL);
  if (fs->err < 0)
    *im->e = fs->fail;
  return fs->err;
}

/* Makes room for a new non-directory NAME in PFD: removes what is there. */
static int im_clear(struct importer *im, int pfd, const char *name,
                    const char *p) {
  char q[NAME_SHOWN + 4];
  if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot replace \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  return 0;
}

/* Creates member I, a symbolic link NAME in PFD (replacing what is there),
 * with its owner (as root) and times. */
static int im_symlink(struct importer *im, size_t i, int pfd,
                      const char *name) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = import_path(im, i);
  const char *t = im->pool + mm->link;
  if (symlinkat(t, pfd, name) < 0) {
    if (errno != EEXIST)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
    int r = im_clear(im, pfd, name, p);
    if (r < 0)
      return r;
    if (symlinkat(t, pfd, name) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
  }
  if (im->d->is_root &&
      fchownat(pfd, name, mm->uid, mm->gid, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot chown \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  struct timespec ts[2];
  member_times(mm, ts);
  if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx_error_set(im->e, SBX_OK, errno,
                         "cannot set the times of \"%s\": %s", xfer_shown(p, q),
                         strerror(errno));
  return 0;
}

/* Creates member I, a hard link NAME in PFD to the regular file member it
 * names (replacing what is there). */
static int im_hardlink(struct importer *im, size_t i, int pfd,
                       const char *name) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = import_path(im, i);
  const char *t = import_path(im, mm->target);
  const char *slash = strrchr(t, '/');
  const char *tname = slash ? slash + 1 : t;
  _cleanup_close_ int tfd = -1;
  int tdir = im->base;
  if (slash) {
    char buf[SBX_PATH_MAX];
    memcpy(buf, t, (size_t)(slash - t));
    buf[slash - t] = '\0';
    tfd = sbx_openat2(im->base, buf, O_PATH | O_DIRECTORY, 0,
                      RESOLVE_NO_SYMLINKS);
    if (tfd < 0)
      return sbx_error_set(im->e, SBX_OK, -tfd, "cannot link \"%s\": %s",
                           xfer_shown(p, q), strerror(-tfd));
    tdir = tfd;
  }
  if (linkat(tdir, tname, pfd, name, 0) < 0) {
    if (errno != EEXIST)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot link \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
    int r = im_clear(im, pfd, name, p);
    if (r < 0)
      return r;
    if (linkat(tdir, tname, pfd, name, 0) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot link \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
  }
  return 0;
}

/* Creates member I, a directory NAME in PFD, private until its mode is
 * applied at the end; an existing directory is kept, anything else
 * replaced. */
static int im_dir(struct importer *im, size_t i, int pfd, const char *name) {
  char q[NAME_SHOWN + 4];
  const char *p = import_path(im, i);
  if (mkdirat(pfd, name, 0700) == 0)
    return 0;
  if (errno != EEXIST)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  int fd = sbx_openat2(pfd, name, O_PATH | O_DIRECTORY, 0, RESOLVE_NO_SYMLINKS);
  if (fd >= 0) {
    (void)close(fd);
    return 0;
  }
  /* Something else is there: a directory member replaces it. */
  int r = im_clear(im, pfd, name, p);
  if (r < 0)
    return r;
  if (mkdirat(pfd, name, 0700) < 0)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                         xfer_shown(p, q), strerror(errno));
  return 0;
}

/* qsort_r's order of directory members: deepest (longest path) first. */
static int cmp_dirs_desc(const void *a, const void *b, void *arg) {
  const struct importer *im = arg;
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return strcmp(import_path(im, y), import_path(im, x));
}

/* Applies directory members' modes, owners and times, deepest first, after
 * everything inside them was written. */
int extract_dir_meta(struct importer *im) {
  char q[NAME_SHOWN + 4];
  size_t nd = 0;
  for (size_t i = 0; i < im->n; i++)
    nd += im->m[i].type == M_DIR;
  if (nd == 0)
    return 0;
  _cleanup_free_ size_t *dirs = calloc(nd, sizeof(*dirs));
  if (!dirs)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  nd = 0;
  for (size_t i = 0; i < im->n; i++)
    if (im->m[i].type == M_DIR)
      dirs[nd++] = i;
  qsort_r(dirs, nd, sizeof(*dirs), cmp_dirs_desc, im);
  for (size_t k = 0; k < nd; k++) {
    const struct member *mm = &im->m[dirs[k]];
    const char *p = import_path(im, dirs[k]);
    _cleanup_close_ int fd =
        sbx_openat2(im->x->dest_fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0,
                    RESOLVE_NO_SYMLINKS);
    if (fd < 0)
      return sbx_error_set(im->e, SBX_OK, -fd, "cannot open \"%s\": %s",
                           xfer_shown(p, q), strerror(-fd));
    if (im->d->is_root && fchown(fd, mm->uid, mm->gid) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot chown \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
    if (fchmod(fd, mm->mode & 01777) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot chmod \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
    struct timespec ts[2];
    member_times(mm, ts);
    if (futimens(fd, ts) < 0)
      return sbx_error_set(im->e, SBX_OK, errno,
                           "cannot set the times of \"%s\": %s",
                           xfer_shown(p, q), strerror(errno));
  }
  return 0;
}

/* Creates member I, a directory or a link, in its parent. */
int extract_make(struct importer *im, size_t i) {
  char q[NAME_SHOWN + 4];
  int pfd = -1;
  const char *name;
  int r = extract_parent(im, i, &pfd, &name);
  if (r < 0)
    return r;
  switch (im->m[i].type) {
  case M_DIR:
    return im_dir(im, i, pfd, name);
  case M_SYMLINK:
    return im_symlink(im, i, pfd, name);
  case M_HARDLINK:
    return im_hardlink(im, i, pfd, name);
  default:
    return sbx_error_set(im->e, SBX_INTERNAL, EINVAL,
                         "member \"%s\" has an unexpected type",
                         xfer_shown(import_path(im, i), q));
  }
}

/* Creates the link members, which wait until the files they link to and
 * the directories they lead through exist. */
int extract_links(struct importer *im) {
  for (size_t i = 0; i < im->n; i++)
    if (im->m[i].type == M_SYMLINK || im->m[i].type == M_HARDLINK) {
      int r = extract_make(im, i);
      if (r < 0)
        return r;
    }
  return 0;
}

/* Pass 2: extracts the members checked in pass 1. From a mapped,
 * uncompressed spool: directories in the archive's order, then the files
 * (by threads), then the links; otherwise every member in order. */
int extract_all(struct importer *im) {
  struct archive *a = NULL;
  int r = import_reader(im, &a);
  if (r < 0)
    return r;
  (void)posix_fadvise(im->x->spool_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  bool listed = im->map && archive_filter_count(a) == 1;
  struct files fs = {.im = im};
  for (size_t i = 0; i < im->n; i++) {
    struct archive_entry *ent;
    r = import_next(im, a, &ent);
    if (r <= 0) {
      if (r == 0)
        r = sbx_error_set(im->e, SBX_INTERNAL, EIO,
                          "the archive ended early on a second reading");
      break;
    }
    /* The spool is private and unchanged; the headers read the same. */
    const char *raw = archive_entry_pathname(ent);
    if (!raw)
      raw = archive_entry_pathname_utf8(ent);
    char path[SBX_PATH_MAX];
    r = raw ? import_norm(im, raw, path, "member", NULL) : -EINVAL;
    if (r == 0 && strcmp(path, import_path(im, i)) != 0)
      r = -EINVAL;
    if (r < 0) {
      r = sbx_error_set(im->e, SBX_INTERNAL, EIO,
                        "the archive reads differently a second time");
      break;
    }
    enum mtype t = im->m[i].type;
    if (t == M_SELF || (listed && (t == M_SYMLINK || t == M_HARDLINK)))
      continue;
    if (t == M_REG) {
      int pfd = -1;
      const char *name;
      r = extract_parent(im, i, &pfd, &name);
      if (r == 0)
        r = listed ? files_add(im, &fs, a, i)
                   : extract_file(im, a, i, pfd, name);
    } else {
      r = extract_make(im, i);
    }
    if (r < 0)
      break;
  }
  archive_read_free(a);
  if (r == 0 && listed) {
    pthread_mutex_init(&fs.mu, NULL);
    r = files_write(im, &fs);
    pthread_mutex_destroy(&fs.mu);
    if (r == 0)
      r = extract_links(im);
  }
  free(fs.f);
  free(fs.blk);
  if (im->pfd >= 0)
    (void)close(im->pfd);
  im->pfd = -1;
  if (r < 0)
    return r;
  return extract_dir_meta(im);
}
