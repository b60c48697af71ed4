/* sandboxd against doing the same thing directly in C, in one run:
 *
 *   exec        round trip of /bin/true: one ExecStart that waits for the
 *               exit, and ExecStart + ExecRead until_exit
 *               vs posix_spawn + waitpid; p50 and p99
 *   output      1 GiB from `head -c 1073741824 /dev/zero` read by ExecRead
 *               in max_read_bytes chunks vs read(2) on a plain pipe; and
 *               held for its reader (ExecStart.hold_ms) as sbx does
 *   files       100 MiB through FileWrite (WRITE_AT chunks) and FileRead vs
 *               write(2) and read(2) of a file in the same directory
 *   memory      sandboxd's VmRSS after start + Hello and after all of the
 *               above; the static binary's size and idle RSS
 *
 * Measurements of the two sides are interleaved in blocks so that load
 * from other processes falls on both alike. Prints Markdown for
 * bench/RESULTS.md.
 *
 * Usage: bench_sandboxd [--quick] [--chunk MIB]
 *                       [--only exec|output|files|memory]
 *                       [-- SANDBOXD-ARGS...]
 * --chunk: the files section's bytes per FileWrite and FileRead (a read
 * gets at most the daemon's max_read_bytes, 4 MiB);
 * --quick runs smaller sizes; SANDBOXD-ARGS are added to the daemons'
 * command lines (e.g. -- --seccomp off, to see what the filter costs). */
#include <getopt.h>
#include <spawn.h>

#include "bench/bench.h"

extern char **environ;

#define EXEC_RUNS 2000
#define EXEC_BLOCKS 10
#define EXEC_WARMUP 100
#define OUTPUT_BYTES (1ull << 30)
#define FILE_BYTES (100ull << 20)
#define FILE_ROUNDS 3
#define BIG_RETENTION "1073741824"

struct opts {
  unsigned exec_runs;
  uint64_t output_bytes;
  uint64_t file_bytes;
  const char *only; /* one section: exec, output, files or memory */
  uint32_t chunk;   /* files: bytes per FileWrite/FileRead; 0: max_read */
};

/* ---- exec round trip --------------------------------------------------- */

/* Time spent in ExecStart and in ExecRead of the two-RPC way, summed. */
static uint64_t exec_start_ns, exec_read_ns;

/* One /bin/true through sandboxd; its duration in *NS. WAITING: one
 * ExecStart that waits for the exit (what sbx does), else an ExecStart that
 * answers at once and ExecReads until the exit. */
static int sbx_true(struct sbx_client *c, bool waiting, uint64_t *ns) {
  static char *argv[] = {"/bin/true"};
  uint64_t t0 = bench_now_ns(), t1 = 0, id;
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  st.wait_ms = waiting ? 10000 : 0;
  int code;
  int r = bench_run_exec(c, &st, &id, &code, &t1);
  if (r < 0)
    return r;
  uint64_t t2 = bench_now_ns();
  if (code != 0) {
    (void)fprintf(stderr, "bench: /bin/true exited with %d\n", code);
    return -EIO;
  }
  if (!waiting) {
    exec_start_ns += t1 - t0;
    exec_read_ns += t2 - t1;
  }
  *ns = t2 - t0;
  return 0;
}

/* A bare RPC round trip (Hello), for reference. */
static int sbx_hello_rt(struct sbx_client *c, uint64_t *ns) {
  struct sbx_error e = {0};
  uint64_t t0 = bench_now_ns();
  int r = sbx_hello(c, NULL, &e);
  *ns = bench_now_ns() - t0;
  if (r < 0)
    (void)fprintf(stderr, "bench: hello: %s\n", e.msg);
  return r;
}

