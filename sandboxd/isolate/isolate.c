/* The supervisor and the clone (see isolate.h). The supervisor is the
 * process sbx started: it stays on the host, single-threaded, owns the
 * cgroup and the network helper, forwards the stop signals and exits with
 * the sandbox's code. The clone is the sandbox's PID 1; it waits until the
 * supervisor has written its id maps, then builds its root. */
#include "sandboxd/isolate/isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/mount.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/log.h"

#define CLONE_FLAGS                                                            \
  (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS |  \
   CLONE_NEWNET)

void isolate_options_init(struct isolate_options *io) {
  memset(io, 0, sizeof(*io));
  io->root_at = "/workspace";
  io->hostname = "sandbox";
  io->network = true;
}

/* Writes TEXT to /proc/PID/FILE. */
static int proc_write(pid_t pid, const char *file, const char *text,
                      struct sbx_error *e) {
  char path[64];
  (void)snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
  _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
  size_t n = strlen(text);
  if (fd < 0 || write(fd, text, n) != (ssize_t)n)
    return sbx_error_set(e, SBX_OK, errno,
                         "isolation: cannot write \"%s\" (%s): %m", path, text);
  return 0;
}

/* Whether ids BASE..BASE+COUNT-1 exist in our user namespace (FILE is
 * /proc/self/uid_map or gid_map): as root on a host they do; as root in
 * a container's namespace perhaps not. */
static bool ids_exist(const char *file, uint32_t base, uint32_t count) {
  _cleanup_fclose_ FILE *f = fopen(file, "re");
  unsigned long in, out, n;
  while (f && fscanf(f, "%lu %lu %lu", &in, &out, &n) == 3)
    if (in <= base && (unsigned long)base + count <= in + n)
      return true;
  return false;
}

/* The id ranges: given; as root the default range where it exists; else
 * our own ids alone. */
static void id_ranges(const struct isolate_options *io, uint32_t ids[4]) {
  bool range = geteuid() == 0 &&
               ids_exist("/proc/self/uid_map", ISOLATE_DEFAULT_ID_BASE,
                         ISOLATE_DEFAULT_ID_COUNT) &&
               ids_exist("/proc/self/gid_map", ISOLATE_DEFAULT_ID_BASE,
                         ISOLATE_DEFAULT_ID_COUNT);
  ids[0] = io->uid_count ? io->uid_base
           : range       ? ISOLATE_DEFAULT_ID_BASE
                         : (uint32_t)geteuid();
  ids[1] = io->uid_count ? io->uid_count : range ? ISOLATE_DEFAULT_ID_COUNT : 1;
  ids[2] = io->gid_count ? io->gid_base
           : range       ? ISOLATE_DEFAULT_ID_BASE
                         : (uint32_t)getegid();
  ids[3] = io->gid_count ? io->gid_count : range ? ISOLATE_DEFAULT_ID_COUNT : 1;
}

/* Whether the maps are our own ids alone (no CAP_SETUID needed). */
static bool own_ids(const uint32_t ids[4]) {
  return ids[1] == 1 && ids[3] == 1 && ids[0] == geteuid() &&
         ids[2] == getegid();
}

static int write_maps(pid_t pid, const uint32_t ids[4], struct sbx_error *e) {
  char map[64];
  /* Without CAP_SETGID only our own group can be mapped, and only once
   * setgroups is denied (user_namespaces(7)). */
  if (own_ids(ids) && proc_write(pid, "setgroups", "deny", e) < 0)
    return -errno;
  (void)snprintf(map, sizeof(map), "0 %u %u\n", ids[0], ids[1]);
  int r = proc_write(pid, "uid_map", map, e);
  if (r < 0)
    return r;
  (void)snprintf(map, sizeof(map), "0 %u %u\n", ids[2], ids[3]);
  return proc_write(pid, "gid_map", map, e);
}

/* Makes host directory PATH the sandbox root's, so that it can write it. */
static int give(const char *path, const uint32_t ids[4], struct sbx_error *e) {
  if (own_ids(ids))
    return 0; /* our own uid is the sandbox's root */
  if (chown(path, ids[0], ids[2]) < 0)
    return sbx_error_set(e, SBX_OK, errno,
                         "isolation: cannot hand \"%s\" to the sandbox: %m",
                         path);
  return 0;
}

