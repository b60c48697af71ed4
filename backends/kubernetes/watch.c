/* Readiness by watching the Pod: a watch from the resourceVersion last
 * seen, resumed from the last event's when the server ends the stream (as
 * real API servers do), and begun again from a fresh GET when the version
 * is too old (410 Gone); all bounded by the ready timeout. Ready is the
 * condition Ready "True" with a Pod IP; a Pod that ended, or whose
 * container cannot start, is an error saying why. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

/* Waiting reasons of a container that will not start by waiting longer. */
static const char *const fatal_waiting[] = {
    "ErrImageNeverPull", "InvalidImageName", "CreateContainerError",
    "CreateContainerConfigError", "RunContainerError"};

struct waiter {
  const char *name;
  char rv[64];
  char *ip;
  char last[400]; /* what the Pod said last, for a timeout */
};

static const char *jstr(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* The state of the first container of LIST (a Pod status's
 * containerStatuses or initContainerStatuses) that is waiting or has
 * ended (with INIT, only one that ended in failure: a finished init
 * container is done), with *WHICH and *NAME saying what it is; or NULL. */
static json_t *state_in(json_t *list, bool init, const char **which,
                        const char **name) {
  size_t i;
  json_t *c;
  json_array_foreach(list, i, c) {
    json_t *st = json_object_get(c, "state");
    json_t *t = json_object_get(st, "terminated");
    json_t *w = json_object_get(st, "waiting");
    *name = jstr(c, "name");
    if (t &&
        !(init && json_integer_value(json_object_get(t, "exitCode")) == 0)) {
      *which = "terminated";
      return t;
    }
    if (w) {
      *which = "waiting";
      return w;
    }
  }
  return NULL;
}

/* The state that holds the Pod up: an init container's (the installer of
 * sandboxd_image) before the sandboxd container's; see state_in. */
static json_t *container_state(json_t *pod, const char **which,
                               const char **name) {
  json_t *status = json_object_get(pod, "status");
  json_t *st = state_in(json_object_get(status, "initContainerStatuses"), true,
                        which, name);
  return st ? st
            : state_in(json_object_get(status, "containerStatuses"), false,
                       which, name);
}

void kube_pod_describe(json_t *pod, char *out, size_t n) {
  json_t *status = json_object_get(pod, "status");
  const char *phase = jstr(status, "phase");
  int k = snprintf(out, n, "phase %s", phase ? phase : "unknown");
  const char *reason = jstr(status, "reason"), *msg = jstr(status, "message");
  if (k >= 0 && (size_t)k < n && (reason || msg))
    k += snprintf(out + k, n - (size_t)k, " (%s%s%s)", reason ? reason : "",
                  reason && msg ? ": " : "", msg ? msg : "");
  const char *which = NULL, *cname = NULL;
  json_t *st = container_state(pod, &which, &cname);
  if (st && k >= 0 && (size_t)k < n) {
    const char *r = jstr(st, "reason"), *m = jstr(st, "message");
    json_t *code = json_object_get(st, "exitCode");
    k += snprintf(out + k, n - (size_t)k, "; container %s %s%s%s%s%s",
                  cname ? cname : "sandboxd", which, r ? ": " : "", r ? r : "",
                  m ? ": " : "", m ? m : "");
    if (json_is_integer(code) && k >= 0 && (size_t)k < n)
      k += snprintf(out + k, n - (size_t)k, " (exit code %lld)",
                    (long long)json_integer_value(code));
  }
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(status, "conditions"), i, c) {
    const char *t = jstr(c, "type"), *s = jstr(c, "status");
    const char *m = jstr(c, "message");
    if (t && s && strcmp(s, "False") == 0 && m && k >= 0 && (size_t)k < n)
      k += snprintf(out + k, n - (size_t)k, "; %s: %s", t, m);
  }
  for (size_t j = 0; out[j]; j++)
    if ((unsigned char)out[j] < 0x20)
      out[j] = ' ';
}

static bool ready(json_t *pod) {
  size_t i;
  json_t *c;
  json_array_foreach(
      json_object_get(json_object_get(pod, "status"), "conditions"), i, c) {
    const char *t = jstr(c, "type"), *s = jstr(c, "status");
    if (t && s && strcmp(t, "Ready") == 0 && strcmp(s, "True") == 0)
      return true;
  }
  return false;
}

