/* The local backend isolated (isolation "namespaces", network_mode "none";
 * and the default: namespaces, limits and the pasta network) against the
 * same backend with isolation "none", in one run:
 *
 *   create  backend_local.create until sandboxd has answered Hello (N=50
 *           each, the two kinds alternating), and `podman run -d
 *           --network none IMAGE --version` of the local image where podman
 *           and the image are there (returns once the container started);
 *           median and p90; with the static sandboxd too, to break the
 *           dynamic build's loading out
 *   exec    round trip of /bin/true through sandboxd's RPC (one ExecStart
 *           that waits for the exit, as sbx runs commands) in each kind of
 *           sandbox, against posix_spawn + waitpid in this process (the
 *           baseline); N=500 each, interleaved in blocks
 *   memory  idle PSS (/proc/PID/smaps_rollup) of a sandbox's processes:
 *           sandboxd alone, or the supervisor and the sandbox's PID 1
 *           when isolated; for the dynamic build and, when there is one,
 *           the static build; K sandboxes alive at once, so that pages
 *           shared between them are divided among them as in real use
 *
 * Usage: bench_isolation [-n CREATES] [-e EXECS] [-k SANDBOXES]
 *                        [-i IMAGE|none] [--only create|exec|memory]
 *                        [--once]
 * sandboxd: $SBX_SANDBOXD or BUILD/sandboxd; the static one:
 * $SBX_SANDBOXD_STATIC or SOURCE/build-static/sandboxd. --once creates one
 * isolated sandbox, runs /bin/true in it and closes it (for strace or
 * perf). Needs user namespaces; run as root for the default id range.
 * Prints Markdown for bench/RESULTS.md. */
#include <getopt.h>
#include <jansson.h>
#include <spawn.h>
#include <stddef.h>

#include "backends/local/local.h"
#include "bench/bench.h"
#include "controller/backend/backend.h"
#include "shared/log.h"

extern char **environ;

#define EXEC_BLOCKS 10
#define EXEC_WARMUP 50
#define MAX_MEM_SANDBOXES 32

enum kind { ISOLATED, NOT_ISOLATED, ISOLATED_NET, NKINDS };

/* The backend's own options of each kind, as a run_config gives them. */
static const struct {
  const char *name;
  const char *json;
} kinds[NKINDS] = {
    [ISOLATED] = {"isolated (namespaces, network none)",
                  "{\"network_mode\": \"none\"}"},
    [NOT_ISOLATED] = {"not isolated (isolation none)",
                      "{\"isolation\": \"none\"}"},
    [ISOLATED_NET] = {"isolated, default network (pasta) and limits", "{}"},
};

struct opts {
  unsigned creates, execs, sandboxes;
  const char *image; /* "none": podman not measured */
  const char *only;  /* one section: create, exec or memory */
  bool once;
};

static void *own_opts[NKINDS]; /* backend_local's options of each kind */

static int parse_kinds(void) {
  for (int k = 0; k < NKINDS; k++) {
    json_error_t je;
    json_t *obj = json_loads(kinds[k].json, 0, &je);
    struct sbx_error e = {0};
    int r = obj ? backend_options_parse(&backend_local, obj, "bench",
                                        &own_opts[k], &e)
                : -EINVAL;
    json_decref(obj);
    if (r < 0) {
      (void)fprintf(stderr, "bench: options %s: %s\n", kinds[k].json,
                    obj ? e.msg : je.text);
      return r;
    }
  }
  return 0;
}

static void free_kinds(void) {
  for (int k = 0; k < NKINDS; k++) {
    backend_options_free(&backend_local, own_opts[k]);
    own_opts[k] = NULL;
  }
}

static int create(const char *exe, enum kind k, struct sandbox **s) {
  struct backend_options o = {.sandboxd_path = exe, .own = own_opts[k]};
  struct sbx_error e = {0};
  int r = backend_local.create(&o, NULL, s, &e);
  if (r < 0)
    (void)fprintf(stderr, "bench: create %s: %s\n", kinds[k].name, e.msg);
  return r;
}

static void destroy(struct sandbox *s) {
  struct sbx_error e = {0};
  if (backend_local.close(s, &e) < 0)
    (void)fprintf(stderr, "bench: close: %s\n", e.msg);
}

/* ---- podman ------------------------------------------------------------ */

/* Runs ARGV with stdin, stdout and stderr on /dev/null, or stdout into OUT
 * (its first line kept). Its exit code, or a negative errno. */
