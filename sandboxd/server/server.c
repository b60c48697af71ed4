#include "sandboxd/server/server.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/archive/transfer.h"
#include "sandboxd/rpc/auth.h"
#include "sandboxd/rpc/version.h"
#include "sandboxd/server/bulk.h"
#include "sandboxd/server/conns.h"
#include "sandboxd/server/dispatch.h"
#include "sandboxd/server/listen.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/pblift.h"

#define ID_MAX 64

enum work_state { W_RECV, W_BUSY, W_SEND };

struct cache_entry;

/* One nng context and the request it serves. */
struct work {
  struct server *s;
  nng_ctx ctx;
  nng_aio *aio;
  enum work_state state;
  Sbx__V1__Request *req;
  Sbx__V1__Response resp;
  Sbx__V1__Error error;
  struct rpc_call call;
  const struct rpc_entry *entry;
  uint32_t pipe;             /* the connection the request came in on */
  struct cache_entry *cache; /* when this work runs a mutating request */
  bool shutdown_after;       /* the reply is to a Shutdown */
  struct work *next;         /* worker queue, or a cache entry's followers */
  nng_msg *req_msg;          /* kept while req's bulk data points into it */
  ProtobufCBinaryData *req_data; /* that field of req */
};

/* A mutating request's reply, kept for retries with the same id. */
struct cache_entry {
  char id[ID_MAX + 1];
  bool done;
  uint8_t *reply; /* packed Response, when done */
  size_t reply_len;
  struct work *followers; /* retries that arrived while in progress */
  struct cache_entry *lru_prev, *lru_next;
  struct cache_entry *hnext; /* hash chain */
};

struct server {
  struct sandboxd *d;
  nng_socket sock;
  struct listen_cfg lc;
  struct listen lis;
  struct conns *conns; /* admitted connections, their caps and deadlines */
  uint8_t *token;
  size_t token_len;
  struct work **works;
  size_t nworks;

  pthread_mutex_t qmu;
  pthread_cond_t qcv;
  struct work *qhead, *qtail;
  bool qstop;
  pthread_t *threads;
  size_t nthreads;

  pthread_mutex_t cmu;
  struct cache_entry **buckets;
  size_t nbuckets;
  size_t ncache;
  struct cache_entry *lru_head, *lru_tail; /* head = most recent */

  pthread_mutex_t smu;
  pthread_cond_t scv;
  bool shutdown;
  size_t npipes; /* connected clients (smu) */
};

static void work_cb(void *arg);
static void work_reset(struct work *w);

/* Admits or refuses a new connection (conns.h) and counts connections, for
 * server_wait_clients_gone. nng reports REM_POST for the pipes it reported
 * ADD_PRE for, refused ones too; the count never goes below 0 in case it
 * did not, which would at worst end the wait early. */
static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  struct server *s = arg;
  if (ev == NNG_PIPE_EV_ADD_PRE) {
    conns_add(s->conns, p);
  } else if (ev == NNG_PIPE_EV_REM_POST) {
    conns_remove(s->conns, p);
    /* Its transfers in progress are abandoned unless it comes back. */
    archive_table_pipe_closed(s->d->archives, (uint32_t)nng_pipe_id(p));
  }
  pthread_mutex_lock(&s->smu);
  if (ev == NNG_PIPE_EV_ADD_PRE)
    s->npipes++;
  else if (ev == NNG_PIPE_EV_REM_POST && s->npipes > 0)
    s->npipes--;
  pthread_cond_broadcast(&s->scv);
  pthread_mutex_unlock(&s->smu);
}

/* ---- reply cache ------------------------------------------------------- */