static int bench_exec(struct sbx_client *c, unsigned runs) {
  uint64_t *one = calloc(runs, sizeof(*one));
  uint64_t *two = calloc(runs, sizeof(*two));
  uint64_t *direct = calloc(runs, sizeof(*direct));
  uint64_t *hello = calloc(runs, sizeof(*hello));
  int r = -ENOMEM;
  if (!one || !two || !direct || !hello)
    goto out;
  uint64_t ns;
  for (unsigned i = 0; i < EXEC_WARMUP; i++)
    if ((r = sbx_true(c, true, &ns)) < 0 || (r = sbx_true(c, false, &ns)) < 0 ||
        (r = bench_spawn_true(&ns)) < 0 || (r = sbx_hello_rt(c, &ns)) < 0)
      goto out;
  exec_start_ns = exec_read_ns = 0;
  unsigned per = runs / EXEC_BLOCKS ? runs / EXEC_BLOCKS : 1;
  uint64_t t_one = 0, t_two = 0, t_direct = 0;
  for (unsigned done = 0; done < runs;) {
    unsigned n = runs - done < per ? runs - done : per;
    uint64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < n; i++)
      if ((r = sbx_true(c, true, &one[done + i])) < 0)
        goto out;
    uint64_t t1 = bench_now_ns();
    for (unsigned i = 0; i < n; i++)
      if ((r = bench_spawn_true(&direct[done + i])) < 0)
        goto out;
    uint64_t t2 = bench_now_ns();
    for (unsigned i = 0; i < n; i++)
      if ((r = sbx_true(c, false, &two[done + i])) < 0)
        goto out;
    uint64_t t3 = bench_now_ns();
    for (unsigned i = 0; i < n; i++)
      if ((r = sbx_hello_rt(c, &hello[done + i])) < 0)
        goto out;
    t_one += t1 - t0;
    t_direct += t2 - t1;
    t_two += t3 - t2;
    done += n;
  }
  double o50 = (double)bench_percentile(one, runs, 50) / 1e3;
  double o99 = (double)bench_percentile(one, runs, 99) / 1e3;
  double w50 = (double)bench_percentile(two, runs, 50) / 1e3;
  double w99 = (double)bench_percentile(two, runs, 99) / 1e3;
  double d50 = (double)bench_percentile(direct, runs, 50) / 1e3;
  double d99 = (double)bench_percentile(direct, runs, 99) / 1e3;
  double h50 = (double)bench_percentile(hello, runs, 50) / 1e3;
  double h99 = (double)bench_percentile(hello, runs, 99) / 1e3;
  printf("\n### exec round trip of /bin/true (%u runs each, interleaved in "
         "blocks of %u, after %u warm-up runs)\n\n",
         runs, per, EXEC_WARMUP);
  printf("| | p50 µs | p99 µs | mean µs |\n|---|---:|---:|---:|\n");
  printf("| sandboxd: one ExecStart waiting for the exit (as sbx runs "
         "commands) | %.1f | %.1f | %.1f |\n",
         o50, o99, (double)t_one / runs / 1e3);
  printf("| direct: posix_spawn + waitpid | %.1f | %.1f | %.1f |\n", d50, d99,
         (double)t_direct / runs / 1e3);
  printf("| sandboxd: ExecStart, then ExecRead until_exit | %.1f | %.1f | %.1f "
         "|\n",
         w50, w99, (double)t_two / runs / 1e3);
  printf("| (reference) one Hello RPC | %.1f | %.1f | |\n", h50, h99);
  printf("\ntwo-RPC mean split: ExecStart reply %.1f µs, then ExecRead until "
         "exit %.1f µs\n",
         (double)exec_start_ns / runs / 1e3, (double)exec_read_ns / runs / 1e3);
  printf("\nratio sandboxd/direct: p50 %.2fx, p99 %.2fx (target: p50 within "
         "1.5x: %s); two RPCs: p50 %.2fx\n",
         o50 / d50, o99 / d99, o50 / d50 <= 1.5 ? "met" : "NOT met", w50 / d50);
  r = 0;
out:
  free(one);
  free(two);
  free(direct);
  free(hello);
  return r;
}

/* ---- output throughput ------------------------------------------------- */

static char output_count[32];

/* `head -c BYTES /dev/zero` into a pipe read by read(2); *NS the time to
 * EOF and reaping. */
