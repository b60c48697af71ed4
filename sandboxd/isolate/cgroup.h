/* Per-sandbox resource limits with Linux cgroups.
 *
 * The host-side supervisor creates one cgroup per sandbox right after
 * clone()ing the sandbox's first process, moves that process in, and only
 * then lets it run; everything it forks inherits the cgroup.
 *
 * Where: beneath the cgroup this process is in (/proc/self/cgroup), in a
 * parent directory "sbx" that is created on first use and never removed:
 *   <mount>/<our cgroup>/sbx/<name>
 * in each hierarchy found in /proc/self/mountinfo: the cgroup v2 (unified)
 * one, and the v1 ones with the memory, pids, cpu or freezer controller. A
 * controller is taken from v2 when our v2 cgroup lists it in
 * cgroup.controllers, else from its v1 hierarchy. The process is moved into
 * every hierarchy, so on a hybrid system (v1 controllers and an empty v2)
 * the v2 cgroup still tracks it and offers cgroup.kill.
 *
 * cgroup v2's "no internal processes" rule: controllers are enabled in
 * <our cgroup>/cgroup.subtree_control and sbx/cgroup.subtree_control, which
 * the kernel refuses (EBUSY) while our own cgroup holds processes, unless
 * it is the root cgroup. sandboxd is not moved to make room: a v2 limit then
 * fails with a message saying so (run sandboxd in the root cgroup, or give
 * it a delegated cgroup it has left for a leaf of its own).
 *
 * Errors: 0 or a negative errno, with E (may be NULL) naming the file and
 * the errno. A limit whose controller is missing or not writable is an
 * error naming the controller and the isolate_limits field to set to 0; it
 * is never skipped silently. Without limits, hierarchies that cannot be
 * used are skipped (log_debug).
 *
 * Thread-safety: no global state. Distinct cgroups may be used from
 * different threads at once; one cgroup from one thread at a time. */
#ifndef SANDBOXD_ISOLATE_CGROUP_H
#define SANDBOXD_ISOLATE_CGROUP_H

#include <stdint.h>
#include <sys/types.h>

#include "shared/errors.h"

struct isolate_limits {
  uint64_t memory_bytes; /* 0: no limit; else at least 1 MiB, swap included */
  uint64_t pids;         /* 0: no limit; else at most 4194304 */
  double cpus; /* 0: no limit; 1.5 = one and a half CPUs; in (0, 1024],
                  with a floor of 0.01 (the kernel's 1 ms quota minimum) */
};

struct cgroup; /* opaque */

/* Creates the cgroup NAME (new, *OUT) for one sandbox with limits L (may
 * be NULL: no limits). NAME is one path component of [A-Za-z0-9._-], at
 * most 128 bytes, starting with a letter or digit (e.g. "sbx-<uuid>"); it
 * is copied. -EEXIST when NAME exists in any hierarchy; -EINVAL for a bad
 * name or limit; otherwise the errno of the failed step, with every
 * directory made so far removed again. */
int cgroup_create(const char *name, const struct isolate_limits *l,
                  struct cgroup **out, struct sbx_error *e);
/* As cgroup_create, with every path read or written under ROOT (borrowed;
 * NULL or "" is the real root): ROOT/proc/self/mountinfo,
 * ROOT/proc/self/cgroup and ROOT/<mount point>. For tests that fake a
 * machine's cgroup layout with plain directories. */
int cgroup_create_in(const char *root, const char *name,
                     const struct isolate_limits *l, struct cgroup **out,
                     struct sbx_error *e);

/* Moves PID (a whole process) into every hierarchy of CG. On failure PID
 * may sit in some of them; kill it. */
int cgroup_add(struct cgroup *cg, pid_t pid, struct sbx_error *e);

/* SIGKILLs every process in CG: cgroup.kill on v2 when present, otherwise
 * freezing where possible and killing each pid in cgroup.procs, repeated
 * until every hierarchy is empty, for at most about 2 s. Never signals the
 * calling process. 0 when empty; -ETIMEDOUT when processes remain; -ENODEV
 * when CG has no directory at all (nothing could be created: the caller
 * must kill its processes itself). Zombies are not listed: the parent
 * reaps them as usual. */
int cgroup_kill(struct cgroup *cg);

/* Kills what is left, removes CG's directories (the "sbx" parents stay)
 * and frees CG. Failures are logged at debug level. NULL ok; returns NULL. */
struct cgroup *cgroup_destroy(struct cgroup *cg);

/* How often the kernel OOM-killed a process of CG (v2 memory.events,
 * v1 memory.oom_control "oom_kill") and refused a fork for the pids
 * limit (pids.events "max"), for messages. A count whose file is missing
 * is 0. Either pointer may be NULL. 0, or a negative errno. */
int cgroup_events(struct cgroup *cg, uint64_t *oom_kills,
                  uint64_t *pids_refused);

/* CG's directory serving CONTROLLER ("memory", "pids", "cpu", "freezer"),
 * or with CONTROLLER NULL its cgroup v2 directory; NULL when there is none.
 * Borrowed, valid until cgroup_destroy. For messages and tests. */
const char *cgroup_path(const struct cgroup *cg, const char *controller);

#endif
