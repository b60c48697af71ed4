/* sbx serve's costs, each beside a baseline measured in the same run:
 *
 *   api      a TURNS-turn run (each turn an exec_command of `true` with
 *            login false, then a final text: bench_controller's script)
 *            POSTed to `sbx serve` and followed on its event stream to
 *            run_finished, against `sbx run` and `sbx run --stream` of the
 *            same agent on the same kind of scripted model server (the
 *            server streams the model's answers and formats every event,
 *            as --stream does); 1-turn runs of each for their start-up.
 *            Per run: (API - CLI) / TURNS
 *   sse      a run whose model answers each of its turns after
 *            SSE_DELAY_MS: each event's own "timestamp" against our
 *            CLOCK_REALTIME when its bytes arrived on the event stream;
 *            baseline the same for the lines of `sbx run --stream` read
 *            from a pipe
 *   burst    BURST short runs (1 tool turn, then a final text) POSTed at
 *            once to a fresh server with --workers BURST, then with the
 *            default 16: throughput, queue wait and per-turn latency from
 *            the events' timestamps, the server's VmRSS (sampled) and
 *            VmHWM, its sandboxds' memory; baseline the same run alone
 *   restart  a run whose model call after its tool call takes
 *            RESTART_DELAY_MS: the server is SIGKILLed while it waits and
 *            started again with --lease-seconds 3; from that start to the
 *            run's next event and to its end, and how much of it is the
 *            lease (the run's lease_until in the store); baseline the same
 *            run undisturbed
 *
 * Event timestamps are whole milliseconds, truncated: a latency read from
 * one is 0-1 ms over the true one (0.5 ms on average), the baseline's as
 * well. Prints Markdown for bench/RESULTS.md. Usage: bench_server
 * [--turns N] [--runs N] [--burst N] [--restarts N]
 * [--only api|sse|burst|restart]. */
#include <getopt.h>

#include "bench/serve.h"
#include "controller/state/store.h"
#include "shared/buf.h"

#define DEFAULT_TURNS 200
#define DEFAULT_RUNS 7
#define MAX_RUNS 15
#define DEFAULT_BURST 200
#define DEFAULT_RESTARTS 3
#define SSE_TURNS 100
#define SSE_DELAY_MS 20
#define SSE_RUNS 3
#define ALONE_RUNS 5
#define RESTART_DELAY_MS 2000
#define KILL_AFTER_MS 300
#define LEASE_SECONDS "3"

struct ctx {
  char sbx[PATH_MAX], sandboxd[PATH_MAX], py[PATH_MAX + 64];
  char dir[64]; /* ours, removed at the end */
  char env_sandboxd[PATH_MAX + 16], env_tmp[96], env_state[96];
  char *envp[8]; /* for sbx run and sbx serve */
  unsigned turns, runs, burst, restarts;
};

/* ---- scripts, agents, latencies ----------------------------------------- */

/* A by_turn script: TURNS exec_command calls of `true` (login false), each
 * answered after TOOL_DELAY ms, then a final text after TEXT_DELAY ms. The
 * model server picks the step by the number of tool outputs a request
 * carries, so one server answers any number of runs, even at once. */
static char *make_script(unsigned turns, unsigned tool_delay,
                         unsigned text_delay) {
  json_t *steps = json_array();
  json_t *tool = json_pack("{s:[{s:s, s:{s:s, s:b}}], s:I}", "tool_calls",
                           "name", "exec_command", "arguments", "cmd", "true",
                           "login", 0, "repeat", (json_int_t)turns);
  json_t *text = json_pack("{s:s}", "text", "done");
  if (tool && tool_delay)
    (void)json_object_set_new(tool, "delay_ms", json_integer(tool_delay));
  if (text && text_delay)
    (void)json_object_set_new(text, "delay_ms", json_integer(text_delay));
  if (turns > 0)
    (void)json_array_append(steps, tool);
  (void)json_array_append(steps, text);
  json_decref(tool);
  json_decref(text);
  json_t *s = json_pack("{s:b, s:o}", "by_turn", 1, "steps", steps);
  char *out = s ? json_dumps(s, JSON_COMPACT) : NULL;
  json_decref(s);
  return out;
}

/* A model server on make_script's script, its files DIR/NAME.*. */
static int model_up(const struct ctx *c, const char *name, unsigned turns,
                    unsigned tool_delay, unsigned text_delay,
                    struct bench_model *m) {
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/%s.json", c->dir, name);
  char *script = make_script(turns, tool_delay, text_delay);
  int r = script ? bench_write_file(path, script) : -ENOMEM;
  free(script);
  return r < 0 ? r : bench_model_start(m, c->py, path);
}

/* The agent's JSON for model server M (new), and the same in the file
 * DIR/NAME.agent.json for sbx run. */
