/* The docker backend: one container per sandbox session, made through the
 * Docker Engine API, with sandboxd as its entrypoint (baked into the image
 * or sbx's static build bind-mounted read-only), reached over ipc:// through
 * a bind-mounted 0700 host runtime directory. */
#include "backends/docker/docker.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/docker/engine.h"
#include "backends/docker/options.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/rand.h"

#define PULL_TIMEOUT_MS (10u * 60 * 1000)
#define LOG_TAIL_MAX 400
#define MAX_PORTS 256

struct docker_port {
  unsigned port; /* in the container */
  struct docker_endpoint at;
};

struct docker {
  struct docker_engine *en;
  char *container; /* id */
  char *rundir;    /* host runtime directory; removed at close */
  char token[SBX_TOKEN_HEX + 1];
  char *token_path; /* a recorded sandbox's token file, or NULL */
  struct docker_port *ports;
  size_t nports;
};

static struct docker *docker_of(const struct sandbox *s) {
  return s && s->backend == &backend_docker ? s->priv : NULL;
}

const char *docker_container_id(const struct sandbox *s) {
  struct docker *d = docker_of(s);
  return d ? d->container : NULL;
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
static void docker_free(struct docker *d) {
  if (!d)
    return;
  docker_engine_free(d->en);
  free(d->container);
  free(d->rundir);
  free(d->token_path);
  free(d->ports);
  explicit_bzero(d->token, sizeof(d->token));
  free(d);
}

/* Path of container ID in the API: /containers/<escaped>SUFFIX. */
static int container_path(const char *id, const char *suffix, char *out,
                          size_t size, struct sbx_error *e) {
  _cleanup_free_ char *esc = docker_engine_escape(id, false);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  int n = snprintf(out, size, "/containers/%s%s", esc, suffix);
  if (n < 0 || (size_t)n >= size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "container name \"%.64s\" is too long", id);
  return 0;
}

static int inspect_container(struct docker_engine *en, const char *id,
                             json_t **out, struct sbx_error *e) {
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

static const char *label_of(json_t *inspect, const char *key) {
  json_t *cfg = json_object_get(inspect, "Config");
  return json_string_value(
      json_object_get(json_object_get(cfg, "Labels"), key));
}

/* The last lines the container wrote (stdout and stderr), flattened into
 * OUT for an error message; "" when there are none or they cannot be had. */
static void container_log_tail(struct docker_engine *en, const char *id,
                               char *out, size_t size) {
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
static int remove_container(struct docker_engine *en, const char *id,
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

static int docker_close(struct sandbox *s, struct sbx_error *e) {
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

/* True when the ELF file at PATH asks for no program interpreter, i.e. is
 * statically linked. *ERR gets the reason when it cannot tell. */
static bool is_static_elf(const char *path, int *err) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  Elf64_Ehdr eh;
  *err = 0;
  if (fd < 0 || pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh)) {
    *err = fd < 0 ? errno : ENOEXEC;
    return false;
  }
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256) {
    *err = ENOEXEC;
    return false;
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) !=
        (ssize_t)sizeof(ph)) {
      *err = ENOEXEC;
      return false;
    }
    if (ph.p_type == PT_INTERP)
      return false;
  }
  return true;
}

/* The static sandboxd to inject: O's, $SBX_SANDBOXD_STATIC, sandboxd-static
 * next to sbx, then the build tree's ../build-static/sandboxd. */
static int find_static_sandboxd(const struct docker_options *o, char **out,
                                struct sbx_error *e) {
  const char *p = o->sandboxd_static;
  if (!p || !*p)
    p = getenv("SBX_SANDBOXD_STATIC");
  char cand[PATH_MAX];
  if (!p || !*p) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = {"/sandboxd-static",
                                        "/../build-static/sandboxd"};
      for (size_t i = 0; i < SBX_ARRAY_SIZE(rel) && !p; i++) {
        int k = snprintf(cand, sizeof(cand), "%s%s", self, rel[i]);
        if (k > 0 && (size_t)k < sizeof(cand) && access(cand, X_OK) == 0)
          p = cand;
      }
    }
  }
  if (!p)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "the image has no sandboxd (no %s label) and no "
                         "static sandboxd was found to inject: build one with "
                         "`make static` and set SBX_SANDBOXD_STATIC to "
                         "build-static/sandboxd",
                         DOCKER_IMAGE_LABEL);
  int err;
  if (!is_static_elf(p, &err))
    return err ? sbx_error_set(e, SBX_NOT_FOUND, err,
                               "cannot use \"%s\" as the static sandboxd: %s",
                               p, strerror(err))
               : sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                               "sandboxd \"%s\" is dynamically linked; a "
                               "container needs the static build (`make "
                               "static` makes build-static/sandboxd)",
                               p);
  *out = realpath(p, NULL);
  if (!*out)
    return sbx_error_set(e, SBX_OK, errno, "cannot resolve \"%s\": %m", p);
  return 0;
}

