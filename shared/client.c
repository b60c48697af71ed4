#include "shared/client.h"

#include <errno.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shared/cleanup.h"
#include "shared/client_internal.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/path.h"
#include "shared/pblift.h"
#include "shared/peer.h"
#include "shared/rand.h"

/* How often a waiting call looks at the peer (shared/peer.h). */
#define CLIENT_CHECK_MS 100

bool sbx_utf8_valid(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    unsigned char c = p[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (len - i <= n)
      return false;
    for (size_t k = 1; k <= n; k++) {
      if ((p[i + k] & 0xc0) != 0x80)
        return false;
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

int sbx_client_errno(Sbx__V1__Code code) {
  return sbx_errno_from_code((enum sbx_code)code);
}

static int nng_to_errno(int rv) {
  switch (rv) {
  case 0:
    return 0;
  case NNG_ETIMEDOUT:
    return -ETIMEDOUT;
  case NNG_ENOMEM:
    return -ENOMEM;
  case NNG_ECONNREFUSED:
    return -ECONNREFUSED;
  case NNG_ECONNSHUT:
  case NNG_ECONNRESET:
  case NNG_ECONNABORTED:
  case NNG_ECLOSED:
    return -ECONNRESET;
  case NNG_EMSGSIZE:
    return -EMSGSIZE;
  case NNG_EINVAL:
  case NNG_EADDRINVAL:
    return -EINVAL;
  case NNG_EPEERAUTH:
  case NNG_ECRYPTO:
    return -EKEYREJECTED;
  default:
    return -EIO;
  }
}

int sbx_client_new(const struct sbx_client_config *cfg, struct sbx_client **out,
                   struct sbx_error *e) {
  if (!cfg->url || strlen(cfg->url) >= sizeof(((struct sbx_client *)0)->url))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "sandboxd URL is missing or too long");
  bool tls = strncmp(cfg->url, "tls+tcp://", 10) == 0;
  struct sbx_client *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
  c->peer.pidfd = -1;
  c->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
  c->retries = cfg->retries ? cfg->retries : 3;
  c->max_msg = cfg->max_message_bytes ? cfg->max_message_bytes : 64u << 20;
  memcpy(c->url, cfg->url, strlen(cfg->url) + 1);
  int r = sbx_random_hex(c->prefix, 8);
  if (r < 0)
    goto fail;
  c->token = malloc(cfg->token_len ? cfg->token_len : 1);
  if (!c->token) {
    r = -ENOMEM;
    goto fail;
  }
  if (cfg->token_len)
    memcpy(c->token, cfg->token, cfg->token_len);
  c->token_len = cfg->token_len;

  r = sbx_peer_init(&c->peer, cfg->peer_pid, cfg->heartbeat_ms);
  if (r < 0) {
    r = sbx_error_set(e, SBX_OK, -r, "cannot watch sandboxd's process %d",
                      (int)cfg->peer_pid);
    goto fail;
  }
  int rv = nng_req0_open(&c->sock);
  if (rv == 0 && (r = client_auth_init(c, cfg, e)) < 0)
    goto fail;
  /* nng must never resend a request by itself: it would send the token
   * over a new connection before that connection proved itself. */
  if (rv == 0)
    rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME,
                           NNG_DURATION_INFINITE);
  if (rv == 0)
    rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, c->max_msg);
  if (rv == 0)
    rv = nng_dialer_create(&c->dialer, c->sock, cfg->url);
  if (rv != 0) {
    r = sbx_error_set(e, SBX_OK, -nng_to_errno(rv),
                      "cannot set up a connection to \"%s\": %s", cfg->url,
                      nng_strerror(rv));
    goto fail;
  }
  (void)nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMINT, 10);
  (void)nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMAXT, 1000);
  if (tls) {
    rv = nng_tls_config_alloc(&c->tls, NNG_TLS_MODE_CLIENT);
    if (rv == 0 && cfg->tls_ca)
      rv = nng_tls_config_ca_file(c->tls, cfg->tls_ca);
    if (rv == 0 && cfg->tls_cert && cfg->tls_key) {
      _cleanup_free_ char *cp = NULL, *kp = NULL;
      size_t cl = 0, kl = 0;
      if (sbx_read_file(cfg->tls_cert, 1u << 20, &cp, &cl) < 0 ||
          sbx_read_file(cfg->tls_key, 1u << 20, &kp, &kl) < 0) {
        r = sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                          "cannot read the client certificate \"%s\" or key "
                          "\"%s\"",
                          cfg->tls_cert, cfg->tls_key);
        goto fail;
      }
      rv = nng_tls_config_own_cert(c->tls, cp, kp, NULL);
      explicit_bzero(kp, kl);
    }
    if (rv == 0)
      rv = nng_tls_config_auth_mode(c->tls, cfg->tls_ca
                                                ? NNG_TLS_AUTH_MODE_REQUIRED
                                                : NNG_TLS_AUTH_MODE_NONE);
    if (rv == 0 && cfg->tls_server_name)
      rv = nng_tls_config_server_name(c->tls, cfg->tls_server_name);
    if (rv == 0)
      rv = nng_dialer_set_ptr(c->dialer, NNG_OPT_TLS_CONFIG, c->tls);
    if (rv != 0) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, -nng_to_errno(rv),
                        "cannot set up TLS for \"%s\": %s", cfg->url,
                        nng_strerror(rv));
      goto fail;
    }
  }
  rv = nng_dialer_start(c->dialer, NNG_FLAG_NONBLOCK);
  if (rv != 0) {
    r = sbx_error_set(e, SBX_OK, -nng_to_errno(rv), "cannot dial \"%s\": %s",
                      cfg->url, nng_strerror(rv));
    goto fail;
  }
  *out = c;
  return 0;
