/* The local backend's parts: a sandbox (local.c), sandboxd's command line
 * (command.c), its options (options.c). Private to backends/local/. */
#ifndef SBX_LOCAL_INTERNAL_H
#define SBX_LOCAL_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "controller/backend/backend.h"

#define LOCAL_DEFAULT_MEMORY (2ull << 30) /* as the docker backend's */
#define LOCAL_DEFAULT_PIDS 4096
#define LOCAL_MAX_GRANTS 64
#define LOCAL_MAX_PORTS 32

struct local_options {
  bool isolate; /* namespaces; false: isolation "none" */
  bool network; /* outbound through pasta; false: loopback only */
  uint64_t memory_bytes, pids; /* 0: none */
  double cpus;                 /* 0: none */
  uint64_t workspace_bytes;    /* the workspace in memory; 0: on disk */
};

/* One local sandbox: its sandboxd process and what it was started with. */
struct local {
  pid_t pid;                /* 0 when stopped */
  unsigned long long start; /* the pid's start time, against pid reuse */
  bool child;               /* ours to reap */
  bool detached;
  char *workspace; /* owned: removed at close */
  char *rundir;    /* owned: holds the socket */
  char *url;
  char *sandboxd;
  char *seccomp;
  char *token_path;               /* detached */
  char *log_path;                 /* detached */
  unsigned heartbeat_ms;          /* the client's; 0: the default */
  char *grants[LOCAL_MAX_GRANTS]; /* "PATH" or "PATH:ro" */
  size_t ngrants;
  struct local_options opt;
  char session_id[37];
  char *inside_root;             /* where commands see the workspace */
  char *binds[LOCAL_MAX_GRANTS]; /* isolated: "SRC:DST[:ro]" */
  size_t nbinds;
  uint16_t ports[LOCAL_MAX_PORTS], host_ports[LOCAL_MAX_PORTS];
  size_t nports;
  int64_t expires_at;      /* sandboxd's --expires-at; 0: none */
  unsigned idle_timeout_s; /* sandboxd's --idle-timeout; 0: none */
};

/* sandboxd's command line for a sandbox, and the strings it points to. */
struct local_argv {
  const char *argv[48 + 2 * (2 * LOCAL_MAX_GRANTS + LOCAL_MAX_PORTS)];
  char num[10][64];
  char fwd[LOCAL_MAX_PORTS][16];
  char etc[PATH_MAX];
};

/* Fills AS with sandboxd's command line for L (command.c); returns its
 * argv, NULL-terminated. */
const char **local_sandboxd_argv(const struct local *l, struct local_argv *as);

extern const struct backend_option local_option_table[];

/* The defaults: isolated, with outbound network and the default limits. */
void local_options_default(struct local_options *o);

/* backend_local.options_parse and options_free: *OUT is a struct
 * local_options made of OBJ. */
int local_options_parse(json_t *obj, const char *where, void **out,
                        struct sbx_error *e);
void local_options_free(void *own);

#endif
