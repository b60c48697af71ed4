/* Where the API server is and how to prove who we are: a kubeconfig
 * (YAML or JSON; $KUBECONFIG's first file, else ~/.kube/config, or the
 * kubeconfig option) with its context, cluster and user, or the in-cluster
 * service account. Only what sbx can honour is accepted: a server over
 * https, a CA (or the system's), a bearer token or a client certificate;
 * exec and auth-provider plugins, insecure-skip-tls-verify, proxies and
 * tls-server-name are refused by name rather than ignored. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/fileio.h"

void kube_config_clear(struct kube_config *c) {
  if (!c)
    return;
  free(c->server);
  free(c->ca_pem);
  free(c->cert_pem);
  if (c->key_pem)
    explicit_bzero(c->key_pem, c->key_len);
  free(c->key_pem);
  if (c->token)
    explicit_bzero(c->token, strlen(c->token));
  free(c->token);
  free(c->ns);
  free(c->path);
  free(c->context);
  *c = (struct kube_config){0};
}

static int cfg_bad(struct sbx_error *e, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cfg_bad(struct sbx_error *e, const char *path, const char *fmt,
                   ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "kubeconfig \"%s\": %s",
                       path ? path : "(in-cluster)", msg);
}

/* The entry of LIST (an array of {name, KIND: {...}}) called NAME: its
 * KIND object (borrowed), or NULL. */
static json_t *named(json_t *root, const char *list, const char *kind,
                     const char *name) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(root, list), i, v) {
    const char *n = json_string_value(json_object_get(v, "name"));
    if (n && strcmp(n, name) == 0) {
      json_t *o = json_object_get(v, kind);
      return json_is_object(o) ? o : json_object();
    }
  }
  return NULL;
}

static const char *str(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* FILE (relative to DIR unless absolute) into *OUT (new), bounded. */
static int read_named(const char *dir, const char *file, const char *path,
                      const char *what, char **out, size_t *len,
                      struct sbx_error *e) {
  char full[PATH_MAX];
  int n = file[0] == '/' || !dir
              ? snprintf(full, sizeof(full), "%s", file)
              : snprintf(full, sizeof(full), "%s/%s", dir, file);
  if (n < 0 || (size_t)n >= sizeof(full))
    return cfg_bad(e, path, "%s \"%s\": path too long", what, file);
  int r = sbx_read_file(full, KUBE_CONFIG_MAX, out, len);
  if (r == -EFBIG)
    return cfg_bad(e, path, "%s \"%s\" is larger than %u bytes", what, full,
                   KUBE_CONFIG_MAX);
  if (r < 0)
    return cfg_bad(e, path, "cannot read %s \"%s\": %s", what, full,
                   strerror(-r));
  return 0;
}

/* KEY-data (base64) or KEY (a file) of OBJ into *OUT (new), or nothing. */
static int take_pem(json_t *obj, const char *key, const char *dir,
                    const char *path, char **out, size_t *len,
                    struct sbx_error *e) {
  char dkey[64];
  (void)snprintf(dkey, sizeof(dkey), "%s-data", key);
  const char *data = str(obj, dkey);
  const char *file = str(obj, key);
  if (data && *data) {
    size_t n = strlen(data);
    char *buf = malloc(n / 4 * 3 + 4);
    if (!buf)
      return -ENOMEM;
    long k = sbx_base64_decode(data, n, buf);
    if (k < 0) {
      free(buf);
      return cfg_bad(e, path, "%s is not base64", dkey);
    }
    buf[k] = '\0';
    *out = buf;
    *len = (size_t)k;
    return 0;
  }
  if (file && *file)
    return read_named(dir, file, path, key, out, len, e);
  return 0;
}

/* Refuses what of CLUSTER and USER sbx would otherwise silently ignore. */
static int refuse_unsupported(json_t *cluster, json_t *user, const char *path,
                              const char *cname, const char *uname,
                              struct sbx_error *e) {
  static const char *const ckeys[] = {"proxy-url", "tls-server-name"};
  static const char *const ukeys[] = {
      "exec", "auth-provider", "username", "password", "as", "impersonate"};
  const char *ins = str(cluster, "insecure-skip-tls-verify");
  if (ins && strcmp(ins, "true") == 0)
    return cfg_bad(e, path,
                   "cluster \"%s\" sets insecure-skip-tls-verify: sbx "
                   "does not send a token to a server it cannot verify; give "
                   "certificate-authority or certificate-authority-data",
                   cname);
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ckeys); i++)
    if (json_object_get(cluster, ckeys[i]))
      return cfg_bad(e, path, "cluster \"%s\": %s is not supported by sbx",
                     cname, ckeys[i]);
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ukeys); i++)
    if (json_object_get(user, ukeys[i]))
      return cfg_bad(e, path,
                     "user \"%s\": %s is not supported by sbx (use a token, "
                     "tokenFile or a client certificate)",
                     uname, ukeys[i]);
  return 0;
}

