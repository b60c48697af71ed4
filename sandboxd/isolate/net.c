/* pasta for an isolated sandbox: its command line, the watcher that ties
 * its life to the sandbox's, and waiting until it is ready.
 *
 * Readiness: pasta writes its pid to the -P file once the namespace's
 * interface is up and the forwards listen (after --config-net and its own
 * sandboxing). -P /proc/self/fd/1 makes that file its stdout, a pipe to us:
 * the pid line is the signal, EOF first means it failed. No temporary file
 * and no fd beyond stdio; in the foreground, so nothing daemonizes away.
 *
 * Cost (2 CPUs, Linux 6.18, pasta 0.0~git20230309): isolate_net_start takes
 * 15-20 ms, of which our fork and exec are under 1 ms; the rest is pasta's
 * start-up, two thirds of it page faults zeroing its ~20 MB of tables
 * (perf: ~5000 faults). IPv6 would add ~5 ms; --no-dhcp, --no-ndp,
 * --no-icmp and -D/-S none save nothing measurable. To overlap that time
 * with other set-up, use isolate_net_spawn and isolate_net_wait. */
#include "sandboxd/isolate/net.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

/* The watcher gives pasta this long between TERM and KILL; we give the
 * watcher this long to finish before killing it. */
#define PASTA_TERM_WAIT_MS 200
#define WATCHER_WAIT_MS 1000
/* pasta's stderr kept for the error message, and the part quoted. */
#define PASTA_STDERR_MAX 2048
#define PASTA_QUOTE_MAX 320
#define PASTA_QUOTE_LINES 3
/* The stack pasta's clone runs on until execve. */
#define PASTA_STACK_SIZE (32u << 10)

static const char pasta_missing[] =
    "user-mode networking needs pasta (Debian package passt); install it, "
    "or use network_mode \"none\"";

/* Where pasta is looked for without $SBX_PASTA, in order. */
static const char *const pasta_paths[] = {
    "/usr/bin/pasta",
    "/usr/sbin/pasta",
    "/bin/pasta",
};

/* pasta's options that never change, and why. */
static const char *const pasta_fixed_args[] = {
    "--foreground", /* the watcher's child: it stops and reaps it */
    "--quiet",      /* only errors on stderr, for our error message */
    "--config-net", /* addresses, routes and link up before it is ready */
    /* The gateway's address is the real gateway, not the host's loopback. */
    "--no-map-gw",
    /* Nothing from the namespace's ports to the host's. */
    "--tcp-ns",
    "none",
    "--udp-ns",
    "none",
    /* TCP forwards only: by default pasta mirrors -t ports for UDP. */
    "--udp-ports",
    "none",
    /* No IPv6: for a link-local destination pasta binds the host's own
     * link-local address and connects, reaching host services on ::. */
    "--ipv4-only",
    /* Readiness: our pipe (see the top of this file). */
    "--pid",
    "/proc/self/fd/1",
};

/* Everything execve needs, built before the fork. */
struct pasta_cmd {
  char path[PATH_MAX];
  char runas[32];
  char outbound_if[IF_NAMESIZE];
  char target[16];
  char forwards[ISOLATE_NET_FORWARDS_MAX][40];
  char *
      argv[SBX_ARRAY_SIZE(pasta_fixed_args) + 8 + 2 * ISOLATE_NET_FORWARDS_MAX];
};

struct isolate_net {
  pid_t watcher;  /* our child; 0 once reaped */
  int watcher_fd; /* its pidfd */
  int life_fd;    /* the watcher stops pasta when this closes */
  int ready_fd;   /* pasta's stdout until ready: its pid, then EOF */
  int err_fd;     /* pasta's stderr until ready, non-blocking */
  pid_t pasta;    /* 0 until ready */
  bool failed;    /* a wait failed: pasta is gone */
};

/* The watcher's fds (all above 2, all O_CLOEXEC) and pasta's command. */
struct watch_plan {
  const struct pasta_cmd *cmd;
  int devnull;   /* becomes pasta's stdin */
  int ready_wr;  /* ... its stdout */
  int err_wr;    /* ... its stderr */
  int life_rd;   /* hangs up when we stop or die */
  int target_fd; /* pidfd of the sandbox's process; -1: not watched */
  int ns_fds[2]; /* its user and network namespaces (pasta's fds 3, 4) */
  pid_t watcher; /* set in the watcher */
};

