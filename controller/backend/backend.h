/* A sandbox session as the controller sees it: a connected sandboxd client,
 * the workspace root, the environment for commands, and the backend that
 * created it. Backends (backends/<name>/) implement struct backend. */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/client.h"
#include "shared/errors.h"

struct backend;

/* How the docker backend gets sandboxd into the container. */
enum docker_sandboxd_mode {
  /* Baked when the image carries the label io.sbx.sandboxd (the path of its
   * sandboxd), else injected. */
  DOCKER_SANDBOXD_AUTO = 0,
  DOCKER_SANDBOXD_BAKED,  /* the image has /usr/local/bin/sandboxd */
  DOCKER_SANDBOXD_INJECT, /* bind-mount sbx's static sandboxd read-only */
};

struct docker_label {
  const char *key; /* not "sbx" nor "sbx.*": those are sbx's own */
  const char *value;
};

struct docker_mount {
  const char *type;   /* "bind" or "volume" */
  const char *source; /* bind: absolute host path; volume: a name, or NULL
                         for an anonymous volume removed with the sandbox */
  const char *target; /* absolute path inside the container */
  bool read_only;
};

/* Options of the docker backend (backends/docker/). Every pointer is
 * borrowed for the duration of the call that takes the options. Unset
 * fields (NULL, 0, false) mean the engine's or the image's default;
 * docker_options_merge() lays a run's options over a client's. */
struct docker_options {
  const char *host;  /* NULL: $DOCKER_HOST, else unix:///var/run/docker.sock */
  const char *image; /* NULL: "sbx-debian:latest" */
  enum docker_sandboxd_mode sandboxd_mode;
  /* The static sandboxd to inject. NULL: $SBX_SANDBOXD_STATIC, then
   * sandboxd-static next to sbx, then ../build-static/sandboxd. */
  const char *sandboxd_static;
  const char *root;         /* workspace in the container; NULL: /workspace */
  const char *network_mode; /* NULL: the engine's default; "none" */
  const uint16_t *exposed_ports; /* published on 127.0.0.1 */
  size_t n_exposed_ports;
  const struct docker_label *labels;
  size_t n_labels;
  const char *const *env; /* "NAME=value": the container's and commands' */
  size_t n_env;
  const char *user;     /* NULL: the image's; else "uid" or "uid:gid" */
  int64_t memory_bytes; /* 0: no limit */
  double cpus;          /* 0: no limit */
  int64_t pids_limit;   /* 0: no limit */
  const struct docker_mount *mounts;
  size_t n_mounts;
  bool read_only_rootfs; /* the workspace is then an anonymous volume */
  bool never_pull;       /* a missing image is an error, not pulled */
};

struct backend_options {
  const char *sandboxd_path;    /* NULL: $SBX_SANDBOXD, next to sbx, or PATH */
  const char *workspace_base;   /* NULL: $TMPDIR or /tmp */
  const char *seccomp;          /* NULL: "default"; "no-network", "off" */
  unsigned ready_timeout_ms;    /* 0: 10000 */
  struct docker_options docker; /* the docker backend's */
};

struct sandbox {
  char session_id[37];       /* UUID */
  struct sbx_client *client; /* owned */
  char *root;                /* absolute workspace root as commands see it */
  const struct backend *backend;
  void *priv; /* the backend's */
  char **env; /* "NAME=value" for commands, NULL-terminated */
  size_t nenv;
};

/* What a sandbox is created with beyond the options (lifecycle.h fills
 * it): extra path grants, local bind mounts, and for a developer-owned
 * sandbox where its sandboxd keeps its token and log, so that it outlives
 * the process that created it. Pointers are borrowed for the call. */
struct sandbox_grant {
  const char *path; /* absolute; on the local backend a host directory */
  bool read_only;
};

struct sandbox_bind {
  const char *path;   /* relative to the root */
  const char *source; /* absolute host directory */
};

struct sandbox_spec {
  const struct sandbox_grant *grants;
  size_t ngrants;
  const struct sandbox_bind *binds;
  size_t nbinds;
  bool detached;          /* developer-owned: outlives this process */
  const char *token_path; /* detached: token file to write, 0600 */
  const char *log_path;   /* detached: sandboxd's output */
};

struct backend {
  const char *name;
  /* Creates a fresh, empty sandbox and connects to its sandboxd. */
  int (*create)(const struct backend_options *o, struct sandbox **out,
                struct sbx_error *e);
  /* Shuts sandboxd down, kills its processes and removes what the session
   * owns. Idempotent; frees S. */
  int (*close)(struct sandbox *s, struct sbx_error *e);
  /* The lifecycle operations below may be NULL when a backend lacks them;
   * lifecycle.c then refuses what needs them. */
  /* create with a spec (NULL: none). */
  int (*create_spec)(const struct backend_options *o,
                     const struct sandbox_spec *spec, struct sandbox **out,
                     struct sbx_error *e);
  /* Adds what another process needs to attach to OBJ; no secrets. */
  int (*save)(const struct sandbox *s, json_t *obj);
  /* Rebuilds a sandbox from save()'s fields; connected when it runs. */
  int (*attach)(const struct backend_options *o, json_t *obj,
                struct sandbox **out, struct sbx_error *e);
  /* Frees the controller side only; the sandbox runs on. Frees S. */
  void (*detach)(struct sandbox *s);
  /* Kills its processes and stops sandboxd, keeping the workspace. */
  int (*stop)(struct sandbox *s, struct sbx_error *e);
  /* Starts a stopped sandbox again and connects; no-op when running. */
  int (*start)(struct sandbox *s, struct sbx_error *e);
  /* Whether its sandboxd is alive. */
  bool (*running)(const struct sandbox *s);
  /* Where exposed PORT is reachable from the host. */
  int (*resolve_port)(const struct sandbox *s, unsigned port, char *host,
                      size_t hostsz, unsigned *host_port, struct sbx_error *e);
};

/* Adds NAME=VALUE to the sandbox's command environment (replacing). */
int sandbox_setenv(struct sandbox *s, const char *name, const char *value);

/* Frees the controller-side parts of S (client, strings); for backends. */
void sandbox_free(struct sandbox *s);

/* Locates the sandboxd binary: O's path, $SBX_SANDBOXD, the directory of
 * the running sbx, then PATH. *OUT is new. */
int sandbox_find_sandboxd(const struct backend_options *o, char **out,
                          struct sbx_error *e);

/* Removes PATH recursively without following symlinks. */
int sandbox_rm_rf(const char *path);

#endif
