/* Private to backends/docker/: a docker sandbox's state and the steps that
 * docker.c (create, close), image.c (the image and the sandboxd to inject),
 * userns.c (what the engine offers, the user namespace), rundir.c (the host
 * runtime directory) and attach.c (records, attaching, stop and start)
 * share. Functions that fail fill E and return a negative errno. */
#ifndef SBX_DOCKER_INTERNAL_H
#define SBX_DOCKER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "backends/docker/docker.h"
#include "backends/docker/engine.h"
#include "shared/client.h"
#include "shared/rand.h"

#define PULL_TIMEOUT_MS (10u * 60 * 1000)

#define MAX_PORTS 256

struct docker_port {
  unsigned port; /* in the container */
  struct docker_endpoint at;
};

struct docker {
  struct docker_engine *en;
  char *host;      /* the engine's address when one was given, or NULL */
  char *container; /* id */
  char *rundir;    /* host runtime directory; removed at close */
  /* The host ids sandboxd runs as, which the runtime directory is handed
   * to; sd_gid (gid_t)-1 when only the uid is known. */
  uid_t sd_uid;
  gid_t sd_gid;
  char token[SBX_TOKEN_HEX + 1];
  char *token_path;      /* a recorded sandbox's token file, or NULL */
  unsigned heartbeat_ms; /* the client's (backend_options); 0: default */
  struct docker_port *ports;
  size_t nports;
};

/* S's state when S is a docker sandbox, else NULL. */
struct docker *docker_of(const struct sandbox *s);
/* Frees D (the controller's side only); accepts NULL. */
void docker_free(struct docker *d);
/* A new sandbox of this backend with its (zeroed) docker part; *S gets
 * it. -ENOMEM with E set. */
int docker_sandbox_new(struct sandbox **s, struct docker **d,
                       struct sbx_error *e);

/* Path of container ID in the API: /containers/<escaped>SUFFIX. */
int container_path(const char *id, const char *suffix, char *out, size_t size,
                   struct sbx_error *e);
/* The engine's inspection of container ID (new, an object). */
int inspect_container(struct docker_engine *en, const char *id, json_t **out,
                      struct sbx_error *e);
/* The container's label KEY from its inspection (borrowed), or NULL. */
const char *label_of(json_t *inspect, const char *key);
/* Removes container ID with its anonymous volumes; a missing one is fine. */
int remove_container(struct docker_engine *en, const char *id,
                     struct sbx_error *e);
/* Fails with what the container said (its last output) when it no longer
 * runs; IMAGE names it. */
int check_running(struct docker *d, const char *image, struct sbx_error *e);
/* The container's last lines of output, flattened into OUT ("" when none). */
void container_log_tail(struct docker_engine *en, const char *id, char *out,
                        size_t size);
/* Connects S's client to sandboxd at SOCK with D's token (Hello): the
 * socket must be served by the container's entrypoint (State.Pid) and
 * sandboxd prove it holds the token before the token is sent. */
int connect_sandboxd(struct sandbox *s, struct docker *d, const char *sock,
                     unsigned timeout_ms, struct sbx_error *e);
/* Records where the container's exposed ports are published (inspection
 * J). */
int record_ports(struct docker *d, json_t *j, struct sbx_error *e);

/* ---- rundir.c: the host runtime directory (see there) ---- */

#define LOG_TAIL_MAX 400

/* Makes D's runtime directory (0700) and its listen subdirectory. */
int rundir_make(struct docker *d, struct sbx_error *e);
/* Makes the FIFO the token goes through (0600) in the listen subdirectory
 * and hands the directory, the subdirectory and the FIFO to
 * d->sd_uid/sd_gid when sandboxd runs as someone else. */
int rundir_prepare(struct docker *d, struct sbx_error *e);
/* Before a stopped container starts again: the stale socket removed, the
 * listen subdirectory made afresh with its FIFO (rundir_prepare). */
int rundir_reset(struct docker *d, struct sbx_error *e);
/* Passes D's token to sandboxd through the FIFO and waits up to TIMEOUT_MS
 * for its socket in the listen subdirectory (failing early with what the
 * container said when it stops), then moves the socket to where the
 * container cannot touch it (its path in SOCK) and removes the
 * subdirectory, the container's last writable place in it. */
int rundir_wait_ready(struct docker *d, const char *image, unsigned timeout_ms,
                      char *sock, size_t size, struct sbx_error *e);
/* The path of sandboxd's socket in RUNDIR once it is ready, into OUT. */
int rundir_socket(const char *rundir, char *out, size_t size,
                  struct sbx_error *e);

/* ---- userns.c ---- */

/* What the engine says of itself (GET /info and its headers). */
struct engine_facts {
  bool podman;      /* Podman (its Libpod-Api-Version header) */
  bool rootless;    /* SecurityOptions "name=rootless" */
  bool remap;       /* Docker's daemon-wide userns-remap ("name=userns") */
  bool remap_known; /* remap_uid/gid read from its DockerRootDir */
  uid_t remap_uid;
  gid_t remap_gid;
};

/* What EN's engine is: Podman by its headers; rootless (and Docker's
 * userns-remap) from GET /info, except for a Podman whose socket is root's,
 * which is rootful without asking. */
int probe_engine(struct docker_engine *en, struct engine_facts *out,
                 struct sbx_error *e);
/* True when HOST ("unix:///path") is a socket owned by root. */
bool engine_socket_root_owned(const char *host);
/* The HostConfig.UsernsMode for WANT on the engine F describes (*MODE
 * static, or NULL: say nothing); *MAY_FALL_BACK when the engine may refuse
 * it for want of subordinate ids and the container is then made without.
 * -ENOTSUP when WANT is "auto" and the engine has no user namespaces. */
int choose_userns(const struct engine_facts *f, enum docker_userns want,
                  const char **mode, bool *may_fall_back, struct sbx_error *e);
/* True when E is the engine refusing a user namespace for want of ids. */
bool userns_refused(const struct sbx_error *e);
/* Rewrites E (such a refusal) into the error for userns "auto", with how
 * to fix it; returns -ENOTSUP. */
int userns_error(struct sbx_error *e);
/* The host ids that sandboxd of CONTAINER (created, maybe not started)
 * runs as: USER ("uid[:gid]"; NULL: root) through the container's user
 * namespace. *GID is (gid_t)-1 when USER gives no group. */
int sandboxd_host_ids(struct docker_engine *en, const struct engine_facts *f,
                      const char *container, const char *user, uid_t *uid,
                      gid_t *gid, struct sbx_error *e);

/* Inspects IMAGE, pulling it when it is missing and O allows; *BAKED is
 * the path of the sandboxd it carries (its label), or NULL. */
int prepare_image(struct docker_engine *en, const char *image,
                  const struct docker_options *o, char **baked,
                  struct sbx_error *e);
/* The static sandboxd to inject (*OUT new, a real path). */
int find_static_sandboxd(const struct docker_options *o, char **out,
                         struct sbx_error *e);

/* struct backend's operations (docker.c, attach.c). */
int docker_create(const struct backend_options *bo,
                  const struct sandbox_spec *spec, struct sandbox **out,
                  struct sbx_error *e);
int docker_close(struct sandbox *s, struct sbx_error *e);
int docker_save(const struct sandbox *s, json_t *obj);
int docker_attach(const struct backend_options *bo, json_t *obj,
                  struct sandbox **out, struct sbx_error *e);
bool docker_running(const struct sandbox *s);
int docker_stop(struct sandbox *s, struct sbx_error *e);
int docker_start(struct sandbox *s, struct sbx_error *e);

#endif
