/* Archive export and import through sandboxd's handlers, against GNU tar on
 * the same tree in the same run.
 *
 *   bench_archive [-v] [-n RUNS] [DIR]
 *
 * Builds a 200 MiB tree (a few thousand files of mixed sizes) in a temporary
 * directory under DIR (default $TMPDIR or /tmp), then measures, best of
 * RUNS (default 3):
 *   export: ArchiveExportStart (streamed: the archive is produced while it
 *           is read) + ArchiveExportRead of every chunk until eof into a
 *           file + ArchiveClose, against `tar -cf FILE -C TREE .`;
 *   import: ArchiveImportStart + ArchiveImportWrite of the file in chunks +
 *           ArchiveImportFinish + ArchiveClose into a new directory (which
 *           sandboxd extracts while the archive arrives), against
 *           `tar -xf FILE -C D` of the same (pax) file; and the same import
 *           into a directory holding one other file (checked and extracted
 *           at the finish), against the same tar figures.
 * Wall time decides; CPU time (user + system, ours from getrusage, tar's
 * from wait4) is printed beside it because it suffers less from other
 * processes on a shared machine. Every timed run starts after sync(2) so
 * earlier runs' writeback does not land in it; ours and tar take turns going
 * first; every import gets a new directory. The temporary tree is removed at
 * the end. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "sandboxd/archive/transfer.h"
#include "shared/clock.h"

#define TREE_BYTES (200ull << 20)
#define RUNS_MAX 20

extern char **environ;

static struct sandboxd d;
static bool verbose;   /* -v: time the phases of each of our runs */
static int runs = 3;   /* -n: timed runs of each side, best counts */
static char base[256]; /* the temp dir; ws/ inside is the root */
static char root[300];

static void die(const char *what) {
  fprintf(stderr, "bench_archive: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* ---- calling the handlers ---- */

static double now_s(void) {
  return (double)sbx_now_ns() / 1e9;
}

static void never_pending(struct rpc_call *c, int r) {
  (void)c;
  (void)r;
}

/* Runs HANDLER on REQ; the reply stays in *C until call_done. */
static int call(struct rpc_call *c, Sbx__V1__Response *resp,
                Sbx__V1__Request *req, int (*handler)(struct rpc_call *)) {
  memset(c, 0, sizeof(*c));
  sbx__v1__response__init(resp);
  c->d = &d;
  c->req = req;
  c->resp = resp;
  c->complete = never_pending;
  return handler(c);
}

static void call_done(struct rpc_call *c) {
  sbx_arena_reset(&c->arena);
}

static void fail(struct rpc_call *c, const char *what) {
  fprintf(stderr, "bench_archive: %s: %s\n", what, c->err.msg);
  exit(1);
}

static void close_handle(uint64_t handle) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__ArchiveClose b = SBX__V1__ARCHIVE_CLOSE__INIT;
  b.handle = handle;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_CLOSE;
  req.archive_close = &b;
  struct rpc_call c;
  Sbx__V1__Response resp;
  if (call(&c, &resp, &req, rpc_archive_close) < 0)
    fail(&c, "close");
  call_done(&c);
  /* A closed transfer's spool is freed by the next blocking call: make one
   * now, so that cost is counted here and not in the next run. */
  Sbx__V1__ArchiveExportRead r = SBX__V1__ARCHIVE_EXPORT_READ__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_EXPORT_READ;
  req.archive_export_read = &r;
  (void)call(&c, &resp, &req, rpc_archive_export_read);
  call_done(&c);
}

static void write_out(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      die("write");
    }
    p += w;
    n -= (size_t)w;
  }
}

