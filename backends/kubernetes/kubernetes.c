/* The kubernetes backend (kubernetes.h): create (a warm Pod claimed, else a
 * new one), close (the Pod deleted, its Secret and NetworkPolicy with it),
 * records without secrets (the token is read back from the Secret through
 * the API), attach, and what a Pod cannot do: a Pod with restartPolicy
 * Never is not stopped and started again. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/kubernetes/kube_internal.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define PROBE_MS 5000

static void kube_free(struct kube *k) {
  if (!k)
    return;
  kube_api_free(k->api);
  free(k->ns);
  free(k->kubeconfig);
  free(k->context);
  free(k->ca_dir);
  free(k->client);
  free(k->ca_pem);
  free(k->cert);
  free(k->key);
  free(k->ip);
  free(k);
}

static void kube_detach(struct sandbox *s) {
  if (!s)
    return;
  kube_free(s->priv);
  s->priv = NULL;
  sandbox_free(s);
}

static struct sandbox *kube_sandbox_new(void) {
  struct sandbox *s = calloc(1, sizeof(*s));
  struct kube *k = calloc(1, sizeof(*k));
  if (!s || !k) {
    free(s);
    free(k);
    return NULL;
  }
  s->backend = &backend_kubernetes;
  s->priv = k;
  return s;
}

/* Connects K to its API server: the kubeconfig PATH with CONTEXT (NULL:
 * found as kube_config_load says; IN_CLUSTER: the service account's), in
 * namespace NS (NULL: the context's). */
static int connect_api(struct kube *k, const char *path, const char *context,
                       bool in_cluster, const char *ns, struct sbx_error *e) {
  struct kube_config c = {0};
  int r = in_cluster ? kube_config_in_cluster(NULL, &c, e)
                     : kube_config_load(path, context, NULL, &c, e);
  if (r < 0)
    return r;
  r = kube_api_open(&c, &k->api, e);
  if (r == 0 && (!(k->ns = strdup(ns ? ns : c.ns)) ||
                 (c.path && !(k->kubeconfig = strdup(c.path))) ||
                 (c.context && !(k->context = strdup(c.context)))))
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  kube_config_clear(&c);
  return r;
}

/* The CA directory (CA_DIR, else STATE_DIR's) and the client certificate
 * K presents, issued when missing (the CA is made on first use). */
static int client_files(struct kube *k, const char *ca_dir,
                        const char *state_dir, const char *client,
                        struct sbx_error *e) {
  char dir[PATH_MAX];
  int r = ca_dir_resolve(ca_dir, state_dir, dir, sizeof(dir), e);
  if (r < 0)
    return r;
  if (!(k->ca_dir = strdup(dir)) || !(k->client = strdup(client)))
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  return ca_client_files(dir, client, true, &k->ca_pem, &k->cert, &k->key, e);
}

/* Connects S to sandboxd in Pod K->name at K->ip with TOKEN. */
static int dial(struct sandbox *s, struct kube *k, const char *token,
                struct sbx_error *e) {
  char url[128];
  bool v6 = strchr(k->ip, ':') != NULL;
  (void)snprintf(url, sizeof(url), "tls+tcp://%s%s%s:%d", v6 ? "[" : "", k->ip,
                 v6 ? "]" : "", KUBE_PORT);
  struct sbx_client_config cc = {
      .url = url,
      .token = (const uint8_t *)token,
      .token_len = strlen(token),
      .tls_ca = k->ca_pem,
      .tls_cert = k->cert,
      .tls_key = k->key,
      .tls_server_name = k->name,
      .client_name = "sbx",
      .heartbeat_ms = k->heartbeat_ms,
      .timeout_ms = PROBE_MS,
      .retries = 1,
  };
  /* A first client answers within PROBE_MS or fails; the one kept has the
   * default timeouts. */
  struct sbx_client *probe = NULL;
  Sbx__V1__Response *hello = NULL;
  /* A certificate refused either way is named at once, not a timeout. */
  int r = ca_tls_probe(url, k->name, k->ca_pem, k->cert, k->key, PROBE_MS, e);
  if (r == 0)
    r = sbx_client_new(&cc, &probe, e);
  if (r == 0)
    r = sbx_hello(probe, &hello, e);
  if (r == 0 && !s->root && !(s->root = strdup(hello->hello->root)))
    r = -ENOMEM;
  sbx_client_reply_free(hello);
  sbx_client_free(probe);
  if (r < 0) {
    char why[SBX_ERROR_MSG_MAX];
    (void)snprintf(why, sizeof(why), "%s", e ? e->msg : "");
    return sbx_error_set(e, e && e->code ? e->code : SBX_UNAVAILABLE, -r,
                         "kubernetes: cannot reach sandboxd of Pod %s at %s: "
                         "%.300s",
                         k->name, url, why);
  }
  cc.timeout_ms = 0;
  cc.retries = 0;
  return sbx_client_new(&cc, &s->client, e);
}

