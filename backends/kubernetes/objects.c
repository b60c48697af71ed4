/* The objects the backend sends, as docs/kubernetes.md lists them: the Pod
 * that runs sandboxd, the Secret with its token and TLS files, and the
 * NetworkPolicy around it, both owned by the Pod. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/sha256.h"

/* The capabilities sandboxd and a root workload need in their own Pod:
 * files of any owner, switching users, signalling its own processes. */
static const char *const caps_add[] = {"CHOWN",  "DAC_OVERRIDE", "FOWNER",
                                       "SETUID", "SETGID",       "KILL"};

static json_t *strings(const char *const *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_string(v[i])) < 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

json_t *kube_labels_json(const struct kube_pod_params *p) {
  json_t *l = p->o->labels ? json_deep_copy(p->o->labels) : json_object();
  if (!l)
    return NULL;
  bool ok = true;
  for (size_t i = 0; i < p->nlabels; i++)
    ok &= json_object_set_new(l, p->labels[i].key,
                              json_string(p->labels[i].value)) == 0;
  ok &= json_object_set_new(l, KUBE_LABEL_MANAGED, json_string("sbx")) == 0;
  ok &= json_object_set_new(l, KUBE_LABEL_SANDBOX, json_string(p->name)) == 0;
  if (p->pool) {
    ok &= json_object_set_new(l, KUBE_LABEL_WARM, json_string("true")) == 0;
    ok &= json_object_set_new(l, KUBE_LABEL_POOL, json_string(p->pool)) == 0;
  }
  if (!ok) {
    json_decref(l);
    return NULL;
  }
  return l;
}

/* sandboxd's command line. */
static json_t *command(const struct kube_pod_params *p) {
  char expires[32], idle[32];
  (void)snprintf(expires, sizeof(expires), "%lld", (long long)p->expires_at);
  (void)snprintf(idle, sizeof(idle), "%u", p->idle_timeout_s);
  const char *cmd[20] = {p->o->sandboxd_image ? KUBE_SBX_BIN "/sandboxd"
                                              : KUBE_SANDBOXD,
                         "--listen",
                         "tls+tcp://0.0.0.0:7443",
                         "--root",
                         p->root,
                         "--token-file",
                         KUBE_TLS_DIR "/token",
                         "--tls-cert",
                         KUBE_TLS_DIR "/tls.crt",
                         "--tls-key",
                         KUBE_TLS_DIR "/tls.key",
                         "--tls-ca",
                         KUBE_TLS_DIR "/ca.pem"};
  size_t n = 13;
  if (p->expires_at > 0) {
    cmd[n++] = "--expires-at";
    cmd[n++] = expires;
  }
  if (p->idle_timeout_s > 0) {
    cmd[n++] = "--idle-timeout";
    cmd[n++] = idle;
  }
  return strings(cmd, n);
}