/* Prepares the host side: the directories the sandbox's root writes (the
 * workspace, the socket's directory, /etc's layers). */
static int prepare_host(const struct isolate_options *io,
                        const struct isolate_daemon *d, const char *sockdir,
                        const uint32_t ids[4], struct sbx_error *e) {
  int r = give(d->root, ids, e);
  if (r == 0)
    r = give(sockdir, ids, e);
  if (r == 0 && io->etc_dir)
    r = give(io->etc_dir, ids, e);
  if (r == 0 && io->etc_dir) {
    static const char *const sub[] = {"upper", "work"};
    for (size_t i = 0; r == 0 && i < 2; i++) {
      char p[PATH_MAX];
      (void)snprintf(p, sizeof(p), "%s/%s", io->etc_dir, sub[i]);
      if (mkdir(p, 0755) < 0 && errno != EEXIST)
        r = sbx_error_set(e, SBX_OK, errno,
                          "isolation: cannot create \"%s\": %m", p);
      else
        r = give(p, ids, e);
    }
  }
  return r;
}

/* The socket's directory from an ipc:// URL, into DIR. */
static int socket_dir(const char *url, char *dir, size_t n, const char **name,
                      struct sbx_error *e) {
  if (!url || strncmp(url, "ipc://", 6) != 0 || url[6] != '/')
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--isolate serves on ipc://PATH only (not \"%s\")",
                         url ? url : "");
  const char *path = url + 6;
  const char *slash = strrchr(path, '/');
  size_t len = (size_t)(slash - path);
  if (len == 0 || len >= n)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--isolate: bad socket path \"%s\"", path);
  memcpy(dir, path, len);
  dir[len] = '\0';
  *name = slash + 1;
  return 0;
}

/* Adds host path PATH, opened with our host ids, to PLAN as bound at DST. */
static int plan_mount(struct rootfs_plan *plan, const char *path,
                      const char *dst, bool ro, struct sbx_error *e) {
  if (plan->nmounts >= SBX_ARRAY_SIZE(plan->mounts))
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "too many mounts");
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "isolation: cannot open \"%s\": %m",
                         path);
  struct rootfs_mount *m = &plan->mounts[plan->nmounts++];
  m->fd = fd;
  (void)snprintf(m->src, sizeof(m->src), "/proc/self/fd/%d", fd);
  m->dst = dst;
  m->read_only = ro;
  return 0;
}

/* Whether a bind mount of IO puts something at PATH (a grant whose source
 * is elsewhere: the bind makes it). */
static bool bound_at(const struct isolate_options *io, const char *path) {
  for (size_t i = 0; i < io->nbinds; i++)
    if (strcmp(io->binds[i].target, path) == 0)
      return true;
  return false;
}

/* The sandbox's own mounts (see struct rootfs_plan). GRANT_PATHS holds
 * the grants' paths without their ":ro". */
