/* Archive transfers: export a tree as a pax tar, import a tar into a
 * directory. See archive.h for the contract. */
#include "sandboxd/archive/transfer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/rand.h"

#define XFER_IDLE_MS_DEFAULT (10u * 60u * 1000u)
/* Data is copied through 64 KiB buffers: a read(2) and the write(2) that
 * follows stay in the CPU's cache, where 1 MiB ones went through memory
 * (export 8%, extraction 10-15% slower on tmpfs). */
#define COPY_BUF_BYTES (64u << 10)   /* file reads while exporting */
#define OUT_BUF_BYTES (1u << 20)     /* coalesced small archive writes */
#define DIRECT_WRITE (64u << 10)     /* larger writes bypass that buffer */
#define READ_BLOCK_BYTES (64u << 10) /* libarchive's reads of the spool */
#define EXPORT_MAX_DEPTH 512         /* directory levels (fds held) */
#define NAME_POOL_MAX (64u << 20)    /* member names and link targets */
#define LINK_HOPS_MAX 40             /* symbolic links in one resolution */
#define LINK_STEPS_MAX (16u << 20)   /* components walked for all links */
#define NAME_SHOWN 200               /* bytes of a name quoted in messages */
#define HEADER_ALLOWANCE                                                       \
  (16u << 10) /* tar stream bytes per member beyond                            \
                 its data: headers, pax records */
/* A read ahead of a streamed export's production waits for this many bytes
 * (or the end) at most STREAM_WAIT_MS; at most STREAM_WAITERS_MAX reads wait
 * at once, so waiting reads cannot take every worker for long. */
#define STREAM_MIN_REPLY (1u << 20)
#define STREAM_WAIT_MS 2000u
#define STREAM_WAITERS_MAX 2u

/* ---- transfers and the table ---- */

enum xfer_kind { XFER_EXPORT, XFER_IMPORT };
enum xfer_state { XFER_OPEN, XFER_DONE, XFER_FAILED };

struct xfer_limits {
  uint64_t members;
  uint64_t input_bytes;
  uint64_t extracted_bytes;
};

/* A streamed export: a producer thread writes the archive into the spool
 * while reads serve what it has written. */
struct xstream {
  pthread_t thread;
  bool started; /* the thread runs or ran: join it */
  bool cancel;  /* atomic: stop producing (close, expiry, shutdown) */
  /* the producer's job; its own until it is done */
  struct sandboxd_limits lim;
  int dir_fd;
  int spool_fd; /* borrowed from the transfer */
  char *excl_pool;
  char **excl;
  size_t nexcl;
  int level;
  /* under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t produced; /* bytes in the spool */
  uint64_t wake_at;  /* a waiting read wants this many */
  bool waiting;
  bool done;             /* the producer has finished */
  int err;               /* its result, once done */
  struct sbx_error fail; /* why it failed */
};

struct xfer {
  uint64_t handle;
  enum xfer_kind kind;
  enum xfer_state state;
  bool busy;              /* a call is using it; under the table's lock */
  uint64_t last_ms;       /* last use, for idle expiry */
  int spool_fd;           /* the unlinked archive file; -1 once finished */
  uint64_t size;          /* export: archive bytes; import: bytes received */
  struct xstream *stream; /* a streamed export; NULL otherwise */
  /* import only */
  int dest_fd; /* O_PATH|O_DIRECTORY of the destination */
  struct xfer_limits lim;
  Sbx__V1__Compression compression;
  struct stage *stage;         /* extraction while it arrives, or NULL */
  uint64_t members, extracted; /* the finish reply, once done */
  struct sbx_error fail;       /* why it failed, once failed */
  struct xfer *next;           /* on the graveyard list */
};

struct archive_table {
  pthread_mutex_t mu;
  struct xfer **slots;
  uint32_t nslots;
  uint64_t idle_ms;
  struct xfer *graveyard; /* closed, freed by the next blocking call */
  unsigned waiting;       /* reads waiting for a streamed export */
  bool stopping;          /* archive_table_stop was called */
};

static void xstream_cancel(struct xstream *s) {
  __atomic_store_n(&s->cancel, true, __ATOMIC_RELEASE);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Stops the producer (it checks for a cancel before every write) and frees
 * the stream. */
static struct xstream *xstream_free(struct xstream *s) {
  if (!s)
    return NULL;
  if (s->started) {
    xstream_cancel(s);
    (void)pthread_join(s->thread, NULL);
  }
  if (s->dir_fd >= 0)
    (void)close(s->dir_fd);
  free(s->excl);
  free(s->excl_pool);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return NULL;
}

/* Extraction while an import arrives (below). */
static struct stage *stage_free(struct stage *s);
static void stage_start(struct rpc_call *c, struct xfer *x, const char *path,
                        char **staging_path);
static void stage_feed(struct stage *s, uint64_t size);
static void stage_cancel(struct stage *s);

static struct xfer *xfer_free(struct xfer *x) {
  if (!x)
    return NULL;
  xstream_free(x->stream);
  stage_free(x->stage);
  if (x->spool_fd >= 0)
    (void)close(x->spool_fd);
  if (x->dest_fd >= 0)
    (void)close(x->dest_fd);
  free(x);
  return NULL;
}

static void xfer_free_list(struct xfer *x) {
  while (x) {
    struct xfer *next = x->next;
    xfer_free(x);
    x = next;
  }
}

int archive_table_new(struct sandboxd *d, struct archive_table **out) {
  struct archive_table *t = calloc(1, sizeof(*t));
  if (!t)
    return -ENOMEM;
  t->nslots = d->limits.max_archives ? d->limits.max_archives : 1;
  t->slots = calloc(t->nslots, sizeof(*t->slots));
  if (!t->slots) {
    free(t);
    return -ENOMEM;
  }
  t->idle_ms = XFER_IDLE_MS_DEFAULT;
  int r = pthread_mutex_init(&t->mu, NULL);
  if (r != 0) {
    free(t->slots);
    free(t);
    return -r;
  }
  *out = t;
  return 0;
}

void archive_table_free(struct archive_table *t) {
  if (!t)
    return;
  for (uint32_t i = 0; i < t->nslots; i++)
    xfer_free(t->slots[i]);
  xfer_free_list(t->graveyard);
  pthread_mutex_destroy(&t->mu);
  free(t->slots);
  free(t);
}

void archive_table_stop(struct archive_table *t) {
  if (!t)
    return;
  pthread_mutex_lock(&t->mu);
  __atomic_store_n(&t->stopping, true, __ATOMIC_RELEASE);
  for (uint32_t i = 0; i < t->nslots; i++)
    if (t->slots[i] && t->slots[i]->stream)
      xstream_cancel(t->slots[i]->stream);
  for (struct xfer *x = t->graveyard; x; x = x->next)
    if (x->stream)
      xstream_cancel(x->stream);
  pthread_mutex_unlock(&t->mu);
}

void archive_table_set_idle_ms(struct archive_table *t, uint64_t ms) {
  pthread_mutex_lock(&t->mu);
  t->idle_ms = ms;
  pthread_mutex_unlock(&t->mu);
}

/* Moves idle transfers and closed ones out of the table and returns them
 * for freeing outside the lock. Called with the lock held. */
static struct xfer *table_reap_locked(struct archive_table *t) {
  struct xfer *dead = t->graveyard;
  t->graveyard = NULL;
  uint64_t now = sbx_now_ms();
  for (uint32_t i = 0; i < t->nslots; i++) {
    struct xfer *x = t->slots[i];
    if (x && !x->busy && now - x->last_ms >= t->idle_ms) {
      log_debug("archive transfer %016" PRIx64 " expired", x->handle);
      t->slots[i] = NULL;
      x->next = dead;
      dead = x;
    }
  }
  return dead;
}

static struct archive_table *table_of(struct rpc_call *c) {
  return c->d->archives;
}

/* Adds X (busy, owned by the caller's call) under a new random handle. */
static int table_insert(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  struct xfer *dead = table_reap_locked(t);
  int slot = -1;
  for (uint32_t i = 0; i < t->nslots; i++)
    if (!t->slots[i]) {
      slot = (int)i;
      break;
    }
  if (slot >= 0) {
    bool unique;
    do {
      x->handle = sbx_random_u64();
      unique = x->handle != 0;
      for (uint32_t i = 0; unique && i < t->nslots; i++)
        if (t->slots[i] && t->slots[i]->handle == x->handle)
          unique = false;
    } while (!unique);
    x->busy = true;
    x->last_ms = sbx_now_ms();
    t->slots[slot] = x;
  }
  pthread_mutex_unlock(&t->mu);
  xfer_free_list(dead);
  if (slot < 0)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, EMFILE,
                    "too many open archive transfers (%" PRIu32 ")", t->nslots);
  return 0;
}

static int check_table(struct rpc_call *c) {
  if (!table_of(c))
    return rpc_fail(c, SBX_INTERNAL, EINVAL,
                    "archive transfers are not set up");
  return 0;
}

/* The slot of the open transfer HANDLE, or NULL; call with t->mu held. */
static struct xfer **find_locked(struct archive_table *t, uint64_t handle) {
  for (uint32_t i = 0; i < t->nslots; i++)
    if (t->slots[i] && t->slots[i]->handle == handle)
      return &t->slots[i];
  return NULL;
}

static int xfer_not_found(struct rpc_call *c, uint64_t handle) {
  return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                  "archive transfer %016" PRIx64 " not found (closed or "
                  "expired)",
                  handle);
}

static int xfer_busy(struct rpc_call *c, uint64_t handle) {
  return rpc_fail(
      c, SBX_CONFLICT, EBUSY,
      "archive transfer %016" PRIx64 " is busy with another request", handle);
}

