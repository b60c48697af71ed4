#include "tests/support/escape.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/sbxrun.h"

void escape_setup(struct escape_ctx *c, const char *const *create_args,
                  bool docker) {
  memset(c, 0, sizeof(*c));
  (void)snprintf(c->dir, sizeof(c->dir), "/tmp/sbx-escape-XXXXXX");
  cr_assert_not_null(mkdtemp(c->dir));
  (void)snprintf(c->state, sizeof(c->state), "%s/state", c->dir);
  char tmp[128];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", c->dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  (void)snprintf(c->secret, sizeof(c->secret), "sk-escape-%ld-%d",
                 (long)time(NULL), (int)getpid());
  setenv("SBX_ESCAPE_SECRET", c->secret, 1);
  test_write_file(c->dir, "host-secret.txt", c->secret);
  c->create_args = create_args;
  c->docker = docker;
}

void escape_teardown(struct escape_ctx *c) {
  sbx_sandbox_remove_all(c->state);
  (void)test_rm_rf(c->dir);
}

char *escape_create(struct escape_ctx *c, const char *const *extra) {
  const char *args[40] = {"create"};
  size_t n = 1;
  for (size_t i = 0; c->create_args && c->create_args[i] && n < 30; i++)
    args[n++] = c->create_args[i];
  for (size_t i = 0; extra && extra[i] && n < 39; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  return sbx_sandbox_line(c->state, args);
}

int escape_sh(struct escape_ctx *c, const char *id, const char *script,
              char **out) {
  struct sbx_run_out r;
  const char *args[] = {"exec", id, "--", "sh", "-c", script, NULL};
  sbx_sandbox_run(&r, c->state, args);
  size_t n = strlen(r.out) + strlen(r.err) + 1;
  *out = malloc(n);
  cr_assert_not_null(*out);
  (void)snprintf(*out, n, "%s%s", r.out, r.err);
  int st = r.status;
  sbx_run_free(&r);
  return st;
}

/* Runs SCRIPT and asserts that what it printed holds none of NEEDLES. */
static void expect_absent(struct escape_ctx *c, const char *id,
                          const char *what, const char *script,
                          const char *const *needles) {
  char *out = NULL;
  (void)escape_sh(c, id, script, &out);
  for (size_t i = 0; needles[i]; i++)
    cr_expect(!strstr(out, needles[i]), "%s: \"%s\" leaked: %.2000s", what,
              needles[i], out);
  free(out);
}

void escape_probe_secrets(struct escape_ctx *c, const char *id) {
  const char *needles[] = {c->secret, "test-key", c->state, NULL};
  /* Every process's environment, command line and open files, as any of
   * the sandbox's users can read them. */
  expect_absent(c, id, "environ/cmdline",
                "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; "
                "tr '\\0' ' ' < $p/cmdline; echo; done 2>/dev/null",
                needles);
  expect_absent(c, id, "fds",
                "for f in /proc/[0-9]*/fd/*; do readlink $f; done 2>/dev/null; "
                "for f in /proc/[0-9]*/fd/*; do head -c 4096 $f; done "
                "2>/dev/null </dev/null",
                needles);
  expect_absent(c, id, "maps", "cat /proc/[0-9]*/maps 2>/dev/null", needles);
}

void escape_probe_host_files(struct escape_ctx *c, const char *id) {
  char script[512];
  (void)snprintf(script, sizeof(script),
                 "cat %s/host-secret.txt; ls -la %s %s; ls -A $HOME /root; "
                 "cat /root/.bash_history /etc/shadow; find / -xdev -name "
                 "host-secret.txt -printf 'FOUND:%%p\\n' 2>/dev/null",
                 c->dir, c->dir, c->state);
  const char *needles[] = {c->secret, "FOUND:", "sandboxes", NULL};
  expect_absent(c, id, "host files", script, needles);
  /* A canary in our home is not in the sandbox's. */
  const char *home = getenv("HOME");
  if (home && !c->docker) {
    char canary[256];
    (void)snprintf(canary, sizeof(canary), "%s/.sbx-escape-canary-%d", home,
                   (int)getpid());
    int fd = open(canary, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      close(fd);
      const char *n2[] = {".sbx-escape-canary", NULL};
      char s2[300];
      (void)snprintf(s2, sizeof(s2), "ls -A %s $HOME 2>&1", home);
      expect_absent(c, id, "home", s2, n2);
      (void)unlink(canary);
    }
  }
}

void escape_probe_writes(struct escape_ctx *c, const char *id) {
  char name[64];
  (void)snprintf(name, sizeof(name), "sbx-escape-%d", (int)getpid());
  char script[1024];
  (void)snprintf(script, sizeof(script),
                 "for d in / /etc /usr /usr/local/bin /usr/lib /var /opt %s "
                 "%s; do echo x > $d/%s; done 2>/dev/null; true",
                 c->dir, c->state, name);
  char *out = NULL;
  (void)escape_sh(c, id, script, &out);
  free(out);
  const char *dirs[] = {"",     "/etc", "/usr", "/usr/local/bin", "/usr/lib",
                        "/var", "/opt", c->dir, c->state};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    char p[512];
    (void)snprintf(p, sizeof(p), "%s/%s", dirs[i], name);
    struct stat st;
    cr_expect_neq(lstat(p, &st), 0, "the sandbox wrote the host's %s", p);
    (void)unlink(p);
  }
}

