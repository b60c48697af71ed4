/* The kubernetes backend end to end against the fixture API server
 * (tests/support/kube_api.py): HTTPS with a bearer token on 127.0.0.1, the
 * Pods the backend sends run with `podman kube play` (sandboxd of the
 * image localhost/sbx-debian:latest, published on 127.0.0.N), and the
 * built sbx dials them over tls+tcp. Checked: sandbox create, exec and rm
 * with the objects the backend sent and their removal; an agent run that
 * runs a command and applies a patch; the API's errors and a Pod that
 * cannot start surfacing clearly; the warm pool's claims, a 409 on a Pod
 * whose version moved making the claim take the next. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/kubernetes/kube_internal.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "shared/port.h"
#include "tests/support/kube_api.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

#define IMAGE "localhost/sbx-debian:latest"
#define BARE_IMAGE "localhost/sbx-bookworm-rootfs:latest"

static struct test_kube kube;
static char tmp[64], state[128], cadir[128];

static void setup(void) {
  if (geteuid() != 0 || system("podman image exists " IMAGE) != 0)
    cr_skip_test("needs root and podman with the image " IMAGE
                 " (bash scripts/containers.sh start builds it)");
  (void)snprintf(tmp, sizeof(tmp), "/tmp/sbx-kube-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp));
  (void)snprintf(state, sizeof(state), "%s/state", tmp);
  (void)snprintf(cadir, sizeof(cadir), "%s/ca", tmp);
  test_kube_start(&kube, true);
}

static void teardown(void) {
  if (!tmp[0])
    return;
  sbx_sandbox_remove_all(state);
  test_kube_stop(&kube);
  (void)test_rm_rf(tmp);
}

TestSuite(kubernetes, .init = setup, .fini = teardown, .timeout = 240);

/* sbx sandbox create --backend kubernetes ... ARGS; the result in R. */
static void create(struct sbx_run_out *r, const char *const *args) {
  const char *argv[48] = {"create",        "--backend",
                          "kubernetes",    "--kubeconfig",
                          kube.kubeconfig, "--ca-dir",
                          cadir,           "--image",
                          IMAGE,           "--image-pull-policy",
                          "Never"};
  size_t n = 11;
  for (size_t i = 0; args && args[i] && n < 47; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_sandbox_run(r, state, argv);
}

static const char *jstr(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* Whether GET PATH answers 404 within 20 s: deleting a Pod stops it first,
 * then removes it and what it owns, as a real cluster does. */
static bool gone(const char *path) {
  for (int i = 0; i < 200; i++) {
    if (test_kube_call(&kube, "GET", path, NULL, NULL, NULL) == 404)
      return true;
    usleep(100000);
  }
  return false;
}

/* The body of the one logged request METHOD PATH... (borrowed from LOG). */
static json_t *body_of(json_t *log, size_t i) {
  return json_object_get(json_array_get(log, i), "body");
}

Test(kubernetes, create_exec_rm_and_the_objects_sent) {
  struct sbx_run_out r;
  create(&r, NULL);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  char id[64];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);

  const char *ex[] = {"exec", id, "--", "sh", "-c", "pwd; echo made > f; cat f",
                      NULL};
  sbx_sandbox_run(&r, state, ex);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "/workspace\nmade\n");
  sbx_run_free(&r);

  const char *ns = "/api/v1/namespaces/" TEST_KUBE_NAMESPACE;
  char path[256];
  (void)snprintf(path, sizeof(path), "%s/pods", ns);
  _cleanup_json_ json_t *pods = test_kube_requests(&kube, "POST", path);
  cr_assert_eq(json_array_size(pods), 1);
  json_t *pod = body_of(pods, 0);
  const char *name = jstr(json_object_get(pod, "metadata"), "name");
  cr_assert_not_null(name);
  cr_expect_eq(strlen(name), 16);
  json_t *spec = json_object_get(pod, "spec");
  cr_expect_str_eq(jstr(spec, "restartPolicy"), "Never");
  cr_expect(
      json_is_false(json_object_get(spec, "automountServiceAccountToken")));

  /* The Secret and the NetworkPolicy are owned by the Pod made. */
  _cleanup_json_ json_t *got = NULL;
  (void)snprintf(path, sizeof(path), "%s/pods/%s", ns, name);
  cr_assert_eq(test_kube_call(&kube, "GET", path, NULL, NULL, &got), 200);
  const char *uid = jstr(json_object_get(got, "metadata"), "uid");
  (void)snprintf(path, sizeof(path), "%s/secrets", ns);
  _cleanup_json_ json_t *secs = test_kube_requests(&kube, "POST", path);
  cr_assert_eq(json_array_size(secs), 1);
  json_t *owner = json_array_get(
      json_object_get(json_object_get(body_of(secs, 0), "metadata"),
                      "ownerReferences"),
      0);
  cr_expect_str_eq(jstr(owner, "uid"), uid);
  cr_expect_str_eq(jstr(body_of(secs, 0), "type"), "Opaque");
  _cleanup_json_ json_t *pols = test_kube_requests(
      &kube, "POST",
      "/apis/networking.k8s.io/v1/namespaces/" TEST_KUBE_NAMESPACE
      "/networkpolicies");
  cr_assert_eq(json_array_size(pols), 1);
  /* Readiness was watched from the version the create returned. */
  (void)snprintf(path, sizeof(path), "%s/pods", ns);
  _cleanup_json_ json_t *gets = test_kube_requests(&kube, "GET", path);
  bool watched = false;
  size_t i;
  json_t *g;
  json_array_foreach(gets, i, g) {
    json_t *q = json_object_get(g, "query");
    watched |= jstr(q, "watch") && jstr(q, "resourceVersion");
  }
  cr_expect(watched, "no watch with a resourceVersion");
  /* The state directory holds no token: it is read from the Secret. */
  _cleanup_json_ json_t *sec = NULL;
  (void)snprintf(path, sizeof(path), "%s/secrets/%s", ns, name);
  cr_assert_eq(test_kube_call(&kube, "GET", path, NULL, NULL, &sec), 200);
  const char *b64 = jstr(json_object_get(sec, "data"), "token");
  cr_assert_not_null(b64);
  char tok[128] = "";
  long tn = sbx_base64_decode(b64, strlen(b64), tok);
  cr_assert_eq(tn, 64);
  tok[tn] = '\0';
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "grep -rqF %s %s", tok, state);
  cr_expect_neq(system(cmd), 0, "the token is in the state directory");

  const char *rm[] = {"rm", id, NULL};
  sbx_sandbox_run(&r, state, rm);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  (void)snprintf(path, sizeof(path), "%s/pods/%s", ns, name);
  _cleanup_json_ json_t *dels = test_kube_requests(&kube, "DELETE", path);
  cr_assert_eq(json_array_size(dels), 1);
  cr_expect_str_eq(jstr(body_of(dels, 0), "propagationPolicy"), "Background");
  /* The Secret and the NetworkPolicy went with the Pod. */
  (void)snprintf(path, sizeof(path), "%s/secrets/%s", ns, name);
  cr_expect(gone(path), "%s", path);
  (void)snprintf(path, sizeof(path),
                 "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/%s",
                 TEST_KUBE_NAMESPACE, name);
  cr_expect(gone(path), "%s", path);
  (void)snprintf(path, sizeof(path), "%s/pods/%s", ns, name);
  cr_expect(gone(path), "%s", path);
}

