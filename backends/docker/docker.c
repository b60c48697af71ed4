/* The docker backend: one container per sandbox session, made through the
 * Docker Engine API, with sandboxd as its entrypoint (baked into the image
 * or sbx's static build bind-mounted read-only), reached over ipc:// through
 * a bind-mounted 0700 host runtime directory (rundir.c), confined as
 * docker.h says (options.c, userns.c). */
#include "backends/docker/docker.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/docker/docker_internal.h"
#include "backends/docker/options.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/rand.h"

struct docker *docker_of(const struct sandbox *s) {
  return s && s->backend == &backend_docker ? s->priv : NULL;
}

const char *docker_container_id(const struct sandbox *s) {
  struct docker *d = docker_of(s);
  return d ? d->container : NULL;
}

int docker_sandbox_new(struct sandbox **s, struct docker **d,
                       struct sbx_error *e) {
  *s = calloc(1, sizeof(**s));
  *d = calloc(1, sizeof(**d));
  if (!*s || !*d) {
    free(*s);
    free(*d);
    *s = NULL;
    *d = NULL;
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  (*s)->backend = &backend_docker;
  (*s)->priv = *d;
  return 0;
}

const char *docker_token(const struct sandbox *s) {
  struct docker *d = docker_of(s);
  return d ? d->token : NULL;
}

int docker_exposed_port(const struct sandbox *s, unsigned port,
                        struct docker_endpoint *out, struct sbx_error *e) {
  struct docker *d = docker_of(s);
  if (!d)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "not a docker sandbox");
  if (port < 1 || port > 65535)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "Exposed ports must be integers between 1 and "
                         "65535.");
  for (size_t i = 0; i < d->nports; i++)
    if (d->ports[i].port == port) {
      *out = d->ports[i].at;
      return 0;
    }
  return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                       "DockerSandboxClient was not configured to expose "
                       "port %u.",
                       port);
}

/* Frees D (the controller's side only). */
void docker_free(struct docker *d) {
  if (!d)
    return;
  docker_engine_free(d->en);
  free(d->host);
  free(d->container);
  free(d->rundir);
  free(d->token_path);
  free(d->ports);
  explicit_bzero(d->token, sizeof(d->token));
  free(d);
}

/* Path of container ID in the API: /containers/<escaped>SUFFIX. */
int container_path(const char *id, const char *suffix, char *out, size_t size,
                   struct sbx_error *e) {
  _cleanup_free_ char *esc = docker_engine_escape(id, false);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  int n = snprintf(out, size, "/containers/%s%s", esc, suffix);
  if (n < 0 || (size_t)n >= size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "container name \"%.64s\" is too long", id);
  return 0;
}

int inspect_container(struct docker_engine *en, const char *id, json_t **out,
                      struct sbx_error *e) {
  char path[512];
  int r = container_path(id, "/json", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {.method = "GET", .path = path};
  r = docker_engine_json(en, &req, out, e);
  if (r == 0 && !json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "the container engine's inspection of \"%s\" is not "
                         "an object",
                         id);
  }
  return r;
}

const char *label_of(json_t *inspect, const char *key) {
  json_t *cfg = json_object_get(inspect, "Config");
  return json_string_value(
      json_object_get(json_object_get(cfg, "Labels"), key));
}

/* The last lines the container wrote (stdout and stderr), flattened into
 * OUT for an error message; "" when there are none or they cannot be had. */
