/* What bench_ready starts besides sbx: loopback addresses held the way the
 * Kubernetes fixture holds its Pods' (an flock on a file named after the
 * address, so that a fixture running meanwhile never takes one), the
 * fixture API server itself (tests/support/kube_api.py, with podman), a
 * remote sandboxd on one of those addresses with a certificate from sbx's
 * CA, and the fixture's API read for Pods settling between runs; plus the
 * processes and connections the measures time.
 *
 * Header-only like bench.h, and like it: every helper returns 0 or a
 * negative errno and says what went wrong on stderr; nothing here exits.
 * Not thread-safe. */
#ifndef SBX_BENCH_READY_H
#define SBX_BENCH_READY_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "backends/kubernetes/kube_internal.h"
#include "bench/bench.h"
#include "controller/ca/ca.h"

extern char **environ;

#define READY_NS "sbx-bench"
#define READY_FIRST_ADDR 20 /* kube_podman.py's range: 127.0.0.20-250 */
#define READY_LAST_ADDR 250

static inline void ready_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* ---- processes --------------------------------------------------------- */

/* Runs ARGV with stdin from /dev/null, stdout into OUT (OUT_SIZE bytes, the
 * first line kept; NULL: /dev/null) and stderr into the file ERR (NULL:
 * /dev/null); *NS gets the wall time from before the spawn to after the
 * wait, *STATUS the exit status (128 + the signal). 0, or a negative errno
 * when it could not be run. */
static inline int ready_run(const char *const *argv, char *out, size_t out_size,
                            const char *err, uint64_t *ns, int *status) {
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0)
    return -ENOMEM;
  int p[2] = {-1, -1};
  if (out && pipe2(p, O_CLOEXEC) < 0) {
    int r = -errno;
    (void)posix_spawn_file_actions_destroy(&fa);
    return r;
  }
  (void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (out)
    (void)posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  else
    (void)posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  (void)posix_spawn_file_actions_addopen(&fa, 2, err ? err : "/dev/null",
                                         O_WRONLY | O_CREAT | O_TRUNC, 0600);
  uint64_t t0 = bench_now_ns();
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  (void)posix_spawn_file_actions_destroy(&fa);
  if (out)
    (void)close(p[1]);
  if (r != 0) {
    if (out)
      (void)close(p[0]);
    (void)fprintf(stderr, "bench: %s: %s\n", argv[0], strerror(r));
    return -r;
  }
  if (out) {
    size_t n = 0;
    ssize_t k;
    while (n + 1 < out_size &&
           ((k = read(p[0], out + n, out_size - 1 - n)) > 0 ||
            (k < 0 && errno == EINTR)))
      n += k > 0 ? (size_t)k : 0;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
    (void)close(p[0]);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  *ns = bench_now_ns() - t0;
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return 0;
}

/* Stops PID with SIG, then SIGKILL after WAIT_MS; reaps it. */
static inline void ready_stop_pid(pid_t *pid, int sig, long wait_ms) {
  if (*pid <= 0)
    return;
  (void)kill(*pid, sig);
  for (long waited = 0;; waited += 10) {
    int st;
    pid_t w = waitpid(*pid, &st, WNOHANG);
    if (w == *pid || (w < 0 && errno != EINTR))
      break;
    if (waited >= wait_ms) {
      (void)kill(*pid, SIGKILL);
      (void)waitpid(*pid, &st, 0);
      break;
    }
    ready_sleep_ms(10);
  }
  *pid = 0;
}

/* Reads one line from FD into LINE (SIZE bytes) within TIMEOUT_MS. */
static inline int ready_read_line(int fd, char *line, size_t size,
                                  long timeout_ms) {
  size_t got = 0;
  uint64_t end = bench_now_ns() + (uint64_t)timeout_ms * 1000000u;
  line[0] = '\0';
  while (got + 1 < size && !memchr(line, '\n', got)) {
    uint64_t now = bench_now_ns();
    if (now >= end)
      return -ETIMEDOUT;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n = poll(&pfd, 1, (int)((end - now) / 1000000u) + 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? -errno : -ETIMEDOUT;
    ssize_t k = read(fd, line + got, size - 1 - got);
    if (k <= 0)
      return k < 0 ? -errno : -EPIPE;
    got += (size_t)k;
    line[got] = '\0';
  }
  return 0;
}

/* ---- connections that say a sandboxd is up ----------------------------- */

/* Whether a TCP connection to ADDR:PORT is accepted now (closed at once). */
static inline bool ready_tcp_answers(const char *addr, uint16_t port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
    return false;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  bool ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  (void)close(fd);
  return ok;
}

/* Whether the Unix socket PATH accepts a connection now. */
static inline bool ready_unix_answers(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sa.sun_path))
    return false;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  bool ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  (void)close(fd);
  return ok;
}

