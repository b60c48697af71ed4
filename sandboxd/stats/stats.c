#include "sandboxd/stats/stats.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/fileio.h"

#define STATS_FILE_MAX (1u << 20) /* one cgroup or /proc file */
#define STATS_PROCS_MAX 65536u    /* processes looked at in /proc */
#define STATS_DEPTH_MAX 256u      /* directory levels walked for disk */

/* The text of ROOT/REL (new, NUL-terminated), or NULL. */
static char *slurp(const char *root, const char *rel) {
  char p[4096];
  int k = snprintf(p, sizeof(p), "%s%s", root, rel);
  if (k < 0 || (size_t)k >= sizeof(p))
    return NULL;
  char *text = NULL;
  size_t len = 0;
  if (sbx_read_file(p, STATS_FILE_MAX, &text, &len) < 0)
    return NULL;
  return text;
}

/* The number in ROOT/REL ("max" is 0: no limit); false when unreadable. */
static bool read_u64(const char *root, const char *rel, uint64_t *out) {
  _cleanup_free_ char *t = slurp(root, rel);
  if (!t)
    return false;
  if (strncmp(t, "max", 3) == 0) {
    *out = 0;
    return true;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(t, &end, 10);
  if (errno || end == t)
    return false;
  *out = v;
  return true;
}

/* From the cgroup v2 at ROOT/sys/fs/cgroup, when sandboxd's cgroup is the
 * root of its cgroup namespace ("0::/") and that has cpu.stat. */
static bool from_cgroup(const char *root, Sbx__V1__StatsReply *s) {
  _cleanup_free_ char *self = slurp(root, "/proc/self/cgroup");
  if (!self || strcmp(self, "0::/\n") != 0)
    return false;
  _cleanup_free_ char *cpu = slurp(root, "/sys/fs/cgroup/cpu.stat");
  const char *u = cpu ? strstr(cpu, "usage_usec ") : NULL;
  uint64_t mem = 0;
  if (!u || !read_u64(root, "/sys/fs/cgroup/memory.current", &mem))
    return false;
  s->cpu_usec = strtoull(u + 11, NULL, 10);
  s->memory_bytes = mem;
  uint64_t v = 0;
  if (read_u64(root, "/sys/fs/cgroup/memory.peak", &v))
    s->memory_peak_bytes = v;
  if (read_u64(root, "/sys/fs/cgroup/memory.max", &v))
    s->memory_limit_bytes = v;
  if (read_u64(root, "/sys/fs/cgroup/pids.current", &v))
    s->pids = (uint32_t)(v > UINT32_MAX ? UINT32_MAX : v);
  if (read_u64(root, "/sys/fs/cgroup/pids.max", &v))
    s->pids_limit = (uint32_t)(v > UINT32_MAX ? UINT32_MAX : v);
  s->source = "cgroup";
  return true;
}

/* Whether the comma-separated LIST (N bytes) holds NAME. */
static bool in_list(const char *list, size_t n, const char *name) {
  size_t k = strlen(name);
  for (const char *p = list, *end = list + n; p < end;) {
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t len = c ? (size_t)(c - p) : (size_t)(end - p);
    if (len == k && strncmp(p, name, k) == 0)
      return true;
    p += len + 1;
  }
  return false;
}

/* Controller CTRL's cgroup v1 directory, ROOT + its mount point, into
 * OUT when the hierarchy is mounted with sandboxd's own cgroup as its
 * root (what a container sees: /sys/fs/cgroup/memory is the container's
 * cgroup). A host's mount of the whole hierarchy is not. */
static bool v1_dir(const char *root, const char *self, const char *mounts,
                   const char *ctrl, char *out, size_t n) {
  const char *path = NULL;
  size_t plen = 0;
  for (const char *l = self; *l;) {
    const char *nl = strchr(l, '\n'), *end = nl ? nl : l + strlen(l);
    const char *c1 = memchr(l, ':', (size_t)(end - l));
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    if (c2 && in_list(c1 + 1, (size_t)(c2 - c1 - 1), ctrl)) {
      path = c2 + 1;
      plen = (size_t)(end - path);
    }
    l = nl ? nl + 1 : end;
  }
  if (!path || plen == 0 || (plen == 1 && path[0] == '/'))
    return false;
  /* mountinfo: ID PARENT MAJ:MIN ROOT POINT OPTIONS ... - TYPE ... */
  for (const char *l = mounts; *l;) {
    const char *nl = strchr(l, '\n'), *end = nl ? nl : l + strlen(l);
    char line[1024];
    size_t len = (size_t)(end - l) < sizeof(line) ? (size_t)(end - l) : 0;
    l = nl ? nl + 1 : end;
    if (!len)
      continue;
    memcpy(line, end - len, len);
    line[len] = '\0';
    char mroot[512], point[512];
    if (sscanf(line, "%*s %*s %*s %511s %511s", mroot, point) != 2 ||
        !strstr(line, " - cgroup ") ||
        strncmp(point, "/sys/fs/cgroup/", 15) != 0 ||
        !in_list(point + 15, strlen(point + 15), ctrl) ||
        strlen(mroot) != plen || strncmp(mroot, path, plen) != 0)
      continue;
    int k = snprintf(out, n, "%s%s", root, point);
    return k > 0 && (size_t)k < n;
  }
  return false;
}

/* From the cgroup v1 hierarchies a container sees as its own: memory
 * (needed), cpuacct and pids where they are. */
static bool from_cgroup_v1(const char *root, const char *self,
                           Sbx__V1__StatsReply *s) {
  _cleanup_free_ char *mounts = slurp(root, "/proc/self/mountinfo");
  char mem[600], dir[600];
  uint64_t v = 0;
  if (!mounts || !v1_dir(root, self, mounts, "memory", mem, sizeof(mem)) ||
      !read_u64(mem, "/memory.usage_in_bytes", &v))
    return false;
  s->memory_bytes = v;
  if (read_u64(mem, "/memory.max_usage_in_bytes", &v))
    s->memory_peak_bytes = v;
  /* No limit is the largest page-aligned number, not "max". */
  if (read_u64(mem, "/memory.limit_in_bytes", &v) && v < (1ull << 62))
    s->memory_limit_bytes = v;
  if (v1_dir(root, self, mounts, "cpuacct", dir, sizeof(dir)) &&
      read_u64(dir, "/cpuacct.usage", &v))
    s->cpu_usec = v / 1000;
  if (v1_dir(root, self, mounts, "pids", dir, sizeof(dir))) {
    if (read_u64(dir, "/pids.current", &v))
      s->pids = (uint32_t)(v > UINT32_MAX ? UINT32_MAX : v);
    if (read_u64(dir, "/pids.max", &v))
      s->pids_limit = (uint32_t)(v > UINT32_MAX ? UINT32_MAX : v);
  }
  s->source = "cgroup";
  return true;
}

struct proc_row {
  int pid, ppid;
  uint64_t ticks; /* utime + stime + cutime + cstime */
  uint64_t rss;   /* pages */
  int mine;       /* 0 not known yet, 1 sandboxd's, -1 not */
};

static int by_pid(const void *a, const void *b) {
  int x = ((const struct proc_row *)a)->pid;
  int y = ((const struct proc_row *)b)->pid;
  return (x > y) - (x < y);
}

/* Whether ROWS[I] (N rows sorted by pid) is SELF or below it: follows the
 * parents up to a row already decided, and decides the whole chain. */
static int decide(struct proc_row *rows, size_t n, size_t i, int self) {
  size_t chain[64];
  size_t len = 0;
  int verdict = -1;
  for (struct proc_row *r = &rows[i];;) {
    if (r->mine) {
      verdict = r->mine;
      break;
    }
    if (r->pid == self) {
      verdict = 1;
      chain[len++] = (size_t)(r - rows);
      break;
    }
    if (len == SBX_ARRAY_SIZE(chain))
      break; /* deeper than any sandbox's tree: not ours */
    chain[len++] = (size_t)(r - rows);
    struct proc_row key = {.pid = r->ppid};
    r = r->ppid > 0 ? bsearch(&key, rows, n, sizeof(*rows), by_pid) : NULL;
    if (!r)
      break;
  }
  for (size_t k = 0; k < len; k++)
    rows[chain[k]].mine = verdict;
  return verdict;
}

/* Parses ROOT/proc/PID/stat into *R; false when it is gone or odd. */
static bool read_stat(const char *root, int pid, struct proc_row *r) {
  char rel[64];
  (void)snprintf(rel, sizeof(rel), "/proc/%d/stat", pid);
  _cleanup_free_ char *t = slurp(root, rel);
  /* The command name may hold anything: the fields follow its last ')'. */
  const char *p = t ? strrchr(t, ')') : NULL;
  if (!p)
    return false;
  unsigned long long f[22] = {0};
  int n = 0;
  for (p++; *p && n < 22; n++) {
    while (*p == ' ')
      p++;
    if (n == 0) { /* the state letter */
      p++;
      continue;
    }
    f[n] = strtoull(p, (char **)&p, 10);
  }
  if (n < 22)
    return false;
  /* After ')': state ppid pgrp session tty tpgid flags minflt cminflt
   * majflt cmajflt utime stime cutime cstime prio nice threads itreal
   * starttime vsize rss. */
  *r = (struct proc_row){.pid = pid,
                         .ppid = (int)f[1],
                         .ticks = f[11] + f[12] + f[13] + f[14],
                         .rss = f[21]};
  return true;
}

/* Sums sandboxd (SELF) and its descendants in ROOT/proc. */
static int from_proc(const char *root, int self, Sbx__V1__StatsReply *s) {
  char p[4096];
  (void)snprintf(p, sizeof(p), "%s/proc", root);
  DIR *d = opendir(p);
  if (!d)
    return -errno;
  size_t n = 0, cap = 256;
  _cleanup_free_ struct proc_row *rows = calloc(cap, sizeof(*rows));
  struct dirent *de;
  while (rows && n < STATS_PROCS_MAX && (de = readdir(d))) {
    if (!isdigit((unsigned char)de->d_name[0]))
      continue;
    if (n == cap) {
      struct proc_row *g = realloc(rows, 2 * cap * sizeof(*rows));
      if (!g)
        break;
      rows = g;
      cap *= 2;
    }
    char *end = NULL;
    long pid = strtol(de->d_name, &end, 10);
    if (*end == '\0' && pid > 0 && pid <= INT32_MAX &&
        read_stat(root, (int)pid, &rows[n]))
      n++;
  }
  closedir(d);
  if (!rows)
    return -ENOMEM;
  qsort(rows, n, sizeof(*rows), by_pid);
  long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  uint64_t ticks = 0, rss = 0;
  uint32_t pids = 0;
  for (size_t i = 0; i < n; i++)
    if (decide(rows, n, i, self) == 1) {
      ticks += rows[i].ticks;
      rss += rows[i].rss;
      pids++;
    }
  s->cpu_usec = hz > 0 ? ticks * (1000000u / (uint64_t)hz) : 0;
  s->memory_bytes = rss * (uint64_t)(page > 0 ? page : 4096);
  s->pids = pids;
  s->source = "proc";
  return 0;
}

int stats_read(const char *root, int self, Sbx__V1__StatsReply *out) {
  _cleanup_free_ char *cg = slurp(root, "/proc/self/cgroup");
  if (from_cgroup(root, out) || (cg && from_cgroup_v1(root, cg, out)))
    return 0;
  return from_proc(root, self, out);
}

struct disk {
  dev_t dev;
  uint64_t bytes, entries;
  bool truncated;
};

/* Adds the blocks under directory FD (closed) at DEPTH to K, staying on
 * the root's filesystem (bind mounts in the workspace are not counted). */
static void walk(int fd, unsigned depth, struct disk *k) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *de;
  while (!k->truncated && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (++k->entries > STATS_DISK_ENTRIES_MAX) {
      k->truncated = true;
      break;
    }
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        st.st_dev != k->dev)
      continue;
    k->bytes += (uint64_t)st.st_blocks * 512u;
    if (S_ISDIR(st.st_mode) && depth < STATS_DEPTH_MAX) {
      int sub = openat(dirfd(d), de->d_name,
                       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0)
        walk(sub, depth + 1, k);
    }
  }
  closedir(d);
}

