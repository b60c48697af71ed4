/* Helpers shared by the benchmark programs: clocks, percentiles, the
 * machine's description, paths of the built binaries, and a real sandboxd
 * started the way the local backend starts it (private ipc:// socket in a
 * 0700 directory, a random token on an fd, --ready-fd). Header-only, so
 * that bench/CMakeLists.txt stays a plain glob of bench_*.c.
 *
 * Benchmarks never assert on time: they print figures and ratios against a
 * baseline measured in the same run (see bench/RESULTS.md). Every helper
 * returns 0 or a negative errno and prints what went wrong to stderr;
 * nothing here exits. Not thread-safe. */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/client.h"
#include "shared/rand.h"

/* ---- clocks and statistics ------------------------------------------- */

static inline uint64_t bench_now_ns(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One /bin/true by posix_spawn + waitpid in this process, the baseline of
 * every exec figure; its duration in *NS. */
static inline int bench_spawn_true(uint64_t *ns) {
  static char *argv[] = {"/bin/true", NULL};
  extern char **environ;
  uint64_t t0 = bench_now_ns();
  pid_t pid;
  int r = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
  if (r != 0) {
    (void)fprintf(stderr, "bench: posix_spawn: %s\n", strerror(r));
    return -r;
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -errno;
  *ns = bench_now_ns() - t0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    (void)fprintf(stderr, "bench: /bin/true exited with %d\n", status);
    return -EIO;
  }
  return 0;
}

static inline int bench_cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The P-th percentile (0..100, nearest rank) of N values; sorts V. */
static inline uint64_t bench_percentile(uint64_t *v, size_t n, double p) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), bench_cmp_u64);
  size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return v[rank - 1];
}

/* The median of N doubles; sorts V. */
static inline double bench_median(double *v, size_t n) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), bench_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static inline double bench_mib_s(uint64_t bytes, uint64_t ns) {
  return ns ? (double)bytes / (1024.0 * 1024.0) / ((double)ns / 1e9) : 0;
}

/* ---- the machine ------------------------------------------------------ */

/* Prints nproc, kernel, CPU model and load average as Markdown bullets. */
static inline void bench_print_machine(FILE *out) {
  struct utsname u;
  char model[256] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "re");
  if (f) {
    char line[512];
    while (fgets(line, sizeof(line), f))
      if (strncmp(line, "model name", 10) == 0) {
        const char *c = strchr(line, ':');
        if (c) {
          c++;
          while (*c == ' ' || *c == '\t')
            c++;
          (void)snprintf(model, sizeof(model), "%.*s", (int)strcspn(c, "\n"),
                         c);
        }
        break;
      }
    (void)fclose(f);
  }
  double load[3] = {0, 0, 0};
  (void)getloadavg(load, 3);
  (void)uname(&u);
  (void)fprintf(out,
                "- machine: nproc %ld, kernel %s %s, CPU \"%s\"\n"
                "- load average at start: %.2f %.2f %.2f\n",
                sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, model,
                load[0], load[1], load[2]);
}

/* ---- paths ------------------------------------------------------------ */

/* The build directory: the parent of the directory holding this program
 * (build/bench/bench_x -> build). */
static inline int bench_build_dir(char *out, size_t size) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return -errno;
  exe[n] = '\0';
  for (int i = 0; i < 2; i++) {
    char *slash = strrchr(exe, '/');
    if (!slash)
      return -ENOENT;
    *slash = '\0';
  }
  if ((size_t)snprintf(out, size, "%s", exe) >= size)
    return -ENAMETOOLONG;
  return 0;
}

/* The source tree's root, from this header's own path (CMake compiles with
 * absolute paths: <root>/bench/bench_x.c). */
static inline int bench_source_dir(const char *file, char *out, size_t size) {
  if ((size_t)snprintf(out, size, "%s", file) >= size)
    return -ENAMETOOLONG;
  for (int i = 0; i < 2; i++) {
    char *slash = strrchr(out, '/');
    if (!slash)
      return -ENOENT;
    *slash = '\0';
  }
  return 0;
}