static size_t hash_id(const char *s) {
  size_t h = 1469598103934665603ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static void lru_unlink(struct server *s, struct cache_entry *c) {
  if (c->lru_prev)
    c->lru_prev->lru_next = c->lru_next;
  else
    s->lru_head = c->lru_next;
  if (c->lru_next)
    c->lru_next->lru_prev = c->lru_prev;
  else
    s->lru_tail = c->lru_prev;
  c->lru_prev = c->lru_next = NULL;
}

static void lru_push(struct server *s, struct cache_entry *c) {
  c->lru_next = s->lru_head;
  c->lru_prev = NULL;
  if (s->lru_head)
    s->lru_head->lru_prev = c;
  s->lru_head = c;
  if (!s->lru_tail)
    s->lru_tail = c;
}

static void cache_remove(struct server *s, struct cache_entry *c) {
  struct cache_entry **pp = &s->buckets[hash_id(c->id) % s->nbuckets];
  while (*pp && *pp != c)
    pp = &(*pp)->hnext;
  if (*pp)
    *pp = c->hnext;
  lru_unlink(s, c);
  s->ncache--;
  free(c->reply);
  free(c);
}

/* Drops finished entries, oldest first, until there is room for one more. */
static void cache_evict(struct server *s) {
  struct cache_entry *c = s->lru_tail;
  while (c && s->ncache >= s->d->limits.idempotency_entries) {
    struct cache_entry *prev = c->lru_prev;
    if (c->done)
      cache_remove(s, c);
    c = prev;
  }
}

/* ---- replies ----------------------------------------------------------- */

/* Packs W's response into a new nng message. An oversized reply becomes a
 * LIMIT_EXCEEDED error. */
static nng_msg *pack_reply(struct work *w) {
  size_t n = sbx__v1__response__get_packed_size(&w->resp);
  if (n > w->s->d->limits.max_message_bytes) {
    w->resp.body_case = SBX__V1__RESPONSE__BODY__NOT_SET;
    w->error.code = SBX__V1__CODE__LIMIT_EXCEEDED;
    w->error.errno_value = EMSGSIZE;
    w->error.message = "reply would exceed the message size limit";
    w->resp.error = &w->error;
    n = sbx__v1__response__get_packed_size(&w->resp);
  }
  if (w->call.bulk.field && w->resp.body_case != 0 && !w->resp.error) {
    nng_msg *m = NULL;
    int r = server_pack_bulk(&w->resp, &w->error, &w->call, n, &m);
    if (r <= 0)
      return m;
    n = sbx__v1__response__get_packed_size(&w->resp);
  }
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, n) != 0)
    return NULL;
  (void)sbx__v1__response__pack(&w->resp, nng_msg_body(m));
  return m;
}

static void send_msg(struct work *w, nng_msg *m) {
  w->state = W_SEND;
  nng_aio_set_msg(w->aio, m);
  nng_ctx_send(w->ctx, w->aio);
}

/* Sends a copy of BYTES to W, a follower or a retried request. */
static void send_bytes(struct work *w, const uint8_t *bytes, size_t n) {
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, n) != 0) {
    /* Out of memory: drop the reply; the client retries. */
    log_error("cannot allocate a reply; dropping it");
    work_reset(w);
    w->state = W_RECV;
    nng_ctx_recv(w->ctx, w->aio);
    return;
  }
  memcpy(nng_msg_body(m), bytes, n);
  send_msg(w, m);
}

/* Finishes W with handler result R: fills the error, packs, caches and
 * sends the reply, and answers any followers. Runs on any thread, once. */
static void finish(struct work *w, int r) {
  if (w->entry && !(w->entry->flags & RPC_QUIET))
    rpc_activity_end(w->s->d);
  if (r < 0) {
    struct sbx_error *e = &w->call.err;
    if (e->code == SBX_OK) {
      e->code = sbx_code_from_errno(r);
      if (e->code == SBX_OK)
        e->code = SBX_INTERNAL;
      (void)snprintf(e->msg, sizeof(e->msg), "%s: %s",
                     w->entry ? w->entry->name : "request", strerror(-r));
    }
    w->resp.body_case = SBX__V1__RESPONSE__BODY__NOT_SET;
    w->error.code = (Sbx__V1__Code)e->code;
    w->error.errno_value = e->err ? e->err : -r;
    w->error.message = e->msg;
    w->resp.error = &w->error;
  } else if (w->resp.body_case == SBX__V1__RESPONSE__BODY__NOT_SET) {
    w->error.code = SBX__V1__CODE__INTERNAL;
    w->error.message = "handler produced no reply";
    w->resp.error = &w->error;
  }
  nng_msg *m = pack_reply(w);
  struct work *followers = NULL;
  if (w->cache) {
    struct server *s = w->s;
    pthread_mutex_lock(&s->cmu);
    struct cache_entry *c = w->cache;
    followers = c->followers;
    c->followers = NULL;
    if (m && nng_msg_len(m) <= RPC_CACHE_REPLY_MAX) {
      c->reply = malloc(nng_msg_len(m));
      if (c->reply) {
        memcpy(c->reply, nng_msg_body(m), nng_msg_len(m));
        c->reply_len = nng_msg_len(m);
        c->done = true;
      }
    }
    if (!c->done)
      cache_remove(s, c); /* not cacheable: a retry runs again */
    w->cache = NULL;
    for (struct work *f = followers; f; f = f->next)
      f->state = W_BUSY;
    pthread_mutex_unlock(&s->cmu);
  }
  for (struct work *f = followers; f;) {
    struct work *next = f->next;
    f->next = NULL;
    if (m)
      send_bytes(f, nng_msg_body(m), nng_msg_len(m));
    f = next;
  }
  if (!m) {
    log_error("cannot allocate a reply; dropping it");
    work_reset(w);
    w->state = W_RECV;
    nng_ctx_recv(w->ctx, w->aio);
    return;
  }
  send_msg(w, m);
}

