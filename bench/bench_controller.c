/* The controller's overhead per tool round trip, in one run:
 *
 *   run       `sbx run` of a TURNS-turn conversation: the scripted model
 *             server (tests/support/model_server.py) answers every turn with
 *             an exec_command of `true` (login false: `sh -c true`, so that
 *             the sandbox's share, subtracted below, is small and its noise
 *             does not drown the controller's), then with a final text;
 *             timed end to end (the real sbx binary, its own sandboxd, HTTP)
 *   model     the same request bodies (as the server logged them) posted
 *             again to a fresh server with the same script, over one
 *             keep-alive libcurl connection: the model server's share
 *   sandbox   the RPCs exec_command makes, straight to a sandboxd of our
 *             own: an ExecStart of the same command that waits for its
 *             exit, and ExecRelease; plus /bin/true by argv for reference
 *   cpu       the CPU time of sbx's main thread (perf task-clock), which
 *             runs the turn loop: a low-noise figure beside the wall one
 *   fixed     a 1-turn run (final text at once): start-up and tear-down
 *   json      json_dumps of every request body, for reference: what a
 *             client that re-serializes the whole conversation each turn
 *             would spend (sbx serializes each item once)
 *
 * overhead per turn = (run - model - sandbox) / turns, reported with and
 * without the fixed part. Prints Markdown for
 * bench/RESULTS.md. Usage: bench_controller [--turns N] [--runs N]. */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <linux/perf_event.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "bench/bench.h"

extern char **environ;

#define DEFAULT_TURNS 200
#define DEFAULT_RUNS 9
#define MAX_RUNS 15

struct paths {
  char sbx[PATH_MAX];
  char sandboxd[PATH_MAX];
  char server[PATH_MAX + 64];
  char dir[64]; /* our temp dir */
  char agent[128];
};

/* ---- the model server ------------------------------------------------- */

struct model_server {
  pid_t pid;
  char script[128];
  char log[128];
  char base_url[64];
};

static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  int err = errno;
  (void)close(fd);
  return w == (ssize_t)n ? 0 : -(w < 0 ? err : EIO);
}

static void server_stop(struct model_server *s) {
  if (s->pid > 0) {
    (void)kill(s->pid, SIGTERM);
    int status;
    (void)waitpid(s->pid, &status, 0);
    s->pid = 0;
  }
  (void)unlink(s->script);
  (void)unlink(s->log);
}

