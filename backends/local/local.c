/* The local backend: one sandboxd process per sandbox session, on a
 * private ipc:// socket in a 0700 runtime directory, with a fresh random
 * token and a fresh temporary workspace.
 *
 * sandboxd gets the token by an inherited pipe, which it reads and closes
 * at start: no file of it is ever opened by sandboxd or its sandbox. An
 * SDK-owned sandbox's sandboxd is our child and dies with us
 * (PR_SET_PDEATHSIG). A developer-owned (detached) one must outlive us: its
 * token is also kept in a 0600 file in the state directory for the sbx
 * processes that attach later (pid, socket, token file, workspace); it
 * writes its output to a log file there, runs in its own session and gets
 * no parent-death signal. The client checks that the socket is served by
 * the sandboxd started (its clone, when isolated) and that it proves it
 * holds the token (shared/client.h).
 * Grants become --grant options; a local bind mount is a symlink in the
 * workspace to its source plus a grant of that source. */
#include "backends/local/local.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/port.h"
#include "shared/rand.h"

#include "backends/local/local_internal.h"

static void local_free(struct local *l) {
  if (!l)
    return;
  free(l->workspace);
  free(l->rundir);
  free(l->url);
  free(l->sandboxd);
  free(l->seccomp);
  free(l->token_path);
  free(l->log_path);
  free(l->inside_root);
  for (size_t i = 0; i < l->ngrants; i++)
    free(l->grants[i]);
  for (size_t i = 0; i < l->nbinds; i++)
    free(l->binds[i]);
  free(l);
}

