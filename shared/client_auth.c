/* The client's side of Hello's proof (shared/auth.h, client.h): a challenge
 * on every new connection before the token goes out on it, the pipes nng
 * adds and removes followed by callback, and the peer's pid checked on
 * ipc:// where the caller knows it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/auth.h"
#include "shared/client_internal.h"
#include "shared/log.h"
#include "shared/rand.h"

/* The parent of process PID as /proc says (field 4 of its stat); 0 when
 * it cannot be read. */
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  (void)close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold anything */
  if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
    return 0;
  char *end = NULL;
  long pp = strtol(p + 4, &end, 10);
  return end != p + 4 && pp > 0 ? (pid_t)pp : 0;
}

/* Whether pipe P's peer is the process A expects (always, when A expects
 * none); *PEER gets its pid. A peer whose pid cannot be had is refused. */
static bool peer_ok(const struct client_auth *a, nng_pipe p, pid_t *peer) {
  *peer = 0;
  if (a->peer_pid <= 0)
    return true;
  uint64_t v = 0;
  if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &v) != 0 || v == 0 ||
      v > INT32_MAX)
    return false;
  *peer = (pid_t)v;
  return *peer == a->peer_pid ||
         (a->peer_child && parent_of(*peer) == a->peer_pid);
}

/* Cancels the sends waiting for a connection: the tokened ones, or all
 * with ALL. Under a->mu. */
static void cancel_sends(struct client_auth *a, bool all) {
  for (struct client_send *s = a->sends; s; s = s->next)
    if (all || s->tokened)
      nng_aio_cancel(s->aio);
}

/* Counts pipe ID up in C's peer (shared/peer.h) as admitted; under mu. */
static void admit(struct sbx_client *c, uint32_t id) {
  struct client_auth *a = &c->auth;
  if (a->nup == sizeof(a->up) / sizeof(a->up[0]))
    return; /* neither up nor down: the count stays balanced */
  a->up[a->nup++] = id;
  sbx_peer_up(&c->peer);
}

/* Counts pipe ID down again when it was admitted; under mu. */
static void gone(struct sbx_client *c, uint32_t id) {
  struct client_auth *a = &c->auth;
  for (size_t i = 0; i < a->nup; i++)
    if (a->up[i] == id) {
      a->up[i] = a->up[--a->nup];
      sbx_peer_down(&c->peer);
      return;
    }
}

/* nng's pipe callback. A new pipe is admitted only when its peer is the
 * expected process and no tokened request waits for a connection (it
 * would go out on this one before its challenge): else it is closed
 * before anything is sent on it, and the waiting sends are cancelled, to
 * be tried again after a challenge. A pipe that goes takes its proof. The
 * admitted pipes are also what the client's peer counts (shared/peer.h). */
static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  struct sbx_client *c = arg;
  struct client_auth *a = &c->auth;
  uint32_t id = (uint32_t)nng_pipe_id(p);
  if (ev == NNG_PIPE_EV_ADD_PRE) {
    pid_t peer = 0;
    bool pid_ok = peer_ok(a, p, &peer);
    pthread_mutex_lock(&a->mu);
    if (!pid_ok || a->tokened > 0) {
      (void)nng_pipe_close(p);
      if (!pid_ok)
        a->refused = peer ? peer : -1;
      cancel_sends(a, !pid_ok);
      a->current = a->verified = 0;
    } else {
      a->current = id;
      a->refused = 0;
      admit(c, id);
    }
    pthread_mutex_unlock(&a->mu);
    if (!pid_ok)
      log_debug("refused a connection to \"%s\" served by pid %d, not %d",
                c->url, (int)peer, (int)a->peer_pid);
    return;
  }
  pthread_mutex_lock(&a->mu);
  if (a->current == id)
    a->current = 0;
  if (a->verified == id)
    a->verified = 0;
  gone(c, id);
  pthread_mutex_unlock(&a->mu);
}