static void call_complete(struct rpc_call *c, int r) {
  finish(c->server_data, r);
}

/* Replies with an error before any handler ran. */
static void reply_error(struct work *w, enum sbx_code code, const char *msg) {
  sbx_error_set(&w->call.err, code, 0, "%s", msg);
  finish(w, sbx_errno_from_code(code));
}

/* ---- request handling ------------------------------------------------- */

static bool valid_id(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n > ID_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char ch = id[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
      return false;
  }
  return true;
}

static bool token_ok(struct server *s, const ProtobufCBinaryData *t) {
  unsigned char diff = (unsigned char)(t->len != s->token_len);
  for (size_t i = 0; i < s->token_len; i++)
    diff |= (unsigned char)(s->token[i] ^ (i < t->len ? t->data[i] : 0));
  return diff == 0;
}

static void enqueue(struct server *s, struct work *w) {
  pthread_mutex_lock(&s->qmu);
  w->next = NULL;
  if (s->qtail)
    s->qtail->next = w;
  else
    s->qhead = w;
  s->qtail = w;
  pthread_cond_signal(&s->qcv);
  pthread_mutex_unlock(&s->qmu);
}

/* Looks the request up in the reply cache. Returns true when W was answered
 * (or parked as a follower) and must not run. */
static bool cache_check(struct work *w) {
  struct server *s = w->s;
  const char *id = w->req->id;
  size_t b = hash_id(id) % s->nbuckets;
  pthread_mutex_lock(&s->cmu);
  struct cache_entry *c = s->buckets[b];
  while (c && strcmp(c->id, id) != 0)
    c = c->hnext;
  if (c) {
    lru_unlink(s, c);
    lru_push(s, c);
    if (c->done) {
      uint8_t *copy = malloc(c->reply_len);
      size_t n = c->reply_len;
      if (copy)
        memcpy(copy, c->reply, n);
      pthread_mutex_unlock(&s->cmu);
      log_debug("request \"%s\" repeated; sending the first reply", id);
      if (copy) {
        send_bytes(w, copy, n);
        free(copy);
      } else {
        reply_error(w, SBX_LIMIT_EXCEEDED, "out of memory");
      }
      return true;
    }
    w->next = c->followers;
    c->followers = w;
    pthread_mutex_unlock(&s->cmu);
    return true;
  }
  cache_evict(s);
  c = calloc(1, sizeof(*c));
  if (c) {
    memcpy(c->id, id, strlen(id) + 1);
    c->hnext = s->buckets[b];
    s->buckets[b] = c;
    lru_push(s, c);
    s->ncache++;
    w->cache = c;
  }
  pthread_mutex_unlock(&s->cmu);
  return false;
}

/* Decodes MSG (stolen) into W's request. A FileWrite's data is used where
 * it arrived (pblift.h), and MSG kept until work_reset. */
static void decode_request(struct work *w, nng_msg *msg) {
  const uint8_t *body = nng_msg_body(msg);
  size_t len = nng_msg_len(msg);
  struct sbx_pb_lift l = {0};
  if (sbx_pb_lift(body, len, SBX__V1__REQUEST__BODY_FILE_WRITE,
                  2 /* FileWrite.data */, &l) == 1) {
    w->req = sbx__v1__request__unpack(NULL, l.rest_len, l.rest);
    free(l.rest);
    if (w->req && w->req->body_case == SBX__V1__REQUEST__BODY_FILE_WRITE &&
        w->req->file_write) {
      w->req_data = &w->req->file_write->data;
      w->req_data->data = (uint8_t *)body + l.data_off;
      w->req_data->len = l.data_len;
      w->req_msg = msg;
      return;
    }
    if (w->req)
      sbx__v1__request__free_unpacked(w->req, NULL);
  }
  w->req = sbx__v1__request__unpack(NULL, len, body);
  nng_msg_free(msg);
}

