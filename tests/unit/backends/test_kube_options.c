/* The kubernetes backend's options through its table and parser (the
 * defaults, every refusal naming its option, the API's rules) and the
 * objects it sends: the exact Pod, Secret and NetworkPolicy fields of
 * docs/kubernetes.md. Nothing is created. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"

static struct kube_options *parse(const char *text, char *msg, size_t n) {
  _cleanup_json_ json_t *j = text ? json_loads(text, 0, NULL) : NULL;
  cr_assert(!text || j, "%s", text);
  void *own = NULL;
  struct sbx_error e = {0};
  int r = backend_options_parse(&backend_kubernetes, j, "run_config", &own, &e);
  (void)snprintf(msg, n, "%s", e.msg);
  cr_expect_eq(r < 0, own == NULL, "%s", text ? text : "(none)");
  return own;
}

Test(kube_options, the_defaults) {
  char msg[600];
  struct kube_options *o = parse("{}", msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  cr_expect_str_eq(o->image, KUBE_DEFAULT_IMAGE);
  cr_expect_str_eq(o->cpu, "1");
  cr_expect_str_eq(o->memory, "1Gi");
  cr_expect_str_eq(o->ephemeral, "2Gi");
  cr_expect_null(o->pull_policy);
  cr_expect_null(o->ns);
  cr_expect_not(o->network_none);
  cr_expect_eq(o->warm_pool, 0);
  cr_expect_eq(o->ready_timeout_s, KUBE_DEFAULT_READY_S);
  cr_expect_str_eq(o->client, "default");
  backend_options_free(&backend_kubernetes, o);
}

Test(kube_options, every_refusal_names_its_option) {
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"{\"cpu\": \"lots\"}", "run_config.cpu: \"lots\" is not a Kubernetes "
                              "quantity"},
      {"{\"cpu\": 2}", "\"run_config.cpu\" must be a string"},
      {"{\"memory\": \"1GB\"}", "run_config.memory: \"1GB\""},
      {"{\"memory\": \"-1Gi\"}", "run_config.memory"},
      {"{\"ephemeral_storage\": \"\"}", "run_config.ephemeral_storage"},
      {"{\"image_pull_policy\": \"Sometimes\"}",
       "image_pull_policy: \"Sometimes\": expected Always, IfNotPresent or "
       "Never"},
      {"{\"namespace\": \"Not_A_Name\"}", "namespace: \"Not_A_Name\""},
      {"{\"labels\": {\"sbx.x\": \"y\"}}", "labels: \"sbx.x\" is reserved"},
      {"{\"labels\": {\"app.kubernetes.io/name\": \"y\"}}", "is reserved"},
      {"{\"labels\": {\"a\": \"has space\"}}",
       "not a valid Kubernetes label value"},
      {"{\"node_selector\": {\"bad key!\": \"y\"}}",
       "node_selector: \"bad key!\" is not a valid Kubernetes label key"},
      {"{\"tolerations\": {\"key\": \"x\"}}",
       "tolerations: expected an array of objects"},
      {"{\"tolerations\": [{\"key\": 1}]}", "tolerations: [0]: \"key\""},
      {"{\"tolerations\": [{\"operator\": \"Maybe\"}]}",
       "operator \"Maybe\": expected Exists or Equal"},
      {"{\"tolerations\": [{\"effect\": \"Never\"}]}", "effect \"Never\""},
      {"{\"runtime_class\": \"G Visor\"}", "runtime_class: \"G Visor\""},
      {"{\"network_mode\": \"host\"}",
       "network_mode: \"host\": expected bridge or none"},
      {"{\"controller_cidr\": \"10.0.0.0\"}", "controller_cidr: \"10.0.0.0\""},
      {"{\"controller_cidr\": \"10.0.0.0/33\"}", "controller_cidr"},
      {"{\"warm_pool\": -1}", "warm_pool: -1: expected 0 to 100"},
      {"{\"ready_timeout\": 0}", "ready_timeout: 0: expected 1 to 3600"},
      {"{\"kubeconfig\": \"\"}", "kubeconfig: expected a file"},
      {"{\"context\": \"\"}", "context: expected a context's name"},
      {"{\"image\": \"a b\"}", "image: \"a b\" is not an image reference"},
      {"{\"sandboxd_image\": \"\"}",
       "sandboxd_image: \"\" is not an image reference"},
      {"{\"sandboxd_image\": 1}", "\"run_config.sandboxd_image\" must be a "
                                  "string"},
      {"{\"ca_dir\": \"\"}", "ca_dir: expected a directory"},
      {"{\"labels\": {\"k\": 1}}", "labels: \"k\": its value must be a string"},
      {"{\"warm_pool\": 101}", "warm_pool: 101: expected 0 to 100"},
      {"{\"tolerations\": [{\"tolerationSeconds\": \"5\"}]}",
       "\"tolerationSeconds\" is not a toleration field of its type"},
      {"{\"client\": \"Bad Name\"}", "run_config.client"},
      {"{\"replicas\": 2}", "backend kubernetes has no such option"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char msg[600];
    struct kube_options *o = parse(cases[i].json, msg, sizeof(msg));
    cr_expect_null(o, "%s", cases[i].json);
    cr_expect(strstr(msg, cases[i].want), "%s: %s", cases[i].json, msg);
    backend_options_free(&backend_kubernetes, o);
  }
}

Test(kube_options, quantities_follow_the_kubernetes_grammar) {
  static const char *const good[] = {"1",     "500m", "0.5",  "1Gi",
                                     "512Mi", "2e3",  "1E+2", "1k",
                                     "+2",    "100n", "1.5G", "3Ti"};
  static const char *const bad[] = {"",   "m",  "1GB",  "1 Gi", "1.2.3",
                                    "Gi", "1e", "0x10", "1ki"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
    cr_expect(kube_quantity_ok(good[i]), "%s", good[i]);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_expect_not(kube_quantity_ok(bad[i]), "%s", bad[i]);
}

Test(kube_options, a_request_may_not_name_the_servers_files) {
  static const char *const refused[] = {
      "{\"kubeconfig\": \"/etc/k\"}", "{\"context\": \"admin\"}",
      "{\"controller_cidr\": \"0.0.0.0/0\"}", "{\"ca_dir\": \"/x\"}",
      "{\"warm_pool\": 5}"};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    _cleanup_json_ json_t *j = json_loads(refused[i], 0, NULL);
    struct sbx_error e = {0};
    cr_expect_eq(backend_options_check_api(&backend_kubernetes, j, "run", &e),
                 -EPERM, "%s", refused[i]);
    cr_expect(strstr(e.msg, "only its operator's configuration"), "%s", e.msg);
  }
  _cleanup_json_ json_t *ok =
      json_loads("{\"namespace\": \"a\", \"cpu\": \"2\"}", 0, NULL);
  struct sbx_error e = {0};
  cr_expect_eq(backend_options_check_api(&backend_kubernetes, ok, "run", &e), 0,
               "%s", e.msg);
}

/* ---- the objects ---- */

