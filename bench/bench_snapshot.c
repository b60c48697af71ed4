/* Snapshot save and restore of a 200 MiB workspace served by a real
 * sandboxd (the local backend), against GNU tar with zstd on the same tree,
 * in one run.
 *
 *   bench_snapshot [-v] [DIR]
 *
 * Builds the tree (a few thousand files of mixed sizes, half random bytes,
 * half text) in a local sandbox's workspace under DIR (default $TMPDIR or
 * /tmp), then measures, best of 3:
 *   save:    snapshot_save (local, zstd) into a snapshot directory, against
 *            `tar -I zstd -cf FILE -C TREE .`;
 *   restore: snapshot_restore of that snapshot into a second, empty local
 *            sandbox, against `tar -I zstd -xf FILE -C EMPTYDIR`.
 * Every timed run starts after sync(2), and the destinations are emptied
 * before it, outside the timing. Peak memory: the second sandbox's
 * sandboxd's VmHWM (/proc/PID/status, the largest of its processes), reset
 * before each restore through /proc/PID/clear_refs, against tar's (its
 * ru_maxrss, zstd's included). snapshot_save fsyncs its file and
 * directory; tar does not (its writeback lands in the next sync, untimed).
 * Everything is removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/local/local.h"
#include "backends/local/local_internal.h"
#include "bench/bench.h"
#include "controller/backend/backend.h"
#include "controller/snapshot/snapshot.h"
#include "shared/clock.h"
#include "shared/log.h"

#define TREE_BYTES (200ull << 20)
#define RUNS 3

extern char **environ;

static void die(const char *what, const char *why) {
  fprintf(stderr, "bench_snapshot: %s: %s\n", what, why);
  exit(1);
}

static void die_errno(const char *what) {
  die(what, strerror(errno));
}

/* ---- helpers ---- */

static double now_s(void) {
  return (double)sbx_now_ns() / 1e9;
}

/* Runs ARGV; its peak resident set (KiB, its children's included) in
 * *MAXRSS_KB. */
static void run(const char *const argv[], long *maxrss_kb) {
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ);
  if (r != 0)
    die(argv[0], strerror(r));
  int st;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) < 0)
    die_errno("wait4");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    die(argv[0], "failed");
  *maxrss_kb = ru.ru_maxrss;
}

/* The children of PID (at most MAX) into OUT; their number. */
static size_t children(pid_t pid, pid_t *out, size_t max) {
  char p[64];
  (void)snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  FILE *f = fopen(p, "r");
  size_t n = 0;
  int c;
  while (f && n < max && fscanf(f, "%d", &c) == 1)
    out[n++] = (pid_t)c;
  if (f)
    (void)fclose(f);
  return n;
}

/* PID's peak resident set since the last reset, KiB (VmHWM). */
static long hwm_one(pid_t pid) {
  char p[64], line[256];
  (void)snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "r");
  if (!f)
    return 0; /* gone */
  long kb = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
      break;
  (void)fclose(f);
  return kb;
}

/* Resets the peak resident set of PID and its descendants (an isolated
 * sandboxd serves from a child in its namespaces) to their current one. */
static void hwm_reset(pid_t pid) {
  char p[64];
  (void)snprintf(p, sizeof(p), "/proc/%d/clear_refs", (int)pid);
  FILE *f = fopen(p, "w");
  if (!f || fputs("5", f) < 0 || fclose(f) != 0)
    die_errno(p);
  pid_t kids[16];
  size_t n = children(pid, kids, 16);
  for (size_t i = 0; i < n; i++)
    hwm_reset(kids[i]);
}

/* The largest peak resident set of PID and its descendants since the
 * last reset, KiB. */
static long hwm_kb(pid_t pid) {
  long kb = hwm_one(pid);
  pid_t kids[16];
  size_t n = children(pid, kids, 16);
  for (size_t i = 0; i < n; i++) {
    long k = hwm_kb(kids[i]);
    if (k > kb)
      kb = k;
  }
  return kb;
}

/* Empties DIR (keeps DIR itself). */
static void empty_dir(const char *dir) {
  char cmd[PATH_MAX + 64];
  (void)snprintf(cmd, sizeof(cmd),
                 "find '%s' -mindepth 1 -maxdepth 1 -exec rm -rf {} +", dir);
  if (system(cmd) != 0)
    die("find", dir);
}

static uint64_t file_size(const char *p) {
  struct stat st;
  if (stat(p, &st) < 0)
    die_errno(p);
  return (uint64_t)st.st_size;
}

/* The sandboxd next to this program's directory (build/bench/..). */
static void find_sandboxd(char *out, size_t n) {
  const char *env = getenv("SBX_SANDBOXD");
  if (env) {
    (void)snprintf(out, n, "%s", env);
    return;
  }
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (k < 0)
    die_errno("/proc/self/exe");
  self[k] = '\0';
  (void)snprintf(out, n, "%s/../sandboxd", dirname(self));
}