/* Finds HANDLE of KIND and marks it busy for the caller. */
static int table_acquire(struct rpc_call *c, uint64_t handle,
                         enum xfer_kind kind, struct xfer **out) {
  int r = check_table(c);
  if (r < 0)
    return r;
  struct archive_table *t = table_of(c);
  bool busy = false;
  pthread_mutex_lock(&t->mu);
  struct xfer *dead = table_reap_locked(t);
  struct xfer **slot = find_locked(t, handle);
  struct xfer *found = slot ? *slot : NULL;
  if (found && found->kind == kind) {
    busy = found->busy;
    if (!busy) {
      found->busy = true;
      found->last_ms = sbx_now_ms();
    }
  }
  pthread_mutex_unlock(&t->mu);
  xfer_free_list(dead);
  if (!found)
    return xfer_not_found(c, handle);
  if (found->kind != kind)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "archive transfer %016" PRIx64 " is an %s, not an %s",
                    handle, found->kind == XFER_EXPORT ? "export" : "import",
                    kind == XFER_EXPORT ? "export" : "import");
  if (busy)
    return xfer_busy(c, handle);
  *out = found;
  return 0;
}

static void table_release(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  x->busy = false;
  x->last_ms = sbx_now_ms();
  pthread_mutex_unlock(&t->mu);
}

/* Takes X (which the caller holds busy) out of the table and frees it. */
static void table_remove(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  for (uint32_t i = 0; i < t->nslots; i++)
    if (t->slots[i] == x)
      t->slots[i] = NULL;
  pthread_mutex_unlock(&t->mu);
  xfer_free(x);
}

/* ---- small helpers ---- */

/* Copies NAME for a message: at most NAME_SHOWN bytes, control and non-ASCII
 * bytes as '?', so a hostile name cannot garble a reply or a log. */
static const char *shown(const char *name, char out[NAME_SHOWN + 4]) {
  size_t i = 0;
  for (; name[i] && i < NAME_SHOWN; i++) {
    unsigned char ch = (unsigned char)name[i];
    out[i] = (ch < 0x20 || ch >= 0x7f) ? '?' : (char)ch;
  }
  if (name[i]) {
    memcpy(out + i, "...", 3);
    i += 3;
  }
  out[i] = '\0';
  return out;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

/* An unlinked temporary file for a spool: O_TMPFILE in $TMPDIR or /tmp,
 * else a memfd (read-only /tmp, filesystems without O_TMPFILE). */
static int spool_open(struct sbx_error *e) {
  const char *dir = secure_getenv("TMPDIR");
  if (!dir || dir[0] != '/')
    dir = "/tmp";
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0)
    return fd;
  fd = memfd_create("sbx-archive", MFD_CLOEXEC);
  if (fd >= 0)
    return fd;
  return sbx_error_set(e, SBX_OK, errno,
                       "cannot create a temporary file for the archive: %s",
                       strerror(errno));
}

/* libarchive's error on A as an sbx_error; format errors are the archive's
 * fault (INVALID_ARGUMENT), system errors keep their errno. */
static int la_fail(struct sbx_error *e, struct archive *a, const char *what) {
  int en = archive_errno(a);
  const char *s = archive_error_string(a);
  if (!s)
    s = "unknown error";
  /* libarchive's private ARCHIVE_ERRNO_FILE_FORMAT, _PROGRAMMER and _MISC
   * are EILSEQ, EINVAL and -1. */
  if (en <= 0 || en == EILSEQ || en == EINVAL)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG, "%s: %s", what, s);
  return sbx_error_set(e, SBX_OK, en, "%s: %s", what, s);
}

/* ---- export ---- */

struct hardlink_slot {
  dev_t dev;
  ino_t ino;
  char *path; /* new; NULL for an empty slot */
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
  /* the member being written, relative to the exported directory */
  char path[SBX_PATH_MAX];
  char **excl;
  size_t nexcl;
  uint64_t members, max_members;
  uint64_t data_bytes, max_data;
  struct hardlink_slot *hl;
  size_t hl_n, hl_cap;
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

static bool ex_excluded(const struct exporter *ex) {
  for (size_t i = 0; i < ex->nexcl; i++)
    if (sbx_path_is_under(ex->excl[i], ex->path))
      return true;
  return false;
}

static uint64_t hl_hash(dev_t dev, ino_t ino) {
  uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;
  return h ^ (h >> 29);
}

/* The first path exported for DEV/INO, or NULL. */
static const char *hl_find(const struct exporter *ex, dev_t dev, ino_t ino) {
  if (ex->hl_cap == 0)
    return NULL;
  for (size_t i = hl_hash(dev, ino) & (ex->hl_cap - 1);;
       i = (i + 1) & (ex->hl_cap - 1)) {
    const struct hardlink_slot *s = &ex->hl[i];
    if (!s->path)
      return NULL;
    if (s->dev == dev && s->ino == ino)
      return s->path;
  }
}

static int hl_add(struct exporter *ex, dev_t dev, ino_t ino) {
  if ((ex->hl_n + 1) * 2 > ex->hl_cap) {
    size_t cap = ex->hl_cap ? ex->hl_cap * 2 : 64;
    struct hardlink_slot *n = calloc(cap, sizeof(*n));
    if (!n)
      return -ENOMEM;
    for (size_t i = 0; i < ex->hl_cap; i++) {
      struct hardlink_slot *s = &ex->hl[i];
      if (!s->path)
        continue;
      size_t j = hl_hash(s->dev, s->ino) & (cap - 1);
      while (n[j].path)
        j = (j + 1) & (cap - 1);
      n[j] = *s;
    }
    free(ex->hl);
    ex->hl = n;
    ex->hl_cap = cap;
  }
  char *p = strdup(ex->path);
  if (!p)
    return -ENOMEM;
  size_t j = hl_hash(dev, ino) & (ex->hl_cap - 1);
  while (ex->hl[j].path)
    j = (j + 1) & (ex->hl_cap - 1);
  ex->hl[j] = (struct hardlink_slot){.dev = dev, .ino = ino, .path = p};
  ex->hl_n++;
  return 0;
}

/* Writes the header of the member at ex->path. */
static int ex_header(struct exporter *ex, const struct stat *st,
                     const char *symlink, const char *hardlink) {
  char q[NAME_SHOWN + 4];
  if (++ex->members > ex->max_members)
    return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the tree has more than %" PRIu64
                         " entries to archive",
                         ex->max_members);
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
  int r = archive_write_header(ex->a, ent);
  if (r < ARCHIVE_WARN) {
    if (ex->err)
      return ex->err;
    return la_fail(ex->e, ex->a, "cannot write the archive");
  }
  if (r == ARCHIVE_WARN)
    log_debug("archive: \"%s\": %s", shown(ex->path, q),
              archive_error_string(ex->a));
  return 0;
}

/* Archives the regular file NAME in DFD (lstat'ed as LST). */
static int ex_file(struct exporter *ex, int dfd, const char *name,
                   const struct stat *lst) {
  char q[NAME_SHOWN + 4];
  if (lst->st_nlink > 1) {
    const char *first = hl_find(ex, lst->st_dev, lst->st_ino);
    if (first)
      return ex_header(ex, lst, NULL, first);
  }
  _cleanup_close_ int fd = openat(
      dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return 0; /* removed meanwhile */
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot read \"%s\": %s",
                         shown(ex->path, q), strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx_error_set(ex->e, SBX_OK, errno, "cannot stat \"%s\": %s",
                         shown(ex->path, q), strerror(errno));
  if (!S_ISREG(st.st_mode))
    return 0; /* replaced by something else meanwhile */
  if (st.st_nlink > 1) {
    int r = hl_add(ex, st.st_dev, st.st_ino);
    if (r < 0)
      return sbx_error_set(ex->e, SBX_OK, -r, "out of memory");
  }
  ex->data_bytes += (uint64_t)st.st_size;
  if (ex->data_bytes > ex->max_data)
    return sbx_error_set(
        ex->e, SBX_LIMIT_EXCEEDED, EFBIG,
        "the tree holds more than %" PRIu64 " bytes to archive", ex->max_data);
  int r = ex_header(ex, &st, NULL, NULL);
  if (r < 0)
    return r;
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint64_t left = (uint64_t)st.st_size;
  while (left > 0) {
    if (ex_cancelled(ex))
      return ex->err;
    size_t want = left < COPY_BUF_BYTES ? (size_t)left : COPY_BUF_BYTES;
    ssize_t n = read(fd, ex->rbuf, want);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot read \"%s\": %s",
                           shown(ex->path, q), strerror(errno));
    }
    if (n == 0)
      break; /* shrank meanwhile: libarchive pads the member with zeros */
    la_ssize_t w = archive_write_data(ex->a, ex->rbuf, (size_t)n);
    if (w < 0) {
      if (ex->err)
        return ex->err;
      return la_fail(ex->e, ex->a, "cannot write the archive");
    }
    left -= (uint64_t)n;
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
                         shown(ex->path, q), strerror(errno));
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
                           shown(ex->path, q), strerror(errno));
    }
    if ((size_t)n >= sizeof(target))
      return sbx_error_set(ex->e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "the target of \"%s\" is too long",
                           shown(ex->path, q));
    target[n] = '\0';
    return ex_header(ex, &st, target, NULL);
  }
  case S_IFDIR: {
    if (depth >= EXPORT_MAX_DEPTH)
      return sbx_error_set(ex->e, SBX_LIMIT_EXCEEDED, ELOOP,
                           "\"%s\" is nested more than %d directories deep",
                           shown(ex->path, q), EXPORT_MAX_DEPTH);
    _cleanup_close_ int cfd =
        openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0) {
      if (errno == ENOENT)
        return 0;
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot open \"%s\": %s",
                           shown(ex->path, q), strerror(errno));
    }
    if (fstat(cfd, &st) < 0)
      return sbx_error_set(ex->e, SBX_OK, errno, "cannot stat \"%s\": %s",
                           shown(ex->path, q), strerror(errno));
    int r = ex_header(ex, &st, NULL, NULL);
    if (r < 0)
      return r;
    return ex_dir(ex, cfd, clen, depth + 1);
  }
  default:
    return 0; /* sockets, fifos and devices are not archived */
  }
}

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
                         plen ? shown(ex->path, q) : ".", strerror(errno));
  DIR *dir = fdopendir(fd);
  if (!dir) {
    int err = errno;
    (void)close(fd);
    return sbx_error_set(ex->e, SBX_OK, err, "cannot list \"%s\": %s",
                         plen ? shown(ex->path, q) : ".", strerror(err));
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
                          plen ? shown(ex->path, q) : ".", strerror(errno));
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
                           plen ? shown(ex->path, q) : ".");
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

