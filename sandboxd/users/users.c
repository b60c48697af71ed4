/* UsersEnsure: create missing groups, then users, then memberships.
 *
 * Idempotent: an existing user or group is left as it is (even when its id
 * differs from the one asked for) and is not reported; an existing
 * membership is not added twice. With shadow's tools installed they do the
 * work (argv, a clean environment, no shell); otherwise the files are
 * edited here. Lookups go through userdb.h (the files, no NSS), as every
 * other use of users in sandboxd does. */
#include "sandboxd/users/users.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/users/userdb.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "shared/rand.h"

#define USERS_DB_MAX (16u << 20) /* largest passwd/group file we rewrite */
#define USERS_TOOL_OUTPUT 1024   /* bytes of a tool's output kept */
#define USERS_LOCK_TRIES 1000    /* 10 ms each */
#define USERS_DEFAULT_SHELL "/usr/sbin/nologin"

struct ensure {
  struct rpc_call *c;
  const char *etc; /* for userdb lookups; NULL is /etc */
  /* The file backend: ETC as an O_PATH directory fd; -1 with tools. */
  int etc_fd;
  bool have_shadow, have_gshadow;
  char **created; /* malloc'd array of arena strings */
  size_t ncreated, cap;
};

static int record(struct ensure *en, const char *kind, const char *name) {
  if (en->ncreated == en->cap) {
    size_t nc = en->cap ? en->cap * 2 : 8;
    char **v = realloc(en->created, nc * sizeof(*v));
    if (!v)
      return -ENOMEM;
    en->created = v;
    en->cap = nc;
  }
  size_t n = strlen(kind) + strlen(name) + 2;
  char *s = sbx_arena_alloc(&en->c->arena, n);
  if (!s)
    return -ENOMEM;
  (void)snprintf(s, n, "%s:%s", kind, name);
  en->created[en->ncreated++] = s;
  return 0;
}

static bool group_exists(struct ensure *en, const char *name, gid_t *gid) {
  gid_t g;
  return userdb_group(en->etc, name, gid ? gid : &g) == 0;
}

static bool user_exists(struct ensure *en, const char *name,
                        struct userdb_user *u) {
  struct userdb_user tmp;
  return userdb_user(en->etc, name, u ? u : &tmp) == 0;
}

/* ---- validation --------------------------------------------------------- */

static int check_name(struct rpc_call *c, const char *what, const char *name) {
  if (!name || !userdb_valid_name(name))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "invalid %s name \"%.64s\" (want [a-z_][a-z0-9_-]*, at "
                    "most 32 characters)",
                    what, name ? name : "");
  return 0;
}

/* A home or shell: absolute, no ':' or control characters. */
static int check_path_field(struct rpc_call *c, const char *what,
                            const char *user, const char *p) {
  size_t n = strlen(p);
  bool ok = n > 0 && n < 256 && p[0] == '/';
  for (size_t i = 0; ok && i < n; i++)
    ok = p[i] != ':' && (unsigned char)p[i] >= 0x20 && p[i] != 0x7f;
  if (!ok)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "invalid %s \"%.64s\" for user \"%s\" (want an absolute "
                    "path without ':')",
                    what, p, user);
  return 0;
}

static int check_id(struct rpc_call *c, const char *what, const char *name,
                    uint32_t id) {
  if (id == 0xffffffffu || id == 0xfffeu || id == 0xffffu)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "%s %u for \"%s\" is reserved", what, id, name);
  return 0;
}

