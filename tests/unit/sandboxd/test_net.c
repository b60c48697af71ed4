/* isolate/net: pasta for a sandbox's network namespace.
 *
 * Everything that runs pasta runs in a fake host: a child process in a user
 * and network namespace of its own with two tap interfaces (TEST-NET
 * addresses, a default route to a gateway that does not exist), so nothing
 * a probe sends leaves namespaces the test made. The fake host forks the
 * "sandbox" (a child that unshares a user and network namespace, as the
 * isolation code's first process does), writes its maps, starts pasta for
 * it and drives it over a pipe. It reports "FAIL ...", "INFO ..." or
 * "SKIP ..." lines through shared memory; the test asserts on them. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandboxd/isolate/net.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/port.h"

#define HOST_IF "sbxeth0"     /* the fake host's default-route interface */
#define HOST_ADDR "192.0.2.2" /* ... its address (pasta gives it the */
#define HOST_GW "192.0.2.1"   /*     sandbox too) and gateway         */
#define OTHER_IF "sbxeth1"    /* another interface of the fake host */
#define OTHER_ADDR "198.51.100.1"
#define SANDBOX_PORT 8080 /* the forward's port inside */
#define REPORT_MAX 8192
#define PROBE_WAIT_MS 700

/* ---- the fake host's report -----------------------------------------------
 */

struct report {
  size_t len;
  char text[REPORT_MAX];
};

static struct report *report; /* shared with the fake host */

static void say(const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const char *kind, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  int n = snprintf(report->text + report->len, REPORT_MAX - report->len,
                   "%s %s\n", kind, line);
  if (n > 0 && (size_t)n < REPORT_MAX - report->len)
    report->len += (size_t)n;
}
#define FAIL(...) say("FAIL", __VA_ARGS__)
#define INFO(...) say("INFO", __VA_ARGS__)

/* ---- the fake host's network, by ioctl ------------------------------------
 */

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t n = write(fd, text, strlen(text));
  int err = errno;
  (void)close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -(n < 0 ? err : EIO);
}

/* Maps uid/gid 0 of PID's (new) user namespace to UID/GID outside. */
static int write_maps(pid_t pid, uid_t uid, gid_t gid) {
  char path[64], map[64];
  (void)snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
  int r = write_file(path, "deny");
  (void)snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
  (void)snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
  if (r == 0)
    r = write_file(path, map);
  (void)snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
  (void)snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
  return r == 0 ? write_file(path, map) : r;
}

static struct sockaddr sin_of(const char *addr) {
  struct sockaddr_in a = {.sin_family = AF_INET};
  (void)inet_pton(AF_INET, addr, &a.sin_addr);
  struct sockaddr s;
  memcpy(&s, &a, sizeof(a));
  return s;
}

/* Interface NAME up, with ADDR/MASK unless ADDR is NULL. */
static int if_config(int s, const char *name, const char *addr,
                     const char *mask) {
  struct ifreq ifr = {0};
  (void)snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  if (addr) {
    ifr.ifr_addr = sin_of(addr);
    if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
      return -errno;
    ifr.ifr_netmask = sin_of(mask);
    if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
      return -errno;
  }
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
    return -errno;
  ifr.ifr_flags |= IFF_UP;
  return ioctl(s, SIOCSIFFLAGS, &ifr) < 0 ? -errno : 0;
}

/* A tap interface NAME, held open (its carrier) by the returned fd. */
static int tap_open(const char *name) {
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI};
  (void)snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    int err = errno;
    (void)close(fd);
    return -err;
  }
  return fd;
}

/* Becomes the fake host: new user and network namespaces, lo, two taps
 * with addresses, a default route. Returns NULL or why it cannot. */
static const char *fake_host_setup(void) {
  static char why[160];
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0) {
    (void)snprintf(why, sizeof(why), "user namespaces: %s", strerror(errno));
    return why;
  }
  int r = write_maps(getpid(), uid, gid);
  if (r < 0) {
    (void)snprintf(why, sizeof(why), "uid map: %s", strerror(-r));
    return why;
  }
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0 || (r = if_config(s, "lo", NULL, NULL)) < 0 ||
      (r = tap_open(HOST_IF)) < 0 || (r = tap_open(OTHER_IF)) < 0 ||
      (r = if_config(s, HOST_IF, HOST_ADDR, "255.255.255.0")) < 0 ||
      (r = if_config(s, OTHER_IF, OTHER_ADDR, "255.255.255.0")) < 0) {
    (void)snprintf(why, sizeof(why), "tap interfaces (/dev/net/tun): %s",
                   strerror(s < 0 ? errno : -r));
    return why;
  }
  struct rtentry rt = {.rt_flags = RTF_UP | RTF_GATEWAY, .rt_dev = HOST_IF};
  rt.rt_dst = sin_of("0.0.0.0");
  rt.rt_genmask = sin_of("0.0.0.0");
  rt.rt_gateway = sin_of(HOST_GW);
  if (ioctl(s, SIOCADDRT, &rt) < 0) {
    (void)snprintf(why, sizeof(why), "default route: %s", strerror(errno));
    return why;
  }
  (void)close(s); /* the taps' fds stay open: they are the carrier */
  return NULL;
}