/* Field 22 of /proc/PID/stat; 0 when the process is gone. */
static unsigned long long proc_start(pid_t pid) {
  char path[64], buf[1024];
  (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ')
    return 0;
  if (p[2] == 'Z' || p[2] == 'X')
    return 0; /* a zombie has stopped serving */
  p += 2;
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}

/* Whether L's sandboxd is running. Our own child cannot have been
 * replaced (its pid stays taken until it is reaped); any other pid is
 * sandboxd's only while the process has the start time recorded with it,
 * so that a pid used again is never taken for it (nor signalled). */
static bool alive(const struct local *l) {
  if (l->pid <= 0)
    return false;
  if (l->child) {
    int st;
    pid_t w = waitpid(l->pid, &st, WNOHANG);
    if (w == l->pid)
      return false;
  }
  unsigned long long s = proc_start(l->pid);
  return s != 0 && (l->child || s == l->start);
}

/* Waits up to TIMEOUT_MS for L's sandboxd to exit; true when gone. */
static bool wait_exit(struct local *l, unsigned timeout_ms) {
  uint64_t end = sbx_now_ms() + timeout_ms;
  for (;;) {
    if (l->child) {
      int st;
      pid_t w = waitpid(l->pid, &st, WNOHANG);
      if (w == l->pid || (w < 0 && errno == ECHILD))
        return true;
    } else if (!alive(l)) {
      return true;
    }
    if (sbx_now_ms() >= end)
      return false;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static int stop_sandboxd(struct sandbox *s, struct sbx_error *e) {
  struct local *l = s->priv;
  if (l && l->pid > 0) {
    if (alive(l)) {
      struct sbx_error ignored = {0};
      if (s->client)
        (void)sbx_shutdown(s->client, 250, &ignored);
      /* Hang up now: sandboxd waits (a little) for its clients to go
       * before it closes, so that none misses its last reply. */
      s->client = sbx_client_free(s->client);
      if (!wait_exit(l, 3000)) {
        (void)kill(l->pid, SIGKILL);
        (void)wait_exit(l, 2000);
      }
    } else if (l->child) {
      (void)waitpid(l->pid, NULL, WNOHANG);
    }
    l->pid = 0;
    l->start = 0;
  }
  s->client = sbx_client_free(s->client);
  return 0;
}

static char *make_temp_dir(const char *base, const char *prefix) {
  char path[512];
  int n = snprintf(path, sizeof(path), "%s/%sXXXXXX", base, prefix);
  if (n < 0 || (size_t)n >= sizeof(path))
    return NULL;
  if (!mkdtemp(path))
    return NULL;
  return strdup(path);
}

/* A new workspace: BASE/sbx-workspace-XXXXXX/root. The root is 0755, as
 * the SDK's mkdir makes it, so that a run_as user reads it; the directory
 * around it is the sandbox's own, 0700, so that other users of the host
 * do not (0711 without isolation, where a run_as user is one of them and
 * must pass through it). */
static char *make_workspace(const char *base, bool isolated) {
  _cleanup_free_ char *outer = make_temp_dir(base, "sbx-workspace-");
  if (!outer)
    return NULL;
  char path[600];
  int n = snprintf(path, sizeof(path), "%s/root", outer);
  if (n < 0 || (size_t)n >= sizeof(path) || mkdir(path, 0755) < 0 ||
      chmod(path, 0755) < 0 || (!isolated && chmod(outer, 0711) < 0)) {
    int err = errno;
    (void)sandbox_rm_rf(outer);
    errno = err ? err : ENAMETOOLONG;
    return NULL;
  }
  return strdup(path);
}

/* Removes WS and, for a workspace make_workspace made, the directory
 * around it. */
static int remove_workspace(const char *ws) {
  int r = sandbox_rm_rf(ws);
  const char *slash = strrchr(ws, '/');
  if (r < 0 || !slash || strcmp(slash, "/root") != 0)
    return r;
  char outer[600];
  (void)snprintf(outer, sizeof(outer), "%.*s", (int)(slash - ws), ws);
  const char *name = strrchr(outer, '/');
  if (name && strncmp(name + 1, "sbx-workspace-", 14) == 0)
    (void)rmdir(outer);
  return 0;
}

static int local_close(struct sandbox *s, struct sbx_error *e) {
  if (!s)
    return 0;
  struct local *l = s->priv;
  (void)stop_sandboxd(s, e);
  int r = 0;
  if (l) {
    if (l->workspace && remove_workspace(l->workspace) < 0)
      r = sbx_error_set(e, SBX_INTERNAL, EIO, "cannot remove workspace \"%s\"",
                        l->workspace);
    if (l->rundir)
      (void)sandbox_rm_rf(l->rundir);
    if (l->token_path)
      (void)unlink(l->token_path);
    local_free(l);
  }
  s->priv = NULL;
  sandbox_free(s);
  return r;
}

/* Stops a sandbox, keeping its workspace: refused for one whose
 * workspace is in memory, which would be lost. */
static int local_stop(struct sandbox *s, struct sbx_error *e) {
  const struct local *l = s->priv;
  if (l && l->opt.workspace_bytes && alive(l))
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "this sandbox keeps its workspace in memory "
                         "(workspace_bytes): stopping it would lose it; save "
                         "a snapshot (sbx sandbox save) and remove it instead");
  return stop_sandboxd(s, e);
}

static void local_detach(struct sandbox *s) {
  if (!s)
    return;
  local_free(s->priv);
  s->priv = NULL;
  sandbox_free(s);
}

/* The last line of the log at PATH (what a failed sandboxd said), in BUF. */
static const char *last_line(const char *path, char *buf, size_t n) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  off_t end = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
  off_t from = end > (off_t)n - 1 ? end - (off_t)n + 1 : 0;
  ssize_t got = end > 0 ? pread(fd, buf, n - 1, from) : -1;
  if (got <= 0)
    return "it said nothing";
  buf[got] = '\0';
  while (got > 0 && buf[got - 1] == '\n')
    buf[--got] = '\0';
  char *nl = strrchr(buf, '\n');
  return nl ? nl + 1 : buf;
}

/* Starts sandboxd and waits for its ready line. TOKEN is passed by a pipe
 * that sandboxd reads at start. */
static int spawn_sandboxd(struct local *l, const char *token, unsigned tmo,
                          struct sbx_error *e) {
  int tokp[2] = {-1, -1}, readyp[2] = {-1, -1};
  int logfd = -1;
  int r = 0;
  if (pipe2(tokp, O_CLOEXEC) < 0 || pipe2(readyp, O_CLOEXEC) < 0) {
    r = sbx_error_set(e, SBX_OK, errno, "cannot create pipes: %m");
    goto out;
  }
  /* The token fits in the pipe buffer; the child reads it at start. */
  if (write(tokp[1], token, strlen(token)) != (ssize_t)strlen(token)) {
    r = sbx_error_set(e, SBX_OK, errno, "cannot pass the token: %m");
    goto out;
  }
  close(tokp[1]);
  tokp[1] = -1;
  if (l->detached) {
    logfd = open(l->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0) {
      r = sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m",
                        l->log_path);
      goto out;
    }
  }
  struct local_argv as;
  const char **argv = local_sandboxd_argv(l, &as);
  /* Nothing of ours reaches the sandbox: no secret from our environment,
   * only a PATH and the sanitizers' settings of a test build. */
  const char *envp[8];
  size_t ne = 0;
  envp[ne++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:"
               "/bin";
  static const char *const pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS",
                                     "LSAN_OPTIONS"};
  char passed[3][512];
  for (size_t i = 0; i < 3; i++) {
    const char *v = getenv(pass[i]);
    if (v && snprintf(passed[i], sizeof(passed[i]), "%s=%s", pass[i], v) <
                 (int)sizeof(passed[i]))
      envp[ne++] = passed[i];
  }
  envp[ne] = NULL;
  pid_t parent = getpid();
  bool detached = l->detached;
  pid_t pid = fork();
  if (pid < 0) {
    r = sbx_error_set(e, SBX_OK, errno, "cannot start sandboxd: %m");
    goto out;
  }
  if (pid == 0) {
    /* Async-signal-safe only from here to exec. The sandbox does not get
     * our terminal's signals; an owned one dies with us. */
    (void)setsid();
    if (!detached) {
      (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent)
        _exit(127);
    }
    /* Move both above 4 first: either may already be fd 3 or 4. */
    int tok = fcntl(tokp[0], F_DUPFD, 10);
    int rdy = fcntl(readyp[1], F_DUPFD, 10);
    if (tok < 0 || dup2(tok, 3) < 0 || rdy < 0 || dup2(rdy, 4) < 0)
      _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      (void)dup2(devnull, 0);
    if (detached && (dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0))
      _exit(127);
    execve(argv[0], (char *const *)argv, (char *const *)envp);
    _exit(127);
  }
  l->pid = pid;
  l->child = true;
  close(readyp[1]);
  readyp[1] = -1;

  struct pollfd pfd = {.fd = readyp[0], .events = POLLIN};
  int pr;
  do
    pr = poll(&pfd, 1, (int)tmo);
  while (pr < 0 && errno == EINTR);
  char line[256], said[1024];
  ssize_t got = pr > 0 ? read(readyp[0], line, sizeof(line) - 1) : -1;
  if (got <= 0 || strncmp(line, "ready ", 6) != 0) {
    if (pr == 0)
      r = sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                        "sandboxd \"%s\" did not become ready in %u ms",
                        l->sandboxd, tmo);
    else if (l->detached)
      r = sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                        "sandboxd \"%s\" failed to start: %s", l->sandboxd,
                        last_line(l->log_path, said, sizeof(said)));
    else
      r = sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                        "sandboxd \"%s\" failed to start (its error is "
                        "above)",
                        l->sandboxd);
  }
  if (r == 0)
    l->start = proc_start(pid);
