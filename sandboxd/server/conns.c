#include "sandboxd/server/conns.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "shared/clock.h"
#include "shared/log.h"

/* How often the thread looks at the heap and reports on the caps, in ms. */
#define CONNS_TICK_MS 1000
/* Free heap above which it is handed back to the kernel. */
#define CONNS_TRIM_BYTES (4u << 20)
/* Pipes closed at their deadline per pass, outside the lock. */
#define CONNS_BATCH 64

/* A pipe the table closes (at its deadline, or for a newcomer) is
 * forgotten at once: it counts against no cap while nng takes it down, and
 * its REM_POST finds nothing, as a refused pipe's does. */
enum conn_state {
  CONN_UNAUTH, /* admitted, on the deadline list */
  CONN_AUTHED,
};

struct conn {
  uint32_t id; /* nng_pipe_id */
  enum conn_state state;
  uint64_t deadline_ms;           /* CLOCK_MONOTONIC, while CONN_UNAUTH */
  struct conn *hnext;             /* hash chain, or the free list */
  struct conn *dl_prev, *dl_next; /* the deadline list, oldest first */
};

struct conns {
  struct conns_config cfg;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC: the list changed, or stop */
  struct conn *pool; /* cfg.max_total entries */
  struct conn *free;
  struct conn **buckets;
  size_t mask; /* buckets - 1, a power of two minus one */
  struct conn *dl_head, *dl_tail;
  uint32_t unauth, authed;            /* entries in each state */
  uint64_t refused, evicted, expired; /* since the last report */
  bool stop;
  pthread_t thread;
};

/* The hash chain of pipe ID. */
static struct conn **bucket(struct conns *c, uint32_t id) {
  return &c->buckets[(id * 2654435761u) & c->mask];
}

/* The entry of pipe ID, or NULL. Locked. */
static struct conn *find(struct conns *c, uint32_t id) {
  struct conn *n = *bucket(c, id);
  while (n && n->id != id)
    n = n->hnext;
  return n;
}

/* Takes N off the deadline list. Locked. */
static void dl_unlink(struct conns *c, struct conn *n) {
  if (n->dl_prev)
    n->dl_prev->dl_next = n->dl_next;
  else
    c->dl_head = n->dl_next;
  if (n->dl_next)
    n->dl_next->dl_prev = n->dl_prev;
  else
    c->dl_tail = n->dl_prev;
  n->dl_prev = n->dl_next = NULL;
}

/* Takes N out of the hash table and returns it to the free list. Locked. */
static void release_entry(struct conns *c, struct conn *n) {
  struct conn **pp = bucket(c, n->id);
  while (*pp != n)
    pp = &(*pp)->hnext;
  *pp = n->hnext;
  if (n->state == CONN_UNAUTH) {
    dl_unlink(c, n);
    c->unauth--;
  } else {
    c->authed--;
  }
  n->hnext = c->free;
  c->free = n;
}

/* Forgets the unauthenticated N, which the caller closes once the lock is
 * dropped; its pipe id. Locked. */
static uint32_t forget(struct conns *c, struct conn *n) {
  uint32_t id = n->id;
  release_entry(c, n);
  return id;
}

/* Enters pipe ID as unauthenticated with its deadline. Locked; a free
 * entry exists. */
static void admit(struct conns *c, uint32_t id) {
  struct conn *n = c->free;
  c->free = n->hnext;
  *n = (struct conn){.id = id, .state = CONN_UNAUTH};
  n->deadline_ms = sbx_now_ms() + c->cfg.handshake_ms;
  struct conn **b = bucket(c, id);
  n->hnext = *b;
  *b = n;
  n->dl_prev = c->dl_tail;
  if (c->dl_tail)
    c->dl_tail->dl_next = n;
  else
    c->dl_head = n;
  c->dl_tail = n;
  c->unauth++;
  if (c->dl_head == n)
    pthread_cond_signal(&c->cv); /* the thread may sleep without one */
}

/* Admits P, making room by closing the oldest unauthenticated pipe when a
 * cap is reached; refuses P when there is none to close. The pipes are
 * closed after the lock is dropped (nng may call back into the table). */
void conns_add(struct conns *c, nng_pipe p) {
  uint32_t evict = 0;
  pthread_mutex_lock(&c->mu);
  bool full = c->unauth + c->authed >= c->cfg.max_total ||
              c->unauth >= c->cfg.max_unauth;
  if (full && c->dl_head) {
    evict = forget(c, c->dl_head);
    c->evicted++;
    full = false;
  }
  bool ok = !full && c->free;
  if (ok)
    admit(c, (uint32_t)nng_pipe_id(p));
  else
    c->refused++;
  pthread_mutex_unlock(&c->mu);
  if (evict)
    (void)nng_pipe_close((nng_pipe){.id = evict});
  if (!ok)
    (void)nng_pipe_close(p);
}

/* Forgets P, if it is still known. */
void conns_remove(struct conns *c, nng_pipe p) {
  pthread_mutex_lock(&c->mu);
  struct conn *n = find(c, (uint32_t)nng_pipe_id(p));
  if (n)
    release_entry(c, n);
  pthread_mutex_unlock(&c->mu);
}

