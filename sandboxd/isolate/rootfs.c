/* The sandbox's root filesystem, built in the clone's own mount namespace
 * as bubblewrap does: a tmpfs becomes the root with the host's tree at
 * /oldroot; the new root is a second tmpfs at /newroot that gets read-only
 * binds of the host's system directories, an overlay of the host's /etc
 * with the sandbox's own user database, the workspace, the grants and
 * bind mounts, a private /tmp, a new /proc and a minimal /dev; then the
 * host's tree is detached and /newroot becomes / (read-only itself). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandboxd/isolate/isolate.h"
#include "shared/cleanup.h"

#define SETUP "/tmp"
#define OLD "/oldroot"
#define NEW "/newroot"

/* The host's system directories, bound read-only (or the same symlink,
 * on a merged-/usr host); missing ones are skipped. */
static const char *const system_dirs[] = {"usr",   "bin",   "sbin",  "lib",
                                          "lib32", "lib64", "libx32"};

/* The devices a workload needs, bound from the host's /dev. */
static const char *const devices[] = {"null",   "zero",    "full",
                                      "random", "urandom", "tty"};

static int fail(struct sbx_error *e, const char *what, const char *path) {
  return sbx_error_set(e, SBX_INTERNAL, errno, "isolation: %s \"%s\": %m", what,
                       path);
}

static int do_mount(const char *src, const char *dst, const char *type,
                    unsigned long flags, const char *data,
                    struct sbx_error *e) {
  if (mount(src, dst, type, flags, data) < 0)
    return fail(e, type ? type : "mount", dst);
  return 0;
}

/* Creates PATH and its parents (0755); existing ones are fine. */
static int mkdirs(char *path, struct sbx_error *e) {
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char c = *p;
    *p = '\0';
    int r = mkdir(path, 0755);
    int err = errno;
    *p = c;
    if (r < 0 && err != EEXIST) {
      errno = err;
      return fail(e, "cannot create", path);
    }
    if (c == '\0')
      return 0;
  }
}

/* Binds host path SRC (beneath /oldroot) at DST beneath /newroot, creating
 * the mount point of SRC's kind; read-only when RO. TREE, when not -1, is
 * the detached mount to attach there instead. */
static int bind_at(const char *src, const char *dst, bool ro, int tree,
                   struct sbx_error *e) {
  char from[PATH_MAX], to[PATH_MAX];
  if (snprintf(from, sizeof(from), OLD "%s", src) >= (int)sizeof(from) ||
      snprintf(to, sizeof(to), NEW "%s", dst) >= (int)sizeof(to))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "isolation: path \"%s\" is too long", src);
  struct stat st;
  if (stat(from, &st) < 0)
    return fail(e, "cannot bind at", dst);
  if (S_ISDIR(st.st_mode)) {
    int r = mkdirs(to, e);
    if (r < 0)
      return r;
  } else {
    char *slash = strrchr(to, '/');
    *slash = '\0';
    int r = mkdirs(to, e);
    *slash = '/';
    if (r < 0)
      return r;
    int fd = open(to, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
      return fail(e, "cannot create", to);
    if (fd >= 0)
      close(fd);
  }
  if (tree >= 0) {
    /* Already read-only when it should be: the supervisor made it so. */
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, to,
                MOVE_MOUNT_F_EMPTY_PATH) < 0)
      return fail(e, "cannot mount at", dst);
    return 0;
  }
  int r = do_mount(from, to, NULL, MS_BIND | MS_REC, NULL, e);
  if (r == 0 && ro)
    r = do_mount(NULL, to, NULL,
                 MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL,
                 e);
  return r;
}