int rpc_stats(struct rpc_call *c) {
  const Sbx__V1__Stats *rq = RPC_BODY(c, STATS, stats);
  if (!rq)
    return rpc_no_body(c);
  Sbx__V1__StatsReply *s = sbx_arena_new(&c->arena, Sbx__V1__StatsReply);
  if (!s)
    return -ENOMEM;
  sbx__v1__stats_reply__init(s);
  struct sandboxd *d = c->d;
  int r = stats_read("", (int)getpid(), s);
  if (r < 0)
    return rpc_fail(c, SBX_UNAVAILABLE, -r, "stats: cannot read /proc: %s",
                    strerror(-r));
  if (strcmp(s->source, "proc") == 0) {
    s->memory_limit_bytes = d->memory_limit;
    s->pids_limit =
        (uint32_t)(d->pids_limit > UINT32_MAX ? UINT32_MAX : d->pids_limit);
  }
  s->disk_entries_max = STATS_DISK_ENTRIES_MAX;
  if (rq->disk) {
    struct stat st;
    int fd = openat(d->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
      int err = errno;
      if (fd >= 0)
        close(fd);
      return rpc_fail(c, SBX_UNAVAILABLE, err,
                      "stats: cannot open the workspace: %s", strerror(err));
    }
    struct disk k = {.dev = st.st_dev, .bytes = (uint64_t)st.st_blocks * 512u};
    walk(fd, 0, &k);
    s->disk_bytes = k.bytes;
    s->disk_entries =
        k.entries > STATS_DISK_ENTRIES_MAX ? STATS_DISK_ENTRIES_MAX : k.entries;
    s->disk_truncated = k.truncated;
  }
  s->expires_at = d->expires_at;
  s->idle_timeout_s = d->idle_timeout_s;
  s->idle_ms = rpc_idle_ms(d);
  c->resp->body_case = SBX__V1__RESPONSE__BODY_STATS;
  c->resp->stats = s;
  return 0;
}