/* The serving pid is checked only where the kernel tells it: ipc://. */
int client_auth_init(struct sbx_client *c, const struct sbx_client_config *cfg,
                     struct sbx_error *e) {
  struct client_auth *a = &c->auth;
  bool ipc = strncmp(cfg->url, "ipc://", 6) == 0;
  a->peer_pid = ipc && cfg->peer_pid > 0 ? cfg->peer_pid : 0;
  a->peer_child = cfg->peer_child;
  if (pthread_mutex_init(&a->mu, NULL) != 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "cannot set up a mutex");
  if (pthread_mutex_init(&a->handshake, NULL) != 0) {
    pthread_mutex_destroy(&a->mu);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "cannot set up a mutex");
  }
  if (nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, pipe_event, c) != 0 ||
      nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_event, c) != 0) {
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->handshake);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot watch the connections to \"%s\"", cfg->url);
  }
  a->live = true;
  return 0;
}

/* After nng_close no pipe callback runs: the mutexes can go. */
void client_auth_fini(struct sbx_client *c) {
  if (!c->auth.live)
    return;
  pthread_mutex_destroy(&c->auth.mu);
  pthread_mutex_destroy(&c->auth.handshake);
  c->auth.live = false;
}

/* True when the newest connection is the one that proved itself. */
static bool verified(struct client_auth *a) {
  pthread_mutex_lock(&a->mu);
  bool v = a->verified && a->verified == a->current;
  pthread_mutex_unlock(&a->mu);
  return v;
}

/* The refusal of a peer that did not prove itself, with WHY. */
static int refuse(struct sbx_client *c, struct sbx_error *e, const char *why) {
  sbx_error_set(e, SBX_UNAUTHENTICATED, EKEYREJECTED,
                "sandboxd at \"%s\" did not prove it holds the sandbox's "
                "secret (%s); nothing carrying the token was sent to it",
                c->url, why);
  return NNG_EPEERAUTH;
}

/* Checks the challenge's reply R (to request ID, with NONCE): a proof made
 * with the client's token. NNG_EPEERAUTH with E filled when it is not. */
static int check_proof(struct sbx_client *c, const char *id,
                       const uint8_t *nonce, const Sbx__V1__Response *r,
                       struct sbx_error *e) {
  if (!r || r->version != SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1 ||
      !r->id || strcmp(r->id, id) != 0)
    return refuse(c, e, "its answer to the challenge is not a Hello reply");
  if (r->body_case != SBX__V1__RESPONSE__BODY_HELLO) {
    const char *m = r->error && r->error->message ? r->error->message : "";
    char why[200];
    (void)snprintf(why, sizeof(why),
                   "it answered \"%.80s\"; a sandboxd older than this sbx "
                   "cannot prove itself: update it",
                   sbx_utf8_valid(m, strlen(m)) ? m : "?");
    return refuse(c, e, why);
  }
  if (!r->hello->proof.len)
    return refuse(c, e, "its Hello reply carries no proof");
  if (!sbx_hello_proof_ok(c->token, c->token_len, nonce, r->hello->proof.data,
                          r->hello->proof.len))
    return refuse(c, e,
                  "its proof is wrong: another process serves the socket, or "
                  "the token is not this sandbox's");
  return 0;
}

/* The refusal of a connection whose peer was the wrong process. */
static int refuse_peer(struct sbx_client *c, pid_t peer, struct sbx_error *e) {
  char why[160];
  if (peer > 0)
    (void)snprintf(why, sizeof(why),
                   "its socket is served by pid %d, not by sandboxd's pid %d",
                   (int)peer, (int)c->auth.peer_pid);
  else
    (void)snprintf(why, sizeof(why),
                   "the pid serving its socket is unknown, not sandboxd's %d",
                   (int)c->auth.peer_pid);
  return refuse(c, e, why);
}

/* The pid of the peer last refused for its pid, 0 when none was. */
static pid_t refused_peer(struct client_auth *a) {
  pthread_mutex_lock(&a->mu);
  pid_t p = a->refused;
  pthread_mutex_unlock(&a->mu);
  return p;
}

/* One challenge: a Hello with a fresh nonce and without the token, and
 * its proof checked. The connection that carried the answer becomes the
 * verified one when it still is the newest. 0, NNG_EPEERAUTH with E
 * filled, or a transport error to retry. */
