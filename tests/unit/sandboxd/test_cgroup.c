/* Per-sandbox cgroups: real cgroups as root (limits written, processes
 * moved, the memory and pids limits biting, kill and removal), and the
 * error paths, some against a fake machine given to cgroup_create_in. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/isolate/cgroup.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define MIB (UINT64_C(1) << 20)

static void teardown(void);
TestSuite(cgroup, .timeout = 60, .fini = teardown);

/* The test's cgroup and fake machine, which teardown removes. */
static struct cgroup *cur;
static char fake[64];

static const char *const controllers[] = {"memory", "pids", "cpu", "freezer",
                                          NULL};

static void need_root(void) {
  if (geteuid() != 0)
    cr_skip_test("creating cgroups needs root (this runs as uid %d)",
                 (int)geteuid());
}

/* CUR, created as NAME with limits L; skips the test where this machine's
 * cgroups cannot have them (no such controller, read-only, no rights). */
static struct cgroup *create_or_skip(const char *name,
                                     const struct isolate_limits *l) {
  struct sbx_error e = {0};
  need_root();
  int r = cgroup_create(name, l, &cur, &e);
  if (r == -ENODEV || r == -EROFS || r == -EACCES || r == -EPERM)
    cr_skip_test("this machine's cgroups cannot take the limits: %s", e.msg);
  cr_assert_eq(r, 0, "%s", e.msg);
  return cur;
}

/* A name no other test or run uses. */
static const char *unique(const char *tag) {
  static char name[64];
  (void)snprintf(name, sizeof(name), "sbx-test-%d-%s", (int)getpid(), tag);
  return name;
}

/* DIR/FILE's text without its trailing newline (new), or NULL. */
static char *slurp(const char *dir, const char *file) {
  char path[4096];
  char *s = NULL;
  size_t len = 0;
  (void)snprintf(path, sizeof(path), "%s/%s", dir, file);
  if (sbx_read_file(path, 1 << 20, &s, &len) < 0)
    return NULL;
  while (len > 0 && s[len - 1] == '\n')
    s[--len] = '\0';
  return s;
}

static bool has(const char *dir, const char *file) {
  char path[4096];
  (void)snprintf(path, sizeof(path), "%s/%s", dir, file);
  return access(path, F_OK) == 0;
}

static void expect_file(const char *dir, const char *file, const char *want) {
  char *got = slurp(dir, file);
  cr_expect_not_null(got, "cannot read %s/%s", dir, file);
  if (got)
    cr_expect_str_eq(got, want, "%s/%s", dir, file);
  free(got);
}

/* How many processes DIR/cgroup.procs lists; with PID, whether it is one. */
static int procs(const char *dir, pid_t pid) {
  char *s = slurp(dir, "cgroup.procs");
  cr_assert_not_null(s, "cannot read %s/cgroup.procs", dir);
  int n = 0;
  bool found = false;
  for (char *p = s; *p;) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p)
      break;
    n++;
    found |= v == pid;
    p = *end ? end + 1 : end;
  }
  free(s);
  return pid ? found : n;
}

/* Every directory of CG (borrowed). */
static size_t all_paths(struct cgroup *cg, const char **out) {
  size_t n = 0;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(controllers); i++) {
    const char *p = cgroup_path(cg, controllers[i]);
    bool seen = !p;
    for (size_t j = 0; j < n && !seen; j++)
      seen = !strcmp(out[j], p);
    if (!seen)
      out[n++] = p;
  }
  return n;
}

/* A forked child that waits for release() and then runs BODY, as the
 * supervisor's sandbox waits to be moved into its cgroup. */
struct child {
  pid_t pid;
  int go;
};

static struct child spawn(void (*body)(int), int arg) {
  int p[2];
  cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    char c;
    (void)close(p[1]);
    if (read(p[0], &c, 1) != 1)
      _exit(100);
    body(arg);
    _exit(0);
  }
  (void)close(p[0]);
  return (struct child){pid, p[1]};
}

static void release(struct child *c) {
  cr_assert_eq(write(c->go, "x", 1), 1);
  (void)close(c->go);
}

