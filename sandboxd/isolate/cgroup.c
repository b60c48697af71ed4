/* Per-sandbox cgroups: finding the hierarchies, creating a sandbox's
 * directories with its limits, moving processes in, killing them and
 * removing the directories. See cgroup.h for where things go and why. */
#include "sandboxd/isolate/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"

#define CG_PARENT "sbx"
#define CG_NAME_MAX 128
#define CG_PATH_MAX 4096
#define CG_MAX_MOUNTS 5 /* cgroup v2 and one v1 hierarchy per controller */
#define CG_MIN_MEMORY (UINT64_C(1) << 20)
#define CG_MAX_PIDS 4194304 /* PID_MAX_LIMIT: the kernel refuses more */
#define CG_MAX_CPUS 1024.0
#define CG_PERIOD_US 100000
#define CG_MIN_QUOTA_US 1000 /* the kernel's minimum cfs quota */
#define CG_KILL_MS 2000
#define CG_FREEZE_MS 100
#define CG_RMDIR_MS 200
#define CG_PROC_FILE_MAX (4u << 20) /* mountinfo, /proc/self/cgroup */
#define CG_SMALL_FILE_MAX (64u << 10)

enum cg_ctrl { CG_MEMORY, CG_PIDS, CG_CPU, CG_FREEZER, CG_NCTRL };
#define CG_BIT(c) (1u << (c))
#define CG_LIMIT_CTRLS (CG_BIT(CG_MEMORY) | CG_BIT(CG_PIDS) | CG_BIT(CG_CPU))

/* Each controller by its kernel name and the isolate_limits field that
 * asks for it. The freezer is never asked for: it serves cgroup_kill. */
static const struct {
  const char *name;
  const char *field;
} ctrl_info[CG_NCTRL] = {
    [CG_MEMORY] = {"memory", "memory_bytes"},
    [CG_PIDS] = {"pids", "pids"},
    [CG_CPU] = {"cpu", "cpus"},
    [CG_FREEZER] = {"freezer", NULL},
};

enum cg_value {
  CG_V_LIMIT,   /* the controller's limit: bytes, pids, quota in us */
  CG_V_ZERO,    /* "0" */
  CG_V_PERIOD,  /* the cfs period in us */
  CG_V_CPU_MAX, /* "QUOTA PERIOD" */
};

/* The files that set each limit, in the order written. An optional file
 * is skipped when the kernel lacks it (memsw without swap accounting,
 * memory.swap.max without swap). */
static const struct cg_limit_file {
  enum cg_ctrl ctrl;
  bool v2;
  const char *file;
  enum cg_value value;
  bool optional;
} limit_files[] = {
    {CG_MEMORY, false, "memory.limit_in_bytes", CG_V_LIMIT, false},
    {CG_MEMORY, false, "memory.memsw.limit_in_bytes", CG_V_LIMIT, true},
    {CG_MEMORY, true, "memory.max", CG_V_LIMIT, false},
    {CG_MEMORY, true, "memory.swap.max", CG_V_ZERO, true},
    {CG_PIDS, false, "pids.max", CG_V_LIMIT, false},
    {CG_PIDS, true, "pids.max", CG_V_LIMIT, false},
    {CG_CPU, false, "cpu.cfs_period_us", CG_V_PERIOD, false},
    {CG_CPU, false, "cpu.cfs_quota_us", CG_V_LIMIT, false},
    {CG_CPU, true, "cpu.max", CG_V_CPU_MAX, false},
};

/* Where cgroup_events finds its counts: FILE's line "KEY N". */
static const struct {
  enum cg_ctrl ctrl;
  bool v2;
  const char *file;
  const char *key;
} event_files[] = {
    {CG_MEMORY, true, "memory.events", "oom_kill"},
    {CG_MEMORY, false, "memory.oom_control", "oom_kill"},
    {CG_PIDS, true, "pids.events", "max"},
    {CG_PIDS, false, "pids.events", "max"},
};

/* One hierarchy and where our own cgroup sits in it. */
struct cg_mount {
  bool v2;
  unsigned ctrls;   /* v1: its mount options; v2: our cgroup.controllers */
  char *point;      /* ROOT + mount point */
  char *mount_root; /* the mount's root within the hierarchy */
  char *base;       /* ROOT + mount point + our cgroup */
};

