/* The Kubernetes API server that the kubernetes backend is tested against
 * (tests/support/kube_api.py), tested itself so that those tests can trust
 * it: the API as a real server speaks it (discovery, bearer auth, TLS from
 * the kubeconfig, Status objects, resourceVersions, watches, the garbage
 * collector) and, with podman, the Pods it runs: the real sandboxd from
 * sbx's image reached over tls+tcp:// on the Pod's 127.0.0.N.
 *
 * The podman tests need the engine and images of scripts/containers.sh
 * (`make check` runs it); without DOCKER_HOST they fail and say so. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/ca/ca.h"
#include "shared/client.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "shared/rand.h"
#include "tests/support/kube_api.h"

#define NS "/api/v1/namespaces/" TEST_KUBE_NAMESPACE
#define NETPOLS "/apis/networking.k8s.io/v1/namespaces/" TEST_KUBE_NAMESPACE
#define IMAGE "localhost/sbx-debian:latest"

static struct test_kube kube;

static void start_api(void) {
  test_kube_start(&kube, false);
}
static void stop_api(void) {
  test_kube_stop(&kube);
}

static const char *str(const json_t *j, const char *path) {
  /* PATH: keys separated by '.' */
  char buf[128];
  (void)snprintf(buf, sizeof(buf), "%s", path);
  const json_t *at = j;
  for (char *save = NULL, *key = strtok_r(buf, ".", &save); key && at;
       key = strtok_r(NULL, ".", &save))
    at = json_object_get(at, key);
  return json_string_value(at);
}

static void expect_str(const json_t *j, const char *path, const char *want) {
  const char *s = str(j, path);
  cr_expect(s && strcmp(s, want) == 0, "%s: %s, not %s", path, s ? s : "(none)",
            want);
}

static void sandbox_name(char out[17]) {
  char hex[13];
  cr_assert_eq(sbx_random_hex(hex, 6), 0);
  (void)snprintf(out, 17, "sbx-%s", hex);
}

/* The Pod the kubernetes backend sends (docs: the contract), running
 * COMMAND (NULL: sandboxd as the backend starts it). */
static json_t *backend_pod(const char *name, json_t *command) {
  if (!command)
    command =
        json_pack("[sssssssssssssss]", "/usr/local/bin/sandboxd", "--listen",
                  "tls+tcp://0.0.0.0:7443", "--root", "/workspace",
                  "--token-file", "/etc/sbx/token", "--tls-cert",
                  "/etc/sbx/tls.crt", "--tls-key", "/etc/sbx/tls.key",
                  "--tls-ca", "/etc/sbx/ca.pem", "--seccomp", "default");
  json_t *r = json_pack("{s:s,s:s,s:s}", "cpu", "1", "memory", "512Mi",
                        "ephemeral-storage", "1Gi");
  json_t *c = json_pack(
      "{s:s,s:s,s:s,s:o,s:[{s:s,s:i,s:s}],s:{s:{s:i},s:i},s:{s:O,s:O},"
      "s:{s:b,s:{s:[s],s:[ssssss]},s:{s:s}},s:[{s:s,s:s,s:b},{s:s,s:s}]}",
      "name", "sandboxd", "image", IMAGE, "imagePullPolicy", "Never", "command",
      command, "ports", "name", "sandboxd", "containerPort", 7443, "protocol",
      "TCP", "readinessProbe", "tcpSocket", "port", 7443, "periodSeconds", 1,
      "resources", "requests", r, "limits", r, "securityContext",
      "allowPrivilegeEscalation", 0, "capabilities", "drop", "ALL", "add",
      "CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL",
      "seccompProfile", "type", "RuntimeDefault", "volumeMounts", "name", "tls",
      "mountPath", "/etc/sbx", "readOnly", 1, "name", "workspace", "mountPath",
      "/workspace");
  json_decref(r);
  return json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s}},s:{s:s,s:b,s:b,s:[o],"
                   "s:[{s:s,s:{s:s,s:i}},{s:s,s:{s:s}}]}}",
                   "apiVersion", "v1", "kind", "Pod", "metadata", "name", name,
                   "labels", "app.kubernetes.io/managed-by", "sbx",
                   "sbx.sandbox", name, "spec", "restartPolicy", "Never",
                   "automountServiceAccountToken", 0, "enableServiceLinks", 0,
                   "containers", c, "volumes", "name", "tls", "secret",
                   "secretName", name, "defaultMode", 0400, "name", "workspace",
                   "emptyDir", "sizeLimit", "1Gi");
}

static json_t *owner(const char *name, const char *uid) {
  return json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion", "v1", "kind",
                   "Pod", "name", name, "uid", uid, "controller", 1,
                   "blockOwnerDeletion", 1);
}