/* Marks P authenticated: off the deadline list, out of reach of
 * newcomers. */
void conns_authenticated(struct conns *c, nng_pipe p) {
  uint32_t id = (uint32_t)nng_pipe_id(p);
  pthread_mutex_lock(&c->mu);
  struct conn *n = find(c, id);
  if (n && n->state == CONN_UNAUTH) {
    dl_unlink(c, n);
    n->state = CONN_AUTHED;
    c->unauth--;
    c->authed++;
  }
  pthread_mutex_unlock(&c->mu);
}

/* Hands free heap back to the kernel when there is more than a little:
 * after a flood, freed connection state is scattered through glibc's arenas
 * and would stay in the RSS for good. Cheap when there is nothing to do. */
static void return_memory(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2();
  if (mi.fordblks >= CONNS_TRIM_BYTES)
    (void)malloc_trim(0);
#endif
}

/* Reports, once per tick at most, what the caps and deadlines did, so that
 * a flood is seen in the log without a line per connection. Locked. */
static void report(struct conns *c) {
  if (c->evicted || c->refused)
    log_warn("connection limits: closed %llu waiting for a valid token to "
             "admit newer ones, refused %llu (%u with the token, %u "
             "without; limits %u and %u)",
             (unsigned long long)c->evicted, (unsigned long long)c->refused,
             c->authed, c->unauth, c->cfg.max_total, c->cfg.max_unauth);
  if (c->expired)
    log_info("closed %llu connections that sent no valid token within %u ms",
             (unsigned long long)c->expired, c->cfg.handshake_ms);
  c->refused = c->evicted = c->expired = 0;
}

/* Takes up to CONNS_BATCH pipes past their deadline off the list into IDS
 * (the caller closes them); their number. Locked. */
static size_t take_expired(struct conns *c, uint64_t now, uint32_t *ids) {
  size_t n = 0;
  while (n < CONNS_BATCH && c->dl_head && c->dl_head->deadline_ms <= now) {
    ids[n++] = forget(c, c->dl_head);
    c->expired++;
  }
  return n;
}

/* The table's thread: closes pipes at their deadline, and once per tick
 * reports and returns memory. */
static void *conns_main(void *arg) {
  struct conns *c = arg;
  uint64_t next_tick = sbx_now_ms() + CONNS_TICK_MS;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    uint64_t now = sbx_now_ms();
    uint32_t ids[CONNS_BATCH];
    size_t n = take_expired(c, now, ids);
    if (n) {
      pthread_mutex_unlock(&c->mu);
      for (size_t i = 0; i < n; i++)
        (void)nng_pipe_close((nng_pipe){.id = ids[i]});
      pthread_mutex_lock(&c->mu);
      continue;
    }
    if (now >= next_tick) {
      report(c);
      pthread_mutex_unlock(&c->mu);
      return_memory();
      pthread_mutex_lock(&c->mu);
      next_tick = now + CONNS_TICK_MS;
      continue;
    }
    uint64_t wake = next_tick;
    if (c->dl_head && c->dl_head->deadline_ms < wake)
      wake = c->dl_head->deadline_ms;
    struct timespec ts =
        sbx_deadline_in(CLOCK_MONOTONIC, (unsigned)(wake - now));
    (void)pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Frees what conns_new allocated, the thread aside. */
static void release(struct conns *c) {
  free(c->buckets);
  free(c->pool);
  free(c);
}

/* Allocates every entry up front so that admitting a pipe in nng's
 * callback never allocates, and starts the thread. */
int conns_new(const struct conns_config *cfg, struct conns **out) {
  if (cfg->max_total < 1 || cfg->max_unauth < 1 ||
      cfg->max_unauth > cfg->max_total || cfg->handshake_ms < 1)
    return -EINVAL;
  struct conns *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->cfg = *cfg;
  size_t nb = 16;
  while (nb < (size_t)cfg->max_total * 2)
    nb *= 2;
  c->mask = nb - 1;
  c->buckets = calloc(nb, sizeof(*c->buckets));
  c->pool = calloc(cfg->max_total, sizeof(*c->pool));
  if (!c->buckets || !c->pool) {
    release(c);
    return -ENOMEM;
  }
  for (size_t i = cfg->max_total; i-- > 0;) {
    c->pool[i].hnext = c->free;
    c->free = &c->pool[i];
  }
  pthread_condattr_t ca;
  (void)pthread_condattr_init(&ca);
  (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  (void)pthread_cond_init(&c->cv, &ca);
  (void)pthread_condattr_destroy(&ca);
  (void)pthread_mutex_init(&c->mu, NULL);
  if (pthread_create(&c->thread, NULL, conns_main, c) != 0) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    release(c);
    return -EAGAIN;
  }
  *out = c;
  return 0;
}

/* Stops the thread (it closes nothing more), then frees. */
struct conns *conns_free(struct conns *c) {
  if (!c)
    return NULL;
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  (void)pthread_join(c->thread, NULL);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  release(c);
  return NULL;
}