struct cg_layout {
  struct cg_mount m[CG_MAX_MOUNTS];
  size_t n;
  char mountinfo[CG_PATH_MAX]; /* for messages */
};

/* One of a sandbox's directories. */
struct cg_dir {
  bool v2;
  unsigned ctrls; /* the controllers it serves */
  char *path;
};

struct cgroup {
  struct cg_dir d[CG_MAX_MOUNTS];
  size_t n;
};

SBX_DEFINE_CLEANUP(struct cgroup *, cgroup_destroy)

static int join(char *out, size_t n, const char *a, const char *b) {
  int k = snprintf(out, n, "%s/%s", a, b);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

static void nap_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
  (void)nanosleep(&ts, NULL);
}

/* The controllers named in LIST, words separated by any of SEPS. */
static unsigned ctrl_bits(const char *list, const char *seps) {
  unsigned bits = 0;
  for (const char *p = list; *p;) {
    size_t k = strcspn(p, seps);
    for (int c = 0; c < CG_NCTRL; c++)
      if (k == strlen(ctrl_info[c].name) && !strncmp(p, ctrl_info[c].name, k))
        bits |= CG_BIT(c);
    p += k;
    if (*p)
      p++;
  }
  return bits;
}

static int lowest_ctrl(unsigned bits) {
  for (int c = 0; c < CG_NCTRL; c++)
    if (bits & CG_BIT(c))
      return c;
  return CG_MEMORY;
}

/* Writes VALUE to DIR/FILE with one open, write and close. 0, or a
 * negative errno with E naming the file. */
static int write_value(const char *dir, const char *file, const char *value,
                       struct sbx_error *e) {
  char path[CG_PATH_MAX], eb[64];
  int r = join(path, sizeof(path), dir, file);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "path too long: %s/%s", dir, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    r = -errno;
    return sbx_error_set(e, SBX_OK, -r, "cannot open %s: %s", path,
                         sbx_strerror_lc(-r, eb, sizeof(eb)));
  }
  r = sbx_write_all(fd, value, strlen(value));
  if (close(fd) < 0 && r == 0)
    r = -errno;
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\" to %s: %s", value,
                         path, sbx_strerror_lc(-r, eb, sizeof(eb)));
  return 0;
}

/* Reads the number after "KEY " in DIR/FILE into *OUT; 0 when the file or
 * the key is missing. */
static int read_key(const char *dir, const char *file, const char *key,
                    uint64_t *out) {
  char path[CG_PATH_MAX];
  _cleanup_free_ char *text = NULL;
  size_t len = 0, klen = strlen(key);
  *out = 0;
  int r = join(path, sizeof(path), dir, file);
  if (r < 0)
    return r;
  r = sbx_read_file(path, CG_SMALL_FILE_MAX, &text, &len);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  for (char *line = text; line && *line;) {
    char *next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    if (!strncmp(line, key, klen) && line[klen] == ' ') {
      char *end = NULL;
      errno = 0;
      unsigned long long v = strtoull(line + klen + 1, &end, 10);
      if (errno || end == line + klen + 1)
        return -EBADMSG;
      *out = v;
      return 0;
    }
    line = next;
  }
  return 0;
}

static bool has_file(const char *dir, const char *file) {
  char path[CG_PATH_MAX];
  return join(path, sizeof(path), dir, file) == 0 && access(path, F_OK) == 0;
}

/* ---- Finding the hierarchies ------------------------------------------ */

static void layout_free(struct cg_layout *lay) {
  for (size_t i = 0; i < lay->n; i++) {
    free(lay->m[i].point);
    free(lay->m[i].mount_root);
    free(lay->m[i].base);
  }
  lay->n = 0;
}