static char *b64(const char *data, size_t n) {
  char *out = malloc(sbx_base64_encoded_size(n));
  cr_assert_not_null(out);
  sbx_base64_encode(data, n, out);
  return out;
}

/* A Secret NAME owned by the Pod (UID; NULL: none) holding KEYS (pairs of
 * key and text, NULL-ended). */
static json_t *secret(const char *name, const char *uid,
                      const char *const *keys) {
  json_t *data = json_object();
  for (size_t i = 0; keys && keys[i]; i += 2) {
    char *v = b64(keys[i + 1], strlen(keys[i + 1]));
    json_object_set_new(data, keys[i], json_string(v));
    free(v);
  }
  json_t *s = json_pack("{s:s,s:s,s:{s:s},s:s,s:o}", "apiVersion", "v1", "kind",
                        "Secret", "metadata", "name", name, "type", "Opaque",
                        "data", data);
  if (uid)
    json_object_set_new(json_object_get(s, "metadata"), "ownerReferences",
                        owner(name, uid));
  return s;
}

/* POSTs OBJ (stolen) to PATH and expects 201: the object made (new). */
static json_t *create(const char *path, json_t *obj) {
  json_t *made = NULL;
  long code = test_kube_call(&kube, "POST", path, NULL, obj, &made);
  cr_assert_eq(code, 201, "POST %s: %ld %s", path, code,
               str(made, "message") ? str(made, "message") : "");
  json_decref(obj);
  return made;
}

static long get(const char *path, json_t **out) {
  return test_kube_call(&kube, "GET", path, NULL, NULL, out);
}

/* Status objects: kind Status, status Failure, REASON, CODE. */
static void expect_status(const json_t *s, const char *reason, long code) {
  expect_str(s, "kind", "Status");
  expect_str(s, "apiVersion", "v1");
  expect_str(s, "status", "Failure");
  expect_str(s, "reason", reason);
  cr_expect_eq(json_integer_value(json_object_get(s, "code")), code);
  cr_expect_not_null(str(s, "message"));
}

TestSuite(kube_fixture, .init = start_api, .fini = stop_api);

Test(kube_fixture, discovery_documents) {
  json_t *d = NULL;
  cr_assert_eq(get("/version", &d), 200);
  expect_str(d, "major", "1");
  cr_expect_not_null(str(d, "gitVersion"));
  json_decref(d);
  cr_assert_eq(get("/api", &d), 200);
  expect_str(d, "kind", "APIVersions");
  json_t *v1 = json_pack("[s]", "v1");
  cr_expect(json_equal(json_object_get(d, "versions"), v1));
  json_decref(v1);
  json_decref(d);
  cr_assert_eq(get("/api/v1", &d), 200);
  expect_str(d, "kind", "APIResourceList");
  expect_str(d, "groupVersion", "v1");
  json_t *res = json_object_get(d, "resources");
  cr_assert_eq(json_array_size(res), 2);
  expect_str(json_array_get(res, 0), "name", "pods");
  expect_str(json_array_get(res, 0), "kind", "Pod");
  cr_expect(
      json_is_true(json_object_get(json_array_get(res, 0), "namespaced")));
  expect_str(json_array_get(res, 1), "name", "secrets");
  json_decref(d);
  cr_assert_eq(get("/apis", &d), 200);
  expect_str(d, "kind", "APIGroupList");
  json_t *g = json_array_get(json_object_get(d, "groups"), 0);
  expect_str(g, "name", "networking.k8s.io");
  expect_str(g, "preferredVersion.groupVersion", "networking.k8s.io/v1");
  json_decref(d);
  cr_assert_eq(get("/apis/networking.k8s.io/v1", &d), 200);
  expect_str(json_array_get(json_object_get(d, "resources"), 0), "kind",
             "NetworkPolicy");
  json_decref(d);
  cr_assert_eq(get("/apis/apps/v1", &d), 404);
  expect_status(d, "NotFound", 404);
  json_decref(d);
}

/* A GET of /api/v1 with AUTH as the Authorization header (NULL: none),
 * verifying the server with the kubeconfig's CA (CA_BLOB) or the system's:
 * the curl result; *CODE the HTTP status; *BODY (may be NULL) the reply as
 * JSON (new). */
static CURLcode raw_get(const char *auth, bool ca_blob, long *code,
                        json_t **body) {
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  char url[96];
  (void)snprintf(url, sizeof(url), "%s/api/v1", kube.server);
  struct curl_slist *h = auth ? curl_slist_append(NULL, auth) : NULL;
  struct curl_blob ca = {kube.ca_pem, kube.ca_len, CURL_BLOB_COPY};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  if (ca_blob)
    curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  cr_assert_not_null(out);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  CURLcode rc = curl_easy_perform(c);
  *code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
  fclose(out);
  if (body)
    *body = json_loadb(text, len, 0, NULL);
  free(text);
  curl_easy_cleanup(c);
  curl_slist_free_all(h);
  return rc;
}

