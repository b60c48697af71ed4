#include "tests/support/flood.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"

/* One child: its pid, the pipe it reads commands from and the one it
 * answers on, and the descriptors it holds (allocated before the fork, so
 * that the child never allocates). */
struct flood_child {
  pid_t pid;
  int cmd, rep;
  unsigned n;
  int *fds;
};

struct flood {
  size_t nchildren;
  unsigned connected;
  struct flood_child *children;
};

int flood_sockaddr(const char *url, struct sockaddr_storage *sa,
                   socklen_t *len) {
  memset(sa, 0, sizeof(*sa));
  if (strncmp(url, "ipc://", 6) == 0) {
    struct sockaddr_un *un = (struct sockaddr_un *)sa;
    size_t pl = strlen(url + 6);
    if (pl >= sizeof(un->sun_path))
      return -EINVAL;
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path, url + 6, pl + 1);
    *len = sizeof(*un);
    return 0;
  }
  const char *hp = strstr(url, "://");
  const char *colon = hp ? strrchr(hp + 3, ':') : NULL;
  if (!colon || colon - hp - 3 >= 64)
    return -EINVAL;
  char host[64];
  (void)snprintf(host, sizeof(host), "%.*s", (int)(colon - hp - 3), hp + 3);
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  struct sockaddr_in *in = (struct sockaddr_in *)sa;
  in->sin_family = AF_INET;
  if (inet_pton(AF_INET, host, &in->sin_addr) != 1 || *end || port <= 0 ||
      port > 65535)
    return -EINVAL;
  in->sin_port = htons((uint16_t)port);
  *len = sizeof(*in);
  return 0;
}

/* Reads what FD holds: true while the peer has neither closed nor reset
 * it. */