/* E := "user-mode network: WHAT: <ERR's text>"; returns -ERR. */
static int sys_fail(struct sbx_error *e, int err, const char *what) {
  char buf[128];
  return sbx_error_set(e, SBX_OK, err, "user-mode network: %s: %s", what,
                       sbx_strerror_lc(err, buf, sizeof(buf)));
}

static int pipe_above_stdio(int *rd, int *wr) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  *rd = sbx_fd_above_stdio(p[0]);
  *wr = sbx_fd_above_stdio(p[1]);
  if (*rd >= 0 && *wr >= 0)
    return 0;
  int err = *rd < 0 ? *rd : *wr;
  sbx_closep(rd);
  sbx_closep(wr);
  *rd = *wr = -1;
  return err;
}

static int pidfd_open_(pid_t pid) {
  return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* ---- the watcher and pasta's clone: a forked copy of us, syscalls only */

/* What follows runs after fork (the watcher) or in a clone sharing the
 * watcher's memory (pasta until execve): async-signal-safe calls only, no
 * allocation, no ASan (the clone's stack is a buffer in the watcher's). */
#define CHILD __attribute__((no_sanitize("address"), noinline))

/* Writes the string literal MSG to stderr. */
#define CHILD_SAY(msg) ((void)syscall(SYS_write, 2, msg, sizeof(msg) - 1))

/* Closes every fd above 2 except the N of KEEP (sorted, -1 for none). */
CHILD static void child_close_except(const int *keep, int n) {
  unsigned first = 3;
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    if (keep[i] < 3 || (unsigned)keep[i] < first)
      continue;
    if ((unsigned)keep[i] > first)
      ok = syscall(SYS_close_range, first, (unsigned)keep[i] - 1, 0u) == 0;
    first = (unsigned)keep[i] + 1;
  }
  if (ok && syscall(SYS_close_range, first, ~0u, 0u) == 0)
    return;
  /* Before Linux 5.9: one by one, up to the limit. */
  struct rlimit rl;
  long max = 65536;
  if (syscall(SYS_getrlimit, RLIMIT_NOFILE, &rl) == 0 &&
      rl.rlim_cur < (rlim_t)max)
    max = (long)rl.rlim_cur;
  for (long fd = 3; fd < max; fd++) {
    bool kept = false;
    for (int i = 0; i < n; i++)
      kept |= fd == keep[i];
    if (!kept)
      (void)syscall(SYS_close, fd);
  }
}

CHILD static void child_default_signals(void) {
  static const struct sigaction dfl = {.sa_handler = SIG_DFL};
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      (void)sigaction(sig, &dfl, NULL); /* glibc-internal ones: EINVAL */
  sigset_t none;
  sigemptyset(&none);
  (void)sigprocmask(SIG_SETMASK, &none, NULL);
}

/* pasta's clone: dies with the watcher, keeps only stdio, execs. */
CHILD static int pasta_child(void *arg) {
  const struct watch_plan *w = arg;
  if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
      syscall(SYS_getppid) != w->watcher)
    syscall(SYS_exit_group, 127);
  /* The namespaces as fds 3 and 4: pasta joins them by those paths (the
   * sandbox's process may already be out of our reach by its own). They
   * are above 4 (ns_fds are moved there), so neither is overwritten. */
  if (syscall(SYS_dup3, w->ns_fds[0], 3, 0) < 0 ||
      syscall(SYS_dup3, w->ns_fds[1], 4, 0) < 0)
    syscall(SYS_exit_group, 127);
  (void)syscall(SYS_close_range, 5u, ~0u, 0u);
  static char *const empty_env[] = {NULL};
  syscall(SYS_execve, w->cmd->path, w->cmd->argv, empty_env);
  CHILD_SAY("cannot execute pasta\n");
  syscall(SYS_exit_group, 127);
  return 127;
}

CHILD static int child_wait_ms(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r;
  while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
    ;
  return r;
}

/* The watcher: starts pasta, then waits for pasta's end (and exits with its
 * status), or for the sandbox's process to exit or the life pipe to hang
 * up (then stops pasta and exits 0). */