/* Pulls IMAGE; the engine reports failures inside the progress stream. */
static int pull_image(struct docker_engine *en, const char *image,
                      struct sbx_error *e) {
  _cleanup_free_ char *esc = docker_engine_escape(image, false);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  char path[1024];
  int n = snprintf(path, sizeof(path), "/images/create?fromImage=%s", esc);
  if (n < 0 || (size_t)n >= sizeof(path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "image name is too long");
  _cleanup_buf_ struct sbx_buf body = {0};
  sbx_buf_init(&body, 16 * 1024);
  struct docker_request req = {.method = "POST",
                               .path = path,
                               .timeout_ms = PULL_TIMEOUT_MS,
                               .max_bytes = 16 * 1024,
                               .keep_tail = true};
  log_info("pulling image \"%s\"", image);
  int r = docker_engine_raw(en, &req, &body, e);
  if (r < 0)
    return r;
  /* The last JSON line says how it ended. */
  while (body.len &&
         (body.data[body.len - 1] == '\n' || body.data[body.len - 1] == '\r'))
    body.data[--body.len] = '\0';
  const char *last = strrchr(body.data, '\n');
  last = last ? last + 1 : body.data;
  json_error_t je;
  _cleanup_json_ json_t *j = json_loads(last, 0, &je);
  const char *err = json_string_value(json_object_get(j, "error"));
  if (err)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "cannot pull image \"%s\": %.300s", image, err);
  return 0;
}

/* Inspects IMAGE, pulling it first when missing (unless O says never), and
 * tells where its baked sandboxd is (*BAKED new, NULL when none). */
static int prepare_image(struct docker_engine *en, const char *image,
                         const struct docker_options *o, char **baked,
                         struct sbx_error *e) {
  *baked = NULL;
  _cleanup_free_ char *esc = docker_engine_escape(image, true);
  if (!esc)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  char path[1024];
  int n = snprintf(path, sizeof(path), "/images/%s/json", esc);
  if (n < 0 || (size_t)n >= sizeof(path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "image name is too long");
  struct docker_request req = {.method = "GET", .path = path};
  _cleanup_json_ json_t *j = NULL;
  int r = docker_engine_json(en, &req, &j, e);
  if (r == -ENOENT) {
    if (o->never_pull)
      return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                           "image \"%s\" is not in the container engine and "
                           "pulling is off",
                           image);
    sbx_error_clear(e);
    r = pull_image(en, image, e);
    if (r < 0)
      return r;
    r = docker_engine_json(en, &req, &j, e);
  }
  if (r < 0)
    return r;
  const char *label = json_string_value(
      json_object_get(json_object_get(json_object_get(j, "Config"), "Labels"),
                      DOCKER_IMAGE_LABEL));
  if (label && label[0] == '/' && strlen(label) < 1024) {
    *baked = strdup(label);
    if (!*baked)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  return 0;
}

/* Fails with what the container said when it is no longer running. */
static int check_running(struct docker *d, const char *image,
                         struct sbx_error *e) {
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

/* Waits for sandboxd's socket to appear in the runtime directory, with a
 * bounded backoff, watching that the container still runs. */
static int wait_socket(struct docker *d, const char *sock, const char *image,
                       unsigned timeout_ms, struct sbx_error *e) {
  uint64_t start = sbx_now_ms();
  uint64_t next_check = start + 100;
  unsigned delay_us = 250;
  for (;;) {
    struct stat st;
    if (lstat(sock, &st) == 0 && S_ISSOCK(st.st_mode))
      return 0;
    uint64_t now = sbx_now_ms();
    if (now >= next_check) {
      int r = check_running(d, image, e);
      if (r < 0)
        return r;
      next_check = now + 250;
    }
    if (now - start >= timeout_ms) {
      char tail[LOG_TAIL_MAX + 64];
      container_log_tail(d->en, d->container, tail, sizeof(tail));
      return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                           "sandboxd in container %.12s did not become ready "
                           "in %u ms%s%s",
                           d->container, timeout_ms,
                           tail[0] ? "; its output: " : "", tail);
    }
    sleep_us(delay_us);
    if (delay_us < 10000)
      delay_us *= 2;
  }
}

/* Connects S's client to the sandboxd behind SOCK and checks with Hello,
 * within BUDGET_MS in all, that it takes D's token. */
static int connect_sandboxd(struct sandbox *s, struct docker *d,
                            const char *sock, unsigned budget_ms,
                            struct sbx_error *e) {
  char url[PATH_MAX + 16];
  int n = snprintf(url, sizeof(url), "ipc://%s", sock);
  if (n < 0 || (size_t)n >= sizeof(url))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "runtime directory path is too long");
  struct sbx_client_config cc = {
      .url = url,
      .token = (const uint8_t *)d->token,
      .token_len = strlen(d->token),
      .client_name = "sbx",
  };
  int r = sbx_client_new(&cc, &s->client, e);
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
static int record_ports(struct docker *d, json_t *j, struct sbx_error *e) {
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

static char *make_rundir(void) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base || strlen(base) > 60)
    base = "/tmp";
  char path[128];
  int n = snprintf(path, sizeof(path), "%s/sbx-docker-XXXXXX", base);
  if (n < 0 || (size_t)n >= sizeof(path) || !mkdtemp(path))
    return NULL;
  return strdup(path);
}