static bool pasta_installed(void) {
  const char *env = getenv("SBX_PASTA");
  return access(env && *env ? env : "/usr/bin/pasta", X_OK) == 0 ||
         access("/usr/sbin/pasta", X_OK) == 0 ||
         access("/bin/pasta", X_OK) == 0;
}

/* Runs FN as the fake host and turns its report into assertions. */
static void in_fake_host(void (*fn)(void)) {
  if (!pasta_installed())
    cr_skip_test("pasta (Debian package passt) is not installed");
  report = mmap(NULL, sizeof(*report), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(report, MAP_FAILED);
  pid_t host = fork();
  cr_assert_geq(host, 0);
  if (host == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *why = fake_host_setup();
    if (why)
      say("SKIP", "%s", why);
    else
      fn();
    _exit(0);
  }
  int status;
  cr_assert_eq(waitpid(host, &status, 0), host);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the fake host died (status %#x); its report:\n%.*s", status,
            (int)report->len, report->text);
  for (char *line = report->text, *nl; (nl = strchr(line, '\n'));
       line = nl + 1) {
    *nl = '\0';
    if (!strncmp(line, "SKIP ", 5))
      cr_skip_test("%s", line + 5);
    else if (!strncmp(line, "INFO ", 5))
      cr_log_info("%s", line + 5);
    else
      cr_expect(false, "%s", line + 5);
  }
}

/* ---- the sandbox: commands over a pipe ------------------------------------
 */

struct sandbox {
  pid_t pid;
  int cmd;   /* we write one-byte commands */
  int reply; /* it answers one line each */
};

struct probe {
  const char *addr;
  uint16_t port;
};

/* Connects to each of P[0..N) at once; reports which got through. */
static void sandbox_probe(int out, const struct probe *p, size_t n) {
  int fd[16];
  char buf[1024];
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (strchr(p[i].addr, ':')) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(p[i].port);
      (void)inet_pton(AF_INET6, p[i].addr, &a->sin6_addr);
      sl = sizeof(*a);
    } else {
      struct sockaddr_in *a = (struct sockaddr_in *)&ss;
      a->sin_family = AF_INET;
      a->sin_port = htons(p[i].port);
      (void)inet_pton(AF_INET, p[i].addr, &a->sin_addr);
      sl = sizeof(*a);
    }
    fd[i] = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd[i] >= 0)
      (void)connect(fd[i], (struct sockaddr *)&ss, sl);
  }
  usleep(PROBE_WAIT_MS * 1000);
  for (size_t i = 0; i < n; i++) {
    struct pollfd pf = {.fd = fd[i], .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof(err);
    const char *what = "no socket";
    if (fd[i] >= 0 && poll(&pf, 1, 0) == 0)
      what = "timed out";
    else if (fd[i] >= 0 &&
             getsockopt(fd[i], SOL_SOCKET, SO_ERROR, &err, &el) == 0)
      what = err ? strerror(err) : "CONNECTED";
    int k = snprintf(buf + len, sizeof(buf) - len, "%s %s:%u: %s;",
                     err == 0 && !strcmp(what, "CONNECTED") ? "!" : "",
                     p[i].addr, (unsigned)p[i].port, what);
    if (k > 0 && (size_t)k < sizeof(buf) - len)
      len += (size_t)k;
    if (fd[i] >= 0)
      (void)close(fd[i]);
  }
  buf[len++] = '\n';
  (void)!write(out, buf, len);
}

/* Whether an interface besides lo is up with an IPv4 address; which. */
static void sandbox_ifaces(int out) {
  struct ifaddrs *ifa = NULL;
  char buf[256] = "no interface besides lo is up with an address\n";
  if (getifaddrs(&ifa) == 0) {
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
          !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
        continue;
      char a[INET_ADDRSTRLEN];
      (void)inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
                      a, sizeof(a));
      (void)snprintf(buf, sizeof(buf), "up %s %s\n", i->ifa_name, a);
      break;
    }
    freeifaddrs(ifa);
  }
  (void)!write(out, buf, strlen(buf));
}

