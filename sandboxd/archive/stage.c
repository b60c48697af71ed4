/* Import: extraction while the archive arrives, into a staging directory
 * inside an empty destination. */
#include <archive.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "sandboxd/fs/files.h"
#include "shared/fileio.h"
#include "shared/log.h"

/* An import into an empty directory is extracted while it arrives. A thread
 * reads the spool as ImportWrite fills it (mapped for the whole input
 * limit), checks every header as pass 1 does, and makes the directories and
 * files in a staging directory, ".sbx-import-HANDLE", inside the
 * destination; links wait. At the finish, once every byte is in, come the
 * checks that need the whole archive, then the links, then the staging
 * directory's entries are renamed into the destination (RENAME_NOREPLACE)
 * and the directories get their metadata. On anything else (a refused
 * member, an error, a destination that is no longer empty, a tree too deep
 * to remove) the staging directory is removed and the finish runs the two
 * passes over the spool, as for any other destination; their answer is the
 * import's. A refused archive still leaves the destination as it was, and
 * receiving and extracting overlap. */

#define STAGE_MAX_DEPTH (FILES_MAX_DEPTH / 2) /* deeper: the two passes */
/* The most of the mapping given to libarchive at once: what is resident of
 * it at any time. */
#define STAGE_READ_BYTES (1u << 20)

struct stage {
  struct xfer *x;
  pthread_t thread;
  bool started;
  int dir_fd;      /* the staging directory (O_PATH); owned */
  char name[40];   /* its name in the destination */
  const char *map; /* the spool, mapped for the input limit */
  size_t maplen;
  struct importer im;   /* the thread's, then the finish's */
  struct sbx_error err; /* why staging stopped */
  int result;           /* the thread's, once joined */
  uint64_t consumed;    /* the thread's: bytes given to libarchive */
  uint64_t dropped;     /* the thread's: mapped pages let go before this */
  size_t page;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t received; /* under mu: bytes in the spool */
  bool eof;          /* under mu: the finish came, no more bytes */
  bool cancel;       /* under mu */
};

/* Lets go of the mapping's pages that libarchive is done with: everything
 * before the block it gets next (its last one is no longer referenced once
 * it asks for another). The spool keeps them in the page cache; sandboxd's
 * resident set keeps only the blocks in use. */
static void stage_drop_read(struct stage *s) {
  uint64_t end = s->consumed & ~((uint64_t)s->page - 1);
  if (end <= s->dropped)
    return;
  (void)madvise((void *)(s->map + s->dropped), (size_t)(end - s->dropped),
                MADV_DONTNEED);
  s->dropped = end;
}

/* libarchive's read callback: what has arrived past what it has (at most
 * STAGE_READ_BYTES), waiting for more; 0 at the end. */
static la_ssize_t stage_read(struct archive *a, void *cd, const void **buf) {
  struct stage *s = cd;
  stage_drop_read(s);
  pthread_mutex_lock(&s->mu);
  while (s->received == s->consumed && !s->eof && !s->cancel)
    pthread_cond_wait(&s->cv, &s->mu);
  bool cancel = s->cancel;
  uint64_t end = s->received;
  pthread_mutex_unlock(&s->mu);
  if (cancel) {
    archive_set_error(a, ECANCELED, "the import was cancelled");
    return -1;
  }
  *buf = s->map + s->consumed;
  size_t n = (size_t)(end - s->consumed);
  if (n > STAGE_READ_BYTES)
    n = STAGE_READ_BYTES;
  s->consumed += n;
  return (la_ssize_t)n;
}

/* The number of components of the path P (N bytes). */
static size_t path_depth(const char *p, size_t n) {
  size_t d = 1;
  for (size_t i = 0; i < n; i++)
    d += p[i] == '/';
  return d;
}

/* Checks and adds every member as it arrives, making directories and
 * files; links are left for the finish. */