out:
  for (int i = 0; i < 2; i++) {
    if (tokp[i] >= 0)
      close(tokp[i]);
    if (readyp[i] >= 0)
      close(readyp[i]);
  }
  if (logfd >= 0)
    close(logfd);
  return r;
}

/* Connects S's client to its sandboxd, which must serve the socket from
 * the pid started (isolated: from its clone, the supervisor's child) and
 * prove that it holds TOKEN, and says Hello. */
static int connect_client(struct sandbox *s, const char *token,
                          struct sbx_error *e) {
  struct local *l = s->priv;
  struct sbx_client_config cc = {
      .url = l->url,
      .token = (const uint8_t *)token,
      .token_len = strlen(token),
      .client_name = "sbx",
      .peer_pid = l->pid,
      .peer_child = l->opt.isolate,
      .heartbeat_ms = l->heartbeat_ms,
  };
  int r = sbx_client_new(&cc, &s->client, e);
  if (r == 0)
    r = sbx_hello(s->client, NULL, e);
  return r;
}

static int read_token(const struct local *l, char *out, size_t n,
                      struct sbx_error *e) {
  char *t = NULL;
  size_t len = 0;
  int r = sbx_read_file(l->token_path, n - 1, &t, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read the token file: %s",
                         strerror(-r));
  memcpy(out, t, len);
  out[len] = '\0';
  explicit_bzero(t, len);
  free(t);
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r'))
    out[--len] = '\0';
  return 0;
}