static void exporter_fini(struct exporter *ex) {
  if (ex->a)
    archive_write_free(ex->a);
  if (ex->ent)
    archive_entry_free(ex->ent);
  for (size_t i = 0; i < ex->hl_cap; i++)
    free(ex->hl[i].path);
  free(ex->hl);
  free(ex->obuf);
  free(ex->rbuf);
}

/* Writes the archive of DIR_FD into OUT_FD within the limits L; returns its
 * size in *TOTAL. With STREAM, publishes its progress there as it goes. */
static int export_tree(const struct sandboxd_limits *l, struct sbx_error *e,
                       int dir_fd, int out_fd, char **excl, size_t nexcl,
                       int zstd_level, struct xstream *stream,
                       uint64_t *total) {
  struct exporter ex = {
      .e = e,
      .out_fd = out_fd,
      .stream = stream,
      .max_out = l->archive_max_input_bytes,
      .excl = excl,
      .nexcl = nexcl,
      .max_members = l->archive_max_members,
      .max_data = l->archive_max_extracted_bytes,
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
    r = la_fail(e, ex.a, "cannot set up the archive");
    goto out;
  }
  if (zstd_level > 0) {
    char lv[16];
    (void)snprintf(lv, sizeof(lv), "%d", zstd_level);
    if (archive_write_add_filter_zstd(ex.a) != ARCHIVE_OK ||
        archive_write_set_filter_option(ex.a, "zstd", "compression-level",
                                        lv) != ARCHIVE_OK) {
      r = la_fail(e, ex.a, "cannot set up zstd compression");
      goto out;
    }
  }
  if (archive_write_open2(ex.a, &ex, NULL, ex_write_cb, NULL, NULL) !=
      ARCHIVE_OK) {
    r = ex.err ? ex.err : la_fail(e, ex.a, "cannot start the archive");
    goto out;
  }
  if (!(nexcl == 1 && strcmp(excl[0], ".") == 0)) {
    r = ex_dir(&ex, dir_fd, 0, 0);
    if (r < 0)
      goto out;
  }
  if (archive_write_close(ex.a) != ARCHIVE_OK) {
    r = ex.err ? ex.err : la_fail(e, ex.a, "cannot finish the archive");
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

/* The producer of a streamed export: the archive into the spool, then the
 * result for the readers. */
static void *export_producer(void *arg) {
  struct xstream *s = arg;
  struct sbx_error e = {0};
  uint64_t total = 0;
  int r = export_tree(&s->lim, &e, s->dir_fd, s->spool_fd, s->excl, s->nexcl,
                      s->level, s, &total);
  (void)close(s->dir_fd);
  s->dir_fd = -1;
  if (r < 0) {
    if (e.code == SBX_OK)
      e.code = sbx_code_from_errno(-r);
    log_debug("archive: streamed export stopped: %s", e.msg);
  }
  pthread_mutex_lock(&s->mu);
  s->done = true;
  s->err = r;
  if (r < 0)
    s->fail = e;
  else
    s->produced = total;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Sets X up as a streamed export and starts its producer; takes *DIR_FD,
 * *SPOOL and the excludes. */
static int export_stream_start(struct rpc_call *c, struct xfer *x, int *dir_fd,
                               int *spool, char **excl_pool, char ***excl,
                               size_t nexcl, int level) {
  struct xstream *s = calloc(1, sizeof(*s));
  if (!s)
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  s->dir_fd = -1;
  int r = pthread_mutex_init(&s->mu, NULL);
  if (r != 0) {
    free(s);
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  }
  pthread_condattr_t ca;
  r = pthread_condattr_init(&ca);
  if (r == 0) {
    r = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (r == 0)
      r = pthread_cond_init(&s->cv, &ca);
    (void)pthread_condattr_destroy(&ca);
  }
  if (r != 0) {
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  }
  s->lim = c->d->limits;
  s->dir_fd = TAKE_FD(*dir_fd);
  x->spool_fd = TAKE_FD(*spool);
  s->spool_fd = x->spool_fd;
  s->excl_pool = TAKE_PTR(*excl_pool);
  s->excl = TAKE_PTR(*excl);
  s->nexcl = nexcl;
  s->level = level;
  x->stream = s;
  r = pthread_create(&s->thread, NULL, export_producer, s);
  if (r != 0)
    return rpc_fail(c, SBX_OK, r, "cannot start the export: %s", strerror(r));
  s->started = true;
  return 0;
}

int rpc_archive_export_start(struct rpc_call *c) {
  const Sbx__V1__ArchiveExportStart *rq =
      RPC_BODY(c, ARCHIVE_EXPORT_START, archive_export_start);
  if (!rq)
    return rpc_no_body(c);
  int r = check_table(c);
  if (r < 0)
    return r;
  int level = 0;
  switch (rq->compression) {
  case SBX__V1__COMPRESSION__COMPRESSION_NONE:
  case SBX__V1__COMPRESSION__COMPRESSION_AUTO:
    break;
  case SBX__V1__COMPRESSION__COMPRESSION_ZSTD:
    level = rq->zstd_level ? rq->zstd_level : 3;
    if (level < 1 || level > 19)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "zstd level %d is not between 1 and 19", level);
    break;
  default:
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown compression %d",
                    (int)rq->compression);
  }

  /* Excludes, normalized; "" or "." excludes everything. */
  _cleanup_free_ char *excl_pool = NULL;
  _cleanup_free_ char **excl = NULL;
  size_t nexcl = rq->n_excludes;
  if (nexcl > c->d->limits.max_list_entries)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "more than %" PRIu32 " excludes",
                    c->d->limits.max_list_entries);
  if (nexcl > 0) {
    /* A normalized path is at most one byte longer ("" becomes "."). */
    size_t total = 0;
    for (size_t i = 0; i < nexcl; i++)
      total += strlen(rq->excludes[i]) + 2;
    excl = calloc(nexcl, sizeof(*excl));
    excl_pool = malloc(total);
    if (!excl || !excl_pool)
      return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    char *out = excl_pool;
    for (size_t i = 0; i < nexcl; i++) {
      const char *in = rq->excludes[i];
      size_t len = strlen(in);
      struct sbx_error pe = {0};
      r = sbx_path_normalize_rel(in, len, out, len + 2,
                                 SBX_PATH_NO_DOTDOT | SBX_PATH_EMPTY_IS_ROOT,
                                 &pe);
      if (r < 0)
        return rpc_fail(c, SBX_INVALID_ARGUMENT, -r, "exclude: %s", pe.msg);
      excl[i] = out;
      if (strcmp(out, ".") == 0) {
        excl[0] = out;
        nexcl = 1;
        break;
      }
      out += strlen(out) + 1;
    }
  }

  _cleanup_close_ int dir_fd =
      sbxd_open(c->d, rq->path, O_RDONLY | O_DIRECTORY, 0, false, &c->err);
  if (dir_fd < 0)
    return dir_fd;
  _cleanup_close_ int spool = spool_open(&c->err);
  if (spool < 0)
    return spool;

  Sbx__V1__ArchiveStartReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveStartReply);
  struct xfer *x = calloc(1, sizeof(*x));
  if (!rep || !x) {
    free(x);
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  }
  x->kind = XFER_EXPORT;
  x->spool_fd = -1;
  x->dest_fd = -1;
  r = table_insert(c, x);
  if (r < 0) {
    xfer_free(x);
    return r;
  }
  uint64_t total = 0;
  if (rq->stream) {
    r = export_stream_start(c, x, &dir_fd, &spool, &excl_pool, &excl, nexcl,
                            level);
    if (r < 0) {
      table_remove(c, x);
      return r;
    }
  } else {
    r = export_tree(&c->d->limits, &c->err, dir_fd, spool, excl, nexcl, level,
                    NULL, &total);
    if (r < 0) {
      table_remove(c, x);
      return r;
    }
    x->spool_fd = TAKE_FD(spool);
    x->size = total;
    x->state = XFER_DONE;
  }
  (void)posix_fadvise(x->spool_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  sbx__v1__archive_start_reply__init(rep);
  rep->handle = x->handle;
  rep->total_bytes = total;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_EXPORT_START;
  c->resp->archive_export_start = rep;
  table_release(c, x);
  return 0;
}

/* Waits (bounded) until the streamed export S has produced the bytes a read
 * at OFFSET of at most MAX wants, or has ended; the bytes in the spool go to
 * *SIZE and whether production is complete to *DONE. A production error
 * fails the read. */
static int stream_wait(struct rpc_call *c, struct xstream *s, uint64_t offset,
                       uint64_t max, uint64_t *size, bool *done) {
  struct archive_table *t = table_of(c);
  if (offset > s->lim.archive_max_input_bytes)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "offset %" PRIu64 " is past the largest archive (%" PRIu64
                    " bytes)",
                    offset, s->lim.archive_max_input_bytes);
  uint64_t want = max < STREAM_MIN_REPLY ? max : STREAM_MIN_REPLY;
  uint64_t want_end = offset > UINT64_MAX - want ? UINT64_MAX : offset + want;
  pthread_mutex_lock(&s->mu);
  bool ready = s->done || s->produced >= want_end;
  pthread_mutex_unlock(&s->mu);
  bool stopping = __atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE);
  if (!ready && !stopping &&
      __atomic_add_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL) <=
          STREAM_WAITERS_MAX) {
    struct timespec dl = sbx_deadline_in(CLOCK_MONOTONIC, STREAM_WAIT_MS);
    pthread_mutex_lock(&s->mu);
    s->waiting = true;
    s->wake_at = want_end;
    while (!s->done && s->produced < want_end &&
           !__atomic_load_n(&s->cancel, __ATOMIC_ACQUIRE))
      if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT)
        break;
    s->waiting = false;
    pthread_mutex_unlock(&s->mu);
    (void)__atomic_sub_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL);
  } else if (!ready && !stopping) {
    (void)__atomic_sub_fetch(&t->waiting, 1, __ATOMIC_ACQ_REL);
  }
  pthread_mutex_lock(&s->mu);
  *size = s->produced;
  *done = s->done;
  int err = s->done ? s->err : 0;
  if (err < 0)
    c->err = s->fail;
  pthread_mutex_unlock(&s->mu);
  if (err < 0)
    return err;
  if (!*done && __atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE))
    return rpc_fail(c, SBX_UNAVAILABLE, ESHUTDOWN, "sandboxd is shutting down");
  return 0;
}