/* Listens on SANDBOX_PORT, says so, greets one connection. */
static void sandbox_serve(int out) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(SANDBOX_PORT)};
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      listen(s, 4) < 0) {
    (void)!write(out, "cannot listen\n", 14);
    return;
  }
  (void)!write(out, "listening\n", 10);
  struct pollfd p = {.fd = s, .events = POLLIN};
  if (poll(&p, 1, 3000) == 1) {
    int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0) {
      (void)!write(c, "hello from the sandbox", 22);
      (void)close(c);
    }
  }
  (void)close(s);
}

/* The sandbox's process: its own user and network namespace, then
 * commands until 'q' or EOF. */
static _Noreturn void sandbox_main(int cmd, int out, const struct probe *p,
                                   size_t n) {
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  char c = unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? 'u' : 'x';
  (void)!write(out, &c, 1);
  while (read(cmd, &c, 1) == 1) {
    if (c == 'i')
      sandbox_ifaces(out);
    else if (c == 'p')
      sandbox_probe(out, p, n);
    else if (c == 'l')
      sandbox_serve(out);
    else
      break;
  }
  _exit(0);
}

/* Forks the sandbox and writes its maps; it then waits for commands. */
static int sandbox_start(struct sandbox *sb, const struct probe *p, size_t n) {
  int cmd[2], out[2];
  if (pipe2(cmd, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  sb->pid = fork();
  if (sb->pid == 0) {
    (void)close(cmd[1]); /* so that our close is its EOF */
    (void)close(out[0]);
    sandbox_main(cmd[0], out[1], p, n);
  }
  (void)close(cmd[0]);
  (void)close(out[1]);
  sb->cmd = cmd[1];
  sb->reply = out[0];
  char c = 0;
  if (sb->pid < 0 || read(sb->reply, &c, 1) != 1 || c != 'u')
    return -EPERM;
  return write_maps(sb->pid, geteuid(), getegid());
}

/* Sends command C; REPLY (N bytes) := its answer line. */
static void sandbox_ask(struct sandbox *sb, char c, char *reply, size_t n) {
  size_t len = 0;
  reply[0] = '\0';
  if (write(sb->cmd, &c, 1) != 1)
    return;
  while (len + 1 < n && !memchr(reply, '\n', len)) {
    struct pollfd p = {.fd = sb->reply, .events = POLLIN};
    ssize_t k =
        poll(&p, 1, 5000) == 1 ? read(sb->reply, reply + len, n - 1 - len) : -1;
    if (k <= 0)
      break;
    len += (size_t)k;
  }
  reply[len] = '\0';
  char *nl = strchr(reply, '\n');
  if (nl)
    *nl = '\0';
}

static void sandbox_end(struct sandbox *sb) {
  (void)close(sb->cmd);
  (void)close(sb->reply);
  int status;
  (void)waitpid(sb->pid, &status, 0);
}

/* ---- host-side helpers -----------------------------------------------------
 */

static int listen_on(const char *addr, uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  (void)inet_pton(AF_INET, addr, &a.sin_addr);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      listen(s, 16) < 0)
    return -1;
  return s;
}

static bool alive(pid_t pid) {
  return pid > 0 && kill(pid, 0) == 0;
}

/* Waits up to MS for PID to be gone (reaped by its parent). */
static bool gone_within(pid_t pid, unsigned ms) {
  uint64_t end = sbx_now_ms() + ms;
  while (alive(pid) && sbx_now_ms() < end)
    usleep(5000);
  return !alive(pid);
}

/* A greeting read from 127.0.0.1:PORT, "" on failure. */
static void fetch(uint16_t port, char *buf, size_t n) {
  buf[0] = '\0';
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct timeval tv = {.tv_sec = 3};
  (void)setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
    ssize_t k = read(s, buf, n - 1);
    buf[k > 0 ? k : 0] = '\0';
  }
  if (s >= 0)
    (void)close(s);
}