/* ENV when set, else BUILD_DIR/NAME. */
static inline int bench_binary(const char *env, const char *name, char *out,
                               size_t size) {
  const char *p = getenv(env);
  if (p && *p) {
    if ((size_t)snprintf(out, size, "%s", p) >= size)
      return -ENAMETOOLONG;
    return 0;
  }
  char dir[PATH_MAX];
  int r = bench_build_dir(dir, sizeof(dir));
  if (r < 0)
    return r;
  if ((size_t)snprintf(out, size, "%s/%s", dir, name) >= size)
    return -ENAMETOOLONG;
  return 0;
}

static inline int bench_rm_one(const char *path, const struct stat *st,
                               int flag, struct FTW *ftw) {
  (void)st;
  (void)ftw;
  if (flag == FTW_DP)
    return rmdir(path) < 0 ? -1 : 0;
  return unlink(path) < 0 ? -1 : 0;
}

/* Removes the tree at PATH (no symlinks followed). */
static inline int bench_rm_rf(const char *path) {
  if (nftw(path, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
    return -errno;
  return 0;
}

/* VmRSS of PID in KiB, or a negative errno. */
static inline long bench_rss_kib(pid_t pid) {
  char path[64];
  (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  char line[256];
  long kib = -ENOENT;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "VmRSS:", 6) == 0) {
      char *end = NULL;
      long v = strtol(line + 6, &end, 10);
      if (end != line + 6)
        kib = v;
      break;
    }
  (void)fclose(f);
  return kib;
}

/* ---- sandboxd --------------------------------------------------------- */

struct bench_daemon {
  pid_t pid;
  char dir[64];   /* temp dir: ws/ (the root) and run/ (the socket) */
  char root[96];  /* dir/ws */
  char url[128];  /* ipc://dir/run/sock */
  char token[65]; /* hex */
  struct sbx_client *client;
};

static inline int bench_daemon_stop(struct bench_daemon *d);

/* Starts EXE (a sandboxd) with extra arguments ARGS (NULL-terminated, may be
 * NULL), waits for its ready line and connects a client. */
static inline int bench_daemon_start(struct bench_daemon *d, const char *exe,
                                     const char *const *args) {
  memset(d, 0, sizeof(*d));
  (void)snprintf(d->dir, sizeof(d->dir), "/tmp/sbx-bench-XXXXXX");
  if (!mkdtemp(d->dir)) {
    int err = errno;
    (void)fprintf(stderr, "bench: mkdtemp: %s\n", strerror(err));
    d->dir[0] = '\0';
    return -err;
  }
  char run[96];
  (void)snprintf(d->root, sizeof(d->root), "%s/ws", d->dir);
  (void)snprintf(run, sizeof(run), "%s/run", d->dir);
  (void)snprintf(d->url, sizeof(d->url), "ipc://%s/sock", run);
  if (mkdir(d->root, 0755) < 0 || mkdir(run, 0700) < 0 ||
      sbx_random_hex(d->token, 32) < 0) {
    int err = errno;
    (void)fprintf(stderr, "bench: setting up %s: %s\n", d->dir, strerror(err));
    (void)bench_daemon_stop(d);
    return -err;
  }
  int tokp[2], readyp[2];
  if (pipe2(tokp, O_CLOEXEC) < 0)
    return -errno;
  if (pipe2(readyp, O_CLOEXEC) < 0) {
    int err = errno;
    (void)close(tokp[0]);
    (void)close(tokp[1]);
    return -err;
  }
  size_t tl = strlen(d->token);
  ssize_t w = write(tokp[1], d->token, tl);
  (void)close(tokp[1]);
  const char *argv[32];
  size_t n = 0;
  argv[n++] = exe;
  argv[n++] = "--listen";
  argv[n++] = d->url;
  argv[n++] = "--root";
  argv[n++] = d->root;
  argv[n++] = "--token-fd";
  argv[n++] = "3";
  argv[n++] = "--ready-fd";
  argv[n++] = "4";
  for (size_t i = 0; args && args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = w == (ssize_t)tl ? fork() : -1;
  if (pid == 0) {
    /* Move both above 4 first: either may already be fd 3 or 4. */
    int tok = fcntl(tokp[0], F_DUPFD, 10);
    int rdy = fcntl(readyp[1], F_DUPFD, 10);
    if (tok < 0 || rdy < 0 || dup2(tok, 3) < 0 || dup2(rdy, 4) < 0)
      _exit(127);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  (void)close(tokp[0]);
  (void)close(readyp[1]);
  if (pid < 0) {
    (void)close(readyp[0]);
    (void)fprintf(stderr, "bench: cannot start %s\n", exe);
    (void)bench_daemon_stop(d);
    return -EIO;
  }
  d->pid = pid;
  struct pollfd pfd = {.fd = readyp[0], .events = POLLIN};
  char line[256] = {0};
  ssize_t got =
      poll(&pfd, 1, 10000) > 0 ? read(readyp[0], line, sizeof(line) - 1) : -1;
  (void)close(readyp[0]);
  if (got <= 0 || strncmp(line, "ready ", 6) != 0) {
    (void)fprintf(stderr, "bench: %s did not become ready\n", exe);
    (void)bench_daemon_stop(d);
    return -EIO;
  }
  struct sbx_client_config cfg = {
      .url = d->url,
      .token = (const uint8_t *)d->token,
      .token_len = tl,
      .timeout_ms = 30000,
      .retries = 1,
  };
  struct sbx_error e = {0};
  int r = sbx_client_new(&cfg, &d->client, &e);
  if (r < 0) {
    (void)fprintf(stderr, "bench: client: %s\n", e.msg);
    (void)bench_daemon_stop(d);
    return r;
  }
  return 0;
}

/* Shuts the daemon down (Shutdown, then SIGKILL after 5 s), frees the
 * client and removes the temp dir. Returns the daemon's wait status, or -1
 * when there was none. */
static inline int bench_daemon_stop(struct bench_daemon *d) {
  int status = -1;
  if (d->client) {
    struct sbx_error e = {0};
    (void)sbx_shutdown(d->client, 100, &e);
    d->client = sbx_client_free(d->client);
  } else if (d->pid > 0) {
    (void)kill(d->pid, SIGTERM);
  }
  if (d->pid > 0) {
    for (int i = 0;; i++) {
      if (waitpid(d->pid, &status, WNOHANG) == d->pid)
        break;
      if (i == 500) {
        (void)kill(d->pid, SIGKILL);
        (void)waitpid(d->pid, &status, 0);
        break;
      }
      (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    d->pid = 0;
  }
  if (d->dir[0]) {
    (void)bench_rm_rf(d->dir);
    d->dir[0] = '\0';
  }
  return status;
}

/* ---- running a command through sandboxd ---- */

/* Runs ST through C as sbx does: its ExecStart waits (if ST asks) and, when
 * the process has not exited and closed its output by then, ExecReads from
 * where the start's read ended. *ID and *CODE get the exec id and the exit
 * code; *STARTED_NS (may be NULL) the time the start's reply came. 0, or a
 * negative errno after saying why on stderr. */
static inline int bench_run_exec(struct sbx_client *c, Sbx__V1__ExecStart *st,
                                 uint64_t *id, int *code,
                                 uint64_t *started_ns) {
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  int ret = sbx_exec_start(c, st, &r, &e);
  if (ret < 0) {
    (void)fprintf(stderr, "bench: exec start: %s\n", e.msg);
    return ret;
  }
  if (started_ns)
    *started_ns = bench_now_ns();
  *id = r->exec_start->exec_id;
  const Sbx__V1__ExecReadReply *x = r->exec_start->output; /* none: no wait */
  bool done = x && x->exited && x->eof;
  uint64_t off = x ? x->next_offset : 0;
  *code = x ? x->exit_code : 0;
  sbx_client_reply_free(r);
  while (!done) {
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = *id;
    rd.stream = SBX__V1__STREAM__STDOUT;
    rd.offset = off;
    rd.max_bytes = st->max_bytes;
    rd.wait_ms = 10000;
    rd.until_exit = true;
    ret = sbx_exec_read(c, &rd, &r, &e);
    if (ret < 0) {
      (void)fprintf(stderr, "bench: exec read: %s\n", e.msg);
      return ret;
    }
    done = r->exec_read->exited && r->exec_read->eof;
    off = r->exec_read->next_offset;
    *code = r->exec_read->exit_code;
    sbx_client_reply_free(r);
  }
  return 0;
}

/* ---- the 200 MiB tree of bench_archive and bench_snapshot ---- */

struct bench_tree {
  unsigned files, dirs; /* dirs: TOP and the empty one included */
  uint64_t bytes;
};

#define BENCH_TREE_POOL (16u << 20)

static inline uint64_t bench_tree_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static inline int bench_tree_file(const char *path, size_t size,
                                  const unsigned char *pool, uint64_t *rng) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  int r = 0;
  for (size_t left = size; left > 0 && r == 0;) {
    size_t off = bench_tree_rand(rng) % (BENCH_TREE_POOL / 2);
    size_t n = left < BENCH_TREE_POOL / 2 ? left : BENCH_TREE_POOL / 2;
    ssize_t w = write(fd, pool + off, n);
    if (w < 0)
      r = -errno;
    else
      left -= (size_t)w;
  }
  if (close(fd) < 0 && r == 0)
    r = -errno;
  return r;
}

/* Builds under TOP (created if missing), the same on every run: 40
 * directories of 4 subdirectories each; 2400 small files (1-32 KiB), 500
 * medium ones (64-448 KiB), then 4-8 MiB files up to BYTES in all, half
 * random bytes, half text; a symlink and an empty directory. 0, or a
 * negative errno after naming the path on stderr. */
static inline int bench_build_tree(const char *top, uint64_t bytes,
                                   struct bench_tree *st) {
  *st = (struct bench_tree){0};
  unsigned char *pool = malloc(BENCH_TREE_POOL);
  if (!pool) {
    (void)fprintf(stderr, "bench: building the tree: out of memory\n");
    return -ENOMEM;
  }
  uint64_t rng = 0x243f6a8885a308d3ull;
  for (size_t i = 0; i < BENCH_TREE_POOL / 2; i += 8) {
    uint64_t r = bench_tree_rand(&rng);
    memcpy(pool + i, &r, 8);
  }
  static const char text[] = "the quick brown fox jumps over the lazy dog\n";
  for (size_t i = BENCH_TREE_POOL / 2; i < BENCH_TREE_POOL; i++)
    pool[i] = (unsigned char)text[i % (sizeof(text) - 1)];
  char p[PATH_MAX]; /* the path made last, named when it fails */
  (void)snprintf(p, sizeof(p), "%s", top);
  int r = mkdir(top, 0755) < 0 && errno != EEXIST ? -errno : 0;
  st->dirs = 1;
  for (int i = 0; i < 40 && r == 0; i++)
    for (int j = -1; j < 4 && r == 0; j++) {
      if (j < 0)
        (void)snprintf(p, sizeof(p), "%s/d%02d", top, i);
      else
        (void)snprintf(p, sizeof(p), "%s/d%02d/s%d", top, i, j);
      r = mkdir(p, 0755) < 0 ? -errno : 0;
      st->dirs++;
    }
  unsigned n = 0;
  for (; r == 0 && (n < 2900 || st->bytes < bytes); n++) {
    size_t size;
    if (n < 2400)
      size = 1024 + bench_tree_rand(&rng) % (31 * 1024);
    else if (n < 2900)
      size = (64 << 10) + bench_tree_rand(&rng) % (384 << 10);
    else
      size = (4u << 20) + bench_tree_rand(&rng) % (4u << 20);
    if (n >= 2900 && st->bytes + size > bytes)
      size = (size_t)(bytes - st->bytes);
    (void)snprintf(p, sizeof(p), "%s/d%02u/s%u/f%04u.dat", top, n % 40,
                   (n / 40) % 4, n);
    r = bench_tree_file(p, size, pool, &rng);
    st->bytes += size;
  }
  st->files = n;
  free(pool);
  if (r == 0) {
    (void)snprintf(p, sizeof(p), "%s/d00/link", top);
    r = symlink("s0/f0000.dat", p) < 0 ? -errno : 0;
  }
  if (r == 0) {
    (void)snprintf(p, sizeof(p), "%s/empty", top);
    r = mkdir(p, 0755) < 0 ? -errno : 0;
    st->dirs++;
  }
  if (r < 0)
    (void)fprintf(stderr, "bench: building the tree: %s: %s\n", p,
                  strerror(-r));
  return r;
}

#endif