/* The user's credentials into C. */
static int take_user(json_t *user, const char *dir, const char *path,
                     const char *uname, struct kube_config *c,
                     struct sbx_error *e) {
  int r = take_pem(user, "client-certificate", dir, path, &c->cert_pem,
                   &c->cert_len, e);
  if (r == 0)
    r = take_pem(user, "client-key", dir, path, &c->key_pem, &c->key_len, e);
  if (r < 0)
    return r;
  if (!c->cert_pem != !c->key_pem)
    return cfg_bad(e, path, "user \"%s\" has a client %s without its %s", uname,
                   c->cert_pem ? "certificate" : "key",
                   c->cert_pem ? "key" : "certificate");
  const char *tok = str(user, "token");
  const char *tokf = str(user, "tokenFile");
  size_t n = 0;
  if (tok && *tok && !(c->token = strdup(tok)))
    return -ENOMEM;
  if (!c->token && tokf && *tokf &&
      (r = read_named(dir, tokf, path, "tokenFile", &c->token, &n, e)) < 0)
    return r;
  for (n = c->token ? strlen(c->token) : 0;
       n && (c->token[n - 1] == '\n' || c->token[n - 1] == '\r');)
    c->token[--n] = '\0';
  if (!c->token && !c->cert_pem)
    return cfg_bad(e, path,
                   "user \"%s\" has no token, tokenFile or client "
                   "certificate",
                   uname);
  return 0;
}

/* The server of CLUSTER into C: https only. */
static int take_cluster(json_t *cluster, const char *dir, const char *path,
                        const char *cname, struct kube_config *c,
                        struct sbx_error *e) {
  const char *server = str(cluster, "server");
  if (!server || !*server)
    return cfg_bad(e, path, "cluster \"%s\" has no server", cname);
  if (strncmp(server, "https://", 8) != 0 || strlen(server) > 2048)
    return cfg_bad(e, path,
                   "cluster \"%s\": server \"%.200s\" is not an https:// URL "
                   "(sbx does not send credentials in the clear)",
                   cname, server);
  size_t n = strlen(server);
  while (n > 8 && server[n - 1] == '/')
    n--;
  if (!(c->server = strndup(server, n)))
    return -ENOMEM;
  return take_pem(cluster, "certificate-authority", dir, path, &c->ca_pem,
                  &c->ca_len, e);
}

/* The context's cluster, user and namespace of ROOT into C. */
static int take_context(json_t *root, const char *dir, const char *path,
                        const char *want, struct kube_config *c,
                        struct sbx_error *e) {
  const char *cur = want ? want : str(root, "current-context");
  if (!cur || !*cur)
    return cfg_bad(e, path,
                   "no current-context; give the context option (--context)");
  json_t *ctx = named(root, "contexts", "context", cur);
  if (!ctx)
    return cfg_bad(e, path, "no context \"%s\"", cur);
  const char *cname = str(ctx, "cluster"), *uname = str(ctx, "user");
  if (!cname || !uname)
    return cfg_bad(e, path, "context \"%s\" lacks its cluster or user", cur);
  json_t *cluster = named(root, "clusters", "cluster", cname);
  json_t *user = named(root, "users", "user", uname);
  if (!cluster)
    return cfg_bad(e, path, "context \"%s\" names an unknown cluster \"%s\"",
                   cur, cname);
  if (!user)
    return cfg_bad(e, path, "context \"%s\" names an unknown user \"%s\"", cur,
                   uname);
  const char *ns = str(ctx, "namespace");
  int r = refuse_unsupported(cluster, user, path, cname, uname, e);
  if (r == 0)
    r = take_cluster(cluster, dir, path, cname, c, e);
  if (r == 0)
    r = take_user(user, dir, path, uname, c, e);
  if (r == 0 && (!(c->ns = strdup(ns && *ns ? ns : "default")) ||
                 !(c->context = strdup(cur))))
    r = -ENOMEM;
  return r;
}