/* Checks the whole request before anything changes. */
static int validate(struct rpc_call *c, const Sbx__V1__UsersEnsure *m) {
  if (m->n_groups > USERS_MAX_ENTRIES || m->n_users > USERS_MAX_ENTRIES)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "at most %d users and %d groups in one request",
                    USERS_MAX_ENTRIES, USERS_MAX_ENTRIES);
  for (size_t i = 0; i < m->n_groups; i++) {
    const Sbx__V1__Group *g = m->groups[i];
    int r = check_name(c, "group", g->name);
    if (r == 0)
      r = check_id(c, "gid", g->name, g->gid);
    if (r < 0)
      return r;
    if (g->n_members > USERS_MAX_ENTRIES)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "group \"%s\" has more than %d members", g->name,
                      USERS_MAX_ENTRIES);
    for (size_t j = 0; j < g->n_members; j++)
      if ((r = check_name(c, "user", g->members[j])) < 0)
        return r;
  }
  for (size_t i = 0; i < m->n_users; i++) {
    const Sbx__V1__User *u = m->users[i];
    int r = check_name(c, "user", u->name);
    if (r == 0)
      r = check_id(c, "uid", u->name, u->uid);
    if (r == 0 && u->home && *u->home)
      r = check_path_field(c, "home", u->name, u->home);
    if (r == 0 && u->shell && *u->shell)
      r = check_path_field(c, "shell", u->name, u->shell);
    if (r < 0)
      return r;
    if (u->n_groups > USERDB_MAX_GROUPS)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "user \"%s\" has more than %d groups", u->name,
                      USERDB_MAX_GROUPS);
    for (size_t j = 0; j < u->n_groups; j++)
      if ((r = check_name(c, "group", u->groups[j])) < 0)
        return r;
  }
  return 0;
}

/* ---- tools -------------------------------------------------------------- */

static bool find_tool(const char *name, char *out, size_t n) {
  static const char *const dirs[] = {"/usr/sbin", "/sbin"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(dirs); i++) {
    int k = snprintf(out, n, "%s/%s", dirs[i], name);
    if (k > 0 && (size_t)k < n && access(out, X_OK) == 0)
      return true;
  }
  return false;
}

/* Runs ARGV (argv[0] an absolute path) with a clean environment, stdin
 * from /dev/null and stdout+stderr into OUT (truncated, printable). Returns
 * its exit status (>= 0), or a negative errno; -ECHILD when someone else
 * reaped it (the caller then checks the result instead). */