CHILD static _Noreturn void watcher_main(struct watch_plan *w) {
  child_default_signals();
  w->watcher = (pid_t)syscall(SYS_getpid);
  if (dup3(w->devnull, 0, 0) < 0 || dup3(w->ready_wr, 1, 0) < 0 ||
      dup3(w->err_wr, 2, 0) < 0)
    _exit(127);
  int keep[4] = {w->life_rd, w->target_fd, w->ns_fds[0], w->ns_fds[1]};
  for (int i = 1; i < 4; i++) /* sorted, for child_close_except */
    for (int j = i; j > 0 && keep[j] < keep[j - 1]; j--) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  child_close_except(keep, 4);
  _Alignas(64) unsigned char stack[PASTA_STACK_SIZE];
  int pasta_fd = -1;
  pid_t pasta =
      clone(pasta_child, stack + sizeof(stack),
            CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, w, &pasta_fd);
  if (pasta < 0 || pasta_fd < 0) {
    CHILD_SAY("cannot start pasta: clone failed\n");
    _exit(127);
  }
  /* From here on only pasta holds its stdout and stderr. */
  (void)dup3(0, 1, 0);
  (void)dup3(0, 2, 0);
  struct pollfd p[3] = {
      {.fd = pasta_fd, .events = POLLIN},
      {.fd = w->life_rd, .events = POLLIN},
      {.fd = w->target_fd, .events = POLLIN},
  };
  nfds_t n = w->target_fd >= 0 ? 3 : 2;
  int status = 0;
  for (;;) {
    int r = poll(p, n, -1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r > 0 && p[0].revents) { /* pasta is gone by itself */
      while (waitpid(pasta, &status, 0) < 0 && errno == EINTR)
        ;
      _exit(WIFEXITED(status) ? WEXITSTATUS(status)
                              : 128 + (WTERMSIG(status) & 127));
    }
    if (r < 0 || p[1].revents || (n == 3 && p[2].revents))
      break;
  }
  (void)kill(pasta, SIGTERM);
  if (child_wait_ms(pasta_fd, PASTA_TERM_WAIT_MS) <= 0)
    (void)kill(pasta, SIGKILL);
  while (waitpid(pasta, &status, 0) < 0 && errno == EINTR)
    ;
  _exit(0);
}

/* ---- building the command ----------------------------------------------- */

static bool is_executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
         faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0;
}

/* PATH (PATH_MAX bytes) := the pasta to run. */
static int find_pasta(char *path, struct sbx_error *e) {
  const char *env = secure_getenv("SBX_PASTA");
  if (env && *env) {
    if (strlen(env) < PATH_MAX && is_executable(env)) {
      (void)snprintf(path, PATH_MAX, "%s", env);
      return 0;
    }
    return sbx_error_set(e, SBX_UNAVAILABLE, ENOENT,
                         "%s ($SBX_PASTA \"%.200s\" is not an executable file)",
                         pasta_missing, env);
  }
  for (size_t i = 0; i < SBX_ARRAY_SIZE(pasta_paths); i++) {
    if (is_executable(pasta_paths[i])) {
      (void)snprintf(path, PATH_MAX, "%s", pasta_paths[i]);
      return 0;
    }
  }
  return sbx_error_set(e, SBX_UNAVAILABLE, ENOENT, "%s", pasta_missing);
}

/* IFNAME (IF_NAMESIZE bytes) := the interface of the host's IPv4 default
 * route with the lowest metric, "" when there is none. */
static void default_route_if(char *ifname) {
  ifname[0] = '\0';
  _cleanup_fclose_ FILE *f = fopen("/proc/net/route", "re");
  if (!f)
    return;
  char line[256];
  unsigned best = UINT_MAX;
  while (fgets(line, sizeof(line), f)) {
    char name[IF_NAMESIZE];
    unsigned dst, gw, flags, metric, mask;
    int refcnt, use;
    if (sscanf(line, "%15s %x %x %x %d %d %u %x", name, &dst, &gw, &flags,
               &refcnt, &use, &metric, &mask) != 8)
      continue; /* the header */
    if (dst == 0 && mask == 0 && (flags & RTF_UP) && metric < best) {
      best = metric;
      memcpy(ifname, name, sizeof(name));
    }
  }
}

