/* deploy/kubernetes/ checked the way the kubernetes backend is: every
 * manifest read as YAML (as the backend reads a kubeconfig), the names the
 * Deployment refers to defined there, the Role granting exactly what the
 * backend asks of the API (read off the fixture API server's log of a
 * sandbox's whole life, warm pool included), and the Deployment's Pod run
 * for real (tests/support/kube_api.py's kubelet, podman kube play): sbx
 * serve from deploy/Containerfile.server with the test's CA, certificate
 * and an SQLite store, answering GET /healthz over HTTPS. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/kubernetes/kube_internal.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "tests/support/kube_api.h"
#include "tests/support/sbxrun.h"

#define DEPLOY SBX_SOURCE_DIR "/deploy/kubernetes"
#define SANDBOX_IMAGE "localhost/sbx-debian:latest"
#define SERVER_IMAGE "localhost/sbx-server:latest"

static struct test_kube kube;
static char tmp[64];
static json_t *objs; /* every manifest's documents */

/* The manifests' fields that are numbers or booleans: the YAML reader
 * makes every scalar a string, where the API server's decoder types them
 * by its schema (an octal mode like 0440 included, as YAML 1.1 reads it). */
static const char *const int_keys[] = {"replicas",
                                       "containerPort",
                                       "port",
                                       "targetPort",
                                       "periodSeconds",
                                       "failureThreshold",
                                       "runAsUser",
                                       "runAsGroup",
                                       "fsGroup",
                                       "defaultMode",
                                       "terminationGracePeriodSeconds",
                                       NULL};
static const char *const bool_keys[] = {"readOnly",
                                        "allowPrivilegeEscalation",
                                        "readOnlyRootFilesystem",
                                        "runAsNonRoot",
                                        "automountServiceAccountToken",
                                        "enableServiceLinks",
                                        NULL};

static bool listed(const char *const *keys, const char *k) {
  for (; *keys; keys++)
    if (!strcmp(*keys, k))
      return true;
  return false;
}

/* Types O's scalars in place by their keys (see int_keys). */
static void typed(json_t *o) {
  const char *k;
  json_t *v;
  size_t i;
  if (json_is_array(o)) {
    json_array_foreach(o, i, v) {
      typed(v);
    }
    return;
  }
  json_object_foreach(o, k, v) {
    const char *sv = json_string_value(v);
    if (!sv) {
      typed(v);
      continue;
    }
    char *end = NULL;
    long n = strtol(sv, &end, sv[0] == '0' && sv[1] ? 8 : 10);
    if (listed(int_keys, k) && *sv && !*end)
      json_object_set_new(o, k, json_integer(n));
    else if (listed(bool_keys, k))
      json_object_set_new(o, k, json_boolean(!strcmp(sv, "true")));
  }
}

/* The documents of FILE, each parsed, appended to OBJS. */
static void load_file(const char *file) {
  char path[512];
  (void)snprintf(path, sizeof(path), "%s/%s", DEPLOY, file);
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(path, 1u << 20, &text, &len), 0, "%s", path);
  for (char *doc = text; doc;) {
    char *sep = strstr(doc, "\n---\n");
    size_t n = sep ? (size_t)(sep - doc) + 1 : strlen(doc);
    json_t *j = NULL;
    struct sbx_error e = {0};
    cr_assert_eq(kube_yaml_to_json(doc, n, &j, &e), 0, "%s: %s", file, e.msg);
    if (json_is_object(j)) {
      typed(j);
      (void)json_object_set_new(j, "_file", json_string(file));
      json_array_append_new(objs, j);
    } else {
      json_decref(j);
    }
    doc = sep ? sep + 5 : NULL;
  }
}

static void setup(void) {
  objs = json_array();
  DIR *d = opendir(DEPLOY);
  cr_assert_not_null(d);
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".yaml"))
      load_file(de->d_name);
  closedir(d);
  (void)snprintf(tmp, sizeof(tmp), "/tmp/sbx-kdeploy-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp));
}