void container_log_tail(struct docker_engine *en, const char *id, char *out,
                        size_t size) {
  out[0] = '\0';
  char path[512];
  if (container_path(id, "/logs?stdout=1&stderr=1&tail=10", path, sizeof(path),
                     NULL) < 0)
    return;
  _cleanup_buf_ struct sbx_buf body = {0};
  sbx_buf_init(&body, 64 * 1024);
  struct docker_request req = {.method = "GET",
                               .path = path,
                               .timeout_ms = 5000,
                               .max_bytes = 64 * 1024,
                               .keep_tail = true};
  if (docker_engine_raw(en, &req, &body, NULL) < 0)
    return;
  /* Without a TTY the engine frames each write: 1 byte stream (0-2), 3
   * zero bytes, a big-endian 32-bit length, then the bytes. */
  _cleanup_buf_ struct sbx_buf text = {0};
  sbx_buf_init(&text, 64 * 1024);
  const unsigned char *p = (const unsigned char *)body.data;
  size_t n = body.len, i = 0;
  bool framed = n >= 8 && p[0] <= 2 && !p[1] && !p[2] && !p[3];
  while (framed && i + 8 <= n) {
    size_t len = (size_t)p[i + 4] << 24 | (size_t)p[i + 5] << 16 |
                 (size_t)p[i + 6] << 8 | p[i + 7];
    if (len > n - i - 8)
      len = n - i - 8;
    (void)sbx_buf_append(&text, p + i + 8, len);
    i += 8 + len;
  }
  if (!framed)
    (void)sbx_buf_append(&text, body.data, body.len);
  while (text.len &&
         (text.data[text.len - 1] == '\n' || text.data[text.len - 1] == ' '))
    text.len--;
  size_t start = text.len > LOG_TAIL_MAX ? text.len - LOG_TAIL_MAX : 0;
  size_t o = 0;
  for (size_t k = start; k < text.len && o + 1 < size; k++) {
    unsigned char ch = (unsigned char)text.data[k];
    if (ch == '\n') {
      if (o + 3 >= size)
        break;
      out[o++] = ';';
      out[o++] = ' ';
    } else {
      out[o++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
    }
  }
  out[o] = '\0';
}

static void sleep_us(unsigned us) {
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  (void)nanosleep(&ts, NULL);
}

/* Removes container ID with its anonymous volumes; a missing one is fine. */
int remove_container(struct docker_engine *en, const char *id,
                     struct sbx_error *e) {
  char path[512];
  int r = container_path(id, "?force=1&v=1", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {
      .method = "DELETE", .path = path, .timeout_ms = 30000};
  /* Podman refuses a forced removal that races the container's own exit
   * ("container state improper"); the next attempt finds it stopped. */
  for (unsigned attempt = 0;; attempt++) {
    r = docker_engine_json(en, &req, NULL, e);
    if (r == -ENOENT) {
      sbx_error_clear(e);
      return 0;
    }
    if (r != -EIO || attempt == 4)
      return r;
    sleep_us(20000u << attempt);
  }
}

int docker_close(struct sandbox *s, struct sbx_error *e) {
  if (!s)
    return 0;
  struct docker *d = s->priv;
  int r = 0;
  if (d) {
    /* Close the connection first: the container is about to vanish. */
    s->client = sbx_client_free(s->client);
    if (d->container && d->en)
      r = remove_container(d->en, d->container, e);
    if (d->rundir)
      (void)sandbox_rm_rf(d->rundir);
    docker_free(d);
  }
  s->priv = NULL;
  sandbox_free(s);
  return r;
}

void docker_detach(struct sandbox *s) {
  if (!s)
    return;
  docker_free(docker_of(s));
  s->priv = NULL;
  sandbox_free(s);
}

/* Fails with what the container said when it is no longer running. */
int check_running(struct docker *d, const char *image, struct sbx_error *e) {
  _cleanup_json_ json_t *j = NULL;
  int r = inspect_container(d->en, d->container, &j, e);
  if (r < 0)
    return r;
  json_t *st = json_object_get(j, "State");
  if (json_is_true(json_object_get(st, "Running")))
    return 0;
  char tail[LOG_TAIL_MAX + 64];
  container_log_tail(d->en, d->container, tail, sizeof(tail));
  const char *status = json_string_value(json_object_get(st, "Status"));
  return sbx_error_set(
      e, SBX_UNAVAILABLE, ECHILD,
      "sandboxd in a container of image \"%s\" stopped (%s, exit code "
      "%lld)%s%s",
      image, status ? status : "not running",
      (long long)json_integer_value(json_object_get(st, "ExitCode")),
      tail[0] ? ": " : "", tail);
}

/* The host pid of the container's entrypoint, sandboxd (State.Pid); 0
 * when the engine does not say, and then it is not checked. */
static int entrypoint_pid(struct docker *d, pid_t *pid, struct sbx_error *e) {
  _cleanup_json_ json_t *j = NULL;
  int r = inspect_container(d->en, d->container, &j, e);
  if (r < 0)
    return r;
  json_int_t p =
      json_integer_value(json_object_get(json_object_get(j, "State"), "Pid"));
  *pid = p > 0 && p <= INT32_MAX ? (pid_t)p : 0;
  return 0;
}

/* Connects S's client to the sandboxd behind SOCK and checks with Hello,
 * within BUDGET_MS in all, that it takes D's token: only a sandboxd that
 * is the container's entrypoint and proves it holds the token gets it. */
int connect_sandboxd(struct sandbox *s, struct docker *d, const char *sock,
                     unsigned budget_ms, struct sbx_error *e) {
  char url[PATH_MAX + 16];
  int n = snprintf(url, sizeof(url), "ipc://%s", sock);
  if (n < 0 || (size_t)n >= sizeof(url))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "runtime directory path is too long");
  pid_t pid = 0;
  int r = entrypoint_pid(d, &pid, e);
  if (r < 0)
    return r;
  struct sbx_client_config cc = {
      .url = url,
      .token = (const uint8_t *)d->token,
      .token_len = strlen(d->token),
      .client_name = "sbx",
      .peer_pid = pid,
      .heartbeat_ms = d->heartbeat_ms,
  };
  r = sbx_client_new(&cc, &s->client, e);
  if (r < 0)
    return r;
  /* The client tries a call 4 times (3 retries): a quarter each keeps a
   * sandboxd that accepted and then hung within the budget. */
  Sbx__V1__Hello h = SBX__V1__HELLO__INIT;
  h.client_version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  h.client_name = "sbx";
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  req.hello = &h;
  unsigned per_try = budget_ms / 4 > 250 ? budget_ms / 4 : 250;
  Sbx__V1__Response *reply = NULL;
  r = sbx_client_call(s->client, &req, SBX__V1__RESPONSE__BODY_HELLO, per_try,
                      &reply, e);
  sbx_client_reply_free(reply);
  if (r == -ETIMEDOUT)
    return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                         "sandboxd in container %.12s made its socket but did "
                         "not answer Hello within %u ms",
                         d->container, per_try * 4);
  return r;
}