/* Refuses what of SPEC and BO a Pod cannot be given, and checks that the
 * operator's labels are Kubernetes labels. */
static int refuse_spec(const struct backend_options *bo,
                       const struct sandbox_spec *spec, const char *root,
                       struct sbx_error *e) {
  if (spec && (spec->ngrants || spec->nbinds))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "backend kubernetes does not support %s: the "
                         "sandbox runs in a Pod on another machine",
                         spec->ngrants ? "extra path grants"
                                       : "local_bind mounts");
  if (bo && bo->seccomp && strcmp(bo->seccomp, "default") != 0)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "backend kubernetes does not support the seccomp "
                         "mode \"%s\": its Pods run with the RuntimeDefault "
                         "profile",
                         bo->seccomp);
  if (root[0] != '/' || strcmp(root, "/") == 0 || strlen(root) > 512 ||
      strncmp(root, KUBE_TLS_DIR, strlen(KUBE_TLS_DIR)) == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "kubernetes: the workspace root \"%s\" must be an "
                         "absolute path other than / and outside %s",
                         root, KUBE_TLS_DIR);
  for (size_t i = 0; spec && i < spec->nlabels; i++)
    if (!kube_label_key_ok(spec->labels[i].key) ||
        !kube_label_value_ok(spec->labels[i].value) ||
        strncmp(spec->labels[i].key, "app.kubernetes.io/", 18) == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "label %s=%s cannot label a Pod: Kubernetes label "
                           "keys are [PREFIX/]NAME and values at most 63 of "
                           "[A-Za-z0-9._-] (app.kubernetes.io/* is sbx's)",
                           spec->labels[i].key, spec->labels[i].value);
  return 0;
}

/* A new Pod for S: made, waited for and dialled. */
static int cold_create(struct sandbox *s, struct kube_pod_params *p,
                       unsigned timeout_ms, struct sbx_error *e) {
  struct kube *k = s->priv;
  char hex[13];
  int r = sbx_random_hex(hex, 6);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r, "cannot get random bytes");
  (void)snprintf(k->name, sizeof(k->name), "sbx-%s", hex);
  p->name = k->name;
  struct kube_tls t = {0};
  _cleanup_json_ json_t *pod = NULL;
  r = kube_tls_make(k, k->name, &t, e);
  if (r == 0)
    r = kube_make_pod(k, p, &t, &pod, e);
  if (r == 0)
    r = kube_wait_ready(k->api, k->ns, k->name, pod, timeout_ms, &k->ip, e);
  if (r == 0)
    r = dial(s, k, t.token, e);
  kube_tls_clear(&t);
  return r;
}

/* A warm Pod of the pool HASH claimed for S, waited for and dialled; 1
 * when none is free. */
static int warm_create(struct sandbox *s, const char *hash, unsigned timeout_ms,
                       struct sbx_error *e) {
  struct kube *k = s->priv;
  _cleanup_json_ json_t *pod = NULL;
  int r = kube_pool_claim(k, hash, s->session_id, &pod, e);
  if (r == -ENOENT) {
    log_debug("kubernetes: no free warm Pod in pool %s", hash);
    sbx_error_clear(e);
    return 1;
  }
  if (r < 0)
    return r;
  char token[SBX_TOKEN_HEX + 1];
  r = kube_read_token(k->api, k->ns, k->name, token, e);
  if (r == 0)
    r = kube_wait_ready(k->api, k->ns, k->name, pod, timeout_ms, &k->ip, e);
  if (r == 0)
    r = dial(s, k, token, e);
  explicit_bzero(token, sizeof(token));
  return r;
}

static int kube_close(struct sandbox *s, struct sbx_error *e);

static void options_freep(void **own) {
  kube_options_free(*own);
}

/* The options of BO, or the defaults into *OWN (freed by the caller). */
static const struct kube_options *options_of(const struct backend_options *bo,
                                             void **own, struct sbx_error *e) {
  if (bo && bo->own)
    return bo->own;
  return kube_options_parse(NULL, NULL, own, e) == 0 ? *own : NULL;
}