static void teardown(void) {
  json_decref(objs);
  test_kube_stop(&kube);
  (void)test_rm_rf(tmp);
}

TestSuite(kube_deploy, .init = setup, .fini = teardown, .timeout = 300);

static const char *str(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* The object of KIND named NAME, borrowed; NULL when none. */
static json_t *find(const char *kind, const char *name) {
  size_t i;
  json_t *o;
  json_array_foreach(objs, i, o) {
    if (!strcmp(str(o, "kind"), kind) &&
        !strcmp(str(json_object_get(o, "metadata"), "name"), name))
      return o;
  }
  return NULL;
}

static json_t *path(json_t *o, const char *const *keys) {
  for (; o && *keys; keys++)
    o = json_object_get(o, *keys);
  return o;
}

Test(kube_deploy, every_manifest_is_whole_and_refers_to_what_is_here) {
  cr_assert_geq(json_array_size(objs), 9, "the manifests' objects");
  size_t i;
  json_t *o;
  json_array_foreach(objs, i, o) {
    const char *kind = str(o, "kind"), *file = str(o, "_file");
    json_t *meta = json_object_get(o, "metadata");
    cr_expect(str(o, "apiVersion") && kind && str(meta, "name"),
              "%s: an object without apiVersion, kind or name", file);
    if (kind && strcmp(kind, "Namespace") != 0)
      cr_expect_str_eq(str(meta, "namespace"), "sbx", "%s: %s", file, kind);
  }
  json_t *dep = find("Deployment", "sbx");
  cr_assert_not_null(dep);
  json_t *pod = path(dep, (const char *const[]){"spec", "template", NULL});
  json_t *spec = json_object_get(pod, "spec");
  /* The selector, the Pod's labels, the Service's selector and the label
   * the sandboxes' NetworkPolicies let in agree. */
  const char *const lbl[] = {"metadata", "labels", "app.kubernetes.io/name",
                             NULL};
  cr_expect_str_eq(json_string_value(path(pod, lbl)), "sbx");
  cr_expect_str_eq(
      json_string_value(
          path(dep, (const char *const[]){"spec", "selector", "matchLabels",
                                          "app.kubernetes.io/name", NULL})),
      "sbx");
  json_t *svc = find("Service", "sbx");
  cr_assert_not_null(svc);
  cr_expect_str_eq(
      json_string_value(
          path(svc, (const char *const[]){"spec", "selector",
                                          "app.kubernetes.io/name", NULL})),
      "sbx");
  cr_expect_not_null(find("ServiceAccount", str(spec, "serviceAccountName")));
  json_t *rb = find("RoleBinding", "sbx-sandboxes");
  cr_assert_not_null(rb);
  cr_expect_not_null(
      find("Role", json_string_value(path(
                       rb, (const char *const[]){"roleRef", "name", NULL}))));
  /* Every Secret it names is in secrets.example.yaml. */
  json_t *v;
  json_array_foreach(json_object_get(spec, "volumes"), i, v) {
    const char *s = str(json_object_get(v, "secret"), "secretName");
    if (s)
      cr_expect_not_null(find("Secret", s), "volume %s: no Secret %s",
                         str(v, "name"), s);
  }
  json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
  json_array_foreach(json_object_get(c, "envFrom"), i, v) {
    const char *s = str(json_object_get(v, "secretRef"), "name");
    cr_expect_not_null(find("Secret", s), "envFrom: no Secret %s", s);
  }
}

/* The RBAC verb of one logged request, and its resource, into VERB and
 * RES; false for a request no rule covers (discovery). */
static bool verb_of(json_t *req, char *verb, char *res, size_t n) {
  const char *m = str(req, "method"), *p = str(req, "path");
  const char *ns = strstr(p, "/namespaces/");
  if (!ns)
    return false;
  const char *r = strchr(ns + strlen("/namespaces/"), '/');
  if (!r)
    return false;
  r++;
  size_t rl = strcspn(r, "/");
  bool item = r[rl] == '/';
  (void)snprintf(res, n, "%.*s", (int)rl, r);
  json_t *q = json_object_get(req, "query");
  bool watch = json_object_get(q, "watch") != NULL;
  const char *w = !strcmp(m, "POST")     ? "create"
                  : !strcmp(m, "PATCH")  ? "patch"
                  : !strcmp(m, "DELETE") ? "delete"
                  : watch                ? "watch"
                  : item                 ? "get"
                                         : "list";
  (void)snprintf(verb, n, "%s", w);
  return true;
}

/* Runs the backend through a sandbox's life against the fixture: a cold
 * create with a warm pool of one, exec, rm, then a create that claims the
 * warm Pod, rm. */
static void backend_life(void) {
  char state[128], cadir[128];
  (void)snprintf(state, sizeof(state), "%s/state", tmp);
  (void)snprintf(cadir, sizeof(cadir), "%s/ca", tmp);
  for (int i = 0; i < 2; i++) {
    const char *argv[] = {"create",
                          "--backend",
                          "kubernetes",
                          "--kubeconfig",
                          kube.kubeconfig,
                          "--ca-dir",
                          cadir,
                          "--image",
                          SANDBOX_IMAGE,
                          "--image-pull-policy",
                          "Never",
                          "--warm-pool",
                          "1",
                          NULL};
    struct sbx_run_out r;
    sbx_sandbox_run(&r, state, argv);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    char id[64];
    (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
    sbx_run_free(&r);
    const char *ex[] = {"exec", id, "--", "true", NULL};
    sbx_sandbox_run(&r, state, ex);
    cr_expect_eq(r.status, 0, "stderr: %s", r.err);
    sbx_run_free(&r);
    /* The pool's Pod made after the first create is Ready before the
     * second claims it. */
    for (int k = 0; i == 0 && k < 300; k++) {
      json_t *list = NULL;
      long st = test_kube_call(&kube, "GET",
                               "/api/v1/namespaces/" TEST_KUBE_NAMESPACE
                               "/pods?labelSelector=sbx.warm%3Dtrue",
                               NULL, NULL, &list);
      json_t *first = json_array_get(json_object_get(list, "items"), 0);
      bool ready = st == 200 && first && test_kube_pod_ready(first);
      json_decref(list);
      if (ready)
        break;
      usleep(100000);
    }
    const char *rm[] = {"rm", id, NULL};
    sbx_sandbox_run(&r, state, rm);
    cr_expect_eq(r.status, 0, "stderr: %s", r.err);
    sbx_run_free(&r);
  }
}

/* Whether the Role's rules grant VERB on RES. */
static bool granted(json_t *role, const char *verb, const char *res) {
  size_t i, j, k;
  json_t *rule, *r, *v;
  json_array_foreach(json_object_get(role, "rules"), i, rule) {
    json_array_foreach(json_object_get(rule, "resources"), j, r) {
      if (strcmp(json_string_value(r), res) != 0)
        continue;
      json_array_foreach(json_object_get(rule, "verbs"), k, v) {
        if (!strcmp(json_string_value(v), verb))
          return true;
      }
    }
  }
  return false;
}

Test(kube_deploy, the_role_grants_exactly_what_the_backend_asks) {
  if (geteuid() != 0 || system("podman image exists " SANDBOX_IMAGE) != 0)
    cr_assert_fail("needs root and podman with " SANDBOX_IMAGE
                   " (bash scripts/containers.sh start builds it)");
  test_kube_start(&kube, true);
  backend_life();
  json_t *role = find("Role", "sbx-sandboxes");
  cr_assert_not_null(role);
  _cleanup_json_ json_t *log = test_kube_requests(&kube, NULL, NULL);
  _cleanup_json_ json_t *used = json_object();
  size_t i;
  json_t *req;
  json_array_foreach(log, i, req) {
    char verb[32], res[64], key[100];
    if (!verb_of(req, verb, res, sizeof(res)))
      continue;
    cr_expect(granted(role, verb, res), "the Role lacks %s on %s", verb, res);
    (void)snprintf(key, sizeof(key), "%s %s", verb, res);
    json_object_set_new(used, key, json_true());
  }
  /* And nothing more: every verb it grants was asked for. */
  json_t *rule, *r, *v;
  size_t j, k;
  json_array_foreach(json_object_get(role, "rules"), i, rule) {
    json_array_foreach(json_object_get(rule, "resources"), j, r) {
      json_array_foreach(json_object_get(rule, "verbs"), k, v) {
        char key[100];
        (void)snprintf(key, sizeof(key), "%s %s", json_string_value(v),
                       json_string_value(r));
        cr_expect_not_null(json_object_get(used, key),
                           "the Role grants %s, which the backend never asks",
                           key);
      }
    }
  }
}

/* The Secret OBJ of secrets.example.yaml (borrowed) with the test's
 * VALUES (name, value, ..., NULL) as its data, in the fixture's
 * namespace: the example must name exactly those keys. */
static void post_secret(json_t *obj, const char *const *values) {
  json_t *s = json_deep_copy(obj);
  json_t *meta = json_object_get(s, "metadata");
  json_object_set_new(meta, "namespace", json_string(TEST_KUBE_NAMESPACE));
  json_object_del(s, "_file");
  json_t *example = json_object_get(s, "stringData");
  json_t *data = json_object();
  size_t n = 0;
  for (; values[n]; n += 2) {
    cr_expect_not_null(json_object_get(example, values[n]),
                       "secrets.example.yaml: %s has no %s", str(meta, "name"),
                       values[n]);
    size_t len = strlen(values[n + 1]);
    char *b64 = malloc(sbx_base64_encoded_size(len));
    cr_assert_not_null(b64);
    sbx_base64_encode(values[n + 1], len, b64);
    json_object_set_new(data, values[n], json_string(b64));
    free(b64);
  }
  cr_expect_eq(json_object_size(example), n / 2,
               "secrets.example.yaml: %s has keys the Deployment does not use",
               str(meta, "name"));
  json_object_del(s, "stringData");
  json_object_set_new(s, "data", data);
  long st = test_kube_call(&kube, "POST",
                           "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/secrets",
                           NULL, s, NULL);
  cr_assert_eq(st, 201, "POST secret %s: %ld", str(meta, "name"), st);
  json_decref(s);
}

/* FILE's text, new. */
static char *slurp(const char *file) {
  char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(file, 1u << 20, &text, &len), 0, "%s", file);
  return text;
}

/* The Deployment's Pod template as a Pod of the fixture's namespace, its
 * images the ones built here. */
static json_t *deployment_pod(void) {
  json_t *dep = find("Deployment", "sbx");
  cr_assert_not_null(dep);
  json_t *tpl = json_deep_copy(
      path(dep, (const char *const[]){"spec", "template", NULL}));
  json_t *meta = json_object_get(tpl, "metadata");
  json_object_set_new(meta, "name", json_string("sbx-deploy-check"));
  json_object_set_new(meta, "namespace", json_string(TEST_KUBE_NAMESPACE));
  json_t *spec = json_object_get(tpl, "spec");
  const char *lists[] = {"initContainers", "containers"};
  for (int l = 0; l < 2; l++) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(spec, lists[l]), i, c) {
      cr_expect_str_eq(str(c, "image"), "sbx-server:latest");
      json_object_set_new(c, "image", json_string(SERVER_IMAGE));
      json_object_set_new(c, "imagePullPolicy", json_string("Never"));
    }
  }
  return tpl;
}