static void handle(struct work *w, nng_msg *msg) {
  struct server *s = w->s;
  w->state = W_BUSY;
  w->pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
  w->call.pipe = w->pipe;
  decode_request(w, msg);
  w->call.req = w->req;
  w->resp.version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  if (!w->req) {
    reply_error(w, SBX_INVALID_ARGUMENT, "request is not a valid message");
    return;
  }
  /* The reply echoes the id only once it is known to be well-formed. */
  if (!valid_id(w->req->id)) {
    reply_error(w, SBX_INVALID_ARGUMENT,
                "request id must be 1 to 64 characters of [A-Za-z0-9._-]");
    return;
  }
  w->resp.id = w->req->id;
  if (!token_ok(s, &w->req->token)) {
    /* A Hello asking sandboxd to prove itself: the proof and nothing
     * else, so that a client can check us before it sends the token. */
    if (rpc_hello_is_challenge(w->req)) {
      finish(w, rpc_hello_challenge(&w->call));
      return;
    }
    log_warn("refused request \"%s\": wrong or missing token", w->req->id);
    reply_error(w, SBX_UNAUTHENTICATED, "wrong or missing token");
    return;
  }
  server_pipe_authenticated(s, w->pipe);
  if (w->req->version != SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1) {
    reply_error(w, SBX_VERSION_MISMATCH, "this sandboxd speaks protocol 1");
    return;
  }
  w->entry = dispatch_lookup(w->req->body_case);
  if (!w->entry) {
    char m[96];
    (void)snprintf(m, sizeof(m), "request type %d is not supported",
                   (int)w->req->body_case);
    reply_error(w, SBX_NOT_SUPPORTED, m);
    return;
  }
  if ((w->entry->flags & RPC_MUTATING) && cache_check(w))
    return;
  if (!(w->entry->flags & RPC_QUIET))
    rpc_activity_begin(s->d);
  w->shutdown_after = w->req->body_case == SBX__V1__REQUEST__BODY_SHUTDOWN;
  log_debug("request \"%s\": %s", w->req->id, w->entry->name);
  if (w->entry->flags & RPC_BLOCKING) {
    enqueue(s, w);
    return;
  }
  int r = w->entry->handler(&w->call);
  if (r != RPC_PENDING)
    finish(w, r);
}

/* Clears what one request left behind so the context can serve the next. */
static void work_reset(struct work *w) {
  if (w->call.bulk.field)
    (void)close(w->call.bulk.fd);
  memset(&w->call.bulk, 0, sizeof(w->call.bulk));
  if (w->req_data) {
    w->req_data->data = NULL;
    w->req_data->len = 0;
    w->req_data = NULL;
  }
  if (w->req_msg)
    nng_msg_free(w->req_msg);
  w->req_msg = NULL;
  if (w->req)
    sbx__v1__request__free_unpacked(w->req, NULL);
  w->req = NULL;
  sbx_arena_reset(&w->call.arena);
  sbx__v1__response__init(&w->resp);
  sbx__v1__error__init(&w->error);
  sbx_error_clear(&w->call.err);
  w->call.req = NULL;
  w->entry = NULL;
  w->cache = NULL;
  w->next = NULL;
}

static void work_cb(void *arg) {
  struct work *w = arg;
  struct server *s = w->s;
  int rv = nng_aio_result(w->aio);
  switch (w->state) {
  case W_RECV:
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
      return;
    if (rv != 0) {
      nng_ctx_recv(w->ctx, w->aio);
      return;
    }
    work_reset(w);
    {
      nng_msg *m = nng_aio_get_msg(w->aio);
      nng_aio_set_msg(w->aio, NULL);
      handle(w, m);
    }
    return;
  case W_SEND:
    if (rv != 0) {
      nng_msg *m = nng_aio_get_msg(w->aio);
      if (m)
        nng_msg_free(m);
    }
    if (w->shutdown_after) {
      pthread_mutex_lock(&s->smu);
      s->shutdown = true;
      pthread_cond_broadcast(&s->scv);
      pthread_mutex_unlock(&s->smu);
      w->shutdown_after = false;
    }
    work_reset(w);
    w->state = W_RECV;
    if (rv == NNG_ECLOSED)
      return;
    nng_ctx_recv(w->ctx, w->aio);
    return;
  case W_BUSY:
    return;
  }
}

