#include "tests/support/kube_api.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/encode.h"
#include "shared/rand.h"
#include "tests/support/pyserver.h"
#include "tests/support/sbxrun.h"

#define KUBE_API_PY SBX_SOURCE_DIR "/tests/support/kube_api.py"
#define REPLY_MAX (16u << 20)

/* The base64 after "certificate-authority-data: " in the kubeconfig,
 * decoded into k->ca_pem. */
static void read_ca(struct test_kube *k) {
  FILE *f = fopen(k->kubeconfig, "re");
  cr_assert_not_null(f, "open %s: %s", k->kubeconfig, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  const char *key = "certificate-authority-data: ";
  while (getline(&line, &cap, f) > 0) {
    char *at = strstr(line, key);
    if (!at)
      continue;
    at += strlen(key);
    size_t len = strcspn(at, "\r\n");
    k->ca_pem = malloc(len / 4 * 3 + 4);
    cr_assert_not_null(k->ca_pem);
    long n = sbx_base64_decode(at, len, k->ca_pem);
    cr_assert_gt(n, 0, "the kubeconfig's CA data is not base64");
    k->ca_len = (size_t)n;
    break;
  }
  free(line);
  fclose(f);
  cr_assert_not_null(k->ca_pem, "no certificate-authority-data in %s",
                     k->kubeconfig);
}

void test_kube_start_with(struct test_kube *k, bool podman,
                          const char *const *extra) {
  memset(k, 0, sizeof(*k));
  k->podman = podman;
  (void)snprintf(k->dir, sizeof(k->dir), "/tmp/sbx-kube-XXXXXX");
  cr_assert_not_null(mkdtemp(k->dir), "mkdtemp: %s", strerror(errno));
  (void)snprintf(k->workdir, sizeof(k->workdir), "%s/api", k->dir);
  (void)snprintf(k->kubeconfig, sizeof(k->kubeconfig), "%s/kubeconfig", k->dir);
  (void)snprintf(k->log, sizeof(k->log), "%s/requests.jsonl", k->dir);
  cr_assert_eq(sbx_random_hex(k->token, 16), 0);
  const char *argv[24] = {"python3",     KUBE_API_PY,   k->workdir,
                          k->kubeconfig, k->log,        "--token",
                          k->token,      "--namespace", TEST_KUBE_NAMESPACE};
  size_t n = 9;
  if (!podman)
    argv[n++] = "--no-podman";
  for (size_t i = 0; extra && extra[i]; i++) {
    cr_assert_lt(n, 22, "too many arguments for kube_api.py");
    argv[n++] = extra[i];
  }
  argv[n] = NULL;
  k->port = test_pyserver_start(argv, "kube_api.py", &k->pid);
  (void)snprintf(k->server, sizeof(k->server), "https://127.0.0.1:%d", k->port);
  read_ca(k);
}

void test_kube_start(struct test_kube *k, bool podman) {
  test_kube_start_with(k, podman, NULL);
}

void test_kube_stop(struct test_kube *k) {
  /* The fixture removes its podman pods before it exits: up to 60 s
   * before test_pyserver_stop's SIGKILL would leave them running. */
  if (k->pid > 0 && kill(k->pid, SIGTERM) == 0)
    for (int i = 0; i < 600; i++) {
      int status;
      pid_t w = waitpid(k->pid, &status, WNOHANG);
      if (w == k->pid || (w < 0 && errno != EINTR)) {
        k->pid = 0;
        break;
      }
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  test_pyserver_stop(&k->pid);
  if (k->dir[0]) {
    (void)test_rm_rf(k->dir);
    k->dir[0] = '\0';
  }
  free(k->ca_pem);
  k->ca_pem = NULL;
}

json_t *test_kube_requests(const struct test_kube *k, const char *method,
                           const char *path) {
  json_t *all = test_jsonl_read(k->log);
  json_t *out = json_array();
  size_t i;
  json_t *r;
  json_array_foreach(all, i, r) {
    const char *m = json_string_value(json_object_get(r, "method"));
    const char *p = json_string_value(json_object_get(r, "path"));
    if ((!method || (m && strcmp(m, method) == 0)) &&
        (!path || (p && strncmp(p, path, strlen(path)) == 0)))
      json_array_append(out, r);
  }
  json_decref(all);
  return out;
}

struct reply {
  char *data;
  size_t len;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud) {
  struct reply *r = ud;
  size_t n = size * nmemb;
  if (r->len + n > REPLY_MAX)
    return 0;
  char *grown = realloc(r->data, r->len + n + 1);
  if (!grown)
    return 0;
  r->data = grown;
  memcpy(r->data + r->len, p, n);
  r->len += n;
  r->data[r->len] = '\0';
  return n;
}

/* METHOD on PATH: the HTTP status, the raw reply in *R. */
static long call_raw(const struct test_kube *k, const char *method,
                     const char *path, const char *ctype, const json_t *body,
                     struct reply *r) {
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  char url[512], auth[64], type[96];
  (void)snprintf(url, sizeof(url), "%s%s", k->server, path);
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->token);
  (void)snprintf(type, sizeof(type), "Content-Type: %s",
                 ctype ? ctype : "application/json");
  struct curl_slist *h = curl_slist_append(NULL, auth);
  h = curl_slist_append(h, type);
  struct curl_blob ca = {
      .data = k->ca_pem, .len = k->ca_len, .flags = CURL_BLOB_COPY};
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &ca);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
  if (text)
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
  CURLcode rc = curl_easy_perform(c);
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  curl_slist_free_all(h);
  free(text);
  cr_assert_eq(rc, CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
  return code;
}

long test_kube_call(const struct test_kube *k, const char *method,
                    const char *path, const char *ctype, const json_t *body,
                    json_t **reply) {
  struct reply r = {0};
  long code = call_raw(k, method, path, ctype, body, &r);
  if (reply)
    *reply = r.data ? json_loads(r.data, 0, NULL) : NULL;
  free(r.data);
  return code;
}

long test_kube_watch(const struct test_kube *k, const char *path,
                     json_t **events) {
  struct reply r = {0};
  long code = call_raw(k, "GET", path, NULL, NULL, &r);
  *events = json_array();
  for (char *line = r.data, *end; line && *line; line = end + 1) {
    end = strchr(line, '\n');
    if (!end)
      end = line + strlen(line) - 1;
    json_error_t je;
    json_t *ev = json_loadb(line, (size_t)(end - line + 1), 0, &je);
    cr_assert_not_null(ev, "a watch line that is not JSON: %s", je.text);
    json_array_append_new(*events, ev);
  }
  free(r.data);
  return code;
}

json_t *test_kube_wait_pod(const struct test_kube *k, const char *name,
                           bool (*done)(json_t *pod), int timeout_ms) {
  char path[256];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s",
                 TEST_KUBE_NAMESPACE, name);
  json_t *pod = NULL;
  for (int waited = 0;; waited += 100) {
    json_decref(pod);
    long code = test_kube_call(k, "GET", path, NULL, NULL, &pod);
    if (code != 200) {
      json_decref(pod);
      pod = NULL;
    }
    if ((pod && done(pod)) || waited >= timeout_ms)
      return pod;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

bool test_kube_pod_ready(json_t *pod) {
  json_t *st = json_object_get(pod, "status");
  if (!json_string_value(json_object_get(st, "podIP")))
    return false;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(st, "conditions"), i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    const char *s = json_string_value(json_object_get(c, "status"));
    if (t && s && strcmp(t, "Ready") == 0)
      return strcmp(s, "True") == 0;
  }
  return false;
}

bool test_kube_pod_finished(json_t *pod) {
  const char *p = json_string_value(
      json_object_get(json_object_get(pod, "status"), "phase"));
  return p && (strcmp(p, "Failed") == 0 || strcmp(p, "Succeeded") == 0);
}