Test(kube_fixture, bearer_token_required) {
  long code;
  json_t *s = NULL;
  cr_assert_eq(raw_get(NULL, true, &code, &s), CURLE_OK);
  cr_expect_eq(code, 401, "no token: %ld", code);
  expect_status(s, "Unauthorized", 401);
  json_decref(s);
  cr_assert_eq(raw_get("Authorization: Bearer wrong", true, &code, &s),
               CURLE_OK);
  cr_expect_eq(code, 401, "a wrong token: %ld", code);
  expect_status(s, "Unauthorized", 401);
  json_decref(s);
  char auth[64];
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", kube.token);
  cr_assert_eq(raw_get(auth, true, &code, NULL), CURLE_OK);
  cr_expect_eq(code, 200);
  json_t *log = test_kube_requests(&kube, "GET", "/api/v1");
  cr_assert_eq(json_array_size(log), 3);
  expect_str(json_array_get(log, 0), "auth", "none");
  expect_str(json_array_get(log, 1), "auth", "wrong");
  expect_str(json_array_get(log, 2), "auth", "ok");
  json_decref(log);
}

Test(kube_fixture, tls_verified_against_the_kubeconfig_ca) {
  long code;
  cr_expect_eq(raw_get(NULL, true, &code, NULL), CURLE_OK);
  cr_expect_eq(raw_get(NULL, false, &code, NULL),
               CURLE_PEER_FAILED_VERIFICATION,
               "the fixture's certificate chains to its own CA only");
  char *kc = NULL;
  size_t n = 0;
  cr_assert_eq(sbx_read_file(kube.kubeconfig, 1 << 20, &kc, &n), 0);
  char want[96];
  (void)snprintf(want, sizeof(want), "server: %s\n", kube.server);
  cr_expect_not_null(strstr(kc, want), "%s", kc);
  (void)snprintf(want, sizeof(want), "token: %s\n", kube.token);
  cr_expect_not_null(strstr(kc, want));
  cr_expect_not_null(strstr(kc, "namespace: " TEST_KUBE_NAMESPACE "\n"));
  cr_expect_not_null(strstr(kc, "current-context: "));
  free(kc);
}

Test(kube_fixture, create_get_list_and_conflicts) {
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000001", NULL));
  cr_expect_not_null(str(pod, "metadata.uid"));
  cr_expect_not_null(str(pod, "metadata.creationTimestamp"));
  expect_str(pod, "metadata.namespace", TEST_KUBE_NAMESPACE);
  /* Pending: its Secret does not exist yet. */
  expect_str(pod, "status.phase", "Pending");
  const char *rv = str(pod, "metadata.resourceVersion");
  cr_assert_not_null(rv);
  json_t *again = NULL;
  cr_assert_eq(get(NS "/pods/sbx-000000000001", &again), 200);
  expect_str(again, "metadata.uid", str(pod, "metadata.uid"));
  expect_str(again, "metadata.resourceVersion", rv);
  json_decref(again);

  json_t *dup = NULL;
  json_t *body = backend_pod("sbx-000000000001", NULL);
  cr_expect_eq(test_kube_call(&kube, "POST", NS "/pods", NULL, body, &dup),
               409);
  expect_status(dup, "AlreadyExists", 409);
  expect_str(dup, "details.name", "sbx-000000000001");
  json_decref(dup);
  json_decref(body);

  json_t *list = NULL;
  cr_assert_eq(
      get(NS "/pods?labelSelector=sbx.sandbox%3Dsbx-000000000001", &list), 200);
  expect_str(list, "kind", "PodList");
  cr_expect_not_null(str(list, "metadata.resourceVersion"));
  cr_expect_eq(json_array_size(json_object_get(list, "items")), 1);
  json_decref(list);
  cr_assert_eq(get(NS "/pods?labelSelector=sbx.sandbox%21%3Dsbx-"
                      "000000000001,app.kubernetes.io%2Fmanaged-by",
                   &list),
               200);
  cr_expect_eq(json_array_size(json_object_get(list, "items")), 0);
  json_decref(list);
  cr_assert_eq(get(NS "/pods?fieldSelector=metadata.name%3Dsbx-0", &list), 200);
  cr_expect_eq(json_array_size(json_object_get(list, "items")), 0);
  json_decref(list);

  json_t *missing = NULL;
  cr_expect_eq(get(NS "/pods/sbx-000000000002", &missing), 404);
  expect_status(missing, "NotFound", 404);
  json_decref(missing);
  cr_expect_eq(get("/api/v1/namespaces/elsewhere/pods/x", &missing), 404);
  expect_str(missing, "message",
             "namespaces \"elsewhere\" not "
             "found");
  json_decref(missing);
  json_decref(pod);
}

