/* Sandbox ready time on each backend, against podman in the same run.
 *
 *   bench_ready [--runs N] [--image IMAGE]
 *
 * Needs root, the podman CLI, the image (default
 * localhost/sbx-debian:latest, built by scripts/containers.sh) and
 * DOCKER_HOST (scripts/containers.sh start prints it). Starts, for the
 * run: the Kubernetes fixture API server (tests/support/kube_api.py, Pods
 * run with `podman kube play`) and a sandboxd on tls+tcp://127.0.0.N with
 * a certificate from sbx's CA, as a remote host runs it. Then measures, in
 * N interleaved rounds (default 10; each round starts one measure further
 * on) after one round left out (it also primes the warm pool):
 *
 *   `sbx sandbox create --backend B ...`, the built sbx (SBX_BIN for
 *   another) as a process, from its spawn until it has printed the id and
 *   exited (sbx create returns once sandboxd answered Hello); the sandbox
 *   is removed with `sbx sandbox rm` after, untimed. B: local (default
 *   isolation), docker (--image IMAGE), remote (--endpoint: the claim,
 *   i.e. TLS probe, lease, wipe), kubernetes cold (--kubeconfig of the
 *   fixture, --image IMAGE --image-pull-policy Never), kubernetes warm
 *   (the same with --warm-pool 1: the claim of a Ready warm Pod, and the
 *   POSTs of the Pod that tops the pool up).
 *   Between runs, untimed: the fixture's Pods settle (the removed one
 *   gone; with a pool, its new warm Pod Ready).
 *
 *   `podman run -d --rm` of IMAGE with sandboxd as the docker backend
 *   confines it (user namespace auto, capabilities, no-new-privileges, the
 *   memory and pids limits, an anonymous /workspace volume), listening on
 *   ipc:// in a bind-mounted directory: until `podman run` returns, and
 *   until sandboxd's socket accepts a connection (polled every 2 ms).
 *
 *   `podman kube play --replace` of the Pod the kubernetes backend sent
 *   in the left-out round (from the fixture's request log, adapted as the
 *   fixture adapts it: bench/kube_play.py), published on an address of
 *   its own: until `podman kube play` returns, and until sandboxd's port
 *   accepts a TCP connection (polled every 2 ms); `podman pod rm -f`
 *   after, untimed.
 *
 * Prints p50, p90 and min of each as Markdown, and the ratios backend /
 * baseline. Everything started is stopped at the end or on an error (the
 * fixture with SIGTERM: it removes its Pods). */
#include <getopt.h>
#include <jansson.h>

#include "bench/ready.h"

#define PLAY_PORT 7443 /* sandboxd's in the Pod (KUBE_PORT) */
#define POLL_MS 2
#define WAIT_MS 120000

enum measure_id {
  M_LOCAL,
  M_DOCKER,
  M_PODMAN_RUN,
  M_REMOTE,
  M_KUBE_COLD,
  M_KUBE_PLAY,
  M_KUBE_WARM,
  M_COUNT
};

struct ctx {
  const char *image;
  char sbx[PATH_MAX], sandboxd[PATH_MAX], src[PATH_MAX];
  char dir[64]; /* the run's temp dir: everything below */
  char state[96], cadir[96], err[96];
  char run_name[64];  /* the podman run baseline's container */
  char play_dir[96];  /* play.yaml and its volumes */
  char play_name[64]; /* the Pod's name, once played */
  struct ready_addr play_addr;
  struct ready_kube kube;
  struct ready_remote remote;
  bool warm;     /* the warm pool has been made */
  char live[64]; /* a sandbox made and not yet removed */
  size_t nruns;  /* rounds timed */
  uint64_t *t[M_COUNT], *aux[M_COUNT];
};

static struct ctx *cleanup_ctx; /* for atexit: die() exits anywhere */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
  stop_signal = sig;
}

static void die(const char *what, const char *msg) {
  (void)fprintf(stderr, "bench_ready: %s: %s\n", what, msg);
  exit(1);
}

static void check_stop(void) {
  if (stop_signal)
    die("stopped", strsignal(stop_signal));
}

/* Prints the last command's stderr (c->err) and dies. */
static void die_cmd(struct ctx *c, const char *const *argv, int status) {
  (void)fprintf(stderr, "bench_ready: %s %s exited with %d:\n", argv[0],
                argv[1], status);
  FILE *f = fopen(c->err, "re");
  char line[512];
  while (f && fgets(line, sizeof(line), f))
    (void)fputs(line, stderr);
  if (f)
    (void)fclose(f);
  exit(1);
}