/* Checks a grant or bind source: an existing host directory. */
static int check_host_dir(const char *what, const char *p,
                          struct sbx_error *e) {
  struct stat st;
  if (stat(p, &st) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, errno,
                         "%s \"%s\" cannot be used on backend local: %m", what,
                         p);
  if (!S_ISDIR(st.st_mode))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                         "%s \"%s\" is not a directory on the host", what, p);
  return 0;
}

static int add_grant(struct local *l, const char *path, bool ro) {
  if (l->ngrants >= LOCAL_MAX_GRANTS)
    return -E2BIG;
  size_t n = strlen(path) + 4;
  char *g = malloc(n);
  if (!g)
    return -ENOMEM;
  (void)snprintf(g, n, "%s%s", path, ro ? ":ro" : "");
  l->grants[l->ngrants++] = g;
  return 0;
}

/* A local bind: a symlink at PATH beneath the workspace to SOURCE. */
static int make_bind(const struct local *l, const struct sandbox_bind *b,
                     struct sbx_error *e) {
  char full[PATH_MAX];
  int n = snprintf(full, sizeof(full), "%s/%s", l->workspace, b->path);
  if (n < 0 || (size_t)n >= sizeof(full))
    return -ENAMETOOLONG;
  for (char *p = full + strlen(l->workspace) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    if (mkdir(full, 0755) < 0 && errno != EEXIST) {
      *p = '/';
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", full);
    }
    *p = '/';
  }
  if (symlink(b->source, full) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot bind \"%s\" at \"%s\": %m",
                         b->source, b->path);
  return 0;
}

static int mkdir_in(const char *dir, const char *name, struct sbx_error *e) {
  char p[PATH_MAX];
  (void)snprintf(p, sizeof(p), "%s/%s", dir, name);
  if (mkdir(p, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", p);
  return 0;
}

/* An isolated sandbox's local_bind: a bind mount at ROOT/PATH. */
static int add_bind(struct local *l, const struct sandbox_bind *b,
                    struct sbx_error *e) {
  if (l->nbinds >= LOCAL_MAX_GRANTS)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "more than %d bind mounts", LOCAL_MAX_GRANTS);
  if (strchr(b->source, ':') || strchr(b->path, ':'))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "local_bind \"%s\": a path with \":\" cannot be "
                         "bound on backend local",
                         b->path);
  if (asprintf(&l->binds[l->nbinds], "%s:%s/%s%s", b->source, l->inside_root,
               b->path, b->read_only ? ":ro" : "") < 0) {
    l->binds[l->nbinds] = NULL;
    return -ENOMEM;
  }
  l->nbinds++;
  return 0;
}

/* Takes the backend's options and the exposed ports into L. */
static int take_options(struct local *l, const struct backend_options *o,
                        const struct sandbox_spec *spec, struct sbx_error *e) {
  if (o && o->own)
    l->opt = *(const struct local_options *)o->own;
  else
    local_options_default(&l->opt);
  if (spec->idle_timeout_s && l->opt.workspace_bytes)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "an idle timeout cannot be combined with "
                         "workspace_bytes: the workspace is in memory and an "
                         "idle stop would lose it");
  l->expires_at = spec->expires_at;
  l->idle_timeout_s = spec->idle_timeout_s;
  if (!l->opt.isolate) {
    /* Commands run on the host, in a directory of its own: there is no
     * other root to put the workspace at. */
    if (spec->root && strcmp(spec->root, "/workspace") != 0)
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "the manifest's root \"%s\" is not supported "
                           "with isolation \"none\": the workspace is a "
                           "host directory; isolate, or leave root at "
                           "/workspace",
                           spec->root);
    for (size_t i = 0; i < spec->nbinds; i++)
      if (spec->binds[i].read_only)
        return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                             "entry \"%s\": isolation \"none\" cannot "
                             "enforce a read-only local_bind mount (commands "
                             "could still write); isolate, or set "
                             "\"read_only\": false",
                             spec->binds[i].path);
    return 0;
  }
  const char *root = spec->root ? spec->root : "/workspace";
  if (!(l->inside_root = strdup(root)))
    return -ENOMEM;
  size_t np = o ? o->nports : 0;
  if (np > LOCAL_MAX_PORTS)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "more than %d exposed ports", LOCAL_MAX_PORTS);
  if (np && !l->opt.network)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "network_mode \"none\" cannot be combined with "
                         "exposed ports");
  for (size_t i = 0; i < np; i++) {
    l->ports[i] = o->ports[i];
    int r = sbx_free_tcp_port(&l->host_ports[i]);
    if (r < 0)
      return sbx_error_set(e, SBX_OK, -r, "cannot find a free port: %s",
                           strerror(-r));
    l->nports++;
  }
  return 0;
}

