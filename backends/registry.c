#include "backends/registry.h"

#include <string.h>

#include "backends/docker/docker.h"
#include "backends/local/local.h"

const struct backend *backend_find(const char *name) {
  if (!name || strcmp(name, "local") == 0)
    return &backend_local;
  if (strcmp(name, "docker") == 0)
    return &backend_docker;
  return NULL;
}
