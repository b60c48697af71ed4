#include "controller/sandbox/materialize.h"

#include "controller/sandbox/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller/sandbox/tarball.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/encode.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/path.h"
#include "shared/sha256.h"

#define GIT_STEP_TIMEOUT_MS (5u * 60u * 1000u)
#define GIT_VERSION_TIMEOUT_MS 10000u
#define GIT_OUTPUT_KEPT 2048

extern char **environ;

struct materialize_limits materialize_default_limits(void) {
  return (struct materialize_limits){MATERIALIZE_DEFAULT_LIMIT,
                                     MATERIALIZE_DEFAULT_LIMIT};
}

int materialize_parse_limits(const char *spec, struct materialize_limits *out,
                             struct sbx_error *e) {
  const char *p = spec;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    unsigned *dst = NULL;
    if (eq && (size_t)(eq - p) == strlen("manifest_entries") &&
        strncmp(p, "manifest_entries", 16) == 0)
      dst = &out->manifest_entries;
    else if (eq && (size_t)(eq - p) == strlen("local_dir_files") &&
             strncmp(p, "local_dir_files", 15) == 0)
      dst = &out->local_dir_files;
    if (!dst)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "concurrency \"%.*s\": expected "
                           "manifest_entries=N or local_dir_files=N",
                           (int)(n > 64 ? 64 : n), p);
    char num[16];
    size_t nl = n - (size_t)(eq + 1 - p);
    if (nl == 0 || nl >= sizeof(num))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "concurrency \"%.*s\": N must be an integer >= 0",
                           (int)(n > 64 ? 64 : n), p);
    memcpy(num, eq + 1, nl);
    num[nl] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || *end || v < 0 || v > 1000000)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "concurrency \"%.*s\": N must be an integer >= 0 "
                           "(0 for unlimited)",
                           (int)(n > 64 ? 64 : n), p);
    *dst = (unsigned)v;
    if (!comma)
      break;
    p = comma + 1;
  }
  return 0;
}

/* ---- a small pool: N workers over indices 0..count-1 -------------------- */

struct pool {
  atomic_size_t next;
  size_t count;
  atomic_bool *stop;
  int (*fn)(void *arg, size_t i);
  void *arg;
};

static void *pool_main(void *p) {
  struct pool *pl = p;
  for (;;) {
    if (atomic_load(pl->stop))
      break;
    size_t i = atomic_fetch_add(&pl->next, 1);
    if (i >= pl->count)
      break;
    if (pl->fn(pl->arg, i) < 0)
      atomic_store(pl->stop, true);
  }
  return NULL;
}

/* Runs FN over COUNT items with at most LIMIT threads (0: the cap). The
 * calling thread is one of them. */
static void pool_run(unsigned limit, size_t count, atomic_bool *stop,
                     int (*fn)(void *, size_t), void *arg) {
  struct pool pl = {.count = count, .stop = stop, .fn = fn, .arg = arg};
  atomic_init(&pl.next, 0);
  size_t n = limit == 0 || limit > MATERIALIZE_MAX_THREADS
                 ? MATERIALIZE_MAX_THREADS
                 : limit;
  if (n > count)
    n = count;
  pthread_t th[MATERIALIZE_MAX_THREADS];
  size_t started = 0;
  for (size_t i = 1; i < n; i++) {
    if (pthread_create(&th[started], NULL, pool_main, &pl) != 0)
      break;
    started++;
  }
  pool_main(&pl);
  for (size_t i = 0; i < started; i++)
    (void)pthread_join(th[i], NULL);
}

/* ---- context ------------------------------------------------------------- */

struct mat {
  struct sandbox *sb;
  const struct manifest *m;
  const struct materialize_options *o;
  uint32_t uid, gid; /* sandboxd's identity: owner of archive members */
  atomic_bool archive_ok;
  int base_fd;
  char base[PATH_MAX]; /* realpath of the base directory */
  char base_given[PATH_MAX];
  atomic_bool stop;
  pthread_mutex_t mu;
  int rc;
  struct sbx_error err;
};

/* Keeps the first error. Returns R. */
static int fail(struct mat *x, int r, const struct sbx_error *e) {
  pthread_mutex_lock(&x->mu);
  if (x->rc == 0) {
    x->rc = r;
    x->err = *e;
  }
  pthread_mutex_unlock(&x->mu);
  atomic_store(&x->stop, true);
  return r;
}