Test(kube_objects, the_pod_is_the_contracts) {
  char msg[600];
  struct kube_options *o = parse(
      "{\"image\": \"localhost/sbx-debian:latest\", \"image_pull_policy\": "
      "\"Never\", \"cpu\": \"500m\", \"memory\": \"256Mi\", "
      "\"ephemeral_storage\": \"1Gi\", \"labels\": {\"team\": \"a\"}, "
      "\"node_selector\": {\"pool\": \"sbx\"}, \"tolerations\": [{\"key\": "
      "\"gpu\", \"operator\": \"Exists\"}], \"runtime_class\": \"gvisor\"}",
      msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  struct sandbox_label lab = {"owner", "bob"};
  struct kube_pod_params p = {.name = "sbx-0123456789ab",
                              .o = o,
                              .root = "/workspace",
                              .labels = &lab,
                              .nlabels = 1,
                              .expires_at = 2000000000,
                              .idle_timeout_s = 60};
  _cleanup_json_ json_t *pod = kube_pod_json(&p);
  cr_assert_not_null(pod);
  _cleanup_free_ char *text = json_dumps(pod, JSON_SORT_KEYS | JSON_COMPACT);
  static const char want[] =
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"labels\":{"
      "\"app.kubernetes.io/managed-by\":\"sbx\",\"owner\":\"bob\","
      "\"sbx.sandbox\":\"sbx-0123456789ab\",\"team\":\"a\"},\"name\":"
      "\"sbx-0123456789ab\"},\"spec\":{\"automountServiceAccountToken\":"
      "false,\"containers\":[{\"command\":[\"/usr/local/bin/sandboxd\","
      "\"--listen\",\"tls+tcp://0.0.0.0:7443\",\"--root\",\"/workspace\","
      "\"--token-file\",\"/etc/sbx/token\",\"--tls-cert\",\"/etc/sbx/"
      "tls.crt\",\"--tls-key\",\"/etc/sbx/tls.key\",\"--tls-ca\",\"/etc/sbx/"
      "ca.pem\",\"--expires-at\",\"2000000000\",\"--idle-timeout\",\"60\"],"
      "\"image\":\"localhost/sbx-debian:latest\",\"imagePullPolicy\":"
      "\"Never\",\"name\":\"sandboxd\",\"ports\":[{\"containerPort\":7443,"
      "\"name\":\"sandboxd\",\"protocol\":\"TCP\"}],\"readinessProbe\":{"
      "\"periodSeconds\":1,\"tcpSocket\":{\"port\":7443}},\"resources\":{"
      "\"limits\":{\"cpu\":\"500m\",\"ephemeral-storage\":\"1Gi\",\"memory\":"
      "\"256Mi\"},\"requests\":{\"cpu\":\"500m\",\"ephemeral-storage\":"
      "\"1Gi\",\"memory\":\"256Mi\"}},\"securityContext\":{"
      "\"allowPrivilegeEscalation\":false,\"capabilities\":{\"add\":["
      "\"CHOWN\",\"DAC_OVERRIDE\",\"FOWNER\",\"SETUID\",\"SETGID\",\"KILL\"],"
      "\"drop\":[\"ALL\"]},\"seccompProfile\":{\"type\":\"RuntimeDefault\"}},"
      "\"volumeMounts\":[{\"mountPath\":\"/etc/sbx\",\"name\":\"tls\","
      "\"readOnly\":true},{\"mountPath\":\"/workspace\",\"name\":"
      "\"workspace\"}]}],\"enableServiceLinks\":false,\"nodeSelector\":{"
      "\"pool\":\"sbx\"},\"restartPolicy\":\"Never\",\"runtimeClassName\":"
      "\"gvisor\",\"tolerations\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}],"
      "\"volumes\":[{\"name\":\"tls\",\"secret\":{\"defaultMode\":256,"
      "\"secretName\":\"sbx-0123456789ab\"}},{\"emptyDir\":{\"sizeLimit\":"
      "\"1Gi\"},\"name\":\"workspace\"}]}}";
  cr_expect_str_eq(text, want);
  backend_options_free(&backend_kubernetes, o);
}

/* With sandboxd_image, an init container with nothing but the volume
 * "sbx-bin" copies sandboxd there, and the image's container runs it from
 * there, read-only. */
Test(kube_objects, an_image_without_sandboxd_gets_it_from_an_init_container) {
  char msg[600];
  struct kube_options *o =
      parse("{\"image\": \"python:3.12-slim\", \"sandboxd_image\": "
            "\"reg/sbx-sandboxd:1\", \"image_pull_policy\": \"IfNotPresent\"}",
            msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  struct kube_pod_params p = {
      .name = "sbx-0123456789ab", .o = o, .root = "/workspace"};
  _cleanup_json_ json_t *pod = kube_pod_json(&p);
  cr_assert_not_null(pod);
  json_t *spec = json_object_get(pod, "spec");
  json_t *init = json_object_get(spec, "initContainers");
  cr_assert_eq(json_array_size(init), 1);
  _cleanup_free_ char *itext =
      json_dumps(json_array_get(init, 0), JSON_SORT_KEYS | JSON_COMPACT);
  static const char want_init[] =
      "{\"command\":[\"/usr/local/bin/sandboxd\",\"--install\",\"/sbx/bin/"
      "sandboxd\"],\"image\":\"reg/sbx-sandboxd:1\",\"imagePullPolicy\":"
      "\"IfNotPresent\",\"name\":\"sandboxd-install\",\"resources\":{"
      "\"limits\":{\"cpu\":\"1\",\"ephemeral-storage\":\"2Gi\",\"memory\":"
      "\"1Gi\"},\"requests\":{\"cpu\":\"1\",\"ephemeral-storage\":\"2Gi\","
      "\"memory\":\"1Gi\"}},\"securityContext\":{"
      "\"allowPrivilegeEscalation\":false,\"capabilities\":{\"drop\":["
      "\"ALL\"]},\"readOnlyRootFilesystem\":true,\"seccompProfile\":{"
      "\"type\":\"RuntimeDefault\"}},\"volumeMounts\":[{\"mountPath\":"
      "\"/sbx/bin\",\"name\":\"sbx-bin\"}],\"workingDir\":\"/sbx/bin\"}";
  cr_expect_str_eq(itext, want_init);
  json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(c, "image")),
                   "python:3.12-slim");
  cr_expect_str_eq(
      json_string_value(json_array_get(json_object_get(c, "command"), 0)),
      "/sbx/bin/sandboxd");
  json_t *m = json_array_get(json_object_get(c, "volumeMounts"), 2);
  cr_expect_str_eq(json_string_value(json_object_get(m, "name")), "sbx-bin");
  cr_expect(json_is_true(json_object_get(m, "readOnly")));
  json_t *v = json_array_get(json_object_get(spec, "volumes"), 2);
  cr_expect_str_eq(json_string_value(json_object_get(v, "name")), "sbx-bin");
  cr_expect_not_null(json_object_get(v, "emptyDir"));
  backend_options_free(&backend_kubernetes, o);
}