fail:
  sbx_client_free(c);
  return r;
}

struct sbx_client *sbx_client_free(struct sbx_client *c) {
  if (!c)
    return NULL;
  if (nng_socket_id(c->sock) > 0)
    (void)nng_close(c->sock);
  client_auth_fini(c);
  sbx_peer_fini(&c->peer);
  if (c->tls)
    nng_tls_config_free(c->tls);
  if (c->token) {
    explicit_bzero(c->token, c->token_len);
    free(c->token);
  }
  free(c);
  return NULL;
}

/* Replies whose bulk data was not copied out of the received message
 * (pblift.h): each keeps its message until sbx_client_reply_free. Few live
 * at once (one per read in flight), so a list does. */
struct lifted {
  Sbx__V1__Response *r;
  ProtobufCBinaryData *data; /* r's field pointing into msg */
  nng_msg *msg;
  struct lifted *next;
};
static pthread_mutex_t lifted_mu = PTHREAD_MUTEX_INITIALIZER;
static struct lifted *lifted_list;

/* The reply bodies that carry bulk data, and the field holding it. */
static const struct {
  Sbx__V1__Response__BodyCase body;
  uint32_t field;
} lift_bodies[] = {
    {SBX__V1__RESPONSE__BODY_FILE_READ, 1}, /* FileReadReply.data */
    {SBX__V1__RESPONSE__BODY_EXEC_READ, 1}, /* ExecReadReply.data */
};

static ProtobufCBinaryData *lift_field(Sbx__V1__Response *r) {
  if (r->body_case == SBX__V1__RESPONSE__BODY_FILE_READ && r->file_read)
    return &r->file_read->data;
  if (r->body_case == SBX__V1__RESPONSE__BODY_EXEC_READ && r->exec_read)
    return &r->exec_read->data;
  return NULL;
}

/* Decodes REPLY (stolen) into *OUT (NULL when malformed or out of memory).
 * A reply of a body in lift_bodies keeps its data where it arrived. */
static void decode_reply(nng_msg *reply, Sbx__V1__Response__BodyCase expect,
                         Sbx__V1__Response **out) {
  const uint8_t *body = nng_msg_body(reply);
  size_t len = nng_msg_len(reply);
  struct sbx_pb_lift l = {0};
  int lifted = 0;
  for (size_t i = 0; i < sizeof(lift_bodies) / sizeof(lift_bodies[0]); i++)
    if (lift_bodies[i].body == expect)
      lifted =
          sbx_pb_lift(body, len, (uint32_t)expect, lift_bodies[i].field, &l);
  if (lifted <= 0) {
    *out = sbx__v1__response__unpack(NULL, len, body);
    nng_msg_free(reply);
    return;
  }
  Sbx__V1__Response *r = sbx__v1__response__unpack(NULL, l.rest_len, l.rest);
  free(l.rest);
  ProtobufCBinaryData *d = r ? lift_field(r) : NULL;
  struct lifted *e = d ? malloc(sizeof(*e)) : NULL;
  if (!e) {
    /* Not the shape lifted (another body won), or out of memory: decode
     * the whole as it came. */
    sbx_client_reply_free(r);
    *out = sbx__v1__response__unpack(NULL, len, body);
    nng_msg_free(reply);
    return;
  }
  d->data = (uint8_t *)body + l.data_off;
  d->len = l.data_len;
  e->r = r;
  e->data = d;
  e->msg = reply;
  pthread_mutex_lock(&lifted_mu);
  e->next = lifted_list;
  lifted_list = e;
  pthread_mutex_unlock(&lifted_mu);
  *out = r;
}

