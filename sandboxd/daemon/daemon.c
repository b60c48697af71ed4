#include "sandboxd/daemon/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/transfer.h"
#include "sandboxd/daemon/leftovers.h"
#include "sandboxd/proc/proc.h"
#include "sandboxd/proc/reaper.h"
#include "sandboxd/rpc/version.h"
#include "sandboxd/server/server.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define TOKEN_MAX 4096
/* TERM, then KILL this much later, for the processes left at exit (the
 * Shutdown RPC's default grace). */
#define DAEMON_KILL_GRACE_MS 250
/* How long the last replies wait for their clients to read them and hang
 * up before the socket closes (server_wait_clients_gone). */
#define DAEMON_LINGER_MS 200

void daemon_options_init(struct daemon_options *o) {
  memset(o, 0, sizeof(*o));
  o->token_fd = -1;
  o->ready_fd = -1;
  o->listen_dir_fd = -1;
  o->gate_fd = -1;
  sandboxd_limits_default(&o->limits);
  o->max_connections = SERVER_MAX_CONNECTIONS;
  o->max_unauthenticated = SERVER_MAX_UNAUTHENTICATED;
  o->handshake_timeout_ms = SERVER_HANDSHAKE_TIMEOUT_MS;
}

int daemon_read_token(const char *file, int fd, char **out, size_t *len,
                      struct sbx_error *e) {
  if ((file != NULL) == (fd >= 0))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "give exactly one of --token-file and --token-fd");
  _cleanup_close_ int own = -1;
  if (file) {
    own = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (own < 0)
      return sbx_error_set(e, SBX_OK, errno,
                           "cannot open token file \"%s\": %m", file);
    struct stat st;
    if (fstat(own, &st) == 0 && (st.st_mode & 0077))
      log_warn("token file \"%s\" is readable by others (mode %04o)", file,
               (unsigned)(st.st_mode & 07777));
    fd = own;
  } else {
    own = fd; /* closed when done: the fd was handed to us */
  }
  char *buf = malloc(TOKEN_MAX + 1);
  if (!buf)
    return -ENOMEM;
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fd, buf + n, TOKEN_MAX + 1 - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int err = errno;
      free(buf);
      return sbx_error_set(e, SBX_OK, err, "cannot read the token: %s",
                           strerror(err));
    }
    if (k == 0)
      break;
    n += (size_t)k;
    if (n > TOKEN_MAX) {
      explicit_bzero(buf, n);
      free(buf);
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, E2BIG,
                           "the token is longer than %d bytes", TOKEN_MAX);
    }
  }
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
                   buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (n < 16) {
    explicit_bzero(buf, TOKEN_MAX + 1);
    free(buf);
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the token must be at least 16 bytes");
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

static int open_dir_path(const char *path, int *fd, char **norm,
                         struct sbx_error *e) {
  char real[PATH_MAX];
  if (!realpath(path, real))
    return sbx_error_set(e, SBX_OK, errno, "\"%s\": %m", path);
  *fd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "\"%s\" is not a directory: %m",
                         path);
  *norm = strdup(real);
  if (!*norm) {
    close(*fd);
    *fd = -1;
    return -ENOMEM;
  }
  return 0;
}

int daemon_open_roots(struct sandboxd *d, const char *root,
                      const char *const *grants, size_t ngrants,
                      struct sbx_error *e) {
  d->root_fd = -1;
  if (!root)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "--root is required");
  int r = open_dir_path(root, &d->root_fd, &d->root, e);
  if (r < 0)
    return r;
  if (ngrants == 0)
    return 0;
  d->grants = calloc(ngrants, sizeof(*d->grants));
  d->grant_fds = calloc(ngrants, sizeof(*d->grant_fds));
  if (!d->grants || !d->grant_fds)
    return -ENOMEM;
  for (size_t i = 0; i < ngrants; i++) {
    _cleanup_free_ char *spec = strdup(grants[i]);
    if (!spec)
      return -ENOMEM;
    size_t n = strlen(spec);
    bool ro = n > 3 && strcmp(spec + n - 3, ":ro") == 0;
    if (ro)
      spec[n - 3] = '\0';
    if (spec[0] != '/' || strcmp(spec, "/") == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "--grant \"%s\" must be an absolute path other "
                           "than /",
                           grants[i]);
    d->grant_fds[i] = -1;
    r = open_dir_path(spec, &d->grant_fds[i], &d->grants[i].path, e);
    if (r < 0)
      return r;
    d->grants[i].read_only = ro;
    d->ngrants = i + 1;
  }
  return 0;
}

