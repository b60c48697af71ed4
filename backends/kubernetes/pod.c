/* A sandbox's objects in the cluster: its TLS material from sbx's CA, the
 * Pod with its Secret and NetworkPolicy, the token read back from the
 * Secret, and the Pod's deletion (which takes the rest along through their
 * ownerReferences). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/kubernetes/kube_internal.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "shared/log.h"

void kube_tls_clear(struct kube_tls *t) {
  explicit_bzero(t->token, sizeof(t->token));
  if (t->key)
    explicit_bzero(t->key, t->key_len);
  free(t->cert);
  free(t->key);
  free(t->ca);
  *t = (struct kube_tls){0};
}

static int read_pem(const char *dir, const char *name, char **out, size_t *len,
                    struct sbx_error *e) {
  char p[PATH_MAX];
  (void)snprintf(p, sizeof(p), "%s/%s", dir, name);
  int r = sbx_read_file(p, 1u << 20, out, len);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r, "cannot read \"%s\": %s", p,
                         strerror(-r));
  return 0;
}

int kube_tls_make(const struct kube *k, const char *name, struct kube_tls *t,
                  struct sbx_error *e) {
  *t = (struct kube_tls){0};
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX - 16];
  int n = snprintf(dir, sizeof(dir), "%s/sbx-kube-XXXXXX",
                   tmp && tmp[0] == '/' ? tmp : "/tmp");
  if (n < 0 || (size_t)n >= sizeof(dir))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "TMPDIR is too long");
  if (!mkdtemp(dir))
    return sbx_error_set(e, SBX_INTERNAL, errno,
                         "cannot make a temporary directory: %m");
  char crt[PATH_MAX], key[PATH_MAX], ca[PATH_MAX];
  (void)snprintf(crt, sizeof(crt), "%s/tls.crt", dir);
  (void)snprintf(key, sizeof(key), "%s/tls.key", dir);
  (void)snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
  int64_t now = (int64_t)time(NULL);
  int r = sbx_random_hex(t->token, SBX_TOKEN_BYTES);
  if (r < 0)
    r = sbx_error_set(e, SBX_INTERNAL, -r, "cannot get random bytes");
  if (r == 0)
    r = ca_issue(k->ca_dir, CA_SERVER, name, now - 300,
                 now + (int64_t)CA_DEFAULT_DAYS * 86400, crt, key, NULL, e);
  if (r == 0)
    r = ca_write_bundle(k->ca_dir, ca, e);
  if (r == 0)
    r = read_pem(dir, "tls.crt", &t->cert, &t->cert_len, e);
  if (r == 0)
    r = read_pem(dir, "tls.key", &t->key, &t->key_len, e);
  if (r == 0)
    r = read_pem(dir, "ca.pem", &t->ca, &t->ca_len, e);
  (void)sandbox_rm_rf(dir);
  if (r < 0)
    kube_tls_clear(t);
  return r;
}

int kube_delete_pod(struct kube_api *a, const char *ns, const char *name,
                    struct sbx_error *e) {
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  _cleanup_json_ json_t *body =
      json_pack("{s:s, s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
                "propagationPolicy", "Background");
  if (!body)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  int r = kube_call(a, "DELETE", path, body, NULL, NULL, e);
  if (r == -ENOENT) {
    sbx_error_clear(e);
    return 0;
  }
  return r;
}

/* POSTs OBJ to the collection PATH; *OUT (may be NULL) what was made. */
static int post(struct kube_api *a, const char *path, json_t *obj, json_t **out,
                struct sbx_error *e) {
  if (!obj)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  return kube_call(a, "POST", path, obj, NULL, out, e);
}

int kube_make_pod(struct kube *k, const struct kube_pod_params *p,
                  const struct kube_tls *t, json_t **pod, struct sbx_error *e) {
  *pod = NULL;
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", k->ns);
  _cleanup_json_ json_t *pj = kube_pod_json(p);
  _cleanup_json_ json_t *labels = kube_labels_json(p);
  _cleanup_json_ json_t *made = NULL;
  int r = post(k->api, path, pj, &made, e);
  if (r < 0)
    return r;
  const char *uid = json_string_value(
      json_object_get(json_object_get(made, "metadata"), "uid"));
  if (!uid || !*uid)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                      "kubernetes: the Pod %s was made without a uid", p->name);
  struct kube_secret_data d = {.token = t->token,
                               .cert = t->cert,
                               .cert_len = t->cert_len,
                               .key = t->key,
                               .key_len = t->key_len,
                               .ca = t->ca,
                               .ca_len = t->ca_len};
  if (r == 0) {
    (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", k->ns);
    _cleanup_json_ json_t *sj =
        labels ? kube_secret_json(p->name, uid, labels, &d) : NULL;
    r = post(k->api, path, sj, NULL, e);
    if (sj) {
      /* The key's base64 is as secret as the key. */
      json_t *data = json_object_get(sj, "data");
      const char *v = json_string_value(json_object_get(data, "tls.key"));
      if (v)
        explicit_bzero((char *)v, strlen(v));
    }
  }
  if (r == 0) {
    (void)snprintf(path, sizeof(path),
                   "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies",
                   k->ns);
    _cleanup_json_ json_t *nj =
        labels ? kube_netpol_json(p->name, uid, labels, p->o) : NULL;
    r = post(k->api, path, nj, NULL, e);
  }
  if (r < 0) {
    struct sbx_error ignored = {0};
    if (kube_delete_pod(k->api, k->ns, p->name, &ignored) < 0)
      log_warn("kubernetes: cannot delete Pod %s after a failed create: %s",
               p->name, ignored.msg);
    return r;
  }
  *pod = TAKE_PTR(made);
  return 0;
}

int kube_read_token(struct kube_api *a, const char *ns, const char *name,
                    char out[SBX_TOKEN_HEX + 1], struct sbx_error *e) {
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", ns,
                 name);
  _cleanup_json_ json_t *s = NULL;
  int r = kube_call(a, "GET", path, NULL, NULL, &s, e);
  if (r < 0)
    return r;
  const char *b =
      json_string_value(json_object_get(json_object_get(s, "data"), "token"));
  char buf[SBX_TOKEN_HEX + 8];
  long n = b && strlen(b) <= sbx_base64_encoded_size(SBX_TOKEN_HEX)
               ? sbx_base64_decode(b, strlen(b), buf)
               : -EINVAL;
  if (n != SBX_TOKEN_HEX)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                      "kubernetes: the Secret %s holds no token of %d hex "
                      "digits",
                      name, SBX_TOKEN_HEX);
  else {
    memcpy(out, buf, SBX_TOKEN_HEX);
    out[SBX_TOKEN_HEX] = '\0';
  }
  explicit_bzero(buf, sizeof(buf));
  if (b)
    explicit_bzero((char *)b, strlen(b));
  return r;
}
