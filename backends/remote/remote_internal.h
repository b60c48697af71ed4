/* The remote backend's parts: its options (options.c), the lease on an
 * endpoint (lease.c) and the backend (remote.c). */
#ifndef SBX_REMOTE_INTERNAL_H
#define SBX_REMOTE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/remote/remote.h"
#include "controller/backend/backend.h"

#define REMOTE_MAX_ENDPOINTS 256
#define REMOTE_PROBE_MS 5000 /* an endpoint that does not answer is skipped */

/* One sandboxd the backend may claim: its URL (tls+tcp://), the name its
 * server certificate must carry (default: the URL's host), and the file of
 * its token (default: CA_DIR/servers/NAME.token). */
struct remote_endpoint {
  char *url;
  char *name;
  char *token_file; /* or NULL */
};

struct remote_options {
  struct remote_endpoint *eps;
  size_t neps;
  char *ca_dir; /* NULL: the default state directory's ca/ */
  char *client; /* the client certificate's name in ca_dir/clients */
};

extern const struct backend_option remote_option_table[];
int remote_options_parse(json_t *obj, const char *where, void **out,
                         struct sbx_error *e);
void remote_options_free(void *own);

/* The sandbox's part: which endpoint it holds, and how to reach it. */
struct remote {
  struct remote_endpoint ep;
  char *ca_pem, *cert, *key; /* TLS files */
  char *lease;               /* the lease file's path on the endpoint */
  unsigned heartbeat_ms;
};

/* A client of R's endpoint with TOKEN, answering within TIMEOUT_MS per
 * attempt (0: the default), after its Hello: *ROOT (new, may be NULL) the
 * workspace root, and the lease path checked to be granted. */
int remote_connect(struct remote *r, const char *token, unsigned timeout_ms,
                   struct sbx_client **out, char **root, struct sbx_error *e);

/* Takes the lease of the endpoint C serves for SESSION: -EBUSY when
 * another holds it. */
int remote_lease_take(struct sbx_client *c, const struct remote *r,
                      const char *session, struct sbx_error *e);
/* Whether SESSION holds the lease: 0, or -EBUSY / -ENOENT. */
int remote_lease_check(struct sbx_client *c, const struct remote *r,
                       const char *session, struct sbx_error *e);
/* Gives the lease back. */
int remote_lease_drop(struct sbx_client *c, const struct remote *r,
                      struct sbx_error *e);
/* Kills every process of the endpoint (their groups) and forgets them. */
int remote_kill_all(struct sbx_client *c, struct sbx_error *e);
/* Empties the workspace ROOT: the next claimer starts clean. */
int remote_wipe(struct sbx_client *c, const char *root, struct sbx_error *e);

#endif