/* A new sandbox with its (zeroed) local part, or NULL; *S gets it. */
static struct local *local_new(struct sandbox **s) {
  struct sandbox *sb = calloc(1, sizeof(*sb));
  struct local *l = calloc(1, sizeof(*l));
  if (!sb || !l) {
    free(sb);
    free(l);
    return NULL;
  }
  sb->backend = &backend_local;
  sb->priv = l;
  *s = sb;
  return l;
}

static int local_create(const struct backend_options *o,
                        const struct sandbox_spec *spec, struct sandbox **out,
                        struct sbx_error *e) {
  static const struct sandbox_spec none = {0};
  if (!spec)
    spec = &none;
  const char *base = o && o->workspace_base ? o->workspace_base : NULL;
  if (!base)
    base = getenv("TMPDIR");
  if (!base || !*base)
    base = "/tmp";
  if (spec->detached && (!spec->token_path || !spec->log_path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a detached sandbox needs a token and a log path");
  struct sandbox *s = NULL;
  struct local *l = local_new(&s);
  if (!l)
    return -ENOMEM;
  l->detached = spec->detached;
  char token[SBX_TOKEN_HEX + 1];
  char url[600];
  int r = sandbox_find_sandboxd(o, &l->sandboxd, e);
  if (r < 0)
    goto fail;
  for (size_t i = 0; i < spec->ngrants && r == 0; i++) {
    r = check_host_dir("extra path grant", spec->grants[i].path, e);
    if (r == 0 &&
        add_grant(l, spec->grants[i].path, spec->grants[i].read_only) < 0)
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                        "more than %d grants and bind mounts",
                        LOCAL_MAX_GRANTS);
  }
  if (r == 0)
    r = take_options(l, o, spec, e);
  for (size_t i = 0; i < spec->nbinds && r == 0; i++) {
    r = check_host_dir("local_bind source", spec->binds[i].source, e);
    if (r == 0)
      r = l->opt.isolate ? add_bind(l, &spec->binds[i], e)
          : add_grant(l, spec->binds[i].source, false) < 0
              ? sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                              "more than %d grants and bind mounts",
                              LOCAL_MAX_GRANTS)
              : 0;
  }
  if (r < 0)
    goto fail;
  l->seccomp = strdup(o && o->seccomp ? o->seccomp : "default");
  l->heartbeat_ms = o ? o->heartbeat_ms : 0;
  if (spec->detached) {
    l->token_path = strdup(spec->token_path);
    l->log_path = strdup(spec->log_path);
  }
  if (!l->seccomp || (spec->detached && (!l->token_path || !l->log_path))) {
    r = -ENOMEM;
    goto fail;
  }
  if ((r = sbx_random_uuid(s->session_id)) < 0 ||
      (r = sbx_random_hex(token, SBX_TOKEN_BYTES)) < 0)
    goto fail;
  errno = 0;
  l->workspace = make_workspace(base, l->opt.isolate);
  l->rundir = make_temp_dir("/tmp", "sbx-run-");
  if (!l->workspace || !l->rundir) {
    r = sbx_error_set(e, SBX_OK, errno ? errno : ENOMEM,
                      "cannot create a workspace under \"%s\": %m", base);
    goto fail;
  }
  memcpy(l->session_id, s->session_id, sizeof(l->session_id));
  s->root = strdup(l->opt.isolate ? l->inside_root : l->workspace);
  (void)snprintf(url, sizeof(url), "ipc://%s/sandboxd.sock", l->rundir);
  l->url = strdup(url);
  if (!s->root || !l->url) {
    r = -ENOMEM;
    goto fail;
  }
  for (size_t i = 0; !l->opt.isolate && i < spec->nbinds && r == 0; i++)
    r = make_bind(l, &spec->binds[i], e);
  if (r == 0 && l->opt.isolate && mkdir_in(l->rundir, "etc", e) < 0)
    r = -EIO;
  if (r < 0)
    goto fail;
  if (!l->opt.isolate)
    log_warn("sandbox %s is not isolated (isolation \"none\"): its commands "
             "run as you on this host and can read your files, see your "
             "processes and reach your network",
             s->session_id);
  if (spec->detached && (r = sbx_write_file_atomic(l->token_path, token,
                                                   strlen(token), 0600)) < 0) {
    r = sbx_error_set(e, SBX_OK, -r, "cannot write the token file: %s",
                      strerror(-r));
    goto fail;
  }
  unsigned tmo = o && o->ready_timeout_ms ? o->ready_timeout_ms : 10000;
  r = spawn_sandboxd(l, token, tmo, e);
  if (r == 0)
    r = connect_client(s, token, e);
  if (r < 0)
    goto fail;
  explicit_bzero(token, sizeof(token));
  log_debug("local sandbox %s at \"%s\"", s->session_id, s->root);
  *out = s;
  return 0;
fail:
  explicit_bzero(token, sizeof(token));
  local_close(s, NULL);
  return r;
}