static int run_tool(char *const argv[], char *out, size_t outsz) {
  static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C",
                               "LC_ALL=C", NULL};
  out[0] = '\0';
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  _cleanup_close_ int rd = p[0];
  _cleanup_close_ int wr = p[1];
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  int r = posix_spawn_file_actions_init(&fa);
  if (r)
    return -r;
  r = posix_spawnattr_init(&at);
  if (r) {
    posix_spawn_file_actions_destroy(&fa);
    return -r;
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  if (!(r = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY,
                                             0)) &&
      !(r = posix_spawn_file_actions_adddup2(&fa, wr, 1)) &&
      !(r = posix_spawn_file_actions_adddup2(&fa, wr, 2)) &&
      !(r = posix_spawnattr_setsigmask(&at, &none)) &&
      !(r = posix_spawnattr_setsigdefault(&at, &all)))
    r = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
                                          POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (!r)
    r = posix_spawn(&pid, argv[0], &fa, &at, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (r)
    return -r;
  close(TAKE_FD(wr));
  size_t n = 0;
  for (;;) {
    char b[512];
    ssize_t k = read(rd, b, sizeof(b));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    n = sbx_append_printable(out, n, outsz, b, (size_t)k);
  }
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
    n--;
  for (size_t i = 0; i < n; i++)
    if (out[i] == '\n')
      out[i] = ' ';
  out[n] = '\0';
  int status;
  for (;;) {
    if (waitpid(pid, &status, 0) >= 0)
      break;
    if (errno != EINTR)
      return -errno;
  }
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Runs a tool that creates NAME. Returns 0 when it did, 1 when it failed
 * but DONE (a check of the files) finds NAME anyway (a concurrent request
 * made it), or a negative errno with C's error set. A lost exit status
 * (another thread reaped the child) is judged by DONE alone. */
static int tool(struct ensure *en, char *const argv[],
                bool (*done)(struct ensure *, const char *), const char *name) {
  char out[USERS_TOOL_OUTPUT];
  int st = run_tool(argv, out, sizeof(out));
  if (st == 0)
    return 0;
  if (done(en, name))
    return st == -ECHILD ? 0 : 1;
  const char *tn = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  if (st < 0)
    return rpc_fail(en->c, SBX_INTERNAL, -st, "cannot run %s for \"%s\": %s",
                    tn, name, sbx_strerror_lc(-st, out, sizeof(out)));
  return rpc_fail(en->c, st == 4 ? SBX_CONFLICT : SBX_INTERNAL, EIO,
                  "%s for \"%s\" failed (exit %d): %s", tn, name, st,
                  out[0] ? out : "no output");
}

static bool group_done(struct ensure *en, const char *name) {
  return group_exists(en, name, NULL);
}

static bool user_done(struct ensure *en, const char *name) {
  return user_exists(en, name, NULL);
}

static int tool_add_group(struct ensure *en, const char *name, uint32_t gid) {
  char bin[64], ids[16];
  if (!find_tool("groupadd", bin, sizeof(bin)))
    return rpc_fail(en->c, SBX_NOT_SUPPORTED, ENOENT,
                    "groupadd is not installed");
  (void)snprintf(ids, sizeof(ids), "%u", gid);
  char *argv[] = {bin, (char *)"-g", ids, (char *)name, NULL};
  char *noid[] = {bin, (char *)name, NULL};
  return tool(en, gid ? argv : noid, group_done, name);
}

static int tool_add_user(struct ensure *en, const Sbx__V1__User *u,
                         bool private_group) {
  char bin[64], ids[16];
  if (!find_tool("useradd", bin, sizeof(bin)))
    return rpc_fail(en->c, SBX_NOT_SUPPORTED, ENOENT,
                    "useradd is not installed");
  char *argv[16];
  size_t n = 0;
  argv[n++] = bin;
  argv[n++] = (char *)"-s";
  argv[n++] = (char *)(u->shell && *u->shell ? u->shell : USERS_DEFAULT_SHELL);
  if (u->uid) {
    (void)snprintf(ids, sizeof(ids), "%u", u->uid);
    argv[n++] = (char *)"-u";
    argv[n++] = ids;
  }
  if (u->home && *u->home) {
    argv[n++] = (char *)"-m";
    argv[n++] = (char *)"-d";
    argv[n++] = u->home;
  } else {
    argv[n++] = (char *)"-M";
  }
  if (private_group) {
    argv[n++] = (char *)"-U";
  } else {
    argv[n++] = (char *)"-g";
    argv[n++] = u->name;
  }
  argv[n++] = u->name;
  argv[n] = NULL;
  return tool(en, argv, user_done, u->name);
}

static int tool_add_member(struct ensure *en, const char *group,
                           const char *user) {
  char bin[64];
  if (!find_tool("usermod", bin, sizeof(bin)))
    return rpc_fail(en->c, SBX_NOT_SUPPORTED, ENOENT,
                    "usermod is not installed");
  char *argv[] = {bin, (char *)"-aG", (char *)group, (char *)user, NULL};
  char out[USERS_TOOL_OUTPUT];
  int st = run_tool(argv, out, sizeof(out));
  if (st == 0 || st == -ECHILD)
    return 0;
  if (st < 0)
    return rpc_fail(en->c, SBX_INTERNAL, -st,
                    "cannot run usermod to add \"%s\" to \"%s\": %s", user,
                    group, sbx_strerror_lc(-st, out, sizeof(out)));
  return rpc_fail(en->c, SBX_INTERNAL, EIO,
                  "usermod adding \"%s\" to \"%s\" failed (exit %d): %s", user,
                  group, st, out[0] ? out : "no output");
}

/* ---- files -------------------------------------------------------------- */

/* Reads ETC_FD/NAME into B and its stat into ST; -ENOENT when missing. */
static int db_read(int etc_fd, const char *name, struct sbx_buf *b,
                   struct stat *st) {
  _cleanup_close_ int fd =
      openat(etc_fd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  if (fstat(fd, st) < 0)
    return -errno;
  if (!S_ISREG(st->st_mode))
    return -EINVAL;
  sbx_buf_init(b, USERS_DB_MAX);
  for (;;) {
    int r = sbx_buf_reserve(b, 4096);
    if (r < 0)
      return r;
    ssize_t n = read(fd, b->data + b->len, b->cap - b->len - 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -errno;
    if (n == 0)
      break;
    b->len += (size_t)n;
    b->data[b->len] = '\0';
  }
  if (b->len && memchr(b->data, '\0', b->len))
    return -EBADMSG;
  return 0;
}

/* Replaces ETC_FD/NAME by DATA through a temporary file, keeping OLD's mode
 * and owner. */
static int db_write(int etc_fd, const char *name, const struct sbx_buf *b,
                    const struct stat *old) {
  char hex[17], tmp[128];
  int r = sbx_random_hex(hex, 8);
  if (r < 0)
    return r;
  (void)snprintf(tmp, sizeof(tmp), ".%s.sbx-%s", name, hex);
  _cleanup_close_ int fd = openat(
      etc_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  if (r == 0)
    r = sbx_write_all(fd, b->data, b->len);
  if (r == 0 && fchown(fd, old->st_uid, old->st_gid) < 0 && errno != EPERM)
    r = -errno;
  if (r == 0 && fchmod(fd, old->st_mode & 07777) < 0)
    r = -errno;
  if (r == 0 && fsync(fd) < 0)
    r = -errno;
  if (r == 0 && renameat(etc_fd, tmp, etc_fd, name) < 0)
    r = -errno;
  if (r < 0)
    (void)unlinkat(etc_fd, tmp, 0);
  return r;
}

/* The line of B whose first field is NAME: [*START, *END) without its
 * newline. */
static bool db_find(const struct sbx_buf *b, const char *name, size_t *start,
                    size_t *end) {
  size_t nl = strlen(name);
  size_t i = 0;
  while (i < b->len) {
    const char *e = memchr(b->data + i, '\n', b->len - i);
    size_t j = e ? (size_t)(e - b->data) : b->len;
    if (j - i > nl && memcmp(b->data + i, name, nl) == 0 &&
        b->data[i + nl] == ':') {
      *start = i;
      *end = j;
      return true;
    }
    i = j + 1;
  }
  return false;
}

/* Marks in USED (indexed from USERS_ID_MIN) the ids of field 2 of B. */
static void db_ids(const struct sbx_buf *b, unsigned char *used) {
  size_t i = 0;
  while (i < b->len) {
    const char *e = memchr(b->data + i, '\n', b->len - i);
    size_t j = e ? (size_t)(e - b->data) : b->len;
    const char *p = b->data + i;
    const char *end = b->data + j;
    for (int f = 0; f < 2 && p < end; f++) {
      const char *c = memchr(p, ':', (size_t)(end - p));
      p = c ? c + 1 : end;
    }
    unsigned long v = 0;
    bool digits = p < end && *p >= '0' && *p <= '9';
    while (p < end && *p >= '0' && *p <= '9' && v < 0x100000000UL)
      v = v * 10 + (unsigned long)(*p++ - '0');
    if (digits && (p == end || *p == ':') && v >= USERS_ID_MIN &&
        v <= USERS_ID_MAX)
      used[v - USERS_ID_MIN] = 1;
    i = j + 1;
  }
}

/* Whether ID is used in field 2 of B (any range). */
static bool db_id_used(const struct sbx_buf *b, unsigned long id) {
  char key[16];
  int kl = snprintf(key, sizeof(key), "%lu", id);
  size_t i = 0;
  while (i < b->len) {
    const char *e = memchr(b->data + i, '\n', b->len - i);
    size_t j = e ? (size_t)(e - b->data) : b->len;
    const char *p = b->data + i;
    const char *end = b->data + j;
    for (int f = 0; f < 2 && p < end; f++) {
      const char *c = memchr(p, ':', (size_t)(end - p));
      p = c ? c + 1 : end;
    }
    const char *c = memchr(p, ':', (size_t)(end - p));
    size_t fl = c ? (size_t)(c - p) : (size_t)(end - p);
    if (fl == (size_t)kl && memcmp(p, key, fl) == 0)
      return true;
    i = j + 1;
  }
  return false;
}

/* The lowest id in [USERS_ID_MIN, USERS_ID_MAX] unused in B (and in B2
 * when given), or -ENOSPC. */
static long db_free_id(const struct sbx_buf *b, const struct sbx_buf *b2,
                       unsigned long prefer) {
  if (prefer && !db_id_used(b, prefer) && (!b2 || !db_id_used(b2, prefer)))
    return (long)prefer;
  unsigned char *used = calloc(USERS_ID_MAX - USERS_ID_MIN + 1, 1);
  if (!used)
    return -ENOMEM;
  db_ids(b, used);
  if (b2)
    db_ids(b2, used);
  long id = -ENOSPC;
  for (unsigned long v = USERS_ID_MIN; v <= USERS_ID_MAX; v++)
    if (!used[v - USERS_ID_MIN]) {
      id = (long)v;
      break;
    }
  free(used);
  return id;
}

/* Appends LINE (and a newline) to B, adding a missing final newline. */
static int db_append(struct sbx_buf *b, const char *line) {
  if (b->len && b->data[b->len - 1] != '\n') {
    int r = sbx_buf_append(b, "\n", 1);
    if (r < 0)
      return r;
  }
  int r = sbx_buf_append_str(b, line);
  return r < 0 ? r : sbx_buf_append(b, "\n", 1);
}

/* Adds USER to the member list (field 3) of GROUP's line in B; *CHANGED
 * tells whether it was missing. -ENOENT without such a line. */
static int db_add_member(struct sbx_buf *b, const char *group, const char *user,
                         bool *changed) {
  size_t s, e;
  *changed = false;
  if (!db_find(b, group, &s, &e))
    return -ENOENT;
  size_t colons = 0, mstart = e;
  for (size_t i = s; i < e; i++)
    if (b->data[i] == ':' && ++colons == 3)
      mstart = i + 1;
  if (colons < 2 || colons > 3)
    return -EBADMSG;
  if (colons == 3) {
    size_t ul = strlen(user);
    for (size_t i = mstart; i <= e;) {
      const char *c = memchr(b->data + i, ',', e - i);
      size_t j = c ? (size_t)(c - b->data) : e;
      if (j - i == ul && memcmp(b->data + i, user, ul) == 0)
        return 0;
      i = j + 1;
    }
  }
  struct sbx_buf nb;
  sbx_buf_init(&nb, USERS_DB_MAX);
  const char *sep = colons == 2 ? ":" : (e > mstart ? "," : "");
  int r = sbx_buf_append(&nb, b->data, e);
  if (r == 0)
    r = sbx_buf_printf(&nb, "%s%s", sep, user);
  if (r == 0)
    r = sbx_buf_append(&nb, b->data + e, b->len - e);
  if (r < 0) {
    sbx_buf_free(&nb);
    return r;
  }
  sbx_buf_free(b);
  *b = nb;
  *changed = true;
  return 0;
}

/* The four databases, loaded once per request under the lock. */
struct dbs {
  struct sbx_buf passwd, group, shadow, gshadow;
  struct stat passwd_st, group_st, shadow_st, gshadow_st;
};

static void dbs_free(struct dbs *d) {
  sbx_buf_free(&d->passwd);
  sbx_buf_free(&d->group);
  sbx_buf_free(&d->shadow);
  sbx_buf_free(&d->gshadow);
}

static int db_fail(struct ensure *en, int r, const char *what,
                   const char *file) {
  char b[128];
  return rpc_fail(en->c, r == -EBADMSG ? SBX_INTERNAL : SBX_OK, -r,
                  "cannot %s %s/%s: %s", what, en->etc ? en->etc : "/etc", file,
                  sbx_strerror_lc(-r, b, sizeof(b)));
}

/* Loads FILE into B; a missing optional file leaves *PRESENT false. */
static int db_load(struct ensure *en, const char *file, struct sbx_buf *b,
                   struct stat *st, bool optional, bool *present) {
  sbx_buf_init(b, USERS_DB_MAX);
  int r = db_read(en->etc_fd, file, b, st);
  if (present)
    *present = r == 0;
  if (r == -ENOENT && optional)
    return 0;
  if (r == -ENOENT) {
    /* A missing passwd or group starts empty, root-owned, 0644. */
    memset(st, 0, sizeof(*st));
    st->st_mode = S_IFREG | 0644;
    return 0;
  }
  return r < 0 ? db_fail(en, r, "read", file) : 0;
}

static int file_add_group(struct ensure *en, struct dbs *db, const char *name,
                          uint32_t want, gid_t *gid_out) {
  long gid = want;
  if (want && db_id_used(&db->group, want))
    return rpc_fail(en->c, SBX_CONFLICT, EEXIST,
                    "cannot create group \"%s\": gid %u is taken", name, want);
  if (!want)
    gid = db_free_id(&db->group, NULL, 0);
  if (gid < 0)
    return rpc_fail(en->c, SBX_LIMIT_EXCEEDED, (int)-gid,
                    "cannot create group \"%s\": no free gid", name);
  char line[128];
  (void)snprintf(line, sizeof(line), "%s:%s:%ld:", name,
                 en->have_gshadow ? "x" : "!", gid);
  int r = db_append(&db->group, line);
  if (r == 0)
    r = db_write(en->etc_fd, "group", &db->group, &db->group_st);
  if (r < 0)
    return db_fail(en, r, "write", "group");
  if (en->have_gshadow) {
    (void)snprintf(line, sizeof(line), "%s:!::", name);
    r = db_append(&db->gshadow, line);
    if (r == 0)
      r = db_write(en->etc_fd, "gshadow", &db->gshadow, &db->gshadow_st);
    if (r < 0)
      return db_fail(en, r, "write", "gshadow");
  }
  if (gid_out)
    *gid_out = (gid_t)gid;
  return record(en, "group", name);
}

/* Makes HOME for a new user, owned by them; an existing one is left. */
static int make_home(struct ensure *en, const char *home, uid_t uid,
                     gid_t gid) {
  if (mkdir(home, 0700) < 0) {
    if (errno == EEXIST)
      return 0;
    char b[128];
    return rpc_fail(en->c, SBX_OK, errno, "cannot create home \"%s\": %s", home,
                    sbx_strerror_lc(errno, b, sizeof(b)));
  }
  _cleanup_close_ int fd =
      open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fchown(fd, uid, gid) < 0) {
    char b[128];
    return rpc_fail(en->c, SBX_OK, errno,
                    "cannot give home \"%s\" to its "
                    "user: %s",
                    home, sbx_strerror_lc(errno, b, sizeof(b)));
  }
  return 0;
}

static int file_add_user(struct ensure *en, struct dbs *db,
                         const Sbx__V1__User *u) {
  if (u->uid && db_id_used(&db->passwd, u->uid))
    return rpc_fail(en->c, SBX_CONFLICT, EEXIST,
                    "cannot create user \"%s\": uid %u is taken", u->name,
                    u->uid);
  long uid = u->uid ? (long)u->uid : db_free_id(&db->passwd, NULL, 0);
  if (uid < 0)
    return rpc_fail(en->c, SBX_LIMIT_EXCEEDED, (int)-uid,
                    "cannot create user \"%s\": no free uid", u->name);
  gid_t gid;
  size_t s, e;
  if (db_find(&db->group, u->name, &s, &e)) {
    if (userdb_group(en->etc, u->name, &gid) < 0)
      return rpc_fail(en->c, SBX_INTERNAL, EBADMSG,
                      "cannot create user \"%s\": its group's line is "
                      "malformed",
                      u->name);
  } else {
    /* A private group, with the uid as gid when that is free. */
    long g = db_free_id(&db->group, NULL, (unsigned long)uid);
    if (g < 0)
      return rpc_fail(en->c, SBX_LIMIT_EXCEEDED, (int)-g,
                      "cannot create group \"%s\": no free gid", u->name);
    int r = file_add_group(en, db, u->name, (uint32_t)g, &gid);
    if (r < 0)
      return r;
  }
  char home[300];
  if (u->home && *u->home)
    (void)snprintf(home, sizeof(home), "%s", u->home);
  else
    (void)snprintf(home, sizeof(home), "/home/%s", u->name);
  char line[700];
  (void)snprintf(line, sizeof(line), "%s:%s:%ld:%u::%s:%s", u->name,
                 en->have_shadow ? "x" : "!", uid, (unsigned)gid, home,
                 u->shell && *u->shell ? u->shell : USERS_DEFAULT_SHELL);
  int r = db_append(&db->passwd, line);
  if (r == 0)
    r = db_write(en->etc_fd, "passwd", &db->passwd, &db->passwd_st);
  if (r < 0)
    return db_fail(en, r, "write", "passwd");
  if (en->have_shadow) {
    (void)snprintf(line, sizeof(line), "%s:!:%lld:0:99999:7:::", u->name,
                   (long long)(time(NULL) / 86400));
    r = db_append(&db->shadow, line);
    if (r == 0)
      r = db_write(en->etc_fd, "shadow", &db->shadow, &db->shadow_st);
    if (r < 0)
      return db_fail(en, r, "write", "shadow");
  }
  if (u->home && *u->home) {
    r = make_home(en, u->home, (uid_t)uid, gid);
    if (r < 0)
      return r;
  }
  return record(en, "user", u->name);
}

static int file_add_member(struct ensure *en, struct dbs *db, const char *group,
                           const char *user) {
  bool changed;
  int r = db_add_member(&db->group, group, user, &changed);
  if (r == 0 && changed)
    r = db_write(en->etc_fd, "group", &db->group, &db->group_st);
  if (r < 0)
    return db_fail(en, r, "update", "group");
  if (!en->have_gshadow)
    return 0;
  r = db_add_member(&db->gshadow, group, user, &changed);
  if (r == -ENOENT) {
    /* gshadow without the group's line: give it one. */
    char line[128];
    (void)snprintf(line, sizeof(line), "%s:!::%s", group, user);
    r = db_append(&db->gshadow, line);
    changed = true;
  }
  if (r == 0 && changed)
    r = db_write(en->etc_fd, "gshadow", &db->gshadow, &db->gshadow_st);
  if (r < 0)
    return db_fail(en, r, "update", "gshadow");
  return 0;
}

/* Takes the shadow suite's lock on ETC/.pwd.lock (an OFD lock, so threads
 * exclude each other too); waits up to 10 s. */
static int lock_db(struct ensure *en, int *out) {
  _cleanup_close_ int fd = openat(
      en->etc_fd, ".pwd.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return db_fail(en, -errno, "lock", ".pwd.lock");
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  for (int i = 0; i < USERS_LOCK_TRIES; i++) {
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
      *out = TAKE_FD(fd);
      return 0;
    }
    if (errno != EAGAIN && errno != EACCES && errno != EINTR)
      return db_fail(en, -errno, "lock", ".pwd.lock");
    struct timespec ts = {0, 10 * 1000 * 1000};
    (void)nanosleep(&ts, NULL);
  }
  return rpc_fail(en->c, SBX_UNAVAILABLE, EAGAIN,
                  "the user database is locked by someone else");
}

/* ---- the request -------------------------------------------------------- */

static int ensure_group(struct ensure *en, struct dbs *db, const char *name,
                        uint32_t gid) {
  if (group_exists(en, name, NULL))
    return 0;
  if (en->etc_fd < 0) {
    int r = tool_add_group(en, name, gid);
    return r != 0 ? (r < 0 ? r : 0) : record(en, "group", name);
  }
  return file_add_group(en, db, name, gid, NULL);
}

static int ensure_user(struct ensure *en, struct dbs *db,
                       const Sbx__V1__User *u) {
  if (user_exists(en, u->name, NULL))
    return 0;
  if (en->etc_fd >= 0)
    return file_add_user(en, db, u);
  bool had_group = group_exists(en, u->name, NULL);
  int r = tool_add_user(en, u, !had_group);
  if (r != 0)
    return r < 0 ? r : 0;
  if (!had_group && group_exists(en, u->name, NULL))
    r = record(en, "group", u->name);
  return r < 0 ? r : record(en, "user", u->name);
}

static int ensure_member(struct ensure *en, struct dbs *db, const char *group,
                         const char *user) {
  struct userdb_user u;
  gid_t gid;
  if (!user_exists(en, user, &u))
    return rpc_fail(en->c, SBX_NOT_FOUND, ENOENT,
                    "cannot add \"%s\" to group \"%s\": no such user", user,
                    group);
  if (!group_exists(en, group, &gid))
    return rpc_fail(en->c, SBX_NOT_FOUND, ENOENT,
                    "cannot add \"%s\" to group \"%s\": no such group", user,
                    group);
  for (size_t i = 0; i < u.ngroups; i++)
    if (u.groups[i] == gid)
      return 0;
  if (en->etc_fd < 0)
    return tool_add_member(en, group, user);
  return file_add_member(en, db, group, user);
}

static int ensure_all(struct ensure *en, struct dbs *db,
                      const Sbx__V1__UsersEnsure *m) {
  int r = 0;
  for (size_t i = 0; r == 0 && i < m->n_groups; i++)
    r = ensure_group(en, db, m->groups[i]->name, m->groups[i]->gid);
  for (size_t i = 0; r == 0 && i < m->n_users; i++) {
    const Sbx__V1__User *u = m->users[i];
    for (size_t j = 0; r == 0 && j < u->n_groups; j++)
      r = ensure_group(en, db, u->groups[j], 0);
    if (r == 0)
      r = ensure_user(en, db, u);
  }
  for (size_t i = 0; r == 0 && i < m->n_groups; i++) {
    const Sbx__V1__Group *g = m->groups[i];
    for (size_t j = 0; r == 0 && j < g->n_members; j++)
      r = ensure_member(en, db, g->name, g->members[j]);
  }
  for (size_t i = 0; r == 0 && i < m->n_users; i++) {
    const Sbx__V1__User *u = m->users[i];
    for (size_t j = 0; r == 0 && j < u->n_groups; j++)
      r = ensure_member(en, db, u->groups[j], u->name);
  }
  return r;
}

static int reply(struct ensure *en) {
  struct rpc_call *c = en->c;
  Sbx__V1__UsersEnsureReply *rep =
      sbx_arena_new(&c->arena, Sbx__V1__UsersEnsureReply);
  if (!rep)
    return -ENOMEM;
  sbx__v1__users_ensure_reply__init(rep);
  if (en->ncreated) {
    rep->created = sbx_arena_new_array(&c->arena, char *, en->ncreated);
    if (!rep->created)
      return -ENOMEM;
    memcpy(rep->created, en->created, en->ncreated * sizeof(char *));
    rep->n_created = en->ncreated;
  }
  c->resp->body_case = SBX__V1__RESPONSE__BODY_USERS_ENSURE;
  c->resp->users_ensure = rep;
  return 0;
}

int users_ensure_files(struct rpc_call *c, const char *etc) {
  const Sbx__V1__UsersEnsure *m = RPC_BODY(c, USERS_ENSURE, users_ensure);
  if (!m)
    return rpc_no_body(c);
  int r = validate(c, m);
  if (r < 0)
    return r;
  struct ensure en = {.c = c, .etc = etc, .etc_fd = -1};
  _cleanup_close_ int etc_fd = open(etc, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (etc_fd < 0) {
    char b[128];
    return rpc_fail(c, SBX_OK, errno, "cannot open \"%s\": %s", etc,
                    sbx_strerror_lc(errno, b, sizeof(b)));
  }
  en.etc_fd = etc_fd;
  _cleanup_close_ int lock = -1;
  r = lock_db(&en, &lock);
  if (r < 0)
    return r;
  struct dbs db;
  memset(&db, 0, sizeof(db));
  r = db_load(&en, "passwd", &db.passwd, &db.passwd_st, false, NULL);
  if (r == 0)
    r = db_load(&en, "group", &db.group, &db.group_st, false, NULL);
  if (r == 0)
    r = db_load(&en, "shadow", &db.shadow, &db.shadow_st, true,
                &en.have_shadow);
  if (r == 0)
    r = db_load(&en, "gshadow", &db.gshadow, &db.gshadow_st, true,
                &en.have_gshadow);
  if (r == 0)
    r = ensure_all(&en, &db, m);
  if (r == 0)
    r = reply(&en);
  dbs_free(&db);
  free(en.created);
  return r;
}

int rpc_users_ensure(struct rpc_call *c) {
  const Sbx__V1__UsersEnsure *m = RPC_BODY(c, USERS_ENSURE, users_ensure);
  if (!m)
    return rpc_no_body(c);
  if (!c->d->is_root)
    return rpc_fail(c, SBX_PERMISSION_DENIED, EPERM,
                    "creating users needs sandboxd to run as root");
  char bin[64];
  if (!find_tool("groupadd", bin, sizeof(bin)) ||
      !find_tool("useradd", bin, sizeof(bin)) ||
      !find_tool("usermod", bin, sizeof(bin)))
    return users_ensure_files(c, "/etc");
  int r = validate(c, m);
  if (r < 0)
    return r;
  struct ensure en = {.c = c, .etc = NULL, .etc_fd = -1};
  r = ensure_all(&en, NULL, m);
  if (r == 0)
    r = reply(&en);
  free(en.created);
  return r;
}