static void *worker_main(void *arg) {
  struct server *s = arg;
  dispatch_worker_init(s->d);
  for (;;) {
    pthread_mutex_lock(&s->qmu);
    while (!s->qhead && !s->qstop)
      pthread_cond_wait(&s->qcv, &s->qmu);
    if (!s->qhead) {
      pthread_mutex_unlock(&s->qmu);
      return NULL;
    }
    struct work *w = s->qhead;
    s->qhead = w->next;
    if (!s->qhead)
      s->qtail = NULL;
    w->next = NULL;
    pthread_mutex_unlock(&s->qmu);
    int r = w->entry->handler(&w->call);
    if (r != RPC_PENDING)
      finish(w, r);
  }
}

/* ---- setup ------------------------------------------------------------ */

/* The connection limits of CFG (0: the defaults) into S's table and onto
 * its listener: nng bounds the connections still in their TLS or SP
 * handshake and each step of it (NNG_OPT_NEGO_*, which
 * third_party/nng/handshake-limits.patch adds: nng has no such limit of its
 * own), the table the admitted connections and their wait for a token. */
static int setup_limits(struct server *s, const struct server_config *cfg,
                        struct sbx_error *e) {
  struct conns_config cc = {
      .max_total =
          cfg->max_connections ? cfg->max_connections : SERVER_MAX_CONNECTIONS,
      .max_unauth = cfg->max_unauthenticated ? cfg->max_unauthenticated
                                             : SERVER_MAX_UNAUTHENTICATED,
      .handshake_ms = cfg->handshake_timeout_ms ? cfg->handshake_timeout_ms
                                                : SERVER_HANDSHAKE_TIMEOUT_MS,
  };
  if (cc.max_unauth > cc.max_total)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--max-unauthenticated %u is more than "
                         "--max-connections %u",
                         cc.max_unauth, cc.max_total);
  int r = conns_new(&cc, &s->conns);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot set up the connection table: %s",
                         strerror(-r));
  s->lc.nego_max = (size_t)cc.max_unauth;
  s->lc.nego_ms = (nng_duration)cc.handshake_ms;
  return 0;
}

int server_check_url(const char *url, bool insecure, struct sbx_error *e) {
  bool ok = strncmp(url, "ipc://", 6) == 0 ||
            strncmp(url, "tls+tcp://", 10) == 0 ||
            strncmp(url, "tcp://", 6) == 0;
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "listen URL \"%s\" must be ipc://, tls+tcp:// or "
                         "tcp://",
                         url);
  if (strncmp(url, "tcp://", 6) == 0 && !insecure)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "refusing plain tcp:// (\"%s\"): traffic would be "
                         "unencrypted; use tls+tcp:// or pass --insecure",
                         url);
  return 0;
}

