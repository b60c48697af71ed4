/* A process in a sandbox of `sbx serve`'s API (docs/api.md, "Sandboxes")
 * against the same work through the client library, in one run and on one
 * sandbox (POST /v1/sandboxes {}: the local backend's defaults):
 *
 *   exec     EXECS round trips of /bin/true, interleaved in blocks:
 *            - API: POST .../execs {"cmd": ["/bin/true"]}, then GET
 *              .../output?wait_ms until Sbx-Eof is true and Sbx-Exit-Code
 *              is there, over one kept-alive connection
 *            - library: one ExecStart with wait_ms (plus ExecRead until
 *              the exit when the start's reply has not got it), the way
 *              the exec_command tool runs a command, on a client attached
 *              to the sandbox from its record as `sbx sandbox` attaches
 *            - posix_spawn + waitpid of /bin/true here, on the host
 *            and to see where the API's time goes: the library making the
 *            server's own calls (an ExecStart that answers at once, then
 *            ExecRead with wait_ms until eof and the exit), the same
 *            attaching to the sandbox afresh for every call as the server
 *            does for every request, that attaching alone (with the
 *            Hello a new connection starts with), and GET /healthz
 *   output   BIG times `head -c 1048576 /dev/zero`: its output through
 *            the output endpoint (GET from Sbx-Next-Offset until eof)
 *            against the library's ExecStart + ExecRead loop, and read(2)
 *            of a pipe here for scale; from the start to the last byte
 *
 * Executions are not released (the API cannot release one); sandboxd prunes
 * finished ones alike for both sides. Prints Markdown for bench/RESULTS.md.
 * Usage: bench_server_exec [--execs N] [--big N]. */
#include <getopt.h>
#include <inttypes.h>
#include <spawn.h>

#include "bench/serve.h"
#include "controller/sandbox/lifecycle.h"

#define DEFAULT_EXECS 500
#define DEFAULT_BIG 20
#define WARMUP 20
#define BIG_WARMUP 2
#define BLOCK 50
#define WAIT_MS 10000
#define BIG_BYTES 1048576
#define BIG_COUNT "1048576"

struct ctx {
  char sbx[PATH_MAX], sandboxd[PATH_MAX];
  char dir[64]; /* ours, removed at the end */
  char env_sandboxd[PATH_MAX + 16], env_tmp[96], env_state[96];
  char *envp[8]; /* for sbx serve */
  unsigned execs, big;
};

/* What the measured sides share: the API's client, the sandbox, and a
 * client of its sandboxd attached from the record. */
struct env {
  struct bench_http *h;
  const char *state; /* the server's state directory */
  char sid[32];      /* the sandbox */
  struct sbx_client *c;
};

/* One execution, however it was made. */
struct exec_out {
  uint64_t ns, bytes, gap;
  unsigned calls; /* HTTP requests or RPCs */
  int code;
};

/* ---- through the API ---------------------------------------------------- */

/* Response header NAME of H's last reply as a number, or DEF. */
static uint64_t header_u64(struct bench_http *h, const char *name,
                           uint64_t def) {
  struct curl_header *x = NULL;
  if (curl_easy_header(h->c, name, 0, CURLH_HEADER, -1, &x) != CURLHE_OK)
    return def;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(x->value, &end, 10);
  return errno || end == x->value ? def : (uint64_t)v;
}

static bool header_is(struct bench_http *h, const char *name, const char *v) {
  struct curl_header *x = NULL;
  return curl_easy_header(h->c, name, 0, CURLH_HEADER, -1, &x) == CURLHE_OK &&
         strcmp(x->value, v) == 0;
}

/* POST /v1/sandboxes {}: its id into V->sid. */
static int api_sandbox_create(struct env *v, double *ms) {
  long status = 0;
  json_t *reply = NULL;
  uint64_t t0 = bench_now_ns();
  int r = bench_http_do(v->h, "POST", "/v1/sandboxes", "{}", &status, &reply);
  *ms = (double)(bench_now_ns() - t0) / 1e6;
  const char *id = json_string_value(json_object_get(reply, "id"));
  if (r == 0 && (status != 201 || !id)) {
    (void)fprintf(stderr, "bench: POST /v1/sandboxes: %ld %.300s\n", status,
                  v->h->body.data);
    r = -EIO;
  }
  if (r == 0)
    (void)snprintf(v->sid, sizeof(v->sid), "%s", id);
  json_decref(reply);
  return r;
}