/* The host workspace of sandbox ID, from its record; NULL when the
 * backend keeps none on the host. New. */
static char *host_workspace(struct escape_ctx *c, const char *id) {
  struct sbx_run_out r;
  const char *args[] = {"info", "--json", id, NULL};
  sbx_sandbox_run(&r, c->state, args);
  json_t *j = json_loads(r.out, 0, NULL);
  sbx_run_free(&r);
  const char *w = json_string_value(
      json_object_get(json_object_get(j, "local"), "workspace"));
  char *s = w ? strdup(w) : NULL;
  json_decref(j);
  return s;
}

void escape_probe_neighbour(struct escape_ctx *c, const char *id) {
  char *other = escape_create(c, NULL);
  char *out = NULL;
  cr_assert_eq(
      escape_sh(c, other, "echo neighbour-canary > canary-a.txt", &out), 0,
      "%s", out);
  free(out);
  char *ws = host_workspace(c, other);
  char script[1024];
  (void)snprintf(script, sizeof(script),
                 "find / -xdev -name canary-a.txt 2>/dev/null; cat "
                 "%s/canary-a.txt 2>/dev/null; ls /tmp",
                 ws ? ws : "/nonexistent");
  const char *needles[] = {"canary-a.txt", "neighbour-canary", NULL};
  expect_absent(c, id, "neighbour", script, needles);
  free(ws);
  free(other);
}

/* Appends to SCRIPT (of SIZE) a try at PATH from inside: its content
 * read, and "SEEN:PATH" when it exists at all. */
static void try_path(char *script, size_t size, const char *path) {
  size_t n = strlen(script);
  (void)snprintf(script + n, size - n,
                 "cat '%s' 2>/dev/null; test -e '%s' && echo 'SEEN:%s'; ", path,
                 path, path);
}

/* A token file's content (new), or NULL. */
static char *read_token(const char *path) {
  FILE *t = fopen(path, "re");
  char tok[128] = {0};
  bool ok = t && fgets(tok, sizeof(tok), t);
  if (t)
    fclose(t);
  tok[strcspn(tok, "\n")] = '\0';
  return ok && strlen(tok) >= 16 ? strdup(tok) : NULL;
}

/* What sbx keeps on the host for every sandbox of C: each record's token
 * file and socket (the local backend's, or the docker backend's in its
 * runtime directory under C's TMPDIR), tried by SCRIPT (of SIZE); the
 * tokens go into NEEDLES from *N on (at most MAX). */
