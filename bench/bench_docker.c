/* The docker backend against the podman CLI, in the same run.
 *
 *   bench_docker [-n EXECS] [-r READIES] [-i IMAGE]
 *
 * Needs DOCKER_HOST (scripts/containers.sh prints it) and the podman CLI on
 * the same engine. Measures:
 *   exec:  ExecStart of /bin/true + ExecRead (until exit) through sandboxd in
 *          a container, against `podman exec CONTAINER true` on the same
 *          container (default 300 and 30 runs);
 *   ready: backend_docker.create until sandboxd answers Hello, against
 *          `podman run -d IMAGE --version` (returns once the container has
 *          started), and the engine's own create+start through the same API
 *          for the breakdown (default 20 runs each);
 *   cli:   `sbx sandbox --state-dir D create --backend docker -o image=IMAGE`
 *          as a process (the built sbx, SBX_BIN for another) until it has
 *          printed the id and exited, against the same `podman run -d`
 *          (the ready rounds' runs), interleaved with them.
 * Containers made for the baselines are removed after each run, untimed.
 * Prints p50 and p99 of each and the ratios as a Markdown table. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/docker/docker.h"
#include "backends/docker/engine.h"
#include "bench/bench.h"
#include "shared/clock.h"

extern char **environ;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_docker: %s: %s\n", what, msg);
  exit(1);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

struct stats {
  double p50, p99; /* milliseconds */
};

static struct stats stats_of(uint64_t *ns, size_t n) {
  qsort(ns, n, sizeof(*ns), cmp_u64);
  size_t i99 = (n * 99 + 99) / 100;
  struct stats s = {ns[n / 2] / 1e6, ns[(i99 ? i99 : 1) - 1] / 1e6};
  return s;
}

/* Runs ARGV with stdout and stderr on /dev/null (or OUT's pipe when OUT is
 * not NULL: the first line is kept); returns the wall time in ns. */