void daemon_close_roots(struct sandboxd *d) {
  if (d->root_fd >= 0)
    close(d->root_fd);
  d->root_fd = -1;
  free(d->root);
  d->root = NULL;
  for (size_t i = 0; i < d->ngrants; i++) {
    if (d->grant_fds[i] >= 0)
      close(d->grant_fds[i]);
    free(d->grants[i].path);
  }
  free(d->grants);
  free(d->grant_fds);
  d->grants = NULL;
  d->grant_fds = NULL;
  d->ngrants = 0;
}

static void announce_ready(int fd, const char *url) {
  if (fd < 0)
    return;
  char line[512];
  int n = snprintf(line, sizeof(line), "ready %s\n", url);
  if (n > 0)
    (void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line));
  close(fd);
}

/* Serves until a Shutdown request, a stop signal or the sandbox's expiry.
 * A Shutdown request wakes us at once (its client, sbx, waits for our
 * exit); a signal is seen within 200 ms. SIGHUP reads the TLS files again
 * when serving tls+tcp:// (a new CA file's revocation list takes effect
 * without a restart), else it stops sandboxd as before. */
static void serve(struct sandboxd *d, struct server *srv, const char *url) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  bool tls = strncmp(url, "tls+tcp://", 10) == 0;
  while (!server_shutdown_requested(srv)) {
    struct timespec now = {0, 0};
    int sig = sigtimedwait(&stop, NULL, &now);
    if (sig == SIGHUP && tls) {
      struct sbx_error he = {0};
      if (server_reload_tls(srv, &he) < 0)
        log_error("SIGHUP: the TLS files were not taken: %s", he.msg);
      else
        log_warn("SIGHUP: the TLS files were read again; connections "
                 "reopen under them");
      continue;
    }
    if (sig > 0) {
      log_info("signal %d: shutting down", sig);
      break;
    }
    char why[128];
    if (rpc_expiry_due(d, (int64_t)(sbx_wall_ms() / 1000), why, sizeof(why))) {
      /* Said at warn: the sandbox's log is where an operator looks. */
      log_warn("stopping: %s", why);
      break;
    }
    server_wait_shutdown(srv, 200);
  }
}