int kube_config_parse(const char *text, size_t len, const char *path,
                      const char *context, struct kube_config *out,
                      struct sbx_error *e) {
  *out = (struct kube_config){0};
  _cleanup_json_ json_t *root = NULL;
  struct sbx_error ye = {0};
  if (kube_yaml_to_json(text, len, &root, &ye) < 0)
    return cfg_bad(e, path, "%s", ye.msg);
  if (!json_is_object(root))
    return cfg_bad(e, path, "not a mapping");
  _cleanup_free_ char *dir = path ? strdup(path) : NULL;
  char *slash = dir ? strrchr(dir, '/') : NULL;
  if (slash)
    *slash = '\0';
  int r = take_context(root, slash ? dir : ".", path, context, out, e);
  if (r == 0 && path && !(out->path = strdup(path)))
    r = -ENOMEM;
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0)
    kube_config_clear(out);
  return r;
}

int kube_config_in_cluster(const char *sa_root, struct kube_config *out,
                           struct sbx_error *e) {
  *out = (struct kube_config){0};
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  const char *port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                         "no kubeconfig ($KUBECONFIG, ~/.kube/config or the "
                         "kubeconfig option) and not in a cluster "
                         "(KUBERNETES_SERVICE_HOST is not set)");
  char dir[PATH_MAX];
  (void)snprintf(dir, sizeof(dir), "%s/%s",
                 sa_root && strcmp(sa_root, "/") ? sa_root : "", KUBE_SA_DIR);
  bool v6 = strchr(host, ':') != NULL;
  size_t n = 0;
  _cleanup_free_ char *ns = NULL;
  int r = asprintf(&out->server, "https://%s%s%s:%s", v6 ? "[" : "", host,
                   v6 ? "]" : "", port && *port ? port : "443") < 0
              ? -ENOMEM
              : 0;
  if (r == 0)
    r = read_named(dir, "token", NULL, "the service account token", &out->token,
                   &n, e);
  while (r == 0 && n && (out->token[n - 1] == '\n' || out->token[n - 1] == ' '))
    out->token[--n] = '\0';
  if (r == 0)
    r = read_named(dir, "ca.crt", NULL, "the service account CA", &out->ca_pem,
                   &out->ca_len, e);
  if (r == 0 &&
      read_named(dir, "namespace", NULL, "namespace", &ns, &n, NULL) == 0) {
    while (n && (ns[n - 1] == '\n' || ns[n - 1] == ' '))
      ns[--n] = '\0';
  }
  if (r == 0 && !(out->ns = strdup(ns && *ns ? ns : "default")))
    r = -ENOMEM;
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0)
    kube_config_clear(out);
  return r;
}

/* The kubeconfig to read when none is given, into OUT: $KUBECONFIG's first
 * file, else ~/.kube/config. -ENOENT when neither names a file. */
static int default_path(char *out, size_t n) {
  const char *env = getenv("KUBECONFIG");
  if (env && *env) {
    size_t k = strcspn(env, ":");
    if (k == 0 || k >= n)
      return -ENOENT;
    memcpy(out, env, k);
    out[k] = '\0';
    return 0;
  }
  const char *home = getenv("HOME");
  if (!home || !*home)
    return -ENOENT;
  int k = snprintf(out, n, "%s/.kube/config", home);
  if (k < 0 || (size_t)k >= n || access(out, F_OK) < 0)
    return -ENOENT;
  return 0;
}

int kube_config_load(const char *path, const char *context, const char *sa_root,
                     struct kube_config *out, struct sbx_error *e) {
  char found[PATH_MAX];
  if (!path) {
    if (default_path(found, sizeof(found)) < 0) {
      if (context)
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                             "context \"%s\" given but no kubeconfig found "
                             "($KUBECONFIG, ~/.kube/config or the kubeconfig "
                             "option)",
                             context);
      return kube_config_in_cluster(sa_root, out, e);
    }
    path = found;
  }
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(path, KUBE_CONFIG_MAX, &text, &len);
  if (r == -EFBIG)
    return cfg_bad(e, path, "larger than %u bytes", KUBE_CONFIG_MAX);
  if (r < 0)
    return cfg_bad(e, path, "cannot read it: %s", strerror(-r));
  return kube_config_parse(text, len, path, context, out, e);
}