/* What pasta was given: an empty environment, /dev/null as stdin. */
static void check_pasta_process(pid_t pasta) {
  char path[64], target[64] = "";
  (void)snprintf(path, sizeof(path), "/proc/%d/environ", (int)pasta);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  char env[64];
  ssize_t k = fd >= 0 ? read(fd, env, sizeof(env)) : -1;
  if (fd >= 0)
    (void)close(fd);
  if (k != 0)
    FAIL("pasta's environment is not empty (read %zd bytes of %s)", k, path);
  (void)snprintf(path, sizeof(path), "/proc/%d/fd/0", (int)pasta);
  (void)!readlink(path, target, sizeof(target) - 1);
  if (strcmp(target, "/dev/null"))
    FAIL("pasta's stdin is \"%s\", not /dev/null", target);
}

/* ---- the tests' bodies (in the fake host) ----------------------------------
 */

static uint16_t free_port(void) {
  uint16_t port = 0;
  if (sbx_free_tcp_port(&port) < 0)
    FAIL("sbx_free_tcp_port: %s", strerror(errno));
  return port;
}

/* Starts pasta for a fresh sandbox with one forward: *SB, *N, *FWD_PORT. */
static bool start_sandbox(struct sandbox *sb, struct isolate_net **n,
                          uint16_t *fwd_port, const struct probe *p,
                          size_t np) {
  *fwd_port = free_port();
  struct net_forward fw = {.host_port = *fwd_port, .port = SANDBOX_PORT};
  int r = sandbox_start(sb, p, np);
  if (r < 0) {
    say("SKIP", "the sandbox's user namespace: %s", strerror(-r));
    return false;
  }
  struct sbx_error e = {0};
  uint64_t t0 = sbx_now_ns();
  r = isolate_net_start(sb->pid, &fw, 1, n, &e);
  uint64_t t1 = sbx_now_ns();
  if (r < 0) {
    FAIL("isolate_net_start: %s", e.msg);
    sandbox_end(sb);
    return false;
  }
  INFO("isolate_net_start took %.2f ms", (double)(t1 - t0) / 1e6);
  return true;
}

static void network_body(void) {
  uint16_t lo_port = free_port(), any_port = free_port();
  int lo = listen_on("127.0.0.1", lo_port),
      any = listen_on("0.0.0.0", any_port);
  if (lo < 0 || any < 0) {
    FAIL("host listeners: %s", strerror(errno));
    return;
  }
  const struct probe probes[] = {
      {"127.0.0.1", lo_port}, {"127.0.0.1", any_port}, {"::1", lo_port},
      {"::1", any_port},      {HOST_GW, lo_port},      {HOST_GW, any_port},
      {HOST_ADDR, lo_port},   {HOST_ADDR, any_port},   {OTHER_ADDR, lo_port},
      {OTHER_ADDR, any_port},
  };
  struct sandbox sb;
  struct isolate_net *n = NULL;
  uint16_t fwd_port;
  if (!start_sandbox(&sb, &n, &fwd_port, probes, SBX_ARRAY_SIZE(probes)))
    return;
  pid_t pasta = isolate_net_pid(n);
  if (!alive(pasta))
    FAIL("isolate_net_pid %d is not a live process", (int)pasta);
  check_pasta_process(pasta);

  char reply[1024];
  sandbox_ask(&sb, 'i', reply, sizeof(reply));
  if (strncmp(reply, "up ", 3) || !strstr(reply, " " HOST_ADDR))
    FAIL("the sandbox's interface: %s", reply);

  sandbox_ask(&sb, 'p', reply, sizeof(reply));
  INFO("probes from inside: %s", reply);
  if (strchr(reply, '!'))
    FAIL("a probe from inside connected: %s", reply);
  if (accept(lo, NULL, NULL) >= 0 || accept(any, NULL, NULL) >= 0)
    FAIL("a host listener (127.0.0.1:%u or 0.0.0.0:%u) got a connection "
         "from inside",
         (unsigned)lo_port, (unsigned)any_port);

  sandbox_ask(&sb, 'l', reply, sizeof(reply));
  char greeting[64];
  fetch(fwd_port, greeting, sizeof(greeting));
  if (strcmp(greeting, "hello from the sandbox"))
    FAIL("forward 127.0.0.1:%u -> sandbox port %d: got \"%s\" (%s)",
         (unsigned)fwd_port, SANDBOX_PORT, greeting, reply);

  sandbox_end(&sb); /* the sandbox's process exits */
  uint64_t t0 = sbx_now_ms();
  if (!gone_within(pasta, 1000))
    FAIL("pasta %d still runs 1 s after the sandbox's process exited",
         (int)pasta);
  else
    INFO("pasta was gone %u ms after the sandbox's process",
         (unsigned)(sbx_now_ms() - t0));
  isolate_net_stop(n);
  (void)close(lo);
  (void)close(any);
}