/* Writes the token file (0400) into the runtime directory and hands both
 * to USER ("uid[:gid]") when the container runs as someone else. */
static int write_token(struct docker *d, const char *user,
                       struct sbx_error *e) {
  char path[PATH_MAX];
  (void)snprintf(path, sizeof(path), "%s/token", d->rundir);
  _cleanup_close_ int fd =
      open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", path);
  size_t len = strlen(d->token);
  if (write(fd, d->token, len) != (ssize_t)len)
    return sbx_error_set(e, SBX_OK, errno ? errno : EIO,
                         "cannot write \"%s\": %m", path);
  if (!user)
    return 0;
  char *end = NULL;
  unsigned long uid = strtoul(user, &end, 10);
  unsigned long gid =
      *end == ':' ? strtoul(end + 1, NULL, 10) : (unsigned long)-1;
  if (uid == geteuid())
    return 0;
  if (fchown(fd, (uid_t)uid, (gid_t)gid) < 0 ||
      chown(d->rundir, (uid_t)uid, (gid_t)gid) < 0)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, errno,
                         "cannot hand the runtime directory to user \"%s\" "
                         "(sandboxd runs as it): %m",
                         user);
  return 0;
}

/* Creates the container from SPEC and starts it. With published ports a
 * start can fail with "address already in use": Podman picks a free host
 * port when it creates the container and binds it only at the start, and
 * another process may take it in between. Such a container is removed and
 * made again, at most three times. */
static int create_and_start(struct docker *d, const char *session_id,
                            json_t *spec, bool published, struct sbx_error *e) {
  for (int attempt = 1;; attempt++) {
    char path[128];
    (void)snprintf(path, sizeof(path), "/containers/create?name=sbx-%s",
                   session_id);
    struct docker_request req = {.method = "POST", .path = path, .body = spec};
    _cleanup_json_ json_t *created = NULL;
    int r = docker_engine_json(d->en, &req, &created, e);
    if (r < 0)
      return r;
    const char *id = json_string_value(json_object_get(created, "Id"));
    if (!id || !*id)
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "the container engine created a container "
                           "without an Id");
    free(d->container);
    d->container = strdup(id);
    if (!d->container)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    r = container_path(id, "/start", path, sizeof(path), e);
    if (r < 0)
      return r;
    struct docker_request start = {.method = "POST", .path = path};
    r = docker_engine_json(d->en, &start, NULL, e);
    if (r == 0 || !published || attempt == 3 || !e ||
        !strstr(e->msg, "address already in use"))
      return r;
    log_debug("docker: container %.12s: %s; making it again", id, e->msg);
    struct sbx_error ignored = {0};
    if (remove_container(d->en, d->container, &ignored) < 0)
      return r;
    free(d->container);
    d->container = NULL;
  }
}