int server_new(struct sandboxd *d, const struct server_config *cfg,
               struct server **out, struct sbx_error *e) {
  const char *url = cfg->url;
  int cr = server_check_url(url, cfg->insecure, e);
  if (cr < 0)
    return cr;
  if (cfg->token_len < 16)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the token must be at least 16 bytes");

  struct server *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->d = d;
  pthread_mutex_init(&s->qmu, NULL);
  pthread_cond_init(&s->qcv, NULL);
  pthread_mutex_init(&s->cmu, NULL);
  pthread_mutex_init(&s->smu, NULL);
  pthread_cond_init(&s->scv, NULL);
  s->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
  int r = -ENOMEM;
  s->token = malloc(cfg->token_len);
  if (!s->token)
    goto fail;
  memcpy(s->token, cfg->token, cfg->token_len);
  s->token_len = cfg->token_len;
  s->nbuckets = (size_t)d->limits.idempotency_entries * 2 + 1;
  s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
  if (!s->buckets)
    goto fail;

  int rv = nng_rep0_open(&s->sock);
  if (rv != 0) {
    r = listen_nng_err(e, rv, "cannot open a socket for", url);
    goto fail;
  }
  (void)nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ,
                            (size_t)d->limits.max_message_bytes);
  if (nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, pipe_event, s) != 0 ||
      nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_event, s) != 0) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "cannot watch connections");
    goto fail;
  }
  s->lc = (struct listen_cfg){.url = url,
                              .cert = cfg->tls_cert,
                              .key = cfg->tls_key,
                              .ca = cfg->tls_ca};
  r = setup_limits(s, cfg, e);
  if (r == 0)
    r = listen_make(s->sock, &s->lc, &s->lis, e);
  if (r < 0)
    goto fail;
  r = -ENOMEM; /* what the allocations below fail with */

  unsigned nthreads = cfg->workers ? cfg->workers : 4;
  s->threads = calloc(nthreads, sizeof(*s->threads));
  if (!s->threads)
    goto fail;
  for (; s->nthreads < nthreads; s->nthreads++)
    if (pthread_create(&s->threads[s->nthreads], NULL, worker_main, s) != 0) {
      r = sbx_error_set(e, SBX_INTERNAL, EAGAIN, "cannot start workers");
      goto fail;
    }

  s->nworks = d->limits.max_inflight ? d->limits.max_inflight : 1;
  s->works = calloc(s->nworks, sizeof(*s->works));
  if (!s->works)
    goto fail;
  for (size_t i = 0; i < s->nworks; i++) {
    struct work *w = calloc(1, sizeof(*w));
    if (!w)
      goto fail;
    s->works[i] = w;
    w->s = s;
    w->call.d = d;
    w->call.resp = &w->resp;
    w->call.complete = call_complete;
    w->call.server_data = w;
    w->call.bulk_ok = true;
    sbx__v1__response__init(&w->resp);
    sbx__v1__error__init(&w->error);
    if (nng_aio_alloc(&w->aio, work_cb, w) != 0 ||
        nng_ctx_open(&w->ctx, s->sock) != 0) {
      r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "cannot allocate contexts");
      goto fail;
    }
  }
  r = listen_start(&s->lis, &s->lc, e);
  if (r < 0)
    goto fail;
  for (size_t i = 0; i < s->nworks; i++) {
    s->works[i]->state = W_RECV;
    nng_ctx_recv(s->works[i]->ctx, s->works[i]->aio);
  }
  *out = s;
  return 0;
fail:
  if (r == -ENOMEM && e && e->code == SBX_OK)
    sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENOMEM, "out of memory");
  server_free(s);
  return r;
}

void server_free(struct server *s) {
  if (!s)
    return;
  /* The workers first: one that finishes a request sends on its context,
   * which must not race with closing the socket (nng 1.5 panics). */
  pthread_mutex_lock(&s->qmu);
  s->qstop = true;
  pthread_cond_broadcast(&s->qcv);
  pthread_mutex_unlock(&s->qmu);
  for (size_t i = 0; i < s->nthreads; i++)
    (void)pthread_join(s->threads[i], NULL);
  if (nng_socket_id(s->sock) > 0)
    (void)nng_close(s->sock);
  s->conns = conns_free(s->conns); /* no pipe events after the close */
  for (size_t i = 0; s->works && i < s->nworks; i++) {
    struct work *w = s->works[i];
    if (!w)
      continue;
    if (w->aio) {
      nng_aio_stop(w->aio);
      nng_msg *m = nng_aio_get_msg(w->aio);
      if (m)
        nng_msg_free(m);
      nng_aio_free(w->aio);
    }
    work_reset(w);
    free(w);
  }
  free(s->works);
  free(s->threads);
  listen_close(&s->lis);
  for (size_t b = 0; s->buckets && b < s->nbuckets; b++)
    for (struct cache_entry *c = s->buckets[b]; c;) {
      struct cache_entry *n = c->hnext;
      free(c->reply);
      free(c);
      c = n;
    }
  free(s->buckets);
  if (s->token) {
    explicit_bzero(s->token, s->token_len);
    free(s->token);
  }
  pthread_mutex_destroy(&s->qmu);
  pthread_cond_destroy(&s->qcv);
  pthread_mutex_destroy(&s->cmu);
  pthread_mutex_destroy(&s->smu);
  pthread_cond_destroy(&s->scv);
  free(s);
}