/* Prefixes the entry's name to E's message. */
static int entry_error(const struct manifest_entry *en, int r,
                       struct sbx_error *e) {
  char msg[SBX_ERROR_MSG_MAX];
  memcpy(msg, e->msg, sizeof(msg));
  if (strncmp(msg, "entry \"", 7) == 0)
    return r;
  return sbx_error_set(e, e->code, e->err ? e->err : -r,
                       "cannot materialize entry \"%s\" (%s): %s", en->path,
                       en->type_name, msg[0] ? msg : strerror(-r));
}

/* ---- writing files through sandboxd ------------------------------------- */

static int put_chunk(struct sbx_client *c, const char *path, const void *data,
                     size_t len, uint64_t off, bool first, bool only,
                     unsigned perm, struct sbx_error *e) {
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = (char *)path;
  w.data.data = (uint8_t *)data;
  w.data.len = len;
  w.mode = first ? SBX__V1__WRITE_MODE__WRITE_TRUNCATE
                 : SBX__V1__WRITE_MODE__WRITE_AT;
  w.offset = off;
  w.perm = perm ? perm : 0644;
  w.parents = true;
  w.atomic = first && only;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_write(c, &w, &resp, e);
  sbx_client_reply_free(resp);
  return r;
}

static int put_bytes(struct sbx_client *c, const char *path, const char *data,
                     size_t len, unsigned perm, struct sbx_error *e) {
  size_t off = 0;
  do {
    size_t k = len - off < TARBALL_CHUNK ? len - off : TARBALL_CHUNK;
    int r = put_chunk(c, path, data + off, k, off, off == 0, k == len, perm, e);
    if (r < 0)
      return r;
    off += k;
  } while (off < len);
  return 0;
}

/* Streams FD (SIZE bytes expected) to PATH; hashes it into SH if given. */
static int put_fd(struct sbx_client *c, const char *path, int fd, uint64_t size,
                  unsigned perm, struct sbx_sha256 *sh, struct sbx_error *e) {
  size_t cap = size < TARBALL_CHUNK ? (size_t)size + 1 : TARBALL_CHUNK;
  _cleanup_free_ char *buf = malloc(cap);
  if (!buf)
    return -ENOMEM;
  uint64_t off = 0;
  bool first = true;
  for (;;) {
    size_t got = 0;
    while (got < cap) {
      ssize_t k = read(fd, buf + got, cap - got);
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0)
        return sbx_error_set(e, SBX_OK, errno, "cannot read the source: %m");
      if (k == 0)
        break;
      got += (size_t)k;
    }
    if (off + got > size)
      return sbx_error_set(e, SBX_CONFLICT, EAGAIN,
                           "the source grew while it was being copied");
    if (got == 0 && !first)
      break;
    if (sh)
      sbx_sha256_update(sh, buf, got);
    int r = put_chunk(c, path, buf, got, off, first, first && off + got == size,
                      perm, e);
    if (r < 0)
      return r;
    first = false;
    off += got;
    if (got < cap)
      break;
  }
  if (off != size)
    return sbx_error_set(e, SBX_CONFLICT, EAGAIN,
                         "the source shrank while it was being copied");
  return 0;
}

/* The SHA-256 of a sandbox file, read back. */
static int sandbox_sha256(struct sbx_client *c, const char *path, char out[65],
                          struct sbx_error *e) {
  struct sbx_sha256 sh;
  sbx_sha256_init(&sh);
  uint64_t off = 0;
  for (;;) {
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = (char *)path;
    rd.offset = off;
    rd.length = TARBALL_CHUNK;
    Sbx__V1__Response *resp = NULL;
    int r = sbx_file_read(c, &rd, &resp, e);
    if (r < 0)
      return r;
    size_t n = resp->file_read->data.len;
    bool eof = resp->file_read->eof;
    sbx_sha256_update(&sh, resp->file_read->data.data, n);
    sbx_client_reply_free(resp);
    off += n;
    if (eof || n == 0)
      break;
  }
  sbx_sha256_final_hex(&sh, out);
  return 0;
}

/* ---- local sources --------------------------------------------------------
 */