static char *agent_for(const struct ctx *c, const struct bench_model *m,
                       const char *name, char *file, size_t n) {
  json_t *a = json_pack("{s:s, s:s, s:s, s:s}", "name", "Bench", "model",
                        "bench-model", "instructions",
                        "Run what you are asked to.", "base_url", m->base_url);
  char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  (void)snprintf(file, n, "%s/%s.agent.json", c->dir, name);
  if (text && bench_write_file(file, text) < 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* ---- sbx run ------------------------------------------------------------ */

/* The events' latencies of one `sbx run --stream` line LINE (LEN bytes)
 * read at NOW_US, into LAT. */
static void line_latency(const char *line, size_t len, int64_t now_us,
                         struct bench_lats *lat) {
  int64_t seq, ts;
  int turn;
  if (bench_event_fields(line, len, &seq, &turn, &ts) == 0)
    (void)bench_lats_push(lat, now_us - ts * 1000);
}

/* `sbx run [--stream] AGENT` for up to TURNS+1 model calls: *NS its wall
 * time. With LAT (--stream), each event line's latency from its timestamp
 * to when we read it. */
static int cli_run(const struct ctx *c, const char *agent, unsigned turns,
                   bool stream, uint64_t *ns, struct bench_lats *lat) {
  char max[16];
  (void)snprintf(max, sizeof(max), "%u", turns + 1);
  char *argv[] = {(char *)c->sbx, "run",       "--max-turns", max,
                  (char *)agent,  "Run true.", NULL,          NULL};
  if (stream) {
    memmove(argv + 3, argv + 2, 4 * sizeof(*argv));
    argv[2] = "--stream";
  }
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  uint64_t t0 = bench_now_ns();
  pid_t pid = bench_spawn(argv, c->envp, out[1], -1);
  (void)close(out[1]);
  _cleanup_buf_ struct sbx_buf line, last;
  sbx_buf_init(&line, 64u << 20);
  sbx_buf_init(&last, 64u << 20);
  char buf[65536];
  ssize_t n;
  while (pid > 0 && ((n = read(out[0], buf, sizeof(buf))) > 0 ||
                     (n < 0 && errno == EINTR))) {
    int64_t now = bench_wall_us();
    for (ssize_t i = 0; i < n;) {
      const char *nl = memchr(buf + i, '\n', (size_t)(n - i));
      size_t k = nl ? (size_t)(nl - (buf + i)) : (size_t)(n - i);
      (void)sbx_buf_append(&line, buf + i, k);
      i += (ssize_t)k + (nl ? 1 : 0);
      if (!nl)
        break;
      if (lat && line.len)
        line_latency(line.data, line.len, now, lat);
      sbx_buf_reset(&last);
      (void)sbx_buf_append(&last, line.data ? line.data : "", line.len + 1);
      sbx_buf_reset(&line);
    }
  }
  (void)close(out[0]);
  int status = pid > 0 ? bench_reap(pid, 600000) : -1;
  *ns = bench_now_ns() - t0;
  const char *tail = last.data ? last.data : "";
  bool ok = stream ? strstr(tail, "\"type\":\"run_finished\"") != NULL
                   : strcmp(tail, "done") == 0;
  if (status != 0 || !ok) {
    (void)fprintf(stderr, "bench: sbx run failed (status %d): \"%.200s\"\n",
                  status, tail);
    return -EIO;
  }
  return 0;
}

/* ---- the API ------------------------------------------------------------ */

/* A run of AGENT through S: POSTed, followed to run_finished; *NS from
 * before the POST to when run_finished arrived. */
static int api_run(struct bench_http *h, const char *agent, unsigned turns,
                   uint64_t *ns) {
  char id[64];
  int64_t created;
  uint64_t t0 = bench_now_ns();
  int r = bench_api_submit(h, agent, turns + 1, id, sizeof(id), &created);
  struct bench_watch w = {0};
  if (r == 0)
    r = bench_watch_run(h->s, id, -1, &w, NULL);
  *ns = bench_now_ns() - t0;
  if (r == 0 && strcmp(w.last, "run_finished") != 0) {
    (void)fprintf(stderr, "bench: run %s ended with %s\n", id, w.last);
    r = -EIO;
  }
  return r;
}

/* ---- 1. API overhead per tool turn -------------------------------------- */

struct api_round {
  double cli, str, api, cli1, str1, api1; /* ms: TURNS-turn and 1-turn runs */
  double plain, streamed;    /* ms: one model answer of each form, alone */
  double add_str, add_cli;   /* (api - CLI) / turns: all in */
  double madd_str, madd_cli; /* the same, start-up excluded */
};

struct api_setup {
  struct bench_http *h;
  const struct bench_model *m;
  const char *agent, *agent1; /* JSON: TURNS turns; a final text */
  const char *file, *file1;   /* the same in files, for sbx run */
};

static int api_round(const struct ctx *c, const struct api_setup *a,
                     struct api_round *o) {
  uint64_t ns[6];
  int r;
  if ((r = cli_run(c, a->file, c->turns, false, &ns[0], NULL)) < 0 ||
      (r = cli_run(c, a->file, c->turns, true, &ns[1], NULL)) < 0 ||
      (r = api_run(a->h, a->agent, c->turns, &ns[2])) < 0 ||
      (r = api_run(a->h, a->agent1, 0, &ns[5])) < 0 ||
      (r = cli_run(c, a->file1, 0, true, &ns[4], NULL)) < 0 ||
      (r = cli_run(c, a->file1, 0, false, &ns[3], NULL)) < 0)
    return r;
  double *f[] = {&o->cli, &o->str, &o->api, &o->cli1, &o->str1, &o->api1};
  for (size_t i = 0; i < 6; i++)
    *f[i] = (double)ns[i] / 1e6;
  if ((r = bench_model_probe(a->m, false, c->turns, &o->plain)) < 0 ||
      (r = bench_model_probe(a->m, true, c->turns, &o->streamed)) < 0)
    return r;
  double t = c->turns;
  o->add_str = (o->api - o->str) / t;
  o->add_cli = (o->api - o->cli) / t;
  o->madd_str = ((o->api - o->api1) - (o->str - o->str1)) / t;
  o->madd_cli = ((o->api - o->api1) - (o->cli - o->cli1)) / t;
  return 0;
}

static double med(const struct api_round *rs, unsigned n, size_t off) {
  double v[MAX_RUNS];
  for (unsigned i = 0; i < n; i++)
    v[i] = *(const double *)((const char *)&rs[i] + off);
  return bench_median(v, n);
}

static void print_each(const struct api_round *rs, unsigned n, size_t off) {
  printf(" (runs:");
  for (unsigned i = 0; i < n; i++)
    printf(" %.3f", *(const double *)((const char *)&rs[i] + off));
  printf(")");
}

static void api_print(const struct ctx *c, const struct api_round *rs) {
#define M(f) med(rs, c->runs, offsetof(struct api_round, f))
  double t = c->turns;
  printf("\n### 1. API overhead per tool turn: %u turns of exec_command "
         "`true` (median of %u runs)\n\n",
         c->turns, c->runs);
  printf("| | %u-turn run, ms | per turn, ms | 1-turn run, ms | per turn, "
         "start-up excluded, ms |\n|---|---:|---:|---:|---:|\n",
         c->turns);
  printf("| `sbx run` | %.1f | %.3f | %.1f | %.3f |\n", M(cli), M(cli) / t,
         M(cli1), (M(cli) - M(cli1)) / t);
  printf("| `sbx run --stream` | %.1f | %.3f | %.1f | %.3f |\n", M(str),
         M(str) / t, M(str1), (M(str) - M(str1)) / t);
  printf("| `sbx serve`: POST /v1/runs, its events to run_finished | %.1f | "
         "%.3f | %.1f | %.3f |\n",
         M(api), M(api) / t, M(api1), (M(api) - M(api1)) / t);
  printf("\nwhat the API adds per turn, computed per run, median of %u:\n",
         c->runs);
  printf("- over `sbx run --stream`, all in: %.3f ms", M(add_str));
  print_each(rs, c->runs, offsetof(struct api_round, add_str));
  printf("\n- over `sbx run --stream`, start-up excluded: %.3f ms",
         M(madd_str));
  print_each(rs, c->runs, offsetof(struct api_round, madd_str));
  printf("\n- over `sbx run`, all in: %.3f ms", M(add_cli));
  print_each(rs, c->runs, offsetof(struct api_round, add_cli));
  printf("\n- over `sbx run`, start-up excluded: %.3f ms", M(madd_cli));
  print_each(rs, c->runs, offsetof(struct api_round, madd_cli));
  printf("\n\nthe model server alone, %u one-message requests: a plain "
         "answer %.3f ms, a streamed one %.3f ms (sbx run streams only with "
         "--stream; the server always does)\n",
         c->turns, M(plain), M(streamed));
  printf("\ntarget: the API adds at most 1 ms per turn over the CLI (all "
         "in): over `sbx run --stream` %s, over `sbx run` %s\n",
         M(add_str) <= 1.0 ? "met" : "NOT met",
         M(add_cli) <= 1.0 ? "met" : "NOT met");
#undef M
}

static int bench_api(const struct ctx *c, struct bench_http *h) {
  struct bench_model m = {0}, m1 = {0};
  char file[128], file1[128];
  char *agent = NULL, *agent1 = NULL;
  struct api_round rs[MAX_RUNS];
  int r = model_up(c, "turns", c->turns, 0, 0, &m);
  if (r == 0)
    r = model_up(c, "final", 0, 0, 0, &m1);
  if (r == 0) {
    agent = agent_for(c, &m, "turns", file, sizeof(file));
    agent1 = agent_for(c, &m1, "final", file1, sizeof(file1));
    r = agent && agent1 ? 0 : -ENOMEM;
  }
  struct api_setup a = {h, &m, agent, agent1, file, file1};
  uint64_t warm;
  /* A warm-up of each kind: page cache, the server's first connections. */
  if (r == 0 && (r = api_run(h, agent1, 0, &warm)) == 0)
    r = cli_run(c, file1, 0, true, &warm, NULL);
  if (r == 0)
    printf("\nper run (ms): `sbx run`, `--stream`, API; their 1-turn runs\n");
  for (unsigned i = 0; r == 0 && i < c->runs; i++) {
    r = api_round(c, &a, &rs[i]);
    if (r == 0)
      printf("- %.1f, %.1f, %.1f; %.1f, %.1f, %.1f\n", rs[i].cli, rs[i].str,
             rs[i].api, rs[i].cli1, rs[i].str1, rs[i].api1);
    (void)fflush(stdout);
  }
  if (r == 0)
    api_print(c, rs);
  free(agent);
  free(agent1);
  bench_model_stop(&m);
  bench_model_stop(&m1);
  return r;
}

/* ---- 2. event delivery latency ------------------------------------------ */

static void lat_row(const char *what, struct bench_lats *l) {
  size_t n = l->n;
  double p50 = bench_pct_ms(l, 50), p90 = bench_pct_ms(l, 90),
         p99 = bench_pct_ms(l, 99);
  printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f |\n", what, n, p50, p90, p99,
         bench_pct_ms(l, 100));
}

static int bench_sse_latency(const struct ctx *c, struct bench_serve *s,
                             struct bench_http *h) {
  struct bench_model m = {0};
  char file[128];
  char *agent = NULL;
  struct bench_lats api = {0}, cli = {0};
  size_t backlog = 0;
  int r = model_up(c, "slow", SSE_TURNS, SSE_DELAY_MS, SSE_DELAY_MS, &m);
  if (r == 0 && !(agent = agent_for(c, &m, "slow", file, sizeof(file))))
    r = -ENOMEM;
  for (unsigned i = 0; r == 0 && i < SSE_RUNS; i++) {
    char id[64];
    int64_t created, first_us = 0;
    struct bench_watch w = {.parse = true};
    r = bench_api_submit(h, agent, SSE_TURNS + 1, id, sizeof(id), &created);
    if (r == 0)
      r = bench_watch_run(s, id, -1, &w, &first_us);
    /* Only events recorded once the stream was open: the others were
     * waiting for the client, not being delivered. */
    for (size_t k = 0; r == 0 && k < w.n; k++) {
      if (w.ev[k].ts_ms * 1000 < first_us)
        backlog++;
      else
        r = bench_lats_push(&api, w.ev[k].recv_us - w.ev[k].ts_ms * 1000);
    }
    free(w.ev);
    uint64_t ns;
    if (r == 0)
      r = cli_run(c, file, SSE_TURNS, true, &ns, &cli);
  }
  if (r == 0) {
    printf("\n### 2. Event delivery latency: %u runs of %u turns, the model "
           "answering each after %u ms\n\n",
           SSE_RUNS, SSE_TURNS, SSE_DELAY_MS);
    printf("From an event's \"timestamp\" to when its bytes arrived "
           "(CLOCK_REALTIME; timestamps are truncated to the ms, so 0-1 ms "
           "over the true figure in both rows):\n\n");
    printf("| | events | p50 ms | p90 ms | p99 ms | max ms |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    lat_row("`sbx serve`: GET /v1/runs/ID/events (SSE)", &api);
    lat_row("(baseline) `sbx run --stream`, its stdout on a pipe", &cli);
    printf("\n(%zu events recorded before the stream was open left out)\n",
           backlog);
    printf("SSE minus pipe: p50 %+.2f ms, p99 %+.2f ms\n",
           bench_pct_ms(&api, 50) - bench_pct_ms(&cli, 50),
           bench_pct_ms(&api, 99) - bench_pct_ms(&cli, 99));
  }
  free(api.v);
  free(cli.v);
  free(agent);
  bench_model_stop(&m);
  return r;
}

/* ---- 3. concurrent runs ------------------------------------------------- */

struct run_times {
  char id[64];
  int64_t created, started, sandbox, tf1, tf2, end; /* unix ms */
  bool ok;
};

/* T's times from its events, read to the end of its stream. */
static int run_times_read(const struct bench_serve *s, struct run_times *t) {
  struct bench_watch w = {.parse = true};
  int r = bench_watch_run(s, t->id, -1, &w, NULL);
  for (size_t i = 0; r == 0 && i < w.n; i++) {
    const struct bench_event *e = &w.ev[i];
    if (strcmp(e->type, "run_started") == 0 && !t->started)
      t->started = e->ts_ms;
    else if (strcmp(e->type, "sandbox_created") == 0)
      t->sandbox = e->ts_ms;
    else if (strcmp(e->type, "turn_finished") == 0 && e->turn == 1)
      t->tf1 = e->ts_ms;
    else if (strcmp(e->type, "turn_finished") == 0 && e->turn == 2)
      t->tf2 = e->ts_ms;
    else if (bench_terminal(e->type))
      t->end = e->ts_ms;
  }
  t->ok = r == 0 && strcmp(w.last, "run_finished") == 0 && t->started &&
          t->sandbox && t->tf1 && t->tf2 && t->end;
  free(w.ev);
  return r;
}

struct burst_out {
  unsigned n, failed, workers;
  double submit_s, wall_s, rps;
  struct bench_lats queue, turn, sandbox, total; /* us */
  long idle_kib, peak_kib, hwm_kib;
  unsigned peak_exec;
  struct bench_tree_mem tree; /* at the sample with the most sandboxds */
};

/* Pools T's figures into O. */
static void burst_add(struct burst_out *o, const struct run_times *t,
                      unsigned n) {
  int64_t first = INT64_MAX, last = 0;
  for (unsigned i = 0; i < n; i++) {
    if (!t[i].ok) {
      o->failed++;
      continue;
    }
    first = t[i].created < first ? t[i].created : first;
    last = t[i].end > last ? t[i].end : last;
    (void)bench_lats_push(&o->queue, (t[i].started - t[i].created) * 1000);
    (void)bench_lats_push(&o->sandbox, (t[i].sandbox - t[i].started) * 1000);
    (void)bench_lats_push(&o->turn, (t[i].tf1 - t[i].sandbox) * 1000);
    (void)bench_lats_push(&o->turn, (t[i].tf2 - t[i].tf1) * 1000);
    (void)bench_lats_push(&o->total, (t[i].end - t[i].created) * 1000);
  }
  o->n = n;
  o->wall_s = last > first ? (double)(last - first) / 1000.0 : 0;
  o->rps = o->wall_s > 0 ? (double)(n - o->failed) / o->wall_s : 0;
}

/* POSTs N runs of AGENT at once, over N connections; their ids and
 * created_at into T. */
static int burst_submit(const struct bench_serve *s, const char *agent,
                        unsigned n, struct run_times *t) {
  json_t *req =
      json_pack("{s:o, s:s, s:i}", "agent", json_loads(agent, 0, NULL), "input",
                "Run true.", "max_turns", 4);
  char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  char url[128], auth[192];
  (void)snprintf(url, sizeof(url), "%s/v1/runs", s->url);
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->token);
  struct curl_slist *h = curl_slist_append(NULL, auth);
  struct curl_slist *hh =
      h ? curl_slist_append(h, "Content-Type: application/json") : NULL;
  CURLM *multi = curl_multi_init();
  CURL **e = calloc(n, sizeof(*e));
  struct sbx_buf *out = calloc(n, sizeof(*out));
  int r = body && hh && multi && e && out ? 0 : -ENOMEM;
  for (unsigned i = 0; r == 0 && i < n; i++) {
    sbx_buf_init(&out[i], 1u << 20);
    if (!(e[i] = curl_easy_init())) {
      r = -ENOMEM;
      break;
    }
    (void)curl_easy_setopt(e[i], CURLOPT_URL, url);
    (void)curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, hh);
    (void)curl_easy_setopt(e[i], CURLOPT_POSTFIELDS, body);
    (void)curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, bench_http_body);
    (void)curl_easy_setopt(e[i], CURLOPT_WRITEDATA, &out[i]);
    (void)curl_easy_setopt(e[i], CURLOPT_TIMEOUT, 120L);
    (void)curl_multi_add_handle(multi, e[i]);
  }
  for (int running = 1; r == 0 && running;) {
    if (curl_multi_perform(multi, &running) != CURLM_OK ||
        (running && curl_multi_poll(multi, NULL, 0, 1000, NULL) != CURLM_OK))
      r = -EIO;
  }
  for (unsigned i = 0; r == 0 && i < n; i++) {
    long status = 0;
    (void)curl_easy_getinfo(e[i], CURLINFO_RESPONSE_CODE, &status);
    json_t *j = json_loadb(out[i].data ? out[i].data : "", out[i].len, 0, NULL);
    const char *id = json_string_value(json_object_get(j, "id"));
    if (status == 201 && id) {
      (void)snprintf(t[i].id, sizeof(t[i].id), "%s", id);
      t[i].created =
          bench_rfc3339_ms(json_string_value(json_object_get(j, "created_at")));
    } else {
      (void)fprintf(stderr, "bench: POST %u of the burst: HTTP %ld\n", i,
                    status);
      r = -EIO;
    }
    json_decref(j);
  }
  for (unsigned i = 0; e && out && i < n; i++) {
    if (e[i]) {
      (void)curl_multi_remove_handle(multi, e[i]);
      curl_easy_cleanup(e[i]);
    }
    sbx_buf_free(&out[i]);
  }
  free(e);
  free(out);
  if (multi)
    (void)curl_multi_cleanup(multi);
  curl_slist_free_all(h);
  free(body);
  return r;
}