bool server_shutdown_requested(struct server *s) {
  pthread_mutex_lock(&s->smu);
  bool v = s->shutdown;
  pthread_mutex_unlock(&s->smu);
  return v;
}

bool server_wait_clients_gone(struct server *s, unsigned timeout_ms) {
  struct timespec ts = sbx_deadline_in(CLOCK_REALTIME, timeout_ms);
  pthread_mutex_lock(&s->smu);
  while (s->npipes > 0)
    if (pthread_cond_timedwait(&s->scv, &s->smu, &ts) != 0)
      break;
  bool gone = s->npipes == 0;
  pthread_mutex_unlock(&s->smu);
  return gone;
}

void server_pipe_authenticated(struct server *s, uint32_t pipe) {
  conns_authenticated(s->conns, (nng_pipe){.id = pipe});
}

int server_reload_tls(struct server *s, struct sbx_error *e) {
  return listen_reload(s->sock, &s->lc, &s->lis, e);
}

void server_wait_shutdown(struct server *s, unsigned timeout_ms) {
  struct timespec ts = sbx_deadline_in(CLOCK_REALTIME, timeout_ms);
  pthread_mutex_lock(&s->smu);
  while (!s->shutdown)
    if (pthread_cond_timedwait(&s->scv, &s->smu, &ts) != 0)
      break;
  pthread_mutex_unlock(&s->smu);
}

/* ---- built-in handlers ------------------------------------------------ */

int rpc_hello(struct rpc_call *c) {
  struct sandboxd *d = c->d;
  struct sbx_arena *a = &c->arena;
  Sbx__V1__HelloReply *h = sbx_arena_new(a, Sbx__V1__HelloReply);
  Sbx__V1__Limits *l = sbx_arena_new(a, Sbx__V1__Limits);
  if (!h || !l)
    return -ENOMEM;
  sbx__v1__hello_reply__init(h);
  sbx__v1__limits__init(l);
  /* run_as last: it is left out when sandboxd is not root. */
  static char *features[] = {
      "exec",        "pty",   "files",   "patch",           "archive",
      "zstd",        "users", "seccomp", "exec_start_wait", "export_stream",
      "hello_proof", "stats", "run_as"};
  h->version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  h->server_version = (char *)sandboxd_version();
  h->features = features;
  h->n_features = SBX_ARRAY_SIZE(features) - (d->is_root ? 0 : 1);
  h->root = d->root;
  h->uid = (uint32_t)d->uid;
  h->gid = (uint32_t)d->gid;
  const struct sandboxd_limits *L = &d->limits;
  l->max_message_bytes = L->max_message_bytes;
  l->max_inflight = L->max_inflight;
  l->max_processes = L->max_processes;
  l->retention_head = L->retention_head;
  l->retention_tail = L->retention_tail;
  l->max_path_bytes = SBX_PATH_MAX - 1;
  l->max_list_entries = L->max_list_entries;
  l->max_read_bytes = L->max_read_bytes;
  l->archive_max_members = L->archive_max_members;
  l->archive_max_input_bytes = L->archive_max_input_bytes;
  l->archive_max_extracted_bytes = L->archive_max_extracted_bytes;
  h->limits = l;
  if (d->ngrants) {
    h->grants = sbx_arena_new_array(a, Sbx__V1__Grant *, d->ngrants);
    if (!h->grants)
      return -ENOMEM;
    for (size_t i = 0; i < d->ngrants; i++) {
      Sbx__V1__Grant *g = sbx_arena_new(a, Sbx__V1__Grant);
      if (!g)
        return -ENOMEM;
      sbx__v1__grant__init(g);
      g->path = d->grants[i].path;
      g->read_only = d->grants[i].read_only;
      h->grants[i] = g;
    }
    h->n_grants = d->ngrants;
  }
  if (rpc_hello_prove(c, h) < 0)
    return -ENOMEM;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_HELLO;
  c->resp->hello = h;
  return 0;
}

int rpc_shutdown(struct rpc_call *c) {
  unsigned grace = c->req->shutdown ? c->req->shutdown->grace_ms : 0;
  c->d->shutdown_grace_ms = grace ? (grace > 60000 ? 60000 : grace) : 250;
  log_info("shutdown requested (grace %u ms)", c->d->shutdown_grace_ms);
  return rpc_reply_empty(c, SBX__V1__RESPONSE__BODY_SHUTDOWN);
}
