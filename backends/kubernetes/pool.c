/* The warm pool: Pods made ahead of time, labelled sbx.warm=true and
 * sbx.pool=HASH (what shapes them: kube_pool_hash), each with its own
 * Secret and NetworkPolicy. A sandbox claims one with a merge-patch
 * guarded by the resourceVersion it listed, so two controllers never
 * claim the same Pod: the loser gets 409 Conflict and tries the next. The
 * pool is topped up after each create, without waiting for the new Pods. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

static const char *jstr(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* The warm Pods of pool HASH still free (not claimed, not ending). *OUT
 * new: an array, ready ones first. */
static int list_warm(struct kube *k, const char *hash, json_t **out,
                     struct sbx_error *e) {
  *out = NULL;
  char path[512];
  (void)snprintf(path, sizeof(path),
                 "/api/v1/namespaces/%s/pods?labelSelector=%s%%3Dtrue%%2C%s%%"
                 "3D%s",
                 k->ns, KUBE_LABEL_WARM, KUBE_LABEL_POOL, hash);
  _cleanup_json_ json_t *list = NULL;
  int r = kube_call(k->api, "GET", path, NULL, NULL, &list, e);
  if (r < 0)
    return r;
  json_t *ready = json_array(), *rest = json_array();
  size_t i;
  json_t *pod;
  json_array_foreach(json_object_get(list, "items"), i, pod) {
    json_t *md = json_object_get(pod, "metadata");
    json_t *st = json_object_get(pod, "status");
    const char *phase = jstr(st, "phase");
    const char *warm = jstr(json_object_get(md, "labels"), KUBE_LABEL_WARM);
    if (json_object_get(md, "deletionTimestamp") || !warm ||
        strcmp(warm, "true") ||
        (phase && (!strcmp(phase, "Failed") || !strcmp(phase, "Succeeded"))))
      continue;
    bool is_ready = jstr(st, "podIP") != NULL;
    (void)json_array_append(is_ready ? ready : rest, pod);
  }
  if (!ready || !rest || json_array_extend(ready, rest) < 0) {
    json_decref(ready);
    json_decref(rest);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  json_decref(rest);
  *out = ready;
  return 0;
}

int kube_pool_try(struct kube *k, json_t *pods, const char *session,
                  json_t **pod, struct sbx_error *e) {
  *pod = NULL;
  size_t i;
  json_t *p;
  json_array_foreach(pods, i, p) {
    json_t *md = json_object_get(p, "metadata");
    const char *name = jstr(md, "name"), *rv = jstr(md, "resourceVersion");
    if (!name || !rv || strlen(name) != KUBE_NAME_LEN ||
        strncmp(name, "sbx-", 4) != 0)
      continue;
    char path[512];
    (void)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", k->ns,
                   name);
    _cleanup_json_ json_t *patch = json_pack(
        "{s:{s:s, s:{s:s, s:s}}}", "metadata", "resourceVersion", rv, "labels",
        KUBE_LABEL_WARM, "false", KUBE_LABEL_CLAIMED, session);
    if (!patch)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    struct sbx_error pe = {0};
    json_t *claimed = NULL;
    int r = kube_call(k->api, "PATCH", path, patch,
                      "application/merge-patch+json", &claimed, &pe);
    if (r == -EBUSY || r == -ENOENT) {
      log_debug("kubernetes: warm Pod %s: %s; trying the next", name, pe.msg);
      continue;
    }
    if (r < 0) {
      if (e)
        *e = pe;
      return r;
    }
    memcpy(k->name, name, KUBE_NAME_LEN + 1);
    *pod = claimed;
    log_debug("kubernetes: claimed warm Pod %s", name);
    return 0;
  }
  return -ENOENT;
}

int kube_pool_claim(struct kube *k, const char *hash, const char *session,
                    json_t **pod, struct sbx_error *e) {
  *pod = NULL;
  _cleanup_json_ json_t *free_pods = NULL;
  int r = list_warm(k, hash, &free_pods, e);
  if (r < 0)
    return r;
  return kube_pool_try(k, free_pods, session, pod, e);
}

void kube_pool_fill(struct kube *k, const struct kube_pod_params *p,
                    const char *hash) {
  struct sbx_error e = {0};
  _cleanup_json_ json_t *free_pods = NULL;
  if (list_warm(k, hash, &free_pods, &e) < 0) {
    log_warn("kubernetes: cannot list the warm pool %s: %s", hash, e.msg);
    return;
  }
  for (size_t n = json_array_size(free_pods); n < p->o->warm_pool; n++) {
    char hex[13], name[KUBE_NAME_LEN + 1];
    if (sbx_random_hex(hex, 6) < 0)
      return;
    (void)snprintf(name, sizeof(name), "sbx-%s", hex);
    struct kube_pod_params wp = *p;
    wp.name = name;
    wp.pool = hash;
    struct kube_tls t = {0};
    _cleanup_json_ json_t *pod = NULL;
    int r = kube_tls_make(k, name, &t, &e);
    if (r == 0)
      r = kube_make_pod(k, &wp, &t, &pod, &e);
    kube_tls_clear(&t);
    if (r < 0) {
      log_warn("kubernetes: cannot add a warm Pod to pool %s: %s", hash, e.msg);
      return;
    }
    log_debug("kubernetes: warm Pod %s added to pool %s", name, hash);
  }
}