static double best(const double *v) {
  double b = v[0];
  for (int i = 1; i < RUNS; i++)
    if (v[i] < b)
      b = v[i];
  return b;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    sbx_log_set_level(SBX_LOG_DEBUG); /* the phases of each of our runs */
    argc--;
    argv++;
  }
  const char *parent = argc > 1 ? argv[1] : getenv("TMPDIR");
  if (!parent || !*parent)
    parent = "/tmp";
  char base[1024];
  (void)snprintf(base, sizeof(base), "%s/bench-snapshot-XXXXXX", parent);
  if (!mkdtemp(base))
    die_errno(base);
  char sandboxd[PATH_MAX];
  find_sandboxd(sandboxd, sizeof(sandboxd));
  struct backend_options o = {.sandboxd_path = sandboxd,
                              .workspace_base = base};
  struct sandbox *src = NULL, *dst = NULL;
  struct sbx_error e = {0};
  if (backend_local.create(&o, NULL, &src, &e) < 0 ||
      backend_local.create(&o, NULL, &dst, &e) < 0)
    die("local sandbox", e.msg);

  /* The workspaces as this process sees them (commands see them at
   * their root inside the sandboxes' namespaces). */
  const char *src_dir = ((const struct local *)src->priv)->workspace;
  const char *dst_dir = ((const struct local *)dst->priv)->workspace;
  struct bench_tree st = {0};
  if (bench_build_tree(src_dir, TREE_BYTES, &st) < 0)
    exit(1);
  char snaps[PATH_MAX], tarfile[PATH_MAX], tarout[PATH_MAX];
  (void)snprintf(snaps, sizeof(snaps), "%s/snapshots", base);
  (void)snprintf(tarfile, sizeof(tarfile), "%s/tree.tar.zst", base);
  (void)snprintf(tarout, sizeof(tarout), "%s/tar-out", base);
  if (mkdir(tarout, 0755) < 0)
    die_errno(tarout);

  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL, .base_dir = snaps};
  struct snapshot_record rec = {0};
  double save[RUNS], tsave[RUNS], restore[RUNS], trestore[RUNS];
  long rss = 0, trss = 0, kb = 0; /* the peaks over the restores, KiB */
  pid_t dst_pid = ((const struct local *)dst->priv)->pid;
  uint64_t members = 0;
  for (int i = 0; i < RUNS; i++) {
    sync();
    double t0 = now_s();
    snapshot_record_clear(&rec);
    if (snapshot_save(&spec, src, NULL, NULL, &rec, NULL, NULL, &e) < 0)
      die("snapshot_save", e.msg);
    save[i] = now_s() - t0;

    (void)unlink(tarfile);
    sync();
    t0 = now_s();
    const char *const tc[] = {"tar", "-I",    "zstd", "-cf", tarfile,
                              "-C",  src_dir, ".",    NULL};
    run(tc, &kb);
    tsave[i] = now_s() - t0;

    empty_dir(dst_dir);
    sync();
    hwm_reset(dst_pid);
    t0 = now_s();
    struct snapshot_restore_result res = {0};
    if (snapshot_restore(&spec, &rec, dst, NULL, NULL, &res, NULL, NULL, &e) <
        0)
      die("snapshot_restore", e.msg);
    restore[i] = now_s() - t0;
    members = res.members;
    kb = hwm_kb(dst_pid);
    if (kb > rss)
      rss = kb;

    empty_dir(tarout);
    sync();
    t0 = now_s();
    const char *const tx[] = {"tar",   "-I", "zstd", "-xf",
                              tarfile, "-C", tarout, NULL};
    run(tx, &kb);
    trestore[i] = now_s() - t0;
    if (kb > trss)
      trss = kb;
    fprintf(stderr,
            "run %d: save %.3f s (tar %.3f s), restore %.3f s (tar %.3f s), "
            "sandboxd peak %.1f MiB\n",
            i + 1, save[i], tsave[i], restore[i], trestore[i],
            (double)hwm_kb(dst_pid) / 1024);
  }

  /* The restored tree is the source tree. */
  char cmd[3 * PATH_MAX];
  (void)snprintf(cmd, sizeof(cmd), "diff -r --no-dereference '%s' '%s' >&2",
                 src_dir, dst_dir);
  if (system(cmd) != 0)
    die("diff", "the restored workspace differs from the source");

  uint64_t tar_bytes = file_size(tarfile);
  printf("tree: %u files, %u dirs, %.1f MiB; snapshot %.1f MiB "
         "(%" PRIu64 " members), tar.zst %.1f MiB\n",
         st.files, st.dirs, (double)st.bytes / (1 << 20),
         (double)rec.size / (1 << 20), members, (double)tar_bytes / (1 << 20));
  printf("best of %d       sbx        tar -I zstd   ratio (sbx/tar)\n", RUNS);
  printf("save          %7.3f s    %7.3f s      %.2f\n", best(save),
         best(tsave), best(save) / best(tsave));
  printf("restore       %7.3f s    %7.3f s      %.2f\n", best(restore),
         best(trestore), best(restore) / best(trestore));
  printf("restore peak RSS  sandboxd %.1f MiB, tar -I zstd -xf %.1f MiB\n",
         (double)rss / 1024, (double)trss / 1024);
  printf("save rate     %7.1f MiB/s of workspace\n",
         (double)st.bytes / (1 << 20) / best(save));

  snapshot_record_clear(&rec);
  (void)backend_local.close(src, &e);
  (void)backend_local.close(dst, &e);
  (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
  if (system(cmd) != 0)
    die("rm", base);
  return 0;
}
