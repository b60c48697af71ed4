/* A client of the Docker Engine API (Docker's daemon, or Podman's compatible
 * service) over its unix socket, with libcurl. Never a CLI.
 *
 * docker_engine_open() negotiates the API version: the engine's (the
 * Api-Version header of GET /_ping, as Docker's client reads it; GET
 * /version when that is missing), capped at the newest one sbx knows
 * (DOCKER_API_MAX) and refused below DOCKER_API_MIN. Every request then goes
 * to /v{version}/....
 *
 * Replies are bounded (8 MiB unless the request says otherwise). A status
 * outside 2xx (and 304) is an error that carries the engine's own `message`
 * for a person; transport failures name the endpoint. Neither CURLcode nor
 * HTTP statuses travel further up than this module except as the errno:
 *   -ENOENT   404, or the socket does not exist
 *   -EINVAL   400
 *   -EACCES   401, 403, or the socket may not be opened
 *   -EBUSY    409 (conflict: a name in use, a container in the wrong state)
 *   -EIO      other statuses and transport failures
 *   -ECONNREFUSED  nobody listens on the socket
 *   -ETIMEDOUT     the request's time limit passed
 *   -E2BIG    the reply exceeds its bound
 *
 * Thread-safety: one engine is used by one thread at a time. */
#ifndef SBX_DOCKER_ENGINE_H
#define SBX_DOCKER_ENGINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/buf.h"
#include "shared/errors.h"

#define DOCKER_DEFAULT_HOST "unix:///var/run/docker.sock"
#define DOCKER_API_MIN "1.25"
#define DOCKER_API_MAX "1.43"

struct docker_engine;

struct docker_request {
  const char *method;  /* "GET", "POST" or "DELETE" */
  const char *path;    /* after /vX.Y: "/containers/create?name=x" (escaped) */
  json_t *body;        /* borrowed; NULL: no body */
  unsigned timeout_ms; /* the whole request; 0: 60000 */
  size_t max_bytes;    /* the reply's bound; 0: 8 MiB */
  /* Keep only the reply's last max_bytes instead of failing past them: for
   * progress streams (a pull) whose end is what matters. */
  bool keep_tail;
  /* Podman's own API (/v{libpod}/libpod/...) instead of Docker's: for what
   * the compatible API leaves out. -ENOTSUP on an engine that is not
   * Podman. */
  bool libpod;
};

/* Connects to HOST ("unix:///path"; NULL: $DOCKER_HOST, else
 * DOCKER_DEFAULT_HOST) and negotiates the API version. *OUT is new. */
int docker_engine_open(const char *host, struct docker_engine **out,
                       struct sbx_error *e);
/* Closes; accepts NULL; returns NULL. */
struct docker_engine *docker_engine_free(struct docker_engine *en);

/* The endpoint as given ("unix:///run/podman.sock") and the negotiated
 * version ("1.41"); borrowed, valid while EN lives. */
const char *docker_engine_host(const struct docker_engine *en);
const char *docker_engine_version(const struct docker_engine *en);
/* Podman's own API version ("4.3.1", its Libpod-Api-Version header), or
 * NULL when the engine is not Podman. Borrowed. */
const char *docker_engine_libpod(const struct docker_engine *en);

/* Sends REQ. On success *OUT (when OUT is not NULL) is the reply parsed as
 * JSON (new), or NULL when the reply is empty. */
int docker_engine_json(struct docker_engine *en,
                       const struct docker_request *req, json_t **out,
                       struct sbx_error *e);
/* Sends REQ and leaves the reply's bytes in BODY (initialised by the caller;
 * req->max_bytes bounds it). */
int docker_engine_raw(struct docker_engine *en,
                      const struct docker_request *req, struct sbx_buf *body,
                      struct sbx_error *e);

/* S escaped for a URL query value, or for a path when PATH is true (then
 * "/", ":" and "@" stay, as image references need). New; NULL on OOM. */
char *docker_engine_escape(const char *s, bool path);

#endif
