/* The kubernetes backend's options: the table run_config, the CLI and the
 * API name them by, and their checks (each error names its option). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ca_options.h"
#include "backends/kubernetes/kube_internal.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"

#define WARM_POOL_MAX 100
#define TOLERATIONS_MAX 64
#define MAP_MAX 64

static int toleration_flag(const char *text, json_t **out,
                           struct sbx_error *e) {
  json_error_t je;
  *out = json_loads(text, JSON_REJECT_DUPLICATES, &je);
  if (json_is_object(*out))
    return 0;
  json_decref(*out);
  *out = NULL;
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "expected a JSON object such as {\"key\": \"gpu\", "
                       "\"operator\": \"Exists\", \"effect\": \"NoSchedule\"}");
}

const struct backend_option kube_option_table[] = {
    {"kubeconfig", "kubeconfig", "FILE",
     "the kubeconfig (default: the first file of $KUBECONFIG, else "
     "~/.kube/config, else the in-cluster service account)",
     BACKEND_OPTION_STRING, ""},
    {"context", "context", "NAME",
     "the kubeconfig's context (default: its current-context)",
     BACKEND_OPTION_STRING, ""},
    {"namespace", "namespace", "NS",
     "where the Pods go (default: the context's namespace, else default)",
     BACKEND_OPTION_STRING},
    {"image", "image", "IMG",
     "the sandboxd image (default: sbx-debian:latest; push it to a registry "
     "the cluster pulls from)",
     BACKEND_OPTION_STRING},
    {"sandboxd_image", "sandboxd-image", "IMG",
     "an image holding the static sandboxd (sbx-sandboxd): an init container "
     "copies it into the Pod, so that the image need not have it",
     BACKEND_OPTION_STRING},
    {"image_pull_policy", "image-pull-policy", "Always|IfNotPresent|Never",
     "the Pod's imagePullPolicy (default: the cluster's)",
     BACKEND_OPTION_STRING},
    {"cpu", "cpu", "QUANTITY",
     "CPU request and limit, a Kubernetes quantity (default \"1\")",
     BACKEND_OPTION_STRING},
    {"memory", "memory", "QUANTITY",
     "memory request and limit (default \"1Gi\")", BACKEND_OPTION_STRING},
    {"ephemeral_storage", "ephemeral-storage", "QUANTITY",
     "ephemeral storage request and limit, also the workspace's size limit "
     "(default \"2Gi\")",
     BACKEND_OPTION_STRING},
    {"labels", NULL, "{KEY: VALUE}",
     "the Pod's labels (not sbx.* nor app.kubernetes.io/*)",
     BACKEND_OPTION_STRING_MAP},
    {"node_selector", "node-selector", "KEY=VALUE",
     "the Pod's nodeSelector (repeatable)", BACKEND_OPTION_STRING_MAP},
    {"tolerations", "toleration", "JSON",
     "a toleration of the Pod, as a JSON object (repeatable)",
     BACKEND_OPTION_JSON, NULL, toleration_flag},
    {"runtime_class", "runtime-class", "NAME",
     "the Pod's runtimeClassName (gVisor, Kata)", BACKEND_OPTION_STRING},
    {"network_mode", "network", "bridge|none",
     "none: a NetworkPolicy denies all egress (default bridge: egress "
     "allowed)",
     BACKEND_OPTION_STRING},
    {"controller_cidr", "controller-cidr", "CIDR",
     "where sandboxd's port may be reached from (default: Pods labelled "
     "app.kubernetes.io/name=sbx in the namespace)",
     BACKEND_OPTION_STRING, ""},
    {"warm_pool", "warm-pool", "N",
     "keep N ready Pods to claim instead of creating one (default 0)",
     BACKEND_OPTION_INTEGER, ""},
    {"ready_timeout", "ready-timeout", "SECONDS",
     "how long a Pod may take to be Ready (default 120)",
     BACKEND_OPTION_INTEGER},
    BACKEND_CA_OPTIONS,
    {0},
};

static bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

/* [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])? of at most 63 (0 allowed when
 * EMPTY_OK). */
static bool label_name_ok(const char *s, size_t n, bool empty_ok) {
  if (n == 0)
    return empty_ok;
  if (n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!alnum(s[i]) && !strchr("-_.", s[i]))
      return false;
  return true;
}