/* Exports "tree" into OUT; returns the archive's size. */
static uint64_t sbx_export(const char *out) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__ArchiveExportStart s = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  s.path = "tree";
  s.stream = true;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_EXPORT_START;
  req.archive_export_start = &s;
  struct rpc_call c;
  Sbx__V1__Response resp;
  double t0 = now_s();
  if (call(&c, &resp, &req, rpc_archive_export_start) < 0)
    fail(&c, "export start");
  double t1 = now_s();
  uint64_t handle = resp.archive_export_start->handle;
  call_done(&c);
  int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    die(out);
  Sbx__V1__ArchiveExportRead r = SBX__V1__ARCHIVE_EXPORT_READ__INIT;
  r.handle = handle;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_EXPORT_READ;
  req.archive_export_read = &r;
  for (;;) {
    if (call(&c, &resp, &req, rpc_archive_export_read) < 0)
      fail(&c, "export read");
    Sbx__V1__ArchiveExportReadReply *x = resp.archive_export_read;
    write_out(fd, x->data.data, x->data.len);
    r.offset += x->data.len;
    bool eof = x->eof;
    call_done(&c);
    if (eof)
      break;
  }
  if (close(fd) < 0)
    die(out);
  double t2 = now_s();
  close_handle(handle);
  if (verbose)
    printf("  export: start %.3f s, reads %.3f s, close %.3f s\n", t1 - t0,
           t2 - t1, now_s() - t2);
  return r.offset;
}

/* Imports the archive IN into DEST (workspace-relative); returns the bytes
 * extracted. */
static uint64_t sbx_import(const char *in, const char *dest) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__ArchiveImportStart s = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  s.path = (char *)dest;
  s.compression = SBX__V1__COMPRESSION__COMPRESSION_AUTO;
  s.stage = true;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_START;
  req.archive_import_start = &s;
  struct rpc_call c;
  Sbx__V1__Response resp;
  double t0 = now_s();
  if (call(&c, &resp, &req, rpc_archive_import_start) < 0)
    fail(&c, "import start");
  uint64_t handle = resp.archive_import_start->handle;
  call_done(&c);
  int fd = open(in, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    die(in);
  size_t chunk = d.limits.max_read_bytes;
  unsigned char *buf = malloc(chunk);
  if (!buf)
    die("malloc");
  Sbx__V1__ArchiveImportWrite w = SBX__V1__ARCHIVE_IMPORT_WRITE__INIT;
  w.handle = handle;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_WRITE;
  req.archive_import_write = &w;
  for (;;) {
    ssize_t n = read(fd, buf, chunk);
    if (n < 0)
      die(in);
    if (n == 0)
      break;
    w.data.data = buf;
    w.data.len = (size_t)n;
    if (call(&c, &resp, &req, rpc_archive_import_write) < 0)
      fail(&c, "import write");
    call_done(&c);
    w.offset += (uint64_t)n;
  }
  free(buf);
  (void)close(fd);
  double t1 = now_s();
  Sbx__V1__ArchiveImportFinish f = SBX__V1__ARCHIVE_IMPORT_FINISH__INIT;
  f.handle = handle;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_FINISH;
  req.archive_import_finish = &f;
  if (call(&c, &resp, &req, rpc_archive_import_finish) < 0)
    fail(&c, "import finish");
  uint64_t bytes = resp.archive_import_finish->extracted_bytes;
  call_done(&c);
  double t2 = now_s();
  close_handle(handle);
  if (verbose)
    printf("  import: start+writes %.3f s, finish %.3f s, close %.3f s\n",
           t1 - t0, t2 - t1, now_s() - t2);
  return bytes;
}

/* ---- the baseline ---- */

static double tv_s(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Runs ARGV to completion; returns the CPU time (user + system) it used. */
static double run(char *const argv[]) {
  pid_t pid;
  int r = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
  if (r != 0) {
    errno = r;
    die(argv[0]);
  }
  int st;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) < 0)
    die("wait4");
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "bench_archive: %s failed (status %d)\n", argv[0], st);
    exit(1);
  }
  return tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
}

/* CPU time (user + system) this process has used. */
static double self_cpu(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) < 0)
    die("getrusage");
  return tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
}