static void api_sandbox_delete(struct env *v) {
  char path[96];
  long status = 0;
  (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s", v->sid);
  if (bench_http_do(v->h, "DELETE", path, NULL, &status, NULL) < 0 ||
      status != 204)
    (void)fprintf(stderr, "bench: DELETE %s: %ld\n", path, status);
}

/* An exec of BODY through the API, its output read to the end. */
static int api_exec(struct env *v, const char *body, struct exec_out *o) {
  char path[192], eid[32];
  long status = 0;
  json_t *reply = NULL;
  *o = (struct exec_out){0};
  uint64_t t0 = bench_now_ns();
  (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s/execs", v->sid);
  int r = bench_http_do(v->h, "POST", path, body, &status, &reply);
  const char *id = json_string_value(json_object_get(reply, "exec_id"));
  if (r == 0 && (status != 201 || !id)) {
    (void)fprintf(stderr, "bench: POST %s: %ld %.300s\n", path, status,
                  v->h->body.data);
    r = -EIO;
  }
  if (r == 0)
    (void)snprintf(eid, sizeof(eid), "%s", id);
  json_decref(reply);
  o->calls = 1;
  uint64_t off = 0;
  for (bool done = false; r == 0 && !done;) {
    (void)snprintf(
        path, sizeof(path),
        "/v1/sandboxes/%s/execs/%s/output?stream=stdout&offset=%" PRIu64
        "&wait_ms=%d",
        v->sid, eid, off, WAIT_MS);
    r = bench_http_do(v->h, "GET", path, NULL, &status, NULL);
    if (r == 0 && status != 200) {
      (void)fprintf(stderr, "bench: GET %s: %ld %.300s\n", path, status,
                    v->h->body.data);
      r = -EIO;
    }
    if (r < 0)
      break;
    o->calls++;
    o->bytes += v->h->body.len;
    o->gap += header_u64(v->h, "Sbx-Gap", 0);
    off = header_u64(v->h, "Sbx-Next-Offset", off);
    uint64_t code = header_u64(v->h, "Sbx-Exit-Code", UINT64_MAX);
    done = header_is(v->h, "Sbx-Eof", "true") && code != UINT64_MAX;
    o->code = (int)code;
  }
  o->ns = bench_now_ns() - t0;
  return r;
}

static int api_true(struct env *v, struct exec_out *o) {
  return api_exec(v, "{\"cmd\":[\"/bin/true\"]}", o);
}

static int api_big(struct env *v, struct exec_out *o) {
  return api_exec(
      v, "{\"cmd\":[\"head\",\"-c\",\"" BIG_COUNT "\",\"/dev/zero\"]}", o);
}

static int api_health(struct env *v, struct exec_out *o) {
  long status = 0;
  uint64_t t0 = bench_now_ns();
  int r = bench_http_do(v->h, "GET", "/healthz", NULL, &status, NULL);
  *o = (struct exec_out){.ns = bench_now_ns() - t0, .calls = 1};
  if (r == 0 && status != 200) {
    (void)fprintf(stderr, "bench: GET /healthz: %ld\n", status);
    r = -EIO;
  }
  return r;
}

/* ---- through the library ------------------------------------------------ */

/* The sandbox SID's sandboxd, attached from its record in STATE as `sbx
 * sandbox` attaches (controller/cli/sandbox.c's cli_attach). */
static int attach(const char *state, const char *sid,
                  struct lifecycle_record *rec, struct sandbox **sb) {
  struct sbx_error e = {0};
  struct backend_options bo = {0};
  *sb = NULL;
  int r = lifecycle_load(state, sid, rec, &e);
  if (r == 0 && (r = lifecycle_attach(rec, &bo, sb, &e)) < 0)
    lifecycle_record_clear(rec);
  if (r == 0 && !(*sb)->client) {
    (*sb)->backend->detach(*sb);
    *sb = NULL;
    lifecycle_record_clear(rec);
    r = sbx_error_set(&e, SBX_UNAVAILABLE, ESRCH, "sandbox %s is stopped", sid);
  }
  if (r < 0)
    (void)fprintf(stderr, "bench: attaching to %s: %s\n", sid, e.msg);
  return r;
}

static void detach(struct lifecycle_record *rec, struct sandbox *sb) {
  if (sb)
    sb->backend->detach(sb);
  lifecycle_record_clear(rec);
}

/* What one ExecStart or ExecRead reply X says, into O; DONE once the
 * output is read to its end and the process has exited. */
static void absorb(const Sbx__V1__ExecReadReply *x, uint64_t *off,
                   struct exec_out *o, bool *done) {
  o->bytes += x->data.len;
  o->gap += x->gap;
  o->code = x->exit_code;
  *off = x->next_offset;
  *done = x->eof && x->exited;
}

/* ARGV (N strings) through sandboxd. WAIT: one ExecStart with wait_ms,
 * then ExecRead until_exit if its reply had not got the exit (the
 * exec_command tool's way); else the server's: an ExecStart that answers
 * at once, then ExecReads with wait_ms until eof and the exit. ATTACH
 * (the sandbox's state dir; NULL: V's client) attaches afresh for every
 * call, as the server does for every request. */
static int lib_exec(struct env *v, char **argv, size_t n, bool wait,
                    const char *attach_from, struct exec_out *o) {
  struct sbx_error e = {0};
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  Sbx__V1__Response *resp = NULL;
  *o = (struct exec_out){0};
  uint64_t t0 = bench_now_ns();
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = n;
  st.wait_ms = wait ? WAIT_MS : 0;
  int r = attach_from ? attach(attach_from, v->sid, &rec, &sb) : 0;
  if (r == 0)
    r = sbx_exec_start(sb ? sb->client : v->c, &st, &resp, &e);
  if (attach_from && sb)
    detach(&rec, sb);
  if (r < 0) {
    (void)fprintf(stderr, "bench: ExecStart: %s\n", e.msg);
    return r;
  }
  o->calls = 1;
  uint64_t id = resp->exec_start->exec_id, off = 0;
  bool done = false;
  if (resp->exec_start->output)
    absorb(resp->exec_start->output, &off, o, &done);
  sbx_client_reply_free(resp);
  while (!done) {
    sb = NULL;
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = id;
    rd.stream = SBX__V1__STREAM__STDOUT;
    rd.offset = off;
    rd.wait_ms = WAIT_MS;
    rd.until_exit = wait;
    r = attach_from ? attach(attach_from, v->sid, &rec, &sb) : 0;
    if (r == 0)
      r = sbx_exec_read(sb ? sb->client : v->c, &rd, &resp, &e);
    if (attach_from && sb)
      detach(&rec, sb);
    if (r < 0) {
      (void)fprintf(stderr, "bench: ExecRead: %s\n", e.msg);
      return r;
    }
    o->calls++;
    absorb(resp->exec_read, &off, o, &done);
    sbx_client_reply_free(resp);
  }
  o->ns = bench_now_ns() - t0;
  return 0;
}

static char *true_argv[] = {"/bin/true", NULL};
static char *big_argv[] = {"head", "-c", BIG_COUNT, "/dev/zero", NULL};

static int lib_true(struct env *v, struct exec_out *o) {
  return lib_exec(v, true_argv, 1, true, NULL, o);
}

static int lib_true_server_calls(struct env *v, struct exec_out *o) {
  return lib_exec(v, true_argv, 1, false, NULL, o);
}

static int lib_true_attached(struct env *v, struct exec_out *o) {
  return lib_exec(v, true_argv, 1, false, v->state, o);
}

static int lib_big(struct env *v, struct exec_out *o) {
  return lib_exec(v, big_argv, 4, false, NULL, o);
}

/* What the server does before every call: attach to the sandbox from its
 * record (a new client), one Hello (the new connection's challenge), and
 * detach again. */
static int lib_attach_hello(struct env *v, struct exec_out *o) {
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  uint64_t t0 = bench_now_ns();
  int r = attach(v->state, v->sid, &rec, &sb);
  if (r == 0 && (r = sbx_hello(sb->client, NULL, &e)) < 0)
    (void)fprintf(stderr, "bench: Hello: %s\n", e.msg);
  if (sb)
    detach(&rec, sb);
  *o = (struct exec_out){.ns = bench_now_ns() - t0, .calls = 1};
  return r;
}

/* ---- here, on the host -------------------------------------------------- */

static int host_true(struct env *v, struct exec_out *o) {
  (void)v;
  *o = (struct exec_out){.calls = 1};
  return bench_spawn_true(&o->ns);
}

/* big_argv's output read from a pipe with read(2), to EOF and the exit. */
static int host_big(struct env *v, struct exec_out *o) {
  (void)v;
  *o = (struct exec_out){0};
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  uint64_t t0 = bench_now_ns();
  pid_t pid;
  int r = posix_spawnp(&pid, "head", &fa, NULL, big_argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  (void)close(p[1]);
  char buf[65536];
  for (ssize_t n; r == 0;) {
    n = read(p[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    o->bytes += (uint64_t)n;
    o->calls++;
  }
  (void)close(p[0]);
  int status = 0;
  if (r == 0)
    (void)waitpid(pid, &status, 0);
  o->ns = bench_now_ns() - t0;
  o->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return -r;
}

/* ---- the sides ---------------------------------------------------------- */

typedef int (*side_fn)(struct env *v, struct exec_out *o);

struct side {
  const char *name;
  side_fn fn;
  uint64_t bytes; /* what it must receive */
  bool exec;      /* an execution: its exit code must be 0 */
};

static const struct side exec_sides[] = {
    {"`sbx serve`: POST .../execs, GET .../output?wait_ms until Sbx-Eof "
     "and Sbx-Exit-Code",
     api_true, 0, true},
    {"library: one ExecStart with wait_ms (as exec_command runs a command)",
     lib_true, 0, true},
    {"posix_spawn + waitpid on the host", host_true, 0, true},
    {"library, the server's calls: ExecStart, then ExecRead with wait_ms",
     lib_true_server_calls, 0, true},
    {"library, the server's calls, attaching to the sandbox for each (as "
     "the server does per request)",
     lib_true_attached, 0, true},
    {"(reference) attach to the sandbox from its record, one Hello, "
     "detach",
     lib_attach_hello, 0, false},
    {"(reference) GET /healthz", api_health, 0, false},
};
#define N_EXEC (sizeof(exec_sides) / sizeof(exec_sides[0]))

static const struct side big_sides[] = {
    {"`sbx serve`: POST .../execs, GET .../output from Sbx-Next-Offset "
     "until eof",
     api_big, BIG_BYTES, true},
    {"library: ExecStart, then ExecRead with wait_ms until eof", lib_big,
     BIG_BYTES, true},
    {"(scale) read(2) of a pipe on the host", host_big, BIG_BYTES, true},
};
#define N_BIG (sizeof(big_sides) / sizeof(big_sides[0]))

/* One call of side S into O, checked. */
static int side_run(const struct side *s, struct env *v, struct exec_out *o) {
  int r = s->fn(v, o);
  if (r == 0 && s->exec && (o->code != 0 || o->bytes != s->bytes)) {
    (void)fprintf(stderr,
                  "bench: %s: exit code %d, %" PRIu64 " bytes of %" PRIu64
                  " (%" PRIu64 " lost to gaps)\n",
                  s->name, o->code, o->bytes, s->bytes, o->gap);
    r = -EIO;
  }
  return r;
}

/* The figures of one side. */
struct stats {
  uint64_t *ns;
  double mean_ms, calls_mean;
  unsigned calls_max;
};

/* N calls of each of the K sides, in blocks of PER, after WARM of each. */
static int run_sides(const struct side *sides, size_t k, struct env *v,
                     unsigned n, unsigned per, unsigned warm,
                     struct stats *st) {
  struct exec_out o;
  for (unsigned i = 0; i < warm; i++)
    for (size_t s = 0; s < k; s++) {
      int r = side_run(&sides[s], v, &o);
      if (r < 0)
        return r;
    }
  for (unsigned done = 0; done < n; done += per) {
    unsigned m = n - done < per ? n - done : per;
    for (size_t s = 0; s < k; s++)
      for (unsigned i = 0; i < m; i++) {
        int r = side_run(&sides[s], v, &o);
        if (r < 0)
          return r;
        st[s].ns[done + i] = o.ns;
        st[s].mean_ms += (double)o.ns / 1e6 / n;
        st[s].calls_mean += (double)o.calls / n;
        if (o.calls > st[s].calls_max)
          st[s].calls_max = o.calls;
      }
  }
  return 0;
}

static double pct_ms(struct stats *s, unsigned n, double p) {
  return (double)bench_percentile(s->ns, n, p) / 1e6;
}

static void exec_print(struct stats *st, unsigned n) {
  printf("\n### exec round trip of /bin/true (%u of each, interleaved in "
         "blocks of %u, after %u warm-up runs)\n\n",
         n, BLOCK, WARMUP);
  printf("| | p50 ms | p90 ms | p99 ms | mean ms | requests or RPCs per exec "
         "(mean / max) |\n|---|---:|---:|---:|---:|---:|\n");
  double p50[N_EXEC], p99[N_EXEC];
  for (size_t s = 0; s < N_EXEC; s++) {
    p50[s] = pct_ms(&st[s], n, 50);
    p99[s] = pct_ms(&st[s], n, 99);
    printf("| %s | %.3f | %.3f | %.3f | %.3f | %.2f / %u |\n",
           exec_sides[s].name, p50[s], pct_ms(&st[s], n, 90), p99[s],
           st[s].mean_ms, st[s].calls_mean, st[s].calls_max);
  }
  printf("\nratio API / library: p50 %.2fx, p99 %.2fx, mean %.2fx\n",
         p50[0] / p50[1], p99[0] / p99[1], st[0].mean_ms / st[1].mean_ms);
  printf("ratio API / posix_spawn: p50 %.2fx, p99 %.2fx, mean %.2fx\n",
         p50[0] / p50[2], p99[0] / p99[2], st[0].mean_ms / st[2].mean_ms);
  printf("the API adds per exec over the library: p50 %.3f ms, mean %.3f "
         "ms; over the library making the server's calls: p50 %.3f ms; "
         "over those calls attaching for each: p50 %.3f ms\n",
         p50[0] - p50[1], st[0].mean_ms - st[1].mean_ms, p50[0] - p50[3],
         p50[0] - p50[4]);
}

static void big_print(struct stats *st, unsigned n) {
  printf("\n### 1 MiB of output: `head -c %d /dev/zero` (%u of each, "
         "alternating, after %u warm-up runs), from the start to the last "
         "byte\n\n",
         BIG_BYTES, n, BIG_WARMUP);
  printf("| | MiB/s at the median | MiB/s best / worst | ms p50 | requests, "
         "RPCs or reads per exec (mean / max) |\n"
         "|---|---:|---:|---:|---:|\n");
  double mib[N_BIG];
  for (size_t s = 0; s < N_BIG; s++) {
    double p50 = pct_ms(&st[s], n, 50);
    double lo = pct_ms(&st[s], n, 0), hi = pct_ms(&st[s], n, 100);
    mib[s] = BIG_BYTES / 1048576.0 / (p50 / 1e3);
    printf("| %s | %.0f | %.0f / %.0f | %.2f | %.1f / %u |\n",
           big_sides[s].name, mib[s], BIG_BYTES / 1048576.0 / (lo / 1e3),
           BIG_BYTES / 1048576.0 / (hi / 1e3), p50, st[s].calls_mean,
           st[s].calls_max);
  }
  printf("\nratio API / library: %.2fx (API / pipe %.2fx); every byte "
         "received, none lost to gaps\n",
         mib[0] / mib[1], mib[0] / mib[2]);
}

/* Both benchmarks on V's sandbox. */
static int bench_all(const struct ctx *c, struct env *v) {
  struct stats st[N_EXEC] = {0}, bt[N_BIG] = {0};
  int r = 0;
  for (size_t s = 0; s < N_EXEC; s++)
    if (!(st[s].ns = calloc(c->execs, sizeof(uint64_t))))
      r = -ENOMEM;
  for (size_t s = 0; s < N_BIG; s++)
    if (!(bt[s].ns = calloc(c->big, sizeof(uint64_t))))
      r = -ENOMEM;
  if (r == 0)
    r = run_sides(exec_sides, N_EXEC, v, c->execs, BLOCK, WARMUP, st);
  if (r == 0)
    exec_print(st, c->execs);
  (void)fflush(stdout);
  if (r == 0)
    r = run_sides(big_sides, N_BIG, v, c->big, 1, BIG_WARMUP, bt);
  if (r == 0)
    big_print(bt, c->big);
  for (size_t s = 0; s < N_EXEC; s++)
    free(st[s].ns);
  for (size_t s = 0; s < N_BIG; s++)
    free(bt[s].ns);
  return r;
}

/* ---- main --------------------------------------------------------------- */

static int setup(struct ctx *c) {
  if (bench_binary("SBX_BIN", "sbx", c->sbx, sizeof(c->sbx)) < 0 ||
      bench_binary("SBX_SANDBOXD", "sandboxd", c->sandboxd,
                   sizeof(c->sandboxd)) < 0)
    return -ENOENT;
  (void)snprintf(c->dir, sizeof(c->dir), "/tmp/sbx-bench-exec-XXXXXX");
  if (!mkdtemp(c->dir)) {
    c->dir[0] = '\0';
    return -errno;
  }
  /* The sandbox's workspace and any other state in our dir. */
  (void)snprintf(c->env_sandboxd, sizeof(c->env_sandboxd), "SBX_SANDBOXD=%s",
                 c->sandboxd);
  (void)snprintf(c->env_tmp, sizeof(c->env_tmp), "TMPDIR=%s/tmp", c->dir);
  (void)snprintf(c->env_state, sizeof(c->env_state), "XDG_STATE_HOME=%s/xdg",
                 c->dir);
  char tmp[96];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", c->dir);
  if (mkdir(tmp, 0700) < 0)
    return -errno;
  char *envp[] = {c->env_sandboxd,
                  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin",
                  c->env_tmp, c->env_state, NULL};
  memcpy(c->envp, envp, sizeof(envp));
  return 0;
}

static int parse_args(struct ctx *c, int argc, char **argv) {
  static const struct option lopts[] = {{"execs", required_argument, NULL, 'e'},
                                        {"big", required_argument, NULL, 'b'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
    char *end = NULL;
    unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;
    bool num = optarg && *optarg && end && !*end && v >= 1 && v <= 100000;
    if (num && ch == 'e')
      c->execs = (unsigned)v;
    else if (num && ch == 'b')
      c->big = (unsigned)v;
    else {
      (void)fprintf(stderr, "usage: bench_server_exec [--execs 1..100000] "
                            "[--big 1..100000]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
  return -1;
}

/* A server, its sandbox and a library client of that sandbox; the
 * benchmarks; then all of it removed again. */
static int bench_main(const struct ctx *c) {
  struct bench_serve s = {0};
  struct bench_http h = {0};
  struct env v = {.h = &h, .state = s.state};
  struct lifecycle_record rec = {0};
  struct sandbox *sb = NULL;
  double create_ms = 0;
  bool made = false;
  int r = bench_serve_init(&s, c->sbx, c->dir, "serve");
  if (r == 0)
    r = bench_serve_start(&s, c->sbx, c->envp, NULL);
  if (r == 0)
    r = bench_http_open(&h, &s);
  if (r == 0)
    made = (r = api_sandbox_create(&v, &create_ms)) == 0;
  if (r == 0 && (r = attach(s.state, v.sid, &rec, &sb)) == 0)
    v.c = sb->client;
  if (r == 0) {
    printf("\nthe sandbox: POST /v1/sandboxes {} answered in %.0f ms; the "
           "library attached from its record in the server's state "
           "directory\n",
           create_ms);
    r = bench_all(c, &v);
  }
  if (sb)
    detach(&rec, sb);
  if (made)
    api_sandbox_delete(&v);
  bench_http_close(&h);
  bench_serve_stop(&s, SIGTERM);
  bench_reap_orphans(NULL, 0);
  return r;
}

int main(int argc, char **argv) {
  struct ctx c = {.execs = DEFAULT_EXECS, .big = DEFAULT_BIG};
  int rc = parse_args(&c, argc, argv);
  if (rc >= 0)
    return rc;
  /* The sandboxd of a server that died is ours, to be reaped. */
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 ||
      curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return 1;
  int r = setup(&c);
  if (r < 0) {
    (void)fprintf(stderr, "bench: cannot set up: %s\n", strerror(-r));
  } else {
    printf("## bench_server_exec\n\n");
    bench_print_machine(stdout);
    printf("- sbx: %s\n- sandboxd: %s\n", c.sbx, c.sandboxd);
    (void)fflush(stdout);
    r = bench_main(&c);
  }
  if (c.dir[0])
    (void)bench_rm_rf(c.dir);
  curl_global_cleanup();
  return r == 0 ? 0 : 1;
}