/* Opens the local source of EN beneath the base directory or a grant:
 * *ROOT_FD (new) is the directory it lies in, REL its path beneath. */
static int open_source_root(struct mat *x, const struct manifest_entry *en,
                            int *root_fd, char *rel, size_t relsz,
                            struct sbx_error *e) {
  const char *src = en->src;
  struct sbx_error pe = {0};
  if (src[0] != '/') {
    if (sbx_path_normalize_rel(src, strlen(src), rel, relsz, 0, &pe) < 0)
      goto outside;
    *root_fd = dup(x->base_fd);
    return *root_fd < 0 ? -errno : 0;
  }
  char abs[SBX_PATH_MAX];
  if (sbx_path_normalize_abs(src, strlen(src), abs, sizeof(abs), &pe) < 0)
    goto outside;
  const char *bases[2] = {x->base, x->base_given};
  for (int i = 0; i < 2; i++) {
    if (!bases[i][0] || !sbx_path_is_under(bases[i], abs))
      continue;
    size_t bl = strlen(bases[i]);
    const char *r = abs + (bl == 1 ? 1 : bl);
    if (*r == '/')
      r++;
    (void)snprintf(rel, relsz, "%s", *r ? r : ".");
    *root_fd = dup(x->base_fd);
    return *root_fd < 0 ? -errno : 0;
  }
  const struct manifest_grant *best = NULL;
  for (size_t i = 0; i < x->m->ngrants; i++) {
    const struct manifest_grant *g = &x->m->grants[i];
    if (sbx_path_is_under(g->path, abs) &&
        (!best || strlen(g->path) > strlen(best->path)))
      best = g;
  }
  if (best) {
    size_t bl = strlen(best->path);
    const char *r = abs + bl;
    if (*r == '/')
      r++;
    (void)snprintf(rel, relsz, "%s", *r ? r : ".");
    int fd = open(best->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
      return sbx_error_set(e, SBX_OK, errno,
                           "entry \"%s\": cannot open grant \"%s\": %m",
                           en->path, best->path);
    *root_fd = fd;
    return 0;
  }
outside:
  return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                       "entry \"%s\": %s source \"%s\" is outside the base "
                       "directory \"%s\"%s",
                       en->path, en->type_name, src, x->base,
                       x->m->ngrants ? " and every extra_path_grant" : "");
}

static int open_source(struct mat *x, const struct manifest_entry *en, bool dir,
                       int *root_out, char *rel, size_t relsz,
                       struct sbx_error *e) {
  _cleanup_close_ int root = -1;
  int r = open_source_root(x, en, &root, rel, relsz, e);
  if (r < 0)
    return r;
  int fd = strcmp(rel, ".") == 0
               ? openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
               : sbx_openat2(root, rel,
                             dir ? O_RDONLY | O_DIRECTORY
                                 : O_RDONLY | O_NOCTTY | O_NONBLOCK,
                             0, RESOLVE_NO_SYMLINKS);
  if (fd == -1)
    fd = -errno;
  if (fd < 0)
    return sbx_error_set(
        e, SBX_OK, -fd, "entry \"%s\": cannot open %s source \"%s\": %s%s",
        en->path, en->type_name, en->src, strerror(-fd),
        fd == -ELOOP || fd == -EXDEV ? " (symbolic links are not followed)"
                                     : "");
  if (root_out)
    *root_out = TAKE_FD(root);
  return fd;
}

/* ---- entry kinds ----------------------------------------------------------
 */