static int docker_create(const struct backend_options *bo, struct sandbox **out,
                         struct sbx_error *e) {
  static const struct docker_options none = {0};
  const struct docker_options *o = bo ? &bo->docker : &none;
  *out = NULL;
  /* Everything that can be refused is refused before anything exists. */
  int r = docker_options_check(o, e);
  if (r < 0)
    return r;
  const char *image = o->image ? o->image : DOCKER_DEFAULT_IMAGE;
  const char *root = o->root ? o->root : DOCKER_DEFAULT_ROOT;
  unsigned tmo = bo && bo->ready_timeout_ms ? bo->ready_timeout_ms : 10000;

  struct sandbox *s = calloc(1, sizeof(*s));
  struct docker *d = calloc(1, sizeof(*d));
  if (!s || !d) {
    free(s);
    free(d);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  s->backend = &backend_docker;
  s->priv = d;
  _cleanup_free_ char *baked = NULL;
  _cleanup_free_ char *inject = NULL;
  _cleanup_json_ json_t *spec_json = NULL;
  r = docker_engine_open(o->host, &d->en, e);
  if (r < 0)
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
  errno = 0;
  d->rundir = make_rundir();
  if (!d->rundir) {
    r = sbx_error_set(e, SBX_OK, errno ? errno : ENOMEM,
                      "cannot create a runtime directory: %m");
    goto fail;
  }
  r = write_token(d, o->user, e);
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
  };
  r = docker_spec_json(o, &sp, &spec_json, e);
  if (r < 0)
    goto fail;
  r = create_and_start(d, s->session_id, spec_json, o->n_exposed_ports > 0, e);
  if (r < 0)
    goto fail;

  char sock[PATH_MAX];
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", d->rundir);
  uint64_t ready_start = sbx_now_ms();
  r = wait_socket(d, sock, image, tmo, e);
  if (r < 0)
    goto fail;
  uint64_t waited = sbx_now_ms() - ready_start;
  r = connect_sandboxd(s, d, sock, waited < tmo ? tmo - (unsigned)waited : 0,
                       e);
  if (r < 0)
    goto fail;
  if (o->n_exposed_ports) {
    _cleanup_json_ json_t *j = NULL;
    r = inspect_container(d->en, d->container, &j, e);
    if (r < 0 || (r = record_ports(d, j, e)) < 0)
      goto fail;
    for (size_t i = 0; i < o->n_exposed_ports; i++) {
      struct docker_endpoint ep;
      r = docker_exposed_port(s, o->exposed_ports[i], &ep, e);
      if (r < 0) {
        r = sbx_error_set(e, SBX_INTERNAL, EIO,
                          "the container engine did not publish port %u",
                          o->exposed_ports[i]);
        goto fail;
      }
    }
  }
  s->root = strdup(root);
  if (!s->root) {
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    goto fail;
  }
  for (size_t i = 0; i < o->n_env; i++) {
    const char *eq = strchr(o->env[i], '=');
    _cleanup_free_ char *name = strndup(o->env[i], (size_t)(eq - o->env[i]));
    if (!name || (r = sandbox_setenv(s, name, eq + 1)) < 0) {
      r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
      goto fail;
    }
  }
  log_debug("docker sandbox %s: container %.12s of \"%s\"%s", s->session_id,
            d->container, image, inject ? " (sandboxd injected)" : "");
  *out = s;
  return 0;
fail:
  (void)docker_close(s, NULL);
  return r;
}

/* The host side of the container's runtime directory, from the mounts in
 * its inspection; it must be a directory of ours that nobody else may
 * enter, or the socket in it is not to be trusted. */