static void stop_body(void) {
  struct sandbox sb;
  struct isolate_net *n = NULL;
  uint16_t fwd_port;
  if (!start_sandbox(&sb, &n, &fwd_port, NULL, 0))
    return;
  pid_t pasta = isolate_net_pid(n);
  uint64_t t0 = sbx_now_ms();
  isolate_net_stop(n);
  if (alive(pasta))
    FAIL("pasta %d still runs after isolate_net_stop", (int)pasta);
  INFO("isolate_net_stop took %u ms", (unsigned)(sbx_now_ms() - t0));
  char greeting[64];
  fetch(fwd_port, greeting, sizeof(greeting));
  if (greeting[0])
    FAIL("the forward still answers after isolate_net_stop");
  sandbox_end(&sb);
}

static void bad_pid_body(void) {
  pid_t gone = fork();
  if (gone == 0)
    _exit(0);
  (void)waitpid(gone, NULL, 0);
  struct isolate_net *n = (struct isolate_net *)1;
  struct sbx_error e = {0};
  char pid[16];
  (void)snprintf(pid, sizeof(pid), "%d", (int)gone);
  int r = isolate_net_start(gone, NULL, 0, &n, &e);
  if (r >= 0 || n)
    FAIL("isolate_net_start succeeded for pid %d, which has exited", gone);
  else if (strncmp(e.msg, "pasta: ", 7) || !strstr(e.msg, pid) ||
           strstr(e.msg, "syslog"))
    FAIL("the error does not quote pasta about pid %s: %s", pid, e.msg);
  else
    INFO("bad pid: %s", e.msg);
}

static void port_taken_body(void) {
  struct sandbox sb;
  uint16_t port = free_port();
  int taken = listen_on("127.0.0.1", port);
  if (sandbox_start(&sb, NULL, 0) < 0) {
    say("SKIP", "the sandbox's user namespace");
    return;
  }
  struct net_forward fw = {.host_port = port, .port = SANDBOX_PORT};
  struct isolate_net *n = NULL;
  struct sbx_error e = {0};
  int r = isolate_net_start(sb.pid, &fw, 1, &n, &e);
  if (r >= 0)
    FAIL("isolate_net_start succeeded with host port %u taken", port);
  else if (strncmp(e.msg, "pasta: ", 7) || !strstr(e.msg, "bind"))
    FAIL("the error does not quote pasta's bind failure: %s", e.msg);
  else
    INFO("port taken: %s", e.msg);
  isolate_net_stop(n);
  sandbox_end(&sb);
  (void)close(taken);
}

/* ---- the tests -------------------------------------------------------------
 */

Test(net, outbound_only_and_forward_and_lifetime, .timeout = 60) {
  in_fake_host(network_body);
}

Test(net, stop_ends_pasta, .timeout = 60) {
  in_fake_host(stop_body);
}

Test(net, bad_pid_quotes_pasta, .timeout = 60) {
  in_fake_host(bad_pid_body);
}

Test(net, taken_host_port_quotes_pasta, .timeout = 60) {
  in_fake_host(port_taken_body);
}

Test(net, missing_pasta_says_how_to_get_it) {
  cr_assert_eq(setenv("SBX_PASTA", "/nonexistent/pasta", 1), 0);
  struct isolate_net *n = (struct isolate_net *)1;
  struct sbx_error e = {0};
  int r = isolate_net_start(getpid(), NULL, 0, &n, &e);
  cr_expect_eq(r, -ENOENT);
  cr_expect_null(n);
  cr_expect(strstr(e.msg, "user-mode networking needs pasta (Debian package "
                          "passt); install it, or use network_mode \"none\""),
            "%s", e.msg);
}

Test(net, bad_arguments) {
  struct isolate_net *n = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(isolate_net_start(0, NULL, 0, &n, &e), -EINVAL);
  struct net_forward fw = {.host_port = 0, .port = 80};
  cr_expect_eq(isolate_net_start(getpid(), &fw, 1, &n, &e), -EINVAL);
  cr_expect(strstr(e.msg, "must not be 0"), "%s", e.msg);
  cr_expect_eq(
      isolate_net_start(getpid(), &fw, ISOLATE_NET_FORWARDS_MAX + 1, &n, &e),
      -EINVAL);
  cr_expect_null(n);
  isolate_net_stop(NULL);
  cr_expect_eq(isolate_net_pid(NULL), 0);
}
