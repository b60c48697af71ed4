/* The daemon's context: configuration and the state every RPC handler
 * reaches through. One per process; created by main.c and passed down. */
#ifndef SANDBOXD_H
#define SANDBOXD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/path.h"

struct sandboxd_limits {
  uint64_t max_message_bytes; /* NNG_OPT_RECVMAXSZ and reply cap */
  uint32_t max_inflight;      /* nng contexts = requests served at once */
  uint32_t max_processes;     /* live process records (LRU-pruned) */
  uint64_t retention_head;    /* bytes kept from each stream's start */
  uint64_t retention_tail;    /* bytes kept from each stream's end */
  uint32_t max_list_entries;
  uint32_t max_read_bytes; /* largest data chunk in one reply */
  uint64_t archive_max_members;
  uint64_t archive_max_input_bytes;
  uint64_t archive_max_extracted_bytes;
  uint32_t max_archives;        /* open archive transfers */
  uint32_t idempotency_entries; /* cached replies of mutating requests */
};

/* The defaults: 64 MiB messages, 256 in flight, 64 processes, 64 KiB head and
 * 1 MiB tail retention, 10000 list entries, 4 MiB reads, archive limits of
 * 1000000 members, 16 GiB input and 64 GiB extracted: a checkout of a large
 * monorepo (500k files and their directories) fits twice over. The SDK's
 * 100000, 1 GiB and 4 GiB do not; a sandbox's disk quota still bounds what
 * an import writes. */
void sandboxd_limits_default(struct sandboxd_limits *l);

struct sandboxd;
/* A request that counts as activity began or ended (activity.c). Any
 * thread. */
void rpc_activity_begin(struct sandboxd *d);
void rpc_activity_end(struct sandboxd *d);
/* Milliseconds since the last activity; 0 while a request is in
 * progress. */
uint64_t rpc_idle_ms(struct sandboxd *d);
/* Whether D must stop now: its time to live has ended (WALL_S, Unix
 * seconds) or it has been idle for its idle timeout; WHY says which. */
bool rpc_expiry_due(struct sandboxd *d, int64_t wall_s, char *why, size_t n);

enum sandboxd_seccomp {
  SANDBOXD_SECCOMP_DEFAULT = 0, /* refuse what container runtimes refuse */
  SANDBOXD_SECCOMP_NO_NETWORK,  /* and AF_INET/AF_INET6 sockets */
  SANDBOXD_SECCOMP_OFF,
};

struct proc_table;
struct archive_table;
struct server;

struct sandboxd {
  char *root;  /* absolute, normalized */
  int root_fd; /* O_PATH|O_DIRECTORY of root */
  struct sbx_grant *grants;
  int *grant_fds; /* O_PATH|O_DIRECTORY, one per grant */
  size_t ngrants;
  struct sandboxd_limits limits;
  enum sandboxd_seccomp seccomp;
  bool isolated; /* commands get a reduced capability set (launch.c) */
  /* Isolated: GATE_FD is readable once the sandbox's cgroup and network
   * are in place, and commands wait for it while GATE_WAIT (exec_start.c).
   * Not isolated: -1 and false. */
  int gate_fd;
  _Atomic bool gate_wait;
  pthread_mutex_t gate_mu;
  /* The sandbox's secret (its token): Hello proves that sandboxd holds it
   * (rpc/auth.h). Borrowed from the daemon for its whole life; NULL in a
   * context that has none (a test harness). */
  const uint8_t *secret;
  size_t secret_len;
  /* Not PID 1 of a namespace: the reaper that kills the commands' groups
   * when sandboxd dies (proc/reaper.h); -1 otherwise. */
  int reaper_fd;
  uid_t uid; /* sandboxd's own identity */
  gid_t gid;
  bool is_root; /* may switch users, chown */

  /* When the sandbox stops by itself (--expires-at, --idle-timeout; 0:
   * never), and the activity that an idle timeout measures: requests
   * other than Hello and Stats, counted by the server (activity.c). */
  int64_t expires_at; /* Unix seconds */
  unsigned idle_timeout_s;
  _Atomic uint64_t active_at_ms; /* CLOCK_MONOTONIC of the last start or end */
  _Atomic unsigned active_calls; /* requests in progress */
  /* The limits isolation set (--memory-bytes, --pids-limit), for Stats
   * where sandboxd cannot read its cgroup; 0: none known. */
  uint64_t memory_limit;
  uint64_t pids_limit;

  /* Set by a Shutdown request: how long processes get between TERM and
   * KILL (0 until then). Written by one request, read after the server
   * stops. */
  unsigned shutdown_grace_ms;

  struct proc_table *procs;
  struct archive_table *archives;
  struct server *server;
};

#endif