static int do_local_file(struct mat *x, const struct manifest_entry *en,
                         struct sbx_error *e) {
  char rel[SBX_PATH_MAX];
  _cleanup_close_ int fd = open_source(x, en, false, NULL, rel, sizeof(rel), e);
  if (fd < 0)
    return fd;
  struct stat st;
  if (fstat(fd, &st) < 0)
    return -errno;
  if (!S_ISREG(st.st_mode))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "entry \"%s\": local_file source \"%s\" is not a "
                         "regular file",
                         en->path, en->src);
  (void)fcntl(fd, F_SETFL, 0);
  struct sbx_sha256 sh;
  sbx_sha256_init(&sh);
  int r = put_fd(x->sb->client, en->path, fd, (uint64_t)st.st_size,
                 st.st_mode & 0777, &sh, e);
  if (r < 0)
    return r;
  char got[65], back[65];
  sbx_sha256_final_hex(&sh, got);
  if (en->sha256 && strcmp(got, en->sha256) != 0) {
    struct sbx_error ignored = {0};
    (void)sbx_file_remove(x->sb->client, en->path, false, true, &ignored);
    return sbx_error_set(e, SBX_CONFLICT, EBADMSG,
                         "entry \"%s\": local_file source \"%s\" has SHA-256 "
                         "%s, not the %s the manifest expects",
                         en->path, en->src, got, en->sha256);
  }
  r = sandbox_sha256(x->sb->client, en->path, back, e);
  if (r < 0)
    return r;
  if (strcmp(got, back) != 0)
    return sbx_error_set(e, SBX_INTERNAL, EIO,
                         "entry \"%s\": the copy in the sandbox does not "
                         "match its source (SHA-256 %s, not %s)",
                         en->path, back, got);
  return 0;
}

struct tree_job {
  struct mat *x;
  const struct manifest_entry *en;
  const struct host_tree *t;
  size_t *files; /* indices of regular files in t */
  const char *dest;
};

static int tree_file(void *arg, size_t i) {
  struct tree_job *j = arg;
  const struct host_item *it = &j->t->items[j->files[i]];
  struct sbx_error e = {0};
  char path[SBX_PATH_MAX];
  if (sbx_path_join(j->dest, it->name, path, sizeof(path)) < 0)
    return fail(
        j->x, -ENAMETOOLONG,
        &(struct sbx_error){SBX_LIMIT_EXCEEDED, ENAMETOOLONG, "path too long"});
  int fd = host_item_open(j->t, it, j->en->path, &e);
  int r = fd;
  if (fd >= 0) {
    r = put_fd(j->x->sb->client, path, fd, (uint64_t)it->st.st_size,
               it->st.st_mode & 0777, NULL, &e);
    close(fd);
  }
  if (r < 0) {
    entry_error(j->en, r, &e);
    return fail(j->x, r, &e);
  }
  return 0;
}

/* Copies the scanned tree T into the sandbox directory DEST. */
static int copy_tree(struct mat *x, const struct manifest_entry *en,
                     const struct host_tree *t, const char *dest,
                     struct sbx_error *e) {
  if (!x->o->no_archive && atomic_load(&x->archive_ok)) {
    _cleanup_close_ int fd = -1;
    uint64_t size = 0;
    int r = tarball_build(t, x->uid, x->gid, en->path, &fd, &size, e);
    if (r < 0)
      return r;
    struct progress_meter pm;
    progress_meter_start(&pm, x->o->progress ? progress_snapshot : NULL, NULL,
                         "materializing");
    r = tarball_push(x->sb->client, fd, size, dest, &pm, e);
    if (!tarball_unsupported(r, e))
      return r;
    atomic_store(&x->archive_ok, false);
    log_debug("sandboxd serves no archive RPCs; copying file by file");
  }
  int r = sbx_file_mkdir(x->sb->client, dest, true, 0755, e);
  if (r < 0)
    return r;
  _cleanup_free_ size_t *files = calloc(t->n + 1, sizeof(size_t));
  if (!files)
    return -ENOMEM;
  size_t nf = 0;
  for (size_t i = 0; i < t->n; i++) {
    const struct host_item *it = &t->items[i];
    char path[SBX_PATH_MAX];
    if (sbx_path_join(dest, it->name, path, sizeof(path)) < 0)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                           "path too long");
    if (S_ISDIR(it->st.st_mode)) {
      r = sbx_file_mkdir(x->sb->client, path, true, it->st.st_mode & 0777, e);
      if (r < 0)
        return r;
    } else if (S_ISLNK(it->st.st_mode)) {
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "\"%s\" is a symbolic link, which needs sandboxd's "
                           "archive RPCs to be copied",
                           it->src);
    } else {
      files[nf++] = i;
    }
  }
  struct tree_job j = {.x = x, .en = en, .t = t, .files = files, .dest = dest};
  pool_run(x->o->limits.local_dir_files, nf, &x->stop, tree_file, &j);
  return 0; /* a file's failure is recorded by tree_file */
}

