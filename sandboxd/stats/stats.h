/* The Stats RPC: what the sandbox uses (CPU time, memory, processes,
 * workspace disk) and when it stops by itself. From the sandbox's own
 * cgroup where sandboxd can tell it is its own: it sits at the root of a
 * cgroup v2 namespace (a container's, for one), or the cgroup v1
 * hierarchies are mounted with its cgroup as their root (a container on a
 * v1 host); else summed over sandboxd and its descendants in /proc (an
 * isolated local sandbox, which has no /sys, or none at all). Runs on the
 * worker pool. */
#ifndef SANDBOXD_STATS_H
#define SANDBOXD_STATS_H

#include "sandboxd/rpc/rpc.h"

/* Entries walked at most for disk_bytes. */
#define STATS_DISK_ENTRIES_MAX 1000000u

int rpc_stats(struct rpc_call *c);

/* The numbers Stats reports, read under ROOT (borrowed; "" is the real
 * root): ROOT/proc/self/cgroup, ROOT/proc/self/mountinfo,
 * ROOT/sys/fs/cgroup and ROOT/proc. SELF is
 * sandboxd's pid as ROOT/proc shows it. For tests that fake the files. */
int stats_read(const char *root, int self, Sbx__V1__StatsReply *out);

#endif
