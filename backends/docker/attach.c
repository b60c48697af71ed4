/* Docker sandboxes that outlive a process: their records, attaching to
 * (resuming) a live container after proving it is ours, and stopping and
 * starting one. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/docker/docker_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"

/* The host side of the container's runtime directory, from the mounts in
 * its inspection; it must be a directory of ours (or handed to D's
 * sandboxd) that nobody else may enter, or the socket in it is not to be
 * trusted. */
static int find_rundir(json_t *j, const struct docker *d, const char *id,
                       char **out, struct sbx_error *e) {
  json_t *mounts = json_object_get(j, "Mounts");
  size_t i;
  json_t *m;
  const char *src = NULL;
  json_array_foreach(mounts, i, m) {
    const char *dst = json_string_value(json_object_get(m, "Destination"));
    if (dst && strcmp(dst, DOCKER_RUN_DIR) == 0) {
      src = json_string_value(json_object_get(m, "Source"));
      break;
    }
  }
  if (!src || src[0] != '/' || strlen(src) > 200)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "container %.12s has no sbx runtime directory at %s",
                         id, DOCKER_RUN_DIR);
  /* Ours: owned by us, or by the host uid the container's sandboxd runs as
   * (the directory was handed to it at creation). */
  struct stat st;
  if (lstat(src, &st) < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, errno,
                         "the runtime directory \"%s\" of container %.12s is "
                         "gone: %m",
                         src, id);
  if (!S_ISDIR(st.st_mode) || (st.st_mode & 077) ||
      (st.st_uid != geteuid() && st.st_uid != d->sd_uid))
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "the runtime directory \"%s\" of container %.12s is "
                         "not a private directory of ours",
                         src, id);
  *out = strdup(src);
  return *out ? 0 : sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
}

/* The commands' environment of the container inspected as J: the values
 * its env option gave (the names its DOCKER_LABEL_ENV label lists), as
 * create_container set them. 0 or -ENOMEM. */
static int restore_env(struct sandbox *s, json_t *j) {
  const char *names = label_of(j, DOCKER_LABEL_ENV);
  json_t *env = json_object_get(json_object_get(j, "Config"), "Env");
  for (const char *p = names; p && *p;) {
    size_t k = strcspn(p, ",");
    size_t i;
    json_t *kv;
    json_array_foreach(env, i, kv) {
      const char *v = json_string_value(kv);
      if (!v || strncmp(v, p, k) != 0 || v[k] != '=')
        continue;
      _cleanup_free_ char *name = strndup(p, k);
      int r = name ? sandbox_setenv(s, name, v + k + 1) : -ENOMEM;
      if (r < 0)
        return r;
      break;
    }
    p += k + (p[k] == ',');
  }
  return 0;
}