/* A bad object: 422 Invalid naming FIELD among its causes. */
static void expect_invalid(const char *path, json_t *obj, const char *field) {
  json_t *s = NULL;
  cr_assert_eq(test_kube_call(&kube, "POST", path, NULL, obj, &s), 422);
  expect_status(s, "Invalid", 422);
  bool named = false;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(json_object_get(s, "details"), "causes"),
                     i, c) named |=
      str(c, "field") && strcmp(str(c, "field"), field) == 0;
  cr_expect(named, "no cause names %s: %s", field, str(s, "message"));
  json_decref(s);
  json_decref(obj);
}

Test(kube_fixture, invalid_objects_refused_with_their_fields) {
  expect_invalid(NS "/pods", backend_pod("Sbx_Bad", NULL), "metadata.name");
  json_t *p = backend_pod("sbx-000000000003", NULL);
  json_object_del(
      json_array_get(json_object_get(json_object_get(p, "spec"), "containers"),
                     0),
      "image");
  expect_invalid(NS "/pods", p, "spec.containers[0].image");
  p = backend_pod("sbx-000000000003", NULL);
  json_object_set_new(json_object_get(json_object_get(p, "metadata"), "labels"),
                      "sbx.pool", json_string("not a label value"));
  expect_invalid(NS "/pods", p, "metadata.labels");
  json_t *s = secret("sbx-000000000003", "x", NULL);
  json_object_del(json_array_get(json_object_get(json_object_get(s, "metadata"),
                                                 "ownerReferences"),
                                 0),
                  "uid");
  expect_invalid(NS "/secrets", s, "metadata.ownerReferences[0].uid");

  json_t *bad = secret("sbx-000000000003", NULL, NULL);
  json_object_set_new(json_object_get(bad, "data"), "token",
                      json_string("not base64!"));
  json_t *st = NULL;
  cr_expect_eq(test_kube_call(&kube, "POST", NS "/secrets", NULL, bad, &st),
               400, "a decode error, as on a real server");
  expect_status(st, "BadRequest", 400);
  json_decref(st);
  json_decref(bad);
  json_t *none = NULL;
  cr_expect_eq(get(NS "/pods", &none), 200);
  cr_expect_eq(json_array_size(json_object_get(none, "items")), 0,
               "nothing refused was stored");
  json_decref(none);
}

Test(kube_fixture, merge_patch_with_resource_version_precondition) {
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000004", NULL));
  char patch_text[256];
  (void)snprintf(patch_text, sizeof(patch_text),
                 "{\"metadata\": {\"resourceVersion\": \"%s\", \"labels\": "
                 "{\"sbx.warm\": \"false\", \"sbx.claimed\": \"c1\"}}}",
                 "1");
  json_t *stale = json_loads(patch_text, 0, NULL);
  json_t *s = NULL;
  const char *merge = "application/merge-patch+json";
  cr_expect_eq(test_kube_call(&kube, "PATCH", NS "/pods/sbx-000000000004",
                              merge, stale, &s),
               409);
  expect_status(s, "Conflict", 409);
  json_decref(s);
  json_decref(stale);
  (void)snprintf(patch_text, sizeof(patch_text),
                 "{\"metadata\": {\"resourceVersion\": \"%s\", \"labels\": "
                 "{\"sbx.warm\": \"false\", \"sbx.claimed\": \"c1\"}}}",
                 str(pod, "metadata.resourceVersion"));
  json_t *fresh = json_loads(patch_text, 0, NULL);
  cr_expect_eq(test_kube_call(&kube, "PATCH", NS "/pods/sbx-000000000004",
                              "application/json-patch+json", fresh, &s),
               415, "only merge patches");
  json_decref(s);
  cr_assert_eq(test_kube_call(&kube, "PATCH", NS "/pods/sbx-000000000004",
                              merge, fresh, &s),
               200);
  json_t *labels = json_object_get(json_object_get(s, "metadata"), "labels");
  json_t *want = json_pack("{s:s,s:s,s:s,s:s}", "app.kubernetes.io/managed-by",
                           "sbx", "sbx.sandbox", "sbx-000000000004", "sbx.warm",
                           "false", "sbx.claimed", "c1");
  cr_expect(json_equal(labels, want), "a merge keeps the other labels");
  json_decref(want);
  cr_expect_gt(atol(str(s, "metadata.resourceVersion")),
               atol(str(pod, "metadata.resourceVersion")));
  json_decref(s);
  cr_expect_eq(test_kube_call(&kube, "PATCH", NS "/pods/sbx-000000000004",
                              merge, fresh, &s),
               409, "the same claim again: the version moved on");
  json_decref(s);
  json_decref(fresh);
  json_decref(pod);
}

static const char *event_type(json_t *events, size_t i) {
  return str(json_array_get(events, i), "type");
}