/* Records the host endpoints of the container's published ports from its
 * inspection J (NetworkSettings.Ports {"8000/tcp": [{HostIp, HostPort}]}). */
int record_ports(struct docker *d, json_t *j, struct sbx_error *e) {
  json_t *ports =
      json_object_get(json_object_get(j, "NetworkSettings"), "Ports");
  const char *key;
  json_t *v;
  size_t n = 0;
  free(d->ports);
  d->ports = NULL;
  d->nports = 0;
  if (!json_is_object(ports) || json_object_size(ports) == 0)
    return 0;
  size_t cap = json_object_size(ports);
  if (cap > MAX_PORTS)
    cap = MAX_PORTS;
  d->ports = calloc(cap, sizeof(*d->ports));
  if (!d->ports)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  json_object_foreach(ports, key, v) {
    char *end = NULL;
    errno = 0;
    unsigned long cport = strtoul(key, &end, 10);
    if (errno || end == key || strcmp(end, "/tcp") != 0 || cport < 1 ||
        cport > 65535 || !json_is_array(v) || json_array_size(v) == 0 ||
        n >= cap)
      continue;
    json_t *b = json_array_get(v, 0);
    const char *hip = json_string_value(json_object_get(b, "HostIp"));
    const char *hport = json_string_value(json_object_get(b, "HostPort"));
    unsigned long hp = hport ? strtoul(hport, &end, 10) : 0;
    if (!hport || *end || hp < 1 || hp > 65535)
      continue;
    /* As the SDK does: an any-address binding is reached on loopback. */
    if (!hip || !*hip || strcmp(hip, "0.0.0.0") == 0)
      hip = "127.0.0.1";
    else if (strcmp(hip, "::") == 0)
      hip = "::1";
    if (strlen(hip) >= sizeof(d->ports[n].at.host))
      continue;
    d->ports[n].port = (unsigned)cport;
    memcpy(d->ports[n].at.host, hip, strlen(hip) + 1);
    d->ports[n].at.port = (unsigned)hp;
    n++;
  }
  d->nports = n;
  return 0;
}