static int run_cmd(const char *const *argv, char *out, size_t size) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int p[2] = {-1, -1};
  if (out && pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (out)
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  else
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (out)
    (void)close(p[1]);
  if (r != 0) {
    if (out)
      (void)close(p[0]);
    return -r;
  }
  if (out) {
    size_t n = 0;
    ssize_t got;
    while (n + 1 < size && (got = read(p[0], out + n, size - 1 - n)) > 0)
      n += (size_t)got;
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
    (void)close(p[0]);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      return -errno;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Why podman cannot be measured, or NULL when it can. */
static const char *podman_missing(const char *image) {
  const char *argv[] = {"podman", "image", "exists", image, NULL};
  int r = run_cmd(argv, NULL, 0);
  if (r == -ENOENT)
    return "podman is not installed";
  if (r != 0)
    return "the image is not in podman's local storage";
  return NULL;
}

/* One `podman run -d` of IMAGE; its wall time in *NS. The container is
 * removed after, untimed. */
static int podman_run(const char *image, uint64_t *ns) {
  const char *run[] = {"podman",
                       "run",
                       "-d",
                       "--network",
                       "none",
                       "--label",
                       "sbx.bench=isolation",
                       image,
                       "--version",
                       NULL};
  char id[128];
  uint64_t t0 = bench_now_ns();
  int r = run_cmd(run, id, sizeof(id));
  *ns = bench_now_ns() - t0;
  if (r != 0 || !id[0]) {
    (void)fprintf(stderr, "bench: podman run failed (%d)\n", r);
    return -EIO;
  }
  const char *rm[] = {"podman", "rm", "-f", "-t", "0", id, NULL};
  (void)run_cmd(rm, NULL, 0);
  return 0;
}

/* ---- create + ready ---------------------------------------------------- */

static void print_row(const char *what, uint64_t *ns, unsigned n,
                      double base_p50) {
  double p50 = (double)bench_percentile(ns, n, 50) / 1e6;
  double p90 = (double)bench_percentile(ns, n, 90) / 1e6;
  printf("| %s | %u | %.2f | %.2f | %.2f |\n", what, n, p50, p90,
         base_p50 > 0 ? p50 / base_p50 : 1.0);
}

/* What bench_create times: the local backend with a sandboxd build and a
 * kind. The first two are the figures; the static ones break the
 * dynamic build's loading out of them. */
#define CREATE_SIDES 5
struct side {
  const char *label;
  const char *exe;
  enum kind kind;
};

/* Creates N sandboxes of each side, taking turns, and as many podman
 * containers when PODMAN is set; each closed (timed apart) before the
 * next. */
static int bench_create(const char *exe, const char *stat_exe, unsigned n,
                        const char *podman) {
  const struct side sides[CREATE_SIDES] = {
      {"local, isolated: create until Hello answered", exe, ISOLATED},
      {"local, not isolated (baseline)", exe, NOT_ISOLATED},
      {"local, isolated, default network (pasta starting) and limits", exe,
       ISOLATED_NET},
      {"(breakdown) isolated, static sandboxd", stat_exe, ISOLATED},
      {"(breakdown) not isolated, static sandboxd", stat_exe, NOT_ISOLATED},
  };
  int nsides = stat_exe ? CREATE_SIDES : 3;
  uint64_t *t[CREATE_SIDES + 1] = {NULL}, *shut[CREATE_SIDES] = {NULL};
  int r = 0;
  for (int k = 0; k <= nsides && r == 0; k++)
    if (!(t[k] = calloc(n, sizeof(uint64_t))) ||
        (k < nsides && !(shut[k] = calloc(n, sizeof(uint64_t)))))
      r = -ENOMEM;
  for (unsigned i = 0; i < n && r == 0; i++) {
    for (int j = 0; j < nsides && r == 0; j++) {
      int k = (int)((j + i) % (unsigned)nsides);
      struct sandbox *s = NULL;
      uint64_t t0 = bench_now_ns();
      if ((r = create(sides[k].exe, sides[k].kind, &s)) < 0)
        break;
      uint64_t t1 = bench_now_ns();
      destroy(s);
      t[k][i] = t1 - t0;
      shut[k][i] = bench_now_ns() - t1;
    }
    if (r == 0 && podman)
      r = podman_run(podman, &t[nsides][i]);
  }
  if (r == 0) {
    printf("\n### sandbox create + ready (%u each; the sides take turns, "
           "each closed before the next)\n\n",
           n);
    printf("| | runs | median ms | p90 ms | median / not isolated |\n"
           "|---|---:|---:|---:|---:|\n");
    double base = (double)bench_percentile(t[NOT_ISOLATED], n, 50) / 1e6;
    double iso = (double)bench_percentile(t[ISOLATED], n, 50) / 1e6;
    for (int k = 0; k < nsides; k++)
      print_row(sides[k].label, t[k], n, base);
    if (podman)
      print_row("`podman run -d --network none IMAGE --version`", t[nsides], n,
                base);
    print_row("(close, isolated)", shut[ISOLATED], n, base);
    print_row("(close, not isolated)", shut[NOT_ISOLATED], n, base);
    printf("\nisolated create median %.2f ms (target: under 10 ms: %s)", iso,
           iso < 10 ? "met" : "NOT met");
    if (podman)
      printf("; podman run / isolated: %.1fx",
             (double)bench_percentile(t[nsides], n, 50) / 1e6 / iso);
    else
      printf("; podman not measured");
    printf("\n");
  }
  for (int k = 0; k <= CREATE_SIDES; k++)
    free(t[k]);
  for (int k = 0; k < CREATE_SIDES; k++)
    free(shut[k]);
  return r;
}

/* ---- exec round trip --------------------------------------------------- */

/* One /bin/true through C's sandboxd, as sbx runs commands; *NS its round
 * trip. The exec is released after, untimed. */
static int sbx_true(struct sbx_client *c, uint64_t *ns) {
  static char *argv[] = {"/bin/true"};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  st.no_stdin = true;
  st.wait_ms = 10000;
  uint64_t id;
  int code;
  uint64_t t0 = bench_now_ns();
  int r = bench_run_exec(c, &st, &id, &code, NULL);
  *ns = bench_now_ns() - t0;
  if (r < 0)
    return r;
  struct sbx_error e = {0};
  (void)sbx_exec_release(c, id, &e);
  if (code != 0) {
    (void)fprintf(stderr, "bench: /bin/true exited with %d\n", code);
    return -EIO;
  }
  return 0;
}

/* One run of side SIDE (a kind, or NKINDS for the direct spawn). */
static int exec_one(struct sandbox *const *s, int side, uint64_t *ns) {
  return side == NKINDS ? bench_spawn_true(ns) : sbx_true(s[side]->client, ns);
}

static int bench_exec(const char *exe, unsigned n) {
  struct sandbox *s[NKINDS] = {NULL};
  uint64_t *t[NKINDS + 1] = {NULL};
  int r = 0;
  for (int k = 0; k < NKINDS && r == 0; k++)
    r = create(exe, (enum kind)k, &s[k]);
  for (int k = 0; k <= NKINDS && r == 0; k++)
    if (!(t[k] = calloc(n, sizeof(uint64_t))))
      r = -ENOMEM;
  uint64_t ns;
  for (unsigned i = 0; i < EXEC_WARMUP && r == 0; i++)
    for (int k = 0; k <= NKINDS && r == 0; k++)
      r = exec_one(s, k, &ns);
  unsigned per = n / EXEC_BLOCKS ? n / EXEC_BLOCKS : 1;
  for (unsigned done = 0; done < n && r == 0;) {
    unsigned m = n - done < per ? n - done : per;
    for (int k = 0; k <= NKINDS && r == 0; k++)
      for (unsigned i = 0; i < m && r == 0; i++)
        r = exec_one(s, k, &t[k][done + i]);
    done += m;
  }
  if (r == 0) {
    double base = (double)bench_percentile(t[NKINDS], n, 50) / 1e3;
    printf("\n### exec round trip of /bin/true (%u each, interleaved in "
           "blocks of %u, after %u warm-up runs)\n\n",
           n, per, EXEC_WARMUP);
    printf("| | p50 µs | p90 µs | p99 µs | p50 / posix_spawn |\n"
           "|---|---:|---:|---:|---:|\n");
    static const char *const what[NKINDS + 1] = {
        [ISOLATED] = "sandboxd, isolated: one ExecStart waiting for the exit",
        [NOT_ISOLATED] = "sandboxd, not isolated: the same",
        [ISOLATED_NET] = "sandboxd, isolated, default network: the same",
        [NKINDS] = "direct: posix_spawn + waitpid (baseline)",
    };
    double p50[NKINDS + 1];
    for (int k = 0; k <= NKINDS; k++) {
      p50[k] = (double)bench_percentile(t[k], n, 50) / 1e3;
      printf("| %s | %.1f | %.1f | %.1f | %.2f |\n", what[k], p50[k],
             (double)bench_percentile(t[k], n, 90) / 1e3,
             (double)bench_percentile(t[k], n, 99) / 1e3, p50[k] / base);
    }
    printf("\nisolated / posix_spawn p50 %.2fx (target: within 1.5x: %s); "
           "isolated / not isolated %.2fx\n",
           p50[ISOLATED] / base,
           p50[ISOLATED] / base <= 1.5 ? "met" : "NOT met",
           p50[ISOLATED] / p50[NOT_ISOLATED]);
  }
  for (int k = 0; k <= NKINDS; k++)
    free(t[k]);
  for (int k = 0; k < NKINDS; k++)
    if (s[k])
      destroy(s[k]);
  return r;
}

/* ---- idle memory ------------------------------------------------------- */

struct mem {
  long rss, pss, priv; /* KiB; priv: Private_Clean + Private_Dirty */
};

/* Adds PID's figures from /proc/PID/smaps_rollup to M. */
static int add_mem(pid_t pid, struct mem *m) {
  char path[64], line[256];
  (void)snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  static const struct {
    const char *key;
    size_t off;
  } fields[] = {
      {"Rss:", offsetof(struct mem, rss)},
      {"Pss:", offsetof(struct mem, pss)},
      {"Private_Clean:", offsetof(struct mem, priv)},
      {"Private_Dirty:", offsetof(struct mem, priv)},
  };
  while (fgets(line, sizeof(line), f))
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
      size_t kl = strlen(fields[i].key);
      if (strncmp(line, fields[i].key, kl) == 0)
        *(long *)((char *)m + fields[i].off) += strtol(line + kl, NULL, 10);
    }
  (void)fclose(f);
  return 0;
}

/* The host pids of S's processes: sandboxd (the supervisor when isolated)
 * from the backend's saved state, then its children (the sandbox's PID 1).
 * Their number, or a negative errno. */
static int sandbox_pids(const struct sandbox *s, pid_t *pids, int max) {
  json_t *obj = json_object();
  if (!obj || backend_local.save(s, obj) < 0) {
    json_decref(obj);
    return -ENOMEM;
  }
  pids[0] = (pid_t)json_integer_value(json_object_get(obj, "pid"));
  json_decref(obj);
  if (pids[0] <= 0)
    return -ESRCH;
  /* Its descendants: the sandbox's PID 1 and the network's watcher, and
   * the watcher's pasta (an idle sandbox runs no command). */
  int n = 1;
  for (int i = 0; i < n; i++) {
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/%d/task/%d/children",
                   (int)pids[i], (int)pids[i]);
    FILE *f = fopen(path, "re");
    long v;
    while (f && n < max && fscanf(f, "%ld", &v) == 1)
      if (i == 0 || v != pids[0])
        pids[n++] = (pid_t)v;
    if (f)
      (void)fclose(f);
  }
  return n;
}

