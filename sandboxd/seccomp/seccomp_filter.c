/* The children's seccomp filter, built with libseccomp in the parent and
 * exported as classic BPF, so the forked child only makes two syscalls.
 *
 * Policy (DEFAULT): allow everything except what container runtimes refuse a
 * container by default, which fails with EPERM: kernel and module loading,
 * bpf, perf, keyrings, userfaultfd, mounts and the new mount API, swap,
 * reboot, namespaces (setns, unshare, clone with a CLONE_NEW* flag; clone3
 * fails with ENOSYS so libc falls back to clone, whose flags can be
 * checked), file handles, raw I/O ports, accounting, clocks, the kernel log,
 * vhangup, process_vm_readv/writev and kcmp.
 *
 * ptrace stays allowed: sandboxd needs Linux >= 5.6 (openat2), and since 4.8
 * the kernel re-checks seccomp after a tracer changes a syscall, so tracing
 * cannot get around the filter; gdb and strace keep working. What ptrace
 * must not reach is sandboxd itself (it holds the token): sandboxd is not
 * dumpable, and the child drops CAP_SYS_PTRACE from its bounding set here,
 * so even a root child cannot attach to it or read its memory.
 *
 * NO_NETWORK also refuses socket() and socketpair() for AF_INET, AF_INET6,
 * AF_PACKET (raw frames) and AF_VSOCK (the hypervisor), and io_uring (its
 * socket operation would not pass through the filter). AF_UNIX and netlink
 * stay.
 *
 * Architectures: the native one only. Any other ABI, including x32 on
 * x86_64 and i386 through int 0x80, kills the process (SIGSYS): its syscall
 * numbers would not match these rules. */
#include "sandboxd/seccomp/seccomp_filter.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/log.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* The largest program we accept from libseccomp (the kernel's limit). */
#define SECCOMP_MAX_INSNS 4096

struct seccomp_prog {
  struct sock_fprog fprog; /* points at insns */
  struct sock_filter insns[];
};

static const char *const denied[] = {
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "swapon",
    "swapoff",
    "reboot",
    "setns",
    "unshare",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "lookup_dcookie",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "vhangup",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_tree",
    "mount_setattr",
    "nfsservctl",
    "get_kernel_syms",
    "query_module",
    "create_module",
    "uselib",
    "stime",
};

static const char *const denied_no_network[] = {
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
};

static const int denied_families[] = {AF_INET, AF_INET6, AF_PACKET, AF_VSOCK};

static void ctx_releasep(scmp_filter_ctx *ctx) {
  if (*ctx)
    seccomp_release(*ctx);
}

/* Adds "NAME fails with ERR" (plus optional argument comparisons). A name
 * libseccomp does not know is skipped: it cannot be called either. */
static int deny(scmp_filter_ctx ctx, const char *name, int err, unsigned ncmp,
                const struct scmp_arg_cmp *cmp) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR)
    return 0;
  int r = seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(err), nr, ncmp, cmp);
  if (r < 0) {
    log_debug("seccomp: cannot add a rule for \"%s\": %s", name, strerror(-r));
    return r;
  }
  return 0;
}

static int add_rules(scmp_filter_ctx ctx, enum sandboxd_seccomp mode) {
  int r;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(denied); i++)
    if ((r = deny(ctx, denied[i], EPERM, 0, NULL)) < 0)
      return r;

  /* clone with any namespace flag; the flags are the first argument except
   * on s390, which swaps the first two. */
  static const unsigned long ns_flags[] = {
      CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
      CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET, CLONE_NEWTIME,
  };
#if defined(__s390__) || defined(__s390x__)
  const unsigned flags_arg = 1;
#else
  const unsigned flags_arg = 0;