static int kube_create(const struct backend_options *bo,
                       const struct sandbox_spec *spec, struct sandbox **out,
                       struct sbx_error *e) {
  *out = NULL;
  _cleanup_(options_freep) void *defaults = NULL;
  const struct kube_options *o = options_of(bo, &defaults, e);
  if (!o)
    return -EINVAL;
  const char *root = spec && spec->root ? spec->root : KUBE_ROOT;
  int r = refuse_spec(bo, spec, root, e);
  if (r < 0)
    return r;
  struct sandbox *s = kube_sandbox_new();
  if (!s)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  struct kube *k = s->priv;
  k->heartbeat_ms = bo ? bo->heartbeat_ms : 0;
  struct kube_pod_params p = {
      .o = o,
      .root = root,
      .labels = spec ? spec->labels : NULL,
      .nlabels = spec ? spec->nlabels : 0,
      .ports = bo ? bo->ports : NULL,
      .nports = bo ? bo->nports : 0,
      .expires_at = spec ? spec->expires_at : 0,
      .idle_timeout_s = spec ? spec->idle_timeout_s : 0,
  };
  unsigned tmo = bo && bo->ready_timeout_ms ? bo->ready_timeout_ms
                                            : o->ready_timeout_s * 1000u;
  /* A warm Pod was made without what is particular to one sandbox. */
  bool pooled = o->warm_pool > 0 && !p.expires_at && !p.idle_timeout_s &&
                !p.nports && !p.nlabels;
  char hash[17] = "";
  r = sbx_random_uuid(s->session_id);
  if (r == 0)
    r = connect_api(k, o->kubeconfig, o->context, false, o->ns, e);
  if (r == 0)
    r = client_files(k, o->ca_dir, bo ? bo->state_dir : NULL, o->client, e);
  if (r == 0 && pooled && kube_pool_hash(o, root, k->ca_dir, hash) < 0)
    r = -ENOMEM;
  /* 1: no warm Pod to claim, make one. */
  if (r == 0 && pooled) {
    r = warm_create(s, hash, tmo, e);
  } else if (r == 0) {
    r = 1;
  }
  if (r == 1)
    r = cold_create(s, &p, tmo, e);
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0) {
    (void)kube_close(s, NULL);
    return r;
  }
  if (pooled) {
    p.pool = hash;
    kube_pool_fill(k, &p, hash);
  }
  log_debug("kubernetes sandbox %s: Pod %s in %s at %s", s->session_id, k->name,
            k->ns, k->ip);
  *out = s;
  return 0;
}

static int kube_close(struct sandbox *s, struct sbx_error *e) {
  if (!s)
    return 0;
  struct kube *k = s->priv;
  s->client = sbx_client_free(s->client);
  int r = 0;
  if (k && k->api && k->name[0])
    r = kube_delete_pod(k->api, k->ns, k->name, e);
  kube_detach(s);
  return r;
}

static int kube_save(const struct sandbox *s, json_t *obj) {
  const struct kube *k = s->priv;
  /* Without a kubeconfig it was the in-cluster service account: a later
   * attach uses it again, whatever $KUBECONFIG says then. */
  json_t *o =
      json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:s, s:s, s:s}", "pod", k->name,
                "namespace", k->ns, "kubeconfig", k->kubeconfig, "context",
                k->context, "in_cluster", !k->kubeconfig, "ca_dir", k->ca_dir,
                "client", k->client, "root", s->root);
  if (!o || backend_heartbeat_save(k->heartbeat_ms, o) < 0) {
    json_decref(o);
    return -ENOMEM;
  }
  int r = json_object_update(obj, o) < 0 ? -ENOMEM : 0;
  json_decref(o);
  return r;
}

/* Whether POD is sbx's sandbox NAME, Running and Ready with an IP. */
static int check_pod(json_t *pod, const char *name, bool *running,
                     struct sbx_error *e) {
  json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
  const char *m =
      json_string_value(json_object_get(labels, KUBE_LABEL_MANAGED));
  const char *n =
      json_string_value(json_object_get(labels, KUBE_LABEL_SANDBOX));
  if (!m || strcmp(m, "sbx") || !n || strcmp(n, name))
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "kubernetes: Pod %s is not sbx's sandbox %s; "
                         "refusing to attach to it",
                         name, name);
  const char *phase = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  *running = phase && strcmp(phase, "Running") == 0;
  return 0;
}

