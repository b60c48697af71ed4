/* The docker backend: sandboxes are containers made through the Docker
 * Engine API (Docker, or Podman's compatible service), with sandboxd as the
 * container's entrypoint.
 *
 * The controller reaches sandboxd over ipc:// through a host runtime
 * directory (0700, the uid sandboxd runs as on the host) bind-mounted
 * read-only at DOCKER_RUN_DIR, so it works with network_mode "none".
 * sandboxd reads its token from a file there (0400) and listens in its one
 * writable subdirectory, DOCKER_RUN_DIR/listen; once the socket appears the
 * controller deletes the token and moves the socket up into the read-only
 * part, where the workload can neither replace nor remove it (see
 * rundir.c). The workspace lives inside the container (not a host bind), so
 * snapshots go through sandboxd. Containers carry the labels
 * sbx.session=<session id> and sbx.managed=true.
 *
 * Confinement (options.c, userns.c): a user namespace of its own where the
 * engine offers one (option userns), every capability dropped but those a
 * root workload needs in its own container, no-new-privileges, the
 * engine's default seccomp profile, never privileged, and memory and
 * process limits by default (DOCKER_DEFAULT_MEMORY, DOCKER_DEFAULT_PIDS).
 *
 * Beyond struct backend (backend_docker) and its options this header offers
 * what the session lifecycle needs: the published endpoint of an exposed
 * port, detaching from a live container and resuming it. Functions taking a
 * struct sandbox require one made by this backend. */
#ifndef SBX_DOCKER_H
#define SBX_DOCKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/backend/backend.h"

#define DOCKER_DEFAULT_IMAGE "sbx-debian:latest"
#define DOCKER_DEFAULT_ROOT "/workspace"
#define DOCKER_RUN_DIR "/run/sbx"
/* The subdirectory of DOCKER_RUN_DIR where sandboxd makes its socket. */
#define DOCKER_LISTEN_DIR "listen"
#define DOCKER_SANDBOXD_PATH "/usr/local/bin/sandboxd"
#define DOCKER_IMAGE_LABEL "io.sbx.sandboxd"
#define DOCKER_LABEL_SESSION "sbx.session"
#define DOCKER_LABEL_MANAGED "sbx.managed"
#define DOCKER_LABEL_ROOT "sbx.root"
/* The env option's names, comma-separated, for commands after an attach. */
#define DOCKER_LABEL_ENV "sbx.env"

extern const struct backend backend_docker;

/* How the docker backend gets sandboxd into the container. */
enum docker_sandboxd_mode {
  /* Baked when the image carries the label io.sbx.sandboxd (the path of its
   * sandboxd), else injected. */
  DOCKER_SANDBOXD_AUTO = 0,
  DOCKER_SANDBOXD_BAKED,  /* the image has /usr/local/bin/sandboxd */
  DOCKER_SANDBOXD_INJECT, /* bind-mount sbx's static sandboxd read-only */
};

/* Whether the container gets a user namespace of its own (option userns). */
enum docker_userns {
  /* Podman's "auto" where it can give one (a rootful Podman with
   * subordinate ids for the user "containers"), else the engine's default:
   * none on Docker unless its daemon remaps (userns-remap), the user's own
   * namespace on a rootless engine. */
  DOCKER_USERNS_DEFAULT = 0,
  DOCKER_USERNS_AUTO, /* required: an error where the engine has none */
  DOCKER_USERNS_HOST, /* none: container root is the engine's root */
};

/* Limits a container gets unless its options say otherwise; the option
 * DOCKER_NO_LIMIT (JSON: 0) lifts one. */
#define DOCKER_DEFAULT_MEMORY (2ll << 30) /* 2 GiB */
#define DOCKER_DEFAULT_PIDS 4096
#define DOCKER_NO_LIMIT (-1)

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

/* Options of the docker backend: what backend_options.own points to for
 * it. docker_options_parse makes them from JSON (run_config, the CLI's
 * flags, the API); C callers may fill one themselves. Every pointer is
 * borrowed for the duration of the call that takes the options. Unset
 * fields (NULL, 0, false) mean the engine's or the image's default; the
 * exposed ports, when none are set here, are backend_options.ports;
 * docker_options_merge() lays a run's options over a client's. */