#endif
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ns_flags); i++) {
    struct scmp_arg_cmp cmp = {flags_arg, SCMP_CMP_MASKED_EQ, ns_flags[i],
                               ns_flags[i]};
    if ((r = deny(ctx, "clone", EPERM, 1, &cmp)) < 0)
      return r;
  }
  if ((r = deny(ctx, "clone3", ENOSYS, 0, NULL)) < 0)
    return r;

  if (mode != SANDBOXD_SECCOMP_NO_NETWORK)
    return 0;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(denied_no_network); i++)
    if ((r = deny(ctx, denied_no_network[i], EPERM, 0, NULL)) < 0)
      return r;
  /* The family is an int: compare the low 32 bits only, so garbage in the
   * upper half of the register cannot slip past. */
  for (size_t i = 0; i < SBX_ARRAY_SIZE(denied_families); i++) {
    struct scmp_arg_cmp cmp = {0, SCMP_CMP_MASKED_EQ, 0xffffffffu,
                               (scmp_datum_t)denied_families[i]};
    if ((r = deny(ctx, "socket", EPERM, 1, &cmp)) < 0)
      return r;
    if ((r = deny(ctx, "socketpair", EPERM, 1, &cmp)) < 0)
      return r;
  }
  return 0;
}

/* Exports CTX's BPF program into a new struct seccomp_prog (libseccomp
 * 2.5 can only write it to an fd: a memfd here). */
static int export_prog(scmp_filter_ctx ctx, struct seccomp_prog **out) {
  _cleanup_close_ int fd = memfd_create("sbx-seccomp", MFD_CLOEXEC);
  if (fd < 0)
    return -errno;
  int r = seccomp_export_bpf(ctx, fd);
  if (r < 0)
    return r == -ECANCELED ? -EIO : r;
  off_t size = lseek(fd, 0, SEEK_END);
  if (size < 0)
    return -errno;
  if (size == 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
      size > (off_t)(SECCOMP_MAX_INSNS * sizeof(struct sock_filter)))
    return -EINVAL;
  size_t n = (size_t)size / sizeof(struct sock_filter);
  struct seccomp_prog *p = malloc(sizeof(*p) + (size_t)size);
  if (!p)
    return -ENOMEM;
  size_t got = 0;
  while (got < (size_t)size) {
    ssize_t k =
        pread(fd, (char *)p->insns + got, (size_t)size - got, (off_t)got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      int err = k < 0 ? errno : EIO;
      free(p);
      return -err;
    }
    got += (size_t)k;
  }
  p->fprog.len = (unsigned short)n;
  p->fprog.filter = p->insns;
  *out = p;
  return 0;
}

int seccomp_prog_build(enum sandboxd_seccomp mode, struct seccomp_prog **out) {
  *out = NULL;
  if (mode == SANDBOXD_SECCOMP_OFF)
    return 0;
  if (mode != SANDBOXD_SECCOMP_DEFAULT && mode != SANDBOXD_SECCOMP_NO_NETWORK)
    return -EINVAL;
  _cleanup_(ctx_releasep) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx)
    return -ENOMEM;
  /* Another ABI's syscall numbers mean other syscalls: kill. */
  int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (r < 0)
    return r;
  /* NO_NEW_PRIVS is set by seccomp_prog_load itself. */
  r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
  if (r < 0)
    return r;
  /* A binary tree of syscall numbers rather than a list: the kernel runs
   * the filter for every syscall number when it attaches it (to build its
   * cache of always-allowed ones) and for every uncached syscall after.
   * An optimization only: older libseccomp builds the list. */
  (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  r = add_rules(ctx, mode);
  if (r < 0)
    return r;
  return export_prog(ctx, out);
}

int seccomp_prog_load(const struct seccomp_prog *prog) {
  if (!prog)
    return 0;
  /* Not a failure when sandboxd lacks CAP_SETPCAP (it is not root): then
   * the child has no CAP_SYS_PTRACE to drop either. */
  if (prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) < 0 && errno != EPERM &&
      errno != EINVAL)
    return -errno;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return -errno;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog->fprog) < 0)
    return -errno;
  return 0;
}

void seccomp_prog_free(struct seccomp_prog *prog) {
  free(prog);
}