static long event_rv(json_t *events, size_t i) {
  const char *rv =
      str(json_array_get(events, i), "object.metadata.resourceVersion");
  return rv ? atol(rv) : -1;
}

Test(kube_fixture, watch_from_a_version_gets_later_events_in_order) {
  json_t *list = NULL;
  cr_assert_eq(get(NS "/pods", &list), 200);
  char from[32];
  (void)snprintf(from, sizeof(from), "%s",
                 str(list, "metadata.resourceVersion"));
  json_decref(list);
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000005", NULL));
  json_decref(create(NS "/pods", backend_pod("sbx-000000000006", NULL)));
  char patch[160];
  (void)snprintf(patch, sizeof(patch),
                 "{\"metadata\": {\"labels\": {\"sbx.claimed\": \"c2\"}}}");
  json_t *p = json_loads(patch, 0, NULL), *r = NULL;
  cr_assert_eq(test_kube_call(&kube, "PATCH", NS "/pods/sbx-000000000005",
                              "application/merge-patch+json", p, &r),
               200);
  json_decref(p);
  json_decref(r);
  cr_assert_eq(test_kube_call(&kube, "DELETE", NS "/pods/sbx-000000000005",
                              NULL, NULL, &r),
               200);
  cr_expect_not_null(str(r, "metadata.deletionTimestamp"));
  json_decref(r);

  char path[256];
  (void)snprintf(path, sizeof(path),
                 NS "/pods?watch=1&fieldSelector=metadata.name%%3Dsbx-"
                    "000000000005&resourceVersion=%s&timeoutSeconds=1",
                 from);
  json_t *ev = NULL;
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  size_t n = json_array_size(ev);
  cr_assert_geq(n, 4, "ADDED, MODIFIED (label), MODIFIED (deleting), DELETED");
  expect_str(json_array_get(ev, 0), "type", "ADDED");
  expect_str(json_array_get(ev, 1), "type", "MODIFIED");
  json_t *labels = json_object_get(
      json_object_get(json_object_get(json_array_get(ev, 1), "object"),
                      "metadata"),
      "labels");
  cr_expect_str_eq(
      json_string_value(json_object_get(labels, "sbx.claimed")) ?: "", "c2");
  cr_expect_str_eq(event_type(ev, n - 1) ?: "", "DELETED");
  for (size_t i = 0; i < n; i++) {
    expect_str(json_array_get(ev, i), "object.metadata.name",
               "sbx-000000000005");
    if (i)
      cr_expect_gt(event_rv(ev, i), event_rv(ev, i - 1), "event %zu", i);
  }
  cr_expect_gt(event_rv(ev, 0), atol(from));
  json_decref(ev);

  /* From the RV of the first event: the rest only. */
  char rv1[32];
  (void)snprintf(rv1, sizeof(rv1), "%s", str(pod, "metadata.resourceVersion"));
  (void)snprintf(path, sizeof(path),
                 NS "/pods?watch=1&fieldSelector=metadata.name%%3Dsbx-"
                    "000000000005&resourceVersion=%s&timeoutSeconds=1",
                 rv1);
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  cr_expect_eq(json_array_size(ev), n - 1);
  cr_expect_str_eq(event_type(ev, 0) ?: "", "MODIFIED");
  json_decref(ev);
  json_decref(pod);
}

Test(kube_fixture, watch_from_a_compacted_version_gets_410_expired) {
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000007", NULL));
  json_t *r = NULL;
  cr_assert_eq(
      test_kube_call(&kube, "POST", "/fixture/compact", NULL, NULL, &r), 200);
  json_decref(r);
  char path[256];
  (void)snprintf(path, sizeof(path),
                 NS "/pods?watch=1&resourceVersion=1&timeoutSeconds=5");
  json_t *ev = NULL;
  time_t t0 = time(NULL);
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200,
               "a watch answers 200, the error is its one event");
  cr_expect_lt(time(NULL) - t0, 3, "the stream ends after the error");
  cr_assert_eq(json_array_size(ev), 1);
  expect_str(json_array_get(ev, 0), "type", "ERROR");
  json_t *st = json_object_get(json_array_get(ev, 0), "object");
  expect_status(st, "Expired", 410);
  json_decref(ev);
  /* From the current version: fine, and a GET gives that version. */
  json_t *now = NULL;
  cr_assert_eq(get(NS "/pods/sbx-000000000007", &now), 200);
  (void)snprintf(path, sizeof(path),
                 NS "/pods?watch=1&resourceVersion=%s&timeoutSeconds=1",
                 str(now, "metadata.resourceVersion"));
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  cr_expect_eq(json_array_size(ev), 0);
  json_decref(ev);
  json_decref(now);
  json_decref(pod);
}