/* An image without sandboxd (the bare Debian root filesystem the images
 * are built on) runs the one an init container copies from
 * --sandboxd-image; without it, the Pod cannot start and says so. */
Test(kubernetes, an_image_without_sandboxd_gets_it_from_sandboxd_image) {
  if (system("podman image exists localhost/sbx-sandboxd:latest") != 0 ||
      system("podman image exists " BARE_IMAGE) != 0)
    cr_assert_fail("needs localhost/sbx-sandboxd and " BARE_IMAGE
                   " (bash scripts/containers.sh start builds them)");
  struct sbx_run_out r;
  const char *args[] = {"--image", BARE_IMAGE, "--sandboxd-image",
                        "localhost/sbx-sandboxd:latest", NULL};
  create(&r, args);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  char id[64];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);
  const char *ex[] = {
      "exec", id,   "--",
      "sh",   "-c", "test -e /usr/local/bin/sandboxd || echo not baked; pwd",
      NULL};
  sbx_sandbox_run(&r, state, ex);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "not baked\n/workspace\n");
  sbx_run_free(&r);
  const char *rm[] = {"rm", id, NULL};
  sbx_sandbox_run(&r, state, rm);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  const char *bare[] = {"--image", BARE_IMAGE, "--ready-timeout", "60", NULL};
  create(&r, bare);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "cannot start") || strstr(r.err, "failed"), "%s",
            r.err);
  sbx_run_free(&r);
}

Test(kubernetes, stop_is_refused_and_labels_reach_the_pod) {
  struct sbx_run_out r;
  const char *args[] = {"--label", "team=blue", NULL};
  create(&r, args);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  char id[64];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);
  const char *stop[] = {"stop", id, NULL};
  sbx_sandbox_run(&r, state, stop);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "restartPolicy Never"), "%s", r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *pods = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  json_t *labels =
      json_object_get(json_object_get(body_of(pods, 0), "metadata"), "labels");
  cr_expect_str_eq(jstr(labels, "team"), "blue");
  cr_expect_str_eq(jstr(labels, "app.kubernetes.io/managed-by"), "sbx");
  /* A label Kubernetes would refuse is refused before anything is made. */
  const char *bad[] = {"--label", "team=two words", NULL};
  create(&r, bad);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "cannot label a Pod"), "%s", r.err);
  sbx_run_free(&r);
}