int daemon_run(const struct daemon_options *o, struct sbx_error *e) {
  if (!o->listen)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--listen is required");
  if (o->expires_at > 0 && (int64_t)(sbx_wall_ms() / 1000) >= o->expires_at)
    return sbx_error_set(e, SBX_CONFLICT, ETIME,
                         "the sandbox's time to live has ended (--expires-at "
                         "%lld): not starting",
                         (long long)o->expires_at);
  int r = server_check_url(o->listen, o->insecure, e);
  if (r < 0)
    return r;
  /* The token and the process memory must not be readable through core
   * dumps or ptrace by a sandboxed process of the same user. */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot make sandboxd non-dumpable");

  /* Before any thread starts: every thread inherits this mask, so SIGCHLD
   * reaches only the signalfd of the process table and the stop signals
   * only sigtimedwait below. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL, "cannot block signals");
  (void)signal(SIGPIPE, SIG_IGN);

  _cleanup_free_ char *token = NULL;
  size_t token_len = 0;
  r = daemon_read_token(o->token_file, o->token_fd, &token, &token_len, e);
  if (r < 0)
    return r;

  struct sandboxd d = {0};
  d.secret = (const uint8_t *)token;
  d.secret_len = token_len;
  /* Before any thread: the reaper is a fork of this process. */
  r = reaper_start(&d.reaper_fd);
  if (r < 0) {
    explicit_bzero(token, token_len);
    return sbx_error_set(e, SBX_OK, -r, "cannot start the reaper: %s",
                         strerror(-r));
  }
  d.limits = o->limits;
  d.seccomp = o->seccomp;
  d.isolated = o->isolated;
  d.gate_fd = o->gate_fd;
  d.gate_wait = o->gate_fd >= 0;
  if (pthread_mutex_init(&d.gate_mu, NULL) != 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "cannot set up a mutex");
  d.expires_at = o->expires_at;
  d.idle_timeout_s = o->idle_timeout_s;
  d.active_at_ms = sbx_now_ms();
  d.memory_limit = o->memory_limit;
  d.pids_limit = o->pids_limit;
  d.uid = geteuid();
  d.gid = getegid();
  d.is_root = d.uid == 0;
  if (o->seccomp == SANDBOXD_SECCOMP_OFF)
    log_warn("seccomp is OFF: sandboxed processes may call any syscall");
  r = daemon_open_roots(&d, o->root, o->grants, o->ngrants, e);
  if (r >= 0) {
    r = proc_table_new(&d, &d.procs);
    if (r < 0)
      r = sbx_error_set(e, SBX_OK, -r, "cannot start the process table: %s",
                        strerror(-r));
  }
  if (r >= 0) {
    r = archive_table_new(&d, &d.archives);
    if (r < 0)
      r = sbx_error_set(e, SBX_OK, -r, "cannot set up archive transfers");
  }
  struct server *srv = NULL;
  if (r >= 0) {
    struct server_config sc = {
        .url = o->listen,
        .token = (const uint8_t *)token,
        .token_len = token_len,
        .tls_cert = o->tls_cert,
        .tls_key = o->tls_key,
        .tls_ca = o->tls_ca,
        .insecure = o->insecure,
        .max_connections = o->max_connections,
        .max_unauthenticated = o->max_unauthenticated,
        .handshake_timeout_ms = o->handshake_timeout_ms,
    };
    r = server_new(&d, &sc, &srv, e);
  }
  if (r < 0) {
    explicit_bzero(token, token_len);
    archive_table_free(d.archives);
    proc_table_free(d.procs, 0);
    daemon_close_roots(&d);
    return r;
  }
  struct leftovers *sweep = leftovers_sweep_start(d.root_fd);
  d.server = srv;
  if (o->listen_dir_fd >= 0)
    close(o->listen_dir_fd); /* bound: the host's directory is not needed */
  log_info("sandboxd %s serving %s on %s", sandboxd_version(), d.root,
           o->listen);
  announce_ready(o->ready_fd, o->listen);

  serve(&d, srv, o->listen);
  /* Every process group dies and every parked read is answered while the
   * server still runs; only then may it free its calls. */
  proc_table_shutdown(d.procs, d.shutdown_grace_ms ? d.shutdown_grace_ms
                                                   : DAEMON_KILL_GRACE_MS);
  leftovers_sweep_stop(sweep);
  archive_table_stop(d.archives);
  if (!server_wait_clients_gone(srv, DAEMON_LINGER_MS))
    log_debug("closing with clients still connected");
  server_free(srv);
  archive_table_free(d.archives);
  d.archives = NULL;
  proc_table_free(d.procs, 0);
  d.procs = NULL;
  daemon_close_roots(&d);
  if (d.gate_fd >= 0)
    close(d.gate_fd);
  if (d.reaper_fd >= 0)
    close(d.reaper_fd); /* the reaper ends too */
  pthread_mutex_destroy(&d.gate_mu);
  explicit_bzero(token, token_len);
  return 0;
}
