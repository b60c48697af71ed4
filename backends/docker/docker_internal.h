/* Private to backends/docker/: a docker sandbox's state and the steps that
 * docker.c (create, close), image.c (the image and the sandboxd to inject)
 * and attach.c (records, attaching, stop and start) share. Functions that
 * fail fill E and return a negative errno. */
#ifndef SBX_DOCKER_INTERNAL_H
#define SBX_DOCKER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

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
  char token[SBX_TOKEN_HEX + 1];
  char *token_path; /* a recorded sandbox's token file, or NULL */
  struct docker_port *ports;
  size_t nports;
};

/* S's state when S is a docker sandbox, else NULL. */
struct docker *docker_of(const struct sandbox *s);
/* Frees D (the controller's side only); accepts NULL. */
void docker_free(struct docker *d);

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
/* Waits up to TIMEOUT_MS for sandboxd's socket SOCK to appear, failing
 * early with what the container said when it stops. */
int wait_socket(struct docker *d, const char *sock, const char *image,
                unsigned timeout_ms, struct sbx_error *e);
/* Connects S's client to sandboxd at SOCK with D's token (Hello). */
int connect_sandboxd(struct sandbox *s, struct docker *d, const char *sock,
                     unsigned timeout_ms, struct sbx_error *e);
/* Records where the container's exposed ports are published (inspection
 * J). */
int record_ports(struct docker *d, json_t *j, struct sbx_error *e);

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