/* Looks at POD: 1 ready (W's ip set), 0 not yet, or an error. */
static int judge(struct waiter *w, json_t *pod, struct sbx_error *e) {
  const char *rv = jstr(json_object_get(pod, "metadata"), "resourceVersion");
  if (rv && strlen(rv) < sizeof(w->rv))
    memcpy(w->rv, rv, strlen(rv) + 1);
  kube_pod_describe(pod, w->last, sizeof(w->last));
  json_t *status = json_object_get(pod, "status");
  const char *phase = jstr(status, "phase");
  if (phase &&
      (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0))
    return sbx_error_set(e, SBX_UNAVAILABLE, ECHILD,
                         "kubernetes: Pod %s ended before it was ready: %s",
                         w->name, w->last);
  const char *which = NULL, *cname = NULL;
  json_t *st = container_state(pod, &which, &cname);
  const char *reason = st ? jstr(st, "reason") : NULL;
  for (size_t i = 0; reason && i < SBX_ARRAY_SIZE(fatal_waiting); i++)
    if (strcmp(reason, fatal_waiting[i]) == 0)
      return sbx_error_set(e, SBX_UNAVAILABLE, ECHILD,
                           "kubernetes: Pod %s cannot start: %s", w->name,
                           w->last);
  const char *ip = jstr(status, "podIP");
  if (!ready(pod) || !ip || !*ip)
    return 0;
  free(w->ip);
  w->ip = strdup(ip);
  return w->ip ? 1 : -ENOMEM;
}

static int on_event(void *arg, json_t *ev, struct sbx_error *e) {
  struct waiter *w = arg;
  const char *type = jstr(ev, "type");
  json_t *obj = json_object_get(ev, "object");
  if (type && strcmp(type, "BOOKMARK") == 0) {
    const char *rv = jstr(json_object_get(obj, "metadata"), "resourceVersion");
    if (rv && strlen(rv) < sizeof(w->rv))
      memcpy(w->rv, rv, strlen(rv) + 1);
    return 0;
  }
  if (type && strcmp(type, "DELETED") == 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, ENOENT,
                         "kubernetes: Pod %s was deleted before it was ready",
                         w->name);
  return judge(w, obj, e);
}

static int get_pod(struct kube_api *a, const char *ns, const char *name,
                   json_t **out, struct sbx_error *e) {
  char path[512];
  (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
  return kube_call(a, "GET", path, NULL, NULL, out, e);
}

int kube_wait_ready(struct kube_api *a, const char *ns, const char *name,
                    json_t *pod, unsigned timeout_ms, char **ip,
                    struct sbx_error *e) {
  struct waiter w = {.name = name};
  uint64_t deadline = sbx_now_ms() + timeout_ms;
  _cleanup_json_ json_t *got = NULL;
  int r = pod ? 0 : get_pod(a, ns, name, &got, e);
  if (r == 0)
    r = judge(&w, pod ? pod : got, e);
  while (r == 0) {
    uint64_t now = sbx_now_ms();
    if (now >= deadline) {
      r = -ETIMEDOUT;
      break;
    }
    char path[640];
    (void)snprintf(path, sizeof(path),
                   "/api/v1/namespaces/%s/pods?watch=1&fieldSelector="
                   "metadata.name%%3D%s&resourceVersion=%s",
                   ns, name, w.rv);
    struct sbx_error we = {0};
    r = kube_watch(a, path, (unsigned)(deadline - now), on_event, &w, &we);
    if (r == 0) {
      /* The server ended the stream: resume from the last version. */
      struct timespec ts = {0, 100 * 1000 * 1000};
      (void)nanosleep(&ts, NULL);
    } else if (r == -ESTALE) {
      log_debug("kubernetes: watch of %s: %s; reading it again", name, we.msg);
      json_decref(got);
      got = NULL;
      r = get_pod(a, ns, name, &got, e);
      if (r == 0)
        r = judge(&w, got, e);
    } else if (r < 0 && r != -ETIMEDOUT && e) {
      *e = we;
    }
  }
  if (r == -ETIMEDOUT)
    r = sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                      "kubernetes: Pod %s was not ready within %u s: %s", name,
                      timeout_ms / 1000, w.last);
  if (r == 1) {
    *ip = w.ip;
    return 0;
  }
  free(w.ip);
  return r;
}