/* K sandboxes of kind KIND served by EXE, alive at once, measured 200 ms
 * after the last was ready; the figures per sandbox in *M, their process
 * count in *NPROC. */
static int idle_mem(const char *exe, enum kind kind, unsigned k, struct mem *m,
                    int *nproc) {
  struct sandbox *s[MAX_MEM_SANDBOXES] = {NULL};
  *m = (struct mem){0};
  int r = 0;
  for (unsigned i = 0; i < k && r == 0; i++)
    r = create(exe, kind, &s[i]);
  (void)nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  for (unsigned i = 0; i < k && r == 0; i++) {
    pid_t pids[8];
    int n = sandbox_pids(s[i], pids, 8);
    if (n < 0)
      r = n;
    for (int j = 0; j < n && r == 0; j++)
      r = add_mem(pids[j], m);
    *nproc = n;
  }
  for (unsigned i = 0; i < k; i++)
    if (s[i])
      destroy(s[i]);
  m->rss /= (long)k;
  m->pss /= (long)k;
  m->priv /= (long)k;
  return r;
}

static int bench_memory(const char *exe, const char *stat_exe, unsigned k) {
  const char *exes[2] = {exe, stat_exe};
  static const char *const build[2] = {"dynamic", "static"};
  struct mem m[2][NKINDS];
  int nproc[2][NKINDS];
  for (int b = 0; b < 2 && exes[b]; b++)
    for (int kind = 0; kind < NKINDS; kind++) {
      int r =
          idle_mem(exes[b], (enum kind)kind, k, &m[b][kind], &nproc[b][kind]);
      if (r < 0)
        return r;
    }
  printf("\n### idle memory per sandbox (%u sandboxes of a kind alive at "
         "once, after create + Hello; smaps_rollup summed over the "
         "sandbox's processes, divided by %u)\n\n",
         k, k);
  printf("| sandboxd build, kind | processes | PSS KiB | private KiB | RSS "
         "KiB | PSS / dynamic not isolated |\n"
         "|---|---:|---:|---:|---:|---:|\n");
  double base = (double)m[0][NOT_ISOLATED].pss;
  for (int b = 0; b < 2 && exes[b]; b++)
    for (int kind = 0; kind < NKINDS; kind++)
      printf("| %s, %s | %d | %ld | %ld | %ld | %.2f |\n", build[b],
             kinds[kind].name, nproc[b][kind], m[b][kind].pss, m[b][kind].priv,
             m[b][kind].rss, (double)m[b][kind].pss / base);
  if (!stat_exe)
    printf("\nstatic sandboxd not found ($SBX_SANDBOXD_STATIC or "
           "build-static/sandboxd): not measured\n");
  return 0;
}

