/* Archive transfers: the transfer record, the table of open transfers under
 * their random handles (with idle expiry and the graveyard of closed ones),
 * ArchiveClose, and the helpers every transfer uses. */
#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "shared/clock.h"
#include "shared/log.h"
#include "shared/rand.h"

#define XFER_IDLE_MS_DEFAULT (10u * 60u * 1000u)

/* ---- transfers and the table ---- */

/* Frees X: stops its producer or staging thread first, then closes its
 * files (which, for a large spool, can take a while). */
struct xfer *xfer_free(struct xfer *x) {
  if (!x)
    return NULL;
  export_stream_free(x->stream);
  export_skipped_fini(&x->skipped);
  stage_free(x->stage);
  if (x->spool_fd >= 0)
    (void)close(x->spool_fd);
  if (x->dest_fd >= 0)
    (void)close(x->dest_fd);
  free(x);
  return NULL;
}

/* Frees the transfers on the list X (the graveyard, the expired). */
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
      export_stream_cancel(t->slots[i]->stream);
  for (struct xfer *x = t->graveyard; x; x = x->next)
    if (x->stream)
      export_stream_cancel(x->stream);
  pthread_mutex_unlock(&t->mu);
}

void archive_table_set_idle_ms(struct archive_table *t, uint64_t ms) {
  pthread_mutex_lock(&t->mu);
  t->idle_ms = ms;
  pthread_mutex_unlock(&t->mu);
}

void archive_table_pipe_closed(struct archive_table *t, uint32_t pipe) {
  if (!t || pipe == 0)
    return;
  pthread_mutex_lock(&t->mu);
  uint64_t now = sbx_now_ms();
  for (uint32_t i = 0; i < t->nslots; i++) {
    struct xfer *x = t->slots[i];
    if (x && x->pipe == pipe)
      x->orphan_ms = now ? now : 1;
  }
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

/* The daemon's table; NULL when archive transfers are not set up. */
static struct archive_table *table_of(struct rpc_call *c) {
  return c->d->archives;
}

/* A slot for a new transfer: a free one, else that of the import finished
 * (or failed) longest ago, which goes onto DEAD: it holds nothing but its
 * answer to a repeated finish, and a client that does not close it must
 * not keep others out. -1 when every slot holds a transfer in progress.
 * Called with the lock held. */
static int table_slot_locked(struct archive_table *t, struct xfer **dead) {
  int oldest = -1, orphan = -1;
  for (uint32_t i = 0; i < t->nslots; i++) {
    struct xfer *x = t->slots[i];
    if (!x)
      return (int)i;
    if (x->kind == XFER_IMPORT && x->state != XFER_OPEN && !x->busy &&
        (oldest < 0 || x->last_ms < t->slots[oldest]->last_ms))
      oldest = (int)i;
    if (x->orphan_ms && !x->busy &&
        (orphan < 0 || x->orphan_ms < t->slots[orphan]->orphan_ms))
      orphan = (int)i;
  }
  if (oldest < 0)
    oldest = orphan; /* then one whose client has gone */
  if (oldest >= 0) {
    struct xfer *x = t->slots[oldest];
    log_debug("archive transfer %016" PRIx64 " %s; its slot is taken",
              x->handle, x->orphan_ms ? "was abandoned" : "finished");
    t->slots[oldest] = NULL;
    x->next = *dead;
    *dead = x;
  }
  return oldest;
}

/* Adds X (busy, owned by the caller's call) under a new random handle. */
int xfer_table_insert(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  struct xfer *dead = table_reap_locked(t);
  int slot = table_slot_locked(t, &dead);
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
    x->pipe = c->pipe;
    x->orphan_ms = 0;
    t->slots[slot] = x;
  }
  pthread_mutex_unlock(&t->mu);
  xfer_free_list(dead);
  if (slot < 0)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, EMFILE,
                    "too many open archive transfers (%" PRIu32 ")", t->nslots);
  return 0;
}

/* Refuses a call when the daemon has no table (a test's bare context). */
int xfer_table_check(struct rpc_call *c) {
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

/* NOT_FOUND for HANDLE: never opened, closed or expired. */
static int xfer_not_found(struct rpc_call *c, uint64_t handle) {
  return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                  "archive transfer %016" PRIx64 " not found (closed or "
                  "expired)",
                  handle);
}

