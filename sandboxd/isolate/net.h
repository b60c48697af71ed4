/* The user-mode network of an isolated sandbox: pasta (Debian package passt)
 * joins the network namespace of the sandbox's first process, gives it an
 * interface configured like the host's default-route one (same address,
 * same gateway) and carries its TCP, UDP and ICMP out through sockets of
 * the host, plus the TCP forwards asked for (host 127.0.0.1:host_port to
 * the sandbox's port).
 *
 * What the sandbox reaches (pasta 0.0~git20230309, see net.c for why each
 * option is there): outbound IPv4 through the host's default route. It does
 * not reach a service of the host on 127.0.0.1 or ::1 (those are the
 * namespace's own loopback), through the gateway's address (--no-map-gw:
 * that is the real gateway), through the host's own address (the namespace
 * has it too) or, for TCP, through the host's other addresses (outbound
 * sockets are bound to the default-route interface). No IPv6 (-4): pasta
 * would connect to the host's link-local address for it. Known holes, all
 * pasta's: UDP to the host's other addresses (not the default-route
 * interface's) reaches the host's UDP services; and a sandbox process with
 * CAP_NET_ADMIN or CAP_NET_RAW in its namespace (root in its user namespace
 * has both) can route or write frames with the host's loopback or address
 * as destination, and pasta connects to them. The isolation code must drop
 * both capabilities from the sandbox's processes (pasta brings lo up, so
 * the first process need not keep them).
 *
 * Lifetime: pasta runs in the foreground under a watcher, a process forked
 * from the caller that waits for the first of: the sandbox's process exits,
 * isolate_net_stop, the caller dies (a pipe it holds hangs up); it then
 * stops pasta (TERM, KILL after 200 ms) and exits. pasta gets SIGKILL when
 * the watcher dies (PR_SET_PDEATHSIG). Needs Linux 5.3 (pidfd_open).
 *
 * A handle is used by one thread at a time; distinct handles are
 * independent. The functions block (fork, then waiting for pasta): for a
 * supervisor or a pool thread, never an nng callback. */
#ifndef SANDBOXD_ISOLATE_NET_H
#define SANDBOXD_ISOLATE_NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/errors.h"

/* One TCP forward: connections to the host's 127.0.0.1:host_port reach the
 * sandbox's port (on its loopback: a listener on 127.0.0.1 or 0.0.0.0). */
struct net_forward {
  uint16_t host_port; /* on the host's 127.0.0.1 */
  uint16_t port;      /* inside the sandbox */
};

/* At most this many forwards per sandbox. */
#define ISOLATE_NET_FORWARDS_MAX 64
/* isolate_net_wait gives up on a pasta not ready after this long. */
#define ISOLATE_NET_READY_TIMEOUT_MS 5000

struct isolate_net; /* opaque */

/* Connects the network namespace of PID, a process whose user namespace
 * the caller owns (it wrote its uid map; the caller is root or that user),
 * and forwards each of FW[0..NFW) (borrowed; NFW 0 for none). Returns 0
 * once the namespace's interface is configured and the forwards listen,
 * with *OUT new (free it with isolate_net_stop). Errors, with E filled:
 * -ENOENT when pasta is not installed; -EINVAL for a bad argument;
 * -ETIMEDOUT; -EIO when pasta failed (E quotes its first stderr lines).
 * $SBX_PASTA names the pasta to run; otherwise the first of /usr/bin,
 * /usr/sbin, /bin. pasta gets an empty environment, /dev/null as stdin and
 * no fd but its stdio. Typical cost: 15-20 ms, nearly all of it pasta's
 * own start-up (see net.c). */
int isolate_net_start(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e);

/* isolate_net_start in two steps, so the caller can do other set-up while
 * pasta starts: spawn returns once pasta is started (about 1 ms), wait
 * once it is ready. Errors as isolate_net_start's; after a failed wait the
 * handle only awaits isolate_net_stop. */
int isolate_net_spawn(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e);
int isolate_net_wait(struct isolate_net *n, struct sbx_error *e);

/* pasta's pid (a child of the watcher), for the caller's records; 0 before
 * isolate_net_wait succeeded. */
pid_t isolate_net_pid(const struct isolate_net *n);

/* Stops pasta (TERM, then KILL after a short wait) and the watcher, reaps
 * the watcher (which reaped pasta), frees N. At most ~1.2 s; NULL ok. */
void isolate_net_stop(struct isolate_net *n);

#endif
