/* The host runtime directory of a docker sandbox: made for it, handed to
 * the host uid its sandboxd runs as, the token passed through it, and
 * sandboxd's socket moved out of the workload's reach once it appears.
 *
 * The directory R is mounted read-only at DOCKER_RUN_DIR and R/listen
 * read-write at DOCKER_RUN_DIR/listen. The token goes through a FIFO,
 * R/listen/token: sandboxd (its --token-file) opens it for reading first
 * thing, the controller writes the token into it and closes it, so the
 * token is never on a disk, only in a pipe's buffer until sandboxd has
 * read it. sandboxd then binds R/listen/sandboxd.sock. When that socket
 * listens the controller renames it to R/sandboxd.sock and removes
 * R/listen: a unix socket stays bound to its inode, so sandboxd goes on
 * serving it; in the read-only mount no process of the container, root or
 * not, can unlink, rename, replace or chmod it (EROFS; a remount or an
 * unmount needs CAP_SYS_ADMIN, which the container lacks); and with
 * R/listen gone the kernel detaches the container's read-write mount of
 * it, so nothing in DOCKER_RUN_DIR is writable any more. No workload
 * command runs before the controller's Hello, and none outlives a stop to
 * see the next start.
 *
 * What this does not stop: the workload may connect to the socket itself;
 * sandboxd then wants the token, and the controller, which never sends it
 * before sandboxd proved it holds it (shared/client.h), also checks that
 * the container's entrypoint (its State.Pid) serves the socket. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backends/docker/docker_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"

/* RUNDIR/NAME into OUT. */
static int path_in(const char *rundir, const char *name, char *out, size_t size,
                   struct sbx_error *e) {
  int n = snprintf(out, size, "%s/%s", rundir, name);
  if (n < 0 || (size_t)n >= size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "runtime directory path is too long");
  return 0;
}

int rundir_socket(const char *rundir, char *out, size_t size,
                  struct sbx_error *e) {
  return path_in(rundir, "sandboxd.sock", out, size, e);
}

int rundir_make(struct docker *d, struct sbx_error *e) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base || strlen(base) > 60)
    base = "/tmp";
  char path[128];
  int n = snprintf(path, sizeof(path), "%s/sbx-docker-XXXXXX", base);
  if (n < 0 || (size_t)n >= sizeof(path) || !mkdtemp(path))
    return sbx_error_set(e, SBX_OK, errno ? errno : ENAMETOOLONG,
                         "cannot create a runtime directory: %m");
  d->rundir = strdup(path);
  if (!d->rundir) {
    (void)rmdir(path);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  char listen[PATH_MAX];
  int r = path_in(d->rundir, DOCKER_LISTEN_DIR, listen, sizeof(listen), e);
  if (r < 0)
    return r;
  if (mkdir(listen, 0700) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", listen);
  return 0;
}

/* Hands PATH (FD when it is open, else by name) to sandboxd's host ids. */
static int hand_over(struct docker *d, int fd, const char *path,
                     struct sbx_error *e) {
  if (d->sd_uid == geteuid() || d->sd_uid == 0)
    return 0; /* ours, or root's, who needs nothing handed */
  if ((fd >= 0 ? fchown(fd, d->sd_uid, d->sd_gid)
               : lchown(path, d->sd_uid, d->sd_gid)) == 0)
    return 0;
  return sbx_error_set(e, SBX_PERMISSION_DENIED, errno,
                       "cannot hand \"%s\" to uid %u, whom sandboxd runs as "
                       "on the host: %m",
                       path, (unsigned)d->sd_uid);
}

/* The FIFO is made afresh (never a file of the token) and handed, with
 * the directories, to the host ids sandboxd runs as, who read it. */
int rundir_prepare(struct docker *d, struct sbx_error *e) {
  char token[PATH_MAX], listen[PATH_MAX];
  int r =
      path_in(d->rundir, DOCKER_LISTEN_DIR "/token", token, sizeof(token), e);
  if (r == 0)
    r = path_in(d->rundir, DOCKER_LISTEN_DIR, listen, sizeof(listen), e);
  if (r < 0)
    return r;
  if (unlink(token) < 0 && errno != ENOENT)
    return sbx_error_set(e, SBX_OK, errno, "cannot remove \"%s\": %m", token);
  if (mkfifo(token, 0600) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", token);
  if ((r = hand_over(d, -1, token, e)) < 0 ||
      (r = hand_over(d, -1, listen, e)) < 0)
    return r;
  return hand_over(d, -1, d->rundir, e);
}

int rundir_reset(struct docker *d, struct sbx_error *e) {
  char sock[PATH_MAX], listen[PATH_MAX];
  int r = rundir_socket(d->rundir, sock, sizeof(sock), e);
  if (r == 0)
    r = path_in(d->rundir, DOCKER_LISTEN_DIR, listen, sizeof(listen), e);
  if (r < 0)
    return r;
  if (unlink(sock) < 0 && errno != ENOENT)
    return sbx_error_set(e, SBX_OK, errno, "cannot remove \"%s\": %m", sock);
  /* Whatever a start that did not finish left where the new socket is to
   * appear (after a finished one the subdirectory is gone). */
  r = sandbox_rm_rf(listen);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot empty \"%s\"", listen);
  if (mkdir(listen, 0700) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", listen);
  return rundir_prepare(d, e);
}

static void sleep_us(unsigned us) {
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  (void)nanosleep(&ts, NULL);
}

/* True when something listens on the unix socket at PATH. sandboxd's
 * listener binds, then sets the socket's mode by its path, then listens:
 * only once it listens may the socket be moved. */
static bool listening(const char *path) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sun.sun_path))
    return false;
  memcpy(sun.sun_path, path, strlen(path) + 1);
  _cleanup_close_ int fd =
      socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  return fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0;
}

