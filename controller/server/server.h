/* sbx serve: the control-plane server. An HTTP API (docs/api.md, its
 * OpenAPI document at /v1/openapi.json) over a state store
 * (controller/state/store.h) in which runs wait to be executed; worker
 * threads lease them, run them with the runner and record their events,
 * so that any client, and any server on the same database, sees them.
 *
 * Tokens (bearer, with scopes) are made with `sbx token` and kept hashed
 * in the store: server_token_create is that command's half. */
#ifndef SBX_SERVER_H
#define SBX_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/errors.h"

struct store;

#define SERVER_DEFAULT_PORT 8080
#define SERVER_DEFAULT_WORKERS 16
#define SERVER_MAX_WORKERS 1024
#define SERVER_DEFAULT_LEASE_MS 30000

struct server_config {
  const char *host; /* IP address; NULL: 127.0.0.1 */
  uint16_t port;    /* 0: any free port (printed when listening) */
  const char *db;   /* the store's URL */
  const char *state_dir;
  unsigned workers;       /* runs executed at once; 0: the default */
  int64_t lease_ms;       /* a run's lease; renewed at a third of it */
  unsigned max_runs;      /* per token, unfinished at once; 0: no limit */
  unsigned max_sandboxes; /* per token, at once; 0: no limit */
  size_t max_body;        /* 0: httpd's default */
  const char *tls_cert, *tls_key, *tls_client_ca;
  bool insecure; /* plain HTTP off loopback */
  /* Where "listening on URL" is printed once the server serves (a test
   * waits for it); NULL for none. */
  int ready_fd;
};

/* Serves until SIGINT or SIGTERM, which the caller has blocked in every
 * thread (the server waits for them with sigwaitinfo); then stops taking
 * runs, waits for the requests in flight and gives up its leases, so that
 * another server or a restart continues its runs. 0, or a negative errno
 * with E when it could not start. */
int server_serve(const struct server_config *c, const sigset_t *stop,
                 struct sbx_error *e);

/* The scopes a token may have, comma-separated in server_token_create. */
#define SERVER_SCOPES "run,approve,read,admin"

/* Makes a token NAME with SCOPES (a comma list of SERVER_SCOPES' names)
 * in S: its secret text into TOKEN (at least 80 bytes), which is shown
 * once and never stored. -EINVAL for a bad name or scope, -EEXIST when
 * NAME is taken. */
int server_token_create(struct store *s, const char *name, const char *scopes,
                        char *token, size_t n, struct sbx_error *e);

#endif