void sbx_client_reply_free(Sbx__V1__Response *r) {
  if (!r)
    return;
  struct lifted *e = NULL;
  pthread_mutex_lock(&lifted_mu);
  for (struct lifted **p = &lifted_list; *p; p = &(*p)->next)
    if ((*p)->r == r) {
      e = *p;
      *p = e->next;
      break;
    }
  pthread_mutex_unlock(&lifted_mu);
  if (e) {
    e->data->data = NULL;
    e->data->len = 0;
    nng_msg_free(e->msg);
    free(e);
  }
  sbx__v1__response__free_unpacked(r, NULL);
}

/* An operation on an aio, and a wait for it that can give up early. */
struct op {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
};

static void op_done(void *arg) {
  struct op *o = arg;
  pthread_mutex_lock(&o->mu);
  o->done = true;
  pthread_cond_signal(&o->cv);
  pthread_mutex_unlock(&o->mu);
}

/* Waits for the operation O on AIO; every CLIENT_CHECK_MS looks at C's
 * peer, and cancels the operation once the peer is gone (-EPIPE, E
 * filled). 0 once the operation is done (its result is the aio's). */
static int op_wait(struct sbx_client *c, struct op *o, nng_aio *aio,
                   struct sbx_error *e) {
  int r = 0;
  pthread_mutex_lock(&o->mu);
  while (!o->done) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += CLIENT_CHECK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    (void)pthread_cond_timedwait(&o->cv, &o->mu, &ts);
    if (o->done || r < 0)
      continue;
    pthread_mutex_unlock(&o->mu);
    r = sbx_peer_check(&c->peer, c->url, e);
    if (r < 0)
      nng_aio_cancel(aio);
    pthread_mutex_lock(&o->mu);
  }
  o->done = false;
  pthread_mutex_unlock(&o->mu);
  return r;
}

/* One attempt (client_internal.h): MSG (stolen) on a fresh context; a
 * tokened one goes out only over a connection that proved itself
 * (client_auth.c). An nng error, or -EPIPE (E filled) when the peer is
 * gone. */
int client_attempt(struct sbx_client *c, nng_msg *msg, unsigned timeout_ms,
                   bool tokened, nng_msg **reply, struct sbx_error *e) {
  nng_ctx ctx;
  int rv = nng_ctx_open(&ctx, c->sock);
  if (rv != 0) {
    nng_msg_free(msg);
    return rv;
  }
  struct op o = {.done = false};
  pthread_condattr_t ca;
  (void)pthread_condattr_init(&ca);
  (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  (void)pthread_mutex_init(&o.mu, NULL);
  (void)pthread_cond_init(&o.cv, &ca);
  (void)pthread_condattr_destroy(&ca);
  nng_aio *aio = NULL;
  rv = nng_aio_alloc(&aio, op_done, &o);
  int gone = 0;
  if (rv != 0)
    nng_msg_free(msg);
  if (rv == 0) {
    nng_aio_set_timeout(aio, (nng_duration)timeout_ms);
    nng_aio_set_msg(aio, msg);
    struct client_send s;
    rv = client_auth_send_begin(c, aio, timeout_ms, tokened, &s, e);
    if (rv == 0) {
      nng_ctx_send(ctx, aio);
      gone = op_wait(c, &o, aio, e);
      client_auth_send_end(c, &s);
      rv = nng_aio_result(aio);
    }
    if (rv != 0)
      nng_msg_free(msg); /* still ours after a failed send */
  }
  if (rv == 0 && gone == 0) {
    nng_aio_set_timeout(aio, (nng_duration)timeout_ms);
    nng_ctx_recv(ctx, aio);
    gone = op_wait(c, &o, aio, e);
    rv = nng_aio_result(aio);
    if (rv == 0)
      *reply = nng_aio_get_msg(aio);
  }
  nng_aio_free(aio);
  (void)nng_ctx_close(ctx);
  pthread_cond_destroy(&o.cv);
  pthread_mutex_destroy(&o.mu);
  if (gone < 0 && rv == 0 && *reply) {
    /* It answered after all, just as it went. */
    return 0;
  }
  return gone < 0 ? gone : rv;
}

/* Validates the reply R to request ID; fills E from an error reply. */
static int check_reply(struct sbx_client *c, const char *id,
                       Sbx__V1__Response *r, Sbx__V1__Response__BodyCase expect,
                       struct sbx_error *e) {
  if (r->version != SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1)
    return sbx_error_set(e, SBX_VERSION_MISMATCH, EPROTO,
                         "sandboxd at \"%s\" speaks protocol %u, not 1", c->url,
                         r->version);
  if (r->error && r->error->code != SBX__V1__CODE__OK) {
    const char *m = r->error->message ? r->error->message : "";
    size_t ml = strlen(m);
    if (!sbx_utf8_valid(m, ml))
      m = "(message is not valid UTF-8)";
    int code = (int)r->error->code;
    if (code < 0 || code > SBX_CODE_MAX)
      code = SBX_INTERNAL;
    int err = r->error->errno_value > 0 && r->error->errno_value < 4096
                  ? r->error->errno_value
                  : -sbx_errno_from_code((enum sbx_code)code);
    sbx_error_set(e, (enum sbx_code)code, err, "%.400s", m);
    /* The errno follows the code so callers can switch on it. */
    return sbx_errno_from_code((enum sbx_code)code);
  }
  if (strcmp(r->id, id) != 0)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd answered request \"%s\" with id \"%.64s\"",
                         id, r->id);
  if (r->body_case != expect || !r->hello /* any union member */)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd answered with body %d, expected %d",
                         (int)r->body_case, (int)expect);
  return 0;
}