static int make_plan(const struct isolate_options *io,
                     const struct isolate_daemon *d, struct rootfs_plan *plan,
                     char (*grant_paths)[PATH_MAX], struct sbx_error *e) {
  int r = plan_mount(plan, d->root, io->root_at, false, e);
  for (size_t i = 0; r == 0 && i < d->ngrants; i++) {
    size_t n = strlen(d->grants[i]);
    bool ro = n > 3 && strcmp(d->grants[i] + n - 3, ":ro") == 0;
    n -= ro ? 3 : 0;
    if (n >= PATH_MAX)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "--grant \"%s\" is too long", d->grants[i]);
    memcpy(grant_paths[i], d->grants[i], n);
    grant_paths[i][n] = '\0';
    if (!bound_at(io, grant_paths[i]))
      r = plan_mount(plan, grant_paths[i], grant_paths[i], ro, e);
  }
  for (size_t i = 0; r == 0 && i < io->nbinds; i++)
    r = plan_mount(plan, io->binds[i].source, io->binds[i].target,
                   io->binds[i].read_only, e);
  plan->etc_fd = -1;
  if (r == 0 && io->etc_dir &&
      (plan->etc_fd = open(io->etc_dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "isolation: cannot open \"%s\": %m",
                      io->etc_dir);
  return r;
}

/* Sends TYPE ('m' with FD, 'n' without, 'g' for go) to the clone. */
static int send_msg(int sock, char type, int fd) {
  struct iovec iov = {.iov_base = &type, .iov_len = 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u = {0};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    m.msg_control = u.buf;
    m.msg_controllen = sizeof(u.buf);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &m, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/* One message from the supervisor: its type, *FD the fd it carried. */
static char recv_tree(int sock, int *fd) {
  char type = 0;
  struct iovec iov = {.iov_base = &type, .iov_len = 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u = {0};
  struct msghdr m = {.msg_iov = &iov,
                     .msg_iovlen = 1,
                     .msg_control = u.buf,
                     .msg_controllen = sizeof(u.buf)};
  ssize_t n;
  do
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n != 1)
    return 0;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (c && c->cmsg_type == SCM_RIGHTS)
    memcpy(fd, CMSG_DATA(c), sizeof(int));
  return type;
}

/* An idmapped copy of the mount at FD: the ids on disk read through the
 * sandbox's map, so that the sandbox's root is the files' root. -1 where
 * the filesystem cannot (then the clone binds it plainly). */
static int idmapped_tree(int fd, bool ro, int userns) {
  int t = (int)syscall(SYS_open_tree, fd, "",
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
                           AT_EMPTY_PATH);
  if (t < 0)
    return -1;
  struct mount_attr a = {
      .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                  (ro ? MOUNT_ATTR_RDONLY : 0),
      .userns_fd = (uint64_t)userns,
  };
  if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a,
              sizeof(a)) < 0) {
    log_debug("isolation: no idmapped mount: %s", strerror(errno));
    close(t);
    return -1;
  }
  return t;
}

/* As root, makes idmapped copies of the grants and bind mounts (not the
 * workspace, which is the sandbox's own) and sends them to the clone in
 * its plan's order: host files owned by root are then the sandbox root's
 * to write, as in a container. Nothing to send otherwise. */
static int send_trees(const struct isolate_options *io,
                      const struct isolate_daemon *d, pid_t child, int sock,
                      struct sbx_error *e) {
  if (geteuid() != 0)
    return 0;
  static struct rootfs_plan plan;
  static char grant_paths[ISOLATE_MAX_BINDS][PATH_MAX];
  int r = make_plan(io, d, &plan, grant_paths, e);
  if (r < 0 || plan.nmounts <= 1)
    return r;
  char ns[64];
  (void)snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)child);
  _cleanup_close_ int userns = open(ns, O_RDONLY | O_CLOEXEC);
  if (userns < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", ns);
  for (size_t i = 0; r == 0 && i < plan.nmounts; i++) {
    int t = i == 0 ? -1
                   : idmapped_tree(plan.mounts[i].fd, plan.mounts[i].read_only,
                                   userns);
    r = send_msg(sock, t >= 0 ? 'm' : 'n', t);
    if (t >= 0)
      close(t);
    close(plan.mounts[i].fd);
  }
  if (plan.etc_fd >= 0)
    close(plan.etc_fd);
  return r < 0 ? sbx_error_set(e, SBX_OK, -r, "isolation: cannot pass a mount")
               : 0;
}

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) {
  stop_signal = sig;
}
static void on_stop_noop(int sig) {
  (void)sig;
}

/* Waits for the sandbox's PID 1, passing our stop signals on; its exit
 * code (128+N for a signal). */
static int supervise(pid_t child) {
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  for (int s = SIGHUP; s <= SIGTERM; s++)
    if (s == SIGHUP || s == SIGINT || s == SIGTERM)
      (void)sigaction(s, &sa, NULL);
  for (;;) {
    int st;
    pid_t w = waitpid(child, &st, 0);
    if (w == child)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (w < 0 && errno != EINTR)
      return 1;
    if (stop_signal) {
      (void)kill(child, stop_signal);
      stop_signal = 0;
    }
  }
}

/* In the clone: waits for the go from the supervisor, then becomes the
 * sandbox. Returns 0 to serve; exits on failure. */