/* Undoes mountinfo's octal escapes ("\040" for a space) in place. */
static void unescape(char *s) {
  char *w = s;
  for (const char *r = s; *r;) {
    if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' &&
        r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
      *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
      r += 4;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

/* Takes the cgroup mount on one mountinfo LINE (modified) into LAY: the
 * first cgroup2 mount, and for each controller the first v1 mount with it.
 * Fields: id parent dev root point options [optional...] - fstype source
 * superoptions. */
static int take_mount(char *line, const char *root, struct cg_layout *lay) {
  char *f[64];
  size_t n = 0;
  for (char *p = line; p && n < SBX_ARRAY_SIZE(f);) {
    f[n++] = p;
    p = strchr(p, ' ');
    if (p)
      *p++ = '\0';
  }
  size_t dash = 6;
  while (dash < n && strcmp(f[dash], "-"))
    dash++;
  if (dash + 3 >= n)
    return 0;
  bool v2 = !strcmp(f[dash + 1], "cgroup2");
  unsigned ctrls = 0, taken = 0;
  if (!v2 && strcmp(f[dash + 1], "cgroup"))
    return 0;
  for (size_t i = 0; i < lay->n; i++) {
    if (v2 && lay->m[i].v2)
      return 0;
    taken |= lay->m[i].v2 ? 0 : lay->m[i].ctrls;
  }
  if (!v2) {
    ctrls = ctrl_bits(f[dash + 3], ",") & ~taken;
    if (!ctrls)
      return 0;
  }
  if (lay->n == CG_MAX_MOUNTS)
    return 0;
  unescape(f[3]);
  unescape(f[4]);
  struct cg_mount *m = &lay->m[lay->n];
  *m = (struct cg_mount){.v2 = v2, .ctrls = ctrls};
  if (asprintf(&m->point, "%s%s", root, f[4]) < 0) {
    m->point = NULL;
    return -ENOMEM;
  }
  m->mount_root = strdup(f[3]);
  lay->n++;
  return m->mount_root ? 0 : -ENOMEM;
}

/* Our cgroup in M from /proc/self/cgroup's text SELF: the "0::" line for
 * v2, the line naming one of M's controllers for v1. NULL when absent. */
static char *self_path(const struct cg_mount *m, char *self) {
  for (char *line = self; line && *line;) {
    char *next = strchr(line, '\n');
    if (next)
      *next = '\0';
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    const char *found = NULL;
    if (c2) {
      *c2 = '\0';
      bool is_v2 = c2 == c1 + 1 && !strncmp(line, "0:", 2);
      if (m->v2 ? is_v2 : !is_v2 && (ctrl_bits(c1 + 1, ",") & m->ctrls))
        found = c2 + 1;
      *c2 = ':';
    }
    if (next)
      *next = '\n';
    if (found) {
      size_t k = strcspn(found, "\n");
      return k ? strndup(found, k) : NULL;
    }
    line = next ? next + 1 : NULL;
  }
  return NULL;
}

/* Sets M->base: the mount point plus our cgroup path relative to the
 * mount's root. -ENOENT when we are not visible in M. */
static int locate(struct cg_mount *m, char *self) {
  _cleanup_free_ char *cg = self_path(m, self);
  size_t n = cg ? strlen(cg) : 0;
  if (!cg || cg[0] != '/' || strstr(cg, "/../") ||
      (n >= 3 && !strcmp(cg + n - 3, "/..")))
    return -ENOENT;
  const char *rel = cg;
  size_t k = strlen(m->mount_root);
  if (strcmp(m->mount_root, "/")) {
    if (!strncmp(cg, m->mount_root, k) && (cg[k] == '/' || cg[k] == '\0'))
      rel = cg + k;
    else
      log_debug("cgroup: %s is not beneath %s's root %s; taking it as is", cg,
                m->point, m->mount_root);
  }
  if (!strcmp(rel, "/"))
    rel = "";
  if (asprintf(&m->base, "%s%s", m->point, rel) < 0) {
    m->base = NULL;
    return -ENOMEM;
  }
  if (m->v2) {
    char path[CG_PATH_MAX];
    _cleanup_free_ char *list = NULL;
    size_t len = 0;
    if (join(path, sizeof(path), m->base, "cgroup.controllers") == 0 &&
        sbx_read_file(path, CG_SMALL_FILE_MAX, &list, &len) == 0)
      m->ctrls = ctrl_bits(list, " \n") & CG_LIMIT_CTRLS;
  }
  return 0;
}

/* Reads ROOT/proc/self/mountinfo and ROOT/proc/self/cgroup into LAY:
 * each usable hierarchy with our cgroup's directory in it. */
static int layout_load(const char *root, struct cg_layout *lay,
                       struct sbx_error *e) {
  char self_file[CG_PATH_MAX], eb[64];
  _cleanup_free_ char *mi = NULL, *self = NULL;
  size_t len = 0;
  (void)snprintf(lay->mountinfo, sizeof(lay->mountinfo),
                 "%s/proc/self/mountinfo", root);
  (void)snprintf(self_file, sizeof(self_file), "%s/proc/self/cgroup", root);
  int r = sbx_read_file(lay->mountinfo, CG_PROC_FILE_MAX, &mi, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read %s: %s", lay->mountinfo,
                         sbx_strerror_lc(-r, eb, sizeof(eb)));
  r = sbx_read_file(self_file, CG_PROC_FILE_MAX, &self, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read %s: %s", self_file,
                         sbx_strerror_lc(-r, eb, sizeof(eb)));
  for (char *line = mi; line && *line;) {
    char *next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    r = take_mount(line, root, lay);
    if (r < 0)
      return sbx_error_set(e, SBX_OK, -r, "cannot list cgroup mounts: %s",
                           sbx_strerror_lc(-r, eb, sizeof(eb)));
    line = next;
  }
  for (size_t i = 0; i < lay->n;) {
    r = locate(&lay->m[i], self);
    if (r == -ENOMEM)
      return sbx_error_set(e, SBX_OK, ENOMEM, "cannot list cgroup mounts");
    if (r == 0) {
      i++;
      continue;
    }
    log_debug("cgroup: this process is not in %s (%s); skipping it",
              lay->m[i].point, self_file);
    struct cg_mount gone = lay->m[i];
    lay->m[i] = lay->m[--lay->n];
    free(gone.point);
    free(gone.mount_root);
    free(gone.base);
  }
  return 0;
}

/* The hierarchy that serves controller C: cgroup v2 when our v2 cgroup
 * offers it, else its v1 hierarchy; -1 when none. */
static int provider(const struct cg_layout *lay, enum cg_ctrl c) {
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < lay->n; i++)
      if (lay->m[i].v2 == (pass == 0) && (lay->m[i].ctrls & CG_BIT(c)))
        return (int)i;
  return -1;
}

/* ---- Creating --------------------------------------------------------- */

static int check_name(const char *name, struct sbx_error *e) {
  size_t n = name ? strlen(name) : 0;
  bool ok = n > 0 && n <= CG_NAME_MAX;
  for (size_t i = 0; ok && i < n; i++) {
    char c = name[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9');
    ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '-'));
  }
  if (ok)
    return 0;
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "invalid cgroup name \"%.*s\": one path component of "
                       "letters, digits, '.', '_' and '-', at most %d bytes, "
                       "starting with a letter or digit",
                       CG_NAME_MAX, name ? name : "", CG_NAME_MAX);
}

