#include "shared/peer.h"

#include <errno.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/clock.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int sbx_peer_init(struct sbx_peer *p, pid_t pid, unsigned heartbeat_ms) {
  p->pid = pid;
  p->pidfd = -1;
  p->heartbeat_ms = heartbeat_ms ? heartbeat_ms : SBX_PEER_HEARTBEAT_MS;
  atomic_init(&p->pipes, 0);
  atomic_init(&p->ever, false);
  atomic_init(&p->down_ns, 0);
  if (pid <= 0)
    return 0;
  /* pidfds are close-on-exec always. */
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0 && errno != ESRCH)
    return -errno;
  p->pidfd = (int)fd; /* -1 for ESRCH: it has exited */
  return 0;
}

void sbx_peer_fini(struct sbx_peer *p) {
  if (p->pidfd >= 0)
    (void)close(p->pidfd);
  p->pidfd = -1;
}

void sbx_peer_up(struct sbx_peer *p) {
  atomic_fetch_add(&p->pipes, 1);
  atomic_store(&p->ever, true);
}

void sbx_peer_down(struct sbx_peer *p) {
  atomic_store(&p->down_ns, sbx_now_ns());
  atomic_fetch_sub(&p->pipes, 1);
}

int sbx_peer_check(struct sbx_peer *p, const char *url, struct sbx_error *e) {
  if (p->pid > 0) {
    struct pollfd pf = {.fd = p->pidfd, .events = POLLIN};
    if (p->pidfd < 0 || poll(&pf, 1, 0) > 0)
      return sbx_error_set(e, SBX_UNAVAILABLE, EPIPE,
                           "sandboxd at \"%s\" (pid %d) has exited", url,
                           (int)p->pid);
  }
  if (!atomic_load(&p->ever) || atomic_load(&p->pipes) > 0)
    return 0;
  uint64_t down = atomic_load(&p->down_ns);
  uint64_t now = sbx_now_ns();
  if (down && now > down && now - down >= (uint64_t)p->heartbeat_ms * 1000000u)
    return sbx_error_set(e, SBX_UNAVAILABLE, EPIPE,
                         "lost the connection to sandboxd at \"%s\" %llu ms "
                         "ago (heartbeat %u ms)",
                         url, (unsigned long long)((now - down) / 1000000u),
                         p->heartbeat_ms);
  return 0;
}