static int do_local_dir(struct mat *x, const struct manifest_entry *en,
                        struct sbx_error *e) {
  char rel[SBX_PATH_MAX];
  _cleanup_close_ int fd = open_source(x, en, true, NULL, rel, sizeof(rel), e);
  if (fd < 0)
    return fd;
  struct host_tree t = {0};
  int r = host_tree_scan(&t, fd, ".", "",
                         HOST_TREE_REFUSE_SYMLINKS | HOST_TREE_SKIP_OTHER,
                         en->path, e);
  if (r == 0)
    r = copy_tree(x, en, &t, en->path, e);
  host_tree_free(&t);
  return r;
}

/* Runs git with ARGV (argv[0] "git") and a clean environment; keeps the
 * first bytes of its output in OUT for messages. */
static int run_git(const char *const *argv, unsigned timeout_ms, char *out,
                   size_t outsz) {
  out[0] = '\0';
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  _cleanup_close_ int rd = p[0];
  _cleanup_close_ int wr = p[1];
  char home[PATH_MAX + 8], path[4096 + 8], ssh[PATH_MAX + 16];
  const char *envp[8];
  size_t ne = 0;
  (void)snprintf(path, sizeof(path), "PATH=%s",
                 getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  envp[ne++] = path;
  if (getenv("HOME")) {
    (void)snprintf(home, sizeof(home), "HOME=%s", getenv("HOME"));
    envp[ne++] = home;
  }
  if (getenv("SSH_AUTH_SOCK")) {
    (void)snprintf(ssh, sizeof(ssh), "SSH_AUTH_SOCK=%s",
                   getenv("SSH_AUTH_SOCK"));
    envp[ne++] = ssh;
  }
  envp[ne++] = "GIT_TERMINAL_PROMPT=0";
  envp[ne++] = "LC_ALL=C";
  envp[ne] = NULL;
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa))
    return -ENOMEM;
  (void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  (void)posix_spawn_file_actions_adddup2(&fa, wr, 1);
  (void)posix_spawn_file_actions_adddup2(&fa, wr, 2);
  posix_spawnattr_t at;
  (void)posix_spawnattr_init(&at);
  (void)posix_spawnattr_setpgroup(&at, 0);
  (void)posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  pid_t pid;
  int r = posix_spawnp(&pid, "git", &fa, &at, (char *const *)argv,
                       (char *const *)envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (r)
    return -r;
  close(TAKE_FD(wr));
  uint64_t end = sbx_now_ms() + timeout_ms;
  size_t n = 0;
  bool timed_out = false;
  for (;;) {
    uint64_t now = sbx_now_ms();
    if (now >= end) {
      timed_out = true;
      break;
    }
    struct pollfd pfd = {.fd = rd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)(end - now));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0) {
      timed_out = pr == 0;
      break;
    }
    char b[512];
    ssize_t k = read(rd, b, sizeof(b));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    n = sbx_append_printable(out, n, outsz, b, (size_t)k);
  }
  if (timed_out)
    (void)kill(-pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
    out[--n] = '\0';
  if (timed_out)
    return -ETIMEDOUT;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool looks_like_commit(const char *s) {
  size_t n = strlen(s);
  if (n < 7 || n > 40)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
          (s[i] >= 'A' && s[i] <= 'F')))
      return false;
  return true;
}

static int git_fail(const struct manifest_entry *en, int r, const char *step,
                    const char *out, struct sbx_error *e) {
  if (r == -ETIMEDOUT)
    return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                         "entry \"%s\": git %s of \"%s\" took longer than %u "
                         "minutes",
                         en->path, step, en->url, GIT_STEP_TIMEOUT_MS / 60000);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "entry \"%s\": cannot run git: %s",
                         en->path, strerror(-r));
  return sbx_error_set(e, SBX_INTERNAL, EIO,
                       "entry \"%s\": git %s of \"%s\"%s%s failed: %s",
                       en->path, step, en->url, en->ref ? " at " : "",
                       en->ref ? en->ref : "", out[0] ? out : "(no output)");
}