/* Fills CMD's argv: fixed options, identity, outbound interface, forwards,
 * then the target pid. */
static void build_cmd(struct pasta_cmd *cmd, pid_t pid,
                      const struct net_forward *fw, size_t nfw) {
  size_t a = 0;
  cmd->argv[a++] = "pasta"; /* pasta picks its mode from argv[0] */
  for (size_t i = 0; i < SBX_ARRAY_SIZE(pasta_fixed_args); i++)
    cmd->argv[a++] = (char *)pasta_fixed_args[i];
  /* As us: pasta would switch from root to nobody, who cannot join a user
   * namespace root owns. */
  (void)snprintf(cmd->runas, sizeof(cmd->runas), "%u:%u", (unsigned)geteuid(),
                 (unsigned)getegid());
  cmd->argv[a++] = "--runas";
  cmd->argv[a++] = cmd->runas;
  /* TCP to the host's other addresses would reach its services; bound to
   * the default-route interface it goes out there instead (Linux >= 5.7:
   * earlier, pasta cannot bind and falls back to unbound sockets). UDP is
   * not bound: this pasta binds IPv4 UDP to --outbound-if6, which -4
   * forbids. */
  default_route_if(cmd->outbound_if);
  if (cmd->outbound_if[0]) {
    cmd->argv[a++] = "--outbound-if4";
    cmd->argv[a++] = cmd->outbound_if;
  }
  for (size_t i = 0; i < nfw; i++) {
    (void)snprintf(cmd->forwards[i], sizeof(cmd->forwards[i]),
                   "127.0.0.1/%u:%u", (unsigned)fw[i].host_port,
                   (unsigned)fw[i].port);
    cmd->argv[a++] = "--tcp-ports";
    cmd->argv[a++] = cmd->forwards[i];
  }
  if (nfw == 0) { /* the default, "auto", forwards what the sandbox binds */
    cmd->argv[a++] = "--tcp-ports";
    cmd->argv[a++] = "none";
  }
  (void)pid; /* joined by the namespaces' fds, see pasta_child */
  cmd->argv[a++] = "--userns";
  cmd->argv[a++] = "/proc/self/fd/3";
  cmd->argv[a++] = "--netns";
  cmd->argv[a++] = "/proc/self/fd/4";
  cmd->argv[a++] = "--no-netns-quit";
  cmd->argv[a] = NULL;
}

static int check_args(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct sbx_error *e) {
  if (pid <= 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "user-mode network: bad pid %d", (int)pid);
  if (nfw > ISOLATE_NET_FORWARDS_MAX)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EINVAL,
                         "user-mode network: %zu port forwards, at most %d",
                         nfw, ISOLATE_NET_FORWARDS_MAX);
  for (size_t i = 0; i < nfw; i++)
    if (fw[i].host_port == 0 || fw[i].port == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "user-mode network: port forward %u -> %u: "
                           "ports must not be 0",
                           (unsigned)fw[i].host_port, (unsigned)fw[i].port);
  return 0;
}

/* ---- the handle -----------------------------------------------------------
 */

/* Ends the watcher (and so pasta): hangs up the life pipe, waits, kills it
 * if it lingers, reaps it. Returns its exit status, or -1 when unknown. */
static int watcher_end(struct isolate_net *n) {
  sbx_closep(&n->life_fd);
  n->life_fd = -1;
  if (n->watcher <= 0)
    return -1;
  struct pollfd p = {.fd = n->watcher_fd, .events = POLLIN};
  uint64_t deadline = sbx_now_ms() + WATCHER_WAIT_MS;
  int r = 0;
  for (;;) {
    uint64_t now = sbx_now_ms();
    int left = now >= deadline ? 0 : (int)(deadline - now);
    r = poll(&p, 1, left);
    if (r >= 0 || errno != EINTR)
      break;
  }
  if (r <= 0)
    (void)kill(n->watcher, SIGKILL); /* pasta gets its PDEATHSIG */
  int status = 0;
  pid_t w;
  while ((w = waitpid(n->watcher, &status, 0)) < 0 && errno == EINTR)
    ;
  n->watcher = 0;
  if (w < 0 || !WIFEXITED(status)) /* ECHILD: someone else reaped it */
    return -1;
  return WEXITSTATUS(status);
}