/* A DNS-1123 subdomain: lowercase labels of [a-z0-9-] joined by dots. */
static bool dns_subdomain_ok(const char *s, size_t n) {
  if (n == 0 || n > 253)
    return false;
  for (size_t i = 0; i < n; i++) {
    bool lower = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9');
    bool edge = i == 0 || i == n - 1 || s[i - 1] == '.' || s[i + 1] == '.';
    if (!lower && !(s[i] == '-' && !edge) && !(s[i] == '.' && !edge))
      return false;
  }
  return true;
}

bool kube_label_key_ok(const char *key) {
  const char *slash = strchr(key, '/');
  if (!slash)
    return label_name_ok(key, strlen(key), false);
  return dns_subdomain_ok(key, (size_t)(slash - key)) &&
         label_name_ok(slash + 1, strlen(slash + 1), false);
}

bool kube_label_value_ok(const char *value) {
  return label_name_ok(value, strlen(value), true);
}

static bool dns_label_ok(const char *s) {
  size_t n = strlen(s);
  return n <= 63 && !strchr(s, '.') && dns_subdomain_ok(s, n);
}

/* The quantity grammar of k8s.io/apimachinery: a signed decimal number,
 * then a binary (Ki..Ei), decimal (n u m "" k M G T P E) or exponent
 * (e/E and an integer) suffix. */
bool kube_quantity_ok(const char *s) {
  static const char *const suffixes[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
                                         "n",  "u",  "m",  "k",  "M",  "G",
                                         "T",  "P",  "E",  ""};
  const char *p = s;
  if (*p == '+' || *p == '-')
    p++;
  size_t digits = strspn(p, "0123456789");
  p += digits;
  if (*p == '.') {
    size_t frac = strspn(p + 1, "0123456789");
    digits += frac;
    p += 1 + frac;
  }
  if (digits == 0 || strlen(s) > 64)
    return false;
  if ((*p == 'e' || *p == 'E') && p[1]) {
    const char *x = p + 1 + (p[1] == '+' || p[1] == '-');
    if (*x && strspn(x, "0123456789") == strlen(x))
      return true;
  }
  for (size_t i = 0; i < SBX_ARRAY_SIZE(suffixes); i++)
    if (strcmp(p, suffixes[i]) == 0)
      return true;
  return false;
}

/* A map option of string values, each key and value checked. */
static int check_map(json_t *v, const char *where, const char *key,
                     bool reserved_refused, struct sbx_error *e) {
  if (json_object_size(v) > MAP_MAX)
    return backend_option_bad(e, where, key, "more than %d entries", MAP_MAX);
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!json_is_string(x))
      return backend_option_bad(e, where, key,
                                "\"%s\": its value must be a string", k);
    if (!kube_label_key_ok(k))
      return backend_option_bad(
          e, where, key,
          "\"%.100s\" is not a valid Kubernetes label key "
          "([PREFIX/]NAME, NAME of at most 63 of [A-Za-z0-9._-])",
          k);
    if (!kube_label_value_ok(json_string_value(x)))
      return backend_option_bad(
          e, where, key,
          "\"%.100s\": value \"%.100s\" is not a valid Kubernetes "
          "label value (at most 63 of [A-Za-z0-9._-])",
          k, json_string_value(x));
    if (reserved_refused &&
        (strcmp(k, "sbx") == 0 || strncmp(k, "sbx.", 4) == 0 ||
         strncmp(k, "app.kubernetes.io/", 18) == 0))
      return backend_option_bad(
          e, where, key,
          "\"%s\" is reserved (sbx.* and app.kubernetes.io/* are "
          "sbx's own)",
          k);
  }
  return 0;
}

/* Each toleration: an object of the fields Kubernetes knows, of their
 * types. */