static __thread char tl_tag[49];
static __thread unsigned tl_seq;

void sbx_client_set_tag(const char *tag) {
  tl_seq = 0;
  if (!tag) {
    tl_tag[0] = '\0';
    return;
  }
  size_t n = 0;
  for (; tag[n] && n < sizeof(tl_tag) - 1; n++) {
    char ch = tag[n];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    tl_tag[n] = ok ? ch : '_';
  }
  tl_tag[n] = '\0';
}

/* Requests that change the sandbox: these get tagged ids. */
static bool is_mutating(Sbx__V1__Request__BodyCase b) {
  switch (b) {
  case SBX__V1__REQUEST__BODY_EXEC_START:
  case SBX__V1__REQUEST__BODY_EXEC_WRITE:
  case SBX__V1__REQUEST__BODY_EXEC_SIGNAL:
  case SBX__V1__REQUEST__BODY_EXEC_RELEASE:
  case SBX__V1__REQUEST__BODY_FILE_WRITE:
  case SBX__V1__REQUEST__BODY_FILE_MKDIR:
  case SBX__V1__REQUEST__BODY_FILE_REMOVE:
  case SBX__V1__REQUEST__BODY_FILE_RENAME:
  case SBX__V1__REQUEST__BODY_FILE_CHMOD:
  case SBX__V1__REQUEST__BODY_FILE_CHOWN:
  case SBX__V1__REQUEST__BODY_PATCH_APPLY:
  case SBX__V1__REQUEST__BODY_USERS_ENSURE:
    return true;
  default:
    return false;
  }
}

