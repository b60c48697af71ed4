/* The remote backend: a sandbox is a sandboxd that runs already, somewhere
 * else, on tls+tcp://. create() walks the endpoints in order and claims the
 * first free one (lease.c), empties its workspace and connects; close()
 * kills its processes, empties the workspace and gives the lease back, so
 * the endpoint serves the next claimer. sandboxd itself keeps running: its
 * host (systemd, a VM) owns it.
 *
 * Every link is mutual TLS from sbx's CA (controller/ca/ca.h): sbx checks
 * that the server certificate names the endpoint's sandbox (the TLS server
 * name is the endpoint's name, not its address) and presents its client
 * certificate; sandboxd refuses a client certificate of another CA, expired
 * or on its CA file's revocation list. The token still proves sandboxd
 * (shared/auth.h) and is never sent to a peer that has not. */
#include "backends/remote/remote_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/ca/ca.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/rand.h"

static void remote_free(struct remote *r) {
  if (!r)
    return;
  free(r->ep.url);
  free(r->ep.name);
  free(r->ep.token_file);
  free(r->ca_pem);
  free(r->cert);
  free(r->key);
  free(r->lease);
  free(r);
}

static int read_token(const struct remote *r, const char *ca_dir, char *out,
                      size_t n, struct sbx_error *e) {
  if (!r->ep.token_file)
    return ca_server_token(ca_dir, r->ep.name, false, out, n, e);
  char *t = NULL;
  size_t len = 0;
  int k = sbx_read_file(r->ep.token_file, n - 1, &t, &len);
  if (k < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, -k,
                         "cannot read the token file \"%s\": %s",
                         r->ep.token_file, strerror(-k));
  memcpy(out, t, len);
  out[len] = '\0';
  explicit_bzero(t, len);
  free(t);
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r'))
    out[--len] = '\0';
  return 0;
}

int remote_connect(struct remote *r, const char *token, unsigned timeout_ms,
                   struct sbx_client **out, char **root, struct sbx_error *e) {
  struct sbx_client_config cc = {
      .url = r->ep.url,
      .token = (const uint8_t *)token,
      .token_len = strlen(token),
      .tls_ca = r->ca_pem,
      .tls_cert = r->cert,
      .tls_key = r->key,
      .tls_server_name = r->ep.name,
      .timeout_ms = timeout_ms,
      .retries = timeout_ms ? 1 : 0,
      .client_name = "sbx",
      .heartbeat_ms = r->heartbeat_ms,
  };
  struct sbx_client *c = NULL;
  Sbx__V1__Response *hello = NULL;
  int k = sbx_client_new(&cc, &c, e);
  if (k == 0)
    k = sbx_hello(c, &hello, e);
  if (k < 0) {
    sbx_client_free(c);
    return k;
  }
  Sbx__V1__HelloReply *h = hello->hello;
  if (!r->lease) {
    /* The lease file sits beside the workspace: ROOT/../lease/claim. */
    const char *slash = strrchr(h->root, '/');
    size_t dl = slash ? (size_t)(slash - h->root) : 0;
    if (asprintf(&r->lease, "%.*s/lease/claim", (int)dl, h->root) < 0)
      k = -ENOMEM;
  }
  bool granted = false;
  size_t ll = r->lease ? strlen(r->lease) - strlen("/claim") : 0;
  for (size_t i = 0; k == 0 && i < h->n_grants; i++)
    granted |= !h->grants[i]->read_only && strlen(h->grants[i]->path) == ll &&
               strncmp(h->grants[i]->path, r->lease, ll) == 0;
  if (k == 0 && !granted)
    k = sbx_error_set(e, SBX_UNAVAILABLE, EPERM,
                      "sandboxd at %s does not grant its lease directory "
                      "\"%.*s\" (start it with --grant %.*s)",
                      r->ep.url, (int)ll, r->lease, (int)ll, r->lease);
  if (k == 0 && root && !(*root = strdup(h->root)))
    k = -ENOMEM;
  sbx_client_reply_free(hello);
  if (k < 0) {
    sbx_client_free(c);
    return k;
  }
  *out = c;
  return 0;
}

