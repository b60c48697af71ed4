/* The docker backend's options turned into a container (the body of
 * POST /containers/create) and read from JSON. Private to
 * backends/docker/. */
#ifndef SBX_DOCKER_OPTIONS_H
#define SBX_DOCKER_OPTIONS_H

#include <jansson.h>

#include "backends/docker/docker.h"

/* What the backend decided besides the options. All borrowed. */
struct docker_spec {
  const char *session_id;
  const char *image;
  const char *sandboxd; /* its path inside the container */
  const char *inject;   /* host path of the static sandboxd to bind, or NULL */
  /* The host runtime directory, mounted read-only at DOCKER_RUN_DIR but for
   * its DOCKER_LISTEN_DIR, which is read-write. */
  const char *rundir;
  const char *root;      /* the workspace inside the container */
  const char *seccomp;   /* sandboxd's --seccomp */
  const char *userns;    /* HostConfig.UsernsMode, or NULL: the engine's */
  bool workspace_volume; /* the workspace is an anonymous volume */
  /* The operator's labels (sandbox_spec's), put over the labels option;
   * sbx.* stay sbx's. */
  const struct sandbox_label *labels;
  size_t nlabels;
  int64_t expires_at;      /* sandboxd's --expires-at; 0: none */
  unsigned idle_timeout_s; /* sandboxd's --idle-timeout; 0: none */
};

/* The create body for O (already checked) and SP. *OUT is new. */
int docker_spec_json(const struct docker_options *o,
                     const struct docker_spec *sp, json_t **out,
                     struct sbx_error *e);

/* The options as run_config, the CLI and the API name them; ended by an
 * entry without a key. */
extern const struct backend_option docker_option_table[];

/* backend_docker.options_parse and options_free: *OUT is a struct
 * docker_options (with what it points to) made of OBJ. */
int docker_options_parse(json_t *obj, const char *where, void **out,
                         struct sbx_error *e);
void docker_options_free(void *own);

#endif