static int direct_output(uint64_t bytes, uint64_t *ns, size_t chunk) {
  char *argv[] = {"head", "-c", output_count, "/dev/zero", NULL};
  (void)bytes;
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  unsigned char *buf = malloc(chunk);
  uint64_t t0 = bench_now_ns();
  pid_t pid;
  int r = buf ? posix_spawnp(&pid, "head", &fa, NULL, argv, environ) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  (void)close(p[1]);
  if (r != 0) {
    (void)close(p[0]);
    free(buf);
    return -r;
  }
  uint64_t got = 0;
  for (;;) {
    ssize_t n = read(p[0], buf, chunk);
    if (n > 0) {
      got += (uint64_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    break;
  }
  (void)close(p[0]);
  int status;
  (void)waitpid(pid, &status, 0);
  *ns = bench_now_ns() - t0;
  free(buf);
  if (got != bytes) {
    (void)fprintf(stderr, "bench: direct output: %llu bytes\n",
                  (unsigned long long)got);
    return -EIO;
  }
  return 0;
}

struct output_result {
  uint64_t ns;
  uint64_t data; /* bytes received */
  uint64_t gap;  /* bytes the retention dropped */
  uint64_t reads;
};

/* The same command through sandboxd, read in CHUNK-byte ExecReads; with
 * HOLD_MS held for its reader as `sbx sandbox exec` does (ExecStart.hold_ms).
 */
static int sbx_output(struct sbx_client *c, uint32_t chunk, uint32_t hold_ms,
                      struct output_result *res) {
  static char *argv[] = {"head", "-c", output_count, "/dev/zero"};
  struct sbx_error e = {0};
  memset(res, 0, sizeof(*res));
  uint64_t t0 = bench_now_ns();
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 4;
  st.no_stdin = true;
  st.hold_ms = hold_ms;
  Sbx__V1__Response *r = NULL;
  int ret = sbx_exec_start(c, &st, &r, &e);
  if (ret < 0) {
    (void)fprintf(stderr, "bench: exec start: %s\n", e.msg);
    return ret;
  }
  uint64_t id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  uint64_t off = 0;
  for (;;) {
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = id;
    rd.stream = SBX__V1__STREAM__STDOUT;
    rd.offset = off;
    rd.max_bytes = chunk;
    rd.wait_ms = 10000;
    ret = sbx_exec_read(c, &rd, &r, &e);
    if (ret < 0) {
      (void)fprintf(stderr, "bench: exec read: %s\n", e.msg);
      return ret;
    }
    Sbx__V1__ExecReadReply *x = r->exec_read;
    res->data += x->data.len;
    res->gap += x->gap;
    res->reads++;
    off = x->next_offset;
    bool eof = x->eof;
    sbx_client_reply_free(r);
    if (eof)
      break;
  }
  res->ns = bench_now_ns() - t0;
  (void)sbx_exec_release(c, id, &e);
  return 0;
}

static int bench_output(struct sbx_client *def, struct sbx_client *big,
                        uint32_t chunk, uint64_t bytes) {
  (void)snprintf(output_count, sizeof(output_count), "%llu",
                 (unsigned long long)bytes);
  double d[3], s[3], b[3], h[3];
  struct output_result rs = {0}, rb = {0}, rh = {0};
  for (int i = 0; i < 3; i++) {
    uint64_t ns = 0;
    int r = direct_output(bytes, &ns, chunk);
    if (r < 0)
      return r;
    d[i] = bench_mib_s(bytes, ns);
    if ((r = sbx_output(def, chunk, 0, &rs)) < 0)
      return r;
    s[i] = bench_mib_s(rs.data, rs.ns);
    if ((r = sbx_output(big, chunk, 0, &rb)) < 0)
      return r;
    b[i] = bench_mib_s(rb.data, rb.ns);
    if ((r = sbx_output(def, 0, 30000, &rh)) < 0)
      return r;
    h[i] = bench_mib_s(rh.data, rh.ns);
    if (rb.data != bytes || rh.data != bytes) {
      (void)fprintf(stderr, "bench: lossless run received %llu bytes\n",
                    (unsigned long long)(rb.data != bytes ? rb.data : rh.data));
      return -EIO;
    }
  }
  double dm = bench_median(d, 3), sm = bench_median(s, 3),
         bm = bench_median(b, 3), hm = bench_median(h, 3);
  printf("\n### output throughput: `head -c %llu /dev/zero` (median of 3, "
         "ExecRead max_bytes %u)\n\n",
         (unsigned long long)bytes, chunk);
  printf("| | MiB/s received | ratio to pipe | bytes received | bytes lost to "
         "the retention gap | ExecReads |\n|---|---:|---:|---:|---:|---:|\n");
  printf("| direct: read(2) on a pipe | %.0f | 1.00 | %llu | 0 | |\n", dm,
         (unsigned long long)bytes);
  printf("| sandboxd, default retention (64 KiB head + 1 MiB ring) | %.0f | "
         "%.2f | %llu | %llu | %llu |\n",
         sm, sm / dm, (unsigned long long)rs.data, (unsigned long long)rs.gap,
         (unsigned long long)rs.reads);
  printf("| sandboxd, --retention %s (nothing dropped) | %.0f | %.2f | %llu "
         "| %llu | %llu |\n",
         BIG_RETENTION, bm, bm / dm, (unsigned long long)rb.data,
         (unsigned long long)rb.gap, (unsigned long long)rb.reads);
  printf("| sandboxd, default retention, held for its reader (hold_ms, as "
         "`sbx sandbox exec`; ExecRead max_bytes 0) | %.0f | %.2f | %llu | "
         "%llu | %llu |\n",
         hm, hm / dm, (unsigned long long)rh.data, (unsigned long long)rh.gap,
         (unsigned long long)rh.reads);
  printf("\n(the byte counts are from the last of the 3 runs)\n");
  return 0;
}

/* ---- files ------------------------------------------------------------- */

static int sbx_write_file(struct sbx_client *c, const char *path,
                          const unsigned char *data, uint64_t bytes,
                          uint32_t chunk) {
  struct sbx_error e = {0};
  for (uint64_t off = 0; off < bytes; off += chunk) {
    uint64_t n = bytes - off < chunk ? bytes - off : chunk;
    Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
    w.path = (char *)path;
    w.mode = SBX__V1__WRITE_MODE__WRITE_AT;
    w.offset = off;
    w.data.data = (uint8_t *)data;
    w.data.len = (size_t)n;
    int r = sbx_file_write(c, &w, NULL, &e);
    if (r < 0) {
      (void)fprintf(stderr, "bench: file write: %s\n", e.msg);
      return r;
    }
  }
  return 0;
}

static int sbx_read_file(struct sbx_client *c, const char *path, uint64_t bytes,
                         uint32_t chunk) {
  struct sbx_error e = {0};
  uint64_t off = 0;
  for (;;) {
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = (char *)path;
    rd.offset = off;
    rd.length = chunk;
    Sbx__V1__Response *r = NULL;
    int ret = sbx_file_read(c, &rd, &r, &e);
    if (ret < 0) {
      (void)fprintf(stderr, "bench: file read: %s\n", e.msg);
      return ret;
    }
    off += r->file_read->data.len;
    bool eof = r->file_read->eof || r->file_read->data.len == 0;
    sbx_client_reply_free(r);
    if (eof)
      break;
  }
  if (off != bytes) {
    (void)fprintf(stderr, "bench: file read %llu bytes, not %llu\n",
                  (unsigned long long)off, (unsigned long long)bytes);
    return -EIO;
  }
  return 0;
}

static int local_write_file(const char *path, const unsigned char *data,
                            uint64_t bytes, uint32_t chunk) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  for (uint64_t off = 0; off < bytes;) {
    size_t n = (size_t)(bytes - off < chunk ? bytes - off : chunk);
    ssize_t w = pwrite(fd, data, n, (off_t)off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int err = w < 0 ? errno : EIO;
      (void)close(fd);
      return -err;
    }
    off += (uint64_t)w;
  }
  return close(fd) < 0 ? -errno : 0;
}

static int local_read_file(const char *path, unsigned char *buf, uint64_t bytes,
                           uint32_t chunk) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  uint64_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf, chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (uint64_t)n;
  }
  (void)close(fd);
  return got == bytes ? 0 : -EIO;
}