static int system_binds(struct sbx_error *e) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(system_dirs); i++) {
    char host[64], link[PATH_MAX], in[64];
    (void)snprintf(host, sizeof(host), OLD "/%s", system_dirs[i]);
    (void)snprintf(in, sizeof(in), NEW "/%s", system_dirs[i]);
    struct stat st;
    if (lstat(host, &st) < 0)
      continue;
    if (S_ISLNK(st.st_mode)) {
      ssize_t n = readlink(host, link, sizeof(link) - 1);
      if (n < 0)
        return fail(e, "cannot read", host);
      link[n] = '\0';
      if (symlink(link, in) < 0)
        return fail(e, "cannot create", in);
      continue;
    }
    char src[64];
    (void)snprintf(src, sizeof(src), "/%s", system_dirs[i]);
    int r = bind_at(src, src, true, -1, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Writes TEXT to PATH; with KEEP, a file that exists is left alone. */
static int write_text(const char *path, const char *text, mode_t mode,
                      bool keep, struct sbx_error *e) {
  _cleanup_close_ int fd = open(path,
                                O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW |
                                    (keep ? O_EXCL : O_TRUNC),
                                mode);
  if (fd < 0 && keep && errno == EEXIST)
    return 0;
  if (fd < 0)
    return fail(e, "cannot write", path);
  size_t n = strlen(text);
  if (write(fd, text, n) != (ssize_t)n || fchmod(fd, mode) < 0)
    return fail(e, "cannot write", path);
  return 0;
}

/* The sandbox's own user database and names, written into /etc's upper
 * layer UPPER before it is mounted (the host's files are not ours to
 * copy up): none of the host's users, hosts or shadow entries show. The
 * user database of a kept layer stays as the sandbox left it. */
static int etc_files(const struct isolate_options *io, const char *upper,
                     bool ids_mapped, struct sbx_error *e) {
  char hosts[512];
  (void)snprintf(hosts, sizeof(hosts),
                 "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost "
                 "ip6-localhost ip6-loopback\n",
                 io->hostname);
  char hostname[128];
  (void)snprintf(hostname, sizeof(hostname), "%s\n", io->hostname);
  const char *nobody = ids_mapped ? "nobody:x:65534:65534:nobody:/nonexistent:"
                                    "/usr/sbin/nologin\n"
                                  : "";
  char passwd[256];
  (void)snprintf(passwd, sizeof(passwd), "root:x:0:0:root:/root:/bin/sh\n%s",
                 nobody);
  const struct {
    const char *name, *text;
    mode_t mode;
    bool keep;
  } files[] = {
      {"passwd", passwd, 0644, true},
      {"group",
       ids_mapped ? "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n" : "root:x:0:\n",
       0644, true},
      {"shadow", "root:*:19000:0:99999:7:::\n", 0600, true},
      {"gshadow", "root:*::\n", 0600, true},
      {"subuid", "", 0644, true},
      {"subgid", "", 0644, true},
      /* The host's lock and backups are not ours to open: shadow's tools
       * open these for writing. */
      {".pwd.lock", "", 0600, true},
      {"passwd-", "", 0644, true},
      {"group-", "", 0644, true},
      {"shadow-", "", 0600, true},
      {"gshadow-", "", 0600, true},
      {"subuid-", "", 0644, true},
      {"subgid-", "", 0644, true},
      {"hostname", hostname, 0644, false},
      {"hosts", hosts, 0644, false},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(files); i++) {
    char path[PATH_MAX + 16];
    (void)snprintf(path, sizeof(path), "%s/%s", upper, files[i].name);
    int r = write_text(path, files[i].text, files[i].mode, files[i].keep, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* /etc: the host's, read through an overlay whose upper layer is the
 * sandbox's (the plan's kept one, or a tmpfs). */
static int etc_overlay(const struct isolate_options *io,
                       const struct rootfs_plan *plan, bool ids_mapped,
                       struct sbx_error *e) {
  char upper[PATH_MAX], work[PATH_MAX], data[3 * PATH_MAX];
  if (plan->etc_fd >= 0) {
    /* Relative to the kept directory, whose parents may be closed to the
     * sandbox's ids; overlay takes no fd paths. Back to / after. */
    if (fchdir(plan->etc_fd) < 0)
      return fail(e, "cannot enter", "the /etc layer's directory");
    (void)snprintf(upper, sizeof(upper), "upper");
    (void)snprintf(work, sizeof(work), "work");
  } else {
    int r = do_mount("tmpfs", "/etc-layer", "tmpfs", MS_NOSUID | MS_NODEV,
                     "mode=0755,size=16m", e);
    if (r < 0)
      return r;
    (void)snprintf(upper, sizeof(upper), "/etc-layer/upper");
    (void)snprintf(work, sizeof(work), "/etc-layer/work");
    if ((mkdir(upper, 0755) < 0 && errno != EEXIST) ||
        (mkdir(work, 0700) < 0 && errno != EEXIST))
      return fail(e, "cannot create", upper);
  }
  if (mkdir(NEW "/etc", 0755) < 0)
    return fail(e, "cannot create", NEW "/etc");
  int r = etc_files(io, upper, ids_mapped, e);
  if (r < 0)
    return r;
  int n = snprintf(data, sizeof(data),
                   "lowerdir=" OLD "/etc,upperdir=%s,workdir=%s,userxattr",
                   upper, work);
  if (n < 0 || (size_t)n >= sizeof(data))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "isolation: the /etc directory's path is too long");
  r = do_mount("overlay", NEW "/etc", "overlay", MS_NOSUID | MS_NODEV, data, e);
  if (r == 0 && chdir("/") < 0)
    r = fail(e, "cannot enter", "/");
  return r;
}

/* A fresh tmpfs at DST beneath /newroot. */
static int tmpfs_at(const char *dst, const char *data, struct sbx_error *e) {
  char to[PATH_MAX];
  (void)snprintf(to, sizeof(to), NEW "%s", dst);
  int r = mkdirs(to, e);
  return r < 0 ? r
               : do_mount("tmpfs", to, "tmpfs", MS_NOSUID | MS_NODEV, data, e);
}

static int dev_tree(bool ids_mapped, struct sbx_error *e) {
  int r = tmpfs_at("/dev", "mode=0755,size=64k", e);
  for (size_t i = 0; r == 0 && i < SBX_ARRAY_SIZE(devices); i++) {
    char p[32];
    (void)snprintf(p, sizeof(p), "/dev/%s", devices[i]);
    r = bind_at(p, p, false, -1, e);
  }
  if (r == 0)
    r = tmpfs_at("/dev/shm", "mode=1777", e);
  if (r == 0 && mkdir(NEW "/dev/pts", 0755) < 0)
    r = fail(e, "cannot create", NEW "/dev/pts");
  if (r == 0)
    r = do_mount("devpts", NEW "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                 ids_mapped ? "newinstance,ptmxmode=0666,mode=0620,gid=5"
                            : "newinstance,ptmxmode=0666,mode=0620",
                 e);
  static const char *const links[][2] = {
      {"pts/ptmx", NEW "/dev/ptmx"},
      {"/proc/self/fd", NEW "/dev/fd"},
      {"/proc/self/fd/0", NEW "/dev/stdin"},
      {"/proc/self/fd/1", NEW "/dev/stdout"},
      {"/proc/self/fd/2", NEW "/dev/stderr"},
  };
  for (size_t i = 0; r == 0 && i < SBX_ARRAY_SIZE(links); i++)
    if (symlink(links[i][0], links[i][1]) < 0)
      r = fail(e, "cannot create", links[i][1]);
  return r;
}

/* The workspace, the grants and the bind mounts, in the plan's order; a
 * workspace in memory is a tmpfs of its size. */
static int sandbox_binds(const struct isolate_options *io,
                         const struct rootfs_plan *plan, struct sbx_error *e) {
  int r = 0;
  size_t i = 0;
  if (io->workspace_bytes) {
    char data[64];
    (void)snprintf(data, sizeof(data), "mode=0755,size=%llu",
                   (unsigned long long)io->workspace_bytes);
    r = tmpfs_at(io->root_at, data, e);
    i = 1;
  }
  for (; r == 0 && i < plan->nmounts; i++)
    r = bind_at(plan->mounts[i].src, plan->mounts[i].dst,
                plan->mounts[i].read_only, plan->mounts[i].tree, e);
  return r;
}

/* Brings the new network namespace's loopback up. */
static int loopback_up(struct sbx_error *e) {
  _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr = {0};
  (void)snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
    return fail(e, "cannot find", "lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
    return fail(e, "cannot bring up", "lo");
  return 0;
}

/* Detaches the host's tree and makes /newroot the root, read-only. */
static int switch_root(struct sbx_error *e) {
  if (umount2(OLD, MNT_DETACH) < 0)
    return fail(e, "cannot detach", OLD);
  if (chdir(NEW) < 0)
    return fail(e, "cannot enter", NEW);
  if (syscall(SYS_pivot_root, ".", ".") < 0)
    return fail(e, "cannot pivot into", NEW);
  if (umount2(".", MNT_DETACH) < 0)
    return fail(e, "cannot detach", "the setup root");
  if (chdir("/") < 0)
    return fail(e, "cannot enter", "/");
  return do_mount(NULL, "/", NULL,
                  MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL,
                  e);
}

int rootfs_build(const struct isolate_options *io,
                 const struct rootfs_plan *plan, bool ids_mapped,
                 struct sbx_error *e) {
  /* Nothing of what follows propagates back to the host. */
  int r = do_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, e);
  if (r == 0)
    r = do_mount("tmpfs", SETUP, "tmpfs", MS_NOSUID | MS_NODEV,
                 "mode=0755,size=1m", e);
  if (r == 0 && ((mkdir(SETUP OLD, 0755) < 0 || mkdir(SETUP NEW, 0755) < 0 ||
                  mkdir(SETUP "/etc-layer", 0755) < 0)))
    r = fail(e, "cannot create", SETUP OLD);
  if (r == 0 && syscall(SYS_pivot_root, SETUP, SETUP OLD) < 0)
    r = fail(e, "cannot pivot into", SETUP);
  if (r == 0 && chdir("/") < 0)
    r = fail(e, "cannot enter", "/");
  if (r == 0)
    r = do_mount("tmpfs", NEW, "tmpfs", MS_NOSUID | MS_NODEV,
                 "mode=0755,size=1m", e);
  if (r == 0)
    r = system_binds(e);
  if (r == 0)
    r = etc_overlay(io, plan, ids_mapped, e);
  if (r == 0)
    r = dev_tree(ids_mapped, e);
  if (r == 0)
    r = tmpfs_at("/tmp", "mode=1777", e);
  if (r == 0)
    r = tmpfs_at("/var/tmp", "mode=1777", e);
  if (r == 0)
    r = tmpfs_at("/run", "mode=0755", e);
  if (r == 0)
    r = tmpfs_at("/root", "mode=0700", e);
  if (r == 0)
    r = tmpfs_at("/home", "mode=0755", e);
  if (r == 0)
    r = sandbox_binds(io, plan, e);
  if (r == 0) {
    r = mkdirs((char[]){NEW "/proc"}, e);
    if (r == 0)
      r = do_mount("proc", NEW "/proc", "proc",
                   MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, e);
  }
  if (r == 0 && sethostname(io->hostname, strlen(io->hostname)) < 0)
    r = fail(e, "cannot set the host name", io->hostname);
  if (r == 0)
    r = loopback_up(e);
  return r == 0 ? switch_root(e) : r;
}
