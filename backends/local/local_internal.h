/* The local backend's parts: its options (options.c). Private to
 * backends/local/. */
#ifndef SBX_LOCAL_INTERNAL_H
#define SBX_LOCAL_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/backend/backend.h"

#define LOCAL_DEFAULT_MEMORY (2ull << 30) /* as the docker backend's */
#define LOCAL_DEFAULT_PIDS 4096

struct local_options {
  bool isolate; /* namespaces; false: isolation "none" */
  bool network; /* outbound through pasta; false: loopback only */
  uint64_t memory_bytes, pids; /* 0: none */
  double cpus;                 /* 0: none */
  uint64_t workspace_bytes;    /* the workspace in memory; 0: on disk */
};

extern const struct backend_option local_option_table[];

/* The defaults: isolated, with outbound network and the default limits. */
void local_options_default(struct local_options *o);

/* backend_local.options_parse and options_free: *OUT is a struct
 * local_options made of OBJ. */
int local_options_parse(json_t *obj, const char *where, void **out,
                        struct sbx_error *e);
void local_options_free(void *own);

#endif
