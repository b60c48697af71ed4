/* sandboxd's listener: the nng listener of its one URL with, for
 * tls+tcp://, its TLS files (--tls-cert, --tls-key, --tls-ca) and the
 * handshake limits (NNG_OPT_NEGO_*). On a reload the TLS files are read
 * again into a new configuration and, once they are good, the listener is
 * replaced by one that uses them: nng's TLS configuration cannot change
 * once in use. Replacing it closes the connections it accepted (nng closes
 * a listener's pipes with it), so a client whose certificate the new CA
 * file revokes is cut off; the others reconnect as after any drop. */
#ifndef SBX_SANDBOXD_LISTEN_H
#define SBX_SANDBOXD_LISTEN_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/errors.h"

struct listen_cfg {
  const char *url;             /* borrowed for the server's life */
  const char *cert, *key, *ca; /* tls+tcp:// only; borrowed too */
  size_t nego_max;             /* connections in their handshake */
  nng_duration nego_ms;        /* each handshake step's deadline */
};

struct listen {
  nng_listener l;
  nng_tls_config *tls; /* tls+tcp:// only */
  bool started;
};

/* An nng error RV as E: "WHAT \"URL\": nng's words", with an errno. */
int listen_nng_err(struct sbx_error *e, int rv, const char *what,
                   const char *url);
/* Makes *OUT on SOCK for C's URL with its TLS files and limits, not
 * started yet. */
int listen_make(nng_socket sock, const struct listen_cfg *c, struct listen *out,
                struct sbx_error *e);
/* Starts it; an ipc:// socket file is made owner-only. */
int listen_start(struct listen *l, const struct listen_cfg *c,
                 struct sbx_error *e);
/* Reads C's TLS files again and replaces *L (on SOCK) with a listener that
 * uses them. Files that cannot be used leave *L as it was; -EOPNOTSUPP
 * when the URL is not tls+tcp://. */
int listen_reload(nng_socket sock, const struct listen_cfg *c, struct listen *l,
                  struct sbx_error *e);
/* Closes it (and the connections it accepted); accepts one never made. */
void listen_close(struct listen *l);

#endif
