/* Private to shared/client*.c: the client's state, shared by client.c (the
 * calls, their retries and checks) and client_auth.c (the handshake: which
 * connection has proved itself, and the gate that keeps the token off any
 * other). */
#ifndef SBX_CLIENT_INTERNAL_H
#define SBX_CLIENT_INTERNAL_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/client.h"
#include "shared/peer.h"

/* A send waiting in nng's queue for a connection, which a new connection
 * cancels (client_auth.c). On the sender's stack, in a list under mu
 * between client_auth_send_begin and client_auth_send_end. */
struct client_send {
  nng_aio *aio;
  bool tokened; /* the request carries the token */
  struct client_send *next;
};

/* What the client knows of its connections (nng pipes). A client has one
 * dialer, so at most one pipe carries requests at a time; CURRENT is the
 * newest one nng admitted, VERIFIED the one whose peer last proved it holds
 * the secret. The token goes out only while they are the same pipe. */
struct client_auth {
  pthread_mutex_t mu; /* the fields below */
  uint32_t current;   /* nng_pipe_id, 0: none */
  uint32_t verified;  /* nng_pipe_id, 0: none */
  struct client_send *sends;
  unsigned tokened; /* sends in the list with the token */
  pid_t peer_pid;   /* ipc://: the pid that must serve; 0: any */
  bool peer_child;  /* or a child of it */
  pid_t refused;    /* the peer of the last pipe refused for its pid */
  /* The pipes admitted and not yet gone, each counted up in the client's
   * peer (shared/peer.h) once and down once. */
  uint32_t up[4];
  size_t nup;
  pthread_mutex_t handshake; /* one challenge at a time */
  bool live;                 /* the mutexes are set up */
};

struct sbx_client {
  nng_socket sock;
  nng_dialer dialer;
  nng_tls_config *tls;
  uint8_t *token;
  size_t token_len;
  unsigned timeout_ms;
  unsigned retries;
  size_t max_msg;
  char url[256];
  char prefix[17];
  atomic_uint_fast64_t seq;
  struct sbx_peer peer;
  struct client_auth auth;
};

/* One attempt: MSG (stolen, freed whatever happens) sent on a fresh context
 * and its reply into *REPLY (new). With TOKENED it goes out only over a
 * connection that
 * proved itself, after a challenge on a new one. Returns 0 or an nng error:
 * NNG_EPEERAUTH when the peer failed to prove itself (E says how); the
 * others are the transport's, retried by the caller. */
int client_attempt(struct sbx_client *c, nng_msg *msg, unsigned timeout_ms,
                   bool tokened, nng_msg **reply, struct sbx_error *e);

/* Sets up C's auth from CFG and watches C's pipes: before the dialer
 * starts. 0, or a negative errno with E filled. */
int client_auth_init(struct sbx_client *c, const struct sbx_client_config *cfg,
                     struct sbx_error *e);
/* Releases what client_auth_init set up, once the socket is closed. */
void client_auth_fini(struct sbx_client *c);
/* Before AIO's message is sent: with TOKENED, a challenge when the newest
 * connection has not proved itself, then S (the caller's) listed so that
 * a new connection cancels the send instead of carrying it; without, S
 * listed only to be cancelled when the serving process is refused. Returns
 * as client_attempt; on 0 the caller sends, waits for the send and calls
 * client_auth_send_end. */
int client_auth_send_begin(struct sbx_client *c, nng_aio *aio,
                           unsigned timeout_ms, bool tokened,
                           struct client_send *s, struct sbx_error *e);
/* Once the send of S is done (handed to a connection, or failed). */
void client_auth_send_end(struct sbx_client *c, struct client_send *s);

#endif