Test(kube_fixture, watch_length_and_history_from_the_command_line) {
  test_kube_stop(&kube);
  const char *args[] = {"--watch-seconds", "1", "--history", "2", NULL};
  test_kube_start_with(&kube, false, args);
  json_t *first = create(NS "/pods", backend_pod("sbx-000000000010", NULL));
  char path[256];
  (void)snprintf(path, sizeof(path), NS "/pods/sbx-000000000010?watch=1");
  time_t t0 = time(NULL);
  json_t *ev = NULL;
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  cr_expect_leq(time(NULL) - t0, 3, "--watch-seconds 1 ends the stream");
  cr_assert_eq(json_array_size(ev), 1, "one object's watch: that Pod");
  expect_str(json_array_get(ev, 0), "object.metadata.name", "sbx-000000000010");
  json_decref(ev);
  json_decref(create(NS "/pods", backend_pod("sbx-000000000011", NULL)));
  json_decref(create(NS "/pods", backend_pod("sbx-000000000012", NULL)));
  (void)snprintf(path, sizeof(path), NS "/pods?watch=1&resourceVersion=%s",
                 str(first, "metadata.resourceVersion"));
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  cr_assert_eq(json_array_size(ev), 2, "--history 2 keeps two events");
  json_decref(ev);
  (void)snprintf(path, sizeof(path), NS "/pods?watch=1&resourceVersion=%ld",
                 atol(str(first, "metadata.resourceVersion")) - 1);
  cr_assert_eq(test_kube_watch(&kube, path, &ev), 200);
  cr_assert_eq(json_array_size(ev), 1);
  expect_status(json_object_get(json_array_get(ev, 0), "object"), "Expired",
                410);
  json_decref(ev);
  json_decref(first);
}

static void *end_watches_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 500 * 1000 * 1000};
  nanosleep(&ts, NULL);
  json_t *r = NULL;
  test_kube_call(&kube, "POST", "/fixture/end-watches", NULL, NULL, &r);
  json_decref(r);
  return NULL;
}

Test(kube_fixture, watch_without_version_lists_first_and_can_be_ended) {
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000008", NULL));
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, end_watches_later, NULL), 0);
  time_t t0 = time(NULL);
  json_t *ev = NULL;
  cr_assert_eq(
      test_kube_watch(&kube, NS "/pods?watch=true&timeoutSeconds=20", &ev),
      200);
  pthread_join(t, NULL);
  cr_expect_lt(time(NULL) - t0, 5, "ended by /fixture/end-watches");
  cr_assert_eq(json_array_size(ev), 1, "the Pod there, as ADDED");
  expect_str(json_array_get(ev, 0), "type", "ADDED");
  expect_str(json_array_get(ev, 0), "object.kind", "Pod");
  json_decref(ev);
  json_decref(pod);
}