/* A new sandbox with its remote part for endpoint EP, or NULL. */
static struct sandbox *remote_new(const struct remote_endpoint *ep,
                                  unsigned heartbeat_ms) {
  struct sandbox *s = calloc(1, sizeof(*s));
  struct remote *r = calloc(1, sizeof(*r));
  if (!s || !r)
    goto fail;
  s->backend = &backend_remote;
  s->priv = r;
  r->heartbeat_ms = heartbeat_ms;
  r->ep.url = strdup(ep->url);
  r->ep.name = strdup(ep->name);
  r->ep.token_file = ep->token_file ? strdup(ep->token_file) : NULL;
  if (!r->ep.url || !r->ep.name || (ep->token_file && !r->ep.token_file))
    goto fail;
  return s;
fail:
  remote_free(r);
  if (s)
    s->priv = NULL;
  free(s);
  return NULL;
}

static void remote_detach(struct sandbox *s) {
  if (!s)
    return;
  remote_free(s->priv);
  s->priv = NULL;
  sandbox_free(s);
}

/* Claims EP for a new sandbox: connected, leased and emptied. */
static int claim(const struct remote_endpoint *ep, const char *ca_dir,
                 const char *client, unsigned heartbeat_ms, unsigned probe_ms,
                 struct sandbox **out, struct sbx_error *e) {
  struct sandbox *s = remote_new(ep, heartbeat_ms);
  if (!s)
    return -ENOMEM;
  struct remote *r = s->priv;
  char token[SBX_TOKEN_HEX + 8];
  struct sbx_client *probe = NULL;
  int k =
      ca_client_files(ca_dir, client, false, &r->ca_pem, &r->cert, &r->key, e);
  if (k == 0)
    k = read_token(r, ca_dir, token, sizeof(token), e);
  if (k == 0)
    k = sbx_random_uuid(s->session_id);
  /* Refused certificates, either way, said at once (see tls_probe.c). */
  if (k == 0)
    k = ca_tls_probe(r->ep.url, r->ep.name, r->ca_pem, r->cert, r->key,
                     probe_ms, e);
  if (k == 0)
    k = remote_connect(r, token, probe_ms, &probe, &s->root, e);
  if (k == 0)
    k = remote_lease_take(probe, r, s->session_id, e);
  probe = sbx_client_free(probe);
  /* Claimed: from here on the lease is ours to give back. */
  if (k == 0 && (k = remote_connect(r, token, 0, &s->client, NULL, e)) == 0 &&
      (k = remote_kill_all(s->client, e)) == 0)
    k = remote_wipe(s->client, s->root, e);
  explicit_bzero(token, sizeof(token));
  if (k < 0 && s->client) {
    struct sbx_error ignored = {0};
    (void)remote_lease_drop(s->client, r, &ignored);
  }
  if (k < 0) {
    remote_detach(s);
    return k;
  }
  *out = s;
  return 0;
}

/* Refuses what a sandboxd that runs already cannot be given. */
static int refuse_spec(const struct backend_options *o,
                       const struct sandbox_spec *spec, struct sbx_error *e) {
  const char *what = o && o->nports          ? "exposed ports"
                     : o && o->seccomp       ? "a seccomp mode"
                     : spec && spec->ngrants ? "extra path grants"
                     : spec && spec->nbinds  ? "local_bind mounts"
                     : spec && (spec->expires_at || spec->idle_timeout_s)
                         ? "an expiry or idle timeout"
                         : NULL;
  if (!what)
    return 0;
  return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                       "backend remote does not support %s: its sandboxd "
                       "runs already, with the options its host gave it",
                       what);
}