/* PID's wait status once it ends, within 5 s; after that it is killed
 * here (so that a failing test leaks nothing) and the test fails. */
static int reap(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 500; i++) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    cr_assert_neq(r, -1, "waitpid %d: %s", (int)pid, strerror(errno));
    if (r == pid)
      return st;
    usleep(10000);
  }
  (void)kill(pid, SIGKILL);
  cr_expect_fail("pid %d still runs after 5 s", (int)pid);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    continue;
  return st;
}

/* Kills whatever CG's directories still list, by the test's own means,
 * before cgroup_destroy: after a failed check nothing is left running. */
static void sweep(struct cgroup *cg) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(controllers); i++) {
    const char *dir = cgroup_path(cg, controllers[i]);
    char *s = dir ? slurp(dir, "cgroup.procs") : NULL;
    for (char *p = s; p && *p;) {
      char *end = NULL;
      long v = strtol(p, &end, 10);
      if (end == p)
        break;
      if (v > 1 && v != getpid())
        (void)kill((pid_t)v, SIGKILL);
      p = *end ? end + 1 : end;
    }
    free(s);
  }
  /* A frozen process dies of its SIGKILL only once thawed. */
  const char *dirs[] = {cgroup_path(cg, "freezer"), cgroup_path(cg, NULL)};
  const char *files[] = {"freezer.state", "cgroup.freeze"};
  const char *thawed[] = {"THAWED", "0"};
  for (int i = 0; i < 2; i++) {
    char path[4096];
    (void)snprintf(path, sizeof(path), "%s/%s", dirs[i] ? dirs[i] : "",
                   files[i]);
    FILE *f = dirs[i] ? fopen(path, "we") : NULL;
    if (f) {
      (void)fputs(thawed[i], f);
      (void)fclose(f);
    }
  }
}

static void idle(int unused) {
  for (;;)
    pause();
}

/* Forks N children that idle, then idles. */
static void family(int n) {
  for (int i = 0; i < n; i++)
    if (fork() == 0)
      idle(0);
  idle(0);
}

/* Allocates and touches 256 MiB; exits 0 when it could. */
static void hog(int unused) {
  size_t n = 256 * MIB;
  volatile char *p =
      mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(2);
  for (size_t i = 0; i < n; i += 4096)
    p[i] = 1;
  _exit(0);
}

/* Forks idling children until fork fails; writes how many it made and
 * fork's errno to FD. */
static void fork_bomb(int fd) {
  int got[2] = {0, 0};
  for (int i = 0; i < 1000; i++) {
    pid_t pid = fork();
    if (pid == 0)
      idle(0);
    if (pid < 0) {
      got[1] = errno;
      break;
    }
    got[0]++;
  }
  if (write(fd, got, sizeof(got)) != (ssize_t)sizeof(got))
    _exit(3);
  _exit(0);
}

/* Waits up to 2 s for DIR to list N processes. */
static void wait_procs(const char *dir, int n) {
  for (int i = 0; i < 200 && procs(dir, 0) != n; i++)
    usleep(10000);
  cr_assert_eq(procs(dir, 0), n, "%s lists %d processes, want %d", dir,
               procs(dir, 0), n);
}

/* ---- Real cgroups ---------------------------------------------------- */

Test(cgroup, create_writes_limits) {
  struct isolate_limits l = {.memory_bytes = 64 * MIB, .pids = 32, .cpus = 1.5};
  struct cgroup *cg = create_or_skip(unique("limits"), &l);

  const char *mem = cgroup_path(cg, "memory");
  cr_assert_not_null(mem);
  cr_expect(strstr(mem, "/sbx/sbx-test-") != NULL, "%s", mem);
  if (has(mem, "memory.max")) {
    expect_file(mem, "memory.max", "67108864");
    if (has(mem, "memory.swap.max"))
      expect_file(mem, "memory.swap.max", "0");
  } else {
    expect_file(mem, "memory.limit_in_bytes", "67108864");
    if (has(mem, "memory.memsw.limit_in_bytes"))
      expect_file(mem, "memory.memsw.limit_in_bytes", "67108864");
  }
  const char *pids = cgroup_path(cg, "pids");
  cr_assert_not_null(pids);
  expect_file(pids, "pids.max", "32");
  const char *cpu = cgroup_path(cg, "cpu");
  cr_assert_not_null(cpu);
  if (has(cpu, "cpu.max")) {
    expect_file(cpu, "cpu.max", "150000 100000");
  } else {
    expect_file(cpu, "cpu.cfs_period_us", "100000");
    expect_file(cpu, "cpu.cfs_quota_us", "150000");
  }
}