int rpc_archive_export_read(struct rpc_call *c) {
  const Sbx__V1__ArchiveExportRead *rq =
      RPC_BODY(c, ARCHIVE_EXPORT_READ, archive_export_read);
  if (!rq)
    return rpc_no_body(c);
  struct xfer *x = NULL;
  int r = table_acquire(c, rq->handle, XFER_EXPORT, &x);
  if (r < 0)
    return r;
  uint64_t max = c->d->limits.max_read_bytes;
  if (rq->max_bytes && rq->max_bytes < max)
    max = rq->max_bytes;
  /* The bytes readable now and whether that is the whole archive. */
  uint64_t size = x->size;
  bool done = true;
  if (x->stream) {
    r = stream_wait(c, x->stream, rq->offset, max, &size, &done);
    if (r < 0)
      goto out;
  }
  if (done && rq->offset > size) {
    r = rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                 "offset %" PRIu64 " is past the archive's end (%" PRIu64
                 " bytes)",
                 rq->offset, size);
    goto out;
  }
  uint64_t left = rq->offset < size ? size - rq->offset : 0;
  size_t n = (size_t)(left < max ? left : max);
  Sbx__V1__ArchiveExportReadReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveExportReadReply);
  uint8_t *buf = sbx_arena_alloc_raw(&c->arena, n ? n : 1);
  if (!rep || !buf) {
    r = rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    goto out;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t k =
        pread(x->spool_fd, buf + got, n - got, (off_t)(rq->offset + got));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      r = rpc_fail(c, SBX_INTERNAL, k < 0 ? errno : EIO,
                   "cannot read the archive's temporary file: %s",
                   k < 0 ? strerror(errno) : "short read");
      goto out;
    }
    got += (size_t)k;
  }
  sbx__v1__archive_export_read_reply__init(rep);
  rep->data.data = buf;
  rep->data.len = n;
  rep->offset = rq->offset;
  rep->eof = done && rq->offset + n == size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_EXPORT_READ;
  c->resp->archive_export_read = rep;
out:
  table_release(c, x);
  return r;
}

/* ---- import: start and write ---- */

/* Creates REL (normalized, beneath BASE_FD) and its missing parents. */
static int mkdir_parents(int base_fd, const char *rel, struct sbx_error *e) {
  if (strcmp(rel, ".") == 0)
    return 0;
  char buf[SBX_PATH_MAX];
  size_t len = strlen(rel);
  memcpy(buf, rel, len + 1);
  for (size_t i = 0; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    buf[i] = '\0';
    char *slash = strrchr(buf, '/');
    const char *name = slash ? slash + 1 : buf;
    int pfd = base_fd;
    if (slash) {
      *slash = '\0';
      pfd = sbxd_openat(base_fd, buf, O_PATH | O_DIRECTORY, 0, e);
      *slash = '/';
      if (pfd < 0)
        return pfd;
    }
    int r = mkdirat(pfd, name, 0755) < 0 && errno != EEXIST ? -errno : 0;
    if (pfd != base_fd)
      (void)close(pfd);
    if (r < 0)
      return sbx_error_set(e, SBX_OK, -r, "cannot create \"%s\": %s", buf,
                           strerror(-r));
    if (i < len)
      buf[i] = '/';
  }
  return 0;
}

static uint64_t lower_limit(uint64_t asked, uint64_t server) {
  return asked && asked < server ? asked : server;
}

int rpc_archive_import_start(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportStart *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_START, archive_import_start);
  if (!rq)
    return rpc_no_body(c);
  int r = check_table(c);
  if (r < 0)
    return r;
  switch (rq->compression) {
  case SBX__V1__COMPRESSION__COMPRESSION_NONE:
  case SBX__V1__COMPRESSION__COMPRESSION_ZSTD:
  case SBX__V1__COMPRESSION__COMPRESSION_AUTO:
    break;
  default:
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown compression %d",
                    (int)rq->compression);
  }
  struct sbxd_loc loc;
  r = sbxd_locate(c->d, rq->path, true, &loc, &c->err);
  if (r < 0)
    return r;
  r = mkdir_parents(loc.base_fd, loc.rel, &c->err);
  if (r < 0)
    return r;
  _cleanup_close_ int dest =
      sbxd_openat(loc.base_fd, loc.rel, O_PATH | O_DIRECTORY, 0, &c->err);
  if (dest < 0)
    return dest;
  _cleanup_close_ int spool = spool_open(&c->err);
  if (spool < 0)
    return spool;
  Sbx__V1__ArchiveStartReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveStartReply);
  struct xfer *x = calloc(1, sizeof(*x));
  if (!rep || !x) {
    free(x);
    return rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
  }
  const struct sandboxd_limits *l = &c->d->limits;
  const Sbx__V1__ArchiveLimits *al = rq->limits;
  x->kind = XFER_IMPORT;
  x->state = XFER_OPEN;
  x->spool_fd = TAKE_FD(spool);
  x->dest_fd = TAKE_FD(dest);
  x->compression = rq->compression;
  x->lim.members =
      lower_limit(al ? al->max_members : 0, l->archive_max_members);
  x->lim.input_bytes =
      lower_limit(al ? al->max_input_bytes : 0, l->archive_max_input_bytes);
  x->lim.extracted_bytes = lower_limit(al ? al->max_extracted_bytes : 0,
                                       l->archive_max_extracted_bytes);
  r = table_insert(c, x);
  if (r < 0) {
    xfer_free(x);
    return r;
  }
  sbx__v1__archive_start_reply__init(rep);
  if (rq->stage)
    stage_start(c, x, rq->path ? rq->path : "", &rep->staging_path);
  rep->handle = x->handle;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_START;
  c->resp->archive_import_start = rep;
  table_release(c, x);
  return 0;
}

/* Marks X failed with C's error (kept for a repeated finish). */
static int xfer_fail(struct rpc_call *c, struct xfer *x, int r) {
  x->state = XFER_FAILED;
  x->fail = c->err;
  if (x->fail.code == SBX_OK)
    x->fail.code = sbx_code_from_errno(r);
  x->stage = stage_free(x->stage);
  if (x->spool_fd >= 0) {
    (void)close(x->spool_fd);
    x->spool_fd = -1;
  }
  return r;
}

static int xfer_refuse_finished(struct rpc_call *c, struct xfer *x) {
  if (x->state == XFER_FAILED)
    return sbx_error_set(&c->err, x->fail.code, x->fail.err ? x->fail.err : EIO,
                         "%s", x->fail.msg);
  return rpc_fail(c, SBX_CONFLICT, EALREADY,
                  "archive transfer %016" PRIx64 " is already finished",
                  x->handle);
}

int rpc_archive_import_write(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportWrite *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_WRITE, archive_import_write);
  if (!rq)
    return rpc_no_body(c);
  struct xfer *x = NULL;
  int r = table_acquire(c, rq->handle, XFER_IMPORT, &x);
  if (r < 0)
    return r;
  Sbx__V1__ArchiveImportWriteReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveImportWriteReply);
  if (!rep) {
    r = rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    goto out;
  }
  if (x->state != XFER_OPEN) {
    r = xfer_refuse_finished(c, x);
    goto out;
  }
  uint64_t off = rq->offset, len = rq->data.len;
  if (off > x->size) {
    r = rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                 "offset %" PRIu64 " is past the %" PRIu64 " bytes received",
                 off, x->size);
    goto out;
  }
  /* A repeated chunk is acknowledged; only bytes past x->size are new. */
  if (off + len > x->size) {
    uint64_t skip = x->size - off;
    uint64_t add = len - skip;
    if (x->size + add > x->lim.input_bytes) {
      r = rpc_fail(c, SBX_LIMIT_EXCEEDED, EFBIG,
                   "archive is larger than %" PRIu64 " bytes",
                   x->lim.input_bytes);
      r = xfer_fail(c, x, r);
      goto out;
    }
    r = pwrite_all(x->spool_fd, rq->data.data + skip, (size_t)add, x->size);
    if (r < 0) {
      r = rpc_fail(c, SBX_OK, -r,
                   "cannot write the archive's temporary file: %s",
                   strerror(-r));
      goto out;
    }
    x->size += add;
    if (x->stage)
      stage_feed(x->stage, x->size);
  }
  sbx__v1__archive_import_write_reply__init(rep);
  rep->received = x->size;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_WRITE;
  c->resp->archive_import_write = rep;
out:
  table_release(c, x);
  return r;
}

/* ---- import: checking and extracting ---- */

enum mtype { M_SELF, M_DIR, M_REG, M_SYMLINK, M_HARDLINK };

struct member {
  uint32_t path;   /* offset of the normalized path in the pool */
  uint32_t plen;   /* its length */
  uint32_t link;   /* symlink target (as given) or hardlink target
                      (normalized), offset in the pool */
  uint32_t target; /* hardlink: index of the regular file it links to */
  uint8_t type;
  bool has_mtime;
  mode_t mode;
  uint32_t uid, gid;
  int64_t mtime;
  long mtime_ns;
  uint64_t size;
};

struct importer {
  struct xfer *x;
  int base; /* where members are made: the destination or a staging dir */
  struct sandboxd *d;
  struct sbx_error *e;
  struct member *m;
  size_t n, cap;
  char *pool;
  size_t plen, pcap;
  uint32_t *ht; /* member index + 1, by path */
  size_t htcap;
  const void *map; /* the spool, mapped read-only; NULL: read it with read(2) */
  size_t maplen;
  bool fresh;     /* the destination was empty: nothing to replace */
  uint64_t steps; /* symlink resolution work left */
  uint64_t total; /* sum of sizes in the headers */
  /* pass 2 */
  char parent[SBX_PATH_MAX]; /* the directory cached in pfd */
  int pfd;
  uint64_t written;
};