static const char agent_fmt[] =
    "{\"name\": \"Tester\", \"model\": \"test-model\", \"instructions\": "
    "\"Be brief.\", \"run_config\": {\"backend\": \"kubernetes\", "
    "\"kubeconfig\": \"%s\", \"ca_dir\": \"%s\", \"image\": \"" IMAGE "\", "
    "\"image_pull_policy\": \"Never\"},"
    " \"default_manifest\": {\"entries\": {\"notes.txt\": {\"type\": "
    "\"file\", \"content\": \"alpha\\nbeta\\n\"}}}}";

Test(kubernetes, a_run_runs_a_command_and_applies_a_patch) {
  char agent[1024];
  (void)snprintf(agent, sizeof(agent), agent_fmt, kube.kubeconfig, cadir);
  const char *path = test_write_file(tmp, "agent.json", agent);
  char apath[256];
  (void)snprintf(apath, sizeof(apath), "%s", path);
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"apply_patch\": {\"type\": \"update_file\", \"path\": "
      "\"notes.txt\", \"diff\": \"@@\\n alpha\\n-beta\\n+gamma\\n\", "
      "\"call_id\": \"p1\"}},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
      "\"arguments\": {\"cmd\": \"cat notes.txt; pwd\"}}]},"
      " {\"text\": \"done\"}]",
      NULL);
  const char *argv[] = {"run", "--state-dir", state, apath, "Do it.", NULL};
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url, argv);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  const char *o = test_call_output(reqs, 2, "c1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "alpha\ngamma\n/workspace\n") != NULL, "%s", o);
  json_decref(reqs);
  sbx_run_free(&r);
  /* The run's sandbox is gone with its run. */
  _cleanup_json_ json_t *dels = test_kube_requests(&kube, "DELETE", NULL);
  cr_expect_eq(json_array_size(dels), 1);
}

Test(kubernetes, api_errors_and_a_pod_that_cannot_start_are_clear) {
  struct sbx_run_out r;
  const char *img[] = {"--image", "localhost/sbx-no-such-image:0", NULL};
  create(&r, img);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "cannot start") && strstr(r.err, "ErrImageNeverPull"),
            "%s", r.err);
  sbx_run_free(&r);
  /* ...and the Pod it made is deleted again. */
  _cleanup_json_ json_t *dels = test_kube_requests(&kube, "DELETE", NULL);
  cr_expect_eq(json_array_size(dels), 1);

  const char *ns[] = {"--namespace", "elsewhere", NULL};
  create(&r, ns);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "kubernetes: ") && strstr(r.err, "(HTTP 404 from "
                                                           "POST /api/v1/"
                                                           "namespaces/"
                                                           "elsewhere/pods)"),
            "%s", r.err);
  sbx_run_free(&r);

  /* A token the server does not take. */
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(kube.kubeconfig, 1 << 20, &text, &len), 0);
  char *t = strstr(text, kube.token);
  cr_assert_not_null(t);
  memset(t, 'f', strlen(kube.token));
  const char *wrong = test_write_file(tmp, "wrong-kubeconfig", text);
  const char *w[] = {"--kubeconfig", wrong, NULL};
  create(&r, w);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "kubernetes: ") && strstr(r.err, "HTTP 401"), "%s",
            r.err);
  sbx_run_free(&r);
}

/* Pods of the warm pool (labelled sbx.warm=true), as listed. */
static json_t *warm_pods(void) {
  json_t *list = NULL;
  cr_assert_eq(test_kube_call(&kube, "GET",
                              "/api/v1/namespaces/" TEST_KUBE_NAMESPACE
                              "/pods?labelSelector=sbx.warm%3Dtrue",
                              NULL, NULL, &list),
               200);
  json_t *items = json_incref(json_object_get(list, "items"));
  json_decref(list);
  return items;
}