/* Checks L and sets VAL[c] to each controller's limit (0: none). */
static int limit_values(const struct isolate_limits *l, uint64_t val[CG_NCTRL],
                        struct sbx_error *e) {
  if (l->memory_bytes && l->memory_bytes < CG_MIN_MEMORY)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "memory_bytes %llu is below the minimum of 1 MiB",
                         (unsigned long long)l->memory_bytes);
  if (l->pids > CG_MAX_PIDS)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "pids %llu is above the kernel's maximum of %d",
                         (unsigned long long)l->pids, CG_MAX_PIDS);
  /* Written so that NaN counts as a (bad) limit. */
  bool cpu_limited = !(l->cpus == 0.0);
  if (cpu_limited && !(l->cpus > 0 && l->cpus <= CG_MAX_CPUS))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "cpus %g is not in (0, %g]", l->cpus, CG_MAX_CPUS);
  val[CG_MEMORY] = l->memory_bytes;
  val[CG_PIDS] = l->pids;
  val[CG_CPU] = 0;
  val[CG_FREEZER] = 0;
  if (cpu_limited) {
    uint64_t q = (uint64_t)(l->cpus * CG_PERIOD_US + 0.5);
    val[CG_CPU] = q < CG_MIN_QUOTA_US ? CG_MIN_QUOTA_US : q;
  }
  return 0;
}

/* The error for a limit on controller C that cannot be had, DETAIL saying
 * why (with ERR its errno). */