static const char *mpath(const struct importer *im, size_t i) {
  return im->pool + im->m[i].path;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The member whose path is S (N bytes), or -1. */
static ssize_t im_lookup_h(const struct importer *im, const char *s, size_t n,
                           uint64_t h) {
  if (im->htcap == 0)
    return -1;
  for (size_t i = h & (im->htcap - 1);; i = (i + 1) & (im->htcap - 1)) {
    uint32_t v = im->ht[i];
    if (v == 0)
      return -1;
    const struct member *mm = &im->m[v - 1];
    if (mm->plen == n && memcmp(im->pool + mm->path, s, n) == 0)
      return (ssize_t)(v - 1);
  }
}

static ssize_t im_lookup(const struct importer *im, const char *s, size_t n) {
  return im_lookup_h(im, s, n, hash_bytes(s, n));
}

static int im_ht_put(struct importer *im, size_t idx) {
  if ((im->n + 1) * 2 > im->htcap) {
    size_t cap = im->htcap ? im->htcap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof(*t));
    if (!t)
      return -ENOMEM;
    for (size_t i = 0; i < im->htcap; i++) {
      uint32_t v = im->ht[i];
      if (!v)
        continue;
      const struct member *mm = &im->m[v - 1];
      size_t j = hash_bytes(im->pool + mm->path, mm->plen) & (cap - 1);
      while (t[j])
        j = (j + 1) & (cap - 1);
      t[j] = v;
    }
    free(im->ht);
    im->ht = t;
    im->htcap = cap;
  }
  const struct member *mm = &im->m[idx];
  size_t j = hash_bytes(im->pool + mm->path, mm->plen) & (im->htcap - 1);
  while (im->ht[j])
    j = (j + 1) & (im->htcap - 1);
  im->ht[j] = (uint32_t)idx + 1;
  return 0;
}

/* Copies S (N bytes plus a NUL) into the pool; its offset in *OFF. */
static int im_pool_add(struct importer *im, const char *s, size_t n,
                       uint32_t *off) {
  if (im->plen + n + 1 > NAME_POOL_MAX)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the archive's member names and link targets exceed "
                         "%u bytes",
                         NAME_POOL_MAX);
  if (im->plen + n + 1 > im->pcap) {
    size_t cap = im->pcap ? im->pcap * 2 : 65536;
    while (cap < im->plen + n + 1)
      cap *= 2;
    char *p = realloc(im->pool, cap);
    if (!p)
      return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
    im->pool = p;
    im->pcap = cap;
  }
  memcpy(im->pool + im->plen, s, n);
  im->pool[im->plen + n] = '\0';
  *off = (uint32_t)im->plen;
  im->plen += n + 1;
  return 0;
}

static bool has_dotdot(const char *p) {
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.')
      return true;
    if (!e)
      break;
    s = e + 1;
  }
  return false;
}

/* Normalizes a member's name (or a hardlink's target) RAW into OUT:
 * relative, no "..", a leading "./" stripped; "" for the archive's root.
 * WHAT and WHO name the member for messages. */
static int im_norm(struct importer *im, const char *raw, char *out,
                   const char *what, const char *who) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  if (raw[0] == '/')
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s \"%s\" is an absolute path%s%s%s", what,
                         shown(raw, q), who ? " (in \"" : "",
                         who ? shown(who, q2) : "", who ? "\")" : "");
  const char *p = raw;
  while (p[0] == '.' && p[1] == '/')
    p += 2;
  if (has_dotdot(p)) {
    /* Name the worse fault: leaving the destination, or just "..". */
    char tmp[SBX_PATH_MAX];
    bool escapes = sbx_path_normalize_rel(p, strlen(p), tmp, sizeof(tmp), 0,
                                          NULL) == -EACCES;
    return sbx_error_set(
        im->e, SBX_INVALID_ARGUMENT, EINVAL, "%s \"%s\" %s%s%s%s", what,
        shown(raw, q),
        escapes ? "escapes the destination" : "must not contain \"..\"",
        who ? " (in \"" : "", who ? shown(who, q2) : "", who ? "\")" : "");
  }
  if (*p == '\0' || strcmp(p, ".") == 0) {
    out[0] = '\0';
    return 0;
  }
  struct sbx_error pe = {0};
  int r = sbx_path_normalize_rel(p, strlen(p), out, SBX_PATH_MAX,
                                 SBX_PATH_NO_DOTDOT, &pe);
  if (r < 0)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, -r,
                         "%s \"%s\" has an invalid path: %s", what,
                         shown(raw, q), pe.msg);
  if (strcmp(out, ".") == 0)
    out[0] = '\0';
  return 0;
}

/* Maps the spool so libarchive hands out pointers into the page cache and
 * file data goes to its destination in one copy, not two (read(2) into a
 * buffer, then write(2)). The spool is private and unlinked: nothing can
 * truncate it under the mapping. Without a mapping (an empty archive, no
 * address space) the spool is read with read(2). */
static void im_map(struct importer *im) {
  if (im->x->size == 0 || im->x->size > SIZE_MAX)
    return;
  void *p = mmap(NULL, (size_t)im->x->size, PROT_READ, MAP_SHARED,
                 im->x->spool_fd, 0);
  if (p == MAP_FAILED)
    return;
  (void)madvise(p, (size_t)im->x->size, MADV_SEQUENTIAL);
  im->map = p;
  im->maplen = (size_t)im->x->size;
}

/* A libarchive reader of the formats and filters allowed, not open yet. */
static int im_archive(struct importer *im, struct archive **out) {
  struct archive *a = archive_read_new();
  if (!a)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  int r = archive_read_support_format_tar(a);
  if (r == ARCHIVE_OK)
    r = archive_read_support_filter_none(a);
  if (r == ARCHIVE_OK &&
      im->x->compression != SBX__V1__COMPRESSION__COMPRESSION_NONE)
    r = archive_read_support_filter_zstd(a);
  if (r != ARCHIVE_OK) {
    r = la_fail(im->e, a, "cannot read the archive");
    archive_read_free(a);
    return r;
  }
  *out = a;
  return 0;
}

/* Opens the spool for reading with the formats and filters allowed. */
static int im_reader(struct importer *im, struct archive **out) {
  if (lseek(im->x->spool_fd, 0, SEEK_SET) < 0)
    return sbx_error_set(im->e, SBX_OK, errno,
                         "cannot read the archive's temporary file: %s",
                         strerror(errno));
  struct archive *a = NULL;
  int r = im_archive(im, &a);
  if (r < 0)
    return r;
  if (im->map)
    r = archive_read_open_memory(a, im->map, im->maplen);
  else
    r = archive_read_open_fd(a, im->x->spool_fd, READ_BLOCK_BYTES);
  if (r != ARCHIVE_OK) {
    r = la_fail(im->e, a, "cannot read the archive");
    archive_read_free(a);
    return r;
  }
  *out = a;
  return 0;
}

/* The next header, checked against the compression asked for. */
static int im_next(struct importer *im, struct archive *a,
                   struct archive_entry **ent) {
  int r = archive_read_next_header(a, ent);
  if (r == ARCHIVE_EOF)
    return 0;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
    return la_fail(im->e, a, "cannot read the archive");
  if (im->x->compression == SBX__V1__COMPRESSION__COMPRESSION_ZSTD &&
      archive_filter_code(a, 0) != ARCHIVE_FILTER_ZSTD)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the archive is not zstd-compressed");
  return 1;
}

/* Checks one header and records it as a member. */
static int im_add(struct importer *im, struct archive_entry *ent) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  char path[SBX_PATH_MAX];
  const char *raw = archive_entry_pathname(ent);
  if (!raw)
    raw = archive_entry_pathname_utf8(ent);
  if (!raw)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member %zu has no readable name", im->n + 1);
  int r = im_norm(im, raw, path, "member", NULL);
  if (r < 0)
    return r;
  struct member mm = {.link = UINT32_MAX, .target = UINT32_MAX};
  const char *hardlink = archive_entry_hardlink(ent);
  mode_t ft = archive_entry_filetype(ent);
  if (hardlink)
    mm.type = M_HARDLINK;
  else if (ft == AE_IFREG)
    mm.type = M_REG;
  else if (ft == AE_IFDIR)
    mm.type = M_DIR;
  else if (ft == AE_IFLNK)
    mm.type = M_SYMLINK;
  else
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" is %s", shown(raw, q),
                         ft == AE_IFCHR || ft == AE_IFBLK ? "a device node"
                         : ft == AE_IFIFO                 ? "a fifo"
                         : ft == AE_IFSOCK                ? "a socket"
                                           : "of an unsupported type");
  if (path[0] == '\0') {
    if (mm.type != M_DIR)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "member \"%s\" would replace the destination",
                           shown(raw, q));
    mm.type = M_SELF;
  }
  size_t plen = strlen(path);
  if (mm.type != M_SELF && im_lookup(im, path, plen) >= 0)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EEXIST,
                         "member \"%s\" appears twice in the archive",
                         shown(raw, q));

  if (mm.type == M_REG) {
    la_int64_t sz =
        archive_entry_size_is_set(ent) ? archive_entry_size(ent) : 0;
    if (sz < 0)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "member \"%s\" has a negative size", shown(raw, q));
    mm.size = (uint64_t)sz;
    if (mm.size > im->x->lim.extracted_bytes ||
        im->total + mm.size > im->x->lim.extracted_bytes)
      return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "archive extracts to more than %" PRIu64
                           " bytes (at member \"%s\")",
                           im->x->lim.extracted_bytes, shown(raw, q));
    im->total += mm.size;
  }
  la_int64_t uid = archive_entry_uid(ent), gid = archive_entry_gid(ent);
  if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" has an invalid owner", shown(raw, q));
  mm.uid = (uint32_t)uid;
  mm.gid = (uint32_t)gid;
  mm.mode = archive_entry_perm(ent);
  mm.has_mtime = archive_entry_mtime_is_set(ent);
  mm.mtime = archive_entry_mtime(ent);
  mm.mtime_ns = archive_entry_mtime_nsec(ent);
  if (mm.mtime_ns < 0 || mm.mtime_ns > 999999999)
    mm.mtime_ns = 0;

  if (mm.type == M_SYMLINK) {
    const char *t = archive_entry_symlink(ent);
    if (!t)
      t = archive_entry_symlink_utf8(ent);
    if (!t || !*t)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "symbolic link \"%s\" has no target", shown(raw, q));
    size_t tl = strlen(t);
    if (tl >= SBX_PATH_MAX)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "symbolic link \"%s\" has a target that is too long",
                           shown(raw, q));
    if (t[0] == '/')
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "symbolic link \"%s\" points outside the "
                           "destination (\"%s\" is absolute)",
                           shown(raw, q), shown(t, q2));
    r = im_pool_add(im, t, tl, &mm.link);
    if (r < 0)
      return r;
  } else if (mm.type == M_HARDLINK) {
    char tp[SBX_PATH_MAX];
    r = im_norm(im, hardlink, tp, "hard link target", raw);
    if (r < 0)
      return r;
    ssize_t j = tp[0] ? im_lookup(im, tp, strlen(tp)) : -1;
    if (j < 0)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "hard link \"%s\" points at \"%s\", which is not "
                           "an earlier member",
                           shown(raw, q), shown(hardlink, q2));
    if (im->m[j].type == M_HARDLINK)
      j = im->m[j].target;
    if (im->m[j].type != M_REG)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "hard link \"%s\" points at \"%s\", which is not "
                           "a regular file",
                           shown(raw, q), shown(hardlink, q2));
    mm.target = (uint32_t)j;
  }

  if (im->n == im->cap) {
    size_t cap = im->cap ? im->cap * 2 : 256;
    struct member *nm = realloc(im->m, cap * sizeof(*nm));
    if (!nm)
      return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
    im->m = nm;
    im->cap = cap;
  }
  r = im_pool_add(im, path, plen, &mm.path);
  if (r < 0)
    return r;
  mm.plen = (uint32_t)plen;
  im->m[im->n] = mm;
  if (mm.type != M_SELF && im_ht_put(im, im->n) < 0)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  im->n++;
  return 0;
}