Test(cgroup, cpu_fraction_rounds_to_microseconds) {
  struct isolate_limits l = {.cpus = 0.3};
  struct cgroup *cg = create_or_skip(unique("cpu"), &l);
  const char *cpu = cgroup_path(cg, "cpu");
  cr_assert_not_null(cpu);
  if (has(cpu, "cpu.max"))
    expect_file(cpu, "cpu.max", "30000 100000");
  else
    expect_file(cpu, "cpu.cfs_quota_us", "30000");
}

Test(cgroup, add_moves_child_into_every_hierarchy) {
  struct sbx_error e = {0};
  struct isolate_limits l = {.pids = 8};
  struct cgroup *cg = create_or_skip(unique("add"), &l);
  struct child c = spawn(idle, 0);
  cr_assert_eq(cgroup_add(cg, c.pid, &e), 0, "%s", e.msg);
  const char *paths[8];
  size_t n = all_paths(cg, paths);
  cr_expect_geq(n, 1);
  for (size_t i = 0; i < n; i++)
    cr_expect(procs(paths[i], c.pid), "pid %d not in %s/cgroup.procs",
              (int)c.pid, paths[i]);
  char *now = slurp(cgroup_path(cg, "pids"), "pids.current");
  cr_expect_str_eq(now ? now : "", "1");
  free(now);
  release(&c);
  cr_expect_eq(cgroup_kill(cg), 0);
  int st = reap(c.pid);
  cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
}

Test(cgroup, memory_hog_is_killed) {
  struct sbx_error e = {0};
  struct isolate_limits l = {.memory_bytes = 64 * MIB};
  struct cgroup *cg = create_or_skip(unique("hog"), &l);
  struct child c = spawn(hog, 0);
  cr_assert_eq(cgroup_add(cg, c.pid, &e), 0, "%s", e.msg);
  release(&c);
  int st = reap(c.pid);
  cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
            "a 256 MiB hog under 64 MiB ended with status %#x", st);
  uint64_t oom = 0, refused = 0;
  cr_expect_eq(cgroup_events(cg, &oom, &refused), 0);
  cr_expect_geq(oom, 1, "oom_kill count %llu", (unsigned long long)oom);
  cr_expect_eq(refused, 0);
}

Test(cgroup, fork_bomb_meets_pids_limit) {
  struct sbx_error e = {0};
  struct isolate_limits l = {.pids = 32};
  struct cgroup *cg = create_or_skip(unique("bomb"), &l);
  int rep[2];
  cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
  struct child c = spawn(fork_bomb, rep[1]);
  (void)close(rep[1]);
  cr_assert_eq(cgroup_add(cg, c.pid, &e), 0, "%s", e.msg);
  release(&c);
  int got[2] = {-1, -1};
  cr_assert_eq(read(rep[0], got, sizeof(got)), (ssize_t)sizeof(got));
  (void)close(rep[0]);
  cr_expect_eq(got[1], EAGAIN, "fork failed with %s", strerror(got[1]));
  cr_expect_eq(got[0], 31, "forked %d children under pids=32", got[0]);
  cr_expect_eq(reap(c.pid), 0);
  uint64_t refused = 0;
  cr_expect_eq(cgroup_events(cg, NULL, &refused), 0);
  cr_expect_geq(refused, 1);
  cr_expect_eq(cgroup_kill(cg), 0);
  cr_expect_eq(procs(cgroup_path(cg, "pids"), 0), 0);
}

