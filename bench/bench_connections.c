/* sandboxd under a flood of idle connections, in one run:
 *
 *   memory    VmRSS before the flood, its peak while N connections are
 *             opened and held (sampled every 10 ms), with the flood held,
 *             and once it has been closed (the first figure within 1 MiB
 *             of the one before, else the one 5 s later)
 *   latency   Hello round trips of a client that authenticated before the
 *             flood: without a flood (the baseline), while the flood is
 *             being opened, and while it is held; p50 and p99
 *   held      how many of the N connections sandboxd still holds open
 *
 * The flood comes from child processes (tests/support/flood.c): over
 * ipc:// each connection sends the SP header of a REQ peer and never a
 * request; with --tls each connects to a tls+tcp:// listener and never
 * begins the TLS handshake. Prints Markdown for bench/RESULTS.md.
 *
 * Usage: bench_connections [-n N] [--tls] [-- SANDBOXD-ARGS...]
 * N defaults to 20000, or 3000 with --tls: nng's TLS listener accepts in
 * bursts here, the kernel's accept queue (128) overflows in between and
 * connects wait for SYN retransmits, so a TLS flood opens at a few hundred
 * connections a second (with or without sandboxd's limits).
 * SANDBOXD-ARGS go on the daemon's command line; SBX_SANDBOXD runs another
 * sandboxd binary (an older build, to compare). */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>

#include "bench/bench.h"
#include "shared/cleanup.h"
#include "shared/port.h"
#include "tests/support/certs.h"
#include "tests/support/flood.h"

#define HOLD_MS 2000   /* baseline and held phases, each */
#define SETTLE_MS 5000 /* the wait for the RSS after the flood */
#define MAX_SAMPLES 200000

enum phase { P_BASE, P_OPEN, P_HELD, P_STOP, P_COUNT = P_STOP };

static const char *const phase_names[P_COUNT] = {
    "no flood (baseline)", "while the flood is opened", "with the flood held"};

/* What the two threads share with main. */
struct run {
  struct sbx_client *client;
  pid_t pid;
  _Atomic int phase;
  _Atomic long peak_kib;
  uint64_t *lat[P_COUNT]; /* ns */
  size_t nlat[P_COUNT];
  unsigned failed[P_COUNT];
};

/* Hello after Hello until the phase is P_STOP, each timed into its
 * phase. */
static void *hello_loop(void *arg) {
  struct run *r = arg;
  for (;;) {
    int ph = atomic_load(&r->phase);
    if (ph == P_STOP)
      return NULL;
    struct sbx_error e = {0};
    uint64_t t0 = bench_now_ns();
    int rc = sbx_hello(r->client, NULL, &e);
    uint64_t ns = bench_now_ns() - t0;
    if (rc < 0)
      r->failed[ph]++;
    else if (r->nlat[ph] < MAX_SAMPLES)
      r->lat[ph][r->nlat[ph]++] = ns;
  }
}

/* The daemon's VmRSS every 10 ms into peak_kib, until P_STOP. */
static void *rss_loop(void *arg) {
  struct run *r = arg;
  while (atomic_load(&r->phase) != P_STOP) {
    long v = flood_rss_kib(r->pid);
    if (v > atomic_load(&r->peak_kib))
      atomic_store(&r->peak_kib, v);
    struct timespec ts = {0, 10 * 1000 * 1000};
    (void)nanosleep(&ts, NULL);
  }
  return NULL;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  (void)nanosleep(&ts, NULL);
}

/* Replaces D's ipc:// client by a TLS one to URL with the certificates in
 * DIR (the daemon was told to listen there instead). */