/* The isolation's fields of the record, into O. */
static int save_isolation(const struct local *l, json_t *o) {
  json_t *b = json_array(), *p = json_array();
  for (size_t i = 0; b && i < l->nbinds; i++)
    if (json_array_append_new(b, json_string(l->binds[i])) < 0)
      break;
  for (size_t i = 0; p && i < l->nports; i++)
    if (json_array_append_new(
            p, json_pack("[i,i]", l->ports[i], l->host_ports[i])) < 0)
      break;
  json_t *iso = json_pack(
      "{s:s, s:b, s:I, s:I, s:I, s:f, s:s, s:o?, s:o?}", "root", l->inside_root,
      "network", l->opt.network, "memory_bytes",
      (json_int_t)l->opt.memory_bytes, "pids_limit", (json_int_t)l->opt.pids,
      "workspace_bytes", (json_int_t)l->opt.workspace_bytes, "cpus",
      l->opt.cpus, "session", l->session_id, "binds", b, "ports", p);
  return iso ? json_object_set_new(o, "isolation", iso) : -ENOMEM;
}

/* Takes the isolation's fields of a record (ISO: NULL for isolation
 * "none") into L. */
static int attach_isolation(struct local *l, json_t *iso, struct sbx_error *e) {
  if (!iso)
    return 0;
  json_t *root = json_object_get(iso, "root");
  const char *sid = json_string_value(json_object_get(iso, "session"));
  if (!json_is_string(root) || !sid || strlen(sid) >= sizeof(l->session_id))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the sandbox state has a bad \"isolation\"");
  l->opt.isolate = true;
  l->opt.network = json_is_true(json_object_get(iso, "network"));
  l->opt.memory_bytes =
      (uint64_t)json_integer_value(json_object_get(iso, "memory_bytes"));
  l->opt.pids =
      (uint64_t)json_integer_value(json_object_get(iso, "pids_limit"));
  l->opt.cpus = json_number_value(json_object_get(iso, "cpus"));
  l->opt.workspace_bytes =
      (uint64_t)json_integer_value(json_object_get(iso, "workspace_bytes"));
  memcpy(l->session_id, sid, strlen(sid) + 1);
  if (!(l->inside_root = strdup(json_string_value(root))))
    return -ENOMEM;
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(iso, "binds"), i, v) {
    if (!json_is_string(v) || l->nbinds >= LOCAL_MAX_GRANTS)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the sandbox state has bad binds");
    if (!(l->binds[l->nbinds] = strdup(json_string_value(v))))
      return -ENOMEM;
    l->nbinds++;
  }
  json_array_foreach(json_object_get(iso, "ports"), i, v) {
    json_int_t a = json_integer_value(json_array_get(v, 0));
    json_int_t b = json_integer_value(json_array_get(v, 1));
    if (l->nports >= LOCAL_MAX_PORTS || a < 1 || a > 65535 || b < 1 ||
        b > 65535)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the sandbox state has bad ports");
    l->ports[l->nports] = (uint16_t)a;
    l->host_ports[l->nports++] = (uint16_t)b;
  }
  return 0;
}