static int remote_create(const struct backend_options *o,
                         const struct sandbox_spec *spec, struct sandbox **out,
                         struct sbx_error *e) {
  const struct remote_options *ro = o ? o->own : NULL;
  if (!ro || ro->neps == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the remote backend needs endpoints or a pool file "
                         "(--endpoint, --pool, or run_config's \"endpoints\" "
                         "or \"pool\")");
  int k = refuse_spec(o, spec, e);
  if (k < 0)
    return k;
  char ca_dir[PATH_MAX];
  if ((k = ca_dir_resolve(ro->ca_dir, o->state_dir, ca_dir, sizeof(ca_dir),
                          e)) < 0)
    return k;
  unsigned probe = o->ready_timeout_ms ? o->ready_timeout_ms : REMOTE_PROBE_MS;
  char why[1024] = "";
  size_t wl = 0;
  for (size_t i = 0; i < ro->neps; i++) {
    struct sbx_error ee = {0};
    k = claim(&ro->eps[i], ca_dir, ro->client, o->heartbeat_ms, probe, out,
              &ee);
    if (k == 0) {
      log_debug("remote sandbox %s on %s", (*out)->session_id, ro->eps[i].url);
      return 0;
    }
    if (ee.code == SBX_INVALID_ARGUMENT)
      return sbx_error_set(e, ee.code, ee.err, "%s", ee.msg);
    log_debug("endpoint %s: %s", ro->eps[i].url, ee.msg);
    int n =
        snprintf(why + wl, sizeof(why) - wl, "%s%s", wl ? "; " : "", ee.msg);
    if (n > 0 && (size_t)n < sizeof(why) - wl)
      wl += (size_t)n;
  }
  return sbx_error_set(e, SBX_UNAVAILABLE, EBUSY,
                       "no free remote endpoint of %zu: %s", ro->neps, why);
}

static int remote_close(struct sandbox *s, struct sbx_error *e) {
  if (!s)
    return 0;
  struct remote *r = s->priv;
  int k = 0;
  if (s->client && r) {
    struct sbx_error ce = {0};
    k = remote_lease_check(s->client, r, s->session_id, &ce);
    if (k == 0)
      k = remote_kill_all(s->client, &ce);
    if (k == 0)
      k = remote_wipe(s->client, s->root, &ce);
    if (k == 0)
      k = remote_lease_drop(s->client, r, &ce);
    if (k < 0 && ce.code == SBX_CONFLICT)
      k = sbx_error_set(e, ce.code, ce.err, "%s", ce.msg);
    else if (k < 0)
      k = sbx_error_set(e, ce.code, ce.err,
                        "cannot release %s (its workspace and lease stay "
                        "until it is removed on its host): %s",
                        r->ep.url, ce.msg);
  } else if (r) {
    k = sbx_error_set(e, SBX_UNAVAILABLE, ENOTCONN,
                      "cannot reach %s to release it: its workspace and "
                      "lease stay until it is claimed by this sandbox again "
                      "or removed on its host",
                      r->ep.url);
  }
  remote_detach(s);
  return k;
}

static int remote_save(const struct sandbox *s, json_t *obj) {
  const struct remote *r = s->priv;
  json_t *o =
      json_pack("{s:s, s:s, s:s, s:s?, s:s, s:s, s:s, s:s, s:s}", "session",
                s->session_id, "url", r->ep.url, "name", r->ep.name,
                "token_file", r->ep.token_file, "ca_pem", r->ca_pem, "cert",
                r->cert, "key", r->key, "lease", r->lease, "root", s->root);
  if (!o || backend_heartbeat_save(r->heartbeat_ms, o) < 0) {
    json_decref(o);
    return -ENOMEM;
  }
  int k = json_object_update(obj, o);
  json_decref(o);
  return k < 0 ? -ENOMEM : 0;
}

static int take(json_t *obj, const char *k, char **out, bool required,
                struct sbx_error *e) {
  json_t *v = json_object_get(obj, k);
  if ((!v || json_is_null(v)) && !required)
    return 0;
  if (!json_is_string(v))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the sandbox state lacks \"%s\"", k);
  *out = strdup(json_string_value(v));
  return *out ? 0 : -ENOMEM;
}

