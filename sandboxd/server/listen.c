/* sandboxd's listener and its TLS files; see listen.h. */
#include "sandboxd/server/listen.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"

#define LISTEN_REBIND_TRIES 50 /* 10 ms apart */

int listen_nng_err(struct sbx_error *e, int rv, const char *what,
                   const char *url) {
  int err = rv == NNG_ENOMEM       ? ENOMEM
            : rv == NNG_EADDRINUSE ? EADDRINUSE
            : rv == NNG_EADDRINVAL ? EINVAL
            : rv == NNG_EPERM      ? EPERM
            : rv == NNG_ENOTSUP    ? EOPNOTSUPP
                                   : EIO;
  return sbx_error_set(e, SBX_OK, err, "%s \"%s\": %s", what, url,
                       nng_strerror(rv));
}

static bool is_tls(const struct listen_cfg *c) {
  return strncmp(c->url, "tls+tcp://", 10) == 0;
}

/* Loads a PEM certificate and key (separate files) into CFG. */
static int own_cert(nng_tls_config *cfg, const char *cert, const char *key,
                    struct sbx_error *e) {
  _cleanup_free_ char *c = NULL, *k = NULL;
  size_t cl, kl;
  int r = sbx_read_file(cert, 1u << 20, &c, &cl);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read certificate \"%s\": %s",
                         cert, strerror(-r));
  r = sbx_read_file(key, 1u << 20, &k, &kl);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read key \"%s\": %s", key,
                         strerror(-r));
  int rv = nng_tls_config_own_cert(cfg, c, k, NULL);
  explicit_bzero(k, kl);
  if (rv != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "cannot use certificate \"%s\" with key \"%s\": %s",
                         cert, key, nng_strerror(rv));
  return 0;
}

/* A server TLS configuration of C's files into *OUT (new). */
static int make_tls(const struct listen_cfg *c, nng_tls_config **out,
                    struct sbx_error *e) {
  if (!c->cert || !c->key || !c->ca)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "tls+tcp:// needs --tls-cert, --tls-key and --tls-ca");
  nng_tls_config *t = NULL;
  int rv = nng_tls_config_alloc(&t, NNG_TLS_MODE_SERVER);
  if (rv != 0)
    return listen_nng_err(e, rv, "cannot set up TLS for", c->url);
  int r = own_cert(t, c->cert, c->key, e);
  if (r == 0 && (rv = nng_tls_config_ca_file(t, c->ca)) != 0)
    r = listen_nng_err(e, rv, "cannot load the CA", c->ca);
  if (r == 0 &&
      (rv = nng_tls_config_auth_mode(t, NNG_TLS_AUTH_MODE_REQUIRED)) != 0)
    r = listen_nng_err(e, rv, "cannot configure TLS on", c->url);
  if (r < 0) {
    nng_tls_config_free(t);
    return r;
  }
  *out = t;
  return 0;
}

/* A listener on SOCK for C with TLS (taken; freed on failure too). */
static int make_with(nng_socket sock, const struct listen_cfg *c,
                     nng_tls_config *tls, struct listen *out,
                     struct sbx_error *e) {
  struct listen l = {.tls = tls};
  int rv = nng_listener_create(&l.l, sock, c->url);
  if (rv != 0) {
    if (tls)
      nng_tls_config_free(tls);
    return listen_nng_err(e, rv, "cannot listen on", c->url);
  }
  if (strncmp(c->url, "ipc://", 6) == 0)
    (void)nng_listener_set_int(l.l, NNG_OPT_IPC_PERMISSIONS, 0600);
  if (tls && (rv = nng_listener_set_ptr(l.l, NNG_OPT_TLS_CONFIG, tls)) != 0) {
    listen_close(&l);
    return listen_nng_err(e, rv, "cannot configure TLS on", c->url);
  }
  rv = nng_listener_set_size(l.l, NNG_OPT_NEGO_MAX, c->nego_max);
  if (rv == 0)
    rv = nng_listener_set_ms(l.l, NNG_OPT_NEGO_TIMEOUT, c->nego_ms);
  if (rv != 0) {
    listen_close(&l);
    return listen_nng_err(e, rv, "cannot limit the handshakes on", c->url);
  }
  *out = l;
  return 0;
}

int listen_make(nng_socket sock, const struct listen_cfg *c, struct listen *out,
                struct sbx_error *e) {
  nng_tls_config *tls = NULL;
  if (is_tls(c)) {
    int r = make_tls(c, &tls, e);
    if (r < 0)
      return r;
  }
  return make_with(sock, c, tls, out, e);
}

int listen_start(struct listen *l, const struct listen_cfg *c,
                 struct sbx_error *e) {
  int rv = nng_listener_start(l->l, 0);
  if (rv != 0)
    return listen_nng_err(e, rv, "cannot listen on", c->url);
  l->started = true;
  /* nng creates the socket file with the umask; make it owner-only. */
  if (strncmp(c->url, "ipc://", 6) == 0)
    (void)chmod(c->url + 6, 0600);
  return 0;
}

int listen_reload(nng_socket sock, const struct listen_cfg *c, struct listen *l,
                  struct sbx_error *e) {
  if (!is_tls(c))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "%s has no TLS files to read again", c->url);
  nng_tls_config *tls = NULL;
  int r = make_tls(c, &tls, e);
  if (r < 0)
    return r; /* the old listener serves on */
  listen_close(l);
  struct listen n = {0};
  r = make_with(sock, c, tls, &n, e);
  /* The old listener's port may take a moment to be free again. */
  for (int i = 0; r == 0 && i < LISTEN_REBIND_TRIES; i++) {
    r = listen_start(&n, c, e);
    if (r != -EADDRINUSE)
      break;
    struct timespec ts = {0, 10 * 1000 * 1000};
    (void)nanosleep(&ts, NULL);
  }
  if (r < 0) {
    listen_close(&n);
    return r;
  }
  *l = n;
  return 0;
}

void listen_close(struct listen *l) {
  if (nng_listener_id(l->l) > 0)
    (void)nng_listener_close(l->l);
  l->l = (nng_listener)NNG_LISTENER_INITIALIZER;
  l->started = false;
  if (l->tls)
    nng_tls_config_free(l->tls);
  l->tls = NULL;
}