/* Whether PATH (N bytes) exists in the destination as a symbolic link or
 * beneath one (or beneath a non-directory): 1 yes, 0 no. */
static int dest_through_link(struct importer *im, const char *path, size_t n) {
  char buf[SBX_PATH_MAX];
  memcpy(buf, path, n);
  buf[n] = '\0';
  int fd = sbx_openat2(im->x->dest_fd, buf, O_PATH | O_NOFOLLOW, 0,
                       RESOLVE_NO_SYMLINKS);
  if (fd < 0)
    return fd == -ELOOP || fd == -EXDEV || fd == -ENOTDIR;
  struct stat st;
  int r = fstat(fd, &st) == 0 && S_ISLNK(st.st_mode);
  (void)close(fd);
  return r;
}

enum { LINK_OK = 0, LINK_ESCAPES, LINK_LOOPS, LINK_COMPLEX, LINK_EXISTING };

/* Walks symlink TARGET from the directory CUR (*CURLEN bytes, "" for the
 * destination), following the archive's own symlinks, as the kernel would
 * after extraction. Lands in CUR, or says why it cannot. */
static int walk_link(struct importer *im, char *cur, size_t *curlen,
                     const char *target, unsigned *hops) {
  if (target[0] == '/')
    return LINK_ESCAPES;
  const char *p = target;
  while (*p) {
    while (*p == '/')
      p++;
    const char *s = p;
    while (*p && *p != '/')
      p++;
    size_t n = (size_t)(p - s);
    if (n == 0 || (n == 1 && s[0] == '.'))
      continue;
    if (im->steps == 0)
      return LINK_COMPLEX;
    im->steps--;
    if (n == 2 && s[0] == '.' && s[1] == '.') {
      if (*curlen == 0)
        return LINK_ESCAPES;
      char *slash = memrchr(cur, '/', *curlen);
      *curlen = slash ? (size_t)(slash - cur) : 0;
      continue;
    }
    size_t before = *curlen;
    size_t need = before + (before ? 1 : 0) + n;
    if (need >= SBX_PATH_MAX)
      return LINK_COMPLEX;
    if (before)
      cur[(*curlen)++] = '/';
    memcpy(cur + *curlen, s, n);
    *curlen += n;
    ssize_t j = im_lookup(im, cur, *curlen);
    if (j >= 0 && im->m[j].type == M_SYMLINK) {
      if (++*hops > LINK_HOPS_MAX)
        return LINK_LOOPS;
      *curlen = before;
      int r = walk_link(im, cur, curlen, im->pool + im->m[j].link, hops);
      if (r != LINK_OK)
        return r;
    } else if (j < 0 && !im->fresh) {
      int r = dest_through_link(im, cur, *curlen);
      if (r < 0)
        return LINK_COMPLEX;
      if (r > 0)
        return LINK_EXISTING;
    }
  }
  return LINK_OK;
}

/* Checks what needs the whole member list: nothing beneath a symlink or a
 * file, symlink targets inside the destination, and (when the destination
 * is not empty) what extraction would replace. */
static int im_check_tree(struct importer *im) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  uint64_t hashes[SBX_PATH_MAX / 2];
  size_t ends[SBX_PATH_MAX / 2];
  for (size_t i = 0; i < im->n; i++) {
    const struct member *mm = &im->m[i];
    if (mm->type == M_SELF)
      continue;
    const char *p = mpath(im, i);
    /* Find the nearest ancestor that is a member; it must be a directory
     * (a directory member's own ancestors are checked in its turn). */
    size_t k = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t j = 0; j < mm->plen; j++) {
      if (p[j] == '/' && k < SBX_ARRAY_SIZE(hashes)) {
        hashes[k] = h;
        ends[k++] = j;
      }
      h ^= (unsigned char)p[j];
      h *= 0x100000001b3ull;
    }
    while (k > 0) {
      k--;
      ssize_t a = im_lookup_h(im, p, ends[k], hashes[k]);
      if (a < 0)
        continue;
      if (im->m[a].type == M_SYMLINK)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                             "member \"%s\" is beneath the symbolic link "
                             "\"%s\"",
                             shown(p, q), shown(mpath(im, (size_t)a), q2));
      if (im->m[a].type != M_DIR)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                             "member \"%s\" is beneath \"%s\", which is not "
                             "a directory",
                             shown(p, q), shown(mpath(im, (size_t)a), q2));
      break;
    }
  }

  for (size_t i = 0; i < im->n; i++) {
    const struct member *mm = &im->m[i];
    if (mm->type != M_SYMLINK)
      continue;
    const char *p = mpath(im, i);
    const char *t = im->pool + mm->link;
    char cur[SBX_PATH_MAX];
    const char *slash = memrchr(p, '/', mm->plen);
    size_t curlen = slash ? (size_t)(slash - p) : 0;
    memcpy(cur, p, curlen);
    unsigned hops = 0;
    int r = walk_link(im, cur, &curlen, t, &hops);
    switch (r) {
    case LINK_OK:
      break;
    case LINK_ESCAPES:
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "symbolic link \"%s\" points outside the "
                           "destination (\"%s\")",
                           shown(p, q), shown(t, q2));
    case LINK_LOOPS:
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, ELOOP,
                           "symbolic link \"%s\" goes through more than %d "
                           "links",
                           shown(p, q), LINK_HOPS_MAX);
    case LINK_EXISTING:
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "symbolic link \"%s\" points through a symbolic "
                           "link already in the destination (\"%s\")",
                           shown(p, q), shown(t, q2));
    default:
      return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "the archive's symbolic links are too complex to "
                           "check (at \"%s\")",
                           shown(p, q));
    }
  }
  return 0;
}

/* For a destination that is not empty: refuses what extraction could not
 * do cleanly (a file over a directory, a path through an existing symlink or
 * file that no directory member replaces). */
static int im_check_existing(struct importer *im) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  for (size_t i = 0; i < im->n; i++) {
    const struct member *mm = &im->m[i];
    if (mm->type == M_SELF)
      continue;
    const char *p = mpath(im, i);
    int fd = sbx_openat2(im->x->dest_fd, p, O_PATH | O_NOFOLLOW, 0,
                         RESOLVE_NO_SYMLINKS);
    if (fd >= 0) {
      struct stat st;
      int r = fstat(fd, &st);
      (void)close(fd);
      if (r == 0 && S_ISDIR(st.st_mode) && mm->type != M_DIR)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EISDIR,
                             "member \"%s\" would replace a directory",
                             shown(p, q));
      continue;
    }
    if (fd == -ENOENT)
      continue;
    if (fd != -ENOTDIR && fd != -ELOOP && fd != -EXDEV)
      return sbx_error_set(im->e, SBX_OK, -fd, "cannot check \"%s\": %s",
                           shown(p, q), strerror(-fd));
    /* Something on the way is not a directory: find it. */
    char buf[SBX_PATH_MAX];
    memcpy(buf, p, mm->plen + 1);
    for (char *s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
      *s = '\0';
      int f = sbx_openat2(im->x->dest_fd, buf, O_PATH | O_DIRECTORY, 0,
                          RESOLVE_NO_SYMLINKS);
      if (f >= 0) {
        (void)close(f);
        *s = '/';
        continue;
      }
      if (f == -ENOENT)
        break;
      ssize_t a = im_lookup(im, buf, strlen(buf));
      if (a >= 0 && im->m[a].type == M_DIR)
        break; /* that directory member replaces it */
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "member \"%s\" would be extracted through \"%s\", "
                           "which is not a directory in the destination",
                           shown(p, q), shown(buf, q2));
    }
  }
  return 0;
}