static int local_save(const struct sandbox *s, json_t *obj) {
  const struct local *l = s->priv;
  json_t *g = json_array();
  for (size_t i = 0; g && i < l->ngrants; i++)
    if (json_array_append_new(g, json_string(l->grants[i])) < 0) {
      json_decref(g);
      return -ENOMEM;
    }
  json_t *o =
      json_pack("{s:i, s:I, s:s, s:s, s:s, s:s, s:s, s:s?, s:s?, s:o}", "pid",
                (int)l->pid, "pid_start", (json_int_t)l->start, "socket",
                l->url, "workspace", l->workspace, "rundir", l->rundir,
                "sandboxd", l->sandboxd, "seccomp", l->seccomp, "token_file",
                l->token_path, "log_file", l->log_path, "grants", g);
  if (!o || (l->opt.isolate && save_isolation(l, o) < 0) ||
      (l->expires_at > 0 &&
       json_object_set_new(o, "expires_at", json_integer(l->expires_at)) < 0) ||
      (l->idle_timeout_s > 0 &&
       json_object_set_new(o, "idle_timeout", json_integer(l->idle_timeout_s)) <
           0) ||
      backend_heartbeat_save(l->heartbeat_ms, o) < 0) {
    json_decref(o);
    return -ENOMEM;
  }
  return json_object_update(obj, o) < 0 ? (json_decref(o), -ENOMEM)
                                        : (json_decref(o), 0);
}

static int take_str(json_t *obj, const char *k, char **out, bool required,
                    struct sbx_error *e) {
  json_t *v = json_object_get(obj, k);
  if (!v && !required)
    return 0;
  if (!json_is_string(v))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the sandbox state lacks \"%s\"", k);
  *out = strdup(json_string_value(v));
  return *out ? 0 : -ENOMEM;
}

static int local_attach(const struct backend_options *o, json_t *obj,
                        struct sandbox **out, struct sbx_error *e) {
  struct sandbox *s = NULL;
  struct local *l = local_new(&s);
  if (!l)
    return -ENOMEM;
  l->detached = true;
  l->heartbeat_ms = backend_heartbeat(o, obj);
  int r;
  if ((r = take_str(obj, "socket", &l->url, true, e)) < 0 ||
      (r = take_str(obj, "workspace", &l->workspace, true, e)) < 0 ||
      (r = take_str(obj, "rundir", &l->rundir, true, e)) < 0 ||
      (r = take_str(obj, "sandboxd", &l->sandboxd, true, e)) < 0 ||
      (r = take_str(obj, "seccomp", &l->seccomp, true, e)) < 0 ||
      (r = take_str(obj, "token_file", &l->token_path, true, e)) < 0 ||
      (r = take_str(obj, "log_file", &l->log_path, true, e)) < 0)
    goto fail;
  size_t i;
  json_t *g;
  json_array_foreach(json_object_get(obj, "grants"), i, g) {
    if (!json_is_string(g) || l->ngrants >= LOCAL_MAX_GRANTS ||
        !(l->grants[l->ngrants] = strdup(json_string_value(g)))) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "the sandbox state has bad grants");
      goto fail;
    }
    l->ngrants++;
  }
  if ((r = attach_isolation(l, json_object_get(obj, "isolation"), e)) < 0)
    goto fail;
  json_int_t ex = json_integer_value(json_object_get(obj, "expires_at"));
  json_int_t idle = json_integer_value(json_object_get(obj, "idle_timeout"));
  l->expires_at = ex > 0 ? (int64_t)ex : 0;
  l->idle_timeout_s = idle > 0 && idle <= (1 << 30) ? (unsigned)idle : 0;
  l->pid = (pid_t)json_integer_value(json_object_get(obj, "pid"));
  l->start =
      (unsigned long long)json_integer_value(json_object_get(obj, "pid_start"));
  if (!(s->root = strdup(l->opt.isolate ? l->inside_root : l->workspace))) {
    r = -ENOMEM;
    goto fail;
  }
  if (!alive(l)) {
    l->pid = 0;
    l->start = 0;
    *out = s;
    return 0;
  }
  char token[SBX_TOKEN_HEX + 8];
  r = read_token(l, token, sizeof(token), e);
  if (r == 0)
    r = connect_client(s, token, e);
  explicit_bzero(token, sizeof(token));
  if (r < 0)
    goto fail;
  *out = s;
  return 0;