Test(kubernetes, the_warm_pool_is_claimed_and_a_conflict_takes_the_next) {
  struct sbx_run_out r;
  const char *pool[] = {"--warm-pool", "2", NULL};
  create(&r, pool); /* cold: none is warm yet; then the pool is filled */
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *warm = warm_pods();
  cr_assert_eq(json_array_size(warm), 2);
  for (size_t i = 0; i < 2; i++) {
    const char *n =
        jstr(json_object_get(json_array_get(warm, i), "metadata"), "name");
    json_decref(test_kube_wait_pod(&kube, n, test_kube_pod_ready, 60000));
  }
  /* A claim: no new Pod is made for it but the one that tops the pool up. */
  create(&r, pool);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *patches = test_kube_requests(&kube, "PATCH", NULL);
  cr_assert_eq(json_array_size(patches), 1);
  cr_expect_str_eq(jstr(json_array_get(patches, 0), "content_type"),
                   "application/merge-patch+json");
  json_t *md = json_object_get(body_of(patches, 0), "metadata");
  cr_expect_not_null(jstr(md, "resourceVersion"));
  cr_expect_str_eq(jstr(json_object_get(md, "labels"), "sbx.warm"), "false");

  /* Another controller claimed the first Pod listed since: its version
   * moved, the claim gets 409 and takes the next. */
  json_decref(warm);
  warm = warm_pods();
  cr_assert_geq(json_array_size(warm), 2);
  const char *first =
      jstr(json_object_get(json_array_get(warm, 0), "metadata"), "name");
  char path[256];
  (void)snprintf(path, sizeof(path),
                 "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods/%s", first);
  _cleanup_json_ json_t *touch =
      json_pack("{s:{s:{s:s}}}", "metadata", "labels", "other", "claim");
  cr_assert_eq(test_kube_call(&kube, "PATCH", path,
                              "application/merge-patch+json", touch, NULL),
               200);
  struct kube k = {0};
  struct kube_config c = {0};
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(kube.kubeconfig, NULL, NULL, &c, &e), 0, "%s",
               e.msg);
  cr_assert_eq(kube_api_open(&c, &k.api, &e), 0, "%s", e.msg);
  k.ns = c.ns;
  _cleanup_json_ json_t *claimed = NULL;
  cr_assert_eq(kube_pool_try(&k, warm, "test-session", &claimed, &e), 0, "%s",
               e.msg);
  const char *second =
      jstr(json_object_get(json_array_get(warm, 1), "metadata"), "name");
  cr_expect_str_eq(k.name, second);
  cr_expect_str_eq(
      jstr(json_object_get(json_object_get(claimed, "metadata"), "labels"),
           "sbx.claimed"),
      "test-session");
  kube_api_free(k.api);
  kube_config_clear(&c);
}

Test(kubernetes, a_watch_that_ends_is_resumed_and_a_gone_version_read_anew) {
  /* Watch streams that end after 0.3 s: the Pod takes longer than that to
   * run, so its readiness is watched more than once. */
  test_kube_stop(&kube);
  static const char *const extra[] = {"--watch-seconds", "0.3", NULL};
  test_kube_start_with(&kube, true, extra);
  struct sbx_run_out r;
  create(&r, NULL);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *gets = test_kube_requests(
      &kube, "GET", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  size_t watches = 0, i;
  json_t *g;
  json_array_foreach(gets, i, g) {
    json_t *q = json_object_get(g, "query");
    watches += jstr(q, "watch") && jstr(q, "resourceVersion");
  }
  cr_expect_geq(watches, 2, "one watch only: the stream was not resumed");
  _cleanup_json_ json_t *pods = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  const char *name =
      jstr(json_object_get(body_of(pods, 0), "metadata"), "name");
  cr_assert_not_null(name);

  /* A version the server has forgotten: the watch gets 410 Gone, the Pod
   * is read again and found ready. */
  cr_assert_eq(
      test_kube_call(&kube, "POST", "/fixture/compact", NULL, NULL, NULL), 200);
  struct kube_config c = {0};
  struct kube_api *api = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(kube.kubeconfig, NULL, NULL, &c, &e), 0, "%s",
               e.msg);
  cr_assert_eq(kube_api_open(&c, &api, &e), 0, "%s", e.msg);
  _cleanup_json_ json_t *old =
      json_pack("{s:{s:s, s:s}, s:{s:s}}", "metadata", "name", name,
                "resourceVersion", "1", "status", "phase", "Pending");
  char *ip = NULL;
  cr_expect_eq(
      kube_wait_ready(api, TEST_KUBE_NAMESPACE, name, old, 20000, &ip, &e), 0,
      "%s", e.msg);
  cr_expect(ip && strncmp(ip, "127.0.0.", 8) == 0, "%s", ip ? ip : "(none)");
  free(ip);
  const char *tol[] = {"--toleration", "gpu", NULL};
  create(&r, tol);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "--toleration \"gpu\": expected a JSON object"), "%s",
            r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *after = test_kube_requests(&kube, "GET", NULL);
  bool stale = false, reread = false;
  json_array_foreach(after, i, g) {
    const char *rv = jstr(json_object_get(g, "query"), "resourceVersion");
    const char *p = jstr(g, "path");
    stale |= rv && strcmp(rv, "1") == 0;
    reread |= stale && p && strstr(p, name) && !rv;
  }
  cr_expect(stale && reread, "no watch from version 1 followed by a GET");
  kube_api_free(api);
  kube_config_clear(&c);
}

/* The run id that the stderr of a paused run names. */
static char *paused_run(const char *err) {
  const char *p = strstr(err, "sbx: run ");
  cr_assert_not_null(p, "%s", err);
  p += strlen("sbx: run ");
  return strndup(p, strcspn(p, " \n"));
}