static void net_free(struct isolate_net *n) {
  if (!n)
    return;
  (void)watcher_end(n);
  sbx_closep(&n->watcher_fd);
  sbx_closep(&n->ready_fd);
  sbx_closep(&n->err_fd);
  free(n);
}
SBX_DEFINE_CLEANUP(struct isolate_net *, net_free)

/* The watcher's start: block our signals across fork so that no handler
 * of ours runs in the child before it resets them. */
static pid_t fork_watcher(struct watch_plan *w) {
  sigset_t all, old;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t child = fork();
  int err = errno;
  if (child == 0)
    watcher_main(w);
  (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = err;
  return child;
}

int isolate_net_spawn(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e) {
  *out = NULL;
  int r = check_args(pid, fw, nfw, e);
  if (r < 0)
    return r;
  _cleanup_free_ struct pasta_cmd *cmd = calloc(1, sizeof(*cmd));
  _cleanup_(net_freep) struct isolate_net *n = calloc(1, sizeof(*n));
  if (!cmd || !n)
    return sys_fail(e, ENOMEM, "allocating");
  n->watcher_fd = n->life_fd = n->ready_fd = n->err_fd = -1;
  r = find_pasta(cmd->path, e);
  if (r < 0)
    return r;
  build_cmd(cmd, pid, fw, nfw);
  /* Not there: pasta says so below, in its words. */
  _cleanup_close_ int target_fd = sbx_fd_above_stdio(pidfd_open_(pid));
  if (target_fd < 0 && errno != ESRCH)
    return sys_fail(e, errno, "pidfd_open (needs Linux 5.3)");
  _cleanup_close_ int devnull =
      sbx_fd_above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
  _cleanup_close_ int ready_wr = -1, err_wr = -1, life_rd = -1;
  if (devnull < 0 || (r = pipe_above_stdio(&n->ready_fd, &ready_wr)) < 0 ||
      (r = pipe_above_stdio(&n->err_fd, &err_wr)) < 0 ||
      (r = pipe_above_stdio(&life_rd, &n->life_fd)) < 0 ||
      fcntl(n->err_fd, F_SETFL, O_NONBLOCK) < 0)
    return sys_fail(e, r < 0 ? -r : errno, "pipes");
  /* Opened now, by us: the sandbox's process may soon change its ids or
   * become non-dumpable, and pasta may not open them then. */
  _cleanup_close_ int userns = -1, netns = -1;
  const char *const ns[2] = {"user", "net"};
  int *nsfd[2] = {&userns, &netns};
  for (int i = 0; i < 2; i++) {
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *nsfd[i] = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 5);
    int err = errno;
    if (fd >= 0)
      close(fd);
    if (*nsfd[i] < 0)
      return sbx_error_set(e, SBX_UNAVAILABLE, err,
                           "pasta: Couldn't open %s namespace %s: %s", ns[i],
                           path, strerror(err));
  }
  struct watch_plan w = {.cmd = cmd,
                         .ns_fds = {userns, netns},
                         .devnull = devnull,
                         .ready_wr = ready_wr,
                         .err_wr = err_wr,
                         .life_rd = life_rd,
                         .target_fd = target_fd};
  n->watcher = fork_watcher(&w);
  if (n->watcher < 0) {
    n->watcher = 0;
    return sys_fail(e, errno, "fork");
  }
  n->watcher_fd = pidfd_open_(n->watcher);
  if (n->watcher_fd < 0)
    return sys_fail(e, errno, "pidfd_open");
  *out = TAKE_PTR(n);
  return 0;
}

/* OUT (PASTA_QUOTE_MAX bytes) := the first lines of pasta's stderr BUF
 * (LEN bytes), joined by "; ", without its complaints about a missing
 * system logger (it logs there too). */
