/* Landlock as a second fence behind the mount namespace: once the root is
 * built, sandboxd (and so every command) may change files only beneath the
 * places the sandbox owns. Should a mount ever expose more of the host, it
 * would still be read-only to the sandbox. Reading and executing are not
 * fenced: the mounts decide what exists. */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandboxd/isolate/isolate.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

/* What changes a file system, by the ABI that introduced it. */
#define WRITES_V1                                                              \
  (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |             \
   LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |             \
   LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |                 \
   LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |               \
   LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM)

/* The sandbox's own writable places besides the workspace and the
 * read-write grants and binds. */
static const char *const own_dirs[] = {"/tmp",  "/var/tmp", "/run", "/root",
                                       "/home", "/etc",     "/dev", "/proc"};

static int allow_fd(int ruleset, int fd, uint64_t access) {
  struct landlock_path_beneath_attr pb = {.allowed_access = access,
                                          .parent_fd = fd};
  if (syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb,
              0) < 0)
    return -errno;
  return 0;
}

static int allow(int ruleset, const char *path, uint64_t access) {
  _cleanup_close_ int fd = open(path, O_PATH | O_CLOEXEC);
  return fd < 0 ? -errno : allow_fd(ruleset, fd, access);
}

int isolate_landlock(const struct isolate_options *io,
                     const struct rootfs_plan *plan, int sock_dir_fd,
                     struct sbx_error *e) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0,
                     LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) {
    log_info("isolation: no Landlock on this kernel (%s): the mounts are the "
             "only fence",
             strerror(errno));
    return 0;
  }
  uint64_t writes = WRITES_V1 | (abi >= 2 ? LANDLOCK_ACCESS_FS_REFER : 0) |
                    (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0);
  struct landlock_ruleset_attr ra = {.handled_access_fs = writes};
  _cleanup_close_ int rs =
      (int)syscall(SYS_landlock_create_ruleset, &ra, sizeof(ra), 0);
  if (rs < 0)
    return sbx_error_set(e, SBX_OK, errno, "isolation: Landlock: %m");
  /* The socket's host directory, reached only through its fd: the daemon
   * binds its socket there. */
  int r =
      allow_fd(rs, sock_dir_fd,
               LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_REMOVE_FILE);
  if (r == 0)
    r = allow(rs, io->root_at, writes);
  for (size_t i = 0; r == 0 && i < SBX_ARRAY_SIZE(own_dirs); i++)
    r = allow(rs, own_dirs[i], writes);
  for (size_t i = 1; r == 0 && i < plan->nmounts; i++)
    if (!plan->mounts[i].read_only)
      r = allow(rs, plan->mounts[i].dst, writes);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "isolation: Landlock rule: %s",
                         strerror(-r));
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      syscall(SYS_landlock_restrict_self, rs, 0) < 0)
    return sbx_error_set(e, SBX_OK, errno, "isolation: Landlock: %m");
  return 0;
}