/* Writes D's token into the FIFO at PATH once sandboxd has it open for
 * reading: 1 when written, 0 while nobody reads yet. The token is shorter
 * than PIPE_BUF, so one write puts all of it or nothing. */
static int feed_token(struct docker *d, const char *path, struct sbx_error *e) {
  _cleanup_close_ int fd =
      open(path, O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENXIO)
    return 0;
  size_t len = strlen(d->token);
  if (fd < 0 || write(fd, d->token, len) != (ssize_t)len)
    return sbx_error_set(e, SBX_OK, errno ? errno : EIO,
                         "cannot pass the token through \"%s\": %m", path);
  return 1;
}

/* Feeds the token into the FIFO at FIFO and waits for a listening socket
 * at PATH, with a bounded backoff, watching that the container still
 * runs. */
static int wait_socket(struct docker *d, const char *path, const char *fifo,
                       const char *image, unsigned timeout_ms,
                       struct sbx_error *e) {
  uint64_t start = sbx_now_ms();
  uint64_t next_check = start + 100;
  unsigned delay_us = 250;
  bool fed = false;
  for (;;) {
    if (!fed) {
      int r = feed_token(d, fifo, e);
      if (r < 0)
        return r;
      fed = r == 1;
    }
    struct stat st;
    if (fed && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && listening(path))
      return 0;
    uint64_t now = sbx_now_ms();
    if (now >= next_check) {
      int r = check_running(d, image, e);
      if (r < 0)
        return r;
      next_check = now + 250;
    }
    if (now - start >= timeout_ms) {
      char tail[LOG_TAIL_MAX + 64];
      container_log_tail(d->en, d->container, tail, sizeof(tail));
      return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                           "sandboxd in container %.12s did not become ready "
                           "in %u ms%s%s",
                           d->container, timeout_ms,
                           tail[0] ? "; its output: " : "", tail);
    }
    sleep_us(delay_us);
    if (delay_us < 10000)
      delay_us *= 2;
  }
}

/* The socket moves up, then the listen directory goes with what is left
 * in it: the empty FIFO. */
int rundir_wait_ready(struct docker *d, const char *image, unsigned timeout_ms,
                      char *sock, size_t size, struct sbx_error *e) {
  char bound[PATH_MAX], listen[PATH_MAX], fifo[PATH_MAX];
  int r = path_in(d->rundir, DOCKER_LISTEN_DIR "/sandboxd.sock", bound,
                  sizeof(bound), e);
  if (r == 0)
    r = path_in(d->rundir, DOCKER_LISTEN_DIR, listen, sizeof(listen), e);
  if (r == 0)
    r = path_in(d->rundir, DOCKER_LISTEN_DIR "/token", fifo, sizeof(fifo), e);
  if (r == 0)
    r = rundir_socket(d->rundir, sock, size, e);
  if (r < 0)
    return r;
  r = wait_socket(d, bound, fifo, image, timeout_ms, e);
  if (r < 0)
    return r;
  if (rename(bound, sock) < 0)
    return sbx_error_set(e, SBX_OK, errno,
                         "cannot move sandboxd's socket to \"%s\": %m", sock);
  r = sandbox_rm_rf(listen);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot remove \"%s\": %s", listen,
                         strerror(-r));
  return 0;
}
