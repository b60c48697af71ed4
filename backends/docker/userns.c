/* The docker backend's user namespaces: what the engine offers (GET /info,
 * Podman's libpod API), the UsernsMode a container asks for, and the host
 * ids its sandboxd runs as, to which the runtime directory is handed.
 *
 * Podman gives each container a namespace of its own with UsernsMode
 * "auto": a free range of the subordinate ids of the user "containers"
 * (/etc/subuid, /etc/subgid); "keep-id" and "nomap" are rootless only and
 * "private" needs mappings the compatible API cannot pass. Docker has no
 * per-container namespace: its daemon maps every container when started
 * with --userns-remap (/info's SecurityOptions then say "name=userns") and
 * UsernsMode "host" opts one out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/docker/docker_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* 65536 ids: root to nobody (65534), whatever the image's files say. */
#define PODMAN_AUTO "auto:size=65536"

/* True when one of /info's SecurityOptions (["name=seccomp,profile=x"])
 * is the option NAME. */
static bool has_security_option(json_t *opts, const char *name) {
  size_t i, n = strlen(name);
  json_t *v;
  json_array_foreach(opts, i, v) {
    const char *s = json_string_value(v);
    if (s && strncmp(s, "name=", 5) == 0 && strncmp(s + 5, name, n) == 0 &&
        (s[5 + n] == '\0' || s[5 + n] == ','))
      return true;
  }
  return false;
}

/* Parses "N" of at most 10 digits into *OUT, up to END or the string's
 * end; the rest in *REST. */
static bool parse_id(const char *s, unsigned long *out, const char **rest) {
  char *end = NULL;
  if (*s < '0' || *s > '9')
    return false;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end - s > 10 || v > 0xfffffffful)
    return false;
  *out = v;
  *rest = end;
  return true;
}

/* Docker's remapped root from DockerRootDir: with userns-remap the daemon
 * keeps its state in <root>/<UID>.<GID>. */
static bool remap_root(const char *dir, uid_t *uid, gid_t *gid) {
  const char *base = dir ? strrchr(dir, '/') : NULL;
  unsigned long u, g;
  const char *rest;
  if (!base || !parse_id(base + 1, &u, &rest) || *rest != '.' ||
      !parse_id(rest + 1, &g, &rest) || *rest)
    return false;
  *uid = (uid_t)u;
  *gid = (gid_t)g;
  return true;
}

bool engine_socket_root_owned(const char *host) {
  struct stat st;
  return host && strncmp(host, "unix://", 7) == 0 && stat(host + 7, &st) == 0 &&
         S_ISSOCK(st.st_mode) && st.st_uid == 0;
}

int probe_engine(struct docker_engine *en, struct engine_facts *out,
                 struct sbx_error *e) {
  *out = (struct engine_facts){.podman = docker_engine_libpod(en) != NULL};
  /* Podman answers /info in 0.1-0.3 s (it asks its runtime and storage),
   * a third of a container's start, and of it only "rootless" matters
   * here. A rootless Podman's service runs as its user and makes its
   * socket as that user: a socket of root's is a rootful engine's. */
  if (out->podman && engine_socket_root_owned(docker_engine_host(en))) {
    log_debug("container engine at %s: Podman, rootful (its socket is root's)",
              docker_engine_host(en));
    return 0;
  }
  struct docker_request req = {.method = "GET", .path = "/info"};
  _cleanup_json_ json_t *j = NULL;
  int r = docker_engine_json(en, &req, &j, e);
  if (r < 0)
    return r;
  json_t *opts = json_object_get(j, "SecurityOptions");
  out->rootless = has_security_option(opts, "rootless");
  out->remap = has_security_option(opts, "userns");
  if (out->remap)
    out->remap_known =
        remap_root(json_string_value(json_object_get(j, "DockerRootDir")),
                   &out->remap_uid, &out->remap_gid);
  log_debug("container engine at %s: %s%s, %s, seccomp %s",
            docker_engine_host(en), out->podman ? "Podman" : "Docker",
            out->rootless ? " (rootless)" : "",
            out->remap ? "userns-remap on" : "no userns-remap",
            has_security_option(opts, "seccomp") ? "on" : "OFF");
  return 0;
}