int docker_resume(const struct backend_options *bo,
                  const struct docker_resume_args *a, struct sandbox **out,
                  struct sbx_error *e) {
  *out = NULL;
  if (!a || !a->session_id || !a->container || !a->token ||
      strlen(a->session_id) >= sizeof(((struct sandbox *)0)->session_id) ||
      strlen(a->token) != SBX_TOKEN_HEX)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "resume needs a session id, a container and a "
                         "%d-digit token",
                         SBX_TOKEN_HEX);
  struct sandbox *s = NULL;
  struct docker *d = NULL;
  int rn = docker_sandbox_new(&s, &d, e);
  if (rn < 0)
    return rn;
  memcpy(s->session_id, a->session_id, strlen(a->session_id) + 1);
  memcpy(d->token, a->token, SBX_TOKEN_HEX + 1);
  d->heartbeat_ms = bo ? bo->heartbeat_ms : 0;
  _cleanup_json_ json_t *j = NULL;
  _cleanup_free_ char *rundir = NULL;
  const struct docker_options *own = bo ? bo->own : NULL;
  const char *host = own ? own->host : NULL;
  int r = docker_engine_open(host, &d->en, e);
  if (r < 0)
    goto fail;
  if (host && !(d->host = strdup(host))) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  if (r < 0)
    goto fail;
  r = inspect_container(d->en, a->container, &j, e);
  if (r == -ENOENT) {
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                      "container \"%.64s\" of session %s is gone", a->container,
                      a->session_id);
    goto fail;
  }
  if (r < 0)
    goto fail;
  const char *managed = label_of(j, DOCKER_LABEL_MANAGED);
  const char *session = label_of(j, DOCKER_LABEL_SESSION);
  if (!managed || strcmp(managed, "true") != 0 || !session) {
    r = sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                      "container \"%.64s\" was not made by sbx (no %s=true "
                      "label); refusing to resume it",
                      a->container, DOCKER_LABEL_MANAGED);
    goto fail;
  }
  if (strcmp(session, a->session_id) != 0) {
    r = sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                      "container \"%.64s\" belongs to session %.64s, not %s; "
                      "refusing to resume it",
                      a->container, session, a->session_id);
    goto fail;
  }
  const char *id = json_string_value(json_object_get(j, "Id"));
  d->container = strdup(id ? id : a->container);
  if (!d->container) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  json_t *st = json_object_get(j, "State");
  bool running = json_is_true(json_object_get(st, "Running"));
  if (!running && !a->allow_stopped) {
    const char *status = json_string_value(json_object_get(st, "Status"));
    r = sbx_error_set(e, SBX_UNAVAILABLE, ESRCH,
                      "container %.12s of session %s is not running (%s)",
                      d->container, a->session_id, status ? status : "?");
    goto fail;
  }
  struct engine_facts facts;
  /* A user sbx did not set (the image's, by name) is not one it handed
   * the directory to: then sandboxd's are root's ids. */
  const char *user =
      json_string_value(json_object_get(json_object_get(j, "Config"), "User"));
  if (user && (*user < '0' || *user > '9'))
    user = NULL;
  if ((r = probe_engine(d->en, &facts, e)) < 0 ||
      (r = sandboxd_host_ids(d->en, &facts, d->container, user, &d->sd_uid,
                             &d->sd_gid, e)) < 0 ||
      (r = find_rundir(j, d, d->container, &rundir, e)) < 0)
    goto fail;
  r = restore_env(s, j);
  if (r < 0) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  if (!running) {
    /* A stopped container: a handle without a client, to start again. */
    const char *root0 = label_of(j, DOCKER_LABEL_ROOT);
    s->root = strdup(root0 && root0[0] == '/' ? root0 : DOCKER_DEFAULT_ROOT);
    if (!s->root) {
      r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
      goto fail;
    }
    d->rundir = TAKE_PTR(rundir);
    *out = s;
    return 0;
  }
  char sock[PATH_MAX];
  r = rundir_socket(rundir, sock, sizeof(sock), e);
  if (r < 0)
    goto fail;
  r = connect_sandboxd(
      s, d, sock, bo && bo->ready_timeout_ms ? bo->ready_timeout_ms : 10000, e);
  if (r < 0) {
    /* Another token, or an impostor on the socket: the client said which
     * socket did not prove itself. */
    if (e && e->code == SBX_UNAUTHENTICATED) {
      char why[SBX_ERROR_MSG_MAX];
      memcpy(why, e->msg, sizeof(why));
      r = sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                        "%.400s; refusing to resume container %.12s", why,
                        d->container);
    }
    goto fail;
  }
  const char *root = label_of(j, DOCKER_LABEL_ROOT);
  s->root = strdup(root && root[0] == '/' ? root : DOCKER_DEFAULT_ROOT);
  if (!s->root || (r = record_ports(d, j, e)) < 0) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  /* Only now is the directory ours to remove at close. */
  d->rundir = TAKE_PTR(rundir);
  *out = s;
  return 0;
fail:
  /* Leave the container alone: it is not ours until it proved to be. */
  docker_detach(s);
  return r;
}

/* The record's docker part: the container, the engine when it is not the
 * default one, and where the token is (the token itself stays in its 0600
 * file). */