static void quote_stderr(const char *buf, size_t len, char *out) {
  size_t o = 0, lines = 0;
  out[0] = '\0';
  for (const char *p = buf, *end = buf + len;
       p < end && lines < PASTA_QUOTE_LINES;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t k = (size_t)((nl ? nl : end) - p);
    bool syslog = k > 14 && !strncmp(p, "Failed to send", 14) &&
                  memmem(p, k, "syslog", 6);
    if (k > 0 && !syslog) {
      int w = snprintf(out + o, PASTA_QUOTE_MAX - o, "%s%.*s",
                       lines ? "; " : "", (int)k, p);
      if (w < 0 || (size_t)w >= PASTA_QUOTE_MAX - o)
        return; /* truncated: full */
      o += (size_t)w;
      lines++;
    }
    p += k + 1;
  }
}

/* Ends a start that did not get ready: stops the watcher, then quotes
 * pasta's stderr (complete now) in E. WHY: -ETIMEDOUT or -EIO. */
static int wait_failed(struct isolate_net *n, int why, struct sbx_error *e) {
  int status = watcher_end(n);
  n->failed = true;
  char buf[PASTA_STDERR_MAX];
  size_t len = 0;
  ssize_t k;
  while (len < sizeof(buf) &&
         ((k = read(n->err_fd, buf + len, sizeof(buf) - len)) > 0 ||
          (k < 0 && errno == EINTR)))
    len += k > 0 ? (size_t)k : 0;
  sbx_closep(&n->err_fd);
  sbx_closep(&n->ready_fd);
  n->err_fd = n->ready_fd = -1;
  char quote[PASTA_QUOTE_MAX];
  quote_stderr(buf, len, quote);
  if (why == -ETIMEDOUT)
    return sbx_error_set(
        e, SBX_TIMED_OUT, ETIMEDOUT, "pasta was not ready after %d ms%s%s",
        ISOLATE_NET_READY_TIMEOUT_MS, quote[0] ? ": " : "", quote);
  if (quote[0])
    return sbx_error_set(e, SBX_UNAVAILABLE, EIO, "pasta: %s", quote);
  if (status == 0) /* the watcher stopped it */
    return sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                         "pasta was stopped before it was ready: the "
                         "sandbox's process exited");
  return sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                       "pasta exited (status %d) before it was ready", status);
}

int isolate_net_wait(struct isolate_net *n, struct sbx_error *e) {
  if (!n || n->failed)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "user-mode network: no pasta to wait for");
  if (n->pasta > 0)
    return 0;
  char buf[24];
  size_t len = 0;
  uint64_t deadline = sbx_now_ms() + ISOLATE_NET_READY_TIMEOUT_MS;
  while (!memchr(buf, '\n', len)) {
    uint64_t now = sbx_now_ms();
    struct pollfd p = {.fd = n->ready_fd, .events = POLLIN};
    int r = poll(&p, 1, now >= deadline ? 0 : (int)(deadline - now));
    if (r < 0 && errno == EINTR)
      continue;
    if (r == 0)
      return wait_failed(n, -ETIMEDOUT, e);
    ssize_t k = r < 0 ? -1 : read(n->ready_fd, buf + len, sizeof(buf) - len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0 || (len += (size_t)k) == sizeof(buf)) /* EOF: pasta failed */
      return wait_failed(n, -EIO, e);
  }
  char *end = NULL;
  errno = 0;
  long pid = strtol(buf, &end, 10);
  if (errno || end == buf || *end != '\n' || pid <= 0 || pid > INT_MAX)
    return wait_failed(n, -EIO, e);
  n->pasta = (pid_t)pid;
  /* pasta ignores SIGPIPE: what it writes later goes nowhere. */
  sbx_closep(&n->ready_fd);
  sbx_closep(&n->err_fd);
  n->ready_fd = n->err_fd = -1;
  return 0;
}

int isolate_net_start(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e) {
  _cleanup_(net_freep) struct isolate_net *n = NULL;
  *out = NULL;
  int r = isolate_net_spawn(pid, fw, nfw, &n, e);
  if (r < 0)
    return r;
  r = isolate_net_wait(n, e);
  if (r < 0)
    return r;
  *out = TAKE_PTR(n);
  return 0;
}

pid_t isolate_net_pid(const struct isolate_net *n) {
  return n ? n->pasta : 0;
}

void isolate_net_stop(struct isolate_net *n) {
  net_free(n);
}
