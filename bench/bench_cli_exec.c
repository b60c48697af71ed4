/* `sbx sandbox exec ID -- true` as a process, against its floor and a peer,
 * in the same run.
 *
 *   bench_cli_exec [-n RUNS] [-p PODMAN_RUNS] [-i IMAGE]
 *
 * Makes a developer-owned sandbox (local backend) in a temp state
 * directory with the built sbx (SBX_BIN to use another), then measures, in
 * interleaved rounds (default 40):
 *   cli:    `sbx sandbox --state-dir D exec ID -- true`, a process, stdout
 *           and stderr on /dev/null;
 *   start:  `sbx --version`, a process: what any sbx command pays before
 *           main (the dynamic loader's share is most of it);
 *   fresh:  in this process, what one command needs of sandboxd: a new
 *           client (connection and challenge, as sbx's), /bin/true run by
 *           one waiting ExecStart, its release;
 *   raw:    the same as a process of its own (this program again, --raw),
 *           a small binary: nng's own start (its threads) included;
 *   noop:   this program again (--noop), exiting at once: raw's process
 *           start, so that raw - noop is what one command needs of
 *           sandboxd in a new process;
 *   podman: `podman exec CONTAINER true` on a container of IMAGE (default
 *           localhost/sbx-debian:latest, its entrypoint replaced by sleep)
 *           started for the purpose and removed after (default 20 runs;
 *           -p 0, or no podman, skips it).
 * The floor of sbx exec is sbx's process start plus that round trip:
 * start + fresh (nng's start left out), and start + raw - noop (p50
 * each). Prints p50 and p90 of each and the ratios as Markdown. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

extern char **environ;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_cli_exec: %s: %s\n", what, msg);
  exit(1);
}

/* Runs ARGV (stdout into OUT when not NULL, first line kept; else
 * /dev/null; stderr to /dev/null); its wall time in ns, *STATUS its exit. */
static uint64_t run_cmd(const char *const *argv, char *out, size_t out_size,
                        int *status) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int p[2] = {-1, -1};
  if (out && pipe2(p, O_CLOEXEC) < 0)
    die("pipe", strerror(errno));
  if (out)
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  else
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  uint64_t t0 = bench_now_ns();
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
    out[strcspn(out, "\n")] = '\0';
    close(p[0]);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      die("waitpid", strerror(errno));
  uint64_t ns = bench_now_ns() - t0;
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return ns;
}

/* The floor's process: connects to URL with the token in TOKEN_FILE
 * (sandboxd's pid PID: its socket's peer must be it or its child), runs
 * /bin/true with one waiting ExecStart and exits with its status. */