int docker_save(const struct sandbox *s, json_t *obj) {
  const struct docker *d = s->priv;
  json_t *o = json_pack("{s:s, s:s, s:s?, s:s?}", "container", d->container,
                        "session_id", s->session_id, "token_file",
                        d->token_path, "host", d->host);
  if (!o || backend_heartbeat_save(d->heartbeat_ms, o) < 0) {
    json_decref(o);
    return -ENOMEM;
  }
  int r = json_object_update(obj, o) < 0 ? -ENOMEM : 0;
  json_decref(o);
  return r;
}

/* Attaches through docker_resume: labels, a running container, a private
 * runtime directory, and a sandboxd that accepts the recorded token. The
 * token comes from the record's token file. */
int docker_attach(const struct backend_options *bo, json_t *obj,
                  struct sandbox **out, struct sbx_error *e) {
  const char *container = json_string_value(json_object_get(obj, "container"));
  const char *sid = json_string_value(json_object_get(obj, "session_id"));
  const char *tokf = json_string_value(json_object_get(obj, "token_file"));
  if (!container || !sid || !tokf)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the docker sandbox record lacks its container, "
                         "session or token file");
  _cleanup_free_ char *tok = NULL;
  size_t len = 0;
  int r = sbx_read_file(tokf, 256, &tok, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read the token file \"%s\"",
                         tokf);
  while (len > 0 && (tok[len - 1] == '\n' || tok[len - 1] == ' '))
    tok[--len] = '\0';
  struct docker_resume_args a = {.session_id = sid,
                                 .container = container,
                                 .token = tok,
                                 .allow_stopped = true};
  /* The engine the sandbox was made on, not the caller's options. */
  struct docker_options own = {
      .host = json_string_value(json_object_get(obj, "host"))};
  struct backend_options abo = bo ? *bo : (struct backend_options){0};
  abo.own = &own;
  abo.heartbeat_ms = backend_heartbeat(bo, obj);
  r = docker_resume(&abo, &a, out, e);
  explicit_bzero(tok, len);
  if (r == 0) {
    struct docker *d = (*out)->priv;
    if (!(d->token_path = strdup(tokf))) {
      docker_detach(*out);
      *out = NULL;
      return -ENOMEM;
    }
  }
  return r;
}

bool docker_running(const struct sandbox *s) {
  return s && s->client != NULL;
}

/* Stops the container (sandboxd gets TERM and kills its processes); the
 * container and its workspace stay for a later start. */
int docker_stop(struct sandbox *s, struct sbx_error *e) {
  struct docker *d = s->priv;
  s->client = sbx_client_free(s->client);
  char path[512];
  int r = container_path(d->container, "/stop?t=5", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {.method = "POST", .path = path};
  return docker_engine_json(d->en, &req, NULL, e);
}

/* Starts a stopped container again (with its token written anew: it was
 * deleted once sandboxd had read it) and connects to its sandboxd. */
int docker_start(struct sandbox *s, struct sbx_error *e) {
  if (s->client)
    return 0;
  struct docker *d = s->priv;
  char path[512];
  /* sandboxd reads its token again; its old socket has gone stale. */
  int r = rundir_reset(d, e);
  if (r == 0)
    r = container_path(d->container, "/start", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {.method = "POST", .path = path};
  /* Podman releases a stopped container's network address in a cleanup
   * process of its own after the stop has returned; a start before it has
   * run finds the address still allocated ("duplicate allocation is not
   * allowed") and succeeds once it has. So such a start is tried again,
   * for at most 5 s. */
  for (int tries = 0;; tries++) {
    r = docker_engine_json(d->en, &req, NULL, e);
    if (r == 0 || tries == 20 || !e ||
        !strstr(e->msg, "duplicate allocation is not allowed"))
      break;
    log_debug("docker: container %.12s: %s; starting it again", d->container,
              e->msg);
    (void)usleep(250000);
  }
  char sock[PATH_MAX];
  if (r == 0)
    r = rundir_wait_ready(d, "the container's image", 10000, sock, sizeof(sock),
                          e);
  if (r < 0)
    return r;
  return connect_sandboxd(s, d, sock, 10000, e);
}