static json_t *ports(const struct kube_pod_params *p) {
  json_t *a = json_pack("[{s:s, s:i, s:s}]", "name", "sandboxd",
                        "containerPort", KUBE_PORT, "protocol", "TCP");
  for (size_t i = 0; a && i < p->nports; i++) {
    char name[16];
    (void)snprintf(name, sizeof(name), "port-%u", p->ports[i]);
    if (json_array_append_new(a, json_pack("{s:s, s:i, s:s}", "name", name,
                                           "containerPort", (int)p->ports[i],
                                           "protocol", "TCP")) < 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

static json_t *resources(const struct kube_options *o) {
  return json_pack("{s:s, s:s, s:s}", "cpu", o->cpu, "memory", o->memory,
                   "ephemeral-storage", o->ephemeral);
}

static json_t *container(const struct kube_pod_params *p) {
  const struct kube_options *o = p->o;
  json_t *res = resources(o);
  json_t *sec =
      json_pack("{s:b, s:{s:[s], s:o}, s:{s:s}}", "allowPrivilegeEscalation", 0,
                "capabilities", "drop", "ALL", "add",
                strings(caps_add, SBX_ARRAY_SIZE(caps_add)), "seccompProfile",
                "type", "RuntimeDefault");
  json_t *c = json_pack(
      "{s:s, s:s, s:s*, s:o, s:o, s:{s:{s:i}, s:i}, s:{s:O, s:o}, s:o,"
      " s:[{s:s, s:s, s:b}, {s:s, s:s}]}",
      "name", "sandboxd", "image", o->image, "imagePullPolicy", o->pull_policy,
      "command", command(p), "ports", ports(p), "readinessProbe", "tcpSocket",
      "port", KUBE_PORT, "periodSeconds", 1, "resources", "requests", res,
      "limits", res, "securityContext", sec, "volumeMounts", "name", "tls",
      "mountPath", KUBE_TLS_DIR, "readOnly", 1, "name", "workspace",
      "mountPath", p->root);
  if (c && o->sandboxd_image &&
      json_array_append_new(json_object_get(c, "volumeMounts"),
                            json_pack("{s:s, s:s, s:b}", "name", "sbx-bin",
                                      "mountPath", KUBE_SBX_BIN, "readOnly",
                                      1)) < 0) {
    json_decref(c);
    return NULL;
  }
  return c;
}

/* For an image without sandboxd: the init container that copies the static
 * sandboxd of O's sandboxd_image into the volume "sbx-bin", with nothing
 * but that volume and no capabilities, working in it (a runtime need not
 * make a working directory the image lacks). */
static json_t *installer(const struct kube_options *o) {
  json_t *res = resources(o);
  return json_pack("[{s:s, s:s, s:s*, s:[s, s, s], s:s, s:{s:O, s:o},"
                   " s:{s:b, s:b, s:{s:[s]}, s:{s:s}}, s:[{s:s, s:s}]}]",
                   "name", "sandboxd-install", "image", o->sandboxd_image,
                   "imagePullPolicy", o->pull_policy, "command", KUBE_SANDBOXD,
                   "--install", KUBE_SBX_BIN "/sandboxd", "workingDir",
                   KUBE_SBX_BIN, "resources", "requests", res, "limits", res,
                   "securityContext", "allowPrivilegeEscalation", 0,
                   "readOnlyRootFilesystem", 1, "capabilities", "drop", "ALL",
                   "seccompProfile", "type", "RuntimeDefault", "volumeMounts",
                   "name", "sbx-bin", "mountPath", KUBE_SBX_BIN);
}

json_t *kube_pod_json(const struct kube_pod_params *p) {
  const struct kube_options *o = p->o;
  json_t *labels = kube_labels_json(p);
  json_t *spec =
      json_pack("{s:s, s:b, s:b, s:O*, s:O*, s:s*, s:[o],"
                " s:[{s:s, s:{s:s, s:i}}, {s:s, s:{s:s}}]}",
                "restartPolicy", "Never", "automountServiceAccountToken", 0,
                "enableServiceLinks", 0, "nodeSelector", o->node_selector,
                "tolerations", o->tolerations, "runtimeClassName",
                o->runtime_class, "containers", container(p), "volumes", "name",
                "tls", "secret", "secretName", p->name, "defaultMode", 0400,
                "name", "workspace", "emptyDir", "sizeLimit", o->ephemeral);
  if (spec && o->sandboxd_image &&
      (json_object_set_new(spec, "initContainers", installer(o)) < 0 ||
       json_array_append_new(json_object_get(spec, "volumes"),
                             json_pack("{s:s, s:{s:s}}", "name", "sbx-bin",
                                       "emptyDir", "sizeLimit", "64Mi")) < 0)) {
    json_decref(spec);
    spec = NULL;
  }
  if (!labels || !spec) {
    json_decref(labels);
    json_decref(spec);
    return NULL;
  }
  return json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "apiVersion", "v1", "kind",
                   "Pod", "metadata", "name", p->name, "labels", labels, "spec",
                   spec);
}

static json_t *owner(const char *name, const char *uid) {
  return json_pack("[{s:s, s:s, s:s, s:s, s:b, s:b}]", "apiVersion", "v1",
                   "kind", "Pod", "name", name, "uid", uid, "controller", 1,
                   "blockOwnerDeletion", 1);
}

static json_t *b64(const char *data, size_t n) {
  char *out = malloc(sbx_base64_encoded_size(n));
  if (!out)
    return NULL;
  (void)sbx_base64_encode(data, n, out);
  json_t *s = json_string(out);
  explicit_bzero(out, strlen(out));
  free(out);
  return s;
}

json_t *kube_secret_json(const char *name, const char *uid, json_t *labels,
                         const struct kube_secret_data *d) {
  return json_pack("{s:s, s:s, s:{s:s, s:O, s:o}, s:s, s:{s:o, s:o, s:o, s:o}}",
                   "apiVersion", "v1", "kind", "Secret", "metadata", "name",
                   name, "labels", labels, "ownerReferences", owner(name, uid),
                   "type", "Opaque", "data", "token",
                   b64(d->token, strlen(d->token)), "tls.crt",
                   b64(d->cert, d->cert_len), "tls.key",
                   b64(d->key, d->key_len), "ca.pem", b64(d->ca, d->ca_len));
}

json_t *kube_netpol_json(const char *name, const char *uid, json_t *labels,
                         const struct kube_options *o) {
  json_t *from =
      o->controller_cidr
          ? json_pack("{s:{s:s}}", "ipBlock", "cidr", o->controller_cidr)
          : json_pack("{s:{s:{s:s}}}", "podSelector", "matchLabels",
                      "app.kubernetes.io/name", "sbx");
  json_t *egress = o->network_none ? json_array() : json_pack("[{}]");
  return json_pack("{s:s, s:s, s:{s:s, s:O*, s:o},"
                   " s:{s:{s:{s:s}}, s:[s, s], s:[{s:[o]}], s:o}}",
                   "apiVersion", "networking.k8s.io/v1", "kind",
                   "NetworkPolicy", "metadata", "name", name, "labels", labels,
                   "ownerReferences", owner(name, uid), "spec", "podSelector",
                   "matchLabels", KUBE_LABEL_SANDBOX, name, "policyTypes",
                   "Ingress", "Egress", "ingress", "from", from, "egress",
                   egress);
}

int kube_pool_hash(const struct kube_options *o, const char *root,
                   const char *ca_dir, char out[17]) {
  struct kube_pod_params p = {.name = "sbx-000000000000", .o = o, .root = root};
  _cleanup_json_ json_t *pod = kube_pod_json(&p);
  _cleanup_json_ json_t *pol = kube_netpol_json(p.name, "", NULL, o);
  _cleanup_json_ json_t *all =
      json_pack("{s:O, s:O, s:s, s:s}", "pod", pod, "policy", pol, "ca", ca_dir,
                "ns", o->ns ? o->ns : "");
  _cleanup_free_ char *text =
      all ? json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  if (!text)
    return -ENOMEM;
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256(text, strlen(text), d);
  sbx_hex_encode(d, 8, out);
  return 0;
}