Test(kubernetes, a_run_paused_for_approval_goes_on_in_the_same_pod) {
  char agent[1200];
  int n = snprintf(agent, sizeof(agent),
                   "{\"approvals\": {\"exec_command\": "
                   "[\"mkdir\"]}, ");
  (void)snprintf(agent + n, sizeof(agent) - (size_t)n, agent_fmt + 1,
                 kube.kubeconfig, cadir);
  char apath[256];
  (void)snprintf(apath, sizeof(apath), "%s",
                 test_write_file(tmp, "agent.json", agent));
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"mkdir made-first\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"ls\"}}]},"
      " {\"text\": \"done\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, apath, "Do it.", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *id = paused_run(r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *none = test_kube_requests(&kube, "DELETE", NULL);
  cr_expect_eq(json_array_size(none), 0, "the paused run keeps its Pod");
  const char *ok[] = {"approve", "--state-dir", state, id, "r1", NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  const char *o = test_call_output(reqs, -1, "r1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "made-first\n") != NULL, "%s", o);
  /* One Pod for the whole run, its token read back from its Secret, and
   * deleted at the end. */
  _cleanup_json_ json_t *pods = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  cr_expect_eq(json_array_size(pods), 1);
  _cleanup_json_ json_t *reads = test_kube_requests(
      &kube, "GET", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/secrets/");
  cr_expect_geq(json_array_size(reads), 1);
  _cleanup_json_ json_t *dels = test_kube_requests(&kube, "DELETE", NULL);
  cr_expect_eq(json_array_size(dels), 1);
  json_decref(reqs);
  sbx_run_free(&r);
  free(id);
}

Test(kubernetes, status_objects_become_clear_errors) {
  struct kube_config c = {0};
  struct kube_api *api = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(kube.kubeconfig, NULL, NULL, &c, &e), 0, "%s",
               e.msg);
  cr_assert_eq(kube_api_open(&c, &api, &e), 0, "%s", e.msg);
  const char *pods = "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods";
  _cleanup_json_ json_t *bad =
      json_pack("{s:s, s:s, s:{s:s}, s:{s:[{s:s, s:s}]}}", "apiVersion", "v1",
                "kind", "Pod", "metadata", "name", "Not_A_Name", "spec",
                "containers", "name", "c", "image", "x");
  cr_expect_eq(kube_call(api, "POST", pods, bad, NULL, NULL, &e), -EINVAL);
  cr_expect(strstr(e.msg, "kubernetes: ") && strstr(e.msg, "Not_A_Name") &&
                strstr(e.msg, "(HTTP 422 from POST /api/v1/namespaces/"
                              "sbx-test/pods)"),
            "%s", e.msg);
  json_object_set_new(json_object_get(bad, "metadata"), "name",
                      json_string("twice"));
  json_object_set_new(json_object_get(bad, "spec"), "restartPolicy",
                      json_string("Never"));
  cr_assert_eq(kube_call(api, "POST", pods, bad, NULL, NULL, &e), 0, "%s",
               e.msg);
  cr_expect_eq(kube_call(api, "POST", pods, bad, NULL, NULL, &e), -EEXIST);
  cr_expect(strstr(e.msg, "\"twice\" already exists") &&
                strstr(e.msg, "HTTP 409"),
            "%s", e.msg);
  cr_expect_eq(kube_call(api, "GET",
                         "/api/v1/namespaces/" TEST_KUBE_NAMESPACE
                         "/pods/nothing",
                         NULL, NULL, NULL, &e),
               -ENOENT);
  cr_expect(strstr(e.msg, "\"nothing\" not found") && strstr(e.msg, "HTTP 404"),
            "%s", e.msg);
  cr_expect_eq(kube_delete_pod(api, TEST_KUBE_NAMESPACE, "twice", &e), 0, "%s",
               e.msg);
  kube_api_free(api);
  kube_config_clear(&c);
}

Test(kubernetes, the_flags_shape_the_pod_and_its_policy) {
  struct sbx_run_out r;
  const char *args[] = {"--cpu",
                        "250m",
                        "--memory",
                        "300Mi",
                        "--node-selector",
                        "disk=ssd",
                        "--toleration",
                        "{\"key\": \"k\", \"operator\": \"Exists\"}",
                        "--network",
                        "none",
                        "--controller-cidr",
                        "127.0.0.0/8",
                        "--ttl",
                        "1h",
                        "--idle-timeout",
                        "10m",
                        NULL};
  create(&r, args);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  char id[64];
  (void)snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
  sbx_run_free(&r);
  const char *ex[] = {"exec", id, "--", "echo", "up", NULL};
  sbx_sandbox_run(&r, state, ex);
  cr_expect_str_eq(r.out, "up\n", "%s", r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *pods = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  json_t *spec = json_object_get(body_of(pods, 0), "spec");
  json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
  json_t *lim = json_object_get(json_object_get(c, "resources"), "limits");
  cr_expect_str_eq(jstr(lim, "cpu"), "250m");
  cr_expect_str_eq(jstr(lim, "memory"), "300Mi");
  cr_expect_str_eq(jstr(lim, "ephemeral-storage"), "2Gi");
  cr_expect_str_eq(jstr(json_object_get(spec, "nodeSelector"), "disk"), "ssd");
  cr_expect_str_eq(
      jstr(json_array_get(json_object_get(spec, "tolerations"), 0), "key"),
      "k");
  _cleanup_free_ char *cmd =
      json_dumps(json_object_get(c, "command"), JSON_COMPACT);
  cr_expect(strstr(cmd, "\"--expires-at\"") &&
                strstr(cmd, "\"--idle-timeout\",\"600\""),
            "%s", cmd);
  _cleanup_json_ json_t *pols = test_kube_requests(
      &kube, "POST",
      "/apis/networking.k8s.io/v1/namespaces/" TEST_KUBE_NAMESPACE
      "/networkpolicies");
  json_t *ps = json_object_get(body_of(pols, 0), "spec");
  cr_expect_eq(json_array_size(json_object_get(ps, "egress")), 0);
  _cleanup_free_ char *in =
      json_dumps(json_object_get(ps, "ingress"), JSON_COMPACT);
  cr_expect_str_eq(in,
                   "[{\"from\":[{\"ipBlock\":{\"cidr\":\"127.0.0.0/8\"}}]}]");
  /* A bad value is refused naming its option, before anything is made. */
  const char *bad[] = {"--cpu", "lots", NULL};
  create(&r, bad);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "cpu: \"lots\" is not a Kubernetes quantity"), "%s",
            r.err);
  sbx_run_free(&r);
  _cleanup_json_ json_t *after = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  cr_expect_eq(json_array_size(after), 1);
}

Test(kubernetes, a_paused_run_whose_pod_is_gone_goes_on_from_its_snapshot) {
  char agent[1200];
  int n = snprintf(agent, sizeof(agent),
                   "{\"approvals\": {\"exec_command\": "
                   "[\"mkdir\"]}, ");
  (void)snprintf(agent + n, sizeof(agent) - (size_t)n, agent_fmt + 1,
                 kube.kubeconfig, cadir);
  char apath[256];
  (void)snprintf(apath, sizeof(apath), "%s",
                 test_write_file(tmp, "agent.json", agent));
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"w1\", "
      "\"arguments\": {\"cmd\": \"mkdir made-first\"}}]},"
      " {\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"r1\", "
      "\"arguments\": {\"cmd\": \"ls\"}}]},"
      " {\"text\": \"done\"}]",
      NULL);
  struct sbx_run_out r;
  const char *run[] = {"run", "--state-dir", state, apath, "Do it.", NULL};
  sbx_run(&r, srv.base_url, run);
  cr_assert_eq(r.status, 3, "paused: %s", r.err);
  char *id = paused_run(r.err);
  sbx_run_free(&r);
  /* The Pod goes away while the run waits (a node drained, say). */
  _cleanup_json_ json_t *pods = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  const char *name =
      jstr(json_object_get(body_of(pods, 0), "metadata"), "name");
  cr_assert_not_null(name);
  char path[256];
  (void)snprintf(path, sizeof(path),
                 "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods/%s", name);
  cr_assert_eq(test_kube_call(&kube, "DELETE", path, NULL, NULL, NULL), 200);
  cr_assert(gone(path));
  const char *ok[] = {"approve", "--state-dir", state, id, "r1", NULL};
  sbx_run(&r, NULL, ok);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  const char *res[] = {"run", "--state-dir", state, "--resume", id, NULL};
  sbx_run(&r, srv.base_url, res);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "done\n");
  cr_expect(strstr(r.err, "is gone") != NULL, "%s", r.err);
  const char *o = test_call_output(reqs, -1, "r1");
  cr_assert_not_null(o);
  cr_expect(strstr(o, "made-first\n") != NULL, "the snapshot's: %s", o);
  _cleanup_json_ json_t *again = test_kube_requests(
      &kube, "POST", "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods");
  cr_expect_eq(json_array_size(again), 2, "a new Pod for the restore");
  json_decref(reqs);
  sbx_run_free(&r);
  free(id);
}