static int dir_is_empty(int dir_fd, bool *empty) {
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  DIR *dir = fdopendir(fd);
  if (!dir) {
    int err = errno;
    (void)close(fd);
    return -err;
  }
  *empty = true;
  struct dirent *de;
  while ((de = readdir(dir))) {
    const char *n = de->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
      continue;
    *empty = false;
    break;
  }
  (void)closedir(dir);
  return 0;
}

/* The tar stream may not be much longer than its members' data: a small
 * zstd input could otherwise expand into endless (1 MiB each) pax headers. */
static uint64_t im_stream_max(const struct xfer_limits *lim) {
  if (lim->members > (UINT64_MAX - lim->extracted_bytes) / HEADER_ALLOWANCE)
    return UINT64_MAX;
  return lim->extracted_bytes + lim->members * HEADER_ALLOWANCE;
}

/* Checks the header just read from A against the limits on the stream and
 * on members, then adds its member. */
static int im_take(struct importer *im, struct archive *a,
                   struct archive_entry *ent) {
  uint64_t stream_max = im_stream_max(&im->x->lim);
  la_int64_t pos = archive_filter_bytes(a, 0);
  if (pos > 0 && (uint64_t)pos > stream_max)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "archive expands to more than %" PRIu64 " bytes",
                         stream_max);
  if (im->n >= im->x->lim.members)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "archive has more than %" PRIu64 " members",
                         im->x->lim.members);
  return im_add(im, ent);
}

/* Pass 1: reads every header and refuses the archive unless all are fine. */
static int im_pass1(struct importer *im) {
  struct archive *a = NULL;
  int r = im_reader(im, &a);
  if (r < 0)
    return r;
  for (;;) {
    struct archive_entry *ent;
    r = im_next(im, a, &ent);
    if (r <= 0)
      break;
    r = im_take(im, a, ent);
    if (r < 0)
      break;
  }
  archive_read_free(a);
  if (r < 0)
    return r;
  r = dir_is_empty(im->x->dest_fd, &im->fresh);
  if (r < 0)
    return sbx_error_set(im->e, SBX_OK, -r, "cannot list the destination: %s",
                         strerror(-r));
  r = im_check_tree(im);
  if (r < 0)
    return r;
  if (!im->fresh)
    return im_check_existing(im);
  return 0;
}

/* Opens (creating as needed) the parent directory of member I and returns it
 * (borrowed) in *PFD with the member's last component in *NAME. */
static int im_parent(struct importer *im, size_t i, int *pfd,
                     const char **name) {
  char q[NAME_SHOWN + 4];
  const char *p = mpath(im, i);
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
        ssize_t a = im_lookup(im, buf, strlen(buf));
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
                           shown(p, q), strerror(-fd));
  }
  im->pfd = fd;
  *pfd = fd;
  return 0;
}

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
  const char *p = mpath(im, i);
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat(pfd, name, flags, 0600);
  if (fd < 0 && errno == EEXIST) {
    if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
      return sbx_error_set(e, SBX_OK, errno, "cannot replace \"%s\": %s",
                           shown(p, q), strerror(errno));
    fd = openat(pfd, name, flags, 0600);
  }
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s",
                         shown(p, q), strerror(errno));
  return fd;
}

static int file_write(const struct importer *im, size_t i, int fd,
                      const void *buf, size_t len, uint64_t off,
                      struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  int r = pwrite_all(fd, buf, len, off);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s",
                         shown(mpath(im, i), q), strerror(-r));
  return 0;
}

/* Gives member I's file FD, whose data ends at END, its size (a hole at the
 * end of a sparse file), owner, mode and times. */
static int file_finish(const struct importer *im, size_t i, int fd,
                       uint64_t end, struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = mpath(im, i);
  if (end < mm->size && ftruncate(fd, (off_t)mm->size) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %s",
                         shown(p, q), strerror(errno));
  if (im->d->is_root && fchown(fd, mm->uid, mm->gid) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot chown \"%s\": %s",
                         shown(p, q), strerror(errno));
  if (fchmod(fd, mm->mode & 0777) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot chmod \"%s\": %s",
                         shown(p, q), strerror(errno));
  struct timespec ts[2];
  member_times(mm, ts);
  if (futimens(fd, ts) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot set the times of \"%s\": %s",
                         shown(p, q), strerror(errno));
  return 0;
}

/* The next block of member I's data from A: 1 and the block, 0 at its end.
 * Checks the block against the header and the limit on extracted bytes. */
static int im_block(struct importer *im, struct archive *a, size_t i,
                    const void **buf, size_t *len, uint64_t *off) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  la_int64_t o;
  int r = archive_read_data_block(a, buf, len, &o);
  if (r == ARCHIVE_EOF)
    return 0;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
    return la_fail(im->e, a, "cannot read the archive");
  if (o < 0 || (uint64_t)o > mm->size || *len > mm->size - (uint64_t)o)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" holds more data than its header "
                         "says",
                         shown(mpath(im, i), q));
  im->written += *len;
  if (im->written > im->x->lim.extracted_bytes)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "archive extracts to more than %" PRIu64
                         " bytes (at member \"%s\")",
                         im->x->lim.extracted_bytes, shown(mpath(im, i), q));
  *off = (uint64_t)o;
  return 1;
}

/* Calls FN with each block of member I's data as it is read from A. */
typedef int (*block_fn)(struct importer *im, size_t i, const void *buf,
                        size_t len, uint64_t off, void *arg);

static int im_blocks(struct importer *im, struct archive *a, size_t i,
                     block_fn fn, void *arg) {
  for (;;) {
    const void *buf = NULL;
    size_t len = 0;
    uint64_t off = 0;
    int r = im_block(im, a, i, &buf, &len, &off);
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

static int write_block(struct importer *im, size_t i, const void *buf,
                       size_t len, uint64_t off, void *arg) {
  struct file_out *fo = arg;
  int r = file_write(im, i, fo->fd, buf, len, off, im->e);
  if (r == 0 && off + len > fo->end)
    fo->end = off + len;
  return r;
}

/* Writes member I, a regular file, as its data are read from A. */
static int im_write_file(struct importer *im, struct archive *a, size_t i,
                         int pfd, const char *name) {
  _cleanup_close_ int fd = file_create(im, i, pfd, name, im->e);
  if (fd < 0)
    return fd;
  struct file_out fo = {.fd = fd};
  int r = im_blocks(im, a, i, write_block, &fo);
  if (r < 0)
    return r;
  return file_finish(im, i, fd, fo.end, im->e);
}

/* ---- import: files written by threads ---- */

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

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap)
    return p;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *np = reallocarray(p, c, size);
  if (np)
    *cap = c;
  return np;
}

/* Reads member I's data (pointers into the mapping) and lists the file. */
static int list_block(struct importer *im, size_t i, const void *buf,
                      size_t len, uint64_t off, void *arg) {
  (void)i;
  struct files *fs = arg;
  const char *lo = im->map, *hi = lo + im->maplen;
  if ((const char *)buf < lo || len > (size_t)(hi - (const char *)buf))
    return sbx_error_set(im->e, SBX_INTERNAL, EIO,
                         "archive data outside the mapped archive");
  struct wblock *nb = grow(fs->blk, &fs->bcap, fs->nblk + 1, sizeof(*fs->blk));
  if (!nb)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  fs->blk = nb;
  fs->blk[fs->nblk++] = (struct wblock){.p = buf, .len = len, .off = off};
  fs->f[fs->n].nblk++;
  return 0;
}

static int files_add(struct importer *im, struct files *fs, struct archive *a,
                     size_t i) {
  struct wfile *nf = grow(fs->f, &fs->cap, fs->n + 1, sizeof(*fs->f));
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
 * PARENT (the cache of im_parent, one per thread; the directories exist). */
static int files_write_one(struct files *fs, const struct wfile *f,
                           char parent[SBX_PATH_MAX], int *pfd,
                           struct sbx_error *e) {
  char q[NAME_SHOWN + 4];
  const struct importer *im = fs->im;
  const char *p = mpath(im, f->i);
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
                             shown(p, q), strerror(-*pfd));
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
                         shown(p, q), strerror(errno));
  return 0;
}

static int im_symlink(struct importer *im, size_t i, int pfd,
                      const char *name) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = mpath(im, i);
  const char *t = im->pool + mm->link;
  if (symlinkat(t, pfd, name) < 0) {
    if (errno != EEXIST)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                           shown(p, q), strerror(errno));
    int r = im_clear(im, pfd, name, p);
    if (r < 0)
      return r;
    if (symlinkat(t, pfd, name) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                           shown(p, q), strerror(errno));
  }
  if (im->d->is_root &&
      fchownat(pfd, name, mm->uid, mm->gid, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot chown \"%s\": %s",
                         shown(p, q), strerror(errno));
  struct timespec ts[2];
  member_times(mm, ts);
  if (utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx_error_set(im->e, SBX_OK, errno,
                         "cannot set the times of \"%s\": %s", shown(p, q),
                         strerror(errno));
  return 0;
}

static int im_hardlink(struct importer *im, size_t i, int pfd,
                       const char *name) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  const char *p = mpath(im, i);
  const char *t = mpath(im, mm->target);
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
                           shown(p, q), strerror(-tfd));
    tdir = tfd;
  }
  if (linkat(tdir, tname, pfd, name, 0) < 0) {
    if (errno != EEXIST)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot link \"%s\": %s",
                           shown(p, q), strerror(errno));
    int r = im_clear(im, pfd, name, p);
    if (r < 0)
      return r;
    if (linkat(tdir, tname, pfd, name, 0) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot link \"%s\": %s",
                           shown(p, q), strerror(errno));
  }
  return 0;
}

static int im_dir(struct importer *im, size_t i, int pfd, const char *name) {
  char q[NAME_SHOWN + 4];
  const char *p = mpath(im, i);
  if (mkdirat(pfd, name, 0700) == 0)
    return 0;
  if (errno != EEXIST)
    return sbx_error_set(im->e, SBX_OK, errno, "cannot create \"%s\": %s",
                         shown(p, q), strerror(errno));
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
                         shown(p, q), strerror(errno));
  return 0;
}