/* Starts model_server.py on SCRIPT_TEXT; files go to DIR/NAME.*. */
static int server_start(struct model_server *s, const struct paths *p,
                        const char *name, const char *script_text) {
  memset(s, 0, sizeof(*s));
  (void)snprintf(s->script, sizeof(s->script), "%s/%s.json", p->dir, name);
  (void)snprintf(s->log, sizeof(s->log), "%s/%s.jsonl", p->dir, name);
  int r = write_text(s->script, script_text);
  if (r < 0 || (r = write_text(s->log, "")) < 0)
    return r;
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  char *argv[] = {"python3", (char *)p->server, s->script, s->log, NULL};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
        dup2(out[1], 1) < 0)
      _exit(127);
    execvp(argv[0], argv);
    _exit(127);
  }
  (void)close(out[1]);
  if (pid < 0) {
    (void)close(out[0]);
    return -errno;
  }
  s->pid = pid;
  char line[64] = {0};
  size_t got = 0;
  while (got < sizeof(line) - 1 && !memchr(line, '\n', got)) {
    struct pollfd pfd = {.fd = out[0], .events = POLLIN};
    if (poll(&pfd, 1, 20000) <= 0)
      break;
    ssize_t n = read(out[0], line + got, sizeof(line) - 1 - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  (void)close(out[0]);
  int port = 0;
  if (sscanf(line, "listening %d", &port) != 1 || port <= 0) {
    (void)fprintf(stderr, "bench: model server did not start: \"%s\"\n", line);
    server_stop(s);
    return -EIO;
  }
  (void)snprintf(s->base_url, sizeof(s->base_url), "http://127.0.0.1:%d/v1",
                 port);
  return 0;
}

/* The script: TURNS exec_command calls of `true`, then a final text. */
static char *make_script(unsigned turns) {
  json_t *steps = json_array();
  if (turns > 0)
    json_array_append_new(steps, json_pack("{s:[{s:s, s:{s:s, s:b}}], s:I}",
                                           "tool_calls", "name", "exec_command",
                                           "arguments", "cmd", "true", "login",
                                           0, "repeat", (json_int_t)turns));
  json_array_append_new(steps, json_pack("{s:s}", "text", "done"));
  char *s = json_dumps(steps, JSON_COMPACT);
  json_decref(steps);
  return s;
}

/* ---- sbx run ---------------------------------------------------------- */

/* A task-clock counter for PID's main thread alone (not its other threads
 * or children), enabled when it execs; -1 where perf events are not
 * allowed. */
static int main_thread_clock(pid_t pid) {
  struct perf_event_attr a = {
      .type = PERF_TYPE_SOFTWARE,
      .size = sizeof(a),
      .config = PERF_COUNT_SW_TASK_CLOCK,
      .disabled = 1,
      .enable_on_exec = 1,
      .exclude_hv = 1,
  };
  return (int)syscall(SYS_perf_event_open, &a, pid, -1, -1,
                      PERF_FLAG_FD_CLOEXEC);
}

/* Runs `sbx run AGENT go` against BASE_URL; *NS is its wall time, *CPU_NS
 * the CPU time of its main thread (the turn loop), 0 when unknown. */
static int run_sbx(const struct paths *p, const char *base_url, unsigned turns,
                   uint64_t *ns, uint64_t *cpu_ns) {
  char url_env[128], turns_arg[16];
  (void)snprintf(url_env, sizeof(url_env), "OPENAI_BASE_URL=%s", base_url);
  (void)snprintf(turns_arg, sizeof(turns_arg), "%u", turns + 1);
  char sandboxd_env[PATH_MAX + 16], state_env[96];
  (void)snprintf(sandboxd_env, sizeof(sandboxd_env), "SBX_SANDBOXD=%s",
                 p->sandboxd);
  /* sbx keeps its run state under XDG_STATE_HOME: ours, removed at the
   * end. */
  (void)snprintf(state_env, sizeof(state_env), "XDG_STATE_HOME=%s/state",
                 p->dir);
  char *envp[] = {url_env,
                  "OPENAI_API_KEY=bench-key",
                  sandboxd_env,
                  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin",
                  "TMPDIR=/tmp",
                  state_env,
                  NULL};
  char *argv[] = {(char *)p->sbx,   "run",       "--max-turns", turns_arg,
                  (char *)p->agent, "Run true.", NULL};
  int out[2], gate[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  if (pipe2(gate, O_CLOEXEC) < 0) {
    int err = errno;
    (void)close(out[0]);
    (void)close(out[1]);
    return -err;
  }
  /* The child waits at the gate until its counter exists. */
  pid_t pid = fork();
  if (pid == 0) {
    char go;
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || dup2(in, 0) < 0 || dup2(out[1], 1) < 0 ||
        read(gate[0], &go, 1) != 1)
      _exit(127);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  int err = errno;
  (void)close(out[1]);
  (void)close(gate[0]);
  if (pid < 0) {
    (void)close(out[0]);
    (void)close(gate[1]);
    return -err;
  }
  int clock_fd = main_thread_clock(pid);
  uint64_t t0 = bench_now_ns();
  ssize_t w = write(gate[1], "x", 1);
  (void)close(gate[1]);
  (void)w; /* a child that did not get it exits 127, reported below */
  char buf[4096];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(out[0], buf + got, sizeof(buf) - 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
    if (got == sizeof(buf) - 1)
      got = 0; /* only the end matters */
  }
  buf[got] = '\0';
  (void)close(out[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -errno;
  *ns = bench_now_ns() - t0;
  *cpu_ns = 0;
  if (clock_fd >= 0) {
    uint64_t v = 0;
    if (read(clock_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
      *cpu_ns = v;
    (void)close(clock_fd);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      strcmp(buf, "done\n") != 0) {
    (void)fprintf(stderr, "bench: sbx run failed (status %d): \"%s\"\n", status,
                  buf);
    return -EIO;
  }
  return 0;
}

/* ---- the model's share ------------------------------------------------ */

/* The request bodies the server logged, in order (new). */
static json_t *logged_bodies(const char *log) {
  json_error_t je;
  FILE *f = fopen(log, "re");
  if (!f)
    return NULL;
  json_t *bodies = json_array();
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    json_t *j = json_loads(line, 0, &je);
    json_t *b = j ? json_object_get(j, "body") : NULL;
    if (b)
      json_array_append(bodies, b);
    json_decref(j);
  }
  free(line);
  (void)fclose(f);
  return bodies;
}

static size_t discard(char *ptr, size_t size, size_t n, void *arg) {
  (void)ptr;
  *(size_t *)arg += size * n;
  return size * n;
}

/* Posts every body (compact JSON) to a fresh server with the same script,
 * over one connection; *NS is the sum of the round trips. */
static int replay_model(const struct paths *p, const char *script,
                        json_t *bodies, uint64_t *ns) {
  struct model_server s;
  int r = server_start(&s, p, "replay", script);
  if (r < 0)
    return r;
  char url[128];
  (void)snprintf(url, sizeof(url), "%s/responses", s.base_url);
  CURL *c = curl_easy_init();
  struct curl_slist *h = NULL;
  h = curl_slist_append(h, "Content-Type: application/json");
  h = curl_slist_append(h, "Authorization: Bearer bench-key");
  if (!c || !h) {
    r = -ENOMEM;
    goto out;
  }
  size_t received = 0;
  (void)curl_easy_setopt(c, CURLOPT_URL, url);
  (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
  (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, &received);
  *ns = 0;
  size_t i;
  json_t *b;
  json_array_foreach(bodies, i, b) {
    char *text = json_dumps(b, JSON_COMPACT);
    if (!text) {
      r = -ENOMEM;
      goto out;
    }
    (void)curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    uint64_t t0 = bench_now_ns();
    CURLcode cc = curl_easy_perform(c);
    *ns += bench_now_ns() - t0;
    free(text);
    long code = 0;
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK || code != 200) {
      (void)fprintf(stderr, "bench: replay %zu: %s, HTTP %ld\n", i,
                    curl_easy_strerror(cc), code);
      r = -EIO;
      goto out;
    }
  }
  r = 0;
out:
  curl_slist_free_all(h);
  if (c)
    curl_easy_cleanup(c);
  server_stop(&s);
  return r;
}

/* What re-serializing the conversation costs: json_dumps of every body. */
static uint64_t serialize_ns(json_t *bodies, size_t *bytes) {
  uint64_t total = 0;
  *bytes = 0;
  size_t i;
  json_t *b;
  json_array_foreach(bodies, i, b) {
    uint64_t t0 = bench_now_ns();
    char *text = json_dumps(b, JSON_COMPACT);
    total += bench_now_ns() - t0;
    *bytes += text ? strlen(text) : 0;
    free(text);
  }
  return total;
}

/* ---- the sandbox's share ---------------------------------------------- */

/* exec_command's RPCs for CMD through `sh -c` (an ExecStart that waits for
 * the exit and brings the output, ExecReads if it has not, ExecRelease), or
 * ARGV0 by argv. */
static int sandbox_call(struct sbx_client *c, const char *cmd,
                        const char *argv0) {
  struct sbx_error e = {0};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {(char *)argv0};
  if (cmd) {
    st.command = (char *)cmd; /* login false: sh -c */
    st.stderr_to_stdout = true;
  } else {
    st.argv = argv;
    st.n_argv = 1;
  }
  st.wait_ms = 10000;
  st.max_bytes = 1u << 20;
  uint64_t id;
  int code;
  int ret = bench_run_exec(c, &st, &id, &code, NULL);
  if (ret < 0)
    return ret;
  if (cmd && (ret = sbx_exec_release(c, id, &e)) < 0)
    (void)fprintf(stderr, "bench: exec release: %s\n", e.msg);
  return ret;
}

/* N rounds of each; *SHELL_NS and *TRUE_NS are the sums. */
static int sandbox_share(struct sbx_client *c, unsigned n, uint64_t *shell_ns,
                         uint64_t *true_ns) {
  int r;
  for (unsigned i = 0; i < 20; i++) /* warm-up */
    if ((r = sandbox_call(c, "true", NULL)) < 0)
      return r;
  *shell_ns = *true_ns = 0;
  for (unsigned i = 0; i < n; i++) {
    uint64_t t0 = bench_now_ns();
    if ((r = sandbox_call(c, "true", NULL)) < 0)
      return r;
    uint64_t t1 = bench_now_ns();
    if ((r = sandbox_call(c, NULL, "/bin/true")) < 0)
      return r;
    *shell_ns += t1 - t0;
    *true_ns += bench_now_ns() - t1;
  }
  return 0;
}

/* ---- main -------------------------------------------------------------- */

struct round {
  double run, fixed, model, model1, shell, btrue, json; /* ms */
  double over, marg; /* overhead per turn: all in; start-up excluded */
  double cpu, cpu1;  /* CPU ms of sbx's main thread: the run; 1 turn */
};

static int one_round(const struct paths *p, unsigned turns,
                     struct bench_daemon *d, struct round *o,
                     size_t *json_bytes) {
  char *script = make_script(turns);
  char *script1 = make_script(0);
  json_t *bodies = NULL, *bodies1 = NULL;
  struct model_server s;
  int r = -ENOMEM;
  if (!script || !script1)
    goto out;
  uint64_t run_ns = 0, fixed_ns = 0, model_ns = 0, model1_ns = 0;
  uint64_t cpu_ns = 0, cpu1_ns = 0;
  uint64_t shell_ns = 0, true_ns = 0;
  /* The full run, then what its bodies cost the server alone. */
  if ((r = server_start(&s, p, "run", script)) < 0)
    goto out;
  r = run_sbx(p, s.base_url, turns, &run_ns, &cpu_ns);
  bodies = r == 0 ? logged_bodies(s.log) : NULL;
  server_stop(&s);
  if (r < 0)
    goto out;
  if (!bodies || json_array_size(bodies) != turns + 1) {
    (void)fprintf(stderr, "bench: the server logged %zu requests, not %u\n",
                  bodies ? json_array_size(bodies) : 0, turns + 1);
    r = -EIO;
    goto out;
  }
  if ((r = replay_model(p, script, bodies, &model_ns)) < 0)
    goto out;
  /* The 1-turn run: start-up and tear-down. */
  if ((r = server_start(&s, p, "fixed", script1)) < 0)
    goto out;
  r = run_sbx(p, s.base_url, 0, &fixed_ns, &cpu1_ns);
  bodies1 = r == 0 ? logged_bodies(s.log) : NULL;
  server_stop(&s);
  if (r < 0 || !bodies1 ||
      (r = replay_model(p, script1, bodies1, &model1_ns)) < 0)
    goto out;
  if ((r = sandbox_share(d->client, turns, &shell_ns, &true_ns)) < 0)
    goto out;
  o->run = (double)run_ns / 1e6;
  o->fixed = (double)fixed_ns / 1e6;
  o->model = (double)model_ns / 1e6;
  o->model1 = (double)model1_ns / 1e6;
  o->shell = (double)shell_ns / 1e6;
  o->btrue = (double)true_ns / 1e6;
  o->json = (double)serialize_ns(bodies, json_bytes) / 1e6;
  o->cpu = (double)cpu_ns / 1e6;
  o->cpu1 = (double)cpu1_ns / 1e6;
  /* Each round's own figures, taken close together, go into its
   * overhead: the median of these is steadier than a difference of
   * medians. */
  o->over = (o->run - o->model - o->shell) / turns;
  o->marg = ((o->run - o->fixed) - (o->model - o->model1) - o->shell) / turns;
  r = 0;
out:
  json_decref(bodies);
  json_decref(bodies1);
  free(script);
  free(script1);
  return r;
}

static double med(struct round *rs, unsigned n, size_t off) {
  double v[MAX_RUNS];
  for (unsigned i = 0; i < n; i++)
    v[i] = *(double *)((char *)&rs[i] + off);
  return bench_median(v, n);
}

static int setup(struct paths *p) {
  char src[PATH_MAX];
  if (bench_binary("SBX_BIN", "sbx", p->sbx, sizeof(p->sbx)) < 0 ||
      bench_binary("SBX_SANDBOXD", "sandboxd", p->sandboxd,
                   sizeof(p->sandboxd)) < 0 ||
      bench_source_dir(__FILE__, src, sizeof(src)) < 0)
    return -ENOENT;
  (void)snprintf(p->server, sizeof(p->server),
                 "%s/tests/support/model_server.py", src);
  (void)snprintf(p->dir, sizeof(p->dir), "/tmp/sbx-bench-ctl-XXXXXX");
  if (!mkdtemp(p->dir)) {
    p->dir[0] = '\0';
    return -errno;
  }
  (void)snprintf(p->agent, sizeof(p->agent), "%s/agent.json", p->dir);
  return write_text(p->agent,
                    "{\"name\": \"Bench\", \"model\": \"bench-model\",\n"
                    " \"instructions\": \"Run what you are asked to.\"}\n");
}

int main(int argc, char **argv) {
  unsigned turns = DEFAULT_TURNS, runs = DEFAULT_RUNS;
  static const struct option lopts[] = {{"turns", required_argument, NULL, 't'},
                                        {"runs", required_argument, NULL, 'r'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
    char *end = NULL;
    unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;
    bool ok = optarg && *optarg && end && !*end;
    if (ch == 't' && ok && v >= 1 && v <= 10000) {
      turns = (unsigned)v;
    } else if (ch == 'r' && ok && v >= 1 && v <= MAX_RUNS) {
      runs = (unsigned)v;
    } else {
      (void)fprintf(stderr,
                    "usage: bench_controller [--turns 1..10000] [--runs "
                    "1..%d]\n",
                    MAX_RUNS);
      return ch == 'h' ? 0 : 2;
    }
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return 1;
  struct paths p = {0};
  struct bench_daemon d = {0};
  int rc = 1;
  if (setup(&p) < 0) {
    (void)fprintf(stderr, "bench: cannot set up (%s)\n", p.dir);
    goto out;
  }
  printf("## bench_controller\n\n");
  bench_print_machine(stdout);
  printf("- sbx: %s\n- sandboxd: %s\n- model server: %s\n", p.sbx, p.sandboxd,
         p.server);
  if (bench_daemon_start(&d, p.sandboxd, NULL) < 0)
    goto out;
  struct round rs[MAX_RUNS];
  size_t json_bytes = 0;
  printf("\nper run (ms): run, model, sandbox, 1-turn run, its model call, "
         "main-thread CPU\n");
  for (unsigned i = 0; i < runs; i++) {
    if (one_round(&p, turns, &d, &rs[i], &json_bytes) < 0)
      goto out;
    printf("- %.1f, %.1f, %.1f, %.1f, %.1f, %.1f\n", rs[i].run, rs[i].model,
           rs[i].shell, rs[i].fixed, rs[i].model1, rs[i].cpu);
    (void)fflush(stdout);
  }

#define M(field) med(rs, runs, offsetof(struct round, field))
  double run = M(run), fixed = M(fixed), model = M(model), model1 = M(model1),
         shell = M(shell), btrue = M(btrue), json = M(json);
  double over = M(over), over_marg = M(marg), cpu = M(cpu), cpu1 = M(cpu1);
  printf("\n### %u turns of exec_command `true` with login false (median of "
         "%u runs; ms)\n\n",
         turns, runs);
  printf("| | total ms | per turn ms |\n|---|---:|---:|\n");
  printf("| `sbx run`, end to end (%u model calls) | %.1f | %.3f |\n",
         turns + 1, run, run / turns);
  printf("| model server alone: the same %u bodies replayed over one "
         "connection | %.1f | %.3f |\n",
         turns + 1, model, model / turns);
  printf("| sandboxd alone: exec_command's RPCs for `sh -c true` "
         "(ExecStart waiting for the exit, ExecRelease) | %.1f | %.3f |\n",
         shell, shell / turns);
  printf("| (reference) sandboxd alone: /bin/true by argv, as "
         "bench_sandboxd | %.1f | %.3f |\n",
         btrue, btrue / turns);
  printf("| 1-turn `sbx run` (start-up, sandbox set-up and tear-down) | %.1f "
         "| |\n",
         fixed);
  printf("| (its one model call) | %.1f | |\n", model1);
  printf("| (reference) json_dumps of every whole request body (%.1f MiB "
         "in all), which sbx no longer does | %.1f | %.3f |\n",
         (double)json_bytes / (1024.0 * 1024.0), json, json / turns);
  if (cpu > 0)
    printf("| CPU time of sbx's main thread (the turn loop), minus the "
           "1-turn run's (%.1f ms) | %.1f | %.3f |\n",
           cpu1, cpu - cpu1, (cpu - cpu1) / turns);
  printf("\ncontroller overhead per turn = (run - model - sandbox) / turns, "
         "computed per run, median of %u:\n"
         "- all in (start-up included): %.3f ms (runs:",
         runs, over);
  for (unsigned i = 0; i < runs; i++)
    printf(" %.3f", rs[i].over);
  printf(")\n- start-up excluded ((run - fixed) - (model - its one call) - "
         "sandbox) / turns: %.3f ms (runs:",
         over_marg);
  for (unsigned i = 0; i < runs; i++)
    printf(" %.3f", rs[i].marg);
  printf(")\n");
  printf("\ntarget: under 1 ms of controller overhead per turn (all in): "
         "%s\n",
         over < 1.0 ? "met" : "NOT met");
  rc = 0;
out:
  (void)bench_daemon_stop(&d);
  if (p.dir[0]) {
    (void)unlink(p.agent);
    (void)bench_rm_rf(p.dir);
  }
  curl_global_cleanup();
  return rc;
}