static int become_sandbox(const struct isolate_options *io,
                          struct isolate_daemon *d, int go, bool ids_mapped,
                          bool may_setgroups, const char *sock_name) {
  struct sbx_error e = {0};
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  static int trees[1 + 2 * ISOLATE_MAX_BINDS];
  size_t ntrees = 0;
  /* The death signal was armed before the first read: a supervisor that
   * died before its go closed the socket (getppid() is 0 across the PID
   * namespace, so it cannot tell). */
  for (;;) {
    int fd = -1;
    char c = recv_tree(go, &fd);
    if (c == 'g')
      break;
    if ((c != 'm' && c != 'n') || ntrees >= SBX_ARRAY_SIZE(trees))
      _exit(1); /* the supervisor failed and said why */
    trees[ntrees++] = fd;
  }
  /* The same socket says when the limits and the network are in place:
   * the daemon's commands wait on it (struct isolate_daemon's gate_fd). */
  d->gate_fd = go;
  /* As PID 1, a signal without a handler is dropped: give the stop
   * signals one (the daemon blocks and waits for them). */
  struct sigaction sa = {.sa_handler = on_stop_noop};
  sigemptyset(&sa.sa_mask);
  (void)sigaction(SIGTERM, &sa, NULL);
  (void)sigaction(SIGINT, &sa, NULL);
  (void)sigaction(SIGHUP, &sa, NULL);
  /* A token file is the host's: opened with our host ids. */
  if (d->token_file) {
    d->token_fd = open(d->token_file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (d->token_fd < 0) {
      log_error("cannot open token file \"%s\": %m", d->token_file);
      _exit(1);
    }
    d->token_file = NULL;
  }
  /* The host paths of the sandbox's mounts, opened while our ids are
   * still the host's (the sandbox's may not pass their parents) and in
   * our own mount namespace (a mount of another cannot be bound). Static:
   * the daemon serves with pointers into it. */
  static struct rootfs_plan plan_store;
  static char grant_paths[ISOLATE_MAX_BINDS][PATH_MAX];
  struct rootfs_plan *plan = &plan_store;
  if (make_plan(io, d, plan, grant_paths, &e) < 0) {
    log_error("%s", e.msg);
    _exit(1);
  }
  for (size_t i = 0; i < plan->nmounts; i++)
    plan->mounts[i].tree = i < ntrees ? trees[i] : -1;
  /* Become the sandbox's root (the host's first id of the range): until
   * now our host ids show inside as the overflow id. Supplementary groups
   * are dropped where the map allows setgroups (as root). */
  if (setresgid(0, 0, 0) < 0 || (may_setgroups && setgroups(0, NULL) < 0) ||
      setresuid(0, 0, 0) < 0) {
    log_error("isolation: cannot become the sandbox's root: %m");
    _exit(1);
  }
  /* The change of ids cleared the death signal: armed again, then a
   * supervisor that died in between is seen by its end of the socket. */
  struct pollfd hup = {.fd = go, .events = POLLRDHUP};
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || poll(&hup, 1, 0) != 0) {
    log_error("isolation: the supervisor has gone");
    _exit(1);
  }
  int r = unshare(CLONE_NEWCGROUP) < 0
              ? sbx_error_set(&e, SBX_OK, errno,
                              "isolation: cannot unshare the cgroup "
                              "namespace: %m")
              : 0;
  if (r == 0)
    r = rootfs_build(io, plan, ids_mapped, &e);
  if (r == 0)
    r = isolate_landlock(io, plan, d->dir_fd, &e);
  if (r < 0) {
    log_error("%s", e.msg[0] ? e.msg : strerror(-r));
    _exit(1);
  }
  /* Pivoted: nothing of the host's tree stays open but the socket's
   * directory, closed once the daemon listens. */
  for (size_t i = 0; i < plan->nmounts; i++)
    close(plan->mounts[i].fd);
  if (plan->etc_fd >= 0)
    close(plan->etc_fd);
  static char url[64];
  (void)snprintf(url, sizeof(url), "ipc:///proc/self/fd/%d/%s", d->dir_fd,
                 sock_name);
  d->listen = url;
  d->root = io->root_at;
  return 0;
}

/* The supervisor's part once the clone exists: maps, cgroup, network,
 * go. On failure the clone is killed. */