static int tls_client(struct bench_daemon *d, const char *url,
                      const char *dir) {
  char ca[128], crt[128], key[128];
  (void)snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
  (void)snprintf(crt, sizeof(crt), "%s/client.crt", dir);
  (void)snprintf(key, sizeof(key), "%s/client.key", dir);
  struct sbx_client_config cfg = {
      .url = url,
      .token = (const uint8_t *)d->token,
      .token_len = strlen(d->token),
      .tls_ca = ca,
      .tls_cert = crt,
      .tls_key = key,
      .tls_server_name = "localhost",
      .timeout_ms = 10000,
      .retries = 1,
  };
  struct sbx_error e = {0};
  struct sbx_client *c = NULL;
  int r = sbx_client_new(&cfg, &c, &e);
  if (r < 0) {
    (void)fprintf(stderr, "bench: TLS client: %s\n", e.msg);
    return r;
  }
  sbx_client_free(d->client);
  d->client = c;
  (void)snprintf(d->url, sizeof(d->url), "%s", url);
  return 0;
}

/* Starts the daemon with ARGS (and, with TLS, on a loopback port with the
 * certificates made in CERTS) and authenticates its client. */
static int start(struct bench_daemon *d, const char *exe, bool tls, char *certs,
                 size_t certs_size, const char **args, size_t nargs) {
  char url[64] = "", a_cert[128], a_key[128], a_ca[128];
  const char *all[48];
  size_t n = 0;
  if (tls) {
    uint16_t port = 0;
    if (test_make_certs(certs, certs_size) < 0 ||
        sbx_free_tcp_port(&port) < 0) {
      (void)fprintf(stderr, "bench: no certificates or port for TLS\n");
      return -EIO;
    }
    (void)snprintf(url, sizeof(url), "tls+tcp://127.0.0.1:%u", port);
    (void)snprintf(a_cert, sizeof(a_cert), "%s/server.crt", certs);
    (void)snprintf(a_key, sizeof(a_key), "%s/server.key", certs);
    (void)snprintf(a_ca, sizeof(a_ca), "%s/ca.crt", certs);
    const char *t[] = {"--listen",  url,   "--tls-cert", a_cert,
                       "--tls-key", a_key, "--tls-ca",   a_ca};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(t); i++)
      all[n++] = t[i];
  }
  for (size_t i = 0; i < nargs && n + 1 < SBX_ARRAY_SIZE(all); i++)
    all[n++] = args[i];
  all[n] = NULL;
  int r = bench_daemon_start(d, exe, all);
  if (r == 0 && tls)
    r = tls_client(d, url, certs);
  struct sbx_error e = {0};
  if (r == 0 && (r = sbx_hello(d->client, NULL, &e)) < 0)
    (void)fprintf(stderr, "bench: hello: %s\n", e.msg);
  return r;
}

/* One latency row: p50 and p99 in ms, their ratio to the baseline's. */
static void print_latency(struct run *r, int ph, uint64_t base_p50,
                          uint64_t base_p99) {
  size_t n = r->nlat[ph];
  uint64_t p50 = bench_percentile(r->lat[ph], n, 50);
  uint64_t p99 = bench_percentile(r->lat[ph], n, 99);
  printf("| Hello round trip, %s | %zu | %.3f | %.3f |", phase_names[ph], n,
         (double)p50 / 1e6, (double)p99 / 1e6);
  if (ph == P_BASE)
    printf(" 1 | 1 |");
  else
    printf(" %.2f | %.2f |", base_p50 ? (double)p50 / (double)base_p50 : 0,
           base_p99 ? (double)p99 / (double)base_p99 : 0);
  printf(" %u |\n", r->failed[ph]);
}

/* The flood itself: the phases, the threads that measure them, and what
 * the daemon holds; prints the tables. */