static uint64_t run_cmd(const char *const *argv, char *out, size_t out_size) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int p[2] = {-1, -1};
  if (out && pipe(p) < 0)
    die("pipe", strerror(errno));
  if (out)
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  else
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  uint64_t t0 = sbx_now_ns();
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0)
    die(argv[0], strerror(r));
  if (out) {
    close(p[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < out_size && (k = read(p[0], out + n, out_size - 1 - n)) > 0)
      n += (size_t)k;
    out[n] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
      *nl = '\0';
    close(p[0]);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  uint64_t t = sbx_now_ns() - t0;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    die(argv[0], "failed");
  return t;
}

/* One /bin/true through sandboxd as sbx runs commands: an ExecStart that
 * waits for the exit (ExecReads after it if it has not). */
static uint64_t exec_true(struct sandbox *s) {
  static char *argv[] = {"/bin/true", NULL};
  struct sbx_error e = {0};
  uint64_t t0 = sbx_now_ns();
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  st.no_stdin = true;
  st.wait_ms = 5000;
  uint64_t id;
  int code;
  if (bench_run_exec(s->client, &st, &id, &code, NULL) < 0)
    die("exec", "see above");
  if (code != 0)
    die("exec", "/bin/true failed");
  uint64_t t = sbx_now_ns() - t0;
  (void)sbx_exec_release(s->client, id, &e);
  return t;
}

static void engine_call(struct docker_engine *en, const char *method,
                        const char *path, json_t *body, json_t **out) {
  struct sbx_error e = {0};
  struct docker_request req = {.method = method, .path = path, .body = body};
  /* A forced removal may race the container's exit: try again. */
  for (int attempt = 0;; attempt++) {
    int r = docker_engine_json(en, &req, out, &e);
    if (r == 0)
      return;
    if (r != -EIO || attempt == 4)
      die(path, e.msg);
    usleep(50000);
  }
}

int main(int argc, char **argv) {
  size_t nexec = 300, nready = 20, nbase = 30;
  const char *image = "localhost/sbx-debian:latest";
  int c;
  while ((c = getopt(argc, argv, "n:r:i:")) != -1) {
    switch (c) {
    case 'n':
      nexec = strtoul(optarg, NULL, 10);
      break;
    case 'r':
      nready = strtoul(optarg, NULL, 10);
      break;
    case 'i':
      image = optarg;
      break;
    default:
      fprintf(stderr, "usage: bench_docker [-n EXECS] [-r READIES] "
                      "[-i IMAGE]\n");
      return 2;
    }
  }
  if (nexec < 10 || nready < 3)
    die("usage", "-n is at least 10, -r at least 3");
  if (!getenv("DOCKER_HOST"))
    die("DOCKER_HOST", "unset: run scripts/containers.sh first");

  struct docker_options d = {.image = image, .never_pull = true};
  struct backend_options o = {.own = &d};
  struct sbx_error e = {0};

  /* ---- exec round trip ---- */
  struct sandbox *s = NULL;
  if (backend_docker.create(&o, NULL, &s, &e) < 0)
    die("create", e.msg);
  for (int i = 0; i < 20; i++)
    (void)exec_true(s);
  uint64_t *t_exec = calloc(nexec, sizeof(*t_exec));
  uint64_t *t_pexec = calloc(nbase, sizeof(*t_pexec));
  uint64_t *t_ready = calloc(nready, sizeof(*t_ready));
  uint64_t *t_prun = calloc(nready, sizeof(*t_prun));
  uint64_t *t_api = calloc(nready, sizeof(*t_api));
  if (!t_exec || !t_pexec || !t_ready || !t_prun || !t_api)
    die("calloc", strerror(ENOMEM));
  for (size_t i = 0; i < nexec; i++)
    t_exec[i] = exec_true(s);
  const char *pexec[] = {"podman", "exec", docker_container_id(s), "true",
                         NULL};
  (void)run_cmd(pexec, NULL, 0);
  for (size_t i = 0; i < nbase; i++)
    t_pexec[i] = run_cmd(pexec, NULL, 0);
  if (backend_docker.close(s, &e) < 0)
    die("close", e.msg);

  /* ---- ready ---- */
  struct docker_engine *en = NULL;
  if (docker_engine_open(NULL, &en, &e) < 0)
    die("engine", e.msg);
  char sbx[PATH_MAX], state_dir[] = "/tmp/bench-docker-XXXXXX", opt[512];
  if (bench_binary("SBX_BIN", "sbx", sbx, sizeof(sbx)) < 0)
    die("sbx", "not found");
  if (!mkdtemp(state_dir))
    die("mkdtemp", strerror(errno));
  (void)snprintf(opt, sizeof(opt), "image=%s", image);
  uint64_t *t_cli = calloc(nready, sizeof(*t_cli));
  if (!t_cli)
    die("calloc", strerror(ENOMEM));
  for (size_t i = 0; i < nready; i++) {
    /* The CLI, a process: what a person waits for. */
    char sid[128];
    const char *cc[] = {sbx,      "sandbox",   "--state-dir", state_dir,
                        "create", "--backend", "docker",      "-o",
                        opt,      NULL};
    t_cli[i] = run_cmd(cc, sid, sizeof(sid));
    if (!sid[0])
      die("sbx sandbox create", "printed no id");
    const char *crm[] = {sbx,  "sandbox", "--state-dir", state_dir,
                         "rm", sid,       NULL};
    (void)run_cmd(crm, NULL, 0);

    uint64_t t0 = sbx_now_ns();
    if (backend_docker.create(&o, NULL, &s, &e) < 0)
      die("create", e.msg);
    t_ready[i] = sbx_now_ns() - t0;
    if (backend_docker.close(s, &e) < 0)
      die("close", e.msg);

    char id[128];
    const char *prun[] = {"podman",           "run", "-d",        "--label",
                          "sbx.managed=true", image, "--version", NULL};
    t_prun[i] = run_cmd(prun, id, sizeof(id));
    const char *prm[] = {"podman", "rm", "-f", "-t", "0", id, NULL};
    (void)run_cmd(prm, NULL, 0);

    /* The engine alone: create + start through the API, no sandboxd wait. */
    json_t *body = json_pack("{s:s, s:[s], s:{s:s}}", "Image", image, "Cmd",
                             "--version", "Labels", "sbx.managed", "true");
    json_t *created = NULL;
    t0 = sbx_now_ns();
    engine_call(en, "POST", "/containers/create", body, &created);
    char path[256];
    (void)snprintf(path, sizeof(path), "/containers/%s/start",
                   json_string_value(json_object_get(created, "Id")));
    engine_call(en, "POST", path, NULL, NULL);
    t_api[i] = sbx_now_ns() - t0;
    (void)snprintf(path, sizeof(path), "/containers/%s?force=1",
                   json_string_value(json_object_get(created, "Id")));
    engine_call(en, "DELETE", path, NULL, NULL);
    json_decref(created);
    json_decref(body);
  }
  docker_engine_free(en);

  struct stats ex = stats_of(t_exec, nexec);
  struct stats pe = stats_of(t_pexec, nbase);
  struct stats rd = stats_of(t_ready, nready);
  struct stats pr = stats_of(t_prun, nready);
  struct stats api = stats_of(t_api, nready);
  struct stats cli = stats_of(t_cli, nready);
  printf("| measure | runs | p50 ms | p99 ms |\n|---|---|---|---|\n");
  printf("| exec `/bin/true` through sandboxd (an ExecStart that waits for the "
         "exit) | "
         "%zu | %.3f | %.3f |\n",
         nexec, ex.p50, ex.p99);
  printf("| `podman exec CONTAINER true` (baseline) | %zu | %.1f | %.1f |\n",
         nbase, pe.p50, pe.p99);
  printf("| sandbox ready (create, start, socket, Hello) | %zu | %.1f | %.1f "
         "|\n",
         nready, rd.p50, rd.p99);
  printf("| `podman run -d IMAGE --version` (baseline) | %zu | %.1f | %.1f "
         "|\n",
         nready, pr.p50, pr.p99);
  printf("| engine API create + start alone (breakdown) | %zu | %.1f | %.1f "
         "|\n",
         nready, api.p50, api.p99);
  printf("| `sbx sandbox create --backend docker`, a process | %zu | %.1f | "
         "%.1f |\n",
         nready, cli.p50, cli.p99);
  printf("\nexec: %.0fx faster than podman exec at p50, %.0fx at p99\n",
         pe.p50 / ex.p50, pe.p99 / ex.p99);
  printf("ready: %+.1f ms against podman run -d at p50 (%+.1f ms at p99); "
         "%+.1f ms over the engine's own create + start\n",
         rd.p50 - pr.p50, rd.p99 - pr.p99, rd.p50 - api.p50);
  printf("cli: sbx sandbox create / podman run -d = %.2f at p50 (%.2f at "
         "p99); ready in process / podman run -d = %.2f at p50\n",
         cli.p50 / pr.p50, cli.p99 / pr.p99, rd.p50 / pr.p50);
  /* What the state directory keeps once its sandboxes are removed. */
  char left[PATH_MAX + 32];
  (void)snprintf(left, sizeof(left), "%s/sandboxes/.lock", state_dir);
  (void)unlink(left);
  (void)snprintf(left, sizeof(left), "%s/sandboxes", state_dir);
  (void)rmdir(left);
  (void)rmdir(state_dir);
  free(t_cli);
  free(t_exec);
  free(t_pexec);
  free(t_ready);
  free(t_prun);
  free(t_api);
  return 0;
}