/* CONFLICT for HANDLE: a transfer serves one call at a time. */
static int xfer_busy(struct rpc_call *c, uint64_t handle) {
  return rpc_fail(
      c, SBX_CONFLICT, EBUSY,
      "archive transfer %016" PRIx64 " is busy with another request", handle);
}

/* Finds HANDLE of KIND and marks it busy for the caller. */
static int xfer_table_acquire(struct rpc_call *c, uint64_t handle,
                              enum xfer_kind kind, struct xfer **out) {
  int r = xfer_table_check(c);
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
      found->pipe = c->pipe; /* a client back on another connection */
      found->orphan_ms = 0;
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

/* Ends the caller's use of X; its idle time starts now. */
void xfer_table_release(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  x->busy = false;
  x->last_ms = sbx_now_ms();
  pthread_mutex_unlock(&t->mu);
}

/* Holds the transfer HANDLE of KIND busy while FN works on it for C. */
int xfer_table_run(struct rpc_call *c, uint64_t handle, enum xfer_kind kind,
                   xfer_fn fn, const void *rq) {
  struct xfer *x = NULL;
  int r = xfer_table_acquire(c, handle, kind, &x);
  if (r < 0)
    return r;
  r = fn(c, x, rq);
  xfer_table_release(c, x);
  return r;
}

/* Takes X (which the caller holds busy) out of the table and frees it. */
void xfer_table_remove(struct rpc_call *c, struct xfer *x) {
  struct archive_table *t = table_of(c);
  pthread_mutex_lock(&t->mu);
  for (uint32_t i = 0; i < t->nslots; i++)
    if (t->slots[i] == x)
      t->slots[i] = NULL;
  pthread_mutex_unlock(&t->mu);
  xfer_free(x);
}

/* ---- what every transfer uses ---- */

/* Copies NAME for a message: at most NAME_SHOWN bytes, control and non-ASCII
 * bytes as '?', so a hostile name cannot garble a reply or a log. */
const char *xfer_shown(const char *name, char out[NAME_SHOWN + 4]) {
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

/* An unlinked temporary file for a spool: O_TMPFILE in $TMPDIR or /tmp,
 * else a memfd (read-only /tmp, filesystems without O_TMPFILE). */
int xfer_spool_open(struct sbx_error *e) {
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

/* A client's limit ASKED lowers the server's, never raises it (0: none). */
static uint64_t lower_limit(uint64_t asked, uint64_t server) {
  return asked && asked < server ? asked : server;
}

/* The server's limits lowered by the client's, for one transfer. */
void xfer_limits_make(const struct sandboxd_limits *l,
                      const Sbx__V1__ArchiveLimits *al,
                      struct xfer_limits *out) {
  out->members = lower_limit(al ? al->max_members : 0, l->archive_max_members);
  out->input_bytes =
      lower_limit(al ? al->max_input_bytes : 0, l->archive_max_input_bytes);
  out->extracted_bytes = lower_limit(al ? al->max_extracted_bytes : 0,
                                     l->archive_max_extracted_bytes);
}

/* libarchive's error on A as an sbx_error; format errors are the archive's
 * fault (INVALID_ARGUMENT), system errors keep their errno. */
int xfer_la_fail(struct sbx_error *e, struct archive *a, const char *what) {
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

/* Grows the array P to hold NEED items of SIZE bytes, doubling from 64, so
 * appends stay amortized O(1); NULL on OOM, P then unchanged. */
void *xfer_grow(void *p, size_t *cap, size_t need, size_t size) {
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

/* ---- close ---- */

/* Runs on an nng thread: the transfer goes to the graveyard and the next
 * blocking archive call frees it (closing a large spool can take a while). */
int rpc_archive_close(struct rpc_call *c) {
  const Sbx__V1__ArchiveClose *rq = RPC_BODY(c, ARCHIVE_CLOSE, archive_close);
  if (!rq)
    return rpc_no_body(c);
  int r = xfer_table_check(c);
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
      export_stream_cancel(x->stream);
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