int sbx_client_call(struct sbx_client *c, Sbx__V1__Request *req,
                    Sbx__V1__Response__BodyCase expect, unsigned timeout_ms,
                    Sbx__V1__Response **out, struct sbx_error *e) {
  char id[64];
  if (tl_tag[0] && is_mutating(req->body_case)) {
    (void)snprintf(id, sizeof(id), "%s-%u", tl_tag, ++tl_seq);
  } else {
    uint64_t n = atomic_fetch_add(&c->seq, 1) + 1;
    (void)snprintf(id, sizeof(id), "%s-%llu", c->prefix, (unsigned long long)n);
  }
  req->version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  req->id = id;
  req->token.data = c->token;
  req->token.len = c->token_len;
  size_t len = sbx__v1__request__get_packed_size(req);
  if (len > c->max_msg)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EMSGSIZE,
                         "request of %zu bytes exceeds the %zu-byte limit", len,
                         c->max_msg);
  unsigned tmo = timeout_ms ? timeout_ms : c->timeout_ms;
  int rv = 0;
  nng_msg *reply = NULL;
  uint64_t t0 = sbx_now_ns();
  unsigned tries = 0;
  for (unsigned i = 0; i <= c->retries; i++) {
    /* Packed for each attempt, straight into the message the socket takes
     * (a retry is rare; a copy kept for it would cost every call). */
    nng_msg *msg = NULL;
    if (nng_msg_alloc(&msg, len) != 0) {
      rv = NNG_ENOMEM;
      break;
    }
    (void)sbx__v1__request__pack(req, nng_msg_body(msg));
    tries++;
    rv = client_attempt(c, msg, tmo, true, &reply, e);
    if (rv <= 0)
      break; /* answered, or the peer is gone (E says how) */
    if (rv != NNG_ETIMEDOUT && rv != NNG_ECONNREFUSED && rv != NNG_ECLOSED &&
        rv != NNG_ECONNSHUT && rv != NNG_ECONNRESET && rv != NNG_ECANCELED)
      break;
    log_debug("request \"%s\" to \"%s\": %s; retrying", id, c->url,
              nng_strerror(rv));
  }
  req->token.data = NULL;
  req->token.len = 0;
  req->id = NULL;
  if (rv == NNG_ENOMEM && tries == 0)
    return -ENOMEM;
  if (rv < 0)
    return rv;
  if (rv == NNG_EPEERAUTH)
    return -EKEYREJECTED; /* E says which peer failed to prove itself */
  if (rv != 0) {
    if (rv == NNG_ETIMEDOUT)
      return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                           "sandboxd at \"%s\" did not answer in %" PRIu64
                           " ms (%u attempts of up to %u ms)",
                           c->url, (sbx_now_ns() - t0) / 1000000u, tries, tmo);
    return sbx_error_set(e, SBX_UNAVAILABLE, -nng_to_errno(rv),
                         "cannot reach sandboxd at \"%s\": %s", c->url,
                         nng_strerror(rv));
  }
  Sbx__V1__Response *r = NULL;
  decode_reply(reply, expect, &r);
  if (!r)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd at \"%s\" sent a malformed reply", c->url);
  int ret = check_reply(c, id, r, expect, e);
  if (ret < 0) {
    sbx_client_reply_free(r);
    return ret;
  }
  *out = r;
  return 0;
}

/* Calls with BODY as the request's one-of member CASE and expects the
 * reply body of the same number. */
static int call_body(struct sbx_client *c, Sbx__V1__Request__BodyCase which,
                     void *body, unsigned timeout_ms, Sbx__V1__Response **out,
                     struct sbx_error *e) {
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = which;
  req.hello = body; /* every member shares the union slot */
  Sbx__V1__Response *r = NULL;
  int ret = sbx_client_call(c, &req, (Sbx__V1__Response__BodyCase)which,
                            timeout_ms, &r, e);
  if (ret < 0)
    return ret;
  if (out)
    *out = r;
  else
    sbx_client_reply_free(r);
  return 0;
}

int sbx_hello(struct sbx_client *c, Sbx__V1__Response **out,
              struct sbx_error *e) {
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  h.client_version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  h.client_name = "sbx";
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_HELLO, &h, 0, &r, e);
  if (ret < 0)
    return ret;
  Sbx__V1__HelloReply *hr = r->hello;
  if (!hr->limits || !hr->root || !sbx_utf8_valid(hr->root, strlen(hr->root))) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent an incomplete hello");
  }
  if (out)
    *out = r;
  else
    sbx_client_reply_free(r);
  return 0;
}

int sbx_shutdown(struct sbx_client *c, unsigned grace_ms, struct sbx_error *e) {
  Sbx__V1__Shutdown s = SBX__V1__SHUTDOWN__INIT;
  s.grace_ms = grace_ms;
  return call_body(c, SBX__V1__REQUEST__BODY_SHUTDOWN, &s, 0, NULL, e);
}

/* A hostile sandbox may lie about offsets and sizes: whether X answers a
 * read from OFFSET of at most MAX bytes (0: any) consistently. */
static bool read_reply_ok(const Sbx__V1__ExecReadReply *x, uint64_t offset,
                          uint32_t max) {
  return (!max || x->data.len <= max) && x->offset >= offset &&
         x->next_offset == x->offset + x->data.len &&
         x->gap == x->offset - offset && x->end_offset >= x->next_offset;
}