static int raw_main(const char *url, const char *token_file, const char *pid) {
  _cleanup_free_ char *tok = NULL;
  size_t tl = 0;
  if (sbx_read_file(token_file, 4096, &tok, &tl) < 0)
    return 120;
  while (tl > 0 && (tok[tl - 1] == '\n' || tok[tl - 1] == ' '))
    tl--;
  struct sbx_client_config cfg = {
      .url = url,
      .token = (const uint8_t *)tok,
      .token_len = tl,
      .peer_pid = (pid_t)strtol(pid, NULL, 10),
      .peer_child = true,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  if (sbx_client_new(&cfg, &c, &e) < 0) {
    fprintf(stderr, "raw: %s\n", e.msg);
    return 121;
  }
  static char *argv[] = {"/bin/true", NULL};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  st.no_stdin = true;
  st.wait_ms = 10000;
  uint64_t id = 0;
  int code = 0;
  int r = bench_run_exec(c, &st, &id, &code, NULL);
  (void)sbx_exec_release(c, id, &e);
  sbx_client_free(c);
  return r < 0 ? 122 : code;
}

struct series {
  uint64_t *ns;
  size_t n;
};

static void print_row(const char *label, struct series *s) {
  uint64_t p50 = bench_percentile(s->ns, s->n, 50);
  uint64_t p90 = bench_percentile(s->ns, s->n, 90);
  printf("| %s | %zu | %.2f | %.2f |\n", label, s->n, p50 / 1e6, p90 / 1e6);
}

static double p50_ms(struct series *s) {
  return bench_percentile(s->ns, s->n, 50) / 1e6;
}

/* The sandbox record's local.KEY as text into OUT. */
static void record_field(json_t *rec, const char *key, char *out, size_t n) {
  json_t *v = json_object_get(json_object_get(rec, "local"), key);
  if (json_is_integer(v))
    (void)snprintf(out, n, "%lld", (long long)json_integer_value(v));
  else if (json_is_string(v))
    (void)snprintf(out, n, "%s", json_string_value(v));
  else
    die("the sandbox record has no local field", key);
}

/* What is removed at exit, also after die(). */
static char arg_sbx[PATH_MAX], arg_state[64], arg_id[64], arg_cid[128];

static void cleanup(void) {
  int st;
  if (arg_cid[0]) {
    char out[128];
    run_cmd(
        (const char *const[]){"podman", "rm", "-f", "-t", "0", arg_cid, NULL},
        out, sizeof(out), &st);
  }
  if (arg_id[0])
    run_cmd((const char *const[]){arg_sbx, "sandbox", "--state-dir", arg_state,
                                  "rm", "--force", arg_id, NULL},
            NULL, 0, &st);
  if (arg_state[0])
    (void)bench_rm_rf(arg_state);
}

/* One "fresh" round in this process: a new client for URL with the token
 * TOK (TL bytes), /bin/true by one waiting ExecStart, its release. */
static uint64_t fresh_exec(const char *url, const char *tok, size_t tl,
                           pid_t pid) {
  static char *argv[] = {"/bin/true", NULL};
  uint64_t t0 = bench_now_ns();
  struct sbx_client_config cfg = {.url = url,
                                  .token = (const uint8_t *)tok,
                                  .token_len = tl,
                                  .peer_pid = pid,
                                  .peer_child = true};
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  if (sbx_client_new(&cfg, &c, &e) < 0)
    die("client", e.msg);
  Sbx__V1__ExecStart es = SBX__V1__EXEC_START__INIT;
  es.argv = argv;
  es.n_argv = 1;
  es.no_stdin = true;
  es.wait_ms = 10000;
  uint64_t xid = 0;
  int code = 0;
  if (bench_run_exec(c, &es, &xid, &code, NULL) < 0 || code != 0)
    die("fresh", "ExecStart of /bin/true failed");
  (void)sbx_exec_release(c, xid, &e);
  sbx_client_free(c);
  return bench_now_ns() - t0;
}

/* Creates the sandbox; its socket URL, token and sandboxd's pid. */
static void make_sandbox(char *url, size_t urln, char **tok, size_t *tl,
                         pid_t *pid) {
  (void)snprintf(arg_state, sizeof(arg_state), "/tmp/sbx-bench-cli-XXXXXX");
  if (!mkdtemp(arg_state))
    die("mkdtemp", strerror(errno));
  int st;
  run_cmd((const char *const[]){arg_sbx, "sandbox", "--state-dir", arg_state,
                                "create", NULL},
          arg_id, sizeof(arg_id), &st);
  if (st != 0 || strlen(arg_id) != 12)
    die("sbx sandbox create", "failed");
  char recp[PATH_MAX], tokf[PATH_MAX], pids[32];
  (void)snprintf(recp, sizeof(recp), "%s/sandboxes/%s.json", arg_state, arg_id);
  json_t *rec = json_load_file(recp, 0, NULL);
  if (!rec)
    die(recp, "cannot read the record");
  record_field(rec, "socket", url, urln);
  record_field(rec, "token_file", tokf, sizeof(tokf));
  record_field(rec, "pid", pids, sizeof(pids));
  json_decref(rec);
  if (sbx_read_file(tokf, 4096, tok, tl) < 0)
    die(tokf, "cannot read the token");
  *pid = (pid_t)strtol(pids, NULL, 10);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--raw") == 0)
    return raw_main(argv[2], argv[3], argv[4]);
  if (argc == 2 && strcmp(argv[1], "--noop") == 0)
    return 0;
  size_t runs = 40, pruns = 20;
  const char *image = "localhost/sbx-debian:latest";
  int opt;
  while ((opt = getopt(argc, argv, "n:p:i:")) != -1) {
    if (opt == 'n')
      runs = strtoul(optarg, NULL, 10);
    else if (opt == 'p')
      pruns = strtoul(optarg, NULL, 10);
    else if (opt == 'i')
      image = optarg;
    else
      die("usage", "bench_cli_exec [-n RUNS] [-p PODMAN_RUNS] [-i IMAGE]");
  }
  if (runs < 1 || runs > 100000 || pruns > 100000)
    die("usage", "-n from 1 to 100000, -p at most 100000");
  char self[PATH_MAX];
  if (bench_binary("SBX_BIN", "sbx", arg_sbx, sizeof(arg_sbx)) < 0)
    die("sbx", "cannot find the built sbx");
  ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (sl <= 0)
    die("/proc/self/exe", strerror(errno));
  self[sl] = '\0';
  (void)atexit(cleanup);
  char url[512], pids[32], tokf[PATH_MAX + 32];
  _cleanup_free_ char *tok = NULL;
  size_t tl = 0;
  pid_t pid = 0;
  make_sandbox(url, sizeof(url), &tok, &tl, &pid);
  (void)snprintf(pids, sizeof(pids), "%d", (int)pid);
  (void)snprintf(tokf, sizeof(tokf), "%s/sandboxes/%s.token", arg_state,
                 arg_id);

  int st;
  bool podman = pruns > 0 && system("podman --version >/dev/null 2>&1") == 0;
  if (podman) {
    run_cmd((const char *const[]){"podman", "run", "-d", "--rm", "--entrypoint",
                                  "/bin/sleep", image, "infinity", NULL},
            arg_cid, sizeof(arg_cid), &st);
    if (st != 0 || !arg_cid[0])
      die("podman run", image);
  }

  const char *cli_argv[] = {arg_sbx,   "sandbox", "--state-dir",
                            arg_state, "exec",    arg_id,
                            "--",      "true",    NULL};
  const char *ver_argv[] = {arg_sbx, "--version", NULL};
  const char *raw_argv[] = {self, "--raw", url, tokf, pids, NULL};
  const char *noop_argv[] = {self, "--noop", NULL};
  const char *pod_argv[] = {"podman", "exec", arg_cid, "true", NULL};
  struct series cli = {calloc(runs, 8), 0}, start = {calloc(runs, 8), 0};
  struct series fresh = {calloc(runs, 8), 0}, raw = {calloc(runs, 8), 0};
  struct series noop = {calloc(runs, 8), 0};
  struct series pod = {calloc(pruns ? pruns : 1, 8), 0};
  if (!cli.ns || !start.ns || !fresh.ns || !raw.ns || !noop.ns || !pod.ns)
    die("calloc", "out of memory");
  for (size_t i = 0; i < 3; i++) { /* warm-up, not counted */
    run_cmd(cli_argv, NULL, 0, &st);
    run_cmd(raw_argv, NULL, 0, &st);
    (void)fresh_exec(url, tok, tl, pid);
  }
  size_t every = pruns ? (runs + pruns - 1) / pruns : 0;
  for (size_t i = 0; i < runs; i++) {
    uint64_t ns = run_cmd(cli_argv, NULL, 0, &st);
    if (st != 0)
      die("sbx sandbox exec", "failed");
    cli.ns[cli.n++] = ns;
    ns = run_cmd(ver_argv, NULL, 0, &st);
    if (st != 0)
      die("sbx --version", "failed");
    start.ns[start.n++] = ns;
    fresh.ns[fresh.n++] = fresh_exec(url, tok, tl, pid);
    ns = run_cmd(raw_argv, NULL, 0, &st);
    if (st != 0)
      die("raw", "failed");
    raw.ns[raw.n++] = ns;
    noop.ns[noop.n++] = run_cmd(noop_argv, NULL, 0, &st);
    if (podman && pod.n < pruns && i % every == 0) {
      ns = run_cmd(pod_argv, NULL, 0, &st);
      if (st != 0)
        die("podman exec", "failed");
      pod.ns[pod.n++] = ns;
    }
  }
  while (podman && pod.n < pruns) {
    uint64_t ns = run_cmd(pod_argv, NULL, 0, &st);
    if (st != 0)
      die("podman exec", "failed");
    pod.ns[pod.n++] = ns;
  }

  printf("## `sbx sandbox exec ID -- true` as a process\n\n");
  bench_print_machine(stdout);
  printf("\n| measure | runs | p50 ms | p90 ms |\n|---|---|---|---|\n");
  print_row("`sbx sandbox exec ID -- true` (cli)", &cli);
  print_row("`sbx --version`: sbx's process start (start)", &start);
  print_row("new client, challenge, ExecStart of /bin/true, release, in "
            "process (fresh)",
            &fresh);
  print_row("the same as a small process of its own (raw)", &raw);
  print_row("that small process, exiting at once (noop)", &noop);
  if (pod.n)
    print_row("`podman exec CONTAINER true`", &pod);
  double floor = p50_ms(&start) + p50_ms(&fresh);
  double floor2 = p50_ms(&start) + p50_ms(&raw) - p50_ms(&noop);
  printf("\n- floor start + fresh at p50: %.2f ms; cli / floor: **%.2f×**\n",
         floor, p50_ms(&cli) / floor);
  printf("- floor start + raw - noop at p50: %.2f ms; cli / floor: "
         "**%.2f×**\n",
         floor2, p50_ms(&cli) / floor2);
  if (pod.n)
    printf("- podman exec / sbx exec at p50: **%.1f×**\n",
           p50_ms(&pod) / p50_ms(&cli));
  free(cli.ns);
  free(start.ns);
  free(fresh.ns);
  free(raw.ns);
  free(noop.ns);
  free(pod.ns);
  return 0;
}
