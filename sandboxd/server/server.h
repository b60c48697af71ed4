/* The RPC server: an nng REP socket served by limits.max_inflight contexts,
 * each a small state machine driven by aio callbacks that never block.
 * Blocking handlers run on a worker pool; long-polls park. Every request is
 * authenticated (constant-time token compare) and mutating requests are
 * answered from a reply cache when retried with the same id. Connections
 * are capped, in total and while unauthenticated, and one that sends no
 * valid token in time is closed (conns.h). */
#ifndef SANDBOXD_SERVER_H
#define SANDBOXD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandboxd/rpc/sandboxd.h"
#include "shared/errors.h"

struct server_config {
  const char *url;      /* ipc://, tls+tcp://, or tcp:// (needs insecure) */
  const uint8_t *token; /* borrowed; copied */
  size_t token_len;
  const char *tls_cert; /* PEM files for tls+tcp:// */
  const char *tls_key;
  const char *tls_ca; /* client certificates must chain to it */
  bool insecure;      /* allow tcp:// */
  unsigned workers;   /* worker threads for blocking handlers; 0 means 4 */
  /* Connection limits (conns.h); 0 means the default below. Unauthenticated
   * connections are those that have not sent a request with the token yet;
   * as many again may be in their TLS or SP handshake (in nng, before they
   * are connections of the socket). handshake_timeout_ms bounds each step of
   * the handshake and the wait for the first valid token. */
  uint32_t max_connections;
  uint32_t max_unauthenticated; /* at most max_connections */
  unsigned handshake_timeout_ms;
};

#define SERVER_MAX_CONNECTIONS 256
#define SERVER_MAX_UNAUTHENTICATED 64
#define SERVER_HANDSHAKE_TIMEOUT_MS 10000

/* Checks the listen URL's scheme; plain tcp:// needs INSECURE. */
int server_check_url(const char *url, bool insecure, struct sbx_error *e);

/* Opens the socket and starts listening. */
int server_new(struct sandboxd *d, const struct server_config *cfg,
               struct server **out, struct sbx_error *e);
/* Frees; accepts NULL. Stops the listener, completes nothing further. */
void server_free(struct server *s);
/* True once a Shutdown request was answered. Thread-safe. */
bool server_shutdown_requested(struct server *s);
/* Marks the connection PIPE (nng_pipe_id of nng_msg_get_pipe on a received
 * request) authenticated: it leaves the unauthenticated cap and its
 * handshake deadline. Call it where a request's credentials were found
 * valid, and only there: never for a request let through without them.
 * Thread-safe; a pipe not connected is ignored. */
void server_pipe_authenticated(struct server *s, uint32_t pipe);
/* Blocks until the shutdown flag is set or TIMEOUT_MS passes. */
void server_wait_shutdown(struct server *s, unsigned timeout_ms);
/* Reads the TLS files again and listens with them (listen.h): the
 * connections open until now are closed, and clients reconnect under the
 * new files. Files that cannot be used leave everything as it was (E says
 * why); -EOPNOTSUPP without tls+tcp://. Call from one thread, not
 * concurrently with server_free. */
int server_reload_tls(struct server *s, struct sbx_error *e);
/* Blocks until no client is connected or TIMEOUT_MS passes; true when none
 * is. For the end: nng hands a reply to the kernel before sending is
 * complete, but a client that sees our hang-up together with the reply's
 * bytes drops the bytes, so the last replies (Shutdown's, the parked reads
 * answered at shutdown) need their clients to read them first. */
bool server_wait_clients_gone(struct server *s, unsigned timeout_ms);

#endif