/* The value of the metric line starting with NAME (a space follows) in
 * TEXT, or 0. */
static double metric(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; p && *p;) {
    if (strncmp(p, name, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  return 0;
}

/* Until N runs have ended (at most 10 min): every 200 ms, the server's
 * VmRSS, its descendants' memory and the runs it executes. */
static int burst_wait(const struct bench_serve *s, struct bench_http *h,
                      unsigned n, struct burst_out *o) {
  uint64_t t0 = bench_now_ns();
  for (;;) {
    long rss = bench_status_kib(s->pid, "VmRSS:");
    o->peak_kib = rss > o->peak_kib ? rss : o->peak_kib;
    struct bench_tree_mem tm;
    if (bench_tree_mem(s->pid, &tm) == 0 && tm.sandboxds >= o->tree.sandboxds)
      o->tree = tm;
    long status = 0;
    int r = bench_http_do(h, "GET", "/metrics", NULL, &status, NULL);
    if (r < 0 || status != 200)
      return r < 0 ? r : -EIO;
    const char *m = h->body.data;
    double exec = metric(m, "sbx_runs_executing");
    o->peak_exec = exec > o->peak_exec ? (unsigned)exec : o->peak_exec;
    double ended = metric(m, "sbx_runs{status=\"completed\"}") +
                   metric(m, "sbx_runs{status=\"failed\"}") +
                   metric(m, "sbx_runs{status=\"cancelled\"}");
    if (ended >= n)
      return 0;
    if (bench_now_ns() - t0 > 600ull * 1000000000ull) {
      (void)fprintf(stderr, "bench: %u runs not ended in 10 min (%.0f)\n", n,
                    ended);
      return -ETIMEDOUT;
    }
    (void)nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  }
}

/* A fresh server with WORKERS workers: ALONE_RUNS runs one at a time into
 * ALONE, then c->burst at once into O. */
static int burst_one(const struct ctx *c, const struct bench_model *m,
                     const char *agent, unsigned workers,
                     struct burst_out *alone, struct burst_out *o) {
  char name[32], wtext[16];
  (void)snprintf(name, sizeof(name), "burst%u", workers);
  (void)snprintf(wtext, sizeof(wtext), "%u", workers);
  const char *extra[] = {"--workers", wtext, NULL};
  struct bench_serve s = {0};
  struct bench_http h = {0};
  struct run_times *t = calloc(c->burst, sizeof(*t));
  int r = t ? bench_serve_init(&s, c->sbx, c->dir, name) : -ENOMEM;
  if (r == 0)
    r = bench_serve_start(&s, c->sbx, c->envp, extra);
  if (r == 0)
    r = bench_http_open(&h, &s);
  struct run_times one[ALONE_RUNS] = {0};
  for (unsigned i = 0; r == 0 && i < ALONE_RUNS; i++) {
    r = bench_api_submit(&h, agent, 4, one[i].id, sizeof(one[i].id),
                         &one[i].created);
    if (r == 0)
      r = run_times_read(&s, &one[i]);
  }
  if (r == 0) {
    burst_add(alone, one, ALONE_RUNS);
    (void)nanosleep(&(struct timespec){1, 0}, NULL);
    o->idle_kib = bench_status_kib(s.pid, "VmRSS:");
    o->workers = workers;
    uint64_t t0 = bench_now_ns();
    r = burst_submit(&s, agent, c->burst, t);
    o->submit_s = (double)(bench_now_ns() - t0) / 1e9;
  }
  if (r == 0)
    r = burst_wait(&s, &h, c->burst + ALONE_RUNS, o);
  if (r == 0)
    o->hwm_kib = bench_status_kib(s.pid, "VmHWM:");
  for (unsigned i = 0; r == 0 && i < c->burst; i++)
    r = run_times_read(&s, &t[i]);
  if (r == 0)
    burst_add(o, t, c->burst);
  bench_http_close(&h);
  bench_serve_stop(&s, SIGTERM);
  bench_reap_orphans(&m->pid, 1);
  free(t);
  return r;
}

static void burst_print(struct burst_out *b, struct burst_out *a, unsigned nb) {
  printf("\n### 3. %u runs (1 tool turn, then a final text) submitted at "
         "once\n\n",
         b[0].n);
  printf("| workers | submit s | first created to last run_finished s | "
         "runs/s | failed | queue wait p50 / p99 ms | sandbox start p50 / "
         "p99 ms | per turn p50 / p99 ms | run p50 / p99 ms |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (unsigned i = 0; i < nb; i++) {
    struct burst_out *x[] = {&a[i], &b[i]};
    char submit[32], wall[32];
    (void)snprintf(submit, sizeof(submit), "%.2f", b[i].submit_s);
    (void)snprintf(wall, sizeof(wall), "%.2f", b[i].wall_s);
    for (unsigned k = 0; k < 2; k++)
      printf("| %u%s | %s | %s | %.1f | %u | %.0f / %.0f | %.0f / %.0f | "
             "%.0f / %.0f | %.0f / %.0f |\n",
             b[i].workers, k ? "" : " (baseline: one run at a time)",
             k ? submit : "-", k ? wall : "-", x[k]->rps, x[k]->failed,
             bench_pct_ms(&x[k]->queue, 50), bench_pct_ms(&x[k]->queue, 99),
             bench_pct_ms(&x[k]->sandbox, 50), bench_pct_ms(&x[k]->sandbox, 99),
             bench_pct_ms(&x[k]->turn, 50), bench_pct_ms(&x[k]->turn, 99),
             bench_pct_ms(&x[k]->total, 50), bench_pct_ms(&x[k]->total, 99));
  }
  printf("\n(submit: all POSTs answered; per turn: sandbox_created to "
         "turn_finished 1, turn_finished 1 to 2; the baseline's rows are "
         "%u runs one after another, its runs/s 1 / their mean)\n",
         ALONE_RUNS);
  printf("\n| workers | peak runs executing | server VmRSS idle / peak "
         "sampled / VmHWM MiB | (VmHWM - idle) per run submitted / per run "
         "executing at the peak KiB | sandboxes at once (peak) | their "
         "processes' VmRSS / RssAnon MiB | per sandbox VmRSS / RssAnon MiB "
         "|\n|---:|---:|---:|---:|---:|---:|---:|\n");
  for (unsigned i = 0; i < nb; i++) {
    const struct bench_tree_mem *t = &b[i].tree;
    unsigned sd = t->sandboxds ? t->sandboxds : 1;
    double grew = (double)(b[i].hwm_kib - b[i].idle_kib);
    printf("| %u | %u | %.1f / %.1f / %.1f | %.0f / %.0f | %u (%u "
           "processes) | %.1f / %.1f | %.2f / %.2f |\n",
           b[i].workers, b[i].peak_exec, b[i].idle_kib / 1024.0,
           b[i].peak_kib / 1024.0, b[i].hwm_kib / 1024.0,
           b[i].n ? grew / b[i].n : 0,
           b[i].peak_exec ? grew / b[i].peak_exec : 0, t->sandboxds, t->procs,
           t->rss_kib / 1024.0, t->anon_kib / 1024.0, t->rss_kib / 1024.0 / sd,
           t->anon_kib / 1024.0 / sd);
  }
  printf("\n(sampled every 200 ms; a sandbox is a sandboxd child of the "
         "server with everything under it; VmRSS counts the pages its "
         "processes share with the others, RssAnon only their own)\n");
}

static int bench_burst(const struct ctx *c) {
  struct bench_model m = {0};
  char file[128];
  char *agent = NULL;
  unsigned workers[] = {c->burst, 16};
  struct burst_out b[2] = {0}, a[2] = {0};
  int r = model_up(c, "short", 1, 0, 0, &m);
  if (r == 0 && !(agent = agent_for(c, &m, "short", file, sizeof(file))))
    r = -ENOMEM;
  for (unsigned i = 0; r == 0 && i < 2; i++) {
    r = burst_one(c, &m, agent, workers[i], &a[i], &b[i]);
    printf("\n- %u workers: %s\n", workers[i], r == 0 ? "done" : "failed");
    (void)fflush(stdout);
  }
  if (r == 0) {
    for (unsigned i = 0; i < 2; i++) {
      a[i].workers = workers[i];
      /* One at a time: runs/s is 1 / the mean run. */
      double sum = 0;
      for (size_t k = 0; k < a[i].total.n; k++)
        sum += (double)a[i].total.v[k] / 1e6;
      a[i].rps = sum > 0 ? (double)a[i].total.n / sum : 0;
    }
    burst_print(b, a, 2);
  }
  for (unsigned i = 0; i < 2; i++) {
    struct bench_lats *l[] = {&a[i].queue,   &a[i].turn,  &a[i].sandbox,
                              &a[i].total,   &b[i].queue, &b[i].turn,
                              &b[i].sandbox, &b[i].total};
    for (size_t k = 0; k < 8; k++)
      free(l[k]->v);
  }
  free(agent);
  bench_model_stop(&m);
  return r;
}

/* ---- 4. restart to resumed ---------------------------------------------- */

struct restart_out {
  double listen, lease, next, next_recv, claim, resumed, done; /* ms */
};

/* The lease_until (unix ms) of run ID in the store DB. */
static int lease_until(const char *db, const char *id, int64_t *out) {
  struct store *st = NULL;
  struct sbx_error e = {0};
  json_t *row = NULL;
  int r = store_open(db, &st, &e);
  if (r == 0)
    r = store_run_get(st, id, &row, &e);
  if (r < 0)
    (void)fprintf(stderr, "bench: the store: %s\n", e.msg);
  *out = json_integer_value(json_object_get(row, "lease_until"));
  json_decref(row);
  (void)store_close(st);
  return r;
}

/* The run undisturbed (KILL < 0), or killed KILL ms after its first turn
 * and resumed by a restarted server: the figures into O, or for the
 * undisturbed run its first turn's end to run_finished in O->done. */
static int restart_one(const struct ctx *c, const struct bench_model *m,
                       const char *agent, unsigned k, int kill_ms,
                       struct restart_out *o) {
  char name[32], id[64];
  (void)snprintf(name, sizeof(name), "restart%u", k);
  const char *extra[] = {"--lease-seconds", LEASE_SECONDS, NULL};
  struct bench_serve s = {0};
  struct bench_http h = {0};
  struct bench_watch w = {.parse = true,
                          .until = kill_ms < 0 ? NULL : "turn_finished"};
  struct bench_watch w2 = {.parse = true};
  int64_t created, lease = 0;
  int r = bench_serve_init(&s, c->sbx, c->dir, name);
  if (r == 0)
    r = bench_serve_start(&s, c->sbx, c->envp, extra);
  if (r == 0)
    r = bench_http_open(&h, &s);
  if (r == 0)
    r = bench_api_submit(&h, agent, 4, id, sizeof(id), &created);
  if (r == 0)
    r = bench_watch_run(&s, id, -1, &w, NULL);
  if (r == 0 && kill_ms < 0) {
    for (size_t i = 0; i < w.n; i++)
      if (strcmp(w.ev[i].type, "turn_finished") == 0 && w.ev[i].turn == 1)
        o->done = (double)(w.ev[w.n - 1].ts_ms - w.ev[i].ts_ms);
  } else if (r == 0) {
    (void)nanosleep(&(struct timespec){0, kill_ms * 1000000L}, NULL);
    bench_serve_stop(&s, SIGKILL);
    r = lease_until(s.db, id, &lease);
  }
  int64_t t0 = bench_wall_us();
  if (r == 0 && kill_ms >= 0)
    r = bench_serve_start(&s, c->sbx, c->envp, extra);
  int64_t t1 = bench_wall_us();
  if (r == 0 && kill_ms >= 0)
    r = bench_watch_run(&s, id, (long)w.last_seq, &w2, NULL);
  if (r == 0 && kill_ms >= 0) {
    const struct bench_event *e0 = &w2.ev[0], *end = &w2.ev[w2.n - 1];
    bool ok = w2.n >= 2 && strcmp(e0->type, "run_started") == 0 &&
              e0->seq == w.last_seq + 1 &&
              strcmp(end->type, "run_finished") == 0;
    if (!ok) {
      (void)fprintf(stderr, "bench: the resumed run: %zu events, %s\n", w2.n,
                    w2.last);
      r = -EIO;
    }
    o->listen = (double)(t1 - t0) / 1000.0;
    o->lease = lease * 1000 > t0 ? (double)(lease * 1000 - t0) / 1000.0 : 0;
    o->next = (double)(e0->ts_ms * 1000 - t0) / 1000.0;
    o->next_recv = (double)(e0->recv_us - t0) / 1000.0;
    o->claim = (double)(e0->ts_ms - lease);
    o->resumed = (double)(end->ts_ms - e0->ts_ms);
    o->done = (double)(end->ts_ms * 1000 - t0) / 1000.0;
  }
  free(w.ev);
  free(w2.ev);
  bench_http_close(&h);
  bench_serve_stop(&s, SIGTERM);
  bench_reap_orphans(&m->pid, 1);
  return r;
}

static int bench_restart(const struct ctx *c) {
  struct bench_model m = {0};
  char file[128];
  char *agent = NULL;
  struct restart_out base = {0}, rs[MAX_RUNS] = {0};
  int r = model_up(c, "restart", 1, 0, RESTART_DELAY_MS, &m);
  if (r == 0 && !(agent = agent_for(c, &m, "restart", file, sizeof(file))))
    r = -ENOMEM;
  if (r == 0)
    r = restart_one(c, &m, agent, 0, -1, &base);
  for (unsigned i = 0; r == 0 && i < c->restarts; i++)
    r = restart_one(c, &m, agent, i + 1, KILL_AFTER_MS, &rs[i]);
  if (r == 0) {
    printf("\n### 4. Restart to resumed: SIGKILL %d ms into a %d ms model "
           "call, restart with --lease-seconds %s\n\n",
           KILL_AFTER_MS, RESTART_DELAY_MS, LEASE_SECONDS);
    printf("| restart | listening ms | lease left at the start ms | next "
           "event (run_started) ms | (its arrival on the stream) ms | lease "
           "expiry to run_started ms | run_started to run_finished ms | "
           "run_finished ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    double v[7][MAX_RUNS];
    for (unsigned i = 0; i < c->restarts; i++) {
      double f[] = {rs[i].listen, rs[i].lease,   rs[i].next, rs[i].next_recv,
                    rs[i].claim,  rs[i].resumed, rs[i].done};
      printf("| %u |", i + 1);
      for (unsigned k = 0; k < 7; k++) {
        printf(" %.0f |", f[k]);
        v[k][i] = f[k];
      }
      printf("\n");
    }
    printf("| median |");
    for (unsigned k = 0; k < 7; k++)
      printf(" %.0f |", bench_median(v[k], c->restarts));
    printf("\n\n(times from the restart, i.e. from just before the new "
           "server was started; event times are their timestamps)\n");
    printf("baseline, the same run undisturbed: its first turn's end to "
           "run_finished %.0f ms (the model call takes %d ms)\n",
           base.done, RESTART_DELAY_MS);
  }
  free(agent);
  bench_model_stop(&m);
  return r;
}

/* ---- main --------------------------------------------------------------- */

static int setup(struct ctx *c) {
  char src[PATH_MAX];
  if (bench_binary("SBX_BIN", "sbx", c->sbx, sizeof(c->sbx)) < 0 ||
      bench_binary("SBX_SANDBOXD", "sandboxd", c->sandboxd,
                   sizeof(c->sandboxd)) < 0 ||
      bench_source_dir(__FILE__, src, sizeof(src)) < 0)
    return -ENOENT;
  (void)snprintf(c->py, sizeof(c->py), "%s/tests/support/model_server.py", src);
  (void)snprintf(c->dir, sizeof(c->dir), "/tmp/sbx-bench-srv-XXXXXX");
  if (!mkdtemp(c->dir)) {
    c->dir[0] = '\0';
    return -errno;
  }
  /* sbx run's state and every sandbox's workspace in our dir. */
  (void)snprintf(c->env_sandboxd, sizeof(c->env_sandboxd), "SBX_SANDBOXD=%s",
                 c->sandboxd);
  (void)snprintf(c->env_tmp, sizeof(c->env_tmp), "TMPDIR=%s/tmp", c->dir);
  (void)snprintf(c->env_state, sizeof(c->env_state), "XDG_STATE_HOME=%s/xdg",
                 c->dir);
  char tmp[96];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", c->dir);
  if (mkdir(tmp, 0700) < 0)
    return -errno;
  char *envp[] = {"OPENAI_API_KEY=bench-key",
                  c->env_sandboxd,
                  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin",
                  c->env_tmp,
                  c->env_state,
                  NULL};
  memcpy(c->envp, envp, sizeof(envp));
  return 0;
}

static int parse_args(struct ctx *c, int argc, char **argv, unsigned *only) {
  static const char *const names[] = {"api", "sse", "burst", "restart"};
  static const struct option lopts[] = {
      {"turns", required_argument, NULL, 't'},
      {"runs", required_argument, NULL, 'r'},
      {"burst", required_argument, NULL, 'b'},
      {"restarts", required_argument, NULL, 'k'},
      {"only", required_argument, NULL, 'o'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
    char *end = NULL;
    unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;
    bool num = optarg && *optarg && end && !*end;
    bool ok = false;
    /* The numeric options: each one's field and largest value. */
    const struct {
      int ch;
      unsigned *dest;
      unsigned long max;
    } nums[] = {{'t', &c->turns, 999},
                {'r', &c->runs, MAX_RUNS},
                {'b', &c->burst, 1000},
                {'k', &c->restarts, MAX_RUNS}};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
      if (ch == nums[i].ch && num && v >= 1 && v <= nums[i].max) {
        *nums[i].dest = (unsigned)v;
        ok = true;
      }
    for (unsigned i = 0; ch == 'o' && i < 4; i++)
      if (strcmp(optarg, names[i]) == 0) {
        *only = 1u << i;
        ok = true;
      }
    if (!ok) {
      (void)fprintf(stderr,
                    "usage: bench_server [--turns 1..999] [--runs 1..%d] "
                    "[--burst 1..1000] [--restarts 1..%d] "
                    "[--only api|sse|burst|restart]\n",
                    MAX_RUNS, MAX_RUNS);
      return ch == 'h' ? 0 : 2;
    }
  }
  return -1;
}

int main(int argc, char **argv) {
  struct ctx c = {.turns = DEFAULT_TURNS,
                  .runs = DEFAULT_RUNS,
                  .burst = DEFAULT_BURST,
                  .restarts = DEFAULT_RESTARTS};
  unsigned only = 0xf;
  int rc = parse_args(&c, argc, argv, &only);
  if (rc >= 0)
    return rc;
  /* The sandboxds of a server we kill become ours, to be reaped. */
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 ||
      curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return 1;
  rc = 1;
  struct bench_serve s = {0};
  struct bench_http h = {0};
  int r = setup(&c);
  if (r < 0) {
    (void)fprintf(stderr, "bench: cannot set up: %s\n", strerror(-r));
    goto out;
  }
  printf("## bench_server\n\n");
  bench_print_machine(stdout);
  printf("- sbx: %s\n- sandboxd: %s\n- model server: %s\n", c.sbx, c.sandboxd,
         c.py);
  (void)fflush(stdout);
  if (only & 3) {
    r = bench_serve_init(&s, c.sbx, c.dir, "serve");
    if (r == 0)
      r = bench_serve_start(&s, c.sbx, c.envp, NULL);
    if (r == 0)
      r = bench_http_open(&h, &s);
    if (r == 0 && (only & 1))
      r = bench_api(&c, &h);
    if (r == 0 && (only & 2))
      r = bench_sse_latency(&c, &s, &h);
    bench_http_close(&h);
    bench_serve_stop(&s, SIGTERM);
    bench_reap_orphans(NULL, 0);
  }
  if (r == 0 && (only & 4))
    r = bench_burst(&c);
  if (r == 0 && (only & 8))
    r = bench_restart(&c);
  rc = r == 0 ? 0 : 1;
out:
  if (c.dir[0])
    (void)bench_rm_rf(c.dir);
  curl_global_cleanup();
  return rc;
}