int sbx_exec_start(struct sbx_client *c, Sbx__V1__ExecStart *a,
                   Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_EXEC_START, a,
                      a->wait_ms + c->timeout_ms, &r, e);
  if (ret < 0)
    return ret;
  /* A sandboxd without "exec_start_wait" answers a waiting start at once,
   * without output: the caller reads as after a plain start. */
  const Sbx__V1__ExecReadReply *x = r->exec_start->output;
  if (x && (!a->wait_ms || !read_reply_ok(x, 0, a->max_bytes))) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent an inconsistent exec start reply");
  }
  *out = r;
  return 0;
}

int sbx_exec_read(struct sbx_client *c, Sbx__V1__ExecRead *a,
                  Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_EXEC_READ, a,
                      a->wait_ms + c->timeout_ms, &r, e);
  if (ret < 0)
    return ret;
  if (!read_reply_ok(r->exec_read, a->offset, a->max_bytes)) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent an inconsistent exec read reply");
  }
  *out = r;
  return 0;
}

int sbx_exec_write(struct sbx_client *c, uint64_t exec_id, const void *data,
                   size_t len, bool close_stdin, struct sbx_error *e) {
  Sbx__V1__ExecWrite w = SBX__V1__EXEC_WRITE__INIT;
  w.exec_id = exec_id;
  w.data.data = (uint8_t *)data;
  w.data.len = len;
  w.close = close_stdin;
  return call_body(c, SBX__V1__REQUEST__BODY_EXEC_WRITE, &w, 0, NULL, e);
}

int sbx_exec_signal(struct sbx_client *c, uint64_t exec_id, int sig, bool group,
                    struct sbx_error *e) {
  Sbx__V1__ExecSignal s = SBX__V1__EXEC_SIGNAL__INIT;
  s.exec_id = exec_id;
  s.signal = sig;
  s.group = group;
  return call_body(c, SBX__V1__REQUEST__BODY_EXEC_SIGNAL, &s, 0, NULL, e);
}

int sbx_exec_resize(struct sbx_client *c, uint64_t exec_id, unsigned rows,
                    unsigned cols, struct sbx_error *e) {
  Sbx__V1__ExecResize s = SBX__V1__EXEC_RESIZE__INIT;
  s.exec_id = exec_id;
  s.rows = rows;
  s.cols = cols;
  return call_body(c, SBX__V1__REQUEST__BODY_EXEC_RESIZE, &s, 0, NULL, e);
}

int sbx_exec_list(struct sbx_client *c, Sbx__V1__Response **out,
                  struct sbx_error *e) {
  Sbx__V1__ExecList l = SBX__V1__EXEC_LIST__INIT;
  return call_body(c, SBX__V1__REQUEST__BODY_EXEC_LIST, &l, 0, out, e);
}

int sbx_stats(struct sbx_client *c, bool disk, Sbx__V1__Response **out,
              struct sbx_error *e) {
  Sbx__V1__Stats st = SBX__V1__STATS__INIT;
  st.disk = disk;
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_STATS, &st, 0, &r, e);
  if (ret < 0)
    return ret;
  const char *src = r->stats->source;
  if (!src || (strcmp(src, "cgroup") && strcmp(src, "proc"))) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent stats of an unknown source");
  }
  *out = r;
  return 0;
}

int sbx_exec_release(struct sbx_client *c, uint64_t exec_id,
                     struct sbx_error *e) {
  Sbx__V1__ExecRelease r = SBX__V1__EXEC_RELEASE__INIT;
  r.exec_id = exec_id;
  return call_body(c, SBX__V1__REQUEST__BODY_EXEC_RELEASE, &r, 0, NULL, e);
}

int sbx_file_stat(struct sbx_client *c, const char *path,
                  Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__FileStat s = SBX__V1__FILE_STAT__INIT;
  s.path = (char *)path;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_STAT, &s, 0, out, e);
}

int sbx_file_read(struct sbx_client *c, Sbx__V1__FileRead *a,
                  Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_FILE_READ, a, 0, &r, e);
  if (ret < 0)
    return ret;
  if (a->length && r->file_read->data.len > a->length) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent more bytes than asked for");
  }
  *out = r;
  return 0;
}

int sbx_file_write(struct sbx_client *c, Sbx__V1__FileWrite *a,
                   Sbx__V1__Response **out, struct sbx_error *e) {
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_WRITE, a, 0, out, e);
}