static int cmp_dirs_desc(const void *a, const void *b, void *arg) {
  const struct importer *im = arg;
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return strcmp(mpath(im, y), mpath(im, x));
}

/* Applies directory members' modes, owners and times, deepest first, after
 * everything inside them was written. */
static int im_dir_meta(struct importer *im) {
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
    const char *p = mpath(im, dirs[k]);
    _cleanup_close_ int fd =
        sbx_openat2(im->x->dest_fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0,
                    RESOLVE_NO_SYMLINKS);
    if (fd < 0)
      return sbx_error_set(im->e, SBX_OK, -fd, "cannot open \"%s\": %s",
                           shown(p, q), strerror(-fd));
    if (im->d->is_root && fchown(fd, mm->uid, mm->gid) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot chown \"%s\": %s",
                           shown(p, q), strerror(errno));
    if (fchmod(fd, mm->mode & 01777) < 0)
      return sbx_error_set(im->e, SBX_OK, errno, "cannot chmod \"%s\": %s",
                           shown(p, q), strerror(errno));
    struct timespec ts[2];
    member_times(mm, ts);
    if (futimens(fd, ts) < 0)
      return sbx_error_set(im->e, SBX_OK, errno,
                           "cannot set the times of \"%s\": %s", shown(p, q),
                           strerror(errno));
  }
  return 0;
}

/* Creates member I, a directory or a link, in its parent. */
static int im_make(struct importer *im, size_t i) {
  char q[NAME_SHOWN + 4];
  int pfd = -1;
  const char *name;
  int r = im_parent(im, i, &pfd, &name);
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
                         shown(mpath(im, i), q));
  }
}

/* Pass 2: extracts the members checked in pass 1. From a mapped,
 * uncompressed spool: directories in the archive's order, then the files
 * (by threads), then the links; otherwise every member in order. */
static int im_pass2(struct importer *im) {
  struct archive *a = NULL;
  int r = im_reader(im, &a);
  if (r < 0)
    return r;
  (void)posix_fadvise(im->x->spool_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  bool listed = im->map && archive_filter_count(a) == 1;
  struct files fs = {.im = im};
  for (size_t i = 0; i < im->n; i++) {
    struct archive_entry *ent;
    r = im_next(im, a, &ent);
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
    r = raw ? im_norm(im, raw, path, "member", NULL) : -EINVAL;
    if (r == 0 && strcmp(path, mpath(im, i)) != 0)
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
      r = im_parent(im, i, &pfd, &name);
      if (r == 0)
        r = listed ? files_add(im, &fs, a, i)
                   : im_write_file(im, a, i, pfd, name);
    } else {
      r = im_make(im, i);
    }
    if (r < 0)
      break;
  }
  archive_read_free(a);
  if (r == 0 && listed) {
    pthread_mutex_init(&fs.mu, NULL);
    r = files_write(im, &fs);
    pthread_mutex_destroy(&fs.mu);
    for (size_t i = 0; r == 0 && i < im->n; i++)
      if (im->m[i].type == M_SYMLINK || im->m[i].type == M_HARDLINK)
        r = im_make(im, i);
  }
  free(fs.f);
  free(fs.blk);
  if (im->pfd >= 0)
    (void)close(im->pfd);
  im->pfd = -1;
  if (r < 0)
    return r;
  return im_dir_meta(im);
}

/* ---- import: extraction while the archive arrives ---- */

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
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t received; /* under mu: bytes in the spool */
  bool eof;          /* under mu: the finish came, no more bytes */
  bool cancel;       /* under mu */
};

/* libarchive's read callback: what has arrived past what it has, waiting
 * for more; 0 at the end. */
static la_ssize_t stage_read(struct archive *a, void *cd, const void **buf) {
  struct stage *s = cd;
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
  s->consumed = end;
  return (la_ssize_t)n;
}

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
    int r = im_next(im, a, &ent);
    if (r <= 0)
      return r;
    r = im_take(im, a, ent);
    if (r < 0)
      return r;
    size_t i = im->n - 1;
    enum mtype t = im->m[i].type;
    if (t == M_SELF || t == M_SYMLINK || t == M_HARDLINK)
      continue;
    if (path_depth(mpath(im, i), im->m[i].plen) > STAGE_MAX_DEPTH)
      return sbx_error_set(im->e, SBX_OK, ELOOP,
                           "too deep to extract while it arrives");
    if (t == M_REG) {
      int pfd = -1;
      const char *name;
      r = im_parent(im, i, &pfd, &name);
      if (r == 0)
        r = im_write_file(im, a, i, pfd, name);
    } else {
      r = im_make(im, i);
    }
    if (r < 0)
      return r;
  }
}

static void *stage_main(void *arg) {
  struct stage *s = arg;
  struct archive *a = NULL;
  int r = im_archive(&s->im, &a);
  if (r == 0 && archive_read_open(a, s, NULL, stage_read, NULL) != ARCHIVE_OK)
    r = la_fail(s->im.e, a, "cannot read the archive");
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
static void stage_feed(struct stage *s, uint64_t size) {
  pthread_mutex_lock(&s->mu);
  s->received = size;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Tells the thread to stop at its next read; does not wait. */
static void stage_cancel(struct stage *s) {
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

static struct stage *stage_free(struct stage *s) {
  if (!s)
    return NULL;
  stage_join(s, true);
  stage_remove(s);
  if (s->map)
    (void)munmap((void *)s->map, s->maplen);
  free(s->im.m);
  free(s->im.pool);
  free(s->im.ht);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return NULL;
}

/* Starts extracting X while it arrives when its destination (the client's
 * PATH) is empty, and names the staging directory in *STAGING_PATH (in C's
 * arena); on any failure X is imported by the two passes. */
static void stage_start(struct rpc_call *c, struct xfer *x, const char *path,
                        char **staging_path) {
  bool empty = false;
  long page = sysconf(_SC_PAGESIZE);
  if (dir_is_empty(x->dest_fd, &empty) < 0 || !empty || page <= 0 ||
      x->lim.input_bytes > SIZE_MAX / 2)
    return;
  struct stage *s = calloc(1, sizeof(*s));
  if (!s)
    return;
  s->x = x;
  s->dir_fd = -1;
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
      .steps = LINK_STEPS_MAX,
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
    char **nn = grow(names, &cap, n + 1, sizeof(*names));
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
static int stage_finish(struct stage *s, struct rpc_call *c) {
  stage_join(s, false);
  struct importer *im = &s->im;
  int r = s->result;
  if (r == 0)
    r = im_check_tree(im);
  for (size_t i = 0; r == 0 && i < im->n; i++)
    if (im->m[i].type == M_SYMLINK || im->m[i].type == M_HARDLINK)
      r = im_make(im, i);
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
  r = im_dir_meta(im);
  if (r < 0)
    return r;
  s->x->members = im->n;
  s->x->extracted = im->written;
  return 1;
}

int rpc_archive_import_finish(struct rpc_call *c) {
  const Sbx__V1__ArchiveImportFinish *rq =
      RPC_BODY(c, ARCHIVE_IMPORT_FINISH, archive_import_finish);
  if (!rq)
    return rpc_no_body(c);
  struct xfer *x = NULL;
  int r = table_acquire(c, rq->handle, XFER_IMPORT, &x);
  if (r < 0)
    return r;
  Sbx__V1__ArchiveImportFinishReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__ArchiveImportFinishReply);
  if (!rep) {
    r = rpc_fail(c, SBX_OK, ENOMEM, "out of memory");
    goto out;
  }
  if (x->state == XFER_FAILED) {
    r = xfer_refuse_finished(c, x);
    goto out;
  }
  if (x->state == XFER_OPEN && x->stage) {
    r = stage_finish(x->stage, c);
    x->stage = stage_free(x->stage);
    if (r < 0) {
      r = xfer_fail(c, x, r);
      goto out;
    }
    if (r > 0) {
      x->state = XFER_DONE;
      (void)close(x->spool_fd);
      x->spool_fd = -1;
    }
    r = 0;
  }
  if (x->state == XFER_OPEN) {
    struct importer im = {
        .x = x,
        .d = c->d,
        .e = &c->err,
        .base = x->dest_fd,
        .steps = LINK_STEPS_MAX,
        .pfd = -1,
    };
    im_map(&im);
    r = im_pass1(&im);
    if (r == 0)
      r = im_pass2(&im);
    if (im.map)
      (void)munmap((void *)im.map, im.maplen);
    free(im.m);
    free(im.pool);
    free(im.ht);
    if (r < 0) {
      r = xfer_fail(c, x, r);
      goto out;
    }
    x->state = XFER_DONE;
    x->members = im.n;
    x->extracted = im.written;
    (void)close(x->spool_fd);
    x->spool_fd = -1;
  }
  sbx__v1__archive_import_finish_reply__init(rep);
  rep->members = x->members;
  rep->extracted_bytes = x->extracted;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_FINISH;
  c->resp->archive_import_finish = rep;
out:
  table_release(c, x);
  return r;
}

/* ---- close ---- */

/* Runs on an nng thread: the transfer goes to the graveyard and the next
 * blocking archive call frees it (closing a large spool can take a while). */
int rpc_archive_close(struct rpc_call *c) {
  const Sbx__V1__ArchiveClose *rq = RPC_BODY(c, ARCHIVE_CLOSE, archive_close);
  if (!rq)
    return rpc_no_body(c);
  int r = check_table(c);
  if (r < 0)
    return r;
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  struct xfer **slot = find_locked(t, rq->handle);
  struct xfer *x = slot ? *slot : NULL;
  bool busy = x && x->busy;
  if (x && !busy) {
    *slot = NULL;
    x->next = t->graveyard;
    t->graveyard = x;
    /* The producer (or an import's extraction) stops now; the next
     * blocking call joins it. */
    if (x->stream)
      xstream_cancel(x->stream);
    if (x->stage)
      stage_cancel(x->stage);
  }
  pthread_mutex_unlock(&t->mu);
  if (!x)
    return xfer_not_found(c, rq->handle);
  if (busy)
    return xfer_busy(c, rq->handle);
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_ARCHIVE_CLOSE);
}