/* Connects S again and checks that its lease is still its own. */
static int reconnect(struct sandbox *s, struct sbx_error *e) {
  struct remote *r = s->priv;
  char ca_dir[PATH_MAX];
  (void)snprintf(ca_dir, sizeof(ca_dir), "%s", r->ca_pem);
  char *slash = strrchr(ca_dir, '/');
  if (slash)
    *slash = '\0';
  char token[SBX_TOKEN_HEX + 8];
  struct sbx_client *probe = NULL;
  int k = read_token(r, ca_dir, token, sizeof(token), e);
  if (k == 0)
    k = remote_connect(r, token, REMOTE_PROBE_MS, &probe, NULL, e);
  probe = sbx_client_free(probe);
  if (k == 0)
    k = remote_connect(r, token, 0, &s->client, NULL, e);
  explicit_bzero(token, sizeof(token));
  if (k == 0 && (k = remote_lease_check(s->client, r, s->session_id, e)) < 0)
    s->client = sbx_client_free(s->client);
  return k;
}

static int remote_attach(const struct backend_options *o, json_t *obj,
                         struct sandbox **out, struct sbx_error *e) {
  struct remote_endpoint ep = {0};
  int k;
  if ((k = take(obj, "url", &ep.url, true, e)) < 0 ||
      (k = take(obj, "name", &ep.name, true, e)) < 0 ||
      (k = take(obj, "token_file", &ep.token_file, false, e)) < 0) {
    free(ep.url);
    free(ep.name);
    return k;
  }
  struct sandbox *s = remote_new(&ep, backend_heartbeat(o, obj));
  free(ep.url);
  free(ep.name);
  free(ep.token_file);
  if (!s)
    return -ENOMEM;
  struct remote *r = s->priv;
  if ((k = take(obj, "ca_pem", &r->ca_pem, true, e)) < 0 ||
      (k = take(obj, "cert", &r->cert, true, e)) < 0 ||
      (k = take(obj, "key", &r->key, true, e)) < 0 ||
      (k = take(obj, "lease", &r->lease, true, e)) < 0 ||
      (k = take(obj, "root", &s->root, true, e)) < 0) {
    remote_detach(s);
    return k;
  }
  const char *sid = json_string_value(json_object_get(obj, "session"));
  (void)snprintf(s->session_id, sizeof(s->session_id), "%s", sid ? sid : "");
  /* Unreachable is a sandbox that does not run (start() tries again); a
   * lease that another holds now is an error. */
  struct sbx_error ce = {0};
  k = reconnect(s, &ce);
  if (k < 0 && ce.code == SBX_CONFLICT) {
    *e = ce;
    remote_detach(s);
    return k;
  }
  if (k < 0)
    log_debug("remote sandbox %s: %s", s->session_id, ce.msg);
  *out = s;
  return 0;
}

/* Kills its processes; the workspace and the lease stay. */
static int remote_stop(struct sandbox *s, struct sbx_error *e) {
  if (!s->client)
    return 0;
  int k = remote_kill_all(s->client, e);
  s->client = sbx_client_free(s->client);
  return k;
}

static int remote_start(struct sandbox *s, struct sbx_error *e) {
  if (s->client)
    return 0;
  return reconnect(s, e);
}

static bool remote_running(const struct sandbox *s) {
  const struct remote *r = s->priv;
  if (!s->client)
    return false;
  (void)r;
  struct sbx_error ignored = {0};
  return sbx_hello(s->client, NULL, &ignored) == 0;
}

static int remote_resolve_port(const struct sandbox *s, unsigned port,
                               char *host, size_t hostsz, unsigned *host_port,
                               struct sbx_error *e) {
  (void)s;
  (void)host;
  (void)hostsz;
  (void)host_port;
  return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                       "port %u: backend remote does not expose ports", port);
}

const struct backend backend_remote = {
    .name = "remote",
    .options = remote_option_table,
    .options_parse = remote_options_parse,
    .options_free = remote_options_free,
    .features = 0,
    .create = remote_create,
    .close = remote_close,
    .save = remote_save,
    .attach = remote_attach,
    .detach = remote_detach,
    .stop = remote_stop,
    .start = remote_start,
    .running = remote_running,
    .resolve_port = remote_resolve_port,
};