/* Runs ARGV (its first stdout line into OUT when not NULL); its wall time.
 * Dies when it fails unless MAY_FAIL. */
static uint64_t run(struct ctx *c, const char *const *argv, char *out,
                    size_t out_size, bool may_fail) {
  uint64_t ns = 0;
  int status = 0;
  check_stop();
  int r = ready_run(argv, out, out_size, c->err, &ns, &status);
  if (r < 0)
    die(argv[0], strerror(-r));
  if (status != 0 && !may_fail)
    die_cmd(c, argv, status);
  return ns;
}

/* ---- sbx ---------------------------------------------------------------- */

static void sbx_rm(struct ctx *c, const char *id) {
  const char *argv[] = {c->sbx, "sandbox", "--state-dir", c->state,
                        "rm",   id,        NULL};
  (void)run(c, argv, NULL, 0, false);
}

/* `sbx sandbox create --backend ARGS...`, timed, then removed untimed. */
static uint64_t create_rm(struct ctx *c, const char *const *args) {
  const char *argv[32] = {c->sbx,   "sandbox", "--state-dir",
                          c->state, "create",  "--backend"};
  size_t n = 6;
  for (size_t i = 0; args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  uint64_t ns = run(c, argv, c->live, sizeof(c->live), false);
  if (!c->live[0])
    die("sbx sandbox create", "printed no id");
  sbx_rm(c, c->live);
  c->live[0] = '\0';
  return ns;
}

static void settle(struct ctx *c) {
  check_stop();
  if (ready_kube_settle(&c->kube, c->warm ? 1 : 0, WAIT_MS) < 0)
    die("the fixture's Pods", "see above");
}

/* ---- the measures ----------------------------------------------------- */

static void m_local(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  (void)aux;
  const char *a[] = {"local", NULL};
  *ns = create_rm(c, a);
}

static void m_docker(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  (void)aux;
  const char *a[] = {"docker", "--image", c->image, NULL};
  *ns = create_rm(c, a);
}

static void m_remote(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  (void)aux;
  const char *a[] = {"remote",     "--ca-dir",    c->cadir,
                     "--endpoint", c->remote.url, NULL};
  *ns = create_rm(c, a);
}

/* The kubernetes backend's options; WARM: with a pool of one. */
static uint64_t kube_create(struct ctx *c, bool warm) {
  const char *a[] = {"kubernetes",
                     "--kubeconfig",
                     c->kube.kubeconfig,
                     "--ca-dir",
                     c->cadir,
                     "--image",
                     c->image,
                     "--image-pull-policy",
                     "Never",
                     warm ? "--warm-pool" : NULL,
                     "1",
                     NULL};
  settle(c);
  uint64_t ns = create_rm(c, a);
  c->warm |= warm;
  settle(c);
  return ns;
}

static void m_kube_cold(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  (void)aux;
  *ns = kube_create(c, false);
}

/* The first run makes the pool (a cold create, then a warm Pod made): it
 * is the left-out round's. */
static void m_kube_warm(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  (void)aux;
  *ns = kube_create(c, true);
}

/* Starts ARGV (a podman command that returns once its container runs),
 * *AUX the time until it returned and *NS until ANSWERS(A, B) held. */
static void until_answers(struct ctx *c, const char *const *argv,
                          bool (*answers)(const void *, const void *),
                          const void *a, const void *b, uint64_t *ns,
                          uint64_t *aux) {
  uint64_t t0 = bench_now_ns();
  *aux = run(c, argv, NULL, 0, false);
  for (uint64_t end = t0 + (uint64_t)WAIT_MS * 1000000u;;) {
    if (answers(a, b))
      break;
    if (bench_now_ns() > end)
      die(argv[1], "what it started never answered");
    check_stop();
    ready_sleep_ms(POLL_MS);
  }
  *ns = bench_now_ns() - t0;
}

static bool unix_answers(const void *path, const void *unused) {
  (void)unused;
  return ready_unix_answers(path);
}

static bool tcp_answers(const void *addr, const void *port) {
  return ready_tcp_answers(addr, *(const uint16_t *)port);
}

/* The capabilities the docker backend keeps (backends/docker/options.c). */
#define RUN_CAPS                                                               \
  "CHOWN,DAC_OVERRIDE,FOWNER,FSETID,KILL,SETGID,SETUID,NET_BIND_SERVICE,"      \
  "SYS_CHROOT,SETPCAP"

static void m_podman_run(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  char rundir[160], sock[192], token[192], vol[192];
  (void)snprintf(rundir, sizeof(rundir), "%s/run", c->dir);
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", rundir);
  (void)snprintf(token, sizeof(token), "%s/token", rundir);
  (void)snprintf(vol, sizeof(vol), "%s:/run/sbx", rundir);
  /* The container's root is an unprivileged uid of its own namespace. */
  char hex[65];
  int fd = -1;
  if (mkdir(rundir, 0777) < 0 || chmod(rundir, 0777) < 0 ||
      sbx_random_hex(hex, 32) < 0 ||
      (fd = open(token, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0 ||
      write(fd, hex, 64) != 64 || close(fd) < 0)
    die(rundir, strerror(errno));
  const char *argv[] = {"podman",
                        "run",
                        "-d",
                        "--rm",
                        "--name",
                        c->run_name,
                        "--userns",
                        "auto",
                        "--memory",
                        "2147483648",
                        "--pids-limit",
                        "4096",
                        "--cap-drop",
                        "ALL",
                        "--cap-add",
                        RUN_CAPS,
                        "--security-opt",
                        "no-new-privileges",
                        "-v",
                        vol,
                        "-v",
                        "/workspace",
                        "-w",
                        "/workspace",
                        c->image,
                        "--listen",
                        "ipc:///run/sbx/sandboxd.sock",
                        "--root",
                        "/workspace",
                        "--token-file",
                        "/run/sbx/token",
                        NULL};
  until_answers(c, argv, unix_answers, sock, NULL, ns, aux);
  const char *rm[] = {"podman", "rm", "-f",        "-v", "-i",
                      "-t",     "0",  c->run_name, NULL};
  (void)run(c, rm, NULL, 0, false);
  if (bench_rm_rf(rundir) < 0)
    die(rundir, strerror(errno));
}

/* play.yaml from the first cold Pod the fixture was sent. */
static void make_play(struct ctx *c) {
  char py[PATH_MAX + 32];
  (void)snprintf(py, sizeof(py), "%s/bench/kube_play.py", c->src);
  (void)snprintf(c->play_dir, sizeof(c->play_dir), "%s/play", c->dir);
  if (mkdir(c->play_dir, 0700) < 0)
    die(c->play_dir, strerror(errno));
  const char *argv[] = {"python3",       py,          c->kube.log,
                        c->play_addr.ip, c->play_dir, NULL};
  (void)run(c, argv, c->play_name, sizeof(c->play_name), false);
  if (!c->play_name[0])
    die("kube_play.py", "printed no Pod name");
}

static void m_kube_play(struct ctx *c, uint64_t *ns, uint64_t *aux) {
  if (!c->play_name[0])
    make_play(c);
  char yaml[160];
  (void)snprintf(yaml, sizeof(yaml), "%s/play.yaml", c->play_dir);
  const char *argv[] = {"podman", "kube", "play", "--replace", yaml, NULL};
  uint16_t port = PLAY_PORT;
  until_answers(c, argv, tcp_answers, c->play_addr.ip, &port, ns, aux);
  const char *rm[] = {"podman", "pod", "rm",         "-f", "-i",
                      "-t",     "0",   c->play_name, NULL};
  (void)run(c, rm, NULL, 0, false);
}

struct measure {
  void (*fn)(struct ctx *, uint64_t *ns, uint64_t *aux);
  const char *name, *aux_name; /* aux_name NULL: no second figure */
};

/* In the left-out round's order: the cold Pod comes before its play, the
 * warm pool is made last. */
static const struct measure measures[M_COUNT] = {
    [M_LOCAL] = {m_local, "`sbx sandbox create --backend local`", NULL},
    [M_DOCKER] = {m_docker, "`sbx sandbox create --backend docker`", NULL},
    [M_PODMAN_RUN] = {m_podman_run,
                      "`podman run -d` until sandboxd's ipc socket answers",
                      "`podman run -d` until it returns"},
    [M_REMOTE] = {m_remote, "`sbx sandbox create --backend remote` (a claim)",
                  NULL},
    [M_KUBE_COLD] = {m_kube_cold,
                     "`sbx sandbox create --backend kubernetes`, cold", NULL},
    [M_KUBE_PLAY] = {m_kube_play,
                     "`podman kube play` of that Pod until its port answers",
                     "`podman kube play` until it returns"},
    [M_KUBE_WARM] = {m_kube_warm,
                     "`sbx sandbox create --backend kubernetes --warm-pool "
                     "1`, a warm claim",
                     NULL},
};

/* ---- figures ------------------------------------------------------------ */

struct stats {
  double p50, p90, min; /* ms */
};

static struct stats stats_of(uint64_t *ns, size_t n) {
  struct stats s = {bench_percentile(ns, n, 50) / 1e6,
                    bench_percentile(ns, n, 90) / 1e6, ns[0] / 1e6};
  return s; /* bench_percentile sorted NS: ns[0] is the least */
}

static void print_row(const char *name, size_t n, struct stats s) {
  printf("| %s | %zu | %.1f | %.1f | %.1f |\n", name, n, s.p50, s.p90, s.min);
}

static void print_ratio(const char *name, struct stats a, struct stats b) {
  printf("| %s | %.2f | %.2f |\n", name, a.p50 / b.p50, a.min / b.min);
}

static void print_results(struct ctx *c, long claims) {
  struct stats s[M_COUNT], x[M_COUNT];
  printf("| measure | runs | p50 ms | p90 ms | min ms |\n"
         "|---|---:|---:|---:|---:|\n");
  for (int m = 0; m < M_COUNT; m++) {
    s[m] = stats_of(c->t[m], c->nruns);
    print_row(measures[m].name, c->nruns, s[m]);
    if (measures[m].aux_name) {
      x[m] = stats_of(c->aux[m], c->nruns);
      print_row(measures[m].aux_name, c->nruns, x[m]);
    }
  }
  printf("\n| ratio | at p50 | at min |\n|---|---:|---:|\n");
  print_ratio("kubernetes cold / `podman kube play` until the port answers",
              s[M_KUBE_COLD], s[M_KUBE_PLAY]);
  print_ratio("kubernetes warm claim / `podman kube play` until the port "
              "answers",
              s[M_KUBE_WARM], s[M_KUBE_PLAY]);
  print_ratio("docker / `podman run -d` until the socket answers", s[M_DOCKER],
              s[M_PODMAN_RUN]);
  print_ratio("docker / `podman run -d` until it returns", s[M_DOCKER],
              x[M_PODMAN_RUN]);
  double load[3] = {0, 0, 0};
  (void)getloadavg(load, 3);
  printf("\n- warm claims: %ld PATCH requests for %zu warm runs (a run that "
         "found no warm Pod would have made a cold one)\n",
         claims, c->nruns);
  printf("- load average at the end: %.2f %.2f %.2f\n", load[0], load[1],
         load[2]);
}

/* ---- the run ------------------------------------------------------------ */

static void cleanup(void) {
  struct ctx *c = cleanup_ctx;
  if (!c)
    return;
  cleanup_ctx = NULL;
  stop_signal = 0;
  if (c->live[0] && c->sbx[0]) {
    const char *rm[] = {c->sbx, "sandbox", "--state-dir", c->state,
                        "rm",   c->live,   NULL};
    (void)run(c, rm, NULL, 0, true);
  }
  const char *rm_run[] = {"podman", "rm", "-f",        "-v", "-i",
                          "-t",     "0",  c->run_name, NULL};
  if (c->run_name[0])
    (void)run(c, rm_run, NULL, 0, true);
  const char *rm_pod[] = {"podman", "pod", "rm",         "-f", "-i",
                          "-t",     "0",   c->play_name, NULL};
  if (c->play_name[0])
    (void)run(c, rm_pod, NULL, 0, true);
  ready_kube_stop(&c->kube);
  ready_remote_stop(&c->remote);
  ready_addr_give(&c->play_addr);
  if (c->dir[0])
    (void)bench_rm_rf(c->dir);
  for (int m = 0; m < M_COUNT; m++) {
    free(c->t[m]);
    free(c->aux[m]);
  }
}

/* What the run needs, checked before anything starts. */
static void check_prerequisites(struct ctx *c) {
  if (geteuid() != 0)
    die("root", "needed (podman kube play, the local backend's isolation)");
  if (!getenv("DOCKER_HOST"))
    die("DOCKER_HOST", "unset: export DOCKER_HOST=$(scripts/containers.sh "
                       "start)");
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "podman image exists '%s'", c->image);
  if (strchr(c->image, '\'') || system(cmd) != 0)
    die(c->image, "no such image in podman (scripts/containers.sh start "
                  "builds localhost/sbx-debian:latest)");
  if (bench_binary("SBX_BIN", "sbx", c->sbx, sizeof(c->sbx)) < 0 ||
      bench_binary("SANDBOXD_BIN", "sandboxd", c->sandboxd,
                   sizeof(c->sandboxd)) < 0 ||
      bench_source_dir(__FILE__, c->src, sizeof(c->src)) < 0)
    die("paths", "cannot find sbx, sandboxd or the source tree");
  if (access(c->sbx, X_OK) < 0 || access(c->sandboxd, X_OK) < 0)
    die(c->sbx, "sbx or sandboxd is not built");
}

static void setup(struct ctx *c) {
  (void)snprintf(c->dir, sizeof(c->dir), "/tmp/sbx-bench-ready-XXXXXX");
  if (!mkdtemp(c->dir)) {
    c->dir[0] = '\0';
    die("mkdtemp", strerror(errno));
  }
  (void)snprintf(c->state, sizeof(c->state), "%s/state", c->dir);
  (void)snprintf(c->cadir, sizeof(c->cadir), "%s/ca", c->dir);
  (void)snprintf(c->err, sizeof(c->err), "%s/last.err", c->dir);
  (void)snprintf(c->run_name, sizeof(c->run_name), "sbx-bench-ready-%d",
                 (int)getpid());
  char host[128];
  (void)snprintf(host, sizeof(host), "%s/host", c->dir);
  if (ready_remote_start(&c->remote, c->sandboxd, c->cadir, host) < 0)
    die("remote", "cannot start sandboxd");
  if (ready_addr_take(&c->play_addr, PLAY_PORT) < 0)
    die("podman kube play", "no address");
  if (ready_kube_start(&c->kube, c->src, c->dir) < 0)
    die("the fixture", "see above");
  for (int m = 0; m < M_COUNT; m++) {
    c->t[m] = calloc(c->nruns, sizeof(uint64_t));
    c->aux[m] = calloc(c->nruns, sizeof(uint64_t));
    if (!c->t[m] || !c->aux[m])
      die("calloc", strerror(ENOMEM));
  }
}

static void rounds(struct ctx *c) {
  uint64_t ns, aux;
  for (int m = 0; m < M_COUNT; m++) { /* left out */
    measures[m].fn(c, &ns, &aux);
    (void)fprintf(stderr, "bench_ready: left out: %s: %.1f ms\n",
                  measures[m].name, ns / 1e6);
  }
  for (size_t i = 0; i < c->nruns; i++) {
    for (int k = 0; k < M_COUNT; k++) {
      int m = (int)((i + (size_t)k) % M_COUNT);
      measures[m].fn(c, &c->t[m][i], &c->aux[m][i]);
    }
    (void)fprintf(stderr, "bench_ready: round %zu of %zu done\n", i + 1,
                  c->nruns);
  }
  settle(c);
}

static void usage(void) {
  (void)fprintf(stderr, "usage: bench_ready [--runs N] [--image IMAGE]\n");
  exit(2);
}

int main(int argc, char **argv) {
  static struct ctx c = {
      .image = "localhost/sbx-debian:latest",
      .nruns = 10,
      .play_addr = {.fd = -1},
      .remote = {.addr = {.fd = -1}},
  };
  static const struct option opts[] = {{"runs", required_argument, NULL, 'n'},
                                       {"image", required_argument, NULL, 'i'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "n:i:h", opts, NULL)) != -1) {
    char *end = NULL;
    switch (o) {
    case 'n':
      errno = 0;
      c.nruns = strtoul(optarg, &end, 10);
      if (errno || !end || *end || c.nruns < 1 || c.nruns > 1000)
        die("--runs", "expected a number from 1 to 1000");
      break;
    case 'i':
      c.image = optarg;
      break;
    default:
      usage();
    }
  }
  if (optind != argc)
    usage();
  check_prerequisites(&c);
  struct sigaction sa = {.sa_handler = on_signal};
  (void)sigaction(SIGINT, &sa, NULL);
  (void)sigaction(SIGTERM, &sa, NULL);
  (void)signal(SIGPIPE, SIG_IGN);
  cleanup_ctx = &c;
  if (atexit(cleanup) != 0)
    die("atexit", "failed");
  printf("## Sandbox ready time: %zu interleaved rounds\n\n", c.nruns);
  bench_print_machine(stdout);
  printf("- image %s; sbx %s\n\n", c.image, c.sbx);
  (void)fflush(stdout);
  setup(&c);
  rounds(&c);
  long claims = ready_kube_count(&c.kube, "PATCH");
  print_results(&c, claims);
  return 0;
}