static int flood_run(struct bench_daemon *d, unsigned n, bool tls) {
  struct run r = {.client = d->client, .pid = d->pid};
  for (int i = 0; i < P_COUNT; i++)
    if (!(r.lat[i] = calloc(MAX_SAMPLES, sizeof(uint64_t))))
      return -ENOMEM;
  long before = flood_rss_kib(d->pid);
  atomic_store(&r.peak_kib, before);
  pthread_t th, tr;
  if (pthread_create(&th, NULL, hello_loop, &r) != 0)
    return -EAGAIN;
  if (pthread_create(&tr, NULL, rss_loop, &r) != 0) {
    atomic_store(&r.phase, P_STOP);
    (void)pthread_join(th, NULL);
    return -EAGAIN;
  }
  sleep_ms(HOLD_MS);
  atomic_store(&r.phase, P_OPEN);
  uint64_t t0 = bench_now_ns();
  struct flood *f = NULL;
  int rc = flood_start(d->url, n, tls ? FLOOD_SILENT : FLOOD_SP_HEADER, &f);
  uint64_t open_ns = bench_now_ns() - t0;
  atomic_store(&r.phase, P_HELD);
  sleep_ms(HOLD_MS);
  unsigned held = 0;
  if (rc == 0)
    rc = flood_open(f, &held);
  long with = flood_rss_kib(d->pid);
  atomic_store(&r.phase, P_STOP);
  (void)pthread_join(th, NULL);
  (void)pthread_join(tr, NULL);
  unsigned connected = f ? flood_connected(f) : 0;
  f = flood_stop(f);
  long after = flood_wait_rss(d->pid, before + 1024, SETTLE_MS);
  if (rc < 0) {
    (void)fprintf(stderr, "bench: flood: %s\n", strerror(-rc));
    return rc;
  }
  printf("\n### %u idle connections over %s\n\n| | figure |\n|---|---:|\n", n,
         tls ? "tls+tcp://" : "ipc://");
  printf("| connections opened | %u in %.2f s |\n", connected,
         (double)open_ns / 1e9);
  printf("| of them still open %u ms later | %u |\n", HOLD_MS, held);
  printf("| sandboxd VmRSS before the flood | %.1f MiB |\n", before / 1024.0);
  printf("| peak VmRSS while opening and holding | %.1f MiB |\n",
         (double)atomic_load(&r.peak_kib) / 1024.0);
  printf("| VmRSS with the flood held | %.1f MiB |\n", with / 1024.0);
  printf("| VmRSS after the flood closed (within %u s) | %.1f MiB |\n",
         SETTLE_MS / 1000, after / 1024.0);
  printf("\n| authenticated client | Hellos | p50 ms | p99 ms | p50 / "
         "baseline | p99 / baseline | failed |\n|---|---:|---:|---:|---:|---:|"
         "---:|\n");
  uint64_t b50 = bench_percentile(r.lat[P_BASE], r.nlat[P_BASE], 50);
  uint64_t b99 = bench_percentile(r.lat[P_BASE], r.nlat[P_BASE], 99);
  for (int i = 0; i < P_COUNT; i++)
    print_latency(&r, i, b50, b99);
  for (int i = 0; i < P_COUNT; i++)
    free(r.lat[i]);
  return 0;
}

int main(int argc, char **argv) {
  static const struct option lopts[] = {{"tls", no_argument, NULL, 't'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  unsigned n = 0;
  bool tls = false;
  int ch;
  while ((ch = getopt_long(argc, argv, "n:", lopts, NULL)) != -1) {
    char *end = NULL;
    if (ch == 'n' && (n = (unsigned)strtoul(optarg, &end, 10)) > 0 && !*end)
      continue;
    if (ch == 't') {
      tls = true;
      continue;
    }
    (void)fprintf(stderr, "usage: bench_connections [-n N] [--tls] "
                          "[-- SANDBOXD-ARGS...]\n");
    return ch == 'h' ? 0 : 2;
  }
  if (!n)
    n = tls ? 3000 : 20000;
  char exe[PATH_MAX];
  if (bench_binary("SBX_SANDBOXD", "sandboxd", exe, sizeof(exe)) < 0) {
    (void)fprintf(stderr, "bench: cannot find sandboxd\n");
    return 1;
  }
  printf("## bench_connections\n\n");
  bench_print_machine(stdout);
  printf("- sandboxd: %s\n", exe);
  for (int i = optind; i < argc; i++)
    printf("- sandboxd argument: %s\n", argv[i]);
  struct bench_daemon d = {0};
  char certs[64] = "";
  int rc = start(&d, exe, tls, certs, sizeof(certs),
                 (const char **)argv + optind, (size_t)(argc - optind));
  if (rc == 0)
    rc = flood_run(&d, n, tls);
  (void)bench_daemon_stop(&d);
  if (certs[0])
    (void)bench_rm_rf(certs);
  return rc < 0 ? 1 : 0;
}