/* ---- loopback addresses ------------------------------------------------ */

struct ready_addr {
  int fd; /* the flock held; -1: none */
  char ip[16];
  uint16_t port;
};

/* Whether PORT (0: any, its number into *PORT) can be bound on IP now. */
static inline bool ready_port_free(const char *ip, uint16_t *port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(*port)};
  if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
    return false;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return false;
  socklen_t len = sizeof(sa);
  bool ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
  if (ok)
    *port = ntohs(sa.sin_port);
  (void)close(fd);
  return ok;
}

/* Takes an address 127.0.0.N (N from 20 to 250) that no fixture holds and
 * where PORT is free (0: any port, the one found into A->port), and holds
 * it until ready_addr_give. */
static inline int ready_addr_take(struct ready_addr *a, uint16_t port) {
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX], path[PATH_MAX + 32];
  (void)snprintf(dir, sizeof(dir), "%s/sbx-kube-fixture-addrs",
                 tmp && *tmp ? tmp : "/tmp");
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
    int r = -errno;
    (void)fprintf(stderr, "bench: mkdir %s: %s\n", dir, strerror(-r));
    return r;
  }
  for (int n = READY_FIRST_ADDR; n <= READY_LAST_ADDR; n++) {
    (void)snprintf(a->ip, sizeof(a->ip), "127.0.0.%d", n);
    (void)snprintf(path, sizeof(path), "%s/%s", dir, a->ip);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      continue;
    a->port = port;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && ready_port_free(a->ip, &a->port)) {
      a->fd = fd;
      return 0;
    }
    (void)close(fd);
  }
  (void)fprintf(stderr, "bench: no free address in 127.0.0.%d-%d\n",
                READY_FIRST_ADDR, READY_LAST_ADDR);
  return -EADDRNOTAVAIL;
}

static inline void ready_addr_give(struct ready_addr *a) {
  if (a->fd >= 0)
    (void)close(a->fd);
  a->fd = -1;
}

/* ---- the fixture API server -------------------------------------------- */

struct ready_kube {
  pid_t pid;
  char workdir[160], kubeconfig[160], log[160], err[160];
  struct kube_api *api;
};

/* Starts SRC/tests/support/kube_api.py in DIR (its files: api/,
 * kubeconfig, requests.jsonl, kube_api.err), running Pods with podman,
 * in the namespace READY_NS, and opens a client of its API. The fixture
 * gets SIGTERM should this process die (it then removes its Pods). */