static int bench_files(struct bench_daemon *d, uint32_t chunk, uint64_t bytes) {
  unsigned char *data = malloc(chunk);
  if (!data)
    return -ENOMEM;
  for (uint32_t i = 0; i < chunk; i++)
    data[i] = (unsigned char)(i * 131u + (i >> 12));
  char local[160];
  (void)snprintf(local, sizeof(local), "%s/local.bin", d->root);
  double sw[FILE_ROUNDS], sr[FILE_ROUNDS], lw[FILE_ROUNDS], lr[FILE_ROUNDS];
  int r = 0;
  for (int i = 0; i < FILE_ROUNDS && r == 0; i++) {
    char name[32];
    (void)snprintf(name, sizeof(name), "sbx-%d.bin", i);
    uint64_t t0 = bench_now_ns();
    if ((r = sbx_write_file(d->client, name, data, bytes, chunk)) < 0)
      break;
    uint64_t t1 = bench_now_ns();
    if ((r = local_write_file(local, data, bytes, chunk)) < 0)
      break;
    uint64_t t2 = bench_now_ns();
    if ((r = sbx_read_file(d->client, name, bytes, chunk)) < 0)
      break;
    uint64_t t3 = bench_now_ns();
    if ((r = local_read_file(local, data, bytes, chunk)) < 0)
      break;
    uint64_t t4 = bench_now_ns();
    sw[i] = bench_mib_s(bytes, t1 - t0);
    lw[i] = bench_mib_s(bytes, t2 - t1);
    sr[i] = bench_mib_s(bytes, t3 - t2);
    lr[i] = bench_mib_s(bytes, t4 - t3);
    char full[160];
    (void)snprintf(full, sizeof(full), "%s/%s", d->root, name);
    (void)unlink(full);
    (void)unlink(local);
  }
  free(data);
  if (r < 0)
    return r;
  double swm = bench_median(sw, FILE_ROUNDS),
         lwm = bench_median(lw, FILE_ROUNDS);
  double srm = bench_median(sr, FILE_ROUNDS),
         lrm = bench_median(lr, FILE_ROUNDS);
  printf("\n### files: %llu MiB in %u KiB chunks (median of %d; page cache "
         "warm, not dropped; no fsync on either side)\n\n",
         (unsigned long long)(bytes >> 20), chunk >> 10, FILE_ROUNDS);
  printf("| | sandboxd MiB/s | local MiB/s | ratio sandboxd/local |\n"
         "|---|---:|---:|---:|\n");
  printf("| write: FileWrite WRITE_AT vs pwrite(2) | %.0f | %.0f | %.2f |\n",
         swm, lwm, swm / lwm);
  printf("| read: FileRead vs read(2) | %.0f | %.0f | %.2f |\n", srm, lrm,
         srm / lrm);
  return 0;
}