static size_t drop(char *p, size_t sz, size_t n, void *u) {
  (void)p;
  (void)u;
  return sz * n;
}

Test(kube_deploy, the_deployment_serves_the_api) {
  if (geteuid() != 0 || system("podman --version >/dev/null 2>&1") != 0)
    cr_assert_fail("needs root and podman (bash scripts/containers.sh start)");
  cr_assert_eq(system("bash " SBX_SOURCE_DIR "/scripts/containers.sh "
                      "server-image " SBX_BUILD_DIR "/sbx"),
               0, "building " SERVER_IMAGE);
  test_kube_start(&kube, true);
  char ca[128], crt[160], key[160];
  (void)snprintf(ca, sizeof(ca), "%s/ca", tmp);
  (void)snprintf(crt, sizeof(crt), "%s/tls.crt", tmp);
  (void)snprintf(key, sizeof(key), "%s/tls.key", tmp);
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  cr_assert_eq(ca_init(ca, NULL, &e), 0, "%s", e.msg);
  cr_assert_eq(ca_issue(ca, CA_SERVER, "sbx.sbx.svc", now - 60, now + 86400,
                        crt, key, NULL, &e),
               0, "%s", e.msg);
  char cacrt[160], cakey[160];
  (void)snprintf(cacrt, sizeof(cacrt), "%s/ca.crt", ca);
  (void)snprintf(cakey, sizeof(cakey), "%s/ca.key", ca);
  char *t[4] = {slurp(cacrt), slurp(cakey), slurp(crt), slurp(key)};
  post_secret(find("Secret", "sbx-server"),
              (const char *const[]){"SBX_DB", "sqlite:/var/lib/sbx/sbx.db",
                                    "OPENAI_API_KEY", "sk-test", NULL});
  post_secret(find("Secret", "sbx-ca"),
              (const char *const[]){"ca.crt", t[0], "ca.key", t[1], NULL});
  post_secret(find("Secret", "sbx-server-tls"),
              (const char *const[]){"tls.crt", t[2], "tls.key", t[3], NULL});
  for (int i = 0; i < 4; i++)
    free(t[i]);
  _cleanup_json_ json_t *pod = deployment_pod();
  long st = test_kube_call(&kube, "POST",
                           "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods",
                           NULL, pod, NULL);
  cr_assert_eq(st, 201, "POST the Deployment's Pod: %ld", st);
  _cleanup_json_ json_t *got = test_kube_wait_pod(&kube, "sbx-deploy-check",
                                                  test_kube_pod_ready, 120000);
  if (!got || !test_kube_pod_ready(got)) {
    json_t *cs = json_array_get(
        path(got, (const char *const[]){"status", "containerStatuses", NULL}),
        0);
    json_t *state = path(cs, (const char *const[]){"state", NULL});
    char *why = state ? json_dumps(state, JSON_COMPACT) : NULL;
    cr_log_error("the Pod is not ready: %s", why ? why : "gone");
    free(why);
    cr_assert_fail("the Deployment's Pod did not become ready");
  }
  const char *ip = str(json_object_get(got, "status"), "podIP");
  /* GET /healthz over HTTPS, its certificate checked against the CA by
   * the name it was issued for. */
  char resolve[96];
  (void)snprintf(resolve, sizeof(resolve), "sbx.sbx.svc:8443:%s", ip);
  struct curl_slist *rs = curl_slist_append(NULL, resolve);
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  curl_easy_setopt(c, CURLOPT_URL, "https://sbx.sbx.svc:8443/healthz");
  curl_easy_setopt(c, CURLOPT_RESOLVE, rs);
  curl_easy_setopt(c, CURLOPT_CAINFO, cacrt);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
  long code = 0;
  CURLcode rc = CURLE_COULDNT_CONNECT;
  for (int i = 0; i < 50 && code != 200; i++) {
    rc = curl_easy_perform(c);
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200)
      usleep(200000);
  }
  cr_expect_eq(code, 200, "GET /healthz: %s", curl_easy_strerror(rc));
  curl_easy_cleanup(c);
  curl_slist_free_all(rs);
}