int sbx_file_list(struct sbx_client *c, Sbx__V1__FileList *a,
                  Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_FILE_LIST, a, 0, &r, e);
  if (ret < 0)
    return ret;
  Sbx__V1__FileListReply *l = r->file_list;
  for (size_t i = 0; i < l->n_entries; i++) {
    /* Names need not be UTF-8 on disk and are passed on as they are, but
     * a listed entry is never absolute and never climbs out. */
    const char *p = l->entries[i] ? l->entries[i]->path : NULL;
    if (!p || p[0] == '/' || strcmp(p, "..") == 0 ||
        strncmp(p, "../", 3) == 0 || strstr(p, "/../") ||
        (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0)) {
      sbx_client_reply_free(r);
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "sandboxd listed an entry outside the directory");
    }
  }
  *out = r;
  return 0;
}

int sbx_file_mkdir(struct sbx_client *c, const char *path, bool parents,
                   unsigned mode, struct sbx_error *e) {
  Sbx__V1__FileMkdir m = SBX__V1__FILE_MKDIR__INIT;
  m.path = (char *)path;
  m.parents = parents;
  m.mode = mode;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_MKDIR, &m, 0, NULL, e);
}

int sbx_file_remove(struct sbx_client *c, const char *path, bool recursive,
                    bool missing_ok, struct sbx_error *e) {
  Sbx__V1__FileRemove m = SBX__V1__FILE_REMOVE__INIT;
  m.path = (char *)path;
  m.recursive = recursive;
  m.missing_ok = missing_ok;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_REMOVE, &m, 0, NULL, e);
}

int sbx_file_rename(struct sbx_client *c, const char *from, const char *to,
                    bool overwrite, struct sbx_error *e) {
  Sbx__V1__FileRename m = SBX__V1__FILE_RENAME__INIT;
  m.from = (char *)from;
  m.to = (char *)to;
  m.overwrite = overwrite;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_RENAME, &m, 0, NULL, e);
}

int sbx_file_chmod(struct sbx_client *c, const char *path, unsigned mode,
                   bool recursive, struct sbx_error *e) {
  Sbx__V1__FileChmod m = SBX__V1__FILE_CHMOD__INIT;
  m.path = (char *)path;
  m.mode = mode;
  m.recursive = recursive;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_CHMOD, &m, 0, NULL, e);
}

int sbx_file_chown(struct sbx_client *c, const char *path, const char *user,
                   const char *group, bool recursive, struct sbx_error *e) {
  Sbx__V1__FileChown m = SBX__V1__FILE_CHOWN__INIT;
  m.path = (char *)path;
  m.user = (char *)(user ? user : "");
  m.group = (char *)(group ? group : "");
  m.recursive = recursive;
  return call_body(c, SBX__V1__REQUEST__BODY_FILE_CHOWN, &m, 0, NULL, e);
}

int sbx_file_exists(struct sbx_client *c, const char *path, bool *exists,
                    Sbx__V1__FileType *type, struct sbx_error *e) {
  Sbx__V1__FileExists m = SBX__V1__FILE_EXISTS__INIT;
  m.path = (char *)path;
  Sbx__V1__Response *r = NULL;
  int ret = call_body(c, SBX__V1__REQUEST__BODY_FILE_EXISTS, &m, 0, &r, e);
  if (ret < 0)
    return ret;
  Sbx__V1__Existence x = r->file_exists->existence;
  if (x != SBX__V1__EXISTENCE__EXISTS && x != SBX__V1__EXISTENCE__ABSENT) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd could not tell whether \"%s\" exists", path);
  }
  *exists = x == SBX__V1__EXISTENCE__EXISTS;
  if (type)
    *type = r->file_exists->type;
  sbx_client_reply_free(r);
  return 0;
}

int sbx_patch_apply(struct sbx_client *c, const char *patch, const char *dir,
                    bool dry_run, Sbx__V1__Response **out,
                    struct sbx_error *e) {
  Sbx__V1__PatchApply p = SBX__V1__PATCH_APPLY__INIT;
  p.patch = (char *)patch;
  p.dir = (char *)(dir ? dir : "");
  p.dry_run = dry_run;
  return call_body(c, SBX__V1__REQUEST__BODY_PATCH_APPLY, &p, 0, out, e);
}

int sbx_patch_apply_sdk(struct sbx_client *c, const char *patch,
                        const char *dir, Sbx__V1__Response **out,
                        struct sbx_error *e) {
  Sbx__V1__PatchApply p = SBX__V1__PATCH_APPLY__INIT;
  p.patch = (char *)patch;
  p.dir = (char *)(dir ? dir : "");
  p.sdk_line_ends = true;
  return call_body(c, SBX__V1__REQUEST__BODY_PATCH_APPLY, &p, 0, out, e);
}

