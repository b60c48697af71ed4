/* Private to backends/kubernetes/: the kubeconfig (yaml.c, config.c), the
 * REST calls (api.c), the objects sent (objects.c), readiness by watch
 * (watch.c), the options (options.c), the warm pool (pool.c) and the
 * backend itself (kubernetes.c). Functions that fail fill E and return a
 * negative errno. */
#ifndef SBX_KUBE_INTERNAL_H
#define SBX_KUBE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/kubernetes/kubernetes.h"
#include "shared/errors.h"
#include "shared/rand.h"

#define KUBE_CONFIG_MAX (1u << 20) /* a kubeconfig or a file it names */
#define KUBE_PORT 7443             /* sandboxd's in the Pod */
#define KUBE_ROOT "/workspace"
#define KUBE_TLS_DIR "/etc/sbx"
#define KUBE_SANDBOXD "/usr/local/bin/sandboxd"
/* Where an init container puts sandboxd for an image without it. */
#define KUBE_SBX_BIN "/sbx/bin"
#define KUBE_DEFAULT_IMAGE "sbx-debian:latest"
#define KUBE_DEFAULT_READY_S 120
/* sbx-<12 hex digits>: a DNS-1123 label, and a TLS server name. */
#define KUBE_NAME_LEN 16
/* The in-cluster service account's files, under a root ("/" but in
 * tests). */
#define KUBE_SA_DIR "var/run/secrets/kubernetes.io/serviceaccount"

#define KUBE_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define KUBE_LABEL_SANDBOX "sbx.sandbox"
#define KUBE_LABEL_WARM "sbx.warm"
#define KUBE_LABEL_POOL "sbx.pool"
#define KUBE_LABEL_CLAIMED "sbx.claimed"

/* ---- yaml.c ---- */

/* TEXT (LEN bytes, YAML or JSON) as JSON: mappings are objects, sequences
 * arrays, scalars strings (a plain empty, "~" or "null" scalar is null).
 * One document; anchors, aliases, duplicate keys and non-scalar keys are
 * refused, as is nesting deeper than 64. *OUT new. */
int kube_yaml_to_json(const char *text, size_t len, json_t **out,
                      struct sbx_error *e);

/* ---- config.c ---- */

/* How to reach and authenticate to an API server. */
struct kube_config {
  char *server; /* https://HOST[:PORT] */
  char *ca_pem; /* the CA bundle (PEM), or NULL: none */
  size_t ca_len;
  char *cert_pem, *key_pem; /* a client certificate, or NULL */
  size_t cert_len, key_len;
  char *token;   /* a bearer token, or NULL */
  char *ns;      /* the context's namespace, or "default" */
  char *path;    /* the kubeconfig read; NULL: in-cluster */
  char *context; /* the context used; NULL: in-cluster */
};

/* The configuration: the kubeconfig PATH (NULL: the first file of
 * $KUBECONFIG, else ~/.kube/config; when none exists and
 * KUBERNETES_SERVICE_HOST is set, the in-cluster service account under
 * SA_ROOT, NULL "/") with CONTEXT (NULL: its current-context). */
int kube_config_load(const char *path, const char *context, const char *sa_root,
                     struct kube_config *out, struct sbx_error *e);
/* The kubeconfig TEXT (LEN bytes) read from PATH (relative file names in it
 * are relative to PATH's directory) with CONTEXT (NULL: its current). */
int kube_config_parse(const char *text, size_t len, const char *path,
                      const char *context, struct kube_config *out,
                      struct sbx_error *e);
/* The in-cluster configuration: SA_ROOT/KUBE_SA_DIR/{token,ca.crt,
 * namespace} and https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT. */
int kube_config_in_cluster(const char *sa_root, struct kube_config *out,
                           struct sbx_error *e);
void kube_config_clear(struct kube_config *c);

/* ---- api.c ---- */

struct kube_api;

/* A client of C's server (C is copied). *OUT new. */
int kube_api_open(const struct kube_config *c, struct kube_api **out,
                  struct sbx_error *e);
struct kube_api *kube_api_free(struct kube_api *a);
const struct kube_config *kube_api_config(const struct kube_api *a);

/* METHOD PATH (after the server, escaped) with BODY (borrowed; NULL: none)
 * of CONTENT_TYPE (NULL: application/json). *OUT (may be NULL) the reply
 * (new, NULL when empty). A status outside 2xx is an error made of the
 * reply's Status object: "kubernetes: MESSAGE (HTTP N from METHOD PATH)",
 * and its errno: -ENOENT 404, -EACCES 401/403, -EEXIST 409 AlreadyExists,
 * -EBUSY 409 Conflict, -ESTALE 410, -EINVAL 400/422, -EIO others. Replies
 * are bounded (8 MiB). */
int kube_call(struct kube_api *a, const char *method, const char *path,
              json_t *body, const char *content_type, json_t **out,
              struct sbx_error *e);

/* Called with each event of a watch (borrowed): 0 to go on, 1 to stop the
 * watch (kube_watch returns 1), a negative errno to fail with. */
typedef int (*kube_event_fn)(void *arg, json_t *event, struct sbx_error *e);

/* GETs PATH (a watch: ?watch=1...) and hands each line's event to FN until
 * it says stop, the server ends the stream (0), or TIMEOUT_MS pass
 * (-ETIMEDOUT). A 410 reply or ERROR event of code 410 is -ESTALE. */
int kube_watch(struct kube_api *a, const char *path, unsigned timeout_ms,
               kube_event_fn fn, void *arg, struct sbx_error *e);

/* S escaped for a URL query value. New, or NULL. */
char *kube_escape(const char *s);

/* ---- options.c ---- */