/* On ext4, marks DIR as a top of directory hierarchies (chattr +T), so the
 * directories made in it (the tree, ours and tar's destinations alike) are
 * spread over block groups with free inodes instead of sharing DIR's group,
 * where other processes' recent deletions make every inode allocation skip
 * the freed ones. Other filesystems ignore it. */
static void spread_dirs(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    die(dir);
  int flags;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
    flags |= FS_TOPDIR_FL;
    (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
  }
  (void)close(fd);
}

static double best(const double *v) {
  double b = v[0];
  for (int i = 1; i < runs; i++)
    if (v[i] < b)
      b = v[i];
  return b;
}

int main(int argc, char **argv) {
  for (; argc > 1 && argv[1][0] == '-'; argc--, argv++) {
    if (strcmp(argv[1], "-v") == 0) {
      verbose = true;
    } else if (strcmp(argv[1], "-n") == 0 && argc > 2) {
      char *end;
      long n = strtol(argv[2], &end, 10);
      if (*end || n < 1 || n > RUNS_MAX) {
        fprintf(stderr, "bench_archive: -n takes 1 to %d\n", RUNS_MAX);
        return 2;
      }
      runs = (int)n;
      argc--;
      argv++;
    } else {
      fprintf(stderr, "usage: bench_archive [-v] [-n RUNS] [DIR]\n");
      return 2;
    }
  }
  const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR");
  if (!dir || !*dir)
    dir = "/tmp";
  (void)snprintf(base, sizeof(base), "%s/sbx-bench-archive-XXXXXX", dir);
  if (!mkdtemp(base))
    die(base);
  (void)snprintf(root, sizeof(root), "%s/ws", base);
  if (mkdir(root, 0755) < 0)
    die(root);
  spread_dirs(root);

  sandboxd_limits_default(&d.limits);
  d.root = root;
  d.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d.root_fd < 0)
    die(root);
  d.uid = geteuid();
  d.gid = getegid();
  d.is_root = d.uid == 0;
  if (archive_table_new(&d, &d.archives) < 0)
    die("archive_table_new");

  char tree[400], ours[400], theirs[400], tdest[400];
  (void)snprintf(tree, sizeof(tree), "%s/tree", root);
  (void)snprintf(ours, sizeof(ours), "%s/sbx.tar", base);
  (void)snprintf(theirs, sizeof(theirs), "%s/gnu.tar", base);
  struct bench_tree ts = {0};
  if (bench_build_tree(tree, TREE_BYTES, &ts) < 0)
    exit(1);
  printf("tree: %u files, %u directories, %.1f MiB in %s\n", ts.files, ts.dirs,
         (double)ts.bytes / (1 << 20), base);

  /* Warm the page cache the same way for both. */
  uint64_t size = sbx_export(ours);
  char *tar_c[] = {"tar", "-cf", theirs, "-C", tree, ".", NULL};
  (void)run(tar_c);

  /* Ours and tar take turns going first: ext4 makes whoever creates inodes
   * first in a group pay for skipping recently freed ones (other processes'
   * deletions on the same filesystem), and that must not favour one side. */
  double ex[RUNS_MAX], tx[RUNS_MAX], im[RUNS_MAX], ti[RUNS_MAX];
  double exc[RUNS_MAX], txc[RUNS_MAX], imc[RUNS_MAX], tic[RUNS_MAX]; /* CPU */
  double in[RUNS_MAX], inc[RUNS_MAX]; /* import into a non-empty directory */
  for (int i = 0; i < runs; i++) {
    for (int k = 0; k < 2; k++) {
      bool mine = (k == 0) == (i % 2 == 0);
      unlink(mine ? ours : theirs);
      sync();
      double t0 = now_s(), c0 = self_cpu(), cpu;
      if (mine) {
        (void)sbx_export(ours);
        cpu = self_cpu() - c0;
      } else {
        cpu = run(tar_c);
      }
      (mine ? ex : tx)[i] = now_s() - t0;
      (mine ? exc : txc)[i] = cpu;
    }
  }
  struct stat st;
  if (stat(theirs, &st) < 0)
    die(theirs);
  printf("archive: ours %.1f MiB (pax), GNU tar's %.1f MiB\n",
         (double)size / (1 << 20), (double)st.st_size / (1 << 20));

  /* Each import goes to a new directory, for the same reason: removing the
   * previous one first would charge its freed inodes to the next run. */
  char *tar_x[] = {"tar", "-xf", ours, "-C", tdest, NULL};
  for (int i = 0; i < runs; i++) {
    for (int k = 0; k < 2; k++) {
      bool mine = (k == 0) == (i % 2 == 0);
      char dest[32];
      (void)snprintf(dest, sizeof(dest), "imp%d", i);
      (void)snprintf(tdest, sizeof(tdest), "%s/tar-x%d", root, i);
      if (!mine && mkdir(tdest, 0755) < 0)
        die(tdest);
      sync();
      double t0 = now_s(), c0 = self_cpu(), cpu;
      if (mine) {
        uint64_t bytes = sbx_import(ours, dest);
        cpu = self_cpu() - c0;
        if (bytes != ts.bytes) {
          fprintf(stderr,
                  "bench_archive: extracted %" PRIu64 " of %" PRIu64 "\n",
                  bytes, ts.bytes);
          return 1;
        }
      } else {
        cpu = run(tar_x);
      }
      (mine ? im : ti)[i] = now_s() - t0;
      (mine ? imc : tic)[i] = cpu;
    }
    /* The same into a directory holding one other file: not extracted
     * while it arrives, but checked and extracted at the finish. */
    char dest[32], keep[400];
    (void)snprintf(dest, sizeof(dest), "impn%d", i);
    (void)snprintf(keep, sizeof(keep), "%s/%s", root, dest);
    if (mkdir(keep, 0755) < 0)
      die(keep);
    (void)snprintf(keep, sizeof(keep), "%s/%s/keep", root, dest);
    int kfd = open(keep, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (kfd < 0)
      die(keep);
    (void)close(kfd);
    sync();
    double t0 = now_s(), c0 = self_cpu();
    if (sbx_import(ours, dest) != ts.bytes) {
      fprintf(stderr, "bench_archive: a non-empty import extracted less\n");
      return 1;
    }
    in[i] = now_s() - t0;
    inc[i] = self_cpu() - c0;
  }

  for (int i = 0; i < runs; i++)
    printf("run %d: export %.3f s (cpu %.3f), tar -cf %.3f s (cpu %.3f); "
           "import %.3f s (cpu %.3f), tar -xf %.3f s (cpu %.3f); "
           "non-empty %.3f s\n",
           i + 1, ex[i], exc[i], tx[i], txc[i], im[i], imc[i], ti[i], tic[i],
           in[i]);
  printf("export: sbx %.3f s, tar -cf %.3f s, ratio %.2f "
         "(cpu: %.3f s, %.3f s, ratio %.2f)\n",
         best(ex), best(tx), best(ex) / best(tx), best(exc), best(txc),
         best(exc) / best(txc));
  printf("import: sbx %.3f s, tar -xf %.3f s, ratio %.2f "
         "(cpu: %.3f s, %.3f s, ratio %.2f)\n",
         best(im), best(ti), best(im) / best(ti), best(imc), best(tic),
         best(imc) / best(tic));
  printf("import into a non-empty directory: sbx %.3f s, ratio to tar -xf "
         "%.2f (cpu: %.3f s, ratio %.2f)\n",
         best(in), best(in) / best(ti), best(inc), best(inc) / best(tic));

  archive_table_free(d.archives);
  (void)close(d.root_fd);
  (void)bench_rm_rf(base);
  return 0;
}