static int challenge(struct sbx_client *c, unsigned timeout_ms,
                     struct sbx_error *e) {
  uint8_t nonce[SBX_HELLO_NONCE_BYTES];
  if (sbx_random_bytes(nonce, sizeof(nonce)) < 0)
    return NNG_EINTERNAL;
  char id[64];
  uint64_t n = atomic_fetch_add(&c->seq, 1) + 1;
  (void)snprintf(id, sizeof(id), "%s-%llu", c->prefix, (unsigned long long)n);
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  h.client_version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  h.client_name = "sbx";
  h.client_nonce.data = nonce;
  h.client_nonce.len = sizeof(nonce);
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  req.id = id;
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  req.hello = &h;
  nng_msg *msg = NULL;
  if (nng_msg_alloc(&msg, sbx__v1__request__get_packed_size(&req)) != 0)
    return NNG_ENOMEM;
  (void)sbx__v1__request__pack(&req, nng_msg_body(msg));
  nng_msg *reply = NULL;
  int rv = client_attempt(c, msg, timeout_ms, false, &reply, e);
  pid_t peer = refused_peer(&c->auth);
  if (rv < 0)
    return rv; /* the peer is gone (E says how) */
  if (rv != 0)
    return peer ? refuse_peer(c, peer, e) : rv;
  nng_pipe pipe = nng_msg_get_pipe(reply);
  Sbx__V1__Response *r =
      sbx__v1__response__unpack(NULL, nng_msg_len(reply), nng_msg_body(reply));
  nng_msg_free(reply);
  rv = check_proof(c, id, nonce, r, e);
  if (r)
    sbx__v1__response__free_unpacked(r, NULL);
  if (rv != 0) {
    (void)nng_pipe_close(pipe);
    return rv;
  }
  struct client_auth *a = &c->auth;
  pthread_mutex_lock(&a->mu);
  if (a->current && a->current == (uint32_t)nng_pipe_id(pipe))
    a->verified = a->current;
  pthread_mutex_unlock(&a->mu);
  return 0;
}

/* Makes sure the newest connection proved itself, challenging it when it
 * has not; one thread challenges while the others wait for its result. */
static int client_auth_ready(struct sbx_client *c, unsigned timeout_ms,
                             struct sbx_error *e) {
  struct client_auth *a = &c->auth;
  if (verified(a))
    return 0;
  pthread_mutex_lock(&a->handshake);
  int rv = verified(a) ? 0 : challenge(c, timeout_ms, e);
  pthread_mutex_unlock(&a->handshake);
  return rv;
}

/* A tokened send is put in the list (and counted) only while the newest
 * connection is the verified one, in one step under the lock, so that a
 * connection nng adds meanwhile is refused rather than sent the token. A
 * challenge that a new connection keeps overtaking gives up after a few
 * rounds, as a dropped connection, and the caller retries. */
int client_auth_send_begin(struct sbx_client *c, nng_aio *aio,
                           unsigned timeout_ms, bool tokened,
                           struct client_send *s, struct sbx_error *e) {
  struct client_auth *a = &c->auth;
  *s = (struct client_send){.aio = aio, .tokened = tokened};
  for (unsigned round = 0;; round++) {
    if (tokened) {
      int rv = client_auth_ready(c, timeout_ms, e);
      if (rv != 0)
        return rv;
    }
    pthread_mutex_lock(&a->mu);
    bool go = !tokened || (a->verified && a->verified == a->current);
    if (go) {
      s->next = a->sends;
      a->sends = s;
      a->tokened += tokened;
    }
    pthread_mutex_unlock(&a->mu);
    if (go)
      return 0;
    if (round == 3)
      return NNG_ECONNRESET;
  }
}

/* Takes S out of the list; the send cannot be cancelled any more. */
void client_auth_send_end(struct sbx_client *c, struct client_send *s) {
  struct client_auth *a = &c->auth;
  pthread_mutex_lock(&a->mu);
  struct client_send **pp = &a->sends;
  while (*pp && *pp != s)
    pp = &(*pp)->next;
  if (*pp)
    *pp = s->next;
  a->tokened -= s->tokened;
  pthread_mutex_unlock(&a->mu);
}