/* ---- the API client's TLS, against openssl s_server ---- */

static char tls_tmp[64];

static void tls_teardown(void) {
  if (tls_tmp[0])
    (void)test_rm_rf(tls_tmp);
}

TestSuite(kube_tls, .fini = tls_teardown, .timeout = 60);

/* Starts `openssl s_server -www` on 127.0.0.1:PORT with CERT and KEY,
 * requiring a client certificate of CA; its pid. */
static pid_t s_server(uint16_t port, const char *cert, const char *key,
                      const char *ca) {
  char accept[32];
  (void)snprintf(accept, sizeof(accept), "127.0.0.1:%u", port);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    (void)dup2(devnull, 0);
    (void)dup2(devnull, 1);
    (void)dup2(devnull, 2);
    execlp("openssl", "openssl", "s_server", "-accept", accept, "-cert", cert,
           "-key", key, "-CAfile", ca, "-Verify", "1", "-www", (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 100; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool up = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    if (up)
      return pid;
    usleep(50000);
  }
  cr_assert_fail("openssl s_server did not listen");
  return -1;
}

static char *slurp(const char *path, size_t *len) {
  char *t = NULL;
  cr_assert_eq(sbx_read_file(path, 1 << 20, &t, len), 0, "%s", path);
  return t;
}

Test(kube_tls, a_client_certificate_and_the_clusters_ca_are_used) {
  if (system("command -v openssl >/dev/null") != 0)
    cr_skip_test("needs the openssl command");
  (void)snprintf(tls_tmp, sizeof(tls_tmp), "/tmp/sbx-kubetls-XXXXXX");
  cr_assert_not_null(mkdtemp(tls_tmp));
  char ca[128], other[128], p[4][160];
  (void)snprintf(ca, sizeof(ca), "%s/ca", tls_tmp);
  (void)snprintf(other, sizeof(other), "%s/other", tls_tmp);
  const char *names[] = {"srv.crt", "srv.key", "cli.crt", "cli.key"};
  for (int i = 0; i < 4; i++)
    (void)snprintf(p[i], sizeof(p[i]), "%s/%s", tls_tmp, names[i]);
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  cr_assert_eq(ca_issue(ca, CA_SERVER, "127.0.0.1", now - 60, now + 3600, p[0],
                        p[1], NULL, &e),
               0, "%s", e.msg);
  cr_assert_eq(ca_issue(ca, CA_CLIENT, "tester", now - 60, now + 3600, p[2],
                        p[3], NULL, &e),
               0, "%s", e.msg);
  cr_assert_eq(ca_init(other, NULL, &e), 0, "%s", e.msg);
  char cacrt[160], othercrt[160];
  (void)snprintf(cacrt, sizeof(cacrt), "%s/ca.crt", ca);
  (void)snprintf(othercrt, sizeof(othercrt), "%s/ca.crt", other);
  uint16_t port = 0;
  cr_assert_eq(sbx_free_tcp_port(&port), 0);
  pid_t srv = s_server(port, p[0], p[1], cacrt);

  struct kube_config c = {0};
  char server[64];
  (void)snprintf(server, sizeof(server), "https://127.0.0.1:%u", port);
  c.server = server;
  c.ca_pem = slurp(cacrt, &c.ca_len);
  c.cert_pem = slurp(p[2], &c.cert_len);
  c.key_pem = slurp(p[3], &c.key_len);
  struct kube_api *api = NULL;
  cr_assert_eq(kube_api_open(&c, &api, &e), 0, "%s", e.msg);
  cr_expect_eq(kube_call(api, "GET", "/", NULL, NULL, NULL, &e), 0, "%s",
               e.msg);
  api = kube_api_free(api);
  /* Without the client certificate the server refuses the handshake. */
  struct kube_config nocert = c;
  nocert.cert_pem = nocert.key_pem = NULL;
  cr_assert_eq(kube_api_open(&nocert, &api, &e), 0, "%s", e.msg);
  cr_expect_lt(kube_call(api, "GET", "/", NULL, NULL, NULL, &e), 0);
  cr_expect(strstr(e.msg, "cannot reach the API server"), "%s", e.msg);
  api = kube_api_free(api);
  /* A server that another CA vouches for is not believed. */
  struct kube_config wrong = c;
  wrong.ca_pem = slurp(othercrt, &wrong.ca_len);
  cr_assert_eq(kube_api_open(&wrong, &api, &e), 0, "%s", e.msg);
  cr_expect_lt(kube_call(api, "GET", "/", NULL, NULL, NULL, &e), 0);
  cr_expect(strstr(e.msg, "cannot reach the API server"), "%s", e.msg);
  api = kube_api_free(api);
  free(wrong.ca_pem);
  free(c.ca_pem);
  free(c.cert_pem);
  free(c.key_pem);
  (void)kill(srv, SIGTERM);
  (void)waitpid(srv, NULL, 0);
}

Test(kubernetes, a_pod_not_ready_in_time_is_an_error_saying_what_it_waits_for) {
  /* A Pod whose Secret never comes: it stays Pending, nothing runs. */
  const char *pods = "/api/v1/namespaces/" TEST_KUBE_NAMESPACE "/pods";
  _cleanup_json_ json_t *pod = json_pack(
      "{s:s, s:s, s:{s:s}, s:{s:s, s:[{s:s, s:s}], s:[{s:s, s:{s:s}}]}}",
      "apiVersion", "v1", "kind", "Pod", "metadata", "name", "sbx-0000000000aa",
      "spec", "restartPolicy", "Never", "containers", "name", "sandboxd",
      "image", IMAGE, "volumes", "name", "tls", "secret", "secretName",
      "never-made");
  cr_assert_eq(test_kube_call(&kube, "POST", pods, NULL, pod, NULL), 201);
  struct kube_config c = {0};
  struct kube_api *api = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(kube.kubeconfig, NULL, NULL, &c, &e), 0, "%s",
               e.msg);
  cr_assert_eq(kube_api_open(&c, &api, &e), 0, "%s", e.msg);
  char *ip = NULL;
  cr_expect_eq(kube_wait_ready(api, TEST_KUBE_NAMESPACE, "sbx-0000000000aa",
                               NULL, 1500, &ip, &e),
               -ETIMEDOUT);
  cr_expect_null(ip);
  cr_expect(strstr(e.msg, "Pod sbx-0000000000aa was not ready within 1 s: "
                          "phase Pending"),
            "%s", e.msg);
  cr_expect_eq(
      kube_delete_pod(api, TEST_KUBE_NAMESPACE, "sbx-0000000000aa", &e), 0,
      "%s", e.msg);
  kube_api_free(api);
  kube_config_clear(&c);
}