static int kube_attach(const struct backend_options *bo, json_t *obj,
                       struct sandbox **out, struct sbx_error *e) {
  *out = NULL;
  const char *name = json_string_value(json_object_get(obj, "pod"));
  const char *ns = json_string_value(json_object_get(obj, "namespace"));
  const char *root = json_string_value(json_object_get(obj, "root"));
  const char *ca = json_string_value(json_object_get(obj, "ca_dir"));
  const char *client = json_string_value(json_object_get(obj, "client"));
  if (!name || strlen(name) != KUBE_NAME_LEN || !ns || !*ns ||
      strspn(name, "sbx-0123456789abcdef") != KUBE_NAME_LEN ||
      strspn(ns, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(ns) ||
      !root || !ca || !client)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the kubernetes sandbox record lacks its pod, "
                         "namespace, root, ca_dir or client");
  struct sandbox *s = kube_sandbox_new();
  if (!s)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  struct kube *k = s->priv;
  memcpy(k->name, name, KUBE_NAME_LEN + 1);
  k->heartbeat_ms = backend_heartbeat(bo, obj);
  _cleanup_json_ json_t *pod = NULL;
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  bool running = false;
  int r = (s->root = strdup(root)) ? 0 : -ENOMEM;
  if (r == 0)
    r = connect_api(k, json_string_value(json_object_get(obj, "kubeconfig")),
                    json_string_value(json_object_get(obj, "context")),
                    json_is_true(json_object_get(obj, "in_cluster")), ns, e);
  if (r == 0)
    r = client_files(k, ca, NULL, client, e);
  if (r == 0)
    r = kube_call(k->api, "GET", path, NULL, NULL, &pod, e);
  if (r == -ENOENT)
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                      "kubernetes: Pod %s in %s is gone", name, ns);
  if (r == 0)
    r = check_pod(pod, name, &running, e);
  const char *ip = json_string_value(
      json_object_get(json_object_get(pod, "status"), "podIP"));
  if (r == 0 && running && ip && (k->ip = strdup(ip))) {
    char token[SBX_TOKEN_HEX + 1];
    struct sbx_error de = {0};
    int d = kube_read_token(k->api, k->ns, name, token, &de);
    if (d == 0)
      d = dial(s, k, token, &de);
    explicit_bzero(token, sizeof(token));
    if (d < 0)
      log_debug("kubernetes sandbox %s: %s", name, de.msg);
  }
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0) {
    kube_detach(s);
    return r;
  }
  *out = s;
  return 0;
}

static int kube_stop(struct sandbox *s, struct sbx_error *e) {
  (void)s;
  return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                       "backend kubernetes cannot stop a sandbox and start it "
                       "again: its Pod has restartPolicy Never (remove it "
                       "with sbx sandbox rm)");
}

/* Its Pod's phase is Running and sbx is connected to its sandboxd. */
static bool kube_running(const struct sandbox *s) {
  struct kube *k = s->priv;
  if (!s->client || !k || !k->api)
    return false;
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", k->ns,
                 k->name);
  _cleanup_json_ json_t *pod = NULL;
  struct sbx_error ignored = {0};
  if (kube_call(k->api, "GET", path, NULL, NULL, &pod, &ignored) < 0)
    return false;
  const char *phase = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  return phase && strcmp(phase, "Running") == 0;
}

/* An exposed port is reached at the Pod's IP. */
static int kube_resolve_port(const struct sandbox *s, unsigned port, char *host,
                             size_t hostsz, unsigned *host_port,
                             struct sbx_error *e) {
  const struct kube *k = s->priv;
  if (!k->ip)
    return sbx_error_set(e, SBX_UNAVAILABLE, ENOTCONN,
                         "port %u: the Pod %s has no IP", port, k->name);
  (void)snprintf(host, hostsz, "%s", k->ip);
  *host_port = port;
  return 0;
}

const struct backend backend_kubernetes = {
    .name = "kubernetes",
    .options = kube_option_table,
    .options_parse = kube_options_parse,
    .options_free = kube_options_free,
    .features = 0,
    .create = kube_create,
    .close = kube_close,
    .save = kube_save,
    .attach = kube_attach,
    .detach = kube_detach,
    .stop = kube_stop,
    .start = NULL,
    .running = kube_running,
    .resolve_port = kube_resolve_port,
};