static bool still_open(int fd) {
  char buf[512];
  for (;;) {
    ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k > 0)
      continue;
    if (k < 0 && errno == EINTR)
      continue;
    return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

/* Counts C's connections the server has not closed, closing the others. */
static unsigned count_open(struct flood_child *c) {
  unsigned open = 0;
  for (unsigned i = 0; i < c->n; i++) {
    if (c->fds[i] < 0)
      continue;
    if (still_open(c->fds[i])) {
      open++;
    } else {
      (void)close(c->fds[i]);
      c->fds[i] = -1;
    }
  }
  return open;
}

/* Closes every descriptor above stdio but A and B: the child must not keep
 * its siblings' pipes (they would never see end of file) nor the parent's
 * connections open. */
static void close_others(int a, int b) {
  unsigned lo = (unsigned)(a < b ? a : b), hi = (unsigned)(a < b ? b : a);
  if (lo > 3)
    (void)close_range(3, lo - 1, 0);
  if (hi > lo + 1)
    (void)close_range(lo + 1, hi - 1, 0);
  (void)close_range(hi + 1, ~0u, 0);
}

/* The child: connects C->n times, answers how many connected, then counts
 * the open ones on each 'c' it reads, until end of file. */
static void child_main(struct flood_child *c, const struct sockaddr *sa,
                       socklen_t salen, enum flood_mode mode) {
  static const char sp_req[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  close_others(c->cmd, c->rep);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < c->n + 64u) {
    rl.rlim_cur = c->n + 64u;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  unsigned ok = 0;
  for (unsigned i = 0; i < c->n; i++) {
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    c->fds[i] = -1;
    if (fd < 0)
      continue;
    /* A server that accepts no more must not hang the flood: connect
     * waits this long at most (for AF_UNIX and TCP alike). */
    struct timeval tv = {2, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, sa, salen) < 0 ||
        (mode == FLOOD_SP_HEADER &&
         sbx_write_all(fd, sp_req, sizeof(sp_req)) < 0)) {
      (void)close(fd);
      continue;
    }
    c->fds[ok++] = fd;
  }
  c->n = ok;
  (void)sbx_write_all(c->rep, &ok, sizeof(ok));
  char cmd;
  while (read(c->cmd, &cmd, 1) == 1 && cmd == 'c') {
    unsigned open = count_open(c);
    (void)sbx_write_all(c->rep, &open, sizeof(open));
  }
  _exit(0);
}

/* Reads one answer of C into *V. */
static int child_answer(struct flood_child *c, unsigned *v) {
  size_t got = 0;
  while (got < sizeof(*v)) {
    ssize_t k = read(c->rep, (char *)v + got, sizeof(*v) - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return k < 0 ? -errno : -EPIPE;
    got += (size_t)k;
  }
  return 0;
}

/* Forks the child C for N connections to SA. */
static int child_start(struct flood_child *c, unsigned n,
                       const struct sockaddr *sa, socklen_t salen,
                       enum flood_mode mode) {
  int cmd[2], rep[2];
  c->n = n;
  c->fds = calloc(n, sizeof(*c->fds));
  if (!c->fds)
    return -ENOMEM;
  if (pipe2(cmd, O_CLOEXEC) < 0)
    return -errno;
  if (pipe2(rep, O_CLOEXEC) < 0) {
    int err = errno;
    (void)close(cmd[0]);
    (void)close(cmd[1]);
    return -err;
  }
  c->pid = fork();
  if (c->pid == 0) {
    (void)close(cmd[1]);
    (void)close(rep[0]);
    c->cmd = cmd[0];
    c->rep = rep[1];
    child_main(c, sa, salen, mode);
  }
  int err = errno;
  (void)close(cmd[0]);
  (void)close(rep[1]);
  c->cmd = cmd[1];
  c->rep = rep[0];
  return c->pid < 0 ? -err : 0;
}

int flood_start(const char *url, unsigned n, enum flood_mode mode,
                struct flood **out) {
  struct sockaddr_storage sa;
  socklen_t salen = 0;
  if (flood_sockaddr(url, &sa, &salen) < 0) {
    (void)fprintf(stderr, "flood: cannot connect to \"%s\"\n", url);
    return -EINVAL;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
      rl.rlim_max < FLOOD_PER_PROC + 64) {
    (void)fprintf(stderr, "flood: the hard RLIMIT_NOFILE (%llu) is below %d\n",
                  (unsigned long long)rl.rlim_max, FLOOD_PER_PROC + 64);
    return -EMFILE;
  }
  struct flood *f = calloc(1, sizeof(*f));
  size_t nc = (n + FLOOD_PER_PROC - 1) / FLOOD_PER_PROC;
  if (!f || !(f->children = calloc(nc ? nc : 1, sizeof(*f->children)))) {
    free(f);
    return -ENOMEM;
  }
  int r = 0;
  for (unsigned left = n; r == 0 && left > 0; f->nchildren++) {
    unsigned k = left < FLOOD_PER_PROC ? left : FLOOD_PER_PROC;
    f->children[f->nchildren].cmd = f->children[f->nchildren].rep = -1;
    r = child_start(&f->children[f->nchildren], k, (struct sockaddr *)&sa,
                    salen, mode);
    left -= k;
  }
  for (size_t i = 0; r == 0 && i < f->nchildren; i++) {
    unsigned ok = 0;
    r = child_answer(&f->children[i], &ok);
    f->connected += ok;
  }
  if (r < 0) {
    (void)fprintf(stderr, "flood: starting the children: %s\n", strerror(-r));
    (void)flood_stop(f);
    return r;
  }
  *out = f;
  return 0;
}

unsigned flood_connected(const struct flood *f) {
  return f->connected;
}

int flood_open(struct flood *f, unsigned *open) {
  *open = 0;
  for (size_t i = 0; i < f->nchildren; i++)
    if (sbx_write_all(f->children[i].cmd, "c", 1) < 0)
      return -EPIPE;
  for (size_t i = 0; i < f->nchildren; i++) {
    unsigned k = 0;
    int r = child_answer(&f->children[i], &k);
    if (r < 0)
      return r;
    *open += k;
  }
  return 0;
}

struct flood *flood_stop(struct flood *f) {
  if (!f)
    return NULL;
  for (size_t i = 0; i < f->nchildren; i++) {
    struct flood_child *c = &f->children[i];
    if (c->cmd >= 0)
      (void)close(c->cmd); /* end of file: the child closes all and exits */
    if (c->rep >= 0)
      (void)close(c->rep);
    while (c->pid > 0 && waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
      ;
    free(c->fds);
  }
  free(f->children);
  free(f);
  return NULL;
}

long flood_rss_kib(pid_t pid) {
  char path[64];
  (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  _cleanup_free_ char *s = NULL;
  size_t n = 0;
  int r = sbx_read_file(path, 1u << 16, &s, &n);
  if (r < 0)
    return r;
  const char *v = strstr(s, "\nVmRSS:");
  return v ? strtol(v + 7, NULL, 10) : -ENOENT;
}

/* Sleeps MS milliseconds. */
static void pause_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  (void)nanosleep(&ts, NULL);
}

int flood_wait_open(struct flood *f, unsigned max, unsigned wait_ms,
                    unsigned *open) {
  uint64_t end = sbx_now_ms() + wait_ms;
  for (;;) {
    int r = flood_open(f, open);
    if (r < 0 || *open <= max || sbx_now_ms() >= end)
      return r;
    pause_ms(100);
  }
}

long flood_wait_rss(pid_t pid, long kib, unsigned wait_ms) {
  uint64_t end = sbx_now_ms() + wait_ms;
  for (;;) {
    long v = flood_rss_kib(pid);
    if (v < 0 || v < kib || sbx_now_ms() >= end)
      return v;
    pause_ms(100);
  }
}
