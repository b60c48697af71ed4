/* The Kubernetes API server of the kubernetes backend's tests
 * (tests/support/kube_api.py): HTTPS on 127.0.0.1 with a CA of its own and
 * a bearer token, a kubeconfig for it, Pods run with `podman kube play`
 * (or, without podman, marked Ready at once), every request logged.
 *
 * Criterion helpers: a failure to start or to speak asserts. */
#ifndef SBX_TEST_KUBE_API_H
#define SBX_TEST_KUBE_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define TEST_KUBE_NAMESPACE "sbx-test"

struct test_kube {
  pid_t pid;
  int port;
  bool podman;
  char dir[64];        /* a new /tmp directory holding what follows */
  char workdir[96];    /* the fixture's: its CA, certificates, Pods */
  char kubeconfig[96]; /* server, CA data, token, namespace */
  char log[96];        /* one JSON line per request */
  char server[64];     /* https://127.0.0.1:PORT */
  char token[33];      /* the bearer token it requires */
  char *ca_pem;        /* the kubeconfig's certificate-authority-data */
  size_t ca_len;
};

/* Starts the fixture; PODMAN: Pods really run (root and podman needed).
 * EXTRA: more arguments for kube_api.py (NULL-terminated, at most 8; may
 * be NULL), e.g. "--watch-seconds", "2". */
void test_kube_start(struct test_kube *k, bool podman);
void test_kube_start_with(struct test_kube *k, bool podman,
                          const char *const *extra);
/* SIGTERM (the fixture removes every podman pod it made), then removes
 * the directory. Accepts a fixture not started or already stopped. */
void test_kube_stop(struct test_kube *k);

/* The logged requests (new array) whose method is METHOD and path starts
 * with PATH (either NULL: any), in order: objects with method, path,
 * query (object), content_type, auth ("ok", "wrong", "none"), body. */
json_t *test_kube_requests(const struct test_kube *k, const char *method,
                           const char *path);

/* One request with the token and the kubeconfig's CA: METHOD on PATH
 * (starting with '/'), BODY (may be NULL) sent as CTYPE (NULL:
 * application/json). Returns the HTTP status; *REPLY (may be NULL) gets
 * the body parsed as JSON (new; NULL when it is not JSON). */
long test_kube_call(const struct test_kube *k, const char *method,
                    const char *path, const char *ctype, const json_t *body,
                    json_t **reply);

/* GET PATH (with its query: watch=1, resourceVersion, timeoutSeconds...)
 * until the server ends the stream: the HTTP status, and in *EVENTS (new)
 * each line of the reply parsed as JSON, in order. */
long test_kube_watch(const struct test_kube *k, const char *path,
                     json_t **events);

/* Polls the Pod NAME of the namespace every 100 ms until DONE(pod) holds
 * or TIMEOUT_MS passes: the last Pod seen (new; NULL when there was none:
 * 404), whether or not DONE held. */
json_t *test_kube_wait_pod(const struct test_kube *k, const char *name,
                           bool (*done)(json_t *pod), int timeout_ms);
/* DONE conditions: the Ready condition is "True" and podIP is set; the
 * phase is Failed or Succeeded. */
bool test_kube_pod_ready(json_t *pod);
bool test_kube_pod_finished(json_t *pod);

#endif