/* ---- main -------------------------------------------------------------- */

static int parse_args(int argc, char **argv, struct opts *o) {
  static const struct option lopts[] = {{"once", no_argument, NULL, '1'},
                                        {"only", required_argument, NULL, 'o'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "n:e:k:i:", lopts, NULL)) != -1) {
    char *end = NULL;
    unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;
    bool num = optarg && end != optarg && *end == '\0' && v > 0 && v < 100000;
    if (ch == 'n' && num)
      o->creates = (unsigned)v;
    else if (ch == 'e' && num)
      o->execs = (unsigned)v;
    else if (ch == 'k' && num && v <= MAX_MEM_SANDBOXES)
      o->sandboxes = (unsigned)v;
    else if (ch == 'i')
      o->image = optarg;
    else if (ch == '1')
      o->once = true;
    else if (ch == 'o' &&
             (strcmp(optarg, "create") == 0 || strcmp(optarg, "exec") == 0 ||
              strcmp(optarg, "memory") == 0))
      o->only = optarg;
    else {
      (void)fprintf(stderr, "usage: bench_isolation [-n CREATES] [-e EXECS] "
                            "[-k SANDBOXES (at most 32)] [-i IMAGE|none] "
                            "[--only create|exec|memory] [--once]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
  return -1;
}

/* One isolated sandbox, one /bin/true, closed: a run to trace. */
static int once(const char *exe) {
  struct sandbox *s = NULL;
  uint64_t t0 = bench_now_ns(), ns = 0;
  int r = create(exe, ISOLATED, &s);
  uint64_t t1 = bench_now_ns();
  if (r == 0)
    r = sbx_true(s->client, &ns);
  if (s)
    destroy(s);
  printf("isolated create %.2f ms, /bin/true %.1f µs, close %.2f ms\n",
         (double)(t1 - t0) / 1e6, (double)ns / 1e3,
         (double)(bench_now_ns() - t1 - ns) / 1e6);
  return r;
}

int main(int argc, char **argv) {
  struct opts o = {50, 500, 8, "localhost/sbx-debian:latest", NULL, false};
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0)
    return rc;
  sbx_log_set_level(SBX_LOG_ERROR); /* not the warning of every "none" */
  char exe[PATH_MAX], src[PATH_MAX], stat_exe[PATH_MAX + 32];
  if (bench_binary("SBX_SANDBOXD", "sandboxd", exe, sizeof(exe)) < 0 ||
      bench_source_dir(__FILE__, src, sizeof(src)) < 0 || parse_kinds() < 0) {
    (void)fprintf(stderr, "bench: cannot find sandboxd\n");
    return 1;
  }
  if (o.once) {
    rc = once(exe) < 0;
    free_kinds();
    return rc;
  }
  const char *env = getenv("SBX_SANDBOXD_STATIC");
  (void)snprintf(stat_exe, sizeof(stat_exe), "%s/build-static/sandboxd", src);
  if (env && *env)
    (void)snprintf(stat_exe, sizeof(stat_exe), "%s", env);
  bool have_static = access(stat_exe, X_OK) == 0;
  const char *why =
      strcmp(o.image, "none") == 0 ? "-i none" : podman_missing(o.image);
  printf("## bench_isolation\n\n");
  bench_print_machine(stdout);
  printf("- sandboxd: %s; static: %s\n", exe, have_static ? stat_exe : "none");
  printf("- podman: %s%s\n", why ? "not measured: " : o.image, why ? why : "");
  bool all = !o.only;
  rc = 0;
  if ((all || strcmp(o.only, "create") == 0) &&
      bench_create(exe, have_static ? stat_exe : NULL, o.creates,
                   why ? NULL : o.image) < 0)
    rc = 1;
  if (rc == 0 && (all || strcmp(o.only, "exec") == 0) &&
      bench_exec(exe, o.execs) < 0)
    rc = 1;
  if (rc == 0 && (all || strcmp(o.only, "memory") == 0) &&
      bench_memory(exe, have_static ? stat_exe : NULL, o.sandboxes) < 0)
    rc = 1;
  free_kinds();
  return rc;
}
