#include "backends/registry.h"

#include <stdio.h>
#include <string.h>

#include "backends/docker/docker.h"
#include "backends/kubernetes/kubernetes.h"
#include "backends/local/local.h"
#include "backends/remote/remote.h"
#include "shared/cleanup.h"

/* Every backend sbx is built with; the first is the default. */
static const struct backend *const backends[] = {
    &backend_local,
    &backend_docker,
    &backend_remote,
    &backend_kubernetes,
};

const struct backend *backend_find(const char *name) {
  if (!name)
    return backends[0];
  for (size_t i = 0; i < SBX_ARRAY_SIZE(backends); i++)
    if (strcmp(backends[i]->name, name) == 0)
      return backends[i];
  return NULL;
}

const struct backend *backend_at(size_t i) {
  return i < SBX_ARRAY_SIZE(backends) ? backends[i] : NULL;
}

const char *backend_names(char *out, size_t n, const char *quote,
                          const char *last) {
  size_t len = 0;
  size_t count = SBX_ARRAY_SIZE(backends);
  out[0] = '\0';
  for (size_t i = 0; i < count && len < n; i++) {
    const char *sep = i == 0 ? "" : i + 1 == count ? last : ", ";
    int k = snprintf(out + len, n - len, "%s%s%s%s", sep, quote,
                     backends[i]->name, quote);
    if (k < 0)
      break;
    len += (size_t)k;
  }
  return out;
}