/* How a container is made: its description and what its sandboxd needs
 * between its creation and its start. */
struct making {
  json_t *spec; /* borrowed; its UsernsMode is dropped on a fallback */
  const struct engine_facts *facts;
  const char *user;   /* the user option, or NULL */
  bool published;     /* it publishes ports */
  bool may_fall_back; /* made without a user namespace when refused one */
};

/* Creates the container from M's spec. When the engine refuses its user
 * namespace for want of subordinate ids, it is made without one for the
 * default userns, and the error says how to give it one for "auto". */
static int create_one(struct docker *d, const char *session_id,
                      struct making *m, struct sbx_error *e) {
  char path[128];
  (void)snprintf(path, sizeof(path), "/containers/create?name=sbx-%s",
                 session_id);
  struct docker_request req = {.method = "POST", .path = path, .body = m->spec};
  _cleanup_json_ json_t *created = NULL;
  json_t *host = json_object_get(m->spec, "HostConfig");
  int r = docker_engine_json(d->en, &req, &created, e);
  if (r < 0 && json_object_get(host, "UsernsMode") && userns_refused(e)) {
    if (!m->may_fall_back)
      return userns_error(e);
    log_debug("docker: the engine gives no user namespace (%s); making the "
              "container without one",
              e->msg);
    m->may_fall_back = false;
    if (json_object_del(host, "UsernsMode") < 0)
      return sbx_error_set(e, SBX_INTERNAL, EINVAL, "no UsernsMode to drop");
    sbx_error_clear(e);
    r = docker_engine_json(d->en, &req, &created, e);
  }
  if (r < 0)
    return r;
  const char *id = json_string_value(json_object_get(created, "Id"));
  if (!id || !*id)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "the container engine created a container "
                         "without an Id");
  free(d->container);
  d->container = strdup(id);
  return d->container ? 0
                      : sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
}

/* Creates the container, hands the runtime directory with the token to the
 * host ids its sandboxd runs as, and starts it. With published ports a
 * start can fail with "address already in use": Podman picks a free host
 * port when it creates the container and binds it only at the start, and
 * another process may take it in between. Such a container is removed and
 * made again, at most three times. */
static int create_and_start(struct docker *d, const char *session_id,
                            struct making *m, struct sbx_error *e) {
  for (int attempt = 1;; attempt++) {
    int r = create_one(d, session_id, m, e);
    if (r == 0)
      r = sandboxd_host_ids(d->en, m->facts, d->container, m->user, &d->sd_uid,
                            &d->sd_gid, e);
    if (r == 0)
      r = rundir_prepare(d, e);
    char path[128];
    if (r == 0)
      r = container_path(d->container, "/start", path, sizeof(path), e);
    if (r < 0)
      return r;
    struct docker_request start = {.method = "POST", .path = path};
    r = docker_engine_json(d->en, &start, NULL, e);
    if (r == 0 || !m->published || attempt == 3 || !e ||
        !strstr(e->msg, "address already in use"))
      return r;
    log_debug("docker: container %.12s: %s; making it again", d->container,
              e->msg);
    struct sbx_error ignored = {0};
    if (remove_container(d->en, d->container, &ignored) < 0)
      return r;
    free(d->container);
    d->container = NULL;
  }
}

/* The docker options of BO (its own, or the defaults) into *OUT, with BO's
 * exposed ports when the options name none. */
static void effective_options(const struct backend_options *bo,
                              struct docker_options *out) {
  static const struct docker_options none = {0};
  *out = bo && bo->own ? *(const struct docker_options *)bo->own : none;
  if (bo && !out->n_exposed_ports) {
    out->exposed_ports = bo->ports;
    out->n_exposed_ports = bo->nports;
  }
}

/* What S needs once its sandboxd answers: where its ports are published
 * (each of O's must be), its workspace ROOT and its commands' env. */
