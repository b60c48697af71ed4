/* The API's sandboxes, attached once and kept for the requests that follow:
 * attaching (the record, a connection, Hello's proof) costs about a
 * millisecond, more than an exec round trip itself. The client is safe for
 * concurrent calls, so requests share an entry; one that finds sandboxd
 * gone drops it, a DELETE forgets it, and the least recently used idle
 * entries go past ATTACHED_MAX. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sandbox/lifecycle.h"
#include "controller/server/server_internal.h"
#include "controller/state/state.h"
#include "shared/client.h"

#define ATTACHED_MAX 256

struct attached {
  struct attached *next;
  char id[STATE_ID_LEN + 1];
  struct lifecycle_record rec;
  struct sandbox *sb;
  unsigned refs;
  bool listed; /* in srv->attached; false once forgotten or dropped */
  int64_t used_ms;
};

static void entry_free(struct attached *x) {
  if (x->sb)
    x->sb->backend->detach(x->sb);
  lifecycle_record_clear(&x->rec);
  free(x);
}

/* Takes X out of the list (under att_mu); it is freed by its last user. */
static void unlist(struct server *srv, struct attached *x) {
  for (struct attached **p = &srv->attached; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      srv->nattached--;
      x->listed = false;
      return;
    }
}

/* Frees the least recently used idle entry when the list is full. */
static struct attached *evict(struct server *srv) {
  struct attached *old = NULL;
  for (struct attached *x = srv->attached; x; x = x->next)
    if (!x->refs && (!old || x->used_ms < old->used_ms))
      old = x;
  if (old)
    unlist(srv, old);
  return old;
}

static struct attached *find(struct server *srv, const char *id) {
  for (struct attached *x = srv->attached; x; x = x->next)
    if (strcmp(x->id, id) == 0)
      return x;
  return NULL;
}

int attached_get(struct server *srv, const char *id, struct sb_use *u,
                 struct sbx_error *e) {
  *u = (struct sb_use){.srv = srv};
  pthread_mutex_lock(&srv->att_mu);
  struct attached *x = find(srv, id);
  if (x) {
    x->refs++;
    x->used_ms = store_now_ms();
  }
  pthread_mutex_unlock(&srv->att_mu);
  if (!x) {
    x = calloc(1, sizeof(*x));
    if (!x)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    (void)snprintf(x->id, sizeof(x->id), "%s", id);
    struct backend_options bo = {0};
    int r = lifecycle_load(srv->cfg->state_dir, id, &x->rec, e);
    if (r == 0 && (r = lifecycle_attach(&x->rec, &bo, &x->sb, e)) == 0 &&
        !x->sb->client)
      r = sbx_error_set(e, SBX_UNAVAILABLE, ESRCH, "sandbox %s is stopped", id);
    if (r < 0) {
      entry_free(x);
      return r;
    }
    x->refs = 1;
    x->used_ms = store_now_ms();
    pthread_mutex_lock(&srv->att_mu);
    struct attached *old = srv->nattached >= ATTACHED_MAX ? evict(srv) : NULL;
    /* Another request may have attached it meanwhile: both work; this
     * one is used once and dropped. */
    x->listed = !find(srv, id);
    if (x->listed) {
      x->next = srv->attached;
      srv->attached = x;
      srv->nattached++;
    }
    pthread_mutex_unlock(&srv->att_mu);
    if (old)
      entry_free(old);
  }
  u->ref = x;
  u->sb = x->sb;
  return 0;
}

void attached_put(struct sb_use *u, int r) {
  struct attached *x = u->ref;
  if (!x)
    return;
  struct server *srv = u->srv;
  /* A sandboxd that is gone or restarted: the next request attaches
   * afresh. */
  bool drop = r == -ENOTCONN || r == -ECONNREFUSED || r == -ECONNRESET ||
              r == -EPIPE || r == -ESRCH || r == -ETIMEDOUT ||
              r == -ESHUTDOWN || r == -EACCES;
  pthread_mutex_lock(&srv->att_mu);
  if (drop && x->listed)
    unlist(srv, x);
  bool last = --x->refs == 0 && !x->listed;
  pthread_mutex_unlock(&srv->att_mu);
  if (last)
    entry_free(x);
  *u = (struct sb_use){0};
}

void attached_forget(struct server *srv, const char *id) {
  pthread_mutex_lock(&srv->att_mu);
  struct attached *x = find(srv, id);
  bool idle = x && x->refs == 0;
  if (x)
    unlist(srv, x);
  pthread_mutex_unlock(&srv->att_mu);
  if (idle)
    entry_free(x);
}

void attached_free_all(struct server *srv) {
  while (srv->attached) {
    struct attached *x = srv->attached;
    srv->attached = x->next;
    entry_free(x);
  }
  srv->nattached = 0;
}