/* Several processes, each with children of its own, all killed. */
static void kill_family(struct cgroup *cg) {
  struct sbx_error e = {0};
  struct child c[4];
  for (int i = 0; i < 4; i++) {
    c[i] = spawn(family, 3);
    cr_assert_eq(cgroup_add(cg, c[i].pid, &e), 0, "%s", e.msg);
    release(&c[i]);
  }
  const char *paths[8];
  size_t n = all_paths(cg, paths);
  cr_assert_geq(n, 1);
  wait_procs(paths[0], 16);
  cr_expect_eq(cgroup_kill(cg), 0);
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(procs(paths[i], 0), 0, "%s not empty", paths[i]);
  for (int i = 0; i < 4; i++) {
    int st = reap(c[i].pid);
    cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
  }
}

Test(cgroup, kill_empties_cgroup) {
  struct cgroup *cg = create_or_skip(unique("kill"), NULL);
  kill_family(cg);
}

/* Writes the file ROOT/REL with TEXT, making its directories. */
static void put(const char *root, const char *rel, const char *text) {
  char path[4096];
  (void)snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
    *p = '/';
  }
  if (!text) {
    cr_assert(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s", path);
    return;
  }
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  cr_assert_geq(fputs(text, f), 0);
  cr_assert_eq(fclose(f), 0);
}

static void make_fake(void) {
  (void)snprintf(fake, sizeof(fake), "/tmp/sbx-cgroup-XXXXXX");
  cr_assert_not_null(mkdtemp(fake));
}

static void teardown(void) {
  sweep(cur);
  cur = cgroup_destroy(cur);
  if (fake[0]) {
    char cmd[128];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fake);
    cr_expect_eq(system(cmd), 0);
    fake[0] = '\0';
  }
}

/* The v1 freezer path of cgroup_kill: a machine with only the v1 pids and
 * freezer hierarchies, the real ones reached through symlinks. */
Test(cgroup, kill_without_cgroup_v2_freezes) {
  need_root();
  if (access("/sys/fs/cgroup/freezer/cgroup.procs", F_OK) != 0)
    cr_skip_test("no v1 freezer at /sys/fs/cgroup/freezer");
  if (access("/sys/fs/cgroup/pids/cgroup.procs", F_OK) != 0)
    cr_skip_test("no v1 pids hierarchy at /sys/fs/cgroup/pids");
  make_fake();
  char *self = slurp("/proc/self", "cgroup");
  cr_assert_not_null(self);
  size_t n = strlen(self);
  self = realloc(self, n + 2);
  memcpy(self + n, "\n", 2);
  put(fake, "proc/self/cgroup", self);
  free(self);
  put(fake, "proc/self/mountinfo",
      "1 0 0:1 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
      "2 0 0:2 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n");
  put(fake, "sys/fs/cgroup", NULL);
  char link[128];
  for (int i = 0; i < 2; i++) {
    const char *h = i ? "pids" : "freezer";
    char target[64];
    (void)snprintf(link, sizeof(link), "%s/sys/fs/cgroup/%s", fake, h);
    (void)snprintf(target, sizeof(target), "/sys/fs/cgroup/%s", h);
    cr_assert_eq(symlink(target, link), 0);
  }
  struct sbx_error e = {0};
  cr_assert_eq(cgroup_create_in(fake, unique("freeze"), NULL, &cur, &e), 0,
               "%s", e.msg);
  struct cgroup *cg = cur;
  cr_expect_null(cgroup_path(cg, NULL), "no cgroup v2 in this fake");
  cr_assert_not_null(cgroup_path(cg, "freezer"));
  kill_family(cg);
}