/* ---- memory and size --------------------------------------------------- */

/* True when the ELF file at PATH has a .symtab section (not stripped). */
static int elf_has_symtab(const char *path, bool *has) {
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  unsigned char eh[64];
  int r = -EINVAL;
  if (fread(eh, 1, sizeof(eh), f) != sizeof(eh) || memcmp(eh, "\177ELF", 4) ||
      eh[4] != 2 /* 64-bit */)
    goto out;
  uint64_t shoff;
  uint16_t shentsize, shnum, shstrndx;
  memcpy(&shoff, eh + 0x28, 8);
  memcpy(&shentsize, eh + 0x3a, 2);
  memcpy(&shnum, eh + 0x3c, 2);
  memcpy(&shstrndx, eh + 0x3e, 2);
  if (shentsize != 64 || shstrndx >= shnum)
    goto out;
  *has = false;
  for (uint16_t i = 0; i < shnum; i++) {
    unsigned char sh[64];
    if (fseeko(f, (off_t)(shoff + (uint64_t)i * 64), SEEK_SET) < 0 ||
        fread(sh, 1, 64, f) != 64)
      goto out;
    uint32_t type;
    memcpy(&type, sh + 4, 4);
    if (type == 2 /* SHT_SYMTAB */)
      *has = true;
  }
  r = 0;
out:
  (void)fclose(f);
  return r;
}

static void print_static(const char *src) {
  char path[PATH_MAX + 32];
  const char *env = getenv("SBX_SANDBOXD_STATIC");
  if (env && *env)
    (void)snprintf(path, sizeof(path), "%s", env);
  else
    (void)snprintf(path, sizeof(path), "%s/build-static/sandboxd", src);
  struct stat st;
  if (stat(path, &st) < 0) {
    printf("\nstatic binary: %s not found (run `make static`); not "
           "measured\n",
           path);
    return;
  }
  bool symtab = true;
  int r = elf_has_symtab(path, &symtab);
  double mib = (double)st.st_size / (1024.0 * 1024.0);
  printf("| static binary size (%s, %s) | %.2f MiB (%lld bytes) | %s |\n", path,
         r < 0    ? "not an ELF64 file?"
         : symtab ? "NOT stripped"
                  : "stripped",
         mib, (long long)st.st_size, mib < 4 ? "met" : "NOT met");
  struct bench_daemon d;
  if (bench_daemon_start(&d, path, NULL) < 0)
    return;
  struct sbx_error e = {0};
  if (sbx_hello(d.client, NULL, &e) == 0) {
    long kib = bench_rss_kib(d.pid);
    printf("| static sandboxd idle VmRSS after start + Hello | %.2f MiB | %s "
           "|\n",
           (double)kib / 1024.0, kib < 4096 ? "met" : "NOT met");
  }
  (void)bench_daemon_stop(&d);
}