Test(kubernetes, sbx_serve_makes_pods_and_keeps_its_kubeconfig_its_own) {
  char xdg[160];
  (void)snprintf(xdg, sizeof(xdg), "%s/xdg", tmp);
  cr_assert_eq(setenv("KUBECONFIG", kube.kubeconfig, 1), 0);
  cr_assert_eq(setenv("XDG_STATE_HOME", xdg, 1), 0); /* its CA */
  struct test_server srv;
  test_server_init(&srv, NULL, NULL);
  test_server_start(&srv, NULL);
  (void)unsetenv("KUBECONFIG");
  (void)unsetenv("XDG_STATE_HOME");
  /* A token of scope run: the server's options are its operator's. */
  char *tok = test_server_token(&srv, "runner", "run,read");
  struct test_http h;
  test_http(&h, &srv, "POST", "/v1/sandboxes", tok,
            "{\"backend\": \"kubernetes\", \"options\": {\"kubeconfig\": "
            "\"/etc/kubernetes/admin.conf\"}}",
            NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  cr_expect(strstr(h.body, "options.kubeconfig"), "%s", h.body);
  test_http_free(&h);
  test_http(&h, &srv, "POST", "/v1/sandboxes", tok,
            "{\"backend\": \"kubernetes\", \"options\": {\"image\": \"" IMAGE
            "\", \"image_pull_policy\": \"Never\"}, \"manifest\": "
            "{\"entries\": {\"a.txt\": {\"type\": \"file\", \"content\": "
            "\"hello\"}}}}",
            NULL);
  cr_assert_eq(h.status, 201, "%s", h.body);
  char id[16];
  (void)snprintf(id, sizeof(id), "%s",
                 json_string_value(json_object_get(h.json, "id")));
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "backend")),
                   "kubernetes");
  test_http_free(&h);
  char path[256];
  (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s/execs", id);
  test_http(&h, &srv, "POST", path, tok, "{\"command\": \"cat a.txt\"}", NULL);
  cr_assert_eq(h.status, 201, "%s", h.body);
  char x[64];
  (void)snprintf(x, sizeof(x), "%s",
                 json_string_value(json_object_get(h.json, "exec_id")));
  test_http_free(&h);
  (void)snprintf(path, sizeof(path),
                 "/v1/sandboxes/%s/execs/%s/output?stream=stdout&offset=0&"
                 "wait_ms=5000",
                 id, x);
  test_http(&h, &srv, "GET", path, tok, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_str_eq(h.body, "hello");
  test_http_free(&h);
  (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
  test_http(&h, &srv, "DELETE", path, tok, NULL, NULL);
  cr_expect(h.status == 200 || h.status == 204, "%ld %s", h.status, h.body);
  test_http_free(&h);
  _cleanup_json_ json_t *dels = test_kube_requests(&kube, "DELETE", NULL);
  cr_expect_eq(json_array_size(dels), 1);
  free(tok);
  test_server_fini(&srv);
}

Test(kubernetes, the_ca_is_the_state_directorys_by_default) {
  const char *argv[] = {
      "create",        "--backend", "kubernetes", "--kubeconfig",
      kube.kubeconfig, "--image",   IMAGE,        "--image-pull-policy",
      "Never",         NULL};
  struct sbx_run_out r;
  sbx_sandbox_run(&r, state, argv);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  sbx_run_free(&r);
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/ca/clients/default.crt", state);
  cr_expect_eq(access(p, F_OK), 0, "%s", p);
}