Test(cgroup, destroy_removes_directories) {
  struct sbx_error e = {0};
  struct isolate_limits l = {.memory_bytes = 16 * MIB, .pids = 4};
  struct cgroup *cg = create_or_skip(unique("destroy"), &l);
  const char *paths[8];
  char *copy[8];
  size_t n = all_paths(cg, paths);
  cr_assert_geq(n, 2);
  for (size_t i = 0; i < n; i++)
    copy[i] = strdup(paths[i]);
  struct child c = spawn(idle, 0);
  cr_assert_eq(cgroup_add(cg, c.pid, &e), 0, "%s", e.msg);
  release(&c);
  cur = NULL;
  cr_expect_null(cgroup_destroy(cg));
  int st = reap(c.pid);
  cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status %#x", st);
  for (size_t i = 0; i < n; i++) {
    struct stat sb;
    cr_expect_eq(stat(copy[i], &sb), -1, "%s still exists", copy[i]);
    cr_expect_eq(errno, ENOENT);
    cr_expect_eq(stat(dirname(copy[i]), &sb), 0, "the sbx parent stays");
    free(copy[i]);
  }
  cr_expect_null(cgroup_destroy(NULL));
}

/* A cgroup that holds a process belongs to a live sandbox: another of the
 * same name is refused. */
Test(cgroup, duplicate_name_is_refused) {
  struct sbx_error e = {0};
  struct cgroup *b = NULL;
  struct isolate_limits l = {.pids = 4};
  const char *name = unique("dup");
  struct cgroup *a = create_or_skip(name, &l);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  cr_assert_eq(cgroup_add(a, child, &e), 0, "%s", e.msg);
  int rc = cgroup_create(name, &l, &b, &e);
  (void)kill(child, SIGKILL);
  (void)waitpid(child, NULL, 0);
  cr_expect_eq(rc, -EEXIST);
  cr_expect_null(b);
  cr_expect_eq(e.code, SBX_ALREADY_EXISTS);
  cr_expect(strstr(e.msg, "already exists") && strstr(e.msg, name), "%s",
            e.msg);
  const char *paths[8];
  size_t n = all_paths(a, paths);
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(access(paths[i], F_OK), 0, "the first %s is gone", paths[i]);
  expect_file(cgroup_path(a, "pids"), "pids.max", "4");
}

/* ---- Errors without root --------------------------------------------- */

Test(cgroup, bad_names_are_refused) {
  static const char *const bad[] = {"",     "a/b",     "..",  ".",
                                    "/abs", ".hidden", "a b", "x\n"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
    struct sbx_error e = {0};
    struct cgroup *cg = NULL;
    cr_expect_eq(cgroup_create(bad[i], NULL, &cg, &e), -EINVAL, "\"%s\"",
                 bad[i]);
    cr_expect_null(cg);
    cr_expect_eq(e.code, SBX_INVALID_ARGUMENT);
    cr_expect(strstr(e.msg, "invalid cgroup name") != NULL, "%s", e.msg);
  }
  char long_name[200];
  memset(long_name, 'a', sizeof(long_name) - 1);
  long_name[sizeof(long_name) - 1] = '\0';
  struct cgroup *cg = NULL;
  cr_expect_eq(cgroup_create(long_name, NULL, &cg, NULL), -EINVAL);
  cr_expect_eq(cgroup_create(NULL, NULL, &cg, NULL), -EINVAL);
}

Test(cgroup, bad_limits_are_refused) {
  static const struct {
    struct isolate_limits l;
    const char *says;
  } bad[] = {
      {{.cpus = -1}, "cpus"},
      {{.cpus = 1024.5}, "cpus"},
      {{.cpus = NAN}, "cpus"},
      {{.cpus = INFINITY}, "cpus"},
      {{.memory_bytes = 1000}, "memory_bytes"},
      {{.memory_bytes = MIB - 1}, "memory_bytes"},
      {{.pids = 5000000}, "pids"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
    struct sbx_error e = {0};
    struct cgroup *cg = NULL;
    cr_expect_eq(cgroup_create(unique("bad"), &bad[i].l, &cg, &e), -EINVAL,
                 "case %zu", i);
    cr_expect_null(cg);
    cr_expect(strstr(e.msg, bad[i].says) != NULL, "case %zu: %s", i, e.msg);
  }
}

/* A fake machine: cgroup v2 at /sys/fs/cgroup offering only cpu and pids,
 * and a v1 "pids" mount that is a plain directory. */
static void fake_machine(void) {
  make_fake();
  put(fake, "proc/self/mountinfo",
      "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
      "31 1 0:27 / /v1/p\\040ids rw - cgroup cgroup rw,pids\n");
  put(fake, "proc/self/cgroup", "1:pids:/\n0::/\n");
  put(fake, "sys/fs/cgroup/cgroup.controllers", "cpu pids\n");
  put(fake, "v1/p ids", NULL);
}

Test(cgroup, missing_controller_names_it, .init = fake_machine) {
  struct sbx_error e = {0};
  struct cgroup *cg = NULL;
  struct isolate_limits l = {.memory_bytes = 64 * MIB};
  cr_expect_lt(cgroup_create_in(fake, "sbx-a", &l, &cg, &e), 0);
  cr_expect_null(cg);
  cr_expect_eq(e.code, SBX_NOT_SUPPORTED);
  cr_expect(strstr(e.msg, "memory limit needs a writable cgroup memory "
                          "controller") != NULL,
            "%s", e.msg);
  cr_expect(strstr(e.msg, "set memory_bytes to 0") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "cgroup.controllers") != NULL, "%s", e.msg);
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/sys/fs/cgroup/sbx", fake);
  cr_expect_neq(access(path, F_OK), 0, "nothing is created");
}