int sbx_archive_export_start(struct sbx_client *c,
                             Sbx__V1__ArchiveExportStart *a,
                             Sbx__V1__Response **out, struct sbx_error *e) {
  /* Spooling a large tree takes time: allow several default timeouts. */
  return call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_EXPORT_START, a,
                   c->timeout_ms * 10, out, e);
}

/* The longest sandboxd makes a streamed export's read wait, with room. */
#define EXPORT_READ_WAIT_MS 5000u

int sbx_archive_export_read(struct sbx_client *c, uint64_t handle,
                            uint64_t offset, uint32_t max_bytes,
                            Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__ArchiveExportRead a = SBX__V1__ARCHIVE_EXPORT_READ__INIT;
  a.handle = handle;
  a.offset = offset;
  a.max_bytes = max_bytes;
  Sbx__V1__Response *r = NULL;
  /* A read of a streamed export may wait a few seconds for production. */
  int ret = call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_EXPORT_READ, &a,
                      c->timeout_ms + EXPORT_READ_WAIT_MS, &r, e);
  if (ret < 0)
    return ret;
  Sbx__V1__ArchiveExportReadReply *x = r->archive_export_read;
  bool bad = (max_bytes && x->data.len > max_bytes) || x->offset != offset ||
             x->n_skipped > 100 || x->n_skipped > x->skipped_count;
  for (size_t i = 0; !bad && i < x->n_skipped; i++) {
    size_t n = strlen(x->skipped[i]);
    bad = n >= SBX_PATH_MAX || !sbx_utf8_valid(x->skipped[i], n);
    for (size_t k = 0; !bad && k < n; k++)
      bad = (unsigned char)x->skipped[i][k] < 0x20 || x->skipped[i][k] == 0x7f;
  }
  if (bad) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent an inconsistent archive chunk");
  }
  *out = r;
  return 0;
}

int sbx_archive_import_start(struct sbx_client *c,
                             Sbx__V1__ArchiveImportStart *a,
                             Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__Response *r = NULL;
  int ret =
      call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_START, a, 0, &r, e);
  if (ret < 0)
    return ret;
  const char *sp = r->archive_import_start->staging_path;
  size_t n = sp ? strlen(sp) : 0;
  if (n >= SBX_PATH_MAX || !sbx_utf8_valid(sp ? sp : "", n) ||
      (n > 0 && !a->stage)) {
    sbx_client_reply_free(r);
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "sandboxd sent an invalid staging path");
  }
  *out = r;
  return 0;
}

int sbx_archive_import_write(struct sbx_client *c, uint64_t handle,
                             uint64_t offset, const void *data, size_t len,
                             uint64_t *received, struct sbx_error *e) {
  Sbx__V1__ArchiveImportWrite a = SBX__V1__ARCHIVE_IMPORT_WRITE__INIT;
  a.handle = handle;
  a.offset = offset;
  a.data.data = (uint8_t *)data;
  a.data.len = len;
  Sbx__V1__Response *r = NULL;
  int ret =
      call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_WRITE, &a, 0, &r, e);
  if (ret < 0)
    return ret;
  if (received)
    *received = r->archive_import_write->received;
  sbx_client_reply_free(r);
  return 0;
}

int sbx_archive_import_finish(struct sbx_client *c, uint64_t handle,
                              Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__ArchiveImportFinish a = SBX__V1__ARCHIVE_IMPORT_FINISH__INIT;
  a.handle = handle;
  return call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_FINISH, &a,
                   c->timeout_ms * 10, out, e);
}

int sbx_archive_close(struct sbx_client *c, uint64_t handle,
                      struct sbx_error *e) {
  Sbx__V1__ArchiveClose a = SBX__V1__ARCHIVE_CLOSE__INIT;
  a.handle = handle;
  return call_body(c, SBX__V1__REQUEST__BODY_ARCHIVE_CLOSE, &a, 0, NULL, e);
}

int sbx_users_ensure(struct sbx_client *c, Sbx__V1__UsersEnsure *a,
                     Sbx__V1__Response **out, struct sbx_error *e) {
  return call_body(c, SBX__V1__REQUEST__BODY_USERS_ENSURE, a, 0, out, e);
}