static int ctrl_error(struct sbx_error *e, const struct cg_layout *lay,
                      enum cg_ctrl c, int err, const char *detail) {
  char where[CG_PATH_MAX];
  int v1 = -1;
  for (size_t i = 0; i < lay->n; i++)
    if (!lay->m[i].v2 && (lay->m[i].ctrls & CG_BIT(c)))
      v1 = (int)i;
  if (v1 >= 0)
    (void)snprintf(where, sizeof(where), "%s", lay->m[v1].point);
  else
    (void)snprintf(where, sizeof(where), "/sys/fs/cgroup/%s",
                   ctrl_info[c].name);
  bool perm = err == EACCES || err == EPERM || err == EROFS;
  return sbx_error_set(
      e, perm ? SBX_PERMISSION_DENIED : SBX_NOT_SUPPORTED, err,
      "the %s limit needs a writable cgroup %s controller (cgroup v2 "
      "delegated to this user, or v1 mounted at %s): %s, or set %s to 0 (%s)",
      ctrl_info[c].name, ctrl_info[c].name, where,
      perm ? "run as root" : "mount or delegate it", ctrl_info[c].field,
      detail);
}

/* The error for a limit on C that no hierarchy offers. */
static int missing_error(struct sbx_error *e, const struct cg_layout *lay,
                         enum cg_ctrl c) {
  char detail[CG_PATH_MAX + 128];
  const struct cg_mount *v2 = NULL;
  for (size_t i = 0; i < lay->n; i++)
    if (lay->m[i].v2)
      v2 = &lay->m[i];
  if (v2)
    (void)snprintf(detail, sizeof(detail),
                   "%s/cgroup.controllers lacks it and no v1 hierarchy in %s "
                   "has it",
                   v2->base, lay->mountinfo);
  else
    (void)snprintf(detail, sizeof(detail), "no cgroup hierarchy in %s has it",
                   lay->mountinfo);
  return ctrl_error(e, lay, c, ENODEV, detail);
}

/* Enables WANT's controllers in DIR/cgroup.subtree_control (v2), those not
 * on yet, so that DIR's children get them. */