static int git_clone(const struct manifest_entry *en, const char *dir,
                     struct sbx_error *e) {
  char out[GIT_OUTPUT_KEPT];
  int r;
  {
    const char *v[] = {"git", "--version", NULL};
    r = run_git(v, GIT_VERSION_TIMEOUT_MS, out, sizeof(out));
    if (r != 0)
      return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                           "entry \"%s\": git_repo needs git on the host "
                           "(git --version failed: %s)",
                           en->path, r < 0 ? strerror(-r) : out);
  }
  if (en->ref && looks_like_commit(en->ref)) {
    const char *init[] = {"git", "init", "-q", dir, NULL};
    const char *add[] = {"git", "-C",     dir,     "remote",
                         "add", "origin", en->url, NULL};
    const char *fetch[] = {"git",    "-C",      dir, "fetch",
                           "-q",     "--depth", "1", "--no-tags",
                           "origin", en->ref,   NULL};
    const char *co[] = {
        "git",      "-C", dir,        "-c",         "advice.detachedHead=false",
        "checkout", "-q", "--detach", "FETCH_HEAD", NULL};
    if ((r = run_git(init, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
      return git_fail(en, r, "init", out, e);
    if ((r = run_git(add, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
      return git_fail(en, r, "remote add", out, e);
    r = run_git(fetch, GIT_STEP_TIMEOUT_MS, out, sizeof(out));
    if (r == 0) {
      if ((r = run_git(co, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
        return git_fail(en, r, "checkout", out, e);
      return 0;
    }
    /* A short hash cannot be fetched: clone whole, then check it out. */
    if (sandbox_rm_rf(dir) < 0 || mkdir(dir, 0700) < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot reset \"%s\"", dir);
    const char *clone[] = {"git", "clone", "-q", "--no-checkout",
                           "--",  en->url, dir,  NULL};
    const char *co2[] = {
        "git",      "-C", dir,        "-c",    "advice.detachedHead=false",
        "checkout", "-q", "--detach", en->ref, NULL};
    if ((r = run_git(clone, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
      return git_fail(en, r, "clone", out, e);
    if ((r = run_git(co2, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
      return git_fail(en, r, "checkout", out, e);
    return 0;
  }
  const char *clone[12];
  size_t n = 0;
  clone[n++] = "git";
  clone[n++] = "clone";
  clone[n++] = "-q";
  clone[n++] = "--depth";
  clone[n++] = "1";
  if (en->ref) {
    clone[n++] = "--branch";
    clone[n++] = en->ref;
  }
  clone[n++] = "--";
  clone[n++] = en->url;
  clone[n++] = dir;
  clone[n] = NULL;
  if ((r = run_git(clone, GIT_STEP_TIMEOUT_MS, out, sizeof(out))) != 0)
    return git_fail(en, r, "clone", out, e);
  return 0;
}

static int do_git_repo(struct mat *x, const struct manifest_entry *en,
                       struct sbx_error *e) {
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX];
  (void)snprintf(dir, sizeof(dir), "%s/sbx-git-XXXXXX",
                 tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    return sbx_error_set(e, SBX_OK, errno, "cannot create a temp dir: %m");
  char repo[PATH_MAX + 8];
  (void)snprintf(repo, sizeof(repo), "%s/repo", dir);
  int r = mkdir(repo, 0700) < 0 ? -errno : 0;
  if (r == 0)
    r = git_clone(en, repo, e);
  if (r == 0) {
    _cleanup_close_ int rfd =
        open(repo, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct host_tree t = {0};
    if (rfd < 0) {
      r = sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", repo);
    } else {
      const char *src = en->subpath ? en->subpath : ".";
      unsigned flags =
          HOST_TREE_SKIP_OTHER | (en->subpath ? HOST_TREE_SKIP_GIT : 0);
      r = host_tree_scan(&t, rfd, src, "", flags, en->path, e);
      if (r < 0 && en->subpath && e && e->err == ENOENT)
        r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                          "entry \"%s\": subpath \"%s\" is not a directory "
                          "in the repository",
                          en->path, en->subpath);
      if (r == 0)
        r = copy_tree(x, en, &t, en->path, e);
    }
    host_tree_free(&t);
  }
  (void)sandbox_rm_rf(dir);
  return r;
}

static int do_entry(struct mat *x, const struct manifest_entry *en) {
  struct sbx_error e = {0};
  int r = 0;
  switch (en->type) {
  case MANIFEST_FILE:
    r = put_bytes(x->sb->client, en->path, en->content, en->content_len, 0644,
                  &e);
    break;
  case MANIFEST_DIR:
    r = sbx_file_mkdir(x->sb->client, en->path, true, 0755, &e);
    break;
  case MANIFEST_LOCAL_FILE:
    r = do_local_file(x, en, &e);
    break;
  case MANIFEST_LOCAL_DIR:
    r = do_local_dir(x, en, &e);
    break;
  case MANIFEST_GIT_REPO:
    r = do_git_repo(x, en, &e);
    break;
  case MANIFEST_MOUNT:
    break; /* the backend made it when it created the sandbox */
  case MANIFEST_CLOUD_MOUNT:
    r = sbx_error_set(&e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                      "%s is not supported by backend %s", en->type_name,
                      x->sb->backend->name);
    break;
  }
  if (r < 0) {
    entry_error(en, r, &e);
    return fail(x, r, &e);
  }
  return 0;
}

struct level_job {
  struct mat *x;
  const size_t *idx;
};

static int level_entry(void *arg, size_t i) {
  struct level_job *j = arg;
  return do_entry(j->x, &j->x->m->entries[j->idx[i]]);
}

static unsigned depth_of(const char *p) {
  unsigned d = 1;
  for (; *p; p++)
    d += *p == '/';
  return d;
}

/* Group and permissions, children before parents. */
static int finish_entry(struct mat *x, const struct manifest_entry *en) {
  struct sbx_error e = {0};
  int r = 0;
  if (en->type == MANIFEST_MOUNT || en->type == MANIFEST_CLOUD_MOUNT)
    return 0;
  if (en->group)
    r = sbx_file_chown(x->sb->client, en->path, "", en->group, false, &e);
  if (r == 0) {
    unsigned mode = en->mode >= 0 ? (unsigned)en->mode : 0755;
    r = sbx_file_chmod(x->sb->client, en->path, mode & 07777, false, &e);
  }
  if (r < 0) {
    if (en->group && e.code == SBX_NOT_FOUND)
      (void)sbx_error_set(&e, SBX_NOT_FOUND, ENOENT,
                          "group \"%s\" does not exist (add it to the "
                          "manifest's groups or users)",
                          en->group);
    entry_error(en, r, &e);
    return fail(x, r, &e);
  }
  return 0;
}

static int run_entries(struct mat *x, const size_t *idx, size_t n) {
  if (n == 0)
    return 0;
  _cleanup_free_ size_t *level = calloc(n, sizeof(size_t));
  if (!level)
    return -ENOMEM;
  unsigned maxd = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = depth_of(x->m->entries[idx[i]].path);
    if (d > maxd)
      maxd = d;
  }
  for (unsigned d = 1; d <= maxd && !atomic_load(&x->stop); d++) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
      if (depth_of(x->m->entries[idx[i]].path) == d)
        level[k++] = idx[i];
    struct level_job j = {.x = x, .idx = level};
    pool_run(x->o->limits.manifest_entries, k, &x->stop, level_entry, &j);
  }
  for (size_t i = n; i-- > 0 && !atomic_load(&x->stop);) {
    /* deepest first: sort-free, since parents come before children */
    (void)finish_entry(x, &x->m->entries[idx[i]]);
  }
  return x->rc;
}

static int ensure_users(struct mat *x, struct sbx_error *e) {
  const struct manifest *m = x->m;
  if (m->nusers == 0 && m->ngroups == 0)
    return 0;
  Sbx__V1__UsersEnsure u = SBX__V1__USERS_ENSURE__INIT;
  _cleanup_free_ Sbx__V1__Group *groups =
      calloc(m->ngroups + 1, sizeof(*groups));
  _cleanup_free_ Sbx__V1__Group **gp = calloc(m->ngroups + 1, sizeof(*gp));
  _cleanup_free_ Sbx__V1__User *users = calloc(m->nusers + 1, sizeof(*users));
  _cleanup_free_ Sbx__V1__User **up = calloc(m->nusers + 1, sizeof(*up));
  if (!groups || !gp || !users || !up)
    return -ENOMEM;
  for (size_t i = 0; i < m->ngroups; i++) {
    sbx__v1__group__init(&groups[i]);
    groups[i].name = m->groups[i].name;
    groups[i].members = m->groups[i].users;
    groups[i].n_members = m->groups[i].nusers;
    gp[i] = &groups[i];
  }
  for (size_t i = 0; i < m->nusers; i++) {
    sbx__v1__user__init(&users[i]);
    users[i].name = m->users[i];
    up[i] = &users[i];
  }
  /* A group's members must exist before they join: users first here. */
  u.users = up;
  u.n_users = m->nusers;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error ie = {0};
  int r = sbx_users_ensure(x->sb->client, &u, &resp, &ie);
  sbx_client_reply_free(resp);
  if (r == 0 && m->ngroups) {
    Sbx__V1__UsersEnsure g = SBX__V1__USERS_ENSURE__INIT;
    g.groups = gp;
    g.n_groups = m->ngroups;
    resp = NULL;
    r = sbx_users_ensure(x->sb->client, &g, &resp, &ie);
    sbx_client_reply_free(resp);
  }
  if (r < 0)
    return sbx_error_set(e, ie.code, ie.err ? ie.err : -r,
                         "cannot create the manifest's users and groups: %s%s",
                         ie.msg,
                         ie.code == SBX_PERMISSION_DENIED
                             ? " (users and groups need sandboxd to run as "
                               "root)"
                             : "");
  return 0;
}

static int mat_init(struct mat *x, struct sandbox *sb, const struct manifest *m,
                    const struct materialize_options *o, struct sbx_error *e) {
  memset(x, 0, sizeof(*x));
  x->sb = sb;
  x->m = m;
  x->o = o;
  x->base_fd = -1;
  atomic_init(&x->stop, false);
  atomic_init(&x->archive_ok, true);
  pthread_mutex_init(&x->mu, NULL);
  Sbx__V1__Response *resp = NULL;
  int r = sbx_hello(sb->client, &resp, e);
  if (r < 0)
    return r;
  x->uid = resp->hello->uid;
  x->gid = resp->hello->gid;
  sbx_client_reply_free(resp);
  bool local = false;
  for (size_t i = 0; i < m->nentries; i++)
    local |= m->entries[i].type == MANIFEST_LOCAL_FILE ||
             m->entries[i].type == MANIFEST_LOCAL_DIR;
  if (!local)
    return 0;
  const char *base = o->base_dir ? o->base_dir : ".";
  if (!realpath(base, x->base))
    return sbx_error_set(e, SBX_OK, errno,
                         "cannot resolve the base directory \"%s\": %m", base);
  if (base[0] == '/')
    (void)sbx_path_normalize_abs(base, strlen(base), x->base_given,
                                 sizeof(x->base_given), NULL);
  x->base_fd = open(x->base, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (x->base_fd < 0)
    return sbx_error_set(e, SBX_OK, errno,
                         "cannot open the base directory \"%s\": %m", x->base);
  return 0;
}

static void mat_fini(struct mat *x) {
  if (x->base_fd >= 0)
    close(x->base_fd);
  pthread_mutex_destroy(&x->mu);
}

static int mat_result(struct mat *x, int r, struct sbx_error *e) {
  if (r < 0 || x->rc < 0) {
    if (x->rc < 0 && e)
      *e = x->err;
    return x->rc < 0 ? x->rc : r;
  }
  return 0;
}

int materialize_entries(struct sandbox *sb, const struct manifest *m,
                        const size_t *idx, size_t n,
                        const struct materialize_options *o,
                        struct sbx_error *e) {
  struct mat x;
  int r = mat_init(&x, sb, m, o, e);
  if (r == 0)
    r = run_entries(&x, idx, n);
  r = mat_result(&x, r, e);
  mat_fini(&x);
  return r;
}

int materialize_manifest(struct sandbox *sb, const struct manifest *m,
                         const struct materialize_options *o,
                         struct sbx_error *e) {
  struct mat x;
  int r = mat_init(&x, sb, m, o, e);
  if (r == 0)
    r = ensure_users(&x, e);
  _cleanup_free_ size_t *idx = calloc(m->nentries + 1, sizeof(size_t));
  if (r == 0 && !idx)
    r = -ENOMEM;
  if (r == 0) {
    for (size_t i = 0; i < m->nentries; i++)
      idx[i] = i;
    r = run_entries(&x, idx, m->nentries);
  }
  r = mat_result(&x, r, e);
  mat_fini(&x);
  for (size_t i = 0; r == 0 && i < m->nenv; i++)
    r = sandbox_setenv(sb, m->env[i].name, m->env[i].value);
  return r;
}
