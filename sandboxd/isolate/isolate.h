/* Isolation: sandboxd builds its own sandbox before it serves, so that any
 * host that can run the binary (the local backend, a remote host, a VM)
 * can run an isolated one.
 *
 * With isolation on, the process sbx started becomes a small supervisor
 * on the host. It clones the daemon into new user, mount, PID, IPC, UTS
 * and network namespaces, maps the sandbox's root to an unprivileged host
 * uid range, puts it into a cgroup with the limits, starts the user-mode
 * network (net.h) and waits for it, then removes what it made. The clone
 * builds a root of read-only host binds (rootfs.c), pivots into it and
 * serves as the namespace's PID 1; its socket stays where sbx expects it
 * on the host, reached through a directory fd kept across the pivot. */
#ifndef SANDBOXD_ISOLATE_H
#define SANDBOXD_ISOLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/isolate/cgroup.h"
#include "sandboxd/isolate/net.h"
#include "shared/errors.h"

#define ISOLATE_MAX_BINDS 64
#define ISOLATE_MAX_FORWARDS 32
/* The host ids the sandbox's ids 0..65535 map to when sandboxd runs as
 * root and is given no range (docs/security.md). */
#define ISOLATE_DEFAULT_ID_BASE 200000000u
#define ISOLATE_DEFAULT_ID_COUNT 65536u

struct isolate_bind {
  const char *source; /* absolute host path (a directory) */
  const char *target; /* absolute path inside the sandbox */
  bool read_only;
};

struct isolate_options {
  bool enabled;
  const char *root_at;     /* where --root appears inside; "/workspace" */
  const char *hostname;    /* "sandbox" */
  const char *etc_dir;     /* host directory keeping /etc's changes, or NULL
                            * for changes kept in memory */
  const char *cgroup_name; /* "sandboxd-PID" */
  /* Host ids of the sandbox's 0..count-1; count 0: the default (the range
   * above as root, else the caller's own uid and gid alone). */
  uint32_t uid_base, uid_count, gid_base, gid_count;
  bool network; /* user-mode network (pasta); false: only lo */
  struct net_forward forwards[ISOLATE_MAX_FORWARDS];
  size_t nforwards;
  struct isolate_bind binds[ISOLATE_MAX_BINDS];
  size_t nbinds;
  struct isolate_limits limits;
  /* The workspace as a tmpfs of this size instead of the host directory
   * (0: the host directory). */
  uint64_t workspace_bytes;
  /* The first isolation flag given other than --isolate (for "needs
   * --isolate"), or NULL. */
  const char *first_flag;
};

/* What the daemon serves with: isolate_enter rewrites it for the inside. */
struct isolate_daemon {
  const char *listen;        /* in: ipc://PATH; out: PATH through dir_fd */
  const char *root;          /* in: the host directory; out: root_at */
  const char *const *grants; /* "PATH[:ro]": bound at the same path */
  size_t ngrants;
  const char *token_file; /* in; out: NULL, opened as token_fd */
  int token_fd;
  int ready_fd; /* the supervisor closes its copy */
  int dir_fd;   /* out: the socket's directory; close once listening */
  /* out: readable once the limits and the network are in place ('n';
   * EOF: they failed) */
  int gate_fd;
};

void isolate_options_init(struct isolate_options *io);

/* The command-line flags of isolation, for sandboxd's --help and getopt:
 * NAME without "--", whether it takes a value, its METAVAR and HELP. */
struct isolate_flag {
  const char *name;
  const char *metavar; /* NULL: no value */
  const char *help;
};
extern const struct isolate_flag isolate_flags[];
extern const size_t isolate_nflags;

/* Takes flag isolate_flags[INDEX] with ARG into IO; -EINVAL with a message
 * in E naming the flag. */
int isolate_flag_parse(size_t index, const char *arg,
                       struct isolate_options *io, struct sbx_error *e);

/* Builds the sandbox (see the top). Returns 0 in the sandbox's PID 1,
 * which goes on to serve with D rewritten; in the supervisor it returns 1
 * when the sandbox has ended, with *EXIT_CODE its exit code. -errno with E
 * filled when it cannot isolate (nothing was started). Call it before any
 * thread starts. */
int isolate_enter(const struct isolate_options *io, struct isolate_daemon *d,
                  int *exit_code, struct sbx_error *e);

/* One of the sandbox's own mounts: SRC, a path in the host's tree (the
 * supervisor's fd of it, /proc/self/fd/N, so that no directory on the
 * way must be open to the sandbox's ids), bound at DST inside. */
struct rootfs_mount {
  int fd;
  int tree; /* an idmapped copy of it from the supervisor, or -1 */
  char src[32];
  const char *dst;
  bool read_only;
};

/* What rootfs_build mounts besides the host's system directories: the
 * workspace first, then the grants and the bind mounts; the directory
 * keeping /etc's upper layer and its work directory (upper/, work/), or
 * -1 for a layer in memory. */
struct rootfs_plan {
  struct rootfs_mount mounts[1 + 2 * ISOLATE_MAX_BINDS];
  size_t nmounts;
  int etc_fd;
};

/* Mounts the sandbox's root and pivots into it; in the clone, with
 * capabilities in its new user namespace. IDS_MAPPED says whether the
 * usual system ids (tty, nobody) exist inside. */
int rootfs_build(const struct isolate_options *io,
                 const struct rootfs_plan *plan, bool ids_mapped,
                 struct sbx_error *e);

/* After the pivot: fences writes to the sandbox's own places with
 * Landlock (landlock.c), where the kernel has it. */
int isolate_landlock(const struct isolate_options *io,
                     const struct rootfs_plan *plan, int sock_dir_fd,
                     struct sbx_error *e);

#endif