int choose_userns(const struct engine_facts *f, enum docker_userns want,
                  const char **mode, bool *may_fall_back, struct sbx_error *e) {
  *mode = NULL;
  *may_fall_back = false;
  if (want == DOCKER_USERNS_HOST) {
    *mode = "host";
    return 0;
  }
  if (f->podman) {
    /* A rootless Podman's containers already live in the user's own
     * namespace; "auto" there takes the user's subordinate ids. */
    if (want == DOCKER_USERNS_DEFAULT && f->rootless)
      return 0;
    *mode = PODMAN_AUTO;
    *may_fall_back = want == DOCKER_USERNS_DEFAULT;
    return 0;
  }
  if (want == DOCKER_USERNS_AUTO && !f->remap)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "userns \"auto\": this Docker engine gives containers "
                         "no user namespace (start dockerd with "
                         "--userns-remap), or use userns \"host\"");
  return 0;
}

bool userns_refused(const struct sbx_error *e) {
  return e && (strstr(e->msg, "available IDs") ||
               strstr(e->msg, "cannot find mappings") ||
               strstr(e->msg, "no subuid ranges"));
}

int userns_error(struct sbx_error *e) {
  char msg[SBX_ERROR_MSG_MAX];
  (void)snprintf(msg, sizeof(msg), "%s", e ? e->msg : "");
  return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                       "userns \"auto\": the container engine cannot give the "
                       "container a user namespace (%s); rootful Podman takes "
                       "its ids from the entries for the user \"containers\" "
                       "in /etc/subuid and /etc/subgid (e.g. "
                       "containers:2147483647:2147483648), or use userns "
                       "\"host\"",
                       msg);
}

/* ID mapped through MAP (Podman's ["CONTAINER:HOST:SIZE", ...]); an absent
 * map is the identity. False when ID is outside every range. */
static bool map_id(json_t *map, unsigned long id, unsigned long *out) {
  if (!json_is_array(map) || json_array_size(map) == 0) {
    *out = id;
    return true;
  }
  size_t i;
  json_t *v;
  json_array_foreach(map, i, v) {
    const char *s = json_string_value(v);
    unsigned long c, h, n;
    const char *rest;
    if (!s || !parse_id(s, &c, &rest) || *rest != ':' ||
        !parse_id(rest + 1, &h, &rest) || *rest != ':' ||
        !parse_id(rest + 1, &n, &rest) || *rest)
      continue;
    if (id >= c && id - c < n && h + (id - c) <= 0xfffffffful) {
      *out = h + (id - c);
      return true;
    }
  }
  return false;
}

int sandboxd_host_ids(struct docker_engine *en, const struct engine_facts *f,
                      const char *container, const char *user, uid_t *uid,
                      gid_t *gid, struct sbx_error *e) {
  /* The ids in the container: USER's ("uid" or "uid:gid"; the group of a
   * bare uid is left alone), else root's. */
  unsigned long cu = 0, cg = 0, hu, hg;
  bool has_gid = true;
  const char *rest;
  if (user && *user) {
    if (!parse_id(user, &cu, &rest) || (*rest && *rest != ':') ||
        (*rest == ':' && (!parse_id(rest + 1, &cg, &rest) || *rest)))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "container %.12s runs as \"%.64s\", not a numeric "
                           "uid[:gid]",
                           container, user);
    has_gid = strchr(user, ':') != NULL;
  }
  _cleanup_json_ json_t *j = NULL;
  json_t *maps = NULL;
  if (f->podman) {
    char path[512];
    int r = container_path(container, "/json", path, sizeof(path), e);
    if (r < 0)
      return r;
    struct docker_request req = {.method = "GET", .path = path, .libpod = true};
    r = docker_engine_json(en, &req, &j, e);
    if (r < 0)
      return r;
    maps = json_object_get(json_object_get(j, "HostConfig"), "IDMappings");
  } else if (f->remap && !f->remap_known) {
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "the Docker engine remaps user ids but its "
                         "DockerRootDir does not say to which; use userns "
                         "\"host\"");
  }
  bool ok = map_id(json_object_get(maps, "UidMap"), cu, &hu) &&
            map_id(json_object_get(maps, "GidMap"), cg, &hg);
  if (ok && f->remap && !f->podman) {
    hu = cu + f->remap_uid;
    hg = cg + f->remap_gid;
  }
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ERANGE,
                         "user \"%lu:%lu\" is outside container %.12s's user "
                         "namespace",
                         cu, cg, container);
  *uid = (uid_t)hu;
  *gid = has_gid ? (gid_t)hg : (gid_t)-1;
  return 0;
}