static inline int ready_kube_start(struct ready_kube *k, const char *src,
                                   const char *dir) {
  char py[PATH_MAX + 32];
  (void)snprintf(py, sizeof(py), "%s/tests/support/kube_api.py", src);
  (void)snprintf(k->workdir, sizeof(k->workdir), "%s/api", dir);
  (void)snprintf(k->kubeconfig, sizeof(k->kubeconfig), "%s/kubeconfig", dir);
  (void)snprintf(k->log, sizeof(k->log), "%s/requests.jsonl", dir);
  (void)snprintf(k->err, sizeof(k->err), "%s/kube_api.err", dir);
  if (mkdir(k->workdir, 0700) < 0)
    return -errno;
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  pid_t parent = getpid();
  k->pid = fork();
  if (k->pid == 0) {
    int fd = open(k->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent || fd < 0 ||
        dup2(out[1], 1) < 0 || dup2(fd, 2) < 0)
      _exit(127);
    execlp("python3", "python3", py, k->workdir, k->kubeconfig, k->log,
           "--namespace", READY_NS, (char *)NULL);
    _exit(127);
  }
  (void)close(out[1]);
  char line[64];
  int r =
      k->pid < 0 ? -errno : ready_read_line(out[0], line, sizeof(line), 60000);
  (void)close(out[0]);
  if (r == 0 && strncmp(line, "listening ", 10) != 0)
    r = -EPROTO;
  if (r < 0) {
    (void)fprintf(stderr, "bench: kube_api.py did not start (%s); see %s\n",
                  strerror(-r), k->err);
    return r;
  }
  struct kube_config cfg = {0};
  struct sbx_error e = {0};
  r = kube_config_load(k->kubeconfig, NULL, NULL, &cfg, &e);
  if (r == 0)
    r = kube_api_open(&cfg, &k->api, &e);
  kube_config_clear(&cfg);
  if (r < 0)
    (void)fprintf(stderr, "bench: the fixture's API: %s\n", e.msg);
  return r;
}

/* SIGTERM: the fixture removes every podman pod it made, then exits. */
static inline void ready_kube_stop(struct ready_kube *k) {
  k->api = kube_api_free(k->api);
  ready_stop_pid(&k->pid, SIGTERM, 90000);
}

static inline bool ready_pod_ready(json_t *pod) {
  json_t *st = json_object_get(pod, "status");
  if (!json_string_value(json_object_get(st, "podIP")))
    return false;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(st, "conditions"), i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    const char *s = json_string_value(json_object_get(c, "status"));
    if (t && s && strcmp(t, "Ready") == 0)
      return strcmp(s, "True") == 0;
  }
  return false;
}

/* Waits until the namespace's Pods are WARM free warm Pods (labelled
 * sbx.warm=true), Ready, and nothing else (no Pod being deleted), within
 * TIMEOUT_MS: the Pods of the previous run gone and the pool filled. */
static inline int ready_kube_settle(struct ready_kube *k, size_t warm,
                                    long timeout_ms) {
  const char *path = "/api/v1/namespaces/" READY_NS "/pods";
  for (long waited = 0;; waited += 50) {
    json_t *list = NULL;
    struct sbx_error e = {0};
    int r = kube_call(k->api, "GET", path, NULL, NULL, &list, &e);
    if (r < 0) {
      (void)fprintf(stderr, "bench: GET %s: %s\n", path, e.msg);
      return r;
    }
    size_t i, ready = 0, other = 0;
    json_t *pod;
    json_array_foreach(json_object_get(list, "items"), i, pod) {
      json_t *md = json_object_get(pod, "metadata");
      const char *w = json_string_value(
          json_object_get(json_object_get(md, "labels"), KUBE_LABEL_WARM));
      if (!json_object_get(md, "deletionTimestamp") && w &&
          strcmp(w, "true") == 0 && ready_pod_ready(pod))
        ready++;
      else
        other++;
    }
    json_decref(list);
    if (ready == warm && other == 0)
      return 0;
    if (waited >= timeout_ms) {
      (void)fprintf(stderr,
                    "bench: Pods did not settle in %ld s: %zu warm and "
                    "Ready, %zu other (want %zu and 0)\n",
                    timeout_ms / 1000, ready, other, warm);
      return -ETIMEDOUT;
    }
    ready_sleep_ms(50);
  }
}