fail:
  local_detach(s);
  return r;
}

static int local_start(struct sandbox *s, struct sbx_error *e) {
  struct local *l = s->priv;
  if (alive(l) && s->client)
    return 0;
  if (alive(l)) {
    char token[SBX_TOKEN_HEX + 8];
    int r = read_token(l, token, sizeof(token), e);
    if (r == 0)
      r = connect_client(s, token, e);
    explicit_bzero(token, sizeof(token));
    return r;
  }
  if (!l->detached)
    return sbx_error_set(e, SBX_CONFLICT, ESRCH,
                         "the sandbox's sandboxd has exited");
  /* A size-limited workspace was a tmpfs of the sandbox's own: it ended
   * with its sandboxd. */
  if (l->opt.workspace_bytes)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "the sandbox's workspace (a %llu-byte tmpfs) ended "
                         "with its sandboxd",
                         (unsigned long long)l->opt.workspace_bytes);
  struct stat st;
  if (stat(l->workspace, &st) < 0)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "the sandbox's workspace \"%s\" is gone",
                         l->workspace);
  if (mkdir(l->rundir, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m",
                         l->rundir);
  /* Gone with the run directory (a reboot): /etc's layer starts afresh,
   * without the users the manifest made (docs/security.md). */
  if (l->opt.isolate && mkdir_in(l->rundir, "etc", e) < 0)
    return -EIO;
  char sock[PATH_MAX];
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", l->rundir);
  (void)unlink(sock);
  s->client = sbx_client_free(s->client);
  char token[SBX_TOKEN_HEX + 8];
  int r = read_token(l, token, sizeof(token), e);
  if (r == 0 && (r = spawn_sandboxd(l, token, 10000, e)) < 0)
    (void)stop_sandboxd(s, NULL);
  if (r == 0)
    r = connect_client(s, token, e);
  explicit_bzero(token, sizeof(token));
  return r;
}

static bool local_running(const struct sandbox *s) {
  return alive(s->priv);
}

static int local_resolve_port(const struct sandbox *s, unsigned port,
                              char *host, size_t hostsz, unsigned *host_port,
                              struct sbx_error *e) {
  const struct local *l = s->priv;
  (void)snprintf(host, hostsz, "127.0.0.1");
  if (!l->opt.isolate) {
    *host_port = port; /* the sandbox's processes share the host's network */
    return 0;
  }
  for (size_t i = 0; i < l->nports; i++)
    if (l->ports[i] == port) {
      *host_port = l->host_ports[i];
      return 0;
    }
  return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                       "port %u is not exposed by this sandbox", port);
}

/* Isolated, local_bind mounts are bind mounts (read-only ones too); with
 * isolation "none" they are symlinks to granted host directories, which
 * commands can write through, and read-only ones are refused. */
const struct backend backend_local = {
    .name = "local",
    .options = local_option_table,
    .options_parse = local_options_parse,
    .options_free = local_options_free,
    .features = BACKEND_LOCAL_BIND | BACKEND_READ_ONLY_BIND,
    .create = local_create,
    .close = local_close,
    .save = local_save,
    .attach = local_attach,
    .detach = local_detach,
    .stop = local_stop,
    .start = local_start,
    .running = local_running,
    .resolve_port = local_resolve_port,
};