static int check_tolerations(json_t *v, const char *where,
                             struct sbx_error *e) {
  static const char *const strs[] = {"key", "operator", "value", "effect"};
  if (!json_is_array(v))
    return backend_option_bad(e, where, "tolerations",
                              "expected an array of objects");
  if (json_array_size(v) > TOLERATIONS_MAX)
    return backend_option_bad(e, where, "tolerations", "more than %d",
                              TOLERATIONS_MAX);
  size_t i;
  json_t *t;
  json_array_foreach(v, i, t) {
    if (!json_is_object(t))
      return backend_option_bad(e, where, "tolerations",
                                "[%zu] is not an object", i);
    const char *k;
    json_t *x;
    json_object_foreach(t, k, x) {
      bool is_str = false;
      for (size_t j = 0; j < SBX_ARRAY_SIZE(strs); j++)
        is_str |= strcmp(k, strs[j]) == 0;
      if (is_str ? !json_is_string(x)
                 : strcmp(k, "tolerationSeconds") || !json_is_integer(x))
        return backend_option_bad(
            e, where, "tolerations",
            "[%zu]: \"%s\" is not a toleration field of its type "
            "(key, operator, value, effect: strings; "
            "tolerationSeconds: an integer)",
            i, k);
    }
    const char *op = json_string_value(json_object_get(t, "operator"));
    if (op && strcmp(op, "Exists") && strcmp(op, "Equal"))
      return backend_option_bad(
          e, where, "tolerations",
          "[%zu]: operator \"%s\": expected Exists or Equal", i, op);
    const char *eff = json_string_value(json_object_get(t, "effect"));
    if (eff && *eff && strcmp(eff, "NoSchedule") &&
        strcmp(eff, "PreferNoSchedule") && strcmp(eff, "NoExecute"))
      return backend_option_bad(e, where, "tolerations",
                                "[%zu]: effect \"%s\": expected NoSchedule, "
                                "PreferNoSchedule or NoExecute",
                                i, eff);
  }
  return 0;
}

/* An IPv4 or IPv6 CIDR: ADDRESS/BITS. */
static bool cidr_ok(const char *s) {
  const char *slash = strchr(s, '/');
  if (!slash || slash == s || slash - s > 45 || !slash[1] ||
      strspn(slash + 1, "0123456789") != strlen(slash + 1) ||
      strlen(slash + 1) > 3)
    return false;
  long bits = strtol(slash + 1, NULL, 10);
  bool v6 = memchr(s, ':', (size_t)(slash - s)) != NULL;
  size_t n = (size_t)(slash - s);
  if (strspn(s, v6 ? "0123456789abcdefABCDEF:." : "0123456789.") < n)
    return false;
  return bits <= (v6 ? 128 : 32);
}

static const char *str(json_t *obj, const char *k) {
  return json_string_value(json_object_get(obj, k));
}