static void expect_gone(const char *path) {
  json_t *r = NULL;
  long code = 0;
  for (int i = 0; i < 100; i++) {
    code = get(path, &r);
    json_decref(r);
    if (code == 404)
      break;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  cr_expect_eq(code, 404, "%s is still there", path);
}

Test(kube_fixture, pod_deletion_collects_its_secret_and_network_policy) {
  json_t *pod = create(NS "/pods", backend_pod("sbx-000000000009", NULL));
  const char *uid = str(pod, "metadata.uid");
  const char *keys[] = {"token", "0123456789abcdef0123", NULL};
  json_decref(create(NS "/secrets", secret("sbx-000000000009", uid, keys)));
  json_decref(create(NS "/secrets", secret("sbx-unowned", NULL, keys)));
  json_t *np = json_pack(
      "{s:s,s:s,s:{s:s,s:o},s:{s:{s:{s:s}},s:[ss],s:[{}],s:[]}}", "apiVersion",
      "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata", "name",
      "sbx-000000000009", "ownerReferences", owner("sbx-000000000009", uid),
      "spec", "podSelector", "matchLabels", "sbx.sandbox", "sbx-000000000009",
      "policyTypes", "Ingress", "Egress", "ingress", "egress");
  json_decref(create(NETPOLS "/networkpolicies", np));

  json_t *ready =
      test_kube_wait_pod(&kube, "sbx-000000000009", test_kube_pod_ready, 10000);
  cr_assert(test_kube_pod_ready(ready), "once its Secret exists");
  const char *ip = str(ready, "status.podIP");
  cr_expect(ip && strncmp(ip, "127.0.0.", 8) == 0 &&
                strtol(ip + 8, NULL, 10) >= 20,
            "podIP %s", ip ? ip : "(none)");
  expect_str(ready, "status.phase", "Running");
  json_decref(ready);

  json_t *r = NULL;
  json_t *opts =
      json_pack("{s:s,s:s,s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                "propagationPolicy", "Background");
  cr_assert_eq(test_kube_call(&kube, "DELETE", NS "/pods/sbx-000000000009",
                              NULL, opts, &r),
               200);
  json_decref(opts);
  json_decref(r);
  expect_gone(NS "/pods/sbx-000000000009");
  expect_gone(NS "/secrets/sbx-000000000009");
  expect_gone(NETPOLS "/networkpolicies/sbx-000000000009");
  cr_expect_eq(get(NS "/secrets/sbx-unowned", &r), 200,
               "what the Pod does not own stays");
  json_decref(r);
  json_decref(pod);

  json_t *log = test_kube_requests(&kube, "POST", NETPOLS);
  cr_assert_eq(json_array_size(log), 1);
  expect_str(json_array_get(log, 0), "body.metadata.name", "sbx-000000000009");
  expect_str(json_array_get(log, 0), "content_type", "application/json");
  json_decref(log);
}

/* With podman: the Pods run. */

static void need_engine(void) {
  const char *h = getenv("DOCKER_HOST");
  if (!h || !*h)
    cr_assert_fail("DOCKER_HOST is unset: the kube fixture's podman tests "
                   "need the engine and images of scripts/containers.sh; "
                   "run it and export the DOCKER_HOST it prints (`make "
                   "check` does both)");
}

static void start_podman(void) {
  need_engine();
  test_kube_start(&kube, true);
}

TestSuite(kube_podman, .init = start_podman, .fini = stop_api, .timeout = 300);

static char *slurp(const char *path) {
  char *data = NULL;
  size_t n = 0;
  cr_assert_eq(sbx_read_file(path, 1 << 20, &data, &n), 0, "read %s", path);
  return data;
}

/* Exists (0) or not (non-zero): `podman pod exists NAME`. */
static int podman_pod_exists(const char *name) {
  char cmd[128];
  (void)snprintf(cmd, sizeof(cmd), "podman pod exists %s", name);
  return system(cmd);
}

Test(kube_podman, sandboxd_pod_becomes_ready_and_answers_over_tls) {
  char dir[] = "/tmp/sbx-kube-ca-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char ca[64], p[6][96];
  struct sbx_error e = {0};
  (void)snprintf(ca, sizeof(ca), "%s/ca", dir);
  bool made;
  cr_assert_eq(ca_init(ca, &made, &e), 0, "%s", e.msg);
  char name[17];
  sandbox_name(name);
  const char *files[] = {"tls.crt",    "tls.key", "client.crt",
                         "client.key", "ca.pem",  "token"};
  for (int i = 0; i < 6; i++)
    (void)snprintf(p[i], sizeof(p[i]), "%s/%s", dir, files[i]);
  int64_t now = time(NULL);
  cr_assert_eq(
      ca_issue(ca, CA_SERVER, name, now - 60, now + 3600, p[0], p[1], NULL, &e),
      0, "%s", e.msg);
  cr_assert_eq(ca_issue(ca, CA_CLIENT, "controller", now - 60, now + 3600, p[2],
                        p[3], NULL, &e),
               0, "%s", e.msg);
  cr_assert_eq(ca_write_bundle(ca, p[4], &e), 0, "%s", e.msg);
  char token[33];
  cr_assert_eq(sbx_random_hex(token, 16), 0);

  json_t *pod = create(NS "/pods", backend_pod(name, NULL));
  char *crt = slurp(p[0]), *key = slurp(p[1]), *bundle = slurp(p[4]);
  const char *keys[] = {"token", token,    "tls.crt", crt, "tls.key",
                        key,     "ca.pem", bundle,    NULL};
  json_decref(
      create(NS "/secrets", secret(name, str(pod, "metadata.uid"), keys)));
  free(crt);
  free(key);
  free(bundle);
  json_t *ready = test_kube_wait_pod(&kube, name, test_kube_pod_ready, 120000);
  cr_assert(test_kube_pod_ready(ready), "not ready: %s",
            ready ? json_dumps(json_object_get(ready, "status"), 0) : "gone");
  const char *ip = str(ready, "status.podIP");
  cr_assert(ip && strncmp(ip, "127.0.0.", 8) == 0 &&
            strtol(ip + 8, NULL, 10) >= 20);
  expect_str(ready, "status.phase", "Running");

  char url[64];
  (void)snprintf(url, sizeof(url), "tls+tcp://%s:7443", ip);
  struct sbx_client_config cfg = {
      .url = url,
      .token = (const uint8_t *)token,
      .token_len = strlen(token),
      .tls_ca = p[4],
      .tls_cert = p[2],
      .tls_key = p[3],
      .tls_server_name = name,
      .timeout_ms = 5000,
      .retries = 2,
  };
  struct sbx_client *c = NULL;
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "%s", e.msg);
  cr_expect_eq(sbx_hello(c, NULL, &e), 0, "hello over %s: %s", url, e.msg);
  sbx_client_free(c);
  json_decref(ready);

  cr_expect_eq(podman_pod_exists(name), 0);
  json_t *r = NULL;
  cr_assert_eq(test_kube_call(&kube, "DELETE", NS "/pods/", NULL, NULL, &r),
               405);
  json_decref(r);
  char path[96];
  (void)snprintf(path, sizeof(path), NS "/pods/%s", name);
  cr_assert_eq(test_kube_call(&kube, "DELETE", path, NULL, NULL, &r), 200);
  json_decref(r);
  expect_gone(path);
  cr_expect_neq(podman_pod_exists(name), 0, "its podman pod is removed");
  json_decref(pod);
  char cmd[96];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

/* A Pod running sh -c SCRIPT with the Secret KEYS: the Pod once finished. */
static json_t *run_script(const char *script, const char *const *keys) {
  char name[17];
  sandbox_name(name);
  json_t *pod =
      create(NS "/pods",
             backend_pod(name, json_pack("[sss]", "/bin/sh", "-c", script)));
  json_decref(
      create(NS "/secrets", secret(name, str(pod, "metadata.uid"), keys)));
  json_decref(pod);
  json_t *done =
      test_kube_wait_pod(&kube, name, test_kube_pod_finished, 120000);
  cr_assert(test_kube_pod_finished(done), "not finished: %s",
            done ? json_dumps(json_object_get(done, "status"), 0) : "gone");
  return done;
}

static json_t *terminated(json_t *pod) {
  return json_object_get(
      json_object_get(
          json_array_get(json_object_get(json_object_get(pod, "status"),
                                         "containerStatuses"),
                         0),
          "state"),
      "terminated");
}

Test(kube_podman, exited_container_fails_the_pod_with_its_exit_code) {
  const char *keys[] = {"token", "x", NULL};
  json_t *pod = run_script("exit 3", keys);
  expect_str(pod, "status.phase", "Failed");
  json_t *t = terminated(pod);
  cr_expect_eq(json_integer_value(json_object_get(t, "exitCode")), 3);
  expect_str(t, "reason", "Error");
  json_decref(pod);
}

Test(kube_podman, secret_files_come_decoded_with_their_mode) {
  const char *keys[] = {"token", "s3cret-token", "tls.crt",
                        "-----BEGIN X-----\nabc\n", NULL};
  json_t *pod = run_script(
      "test \"$(cat /etc/sbx/token)\" = s3cret-token && "
      "test \"$(stat -c %a /etc/sbx/token)\" = 400 && "
      "test \"$(head -n1 /etc/sbx/tls.crt)\" = '-----BEGIN X-----' && "
      "touch /workspace/w && test ! -e /workspace/../w && "
      "test \"$(grep CapEff /proc/self/status | cut -f2)\" = 00000000000000eb",
      keys);
  expect_str(pod, "status.phase", "Succeeded");
  json_t *t = terminated(pod);
  cr_expect_eq(json_integer_value(json_object_get(t, "exitCode")), 0);
  expect_str(t, "reason", "Completed");
  json_decref(pod);
}

Test(kube_podman, missing_image_leaves_the_pod_pending_with_the_reason) {
  char name[17];
  sandbox_name(name);
  json_t *body = backend_pod(name, NULL);
  json_object_set_new(
      json_array_get(
          json_object_get(json_object_get(body, "spec"), "containers"), 0),
      "image", json_string("localhost/sbx-no-such-image:latest"));
  json_t *pod = create(NS "/pods", body);
  const char *keys[] = {"token", "x", NULL};
  json_decref(
      create(NS "/secrets", secret(name, str(pod, "metadata.uid"), keys)));
  json_decref(pod);
  json_t *p = NULL;
  for (int i = 0; i < 300; i++) {
    json_decref(p);
    p = test_kube_wait_pod(&kube, name, test_kube_pod_finished, 0);
    json_t *w = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(p, "status"),
                                           "containerStatuses"),
                           0),
            "state"),
        "waiting");
    if (w)
      break;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  expect_str(p, "status.phase", "Pending");
  json_t *w = json_object_get(
      json_object_get(
          json_array_get(json_object_get(json_object_get(p, "status"),
                                         "containerStatuses"),
                         0),
          "state"),
      "waiting");
  expect_str(w, "reason", "ErrImageNeverPull");
  cr_expect_not_null(str(w, "message"));
  json_decref(p);
}

Test(kube_podman, unanswered_readiness_probe_fails_the_pod) {
  test_kube_stop(&kube);
  const char *args[] = {"--probe-seconds", "2", NULL};
  test_kube_start_with(&kube, true, args);
  const char *keys[] = {"token", "x", NULL};
  json_t *pod = run_script("exec sleep 60", keys);
  expect_str(pod, "status.phase", "Failed");
  expect_str(pod, "status.reason", "ReadinessProbeTimeout");
  cr_expect_not_null(str(pod, "status.message"));
  cr_expect(!test_kube_pod_ready(pod));
  json_decref(pod);
}