static int stage_extract(struct stage *s, struct archive *a) {
  struct importer *im = &s->im;
  for (;;) {
    struct archive_entry *ent;
    int r = import_next(im, a, &ent);
    if (r <= 0)
      return r;
    r = import_take(im, a, ent);
    if (r < 0)
      return r;
    size_t i = im->n - 1;
    enum mtype t = im->m[i].type;
    if (t == M_SELF || t == M_SYMLINK || t == M_HARDLINK)
      continue;
    if (path_depth(import_path(im, i), im->m[i].plen) > STAGE_MAX_DEPTH)
      return sbx_error_set(im->e, SBX_OK, ELOOP,
                           "too deep to extract while it arrives");
    if (t == M_REG) {
      int pfd = -1;
      const char *name;
      r = extract_parent(im, i, &pfd, &name);
      if (r == 0)
        r = extract_file(im, a, i, pfd, name);
    } else {
      r = extract_make(im, i);
    }
    if (r < 0)
      return r;
  }
}

/* The staging thread: reads the spool as it fills and extracts what it can;
 * its result waits in s->result for the finish. */
static void *stage_main(void *arg) {
  struct stage *s = arg;
  struct archive *a = NULL;
  int r = import_archive(&s->im, &a);
  if (r == 0 && archive_read_open(a, s, NULL, stage_read, NULL) != ARCHIVE_OK)
    r = xfer_la_fail(s->im.e, a, "cannot read the archive");
  if (r == 0)
    r = stage_extract(s, a);
  if (a)
    archive_read_free(a);
  if (s->im.pfd >= 0)
    (void)close(s->im.pfd);
  s->im.pfd = -1;
  s->result = r;
  return NULL;
}