static int start_sandbox(const struct isolate_options *io,
                         const struct isolate_daemon *d, pid_t child,
                         const uint32_t ids[4], int go, struct cgroup **cg,
                         struct isolate_net **net, struct sbx_error *e) {
  int r = write_maps(child, ids, e);
  if (r == 0)
    r = cgroup_create(io->cgroup_name, &io->limits, cg, e);
  if (r == 0 && io->network)
    r = isolate_net_spawn(child, io->forwards, io->nforwards, net, e);
  if (r == 0)
    r = send_trees(io, d, child, go, e);
  if (r == 0 && send_msg(go, 'g', -1) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "isolation: cannot start the sandbox");
  return r;
}

int isolate_enter(const struct isolate_options *io, struct isolate_daemon *d,
                  int *exit_code, struct sbx_error *e) {
  char sockdir[PATH_MAX];
  const char *sock_name = NULL;
  int r = socket_dir(d->listen, sockdir, sizeof(sockdir), &sock_name, e);
  if (r < 0)
    return r;
  uint32_t ids[4];
  id_ranges(io, ids);
  struct isolate_options own = *io;
  char cgname[32];
  if (!own.cgroup_name) {
    (void)snprintf(cgname, sizeof(cgname), "sandboxd-%d", (int)getpid());
    own.cgroup_name = cgname;
  }
  io = &own;
  if ((r = prepare_host(io, d, sockdir, ids, e)) < 0)
    return r;
  if (d->ngrants > ISOLATE_MAX_BINDS)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "too many grants");
  d->dir_fd = open(sockdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d->dir_fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", sockdir);
  int go[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, go) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create a socket pair: %m");
  /* Decided here: in the clone our ids are the overflow ids until the
   * maps are written. */
  bool solo = own_ids(ids);
  bool mapped = !solo && ids[1] > 65534 && ids[3] > 65534;
  pid_t child = (pid_t)syscall(SYS_clone, CLONE_FLAGS | SIGCHLD, 0, 0, 0, 0);
  if (child < 0) {
    int err = errno;
    close(go[0]);
    close(go[1]);
    return sbx_error_set(e, SBX_UNAVAILABLE, err,
                         "cannot create the sandbox's namespaces: %s (user "
                         "namespaces disabled? see "
                         "/proc/sys/user/max_user_namespaces; or run with "
                         "isolation \"none\")",
                         strerror(err));
  }
  if (child == 0) {
    close(go[1]);
    return become_sandbox(io, d, go[0], mapped, !solo, sock_name);
  }
  close(go[0]);
  /* The clone has its own copies of the daemon's fds; ours would keep
   * sbx's ready pipe open after the clone has died. */
  if (d->token_fd >= 0)
    close(d->token_fd);
  if (d->ready_fd >= 0)
    close(d->ready_fd);
  close(d->dir_fd);
  struct cgroup *cg = NULL;
  struct isolate_net *net = NULL;
  r = start_sandbox(io, d, child, ids, go[1], &cg, &net, e);
  /* The sandbox builds its root and serves while pasta starts and while
   * it is moved into its cgroup (the first move into a v1 hierarchy waits
   * for an RCU grace period, tens of ms): the two take most of a create's
   * time. Its commands wait for the word that both are done. */
  if (r == 0)
    r = cgroup_add(cg, child, e);
  if (r == 0 && net)
    r = isolate_net_wait(net, e);
  if (r == 0 && send_msg(go[1], 'n', -1) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "isolation: cannot reach the sandbox");
  if (r < 0 && waitpid(child, exit_code, WNOHANG) == child) {
    /* The sandbox ended first (closed while starting): not a failure. */
    *exit_code = WIFEXITED(*exit_code) ? WEXITSTATUS(*exit_code) : 1;
    isolate_net_stop(net);
    cgroup_destroy(cg);
    return 1;
  }
  close(go[1]);
  if (r < 0) {
    (void)kill(child, SIGKILL);
    (void)waitpid(child, NULL, 0);
    *exit_code = 1;
  } else {
    *exit_code = supervise(child);
  }
  isolate_net_stop(net);
  cgroup_destroy(cg);
  if (r < 0)
    return r;
  return 1;
}