struct docker_options {
  const char *host;  /* NULL: $DOCKER_HOST, else unix:///var/run/docker.sock */
  const char *image; /* NULL: "sbx-debian:latest" */
  enum docker_sandboxd_mode sandboxd_mode;
  /* The static sandboxd to inject. NULL: $SBX_SANDBOXD_STATIC, then
   * sandboxd-static next to sbx, then ../build-static/sandboxd. */
  const char *sandboxd_static;
  const char *root;         /* workspace in the container; NULL: the manifest's
                               root (sandbox_spec.root), else /workspace */
  const char *network_mode; /* NULL: the engine's default; "none" */
  const uint16_t *exposed_ports; /* published on 127.0.0.1 */
  size_t n_exposed_ports;
  const struct docker_label *labels;
  size_t n_labels;
  const char *const *env; /* "NAME=value": the container's and commands' */
  size_t n_env;
  const char *user; /* NULL: the image's; else "uid" or "uid:gid" */
  enum docker_userns userns;
  /* 0: DOCKER_DEFAULT_MEMORY and DOCKER_DEFAULT_PIDS; DOCKER_NO_LIMIT:
   * none. */
  int64_t memory_bytes;
  double cpus; /* 0: no limit */
  int64_t pids_limit;
  const struct docker_mount *mounts;
  size_t n_mounts;
  bool read_only_rootfs; /* the workspace is then an anonymous volume */
  bool never_pull;       /* a missing image is an error, not pulled */
};

/* Lays RUN over CLIENT into OUT, as the SDK's per-run options replace the
 * client's: each field RUN sets (non-NULL, non-zero, true) replaces
 * CLIENT's; arrays are replaced whole. Either may be NULL. OUT borrows from
 * both. */
void docker_options_merge(const struct docker_options *client,
                          const struct docker_options *run,
                          struct docker_options *out);

/* Checks O without contacting the engine: network_mode, exposed ports
 * (none with network_mode "none"), label keys (sbx.* reserved), env names,
 * user, userns, limits and mounts. -EINVAL with a message naming the
 * field. */
int docker_options_check(const struct docker_options *o, struct sbx_error *e);

struct docker_endpoint {
  char host[64]; /* "127.0.0.1" or "::1" */
  unsigned port;
};

/* Where the container's PORT is published on the host. -ENOENT when PORT
 * was not among the sandbox's exposed ports. */
int docker_exposed_port(const struct sandbox *s, unsigned port,
                        struct docker_endpoint *out, struct sbx_error *e);

/* The container's id and the token sandboxd accepts (borrowed; valid while
 * S lives). The token is what a later docker_resume() must present: keep it
 * only in trusted, controller-side state. */
const char *docker_container_id(const struct sandbox *s);
const char *docker_token(const struct sandbox *s);

struct docker_resume_args {
  const char *session_id; /* the session the container must belong to */
  const char *container;  /* its id or name */
  const char *token;      /* the token given to its sandboxd (hex) */
  bool allow_stopped;     /* a stopped container gives a handle without a
                             client, for a later start */
};

/* Reconnects to a live container made by this backend for A's session:
 * its labels must say sbx.managed=true and sbx.session=A->session_id, it
 * must be running, its runtime directory must be ours (0700, our uid or
 * the host uid its sandboxd runs as), and
 * its sandboxd must accept A->token (Hello). Options in O other than the
 * engine endpoint are not applied: the container keeps its own.
 * Errors: -ENOENT the container is gone (restore from a snapshot), -ESRCH it
 * is not running, -EPERM it belongs to another session or is not sbx's,
 * -EACCES sandboxd refused the token; each with a message. */
int docker_resume(const struct backend_options *o,
                  const struct docker_resume_args *a, struct sandbox **out,
                  struct sbx_error *e);

/* Frees the controller's side of S (client, engine connection) and leaves
 * the container and its runtime directory as they are, for a later
 * docker_resume(). Accepts NULL. */
void docker_detach(struct sandbox *s);

#endif
