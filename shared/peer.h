/* Whether a sandboxd can still answer: what a client waiting for a reply
 * checks, so that a dead sandboxd fails the call at once instead of after
 * every attempt's timeout.
 *
 * Two signs, each optional: the exit of sandboxd's process on this host
 * (a pidfd, for sandboxes whose process sbx can see), and a connection
 * that was up and has been down for longer than a heartbeat (for any
 * other, such as a container or a remote host; a host that dies without
 * closing its connections is noticed by TCP keepalive or the attempt's
 * timeout). Pipe events and checks may come from any thread. */
#ifndef SBX_PEER_H
#define SBX_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/errors.h"

#define SBX_PEER_HEARTBEAT_MS 10000u       /* the default */
#define SBX_PEER_HEARTBEAT_MAX_MS 3600000u /* an hour */

struct sbx_peer {
  pid_t pid; /* 0: not watched */
  int pidfd; /* -1: none */
  unsigned heartbeat_ms;
  atomic_int pipes;         /* connections up now */
  atomic_bool ever;         /* a connection was up once */
  _Atomic uint64_t down_ns; /* when the last one went down (sbx_now_ns) */
};

/* Watches PID (0: none; an already gone PID counts as exited) and
 * connections with HEARTBEAT_MS (0: SBX_PEER_HEARTBEAT_MS). */
int sbx_peer_init(struct sbx_peer *p, pid_t pid, unsigned heartbeat_ms);
void sbx_peer_fini(struct sbx_peer *p);
/* A connection came up or went down. */
void sbx_peer_up(struct sbx_peer *p);
void sbx_peer_down(struct sbx_peer *p);
/* 0 while the peer may still answer; -EPIPE with E saying why once its
 * process exited or its connection has been down past the heartbeat. URL
 * names it. */
int sbx_peer_check(struct sbx_peer *p, const char *url, struct sbx_error *e);

#endif
