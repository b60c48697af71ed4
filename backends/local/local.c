/* The local backend: one sandboxd child process per sandbox session, on a
 * private ipc:// socket in a 0700 runtime directory, with a fresh random
 * token passed by an inherited pipe and a fresh temporary workspace. */
#include <errno.h>
#include <fcntl.h>
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

#include "cleanup.h"
#include "clock.h"
#include "log.h"
#include "rand.h"
#include "sandbox.h"

struct local {
  pid_t pid;
  char *workspace; /* owned: removed at close */
  char *rundir;    /* owned: holds the socket */
};

/* Waits up to TIMEOUT_MS for PID to exit; true when reaped. */
static bool wait_exit(pid_t pid, unsigned timeout_ms) {
  uint64_t end = sbx_now_ms() + timeout_ms;
  for (;;) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid || (w < 0 && errno == ECHILD))
      return true;
    if (sbx_now_ms() >= end)
      return false;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static int local_close(struct sandbox *s, struct sbx_error *e) {
  if (!s)
    return 0;
  struct local *l = s->priv;
  if (l && l->pid > 0) {
    struct sbx_error ignored = {0};
    if (s->client)
      (void)sbx_shutdown(s->client, 250, &ignored);
    /* Hang up now: sandboxd waits (a little) for its clients to go before
     * it closes, so that none misses its last reply. */
    s->client = sbx_client_free(s->client);
    if (!wait_exit(l->pid, 3000)) {
      (void)kill(l->pid, SIGKILL);
      (void)wait_exit(l->pid, 2000);
    }
    l->pid = 0;
  }
  int r = 0;
  if (l) {
    if (l->workspace && sandbox_rm_rf(l->workspace) < 0)
      r = sbx_error_set(e, SBX_INTERNAL, EIO, "cannot remove workspace \"%s\"",
                        l->workspace);
    if (l->rundir)
      (void)sandbox_rm_rf(l->rundir);
    free(l->workspace);
    free(l->rundir);
    free(l);
  }
  s->priv = NULL;
  sandbox_free(s);
  return r;
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

/* Starts sandboxd as a child and waits for its ready line. */
static int spawn_sandboxd(struct local *l, const char *sandboxd,
                          const char *url, const char *token,
                          const struct backend_options *o,
                          struct sbx_error *e) {
  int tokp[2] = {-1, -1}, readyp[2] = {-1, -1};
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

  const char *seccomp = o && o->seccomp ? o->seccomp : "default";
  const char *argv[] = {sandboxd,     "--listen",   url,     "--root",
                        l->workspace, "--token-fd", "3",     "--ready-fd",
                        "4",          "--seccomp",  seccomp, NULL};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    r = sbx_error_set(e, SBX_OK, errno, "cannot start sandboxd: %m");
    goto out;
  }
  if (pid == 0) {
    /* Async-signal-safe only from here to exec. The sandbox dies with us
     * and does not get our terminal's signals. */
    (void)setsid();
    (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(127);
    /* Move both above 4 first: either may already be fd 3 or 4. */
    int tok = fcntl(tokp[0], F_DUPFD, 10);
    int rdy = fcntl(readyp[1], F_DUPFD, 10);
    if (tok < 0 || rdy < 0 || dup2(tok, 3) < 0 || dup2(rdy, 4) < 0)
      _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      (void)dup2(devnull, 0);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  l->pid = pid;
  close(readyp[1]);
  readyp[1] = -1;

  unsigned tmo = o && o->ready_timeout_ms ? o->ready_timeout_ms : 10000;
  struct pollfd pfd = {.fd = readyp[0], .events = POLLIN};
  int pr;
  do
    pr = poll(&pfd, 1, (int)tmo);
  while (pr < 0 && errno == EINTR);
  char line[256];
  ssize_t got = pr > 0 ? read(readyp[0], line, sizeof(line) - 1) : -1;
  if (got <= 0 || strncmp(line, "ready ", 6) != 0)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                      pr == 0 ? "sandboxd \"%s\" did not become ready in %u ms"
                              : "sandboxd \"%s\" failed to start (its error "
                                "is above)",
                      sandboxd, tmo);
out:
  for (int i = 0; i < 2; i++) {
    if (tokp[i] >= 0)
      close(tokp[i]);
    if (readyp[i] >= 0)
      close(readyp[i]);
  }
  return r;
}

static int local_create(const struct backend_options *o, struct sandbox **out,
                        struct sbx_error *e) {
  _cleanup_free_ char *sandboxd = NULL;
  int r = sandbox_find_sandboxd(o, &sandboxd, e);
  if (r < 0)
    return r;
  const char *base = o && o->workspace_base ? o->workspace_base : NULL;
  if (!base)
    base = getenv("TMPDIR");
  if (!base || !*base)
    base = "/tmp";

  struct sandbox *s = calloc(1, sizeof(*s));
  struct local *l = calloc(1, sizeof(*l));
  if (!s || !l) {
    free(s);
    free(l);
    return -ENOMEM;
  }
  s->backend = &backend_local;
  s->priv = l;
  char token[SBX_TOKEN_HEX + 1];
  char url[600];
  if ((r = sbx_random_uuid(s->session_id)) < 0 ||
      (r = sbx_random_hex(token, SBX_TOKEN_BYTES)) < 0)
    goto fail;
  errno = 0;
  l->workspace = make_temp_dir(base, "sbx-workspace-");
  l->rundir = make_temp_dir("/tmp", "sbx-run-");
  if (!l->workspace || !l->rundir) {
    r = sbx_error_set(e, SBX_OK, errno ? errno : ENOMEM,
                      "cannot create a workspace under \"%s\": %m", base);
    goto fail;
  }
  s->root = strdup(l->workspace);
  if (!s->root) {
    r = -ENOMEM;
    goto fail;
  }
  (void)snprintf(url, sizeof(url), "ipc://%s/sandboxd.sock", l->rundir);
  r = spawn_sandboxd(l, sandboxd, url, token, o, e);
  if (r < 0)
    goto fail;
  struct sbx_client_config cc = {
      .url = url,
      .token = (const uint8_t *)token,
      .token_len = SBX_TOKEN_HEX,
      .client_name = "sbx",
  };
  r = sbx_client_new(&cc, &s->client, e);
  if (r < 0)
    goto fail;
  r = sbx_hello(s->client, NULL, e);
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

const struct backend backend_local = {
    .name = "local",
    .create = local_create,
    .close = local_close,
};