/* Tells the thread that the spool holds SIZE bytes. */
void stage_feed(struct stage *s, uint64_t size) {
  pthread_mutex_lock(&s->mu);
  s->received = size;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Tells the thread to stop at its next read; does not wait. */
void stage_cancel(struct stage *s) {
  pthread_mutex_lock(&s->mu);
  s->cancel = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Ends the thread: after it has read to the end, or at once when CANCEL. */
static void stage_join(struct stage *s, bool cancel) {
  if (!s->started)
    return;
  pthread_mutex_lock(&s->mu);
  s->eof = true;
  s->cancel = s->cancel || cancel;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  (void)pthread_join(s->thread, NULL);
  s->started = false;
}

/* Removes the staging directory and what is in it. */
static void stage_remove(struct stage *s) {
  if (s->dir_fd < 0)
    return;
  (void)close(s->dir_fd);
  s->dir_fd = -1;
  struct sbx_error e = {0};
  if (files_remove_tree(s->x->dest_fd, s->name, s->name, &e) < 0)
    log_warn("archive import %016" PRIx64 ": %s", s->x->handle, e.msg);
}

/* Stops the thread at once, removes the staging directory and what is in
 * it, frees S. */
struct stage *stage_free(struct stage *s) {
  if (!s)
    return NULL;
  stage_join(s, true);
  stage_remove(s);
  if (s->map)
    (void)munmap((void *)s->map, s->maplen);
  import_fini(&s->im);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return NULL;
}

/* Starts extracting X while it arrives when its destination (the client's
 * PATH) is empty, and names the staging directory in *STAGING_PATH (in C's
 * arena); on any failure X is imported by the two passes. */
void stage_start(struct rpc_call *c, struct xfer *x, const char *path,
                 char **staging_path) {
  bool empty = false;
  long page = sysconf(_SC_PAGESIZE);
  if (import_dir_is_empty(x->dest_fd, &empty) < 0 || !empty || page <= 0 ||
      x->lim.input_bytes > SIZE_MAX / 2)
    return;
  struct stage *s = calloc(1, sizeof(*s));
  if (!s)
    return;
  s->x = x;
  s->dir_fd = -1;
  s->page = (size_t)page;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->maplen =
      ((size_t)x->lim.input_bytes + (size_t)page - 1) & ~((size_t)page - 1);
  if (s->maplen == 0)
    s->maplen = (size_t)page;
  void *m = mmap(NULL, s->maplen, PROT_READ, MAP_SHARED, x->spool_fd, 0);
  if (m == MAP_FAILED) {
    stage_free(s);
    return;
  }
  s->map = m;
  (void)snprintf(s->name, sizeof(s->name), ".sbx-import-%016" PRIx64,
                 x->handle);
  if (mkdirat(x->dest_fd, s->name, 0700) < 0) {
    stage_free(s);
    return;
  }
  s->dir_fd = sbx_openat2(x->dest_fd, s->name, O_PATH | O_DIRECTORY, 0,
                          RESOLVE_NO_SYMLINKS);
  s->im = (struct importer){
      .x = x,
      .base = s->dir_fd,
      .d = c->d,
      .e = &s->err,
      .pfd = -1,
      .fresh = true,
  };
  if (s->dir_fd < 0 || pthread_create(&s->thread, NULL, stage_main, s) != 0) {
    if (s->dir_fd < 0)
      (void)unlinkat(x->dest_fd, s->name, AT_REMOVEDIR);
    stage_free(s);
    return;
  }
  s->started = true;
  x->stage = s;
  size_t pl = strlen(path);
  while (pl > 0 && path[pl - 1] == '/')
    pl--;
  char *sp = sbx_arena_alloc(&c->arena, pl + 1 + sizeof(s->name));
  if (!sp) {
    x->stage = stage_free(s); /* the client could not be told */
    return;
  }
  (void)snprintf(sp, pl + 1 + sizeof(s->name), "%.*s%s%s", (int)pl, path,
                 pl ? "/" : "", s->name);
  *staging_path = sp;
}

/* Renames every entry of the staging directory into the destination; on a
 * failure, moves back those it moved. */
static int stage_move(struct stage *s) {
  int fd = openat(s->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  DIR *dir = fdopendir(fd);
  if (!dir) {
    (void)close(fd);
    return -ENOMEM;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int r = 0;
  struct dirent *de;
  while (r == 0 && (de = readdir(dir))) {
    const char *nm = de->d_name;
    if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
      continue;
    char **nn = xfer_grow(names, &cap, n + 1, sizeof(*names));
    char *copy = nn ? strdup(nm) : NULL;
    if (nn)
      names = nn;
    if (!copy)
      r = -ENOMEM;
    else
      names[n++] = copy;
  }
  (void)closedir(dir);
  size_t moved = 0;
  for (; r == 0 && moved < n; moved++)
    if (renameat2(s->dir_fd, names[moved], s->x->dest_fd, names[moved],
                  RENAME_NOREPLACE) < 0)
      r = -errno;
  if (r < 0) {
    if (moved > 0)
      moved--; /* the one that failed did not move */
    while (moved > 0) {
      moved--;
      if (renameat2(s->x->dest_fd, names[moved], s->dir_fd, names[moved],
                    RENAME_NOREPLACE) < 0)
        log_warn("archive import %016" PRIx64 ": cannot move back \"%s\": %s",
                 s->x->handle, names[moved], strerror(errno));
    }
  }
  for (size_t k = 0; k < n; k++)
    free(names[k]);
  free(names);
  return r;
}

/* The finish of a staged import: 1 done (X's counts set), 0 when the two
 * passes must decide (the staging directory is gone), or a failure of the
 * last step, the directories' metadata, as the two passes would report it. */
int stage_finish(struct stage *s, struct rpc_call *c) {
  stage_join(s, false);
  struct importer *im = &s->im;
  int r = s->result;
  if (r == 0)
    r = import_check_tree(im);
  if (r == 0)
    r = extract_links(im);
  if (im->pfd >= 0)
    (void)close(im->pfd);
  im->pfd = -1;
  if (r == 0)
    r = stage_move(s);
  if (r < 0) {
    log_debug("archive import %016" PRIx64 ": not staged (%s); two passes",
              s->x->handle, s->err.msg[0] ? s->err.msg : strerror(-r));
    stage_remove(s);
    return 0;
  }
  (void)close(s->dir_fd);
  s->dir_fd = -1;
  if (unlinkat(s->x->dest_fd, s->name, AT_REMOVEDIR) < 0)
    log_warn("archive import %016" PRIx64 ": cannot remove %s: %s",
             s->x->handle, s->name, strerror(errno));
  im->e = &c->err;
  r = extract_dir_meta(im);
  if (r < 0)
    return r;
  s->x->members = im->n;
  s->x->extracted = im->written;
  return 1;
}
