/* The local backend's options: isolation, network and limits, named as the
 * docker backend names them. */
#include "backends/local/local_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct backend_option local_option_table[] = {
    {"isolation", "isolation", "namespaces|none",
     "namespaces (default): the sandbox's own root, users, processes and "
     "network; none: commands run as you on the host",
     BACKEND_OPTION_STRING, "namespaces"},
    {"network_mode", "network", "none",
     "none: loopback only (default: outbound through pasta, without the "
     "host's loopback)",
     BACKEND_OPTION_STRING},
    {"memory_bytes", "memory-bytes", "N",
     "memory limit in bytes (default 2 GiB; 0: none)", BACKEND_OPTION_INTEGER},
    {"cpus", "cpus", "N", "CPU limit in CPUs (0: none, the default)",
     BACKEND_OPTION_NUMBER},
    {"pids_limit", "pids-limit", "N", "process limit (default 4096; 0: none)",
     BACKEND_OPTION_INTEGER},
    {"workspace_bytes", "workspace-bytes", "N",
     "keep the workspace in memory, at most N bytes (counted against the "
     "memory limit; such a sandbox cannot be stopped, only removed)",
     BACKEND_OPTION_INTEGER},
    {0},
};

void local_options_default(struct local_options *o) {
  *o = (struct local_options){
      .isolate = true,
      .network = true,
      .memory_bytes = LOCAL_DEFAULT_MEMORY,
      .pids = LOCAL_DEFAULT_PIDS,
  };
}

int local_options_parse(json_t *obj, const char *where, void **out,
                        struct sbx_error *e) {
  *out = NULL;
  struct local_options *o = calloc(1, sizeof(*o));
  if (!o)
    return -ENOMEM;
  local_options_default(o);
  json_t *v;
  int r = 0;
  if ((v = json_object_get(obj, "isolation"))) {
    const char *s = json_string_value(v);
    if (strcmp(s, "none") == 0)
      o->isolate = false;
    else if (strcmp(s, "namespaces") != 0)
      r = backend_option_bad(e, where, "isolation", "%s",
                             "expected \"namespaces\" or \"none\"");
  }
  if (r == 0 && (v = json_object_get(obj, "network_mode"))) {
    if (strcmp(json_string_value(v), "none") != 0)
      r = backend_option_bad(
          e, where, "network_mode", "%s",
          "expected \"none\" (or leave it unset for outbound access "
          "without the host's loopback)");
    o->network = false;
  }
  if (r == 0 && (v = json_object_get(obj, "memory_bytes"))) {
    json_int_t n = json_integer_value(v);
    if (n < 0 || (n > 0 && n < (1 << 20)))
      r = backend_option_bad(e, where, "memory_bytes", "%s",
                             "expected 0 or at least 1048576");
    o->memory_bytes = (uint64_t)n;
  }
  if (r == 0 && (v = json_object_get(obj, "pids_limit"))) {
    json_int_t n = json_integer_value(v);
    if (n < 0 || n > UINT32_MAX)
      r = backend_option_bad(e, where, "pids_limit", "%s",
                             "expected 0 to 4294967295");
    o->pids = (uint64_t)n;
  }
  if (r == 0 && (v = json_object_get(obj, "cpus"))) {
    double n = json_number_value(v);
    if (!(n >= 0) || n > 1024)
      r = backend_option_bad(e, where, "cpus", "%s", "expected 0 to 1024");
    o->cpus = n;
  }
  if (r == 0 && (v = json_object_get(obj, "workspace_bytes"))) {
    json_int_t n = json_integer_value(v);
    if (n < 0 || (n > 0 && n < 4096))
      r = backend_option_bad(e, where, "workspace_bytes", "%s",
                             "expected 0 or at least 4096");
    o->workspace_bytes = (uint64_t)n;
  }
  if (r == 0 && !o->isolate &&
      (json_object_get(obj, "network_mode") ||
       json_object_get(obj, "memory_bytes") || json_object_get(obj, "cpus") ||
       json_object_get(obj, "pids_limit") ||
       json_object_get(obj, "workspace_bytes")))
    r = backend_option_bad(
        e, where, "isolation", "%s",
        "\"none\" cannot limit or cut off the network: remove "
        "network_mode, memory_bytes, cpus, pids_limit and "
        "workspace_bytes, or isolate");
  if (r < 0) {
    free(o);
    return r;
  }
  *out = o;
  return 0;
}

void local_options_free(void *own) {
  free(own);
}