static void host_secrets(struct escape_ctx *c, char *script, size_t size,
                         const char **needles, size_t *n, size_t max) {
  char pattern[256];
  glob_t g;
  (void)snprintf(pattern, sizeof(pattern), "%s/sandboxes/*.json", c->state);
  cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no records in %s", c->state);
  for (size_t i = 0; i < g.gl_pathc; i++) {
    json_t *j = json_load_file(g.gl_pathv[i], 0, NULL);
    json_t *b = json_object_get(j, "local");
    if (!b)
      b = json_object_get(j, "docker");
    const char *tok = json_string_value(json_object_get(b, "token_file"));
    const char *sock = json_string_value(json_object_get(b, "socket"));
    if (tok) {
      try_path(script, size, tok);
      char *t = read_token(tok);
      if (t && *n < max)
        needles[(*n)++] = t;
      else
        free(t);
    }
    if (sock && strncmp(sock, "ipc://", 6) == 0)
      try_path(script, size, sock + 6);
    json_decref(j);
  }
  globfree(&g);
  (void)snprintf(pattern, sizeof(pattern), "%s/tmp/sbx-docker-*/sandboxd.sock",
                 c->dir);
  if (glob(pattern, 0, NULL, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; i++)
      try_path(script, size, g.gl_pathv[i]);
  globfree(&g);
}

void escape_probe_sibling(struct escape_ctx *c, const char *id) {
  char *other = escape_create(c, NULL);
  char *out = NULL;
  cr_assert_eq(escape_sh(c, other, "true", &out), 0, "%s", out);
  free(out);
  static char script[16384];
  script[0] = '\0';
  const char *needles[64] = {"SEEN:"};
  size_t n = 1;
  host_secrets(c, script, sizeof(script), needles, &n, 63);
  cr_assert_gt(n, 2, "no token files found in %s", c->state);
  /* What the sandbox may find by itself: token files anywhere, its own
   * runtime directory's token (docker). */
  size_t len = strlen(script);
  (void)snprintf(script + len, sizeof(script) - len,
                 "find / -xdev -name '*.token' -printf 'SEEN:%%p\\n' "
                 "2>/dev/null; cat /run/sbx/token /run/sbx/listen/token "
                 "2>/dev/null; true");
  needles[n] = NULL;
  expect_absent(c, id, "sibling", script, needles);
  for (size_t i = 1; i < n; i++)
    free((char *)needles[i]);
  free(other);
}

void escape_probe_processes(struct escape_ctx *c, const char *id) {
  char *out = NULL;
  /* Few processes, none of the host's (ours is the test's own pid). */
  char script[512];
  (void)snprintf(script, sizeof(script),
                 "ls -d /proc/[0-9]* | wc -l; kill -0 %d && echo "
                 "SIGNALLED; kill -STOP %d && echo STOPPED; cat "
                 "/proc/%d/maps >/dev/null && echo MAPS; cat /proc/1/environ "
                 ">/dev/null 2>&1 && echo ENVIRON1; true",
                 (int)getpid(), (int)getpid(), (int)getpid());
  cr_expect_eq(escape_sh(c, id, script, &out), 0, "%s", out);
  cr_expect_lt(strtol(out, NULL, 10), 12, "the sandbox sees host processes: %s",
               out);
  cr_expect(!strstr(out, "SIGNALLED") && !strstr(out, "STOPPED") &&
                !strstr(out, "MAPS") && !strstr(out, "ENVIRON1"),
            "%s", out);
  free(out);
  /* Tracing sandboxd (its PID 1, or the container's) is refused. */
  cr_expect_neq(escape_sh(c, id,
                          "command -v gdb >/dev/null && gdb -p 1 -batch -ex "
                          "'info registers' 2>&1 | grep -q rip && exit 0; "
                          "exec 3</proc/1/mem && exit 0; exit 1",
                          &out),
                0, "sandboxd was traced: %s", out);
  free(out);
}

/* A listener on the host at ADDR (network order); its port in *PORT. */
static int host_listener(uint32_t addr, unsigned *port) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  cr_assert_geq(ls, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = addr};
  socklen_t al = sizeof(a);
  cr_assert_eq(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(listen(ls, 16), 0);
  cr_assert_eq(getsockname(ls, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  return ls;
}

/* Tries every address the sandbox knows of the host (127.0.0.1, the
 * gateway, the engine's host names, its own addresses) at PORT. */
static void try_reach(struct escape_ctx *c, const char *id, unsigned port,
                      const char *what, int ls) {
  char script[1024];
  (void)snprintf(
      script, sizeof(script),
      "for h in 127.0.0.1 localhost ::1 10.0.2.2 host.containers.internal "
      "host.docker.internal $(ip -4 route 2>/dev/null | awk '/default/ "
      "{print $3}') $(ip -o addr 2>/dev/null | awk '{print $4}' | cut -d/ "
      "-f1); do timeout 2 bash -c \"echo hi > /dev/tcp/$h/%u\" "
      "2>/dev/null && echo REACHED $h; done; true",
      port);
  char *out = NULL;
  (void)escape_sh(c, id, script, &out);
  cr_expect(!strstr(out, "REACHED"),
            "the host's listener on %s was reached: %s", what, out);
  free(out);
  struct pollfd p = {.fd = ls, .events = POLLIN};
  cr_expect_eq(poll(&p, 1, 0), 0, "a connection reached the host's %s", what);
}

void escape_probe_loopback(struct escape_ctx *c, const char *id) {
  unsigned port;
  int ls = host_listener(htonl(INADDR_LOOPBACK), &port);
  try_reach(c, id, port, "127.0.0.1", ls);
  close(ls);
  /* The local backend's user-mode network reaches no service of the host
   * at all; a container engine's bridge reaches the host's own address
   * by design (docs/security.md), so this one is the local backend's. */
  if (!c->docker) {
    ls = host_listener(htonl(INADDR_ANY), &port);
    try_reach(c, id, port, "0.0.0.0", ls);
    close(ls);
  }
}

void escape_probe_privileges(struct escape_ctx *c, const char *id) {
  char *out = NULL;
  const struct {
    const char *what, *script;
  } denied[] = {
      {"mount", "mount -t tmpfs none /mnt"},
      {"remount", "mount -o remount,rw /usr"},
      {"unshare -m", "unshare -m true"},
      {"unshare -Ur + remount", "unshare -Urm sh -c 'mount -o remount,rw /usr "
                                "&& touch /usr/sbx-escape'"},
      {"pivot_root", "cd /tmp && mkdir -p n/o && pivot_root n n/o"},
      {"sandboxd's root", "ls /proc/1/root/ >/dev/null"},
      {"setuid gain", "cp /usr/bin/id /tmp/id && chmod u+s /tmp/id && "
                      "(useradd escu 2>/dev/null; true) && su escu -s /bin/sh "
                      "-c /tmp/id | grep -q euid=0"},
      {"module", "grep -q . /proc/modules && modprobe dummy"},
      {"raw disk", "head -c 1 /dev/vda >/dev/null || head -c 1 /dev/sda "
                   ">/dev/null"},
  };
  for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
    cr_expect_neq(escape_sh(c, id, denied[i].script, &out), 0,
                  "%s succeeded: %s", denied[i].what, out);
    free(out);
  }
  struct stat st;
  cr_expect_neq(stat("/usr/sbx-escape", &st), 0);
  /* None of the capabilities that reach past the sandbox's walls: with
   * CAP_NET_RAW or CAP_NET_ADMIN a command could forge its way to the
   * host's loopback through the user-mode network. */
  cr_assert_eq(escape_sh(c, id, "grep CapBnd /proc/self/status", &out), 0);
  unsigned long long bnd = strtoull(strchr(out, ':') + 1, NULL, 16);
  free(out);
  static const int forbidden[] = {12 /* NET_ADMIN */,  13 /* NET_RAW */,
                                  16 /* SYS_MODULE */, 17 /* SYS_RAWIO */,
                                  19 /* SYS_PTRACE */, 21 /* SYS_ADMIN */};
  for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
    cr_expect(!(bnd & (1ull << forbidden[i])),
              "capability %d is in the bounding set (%llx)", forbidden[i], bnd);
}

void escape_probe_limits(struct escape_ctx *c, const char *const *limit_args) {
  char *id = escape_create(c, limit_args);
  char *out = NULL;
  /* A fork bomb: it hits the process limit and ends (the shell dies at
   * its first failed fork, having noted how many it made). */
  (void)escape_sh(c, id,
                  "i=0; while [ $i -lt 300 ]; do sleep 3 & i=$((i+1)); echo "
                  "$i > /tmp/forks; done 2>/dev/null",
                  &out);
  free(out);
  sleep(4); /* the sleeps end; the sandbox can start processes again */
  cr_expect_eq(escape_sh(c, id, "cat /tmp/forks", &out), 0, "%s", out);
  long forks = strtol(out, NULL, 10);
  cr_expect(forks > 0 && forks < 64, "the process limit held: %s", out);
  free(out);
  /* A memory hog: killed inside the sandbox, which still answers. */
  int st =
      escape_sh(c, id, "python3 -c 'b=b\"x\"*(512<<20); print(len(b))'", &out);
  cr_expect_neq(st, 0, "the memory hog was not stopped: %s", out);
  free(out);
  cr_expect_eq(escape_sh(c, id, "echo alive", &out), 0, "%s", out);
  cr_expect(strstr(out, "alive"), "%s", out);
  free(out);
  free(id);
}