/* How many requests METHOD the fixture has logged. */
static inline long ready_kube_count(const struct ready_kube *k,
                                    const char *method) {
  FILE *f = fopen(k->log, "re");
  if (!f)
    return -errno;
  char *line = NULL;
  size_t cap = 0;
  long n = 0;
  while (getline(&line, &cap, f) > 0) {
    json_t *j = json_loads(line, 0, NULL);
    const char *m = json_string_value(json_object_get(j, "method"));
    n += m && strcmp(m, method) == 0;
    json_decref(j);
  }
  free(line);
  (void)fclose(f);
  return n;
}

/* ---- a remote sandboxd ------------------------------------------------- */

struct ready_remote {
  pid_t pid;
  struct ready_addr addr;
  char url[64];
};

/* Starts SANDBOXD on tls+tcp://127.0.0.N:PORT (an address held, a free
 * port) serving DIR/workspace with its lease under DIR/lease, with a
 * server certificate for the address and its token from sbx's CA in CADIR
 * (made if missing), as deploy/systemd/sandboxd-remote.service runs it;
 * waits for its ready line. Killed should this process die. */
static inline int ready_remote_start(struct ready_remote *rs,
                                     const char *sandboxd, const char *cadir,
                                     const char *dir) {
  int r = ready_addr_take(&rs->addr, 0);
  if (r < 0)
    return r;
  const char *name = rs->addr.ip;
  char p[6][PATH_MAX];
  (void)snprintf(p[0], sizeof(p[0]), "%s/server.crt", dir);
  (void)snprintf(p[1], sizeof(p[1]), "%s/server.key", dir);
  (void)snprintf(p[2], sizeof(p[2]), "%s/ca.pem", dir);
  (void)snprintf(p[3], sizeof(p[3]), "%s/servers/%s.token", cadir, name);
  (void)snprintf(p[4], sizeof(p[4]), "%s/workspace", dir);
  (void)snprintf(p[5], sizeof(p[5]), "%s/lease", dir);
  if (mkdir(dir, 0700) < 0 || mkdir(p[4], 0700) < 0 || mkdir(p[5], 0700) < 0)
    return -errno;
  struct sbx_error e = {0};
  int64_t now = (int64_t)time(NULL);
  char tok[80];
  r = ca_init(cadir, NULL, &e);
  if (r == 0)
    r = ca_issue(cadir, CA_SERVER, name, now - 60, now + 86400, p[0], p[1],
                 NULL, &e);
  if (r == 0)
    r = ca_write_bundle(cadir, p[2], &e);
  if (r == 0)
    r = ca_server_token(cadir, name, true, tok, sizeof(tok), &e);
  if (r < 0) {
    (void)fprintf(stderr, "bench: sbx's CA: %s\n", e.msg);
    return r;
  }
  (void)snprintf(rs->url, sizeof(rs->url), "tls+tcp://%s:%u", name,
                 rs->addr.port);
  int rp[2];
  if (pipe2(rp, O_CLOEXEC) < 0)
    return -errno;
  pid_t parent = getpid();
  rs->pid = fork();
  if (rs->pid == 0) {
    /* dup2 onto itself would keep O_CLOEXEC. */
    int fd = rp[1] == 5 ? fcntl(5, F_SETFD, 0) : dup2(rp[1], 5);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || fd < 0)
      _exit(127);
    execl(sandboxd, sandboxd, "--listen", rs->url, "--root", p[4], "--grant",
          p[5], "--token-file", p[3], "--tls-cert", p[0], "--tls-key", p[1],
          "--tls-ca", p[2], "--ready-fd", "5", (char *)NULL);
    _exit(127);
  }
  (void)close(rp[1]);
  char line[64];
  r = rs->pid < 0 ? -errno : ready_read_line(rp[0], line, sizeof(line), 10000);
  (void)close(rp[0]);
  if (r < 0)
    (void)fprintf(stderr, "bench: sandboxd at %s did not start: %s\n", rs->url,
                  strerror(-r));
  return r;
}

static inline void ready_remote_stop(struct ready_remote *rs) {
  ready_stop_pid(&rs->pid, SIGTERM, 5000);
  ready_addr_give(&rs->addr);
}

#endif