/* The string options, checked. */
static int parse_strings(struct kube_options *o, json_t *obj, const char *where,
                         struct sbx_error *e) {
  o->kubeconfig = str(obj, "kubeconfig");
  o->context = str(obj, "context");
  o->ns = str(obj, "namespace");
  o->image = str(obj, "image") ? str(obj, "image") : KUBE_DEFAULT_IMAGE;
  o->sandboxd_image = str(obj, "sandboxd_image");
  o->pull_policy = str(obj, "image_pull_policy");
  o->cpu = str(obj, "cpu") ? str(obj, "cpu") : "1";
  o->memory = str(obj, "memory") ? str(obj, "memory") : "1Gi";
  o->ephemeral =
      str(obj, "ephemeral_storage") ? str(obj, "ephemeral_storage") : "2Gi";
  o->runtime_class = str(obj, "runtime_class");
  o->controller_cidr = str(obj, "controller_cidr");
  o->ca_dir = str(obj, "ca_dir");
  o->client = str(obj, "client") ? str(obj, "client") : "default";
  const char *net = str(obj, "network_mode");
  struct sbx_error ne = {0};
  if (o->kubeconfig && !*o->kubeconfig)
    return backend_option_bad(e, where, "kubeconfig", "expected a file");
  if (o->context && !*o->context)
    return backend_option_bad(e, where, "context", "expected a context's name");
  if (o->ns && !dns_label_ok(o->ns))
    return backend_option_bad(
        e, where, "namespace",
        "\"%.100s\" is not a namespace name (a DNS-1123 label)", o->ns);
  if (!*o->image || strlen(o->image) > 512 || strpbrk(o->image, " \t\n"))
    return backend_option_bad(e, where, "image",
                              "\"%.100s\" is not an image reference", o->image);
  if (o->sandboxd_image &&
      (!*o->sandboxd_image || strlen(o->sandboxd_image) > 512 ||
       strpbrk(o->sandboxd_image, " \t\n")))
    return backend_option_bad(e, where, "sandboxd_image",
                              "\"%.100s\" is not an image reference",
                              o->sandboxd_image);
  if (o->pull_policy && strcmp(o->pull_policy, "Always") &&
      strcmp(o->pull_policy, "IfNotPresent") && strcmp(o->pull_policy, "Never"))
    return backend_option_bad(
        e, where, "image_pull_policy",
        "\"%.64s\": expected Always, IfNotPresent or Never", o->pull_policy);
  const char *q[][2] = {{"cpu", o->cpu},
                        {"memory", o->memory},
                        {"ephemeral_storage", o->ephemeral}};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(q); i++)
    if (!kube_quantity_ok(q[i][1]) || q[i][1][0] == '-')
      return backend_option_bad(
          e, where, q[i][0],
          "\"%.64s\" is not a Kubernetes quantity (such as \"500m\", "
          "\"2\", \"1Gi\", \"512M\")",
          q[i][1]);
  if (o->runtime_class &&
      !dns_subdomain_ok(o->runtime_class, strlen(o->runtime_class)))
    return backend_option_bad(e, where, "runtime_class",
                              "\"%.100s\" is not a RuntimeClass name",
                              o->runtime_class);
  if (net && strcmp(net, "bridge") && strcmp(net, "none"))
    return backend_option_bad(e, where, "network_mode",
                              "\"%.64s\": expected bridge or none", net);
  o->network_none = net && strcmp(net, "none") == 0;
  if (o->controller_cidr && !cidr_ok(o->controller_cidr))
    return backend_option_bad(
        e, where, "controller_cidr",
        "\"%.64s\" is not an IPv4 or IPv6 CIDR (ADDRESS/BITS)",
        o->controller_cidr);
  if (o->ca_dir && !*o->ca_dir)
    return backend_option_bad(e, where, "ca_dir", "expected a directory");
  if (ca_name_check(o->client, &ne) < 0)
    return backend_option_bad(e, where, "client", "%s", ne.msg);
  return 0;
}

/* An integer option KEY of OBJ from 0 (or 1) to MAX into *OUT. */
static int parse_count(json_t *obj, const char *key, json_int_t min,
                       json_int_t max, unsigned *out, const char *where,
                       struct sbx_error *e) {
  json_t *v = json_object_get(obj, key);
  if (!v)
    return 0;
  json_int_t n = json_integer_value(v);
  if (n < min || n > max)
    return backend_option_bad(e, where, key, "%lld: expected %lld to %lld",
                              (long long)n, (long long)min, (long long)max);
  *out = (unsigned)n;
  return 0;
}

int kube_options_parse(json_t *obj, const char *where, void **out,
                       struct sbx_error *e) {
  *out = NULL;
  struct kube_options *o = calloc(1, sizeof(*o));
  if (!o)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  o->json = obj ? json_incref(obj) : json_object();
  o->ready_timeout_s = KUBE_DEFAULT_READY_S;
  int r = o->json ? parse_strings(o, o->json, where, e) : -ENOMEM;
  json_t *v;
  if (r == 0 && (v = json_object_get(o->json, "labels")) &&
      (r = check_map(v, where, "labels", true, e)) == 0)
    o->labels = v;
  if (r == 0 && (v = json_object_get(o->json, "node_selector")) &&
      (r = check_map(v, where, "node_selector", false, e)) == 0)
    o->node_selector = v;
  if (r == 0 && (v = json_object_get(o->json, "tolerations")) &&
      (r = check_tolerations(v, where, e)) == 0)
    o->tolerations = v;
  if (r == 0)
    r = parse_count(o->json, "warm_pool", 0, WARM_POOL_MAX, &o->warm_pool,
                    where, e);
  if (r == 0)
    r = parse_count(o->json, "ready_timeout", 1, 3600, &o->ready_timeout_s,
                    where, e);
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0) {
    kube_options_free(o);
    return r;
  }
  *out = o;
  return 0;
}

void kube_options_free(void *own) {
  struct kube_options *o = own;
  if (!o)
    return;
  json_decref(o->json);
  free(o);
}