Test(kube_objects, the_secret_and_the_network_policy_belong_to_the_pod) {
  char msg[600];
  struct kube_options *o =
      parse("{\"network_mode\": \"none\", \"controller_cidr\": "
            "\"10.1.0.0/16\"}",
            msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  struct kube_pod_params p = {.name = "sbx-0123456789ab", .o = o};
  _cleanup_json_ json_t *labels = kube_labels_json(&p);
  struct kube_secret_data d = {.token = "tok",
                               .cert = "C",
                               .cert_len = 1,
                               .key = "K",
                               .key_len = 1,
                               .ca = "A",
                               .ca_len = 1};
  _cleanup_json_ json_t *sec =
      kube_secret_json("sbx-0123456789ab", "uid-1", labels, &d);
  _cleanup_free_ char *st = json_dumps(sec, JSON_SORT_KEYS | JSON_COMPACT);
  static const char owner[] =
      "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"blockOwnerDeletion\":"
      "true,\"controller\":true,\"kind\":\"Pod\",\"name\":"
      "\"sbx-0123456789ab\",\"uid\":\"uid-1\"}]";
  char want[1024];
  (void)snprintf(
      want, sizeof(want),
      "{\"apiVersion\":\"v1\",\"data\":{\"ca.pem\":\"QQ==\",\"tls.crt\":"
      "\"Qw==\",\"tls.key\":\"Sw==\",\"token\":\"dG9r\"},\"kind\":\"Secret\","
      "\"metadata\":{\"labels\":{\"app.kubernetes.io/managed-by\":\"sbx\","
      "\"sbx.sandbox\":\"sbx-0123456789ab\"},\"name\":\"sbx-0123456789ab\",%s"
      "},\"type\":\"Opaque\"}",
      owner);
  cr_expect_str_eq(st, want);
  _cleanup_json_ json_t *np =
      kube_netpol_json("sbx-0123456789ab", "uid-1", labels, o);
  _cleanup_free_ char *nt = json_dumps(np, JSON_SORT_KEYS | JSON_COMPACT);
  (void)snprintf(
      want, sizeof(want),
      "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\","
      "\"metadata\":{\"labels\":{\"app.kubernetes.io/managed-by\":\"sbx\","
      "\"sbx.sandbox\":\"sbx-0123456789ab\"},\"name\":\"sbx-0123456789ab\",%s"
      "},\"spec\":{\"egress\":[],\"ingress\":[{\"from\":[{\"ipBlock\":{"
      "\"cidr\":\"10.1.0.0/16\"}}]}],\"podSelector\":{\"matchLabels\":{"
      "\"sbx.sandbox\":\"sbx-0123456789ab\"}},\"policyTypes\":[\"Ingress\","
      "\"Egress\"]}}",
      owner);
  cr_expect_str_eq(nt, want);
  backend_options_free(&backend_kubernetes, o);
}

Test(kube_objects, egress_allowed_and_ingress_from_sbx_pods_by_default) {
  char msg[600];
  struct kube_options *o = parse("{}", msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  _cleanup_json_ json_t *np =
      kube_netpol_json("sbx-0123456789ab", "u", NULL, o);
  _cleanup_free_ char *egress = json_dumps(
      json_object_get(json_object_get(np, "spec"), "egress"), JSON_COMPACT);
  cr_expect_str_eq(egress, "[{}]");
  json_t *from = json_array_get(
      json_object_get(
          json_array_get(
              json_object_get(json_object_get(np, "spec"), "ingress"), 0),
          "from"),
      0);
  _cleanup_free_ char *f = json_dumps(from, JSON_COMPACT | JSON_SORT_KEYS);
  cr_expect_str_eq(
      f, "{\"podSelector\":{\"matchLabels\":{\"app.kubernetes.io/name\":"
         "\"sbx\"}}}");
  backend_options_free(&backend_kubernetes, o);
}

Test(kube_objects, the_pool_hash_follows_what_shapes_the_pod) {
  char msg[600], a[17], b[17], c[17];
  struct kube_options *o1 = parse("{\"cpu\": \"1\"}", msg, sizeof(msg));
  struct kube_options *o2 = parse("{\"cpu\": \"2\"}", msg, sizeof(msg));
  cr_assert(o1 && o2);
  cr_assert_eq(kube_pool_hash(o1, "/workspace", "/ca", a), 0);
  cr_assert_eq(kube_pool_hash(o2, "/workspace", "/ca", b), 0);
  cr_assert_eq(kube_pool_hash(o1, "/workspace", "/ca", c), 0);
  cr_expect_str_neq(a, b);
  cr_expect_str_eq(a, c);
  cr_expect_eq(strlen(a), 16);
  backend_options_free(&backend_kubernetes, o1);
  backend_options_free(&backend_kubernetes, o2);
}

/* What a Pod that is not ready says: the init container that failed
 * before the sandboxd container waiting on it; a finished one is done. */
Test(kube_objects, a_pod_is_described_by_what_holds_it_up) {
  _cleanup_json_ json_t *pod = json_loads(
      "{\"status\": {\"phase\": \"Pending\", \"initContainerStatuses\": [{"
      "\"name\": \"sandboxd-install\", \"state\": {\"waiting\": {\"reason\": "
      "\"ErrImagePull\", \"message\": \"no such image\"}}}], "
      "\"containerStatuses\": [{\"name\": \"sandboxd\", \"state\": {"
      "\"waiting\": {\"reason\": \"PodInitializing\"}}}]}}",
      0, NULL);
  cr_assert_not_null(pod);
  char out[400];
  kube_pod_describe(pod, out, sizeof(out));
  cr_expect_str_eq(out, "phase Pending; container sandboxd-install waiting: "
                        "ErrImagePull: no such image");
  _cleanup_json_ json_t *done = json_loads(
      "{\"status\": {\"phase\": \"Pending\", \"initContainerStatuses\": [{"
      "\"name\": \"sandboxd-install\", \"state\": {\"terminated\": {"
      "\"exitCode\": 0, \"reason\": \"Completed\"}}}], "
      "\"containerStatuses\": [{\"name\": \"sandboxd\", \"state\": {"
      "\"waiting\": {\"reason\": \"ContainerCreating\"}}}]}}",
      0, NULL);
  cr_assert_not_null(done);
  kube_pod_describe(done, out, sizeof(out));
  cr_expect_str_eq(out, "phase Pending; container sandboxd waiting: "
                        "ContainerCreating");
}