Test(cgroup, unusable_controller_names_its_file, .init = fake_machine) {
  /* pids comes from cgroup v2 here; v2's files are missing in the fake. */
  struct sbx_error e = {0};
  struct cgroup *cg = NULL;
  struct isolate_limits l = {.pids = 10};
  cr_expect_lt(cgroup_create_in(fake, "sbx-b", &l, &cg, &e), 0);
  cr_expect_null(cg);
  cr_expect(strstr(e.msg, "pids limit needs") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "set pids to 0") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "cgroup.subtree_control") != NULL, "%s", e.msg);
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/v1/p ids/sbx/sbx-b", fake);
  cr_expect_neq(access(path, F_OK), 0, "%s is left behind", path);
}

Test(cgroup, v1_limit_on_non_cgroup_dir_names_file, .init = make_fake) {
  put(fake, "proc/self/mountinfo",
      "31 1 0:27 / /c/pids rw - cgroup cgroup rw,pids\n");
  put(fake, "proc/self/cgroup", "1:pids:/\n");
  put(fake, "c/pids", NULL);
  struct sbx_error e = {0};
  struct cgroup *cg = NULL;
  struct isolate_limits l = {.pids = 10};
  cr_expect_eq(cgroup_create_in(fake, "sbx-c", &l, &cg, &e), -ENOENT);
  cr_expect(strstr(e.msg, "pids limit needs") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "/c/pids/sbx/sbx-c/pids.max") != NULL, "%s", e.msg);
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/c/pids/sbx", fake);
  cr_expect_eq(access(path, F_OK), 0, "the sbx parent stays");
  (void)snprintf(path, sizeof(path), "%s/c/pids/sbx/sbx-c", fake);
  cr_expect_neq(access(path, F_OK), 0, "%s is left behind", path);
}

/* An empty cgroup of the same name, left by a sandbox killed before it
 * could remove it, is made again for the new one. */
Test(cgroup, a_leftover_of_the_same_name_is_reclaimed) {
  struct sbx_error e = {0};
  struct isolate_limits l = {.pids = 4};
  const char *name = unique("left");
  cgroup_destroy(create_or_skip(name, &l)); /* skips where none can be made */
  cur = NULL;
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    /* Makes the cgroup and dies without removing it. */
    struct cgroup *cg = NULL;
    if (cgroup_create(name, &l, &cg, &e) == 0 && cgroup_path(cg, NULL))
      (void)!write(fds[1], cgroup_path(cg, NULL),
                   strlen(cgroup_path(cg, NULL)));
    _exit(0);
  }
  close(fds[1]);
  char left[512] = "";
  ssize_t n = read(fds[0], left, sizeof(left) - 1);
  close(fds[0]);
  (void)waitpid(child, NULL, 0);
  cr_assert_gt(n, 0, "the child made no cgroup");
  cr_assert_eq(access(left, F_OK), 0, "%s", left);
  struct cgroup *b = NULL;
  cr_expect_eq(cgroup_create(name, &l, &b, &e), 0, "%s", e.msg);
  cr_expect_str_eq(cgroup_path(b, NULL), left);
  cgroup_destroy(b);
  cr_expect_neq(access(left, F_OK), 0, "%s not removed", left);
}