static int enable_ctrls(const char *dir, unsigned want, struct sbx_error *e) {
  char path[CG_PATH_MAX], eb[64];
  _cleanup_free_ char *on = NULL;
  size_t len = 0;
  int r = join(path, sizeof(path), dir, "cgroup.subtree_control");
  if (r == 0)
    r = sbx_read_file(path, CG_SMALL_FILE_MAX, &on, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read %s: %s", path,
                         sbx_strerror_lc(-r, eb, sizeof(eb)));
  want &= ~ctrl_bits(on, " \n");
  for (int c = 0; c < CG_NCTRL; c++) {
    if (!(want & CG_BIT(c)))
      continue;
    char plus[32];
    (void)snprintf(plus, sizeof(plus), "+%s", ctrl_info[c].name);
    r = write_value(dir, "cgroup.subtree_control", plus, e);
    if (r == -EBUSY)
      return sbx_error_set(
          e, SBX_OK, EBUSY,
          "cannot enable %s in %s: device or resource busy: %s holds "
          "processes, and cgroup v2 gives controllers to the children of a "
          "cgroup only when it holds none (run sandboxd in the root cgroup "
          "or one it has emptied)",
          ctrl_info[c].name, path, dir);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Whether the cgroup DIR lists a process (an unreadable list counts). */
static bool has_procs(const char *dir) {
  char path[CG_PATH_MAX];
  if (join(path, sizeof(path), dir, "cgroup.procs") < 0)
    return true;
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  char c;
  return fd < 0 ? errno != ENOENT : read(fd, &c, 1) != 0;
}

/* Removes the cgroup PATH when it is a leftover: a sandbox of the same
 * name that was killed before it could remove it. Such a cgroup empties
 * as the dead sandbox's PID namespace is torn down (and a v1 memory cgroup
 * is uncharged), so up to 2 s are given to it; one that still holds
 * processes belongs to a live sandbox and stays. 0 when removed. */
static int reclaim(const char *path) {
  for (int i = 0; i < 200; i++) {
    if (!has_procs(path)) {
      if (rmdir(path) == 0)
        return 0;
      if (errno != EBUSY)
        return -1; /* not a cgroup: a directory with files */
    }
    (void)usleep(10000);
  }
  return -1;
}

/* Makes PATH; EEXIST is fine when EXIST_OK. Otherwise a leftover of a
 * killed sandbox of the same name (see reclaim) is removed and made again;
 * a cgroup in use is refused. */
static int make_dir(const char *path, bool exist_ok, struct sbx_error *e) {
  char eb[64];
  if (mkdir(path, 0755) == 0 || (exist_ok && errno == EEXIST))
    return 0;
  int err = errno;
  if (err == EEXIST && !exist_ok && reclaim(path) == 0 &&
      mkdir(path, 0755) == 0)
    return 0;
  if (err == EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "cgroup %s already exists", path);
  return sbx_error_set(e, SBX_OK, err, "cannot create %s: %s", path,
                       sbx_strerror_lc(err, eb, sizeof(eb)));
}

/* Creates M->base/sbx (kept) and M->base/sbx/NAME into *OUT (new), with
 * WANT's controllers enabled on the way down for v2. */
static int mount_create(const struct cg_mount *m, const char *name,
                        unsigned want, char **out, struct sbx_error *e) {
  char parent[CG_PATH_MAX], dir[CG_PATH_MAX];
  if (join(parent, sizeof(parent), m->base, CG_PARENT) < 0 ||
      join(dir, sizeof(dir), parent, name) < 0)
    return sbx_error_set(e, SBX_OK, ENAMETOOLONG, "path too long: %s/%s/%s",
                         m->base, CG_PARENT, name);
  int r = 0;
  if (m->v2 && want)
    r = enable_ctrls(m->base, want, e);
  if (r == 0)
    r = make_dir(parent, true, e);
  if (r == 0 && m->v2 && want)
    r = enable_ctrls(parent, want, e);
  if (r == 0)
    r = make_dir(dir, false, e);
  if (r < 0)
    return r;
  *out = strdup(dir);
  if (!*out) {
    (void)rmdir(dir);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  return 0;
}

/* Writes D's limits from VAL (see limit_files). */
static int apply_limits(const struct cg_dir *d, const uint64_t val[CG_NCTRL],
                        struct sbx_error *e) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(limit_files); i++) {
    const struct cg_limit_file *f = &limit_files[i];
    if (f->v2 != d->v2 || !(d->ctrls & CG_BIT(f->ctrl)) || !val[f->ctrl])
      continue;
    if (f->optional && !has_file(d->path, f->file))
      continue;
    char v[64];
    unsigned long long x = val[f->ctrl];
    switch (f->value) {
    case CG_V_LIMIT:
      (void)snprintf(v, sizeof(v), "%llu", x);
      break;
    case CG_V_ZERO:
      (void)snprintf(v, sizeof(v), "0");
      break;
    case CG_V_PERIOD:
      (void)snprintf(v, sizeof(v), "%d", CG_PERIOD_US);
      break;
    case CG_V_CPU_MAX:
      (void)snprintf(v, sizeof(v), "%llu %d", x, CG_PERIOD_US);
      break;
    }
    int r = write_value(d->path, f->file, v, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Whether a failure with ERR means the controller cannot be had here (as
 * opposed to, say, a value the kernel refuses). */
static bool unavailable(int err) {
  return err == EACCES || err == EPERM || err == EROFS || err == ENOENT ||
         err == EBUSY || err == ENODEV || err == EOPNOTSUPP;
}

/* Creates CG's directory in hierarchy M with the limits of the controllers
 * WANT it serves. A hierarchy without limits to set that cannot be used is
 * skipped; an existing NAME is always an error. */
static int create_one(struct cgroup *cg, const struct cg_layout *lay,
                      const struct cg_mount *m, const char *name, unsigned want,
                      const uint64_t val[CG_NCTRL], struct sbx_error *e) {
  struct sbx_error de = {0};
  char *path = NULL;
  int r = mount_create(m, name, want, &path, &de);
  if (r == 0) {
    struct cg_dir *d = &cg->d[cg->n++];
    *d = (struct cg_dir){
        .v2 = m->v2, .ctrls = m->v2 ? want : m->ctrls, .path = path};
    r = apply_limits(d, val, &de);
  }
  if (r == 0)
    return 0;
  if (r == -EEXIST || (want && !unavailable(-r))) {
    if (e)
      *e = de;
    return r;
  }
  if (want)
    return ctrl_error(e, lay, lowest_ctrl(want), -r, de.msg);
  log_debug("cgroup: skipping %s: %s", m->point, de.msg);
  return 0;
}

int cgroup_create_in(const char *root, const char *name,
                     const struct isolate_limits *l, struct cgroup **out,
                     struct sbx_error *e) {
  static const struct isolate_limits none;
  uint64_t val[CG_NCTRL];
  unsigned need = 0;
  if (!out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "no output");
  *out = NULL;
  int r = check_name(name, e);
  if (r == 0)
    r = limit_values(l ? l : &none, val, e);
  if (r < 0)
    return r;
  for (int c = 0; c < CG_NCTRL; c++)
    need |= val[c] ? CG_BIT(c) : 0;

  _cleanup_(layout_free) struct cg_layout lay = {0};
  struct sbx_error le = {0};
  r = layout_load(root ? root : "", &lay, &le);
  if (r < 0 && need) {
    if (e)
      *e = le;
    return r;
  }
  if (r < 0)
    log_debug("cgroup: no cgroups for \"%s\": %s", name, le.msg);
  unsigned want[CG_MAX_MOUNTS] = {0};
  for (int c = 0; c < CG_NCTRL; c++) {
    if (!(need & CG_BIT(c)))
      continue;
    int i = provider(&lay, c);
    if (i < 0)
      return missing_error(e, &lay, c);
    want[i] |= CG_BIT(c);
  }

  _cleanup_(cgroup_destroyp) struct cgroup *cg = calloc(1, sizeof(*cg));
  if (!cg)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  for (size_t i = 0; i < lay.n; i++) {
    r = create_one(cg, &lay, &lay.m[i], name, want[i], val, e);
    if (r < 0)
      return r;
  }
  *out = TAKE_PTR(cg);
  return 0;
}

int cgroup_create(const char *name, const struct isolate_limits *l,
                  struct cgroup **out, struct sbx_error *e) {
  return cgroup_create_in(NULL, name, l, out, e);
}

/* ---- Using ------------------------------------------------------------ */

int cgroup_add(struct cgroup *cg, pid_t pid, struct sbx_error *e) {
  if (!cg || pid <= 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "cannot add pid %d to a cgroup", (int)pid);
  char v[24];
  (void)snprintf(v, sizeof(v), "%d", (int)pid);
  for (size_t i = 0; i < cg->n; i++) {
    int r = write_value(cg->d[i].path, "cgroup.procs", v, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* SIGKILLs each process listed in DIR/cgroup.procs but SELF; returns how
 * many were listed (SELF included). */
static size_t kill_listed(const char *dir, pid_t self) {
  char path[CG_PATH_MAX];
  if (join(path, sizeof(path), dir, "cgroup.procs") < 0)
    return 0;
  _cleanup_fclose_ FILE *f = fopen(path, "re");
  char eb[64];
  if (!f) {
    if (errno != ENOENT)
      log_debug("cgroup: cannot read %s: %s", path,
                sbx_strerror_lc(errno, eb, sizeof(eb)));
    return 0;
  }
  _cleanup_free_ char *line = NULL;
  size_t cap = 0, n = 0;
  while (getline(&line, &cap, f) > 0) {
    char *end = NULL;
    errno = 0;
    long v = strtol(line, &end, 10);
    if (errno || end == line || v <= 0 || v > INT_MAX)
      continue;
    n++;
    if ((pid_t)v != self && kill((pid_t)v, SIGKILL) < 0 && errno != ESRCH)
      log_debug("cgroup: cannot kill %ld: %s", v,
                sbx_strerror_lc(errno, eb, sizeof(eb)));
  }
  return n;
}

/* Freezes (FREEZE) or thaws CG where a freezer is at hand: v1
 * freezer.state, or v2 cgroup.freeze when there is no cgroup.kill. When
 * freezing, waits up to CG_FREEZE_MS for it to take. Returns whether
 * anything was asked to freeze. */
static bool set_frozen(struct cgroup *cg, bool freeze) {
  bool any = false;
  for (size_t i = 0; i < cg->n; i++) {
    const struct cg_dir *d = &cg->d[i];
    if (d->v2 && has_file(d->path, "cgroup.freeze"))
      any |=
          write_value(d->path, "cgroup.freeze", freeze ? "1" : "0", NULL) == 0;
    else if (!d->v2 && (d->ctrls & CG_BIT(CG_FREEZER)))
      any |= write_value(d->path, "freezer.state", freeze ? "FROZEN" : "THAWED",
                         NULL) == 0;
  }
  uint64_t until = sbx_now_ms() + CG_FREEZE_MS;
  while (freeze && any && sbx_now_ms() < until) {
    bool done = true;
    for (size_t i = 0; i < cg->n; i++) {
      const struct cg_dir *d = &cg->d[i];
      char path[CG_PATH_MAX];
      _cleanup_free_ char *s = NULL;
      size_t len = 0;
      uint64_t frozen = 1;
      if (d->v2)
        (void)read_key(d->path, "cgroup.events", "frozen", &frozen);
      else if ((d->ctrls & CG_BIT(CG_FREEZER)) &&
               join(path, sizeof(path), d->path, "freezer.state") == 0 &&
               sbx_read_file(path, CG_SMALL_FILE_MAX, &s, &len) == 0)
        frozen = strncmp(s, "FROZEN", 6) == 0;
      done &= frozen != 0;
    }
    if (done)
      break;
    nap_ms(1);
  }
  return any;
}

int cgroup_kill(struct cgroup *cg) {
  if (!cg)
    return -EINVAL;
  if (cg->n == 0)
    return -ENODEV;
  const char *v2 = NULL;
  for (size_t i = 0; i < cg->n; i++)
    if (cg->d[i].v2)
      v2 = cg->d[i].path;
  bool use_kill = v2 && has_file(v2, "cgroup.kill");
  uint64_t deadline = sbx_now_ms() + CG_KILL_MS;
  unsigned nap = 1;
  pid_t self = getpid();
  for (;;) {
    if (use_kill && write_value(v2, "cgroup.kill", "1", NULL) < 0)
      use_kill = false;
    bool frozen = !use_kill && set_frozen(cg, true);
    size_t n = 0;
    for (size_t i = 0; i < cg->n; i++)
      n += kill_listed(cg->d[i].path, self);
    /* A v1-frozen process dies of its SIGKILL only once thawed. */
    if (frozen)
      (void)set_frozen(cg, false);
    if (n == 0)
      return 0;
    if (sbx_now_ms() >= deadline)
      return -ETIMEDOUT;
    nap_ms(nap);
    nap = nap < 16 ? nap * 2 : nap;
  }
}

/* Removes PATH, waiting out a short EBUSY while its last processes go. */
static void remove_dir(const char *path) {
  uint64_t until = sbx_now_ms() + CG_RMDIR_MS;
  char eb[64];
  while (rmdir(path) < 0) {
    if (errno == ENOENT)
      return;
    if (errno != EBUSY || sbx_now_ms() >= until) {
      log_debug("cgroup: cannot remove %s: %s", path,
                sbx_strerror_lc(errno, eb, sizeof(eb)));
      return;
    }
    nap_ms(5);
  }
}

struct cgroup *cgroup_destroy(struct cgroup *cg) {
  if (!cg)
    return NULL;
  if (cg->n) {
    char eb[64];
    int r = cgroup_kill(cg);
    if (r < 0)
      log_debug("cgroup: %s still holds processes: %s", cg->d[0].path,
                sbx_strerror_lc(-r, eb, sizeof(eb)));
  }
  for (size_t i = cg->n; i-- > 0;) {
    remove_dir(cg->d[i].path);
    free(cg->d[i].path);
  }
  free(cg);
  return NULL;
}

int cgroup_events(struct cgroup *cg, uint64_t *oom_kills,
                  uint64_t *pids_refused) {
  if (!cg)
    return -EINVAL;
  uint64_t count[CG_NCTRL] = {0};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(event_files); i++) {
    for (size_t j = 0; j < cg->n; j++) {
      const struct cg_dir *d = &cg->d[j];
      if (d->v2 != event_files[i].v2 ||
          !(d->ctrls & CG_BIT(event_files[i].ctrl)))
        continue;
      uint64_t v = 0;
      int r = read_key(d->path, event_files[i].file, event_files[i].key, &v);
      if (r < 0)
        return r;
      count[event_files[i].ctrl] += v;
    }
  }
  if (oom_kills)
    *oom_kills = count[CG_MEMORY];
  if (pids_refused)
    *pids_refused = count[CG_PIDS];
  return 0;
}

const char *cgroup_path(const struct cgroup *cg, const char *controller) {
  if (!cg)
    return NULL;
  unsigned bit = controller ? ctrl_bits(controller, "") : 0;
  if (controller && !bit)
    return NULL;
  for (size_t i = 0; i < cg->n; i++)
    if (controller ? (cg->d[i].ctrls & bit) != 0 : cg->d[i].v2)
      return cg->d[i].path;
  return NULL;
}