static int finish_sandbox(struct sandbox *s, struct docker *d,
                          const struct docker_options *o, const char *root,
                          struct sbx_error *e) {
  if (o->n_exposed_ports) {
    _cleanup_json_ json_t *j = NULL;
    int r = inspect_container(d->en, d->container, &j, e);
    if (r < 0 || (r = record_ports(d, j, e)) < 0)
      return r;
    for (size_t i = 0; i < o->n_exposed_ports; i++) {
      struct docker_endpoint ep;
      if (docker_exposed_port(s, o->exposed_ports[i], &ep, e) < 0)
        return sbx_error_set(e, SBX_INTERNAL, EIO,
                             "the container engine did not publish port %u",
                             o->exposed_ports[i]);
    }
  }
  s->root = strdup(root);
  if (!s->root)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  for (size_t i = 0; i < o->n_env; i++) {
    const char *eq = strchr(o->env[i], '=');
    _cleanup_free_ char *name = strndup(o->env[i], (size_t)(eq - o->env[i]));
    if (!name || sandbox_setenv(s, name, eq + 1) < 0)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  return 0;
}

static int create_container(const struct backend_options *bo,
                            const struct sandbox_spec *spec,
                            struct sandbox **out, struct sbx_error *e) {
  struct docker_options eff;
  effective_options(bo, &eff);
  const struct docker_options *o = &eff;
  *out = NULL;
  /* The workspace is at the manifest's root, as the SDK's docker sandbox
   * mounts it; the root option places a manifest that leaves its root at
   * the default, and may not contradict one that names its own. */
  const char *mroot = spec && spec->root ? spec->root : DOCKER_DEFAULT_ROOT;
  if (eff.root && strcmp(mroot, DOCKER_DEFAULT_ROOT) != 0 &&
      strcmp(eff.root, mroot) != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the manifest's root \"%s\" and the root option "
                         "\"%s\" differ: give the workspace's place once",
                         mroot, eff.root);
  if (!eff.root)
    eff.root = mroot;
  /* Everything that can be refused is refused before anything exists. */
  int r = docker_options_check(o, e);
  if (r < 0)
    return r;
  const char *image = o->image ? o->image : DOCKER_DEFAULT_IMAGE;
  const char *root = o->root ? o->root : DOCKER_DEFAULT_ROOT;
  unsigned tmo = bo && bo->ready_timeout_ms ? bo->ready_timeout_ms : 10000;

  struct sandbox *s = NULL;
  struct docker *d = NULL;
  if ((r = docker_sandbox_new(&s, &d, e)) < 0)
    return r;
  d->heartbeat_ms = bo ? bo->heartbeat_ms : 0;
  _cleanup_free_ char *baked = NULL;
  _cleanup_free_ char *inject = NULL;
  _cleanup_json_ json_t *spec_json = NULL;
  struct engine_facts facts;
  struct making m = {
      .user = o->user, .facts = &facts, .published = o->n_exposed_ports > 0};
  const char *userns = NULL;
  r = docker_engine_open(o->host, &d->en, e);
  if (r < 0)
    goto fail;
  if (o->host && !(d->host = strdup(o->host))) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  if ((r = probe_engine(d->en, &facts, e)) < 0 ||
      (r = choose_userns(&facts, o->userns, &userns, &m.may_fall_back, e)) < 0)
    goto fail;
  r = prepare_image(d->en, image, o, &baked, e);
  if (r < 0)
    goto fail;
  if (o->sandboxd_mode == DOCKER_SANDBOXD_INJECT ||
      (o->sandboxd_mode == DOCKER_SANDBOXD_AUTO && !baked)) {
    r = find_static_sandboxd(o, &inject, e);
    if (r < 0)
      goto fail;
  }

  if ((r = sbx_random_uuid(s->session_id)) < 0 ||
      (r = sbx_random_hex(d->token, SBX_TOKEN_BYTES)) < 0) {
    r = sbx_error_set(e, SBX_INTERNAL, -r, "cannot get random bytes");
    goto fail;
  }
  r = rundir_make(d, e);
  if (r < 0)
    goto fail;

  struct docker_spec sp = {
      .session_id = s->session_id,
      .image = image,
      .sandboxd = inject || !baked ? DOCKER_SANDBOXD_PATH : baked,
      .inject = inject,
      .rundir = d->rundir,
      .root = root,
      .seccomp = bo && bo->seccomp ? bo->seccomp : "default",
      .userns = userns,
      /* Podman 4 makes a workspace the image lacks as the host's root,
       * whom a user namespace cannot write; a volume it hands to the
       * container's user. */
      .workspace_volume = facts.podman && userns && strcmp(userns, "host"),
      .labels = spec ? spec->labels : NULL,
      .nlabels = spec ? spec->nlabels : 0,
      .expires_at = spec ? spec->expires_at : 0,
      .idle_timeout_s = spec ? spec->idle_timeout_s : 0,
  };
  r = docker_spec_json(o, &sp, &spec_json, e);
  if (r < 0)
    goto fail;
  m.spec = spec_json;
  r = create_and_start(d, s->session_id, &m, e);
  if (r < 0)
    goto fail;
  uint64_t start = sbx_now_ms();
  char sock[PATH_MAX];
  r = rundir_wait_ready(d, image, tmo, sock, sizeof(sock), e);
  if (r < 0)
    goto fail;
  uint64_t waited = sbx_now_ms() - start;
  r = connect_sandboxd(s, d, sock, waited < tmo ? tmo - (unsigned)waited : 0,
                       e);
  if (r < 0 || (r = finish_sandbox(s, d, o, root, e)) < 0)
    goto fail;
  log_debug("docker sandbox %s: container %.12s of \"%s\"%s", s->session_id,
            d->container, image, inject ? " (sandboxd injected)" : "");
  *out = s;
  return 0;
fail:
  (void)docker_close(s, NULL);
  return r;
}

/* A container that outlives this process: created as usual (containers
 * always outlive their creator), with the token also written to the state
 * directory's token file so another sbx process can attach. */
int docker_create(const struct backend_options *bo,
                  const struct sandbox_spec *spec, struct sandbox **out,
                  struct sbx_error *e) {
  if (spec && (spec->ngrants || spec->nbinds))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "extra_path_grants and local_bind mounts are not "
                         "supported by backend docker; use its mounts option");
  int r = create_container(bo, spec, out, e);
  if (r < 0 || !spec || !spec->token_path)
    return r;
  struct docker *d = (*out)->priv;
  r = sbx_write_file_atomic(spec->token_path, d->token, SBX_TOKEN_HEX, 0600);
  if (r == 0 && !(d->token_path = strdup(spec->token_path)))
    r = -ENOMEM;
  if (r < 0) {
    (void)docker_close(*out, NULL);
    *out = NULL;
    return sbx_error_set(e, SBX_OK, -r, "cannot write the token file \"%s\"",
                         spec->token_path);
  }
  return 0;
}

/* Where exposed PORT is published on the host. */
static int docker_resolve_port(const struct sandbox *s, unsigned port,
                               char *host, size_t hostsz, unsigned *host_port,
                               struct sbx_error *e) {
  struct docker_endpoint ep;
  int r = docker_exposed_port(s, port, &ep, e);
  if (r < 0)
    return r;
  (void)snprintf(host, hostsz, "%s", ep.host);
  *host_port = ep.port;
  return 0;
}

/* A session state's container_id, as the SDK's DockerSandboxSessionState
 * has it. */
static int docker_session_fields(json_t *saved, json_t *state) {
  json_t *cid = json_object_get(saved, "container");
  if (!json_is_string(cid))
    return 0;
  return json_object_set(state, "container_id", cid) < 0 ? -ENOMEM : 0;
}

const struct backend backend_docker = {
    .name = "docker",
    .options = docker_option_table,
    .options_parse = docker_options_parse,
    .options_free = docker_options_free,
    .create = docker_create,
    .close = docker_close,
    .save = docker_save,
    .session_fields = docker_session_fields,
    .attach = docker_attach,
    .detach = docker_detach,
    .running = docker_running,
    .stop = docker_stop,
    .start = docker_start,
    .resolve_port = docker_resolve_port,
};