/* ---- main -------------------------------------------------------------- */

/* --chunk's MiB, 1 to 64, into *BYTES. */
static bool chunk_mib(const char *arg, uint32_t *bytes) {
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(arg, &end, 10);
  if (errno || end == arg || *end || v < 1 || v > 64)
    return false;
  *bytes = (uint32_t)v << 20;
  return true;
}

int main(int argc, char **argv) {
  struct opts o = {EXEC_RUNS, OUTPUT_BYTES, FILE_BYTES, NULL, 0};
  static const struct option lopts[] = {{"quick", no_argument, NULL, 'q'},
                                        {"chunk", required_argument, NULL, 'c'},
                                        {"only", required_argument, NULL, 'o'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
    if (ch == 'q') {
      o.exec_runs = 200;
      o.output_bytes = 64ull << 20;
      o.file_bytes = 16ull << 20;
    } else if (ch == 'o' &&
               (strcmp(optarg, "exec") == 0 || strcmp(optarg, "output") == 0 ||
                strcmp(optarg, "files") == 0 ||
                strcmp(optarg, "memory") == 0)) {
      o.only = optarg;
    } else if (ch == 'c' && chunk_mib(optarg, &o.chunk)) {
      continue;
    } else {
      (void)fprintf(stderr, "usage: bench_sandboxd [--quick] [--chunk MIB] "
                            "[--only exec|output|files|memory] "
                            "[-- SANDBOXD-ARGS...]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
#define RUN(name) (!o.only || strcmp(o.only, name) == 0)
  char exe[PATH_MAX], src[PATH_MAX];
  if (bench_binary("SBX_SANDBOXD", "sandboxd", exe, sizeof(exe)) < 0 ||
      bench_source_dir(__FILE__, src, sizeof(src)) < 0) {
    (void)fprintf(stderr, "bench: cannot find sandboxd\n");
    return 1;
  }
  printf("## bench_sandboxd\n\n");
  bench_print_machine(stdout);
  printf("- sandboxd: %s\n", exe);

  /* Arguments after the options (after "--") go to both daemons. */
  const char *dargs[24] = {NULL}, *bargs[26] = {"--retention", BIG_RETENTION};
  for (int i = optind, n = 0; i < argc && n < 23; i++, n++) {
    dargs[n] = argv[i];
    bargs[n + 2] = argv[i];
    printf("- sandboxd argument: %s\n", argv[i]);
  }
  struct bench_daemon d, big;
  if (bench_daemon_start(&d, exe, dargs) < 0)
    return 1;
  if (bench_daemon_start(&big, exe, bargs) < 0) {
    (void)bench_daemon_stop(&d);
    return 1;
  }
  int rc = 1;
  struct sbx_error e = {0};
  Sbx__V1__Response *hello = NULL;
  if (sbx_hello(d.client, &hello, &e) < 0) {
    (void)fprintf(stderr, "bench: hello: %s\n", e.msg);
    goto out;
  }
  uint32_t chunk = (uint32_t)hello->hello->limits->max_read_bytes;
  sbx_client_reply_free(hello);
  long rss_idle = bench_rss_kib(d.pid);

  if ((RUN("exec") && bench_exec(d.client, o.exec_runs) < 0) ||
      (RUN("output") &&
       bench_output(d.client, big.client, chunk, o.output_bytes) < 0) ||
      (RUN("files") &&
       bench_files(&d, o.chunk ? o.chunk : chunk, o.file_bytes) < 0))
    goto out;
  long rss_after = bench_rss_kib(d.pid);

  printf("\n### memory and size\n\n| | figure | target (under 4 MiB) |\n"
         "|---|---:|---|\n");
  printf("| sandboxd idle VmRSS after start + Hello | %.2f MiB | %s |\n",
         (double)rss_idle / 1024.0, rss_idle < 4096 ? "met" : "NOT met");
  if (!o.only)
    printf("| sandboxd VmRSS after the exec, output and file benchmarks | "
           "%.2f MiB | |\n",
           (double)rss_after / 1024.0);
  print_static(src);
  rc = 0;
out:
  (void)bench_daemon_stop(&big);
  (void)bench_daemon_stop(&d);
  return rc;
}