Test(cgroup, no_limits_creates_what_it_can, .init = fake_machine) {
  struct sbx_error e = {0};
  struct cgroup *cg = NULL;
  cr_assert_eq(cgroup_create_in(fake, "sbx-d", NULL, &cg, &e), 0, "%s", e.msg);
  char want[128];
  (void)snprintf(want, sizeof(want), "%s/sys/fs/cgroup/sbx/sbx-d", fake);
  cr_expect_str_eq(cgroup_path(cg, NULL), want);
  (void)snprintf(want, sizeof(want), "%s/v1/p ids/sbx/sbx-d", fake);
  cr_expect_str_eq(cgroup_path(cg, "pids"), want);
  cr_expect_null(cgroup_path(cg, "memory"));
  cr_expect_eq(cgroup_kill(cg), 0, "no processes listed");
  /* In use (it lists a process): another of the name is refused. */
  static const char *const procs[] = {"sys/fs/cgroup/sbx/sbx-d/cgroup.procs",
                                      "v1/p ids/sbx/sbx-d/cgroup.procs"};
  for (size_t i = 0; i < 2; i++)
    put(fake, procs[i], "1\n");
  struct cgroup *again = NULL;
  cr_expect_eq(cgroup_create_in(fake, "sbx-d", NULL, &again, &e), -EEXIST);
  cr_expect_null(again);
  cr_expect_eq(e.code, SBX_ALREADY_EXISTS);
  for (size_t i = 0; i < 2; i++) {
    char p[256];
    (void)snprintf(p, sizeof(p), "%s/%s", fake, procs[i]);
    (void)unlink(p);
  }
  cgroup_destroy(cg);
  cr_expect_neq(access(want, F_OK), 0, "%s not removed", want);
}

Test(cgroup, no_hierarchy_at_all, .init = make_fake) {
  put(fake, "proc/self/mountinfo",
      "22 1 0:21 / /proc rw - proc proc rw\n"
      "23 1 0:22 / /sys rw - sysfs sysfs rw\n");
  put(fake, "proc/self/cgroup", "0::/\n");
  struct sbx_error e = {0};
  struct cgroup *cg = NULL;
  cr_assert_eq(cgroup_create_in(fake, "sbx-e", NULL, &cg, &e), 0, "%s", e.msg);
  cr_expect_null(cgroup_path(cg, NULL));
  cr_expect_eq(cgroup_kill(cg), -ENODEV);
  cr_expect_eq(cgroup_add(cg, getpid(), &e), 0, "nothing to move into");
  cgroup_destroy(cg);
  struct isolate_limits l = {.cpus = 2};
  cr_expect_lt(cgroup_create_in(fake, "sbx-e", &l, &cg, &e), 0);
  cr_expect(strstr(e.msg, "cpu limit needs") && strstr(e.msg, "set cpus to 0"),
            "%s", e.msg);
  cr_expect(strstr(e.msg, "no cgroup hierarchy") != NULL, "%s", e.msg);
}

/* The tests leave the machine as they found it: the "sbx" parents that
 * cgroup_destroy keeps are removed once every test is done (an rmdir that
 * another user of them makes fail is fine). */
ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  (void)stats;
  struct cgroup *cg = NULL;
  if (geteuid() != 0 || cgroup_create(unique("probe"), NULL, &cg, NULL) < 0)
    return;
  char *parents[8];
  const char *paths[8];
  size_t n = all_paths(cg, paths);
  for (size_t i = 0; i < n; i++) {
    char *p = strdup(paths[i]);
    parents[i] = p ? strdup(dirname(p)) : NULL;
    free(p);
  }
  cgroup_destroy(cg);
  for (size_t i = 0; i < n; i++) {
    if (parents[i])
      (void)rmdir(parents[i]);
    free(parents[i]);
  }
}