static int find_rundir(json_t *j, const char *id, char **out,
                       struct sbx_error *e) {
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
  /* Ours: owned by us, or by the numeric user the container runs as (the
   * directory was handed to it at creation). */
  uid_t owner = geteuid();
  const char *user =
      json_string_value(json_object_get(json_object_get(j, "Config"), "User"));
  char *end = NULL;
  unsigned long uid = user && *user ? strtoul(user, &end, 10) : 0;
  bool numeric_user = user && *user && end && (*end == '\0' || *end == ':');
  struct stat st;
  if (lstat(src, &st) < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, errno,
                         "the runtime directory \"%s\" of container %.12s is "
                         "gone: %m",
                         src, id);
  if (!S_ISDIR(st.st_mode) || (st.st_mode & 077) ||
      (st.st_uid != owner && !(numeric_user && st.st_uid == (uid_t)uid)))
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "the runtime directory \"%s\" of container %.12s is "
                         "not a private directory of ours",
                         src, id);
  *out = strdup(src);
  return *out ? 0 : sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
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
  struct sandbox *s = calloc(1, sizeof(*s));
  struct docker *d = calloc(1, sizeof(*d));
  if (!s || !d) {
    free(s);
    free(d);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  s->backend = &backend_docker;
  s->priv = d;
  memcpy(s->session_id, a->session_id, strlen(a->session_id) + 1);
  memcpy(d->token, a->token, SBX_TOKEN_HEX + 1);
  _cleanup_json_ json_t *j = NULL;
  _cleanup_free_ char *rundir = NULL;
  int r = docker_engine_open(bo ? bo->docker.host : NULL, &d->en, e);
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
  r = find_rundir(j, d->container, &rundir, e);
  if (r < 0)
    goto fail;
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
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", rundir);
  r = connect_sandboxd(
      s, d, sock, bo && bo->ready_timeout_ms ? bo->ready_timeout_ms : 10000, e);
  if (r < 0) {
    if (e && e->code == SBX_UNAUTHENTICATED)
      r = sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                        "sandboxd in container %.12s did not accept this "
                        "controller's token; refusing to resume it",
                        d->container);
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

/* ---- lifecycle: developer-owned and recorded sandboxes ----------------- */

/* A container that outlives this process: created as usual (containers
 * always outlive their creator), with the token also written to the state
 * directory's token file so another sbx process can attach. */
static int docker_create_spec(const struct backend_options *bo,
                              const struct sandbox_spec *spec,
                              struct sandbox **out, struct sbx_error *e) {
  if (spec && (spec->ngrants || spec->nbinds))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "extra_path_grants and local_bind mounts are not "
                         "supported by backend docker; use its mounts option");
  int r = docker_create(bo, out, e);
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

/* The record's docker part: the container, and where the token is (the
 * token itself stays in its 0600 file). */
static int docker_save(const struct sandbox *s, json_t *obj) {
  const struct docker *d = s->priv;
  json_t *o =
      json_pack("{s:s, s:s, s:s?}", "container", d->container, "session_id",
                s->session_id, "token_file", d->token_path);
  if (!o)
    return -ENOMEM;
  int r = json_object_update(obj, o) < 0 ? -ENOMEM : 0;
  json_decref(o);
  return r;
}

/* Attaches through docker_resume: labels, a running container, a private
 * runtime directory, and a sandboxd that accepts the recorded token. The
 * token comes from the record's token file. */
static int docker_attach(const struct backend_options *bo, json_t *obj,
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
  r = docker_resume(bo, &a, out, e);
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

static bool docker_running(const struct sandbox *s) {
  return s && s->client != NULL;
}

/* Stops the container (sandboxd gets TERM and kills its processes); the
 * container and its workspace stay for a later start. */
static int docker_stop(struct sandbox *s, struct sbx_error *e) {
  struct docker *d = s->priv;
  s->client = sbx_client_free(s->client);
  char path[512];
  int r = container_path(d->container, "/stop?t=5", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {.method = "POST", .path = path};
  return docker_engine_json(d->en, &req, NULL, e);
}

/* Starts a stopped container again and connects to its sandboxd. */
static int docker_start(struct sandbox *s, struct sbx_error *e) {
  if (s->client)
    return 0;
  struct docker *d = s->priv;
  char sock[PATH_MAX];
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", d->rundir);
  (void)unlink(sock); /* the stopped sandboxd's, gone stale */
  char path[512];
  int r = container_path(d->container, "/start", path, sizeof(path), e);
  if (r < 0)
    return r;
  struct docker_request req = {.method = "POST", .path = path};
  r = docker_engine_json(d->en, &req, NULL, e);
  if (r < 0)
    return r;
  r = wait_socket(d, sock, "the container's image", 10000, e);
  if (r < 0)
    return r;
  return connect_sandboxd(s, d, sock, 10000, e);
}

const struct backend backend_docker = {
    .name = "docker",
    .create = docker_create,
    .close = docker_close,
    .create_spec = docker_create_spec,
    .save = docker_save,
    .attach = docker_attach,
    .detach = docker_detach,
    .running = docker_running,
    .stop = docker_stop,
    .start = docker_start,
};