struct kube_options {
  json_t *json; /* owned: the strings and objects below are its */
  const char *kubeconfig, *context, *ns;
  const char *image, *pull_policy;
  const char *sandboxd_image; /* or NULL: the image has sandboxd */
  const char *cpu, *memory, *ephemeral;
  json_t *labels, *node_selector, *tolerations; /* or NULL */
  const char *runtime_class;                    /* or NULL */
  bool network_none;
  const char *controller_cidr; /* or NULL: from sbx serve's Pods */
  unsigned warm_pool;
  unsigned ready_timeout_s;
  const char *ca_dir; /* or NULL: the state directory's */
  const char *client;
};

extern const struct backend_option kube_option_table[];
int kube_options_parse(json_t *obj, const char *where, void **out,
                       struct sbx_error *e);
void kube_options_free(void *own);
/* Whether S is a Kubernetes quantity ("500m", "1Gi", "2e3", "0.5"). */
bool kube_quantity_ok(const char *s);
/* Whether KEY and VALUE make a valid label. */
bool kube_label_key_ok(const char *key);
bool kube_label_value_ok(const char *value);

/* ---- objects.c ---- */

struct kube_pod_params {
  const char *name;
  const struct kube_options *o;
  const char *root; /* the workspace: sandboxd's --root and its volume */
  const struct sandbox_label *labels; /* the operator's (sandbox_spec) */
  size_t nlabels;
  const char *pool;      /* a warm Pod's pool, or NULL */
  const uint16_t *ports; /* exposed ports, declared as container ports */
  size_t nports;
  int64_t expires_at;
  unsigned idle_timeout_s;
};

/* The labels every object of sandbox NAME carries. New. */
json_t *kube_labels_json(const struct kube_pod_params *p);
/* The Pod, Secret and NetworkPolicy of the contract (docs/kubernetes.md).
 * New, or NULL when out of memory. */
json_t *kube_pod_json(const struct kube_pod_params *p);
/* The Secret owned by the Pod UID, with the token and TLS files. */
struct kube_secret_data {
  const char *token;
  const char *cert, *key, *ca; /* PEM */
  size_t cert_len, key_len, ca_len;
};
json_t *kube_secret_json(const char *name, const char *uid, json_t *labels,
                         const struct kube_secret_data *d);
json_t *kube_netpol_json(const char *name, const char *uid, json_t *labels,
                         const struct kube_options *o);
/* The warm pool's hash of what shapes a Pod made with O and ROOT whose
 * certificates come from CA_DIR: 16 hex digits and a NUL. */
int kube_pool_hash(const struct kube_options *o, const char *root,
                   const char *ca_dir, char out[17]);

/* ---- watch.c ---- */

/* Waits until the Pod NAME in NS is Ready with an IP, from POD (its object
 * as last seen, borrowed; NULL: GET it) by watching it, for at most
 * TIMEOUT_MS. *IP new. A Pod that failed, or whose container cannot start,
 * is an error naming why. */
int kube_wait_ready(struct kube_api *a, const char *ns, const char *name,
                    json_t *pod, unsigned timeout_ms, char **ip,
                    struct sbx_error *e);
/* What POD's status says (phase and its container's state), for errors
 * into OUT. */
void kube_pod_describe(json_t *pod, char *out, size_t n);

/* ---- kubernetes.c, pool.c ---- */

/* The sandbox's part. */
struct kube {
  struct kube_api *api;
  char name[KUBE_NAME_LEN + 1];
  char *ns;
  char *kubeconfig, *context; /* as given (NULL: found), for the record */
  char *ca_dir, *client;
  char *ca_pem, *cert, *key; /* the client's TLS files */
  char *ip;
  unsigned heartbeat_ms;
};

/* The TLS material of a new sandbox NAME: TOKEN (SBX_TOKEN_HEX + 1) fresh,
 * its server certificate, key and the CA bundle (new PEM). */
struct kube_tls {
  char token[SBX_TOKEN_HEX + 1];
  char *cert, *key, *ca;
  size_t cert_len, key_len, ca_len;
};
void kube_tls_clear(struct kube_tls *t);

/* Makes the Pod NAME with its Secret and NetworkPolicy (P, T) in K's
 * namespace; *POD its object as created (new). The Pod is deleted again
 * when a later step fails. */
int kube_make_pod(struct kube *k, const struct kube_pod_params *p,
                  const struct kube_tls *t, json_t **pod, struct sbx_error *e);
/* Makes a new sandbox NAME's TLS material from K's CA. */
int kube_tls_make(const struct kube *k, const char *name, struct kube_tls *t,
                  struct sbx_error *e);
/* Deletes the Pod NAME (its Secret and NetworkPolicy go with it); a
 * missing one is fine. */
int kube_delete_pod(struct kube_api *a, const char *ns, const char *name,
                    struct sbx_error *e);
/* Reads the token of Pod NAME from its Secret into OUT. */
int kube_read_token(struct kube_api *a, const char *ns, const char *name,
                    char out[SBX_TOKEN_HEX + 1], struct sbx_error *e);

/* Claims a warm Pod of O's pool for SESSION: 0 with *POD (new) its object
 * after the claim and K's name set, -ENOENT when none is free. */
int kube_pool_claim(struct kube *k, const char *hash, const char *session,
                    json_t **pod, struct sbx_error *e);
/* Claims the first of PODS (warm Pods as listed: the resourceVersion each
 * had then guards its claim) that is still free: as kube_pool_claim. */
int kube_pool_try(struct kube *k, json_t *pods, const char *session,
                  json_t **pod, struct sbx_error *e);
/* Creates warm Pods until the pool HASH has O->warm_pool unclaimed ones;
 * failures are logged. */
void kube_pool_fill(struct kube *k, const struct kube_pod_params *p,
                    const char *hash);

#endif
