/* The docker backend against a real engine (Podman's Docker-compatible
 * service in CI): containers made, reached through sandboxd, isolated,
 * limited, resumed and removed.
 *
 * The engine comes from DOCKER_HOST, which scripts/containers.sh sets up
 * (`make check` runs it); without it every test here fails and says so. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/docker/docker.h"
#include "backends/docker/engine.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/rand.h"
#include "tests/support/httpget.h"
#include "tests/support/pyserver.h"
#include "tests/support/sbxrun.h"

#define IMAGE "localhost/sbx-debian:latest"
#define IMAGE_SCRATCH "localhost/sbx-sandboxd:latest"
#define IMAGE_BARE "localhost/sbx-bookworm-rootfs:latest"
#define STATIC_SANDBOXD SBX_SOURCE_DIR "/build-static/sandboxd"

/* Fails the test unless the engine set up by scripts/containers.sh is
 * there: in CI these tests must not pass or skip without it. */
static void need_engine(void) {
  const char *h = getenv("DOCKER_HOST");
  if (!h || !*h)
    cr_assert_fail(
        "DOCKER_HOST is unset: the docker backend's tests need a "
        "container engine; run `scripts/containers.sh` and export the "
        "DOCKER_HOST it prints (`make check` does both)");
}

/* The common options and the docker backend's, which b.own points to. */
struct opts {
  struct backend_options b;
  struct docker_options docker;
};

static void base_options(struct opts *o, const char *image) {
  need_engine();
  memset(o, 0, sizeof(*o));
  o->b.own = &o->docker;
  o->docker.image = image;
  o->docker.sandboxd_static = STATIC_SANDBOXD;
  o->docker.never_pull = true;
  o->b.ready_timeout_ms = 20000;
}

static struct sandbox *create(const struct opts *o) {
  struct sandbox *s = NULL;
  struct sbx_error e = {0};
  int r = backend_docker.create(&o->b, NULL, &s, &e);
  cr_assert_eq(r, 0, "create: %d %s", r, e.msg);
  cr_assert_not_null(s);
  return s;
}

static void close_sandbox(struct sandbox *s) {
  struct sbx_error e = {0};
  cr_expect_eq(backend_docker.close(s, &e), 0, "close: %s", e.msg);
}

/* Runs ARGV (or, when ARGV is NULL, CMD under /bin/sh -c) in S with S's
 * environment, as RUN_AS when it is not NULL, and collects stdout and
 * stderr into *OUT (new); returns the exit code, or -1 when it did not end
 * within 20 s. */
static int run_as(struct sandbox *s, const char *run_as,
                  const char *const *argv, const char *cmd, char **out) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.run_as = (char *)(run_as ? run_as : "");
  size_t argc = 0;
  while (argv && argv[argc])
    argc++;
  if (argv) {
    st.argv = (char **)argv;
    st.n_argv = argc;
  } else {
    st.command = (char *)cmd;
    st.shell = "/bin/sh";
  }
  st.stderr_to_stdout = true;
  st.no_stdin = true;
  Sbx__V1__EnvVar vars[16];
  Sbx__V1__EnvVar *pvars[16];
  char names[16][64];
  for (size_t i = 0; i < s->nenv && i < 16; i++) {
    sbx__v1__env_var__init(&vars[i]);
    const char *eq = strchr(s->env[i], '=');
    (void)snprintf(names[i], sizeof(names[i]), "%.*s", (int)(eq - s->env[i]),
                   s->env[i]);
    vars[i].name = names[i];
    vars[i].value = (char *)eq + 1;
    pvars[i] = &vars[i];
  }
  st.env = pvars;
  st.n_env = s->nenv < 16 ? s->nenv : 16;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  int rc = sbx_exec_start(s->client, &st, &r, &e);
  cr_assert_eq(rc, 0, "exec %s: %s", cmd ? cmd : argv[0], e.msg);
  uint64_t id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  struct sbx_buf b;
  sbx_buf_init(&b, 1 << 20);
  uint64_t off = 0, deadline = sbx_now_ms() + 20000;
  int code = -1;
  for (;;) {
    Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
    rd.exec_id = id;
    rd.offset = off;
    rd.wait_ms = 2000;
    rd.until_exit = true;
    rc = sbx_exec_read(s->client, &rd, &r, &e);
    cr_assert_eq(rc, 0, "read: %s", e.msg);
    Sbx__V1__ExecReadReply *x = r->exec_read;
    cr_assert_eq(sbx_buf_append(&b, x->data.data, x->data.len), 0);
    off = x->next_offset;
    bool done = x->exited && x->eof;
    if (done)
      code = x->signal ? 128 + x->signal : x->exit_code;
    sbx_client_reply_free(r);
    if (done || sbx_now_ms() > deadline)
      break;
  }
  (void)sbx_exec_release(s->client, id, &e);
  *out = sbx_buf_steal(&b, NULL);
  return code;
}

static int run_in(struct sandbox *s, const char *const *argv, const char *cmd,
                  char **out) {
  return run_as(s, NULL, argv, cmd, out);
}

static int sh(struct sandbox *s, const char *cmd, char **out) {
  return run_in(s, NULL, cmd, out);
}

/* The engine's inspection of container ID; NULL when it is gone. */
static json_t *inspect(const char *id) {
  struct docker_engine *en = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(docker_engine_open(NULL, &en, &e), 0, "%s", e.msg);
  char path[256];
  (void)snprintf(path, sizeof(path), "/containers/%s/json", id);
  struct docker_request req = {.method = "GET", .path = path};
  json_t *j = NULL;
  int r = docker_engine_json(en, &req, &j, &e);
  docker_engine_free(en);
  if (r == -ENOENT)
    return NULL;
  cr_assert_eq(r, 0, "inspect %s: %s", id, e.msg);
  return j;
}

static const char *label(json_t *j, const char *key) {
  return json_string_value(json_object_get(
      json_object_get(json_object_get(j, "Config"), "Labels"), key));
}

static const char *rundir_of(json_t *j) {
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(j, "Mounts"), i, m) {
    const char *dst = json_string_value(json_object_get(m, "Destination"));
    if (dst && strcmp(dst, DOCKER_RUN_DIR) == 0)
      return json_string_value(json_object_get(m, "Source"));
  }
  return NULL;
}

Test(docker, create_exec_close) {
  struct opts o;
  base_options(&o, IMAGE);
  struct sandbox *s = create(&o);
  cr_expect_str_eq(s->root, "/workspace");
  char *out = NULL;
  cr_expect_eq(sh(s,
                  "echo hello from $(cat /etc/debian_version | cut -c1-2); "
                  "pwd; git --version | cut -d' ' -f1-2",
                  &out),
               0, "%s", out);
  cr_expect_str_eq(out, "hello from 12\n/workspace\ngit version\n");
  free(out);

  /* The container is labelled, its runtime directory is private to the
   * controller, and the token in it was deleted once sandboxd read it. */
  const char *id = docker_container_id(s);
  cr_assert_not_null(id);
  char *cid = strdup(id);
  json_t *j = inspect(cid);
  cr_assert_not_null(j);
  cr_expect_str_eq(label(j, "sbx.session"), s->session_id);
  cr_expect_str_eq(label(j, "sbx.managed"), "true");
  const char *rd = rundir_of(j);
  cr_assert_not_null(rd);
  char rundir[256];
  (void)snprintf(rundir, sizeof(rundir), "%s", rd);
  json_decref(j);
  struct stat st;
  cr_assert_eq(stat(rundir, &st), 0, "%s", rundir);
  cr_expect_eq(st.st_mode & 07777, 0700);
  char tok[300];
  (void)snprintf(tok, sizeof(tok), "%s/listen/token", rundir);
  cr_expect_neq(stat(tok, &st), 0, "the token file outlived sandboxd's start");
  (void)snprintf(tok, sizeof(tok), "%s/listen", rundir);
  cr_expect_neq(stat(tok, &st), 0, "the writable directory outlived the start");
  /* The token is nowhere in the commands' environment. */
  cr_expect_eq(sh(s, "env; cat /proc/1/cmdline | tr '\\0' ' '", &out), 0);
  cr_expect_null(strstr(out, docker_token(s)), "token leaked: %s", out);
  free(out);

  close_sandbox(s);
  cr_expect_null(inspect(cid), "container %s outlived close", cid);
  cr_expect_neq(stat(rundir, &st), 0, "%s outlived close", rundir);
  free(cid);
}

Test(docker, scratch_image_with_baked_sandboxd) {
  struct opts o;
  base_options(&o, IMAGE_SCRATCH);
  o.docker.sandboxd_static = "/nonexistent"; /* baked: never looked at */
  struct sandbox *s = create(&o);
  char *out = NULL;
  const char *argv[] = {"/usr/local/bin/sandboxd", "--version", NULL};
  cr_expect_eq(run_in(s, argv, NULL, &out), 0, "%s", out);
  cr_expect_str_eq(out, "sandboxd " SBX_VERSION "\n");
  free(out);
  close_sandbox(s);
}

Test(docker, injected_sandboxd_is_read_only) {
  struct opts o;
  base_options(&o, IMAGE_BARE); /* no sandboxd inside */
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(sh(s,
                  "grep ' /usr/local/bin/sandboxd ' /proc/mounts | cut -d' ' "
                  "-f4 | cut -d, -f1; echo x > /usr/local/bin/sandboxd || "
                  "echo refused",
                  &out),
               0, "%s", out);
  cr_expect(strncmp(out, "ro\n", 3) == 0, "%s", out);
  cr_expect_neq(strstr(out, "refused"), NULL, "%s", out);
  free(out);
  close_sandbox(s);
}

Test(docker, injected_sandboxd_must_be_static) {
  struct opts o;
  base_options(&o, IMAGE_BARE);
  o.docker.sandboxd_static = SBX_BUILD_DIR "/sandboxd"; /* dynamic */
  struct sandbox *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -EINVAL);
  cr_expect_neq(strstr(e.msg, "dynamically linked"), NULL, "%s", e.msg);
  cr_expect_null(s);
}

Test(docker, network_none_leaves_only_loopback) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.network_mode = "none";
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(sh(s, "ls /sys/class/net", &out), 0);
  cr_expect_str_eq(out, "lo\n");
  free(out);
  cr_expect_neq(sh(s,
                   "timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' "
                   "2>/dev/null",
                   &out),
                0, "a connection to 1.1.1.1 went through: %s", out);
  free(out);
  close_sandbox(s);

  /* Without it, the container has more than loopback: the check above can
   * fail. */
  o.docker.network_mode = NULL;
  s = create(&o);
  cr_expect_eq(sh(s, "ls /sys/class/net | grep -vx lo | wc -l", &out), 0);
  cr_expect_str_neq(out, "0\n");
  free(out);
  close_sandbox(s);
}

Test(docker, exposed_port_reached_from_host) {
  struct opts o;
  base_options(&o, IMAGE);
  const uint16_t ports[] = {8000};
  o.docker.exposed_ports = ports;
  o.docker.n_exposed_ports = 1;
  struct sandbox *s = create(&o);
  struct docker_endpoint ep;
  struct sbx_error e = {0};
  cr_assert_eq(docker_exposed_port(s, 8000, &ep, &e), 0, "%s", e.msg);
  cr_expect_str_eq(ep.host, "127.0.0.1");
  cr_expect(ep.port > 0 && ep.port < 65536);
  cr_expect_eq(docker_exposed_port(s, 8001, &ep, &e), -ENOENT);
  cr_expect_neq(strstr(e.msg, "not configured to expose port 8001"), NULL, "%s",
                e.msg);
  cr_assert_eq(docker_exposed_port(s, 8000, &ep, &e), 0);

  /* A tiny HTTP server inside (perl comes with git), left running. */
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "exec perl -MIO::Socket::INET -e '"
               "$s = IO::Socket::INET->new(LocalPort => 8000, Listen => 5, "
               "ReuseAddr => 1) or die $!; "
               "while ($c = $s->accept) { <$c>; "
               "print $c \"HTTP/1.0 200 OK\\r\\n\\r\\nserved from \" . "
               "`hostname`; close $c }'";
  st.shell = "/bin/sh";
  st.no_stdin = true;
  Sbx__V1__Response *r = NULL;
  cr_assert_eq(sbx_exec_start(s->client, &st, &r, &e), 0, "%s", e.msg);
  sbx_client_reply_free(r);

  char *got = test_http_get(ep.host, ep.port);
  cr_expect_neq(strstr(got, "200 OK"), NULL, "got: %s", got);
  cr_expect_neq(strstr(got, "served from "), NULL, "got: %s", got);
  free(got);
  close_sandbox(s);
}

/* An engine endpoint where nothing listens: a check that passes before it
 * proves that nothing was created. */
#define NO_ENGINE "unix:///nonexistent/sbx-test/docker.sock"

Test(docker, reserved_labels_refused_before_anything_is_created) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.host = NO_ENGINE;
  struct sbx_error e = {0};
  struct sandbox *s = NULL;
  const char *reserved[] = {"sbx.session", "sbx.managed", "sbx.anything",
                            "sbx"};
  for (size_t i = 0; i < 4; i++) {
    struct docker_label l[] = {{"team", "a"}, {reserved[i], "x"}};
    o.docker.labels = l;
    o.docker.n_labels = 2;
    cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -EINVAL, "%s",
                 reserved[i]);
    cr_expect_neq(strstr(e.msg, "is reserved"), NULL, "%s", e.msg);
    cr_expect_null(s);
  }
  /* A label that only looks alike is the user's. */
  struct docker_label ok[] = {{"sbxfoo", "1"}, {"io.sbx.x", "2"}};
  o.docker.labels = ok;
  o.docker.n_labels = 2;
  cr_expect_eq(docker_options_check(&o.docker, &e), 0, "%s", e.msg);
  /* Past the checks, the missing engine is what fails, by name. */
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -ENOENT);
  cr_expect_neq(strstr(e.msg, NO_ENGINE), NULL, "%s", e.msg);
}

Test(docker, user_labels_are_set) {
  struct opts o;
  base_options(&o, IMAGE);
  struct docker_label l[] = {{"team", "blue"}, {"com.example.x", "y z"}};
  o.docker.labels = l;
  o.docker.n_labels = 2;
  struct sandbox *s = create(&o);
  json_t *j = inspect(docker_container_id(s));
  cr_assert_not_null(j);
  cr_expect_str_eq(label(j, "team"), "blue");
  cr_expect_str_eq(label(j, "com.example.x"), "y z");
  cr_expect_str_eq(label(j, "sbx.session"), s->session_id);
  json_decref(j);
  close_sandbox(s);
}

Test(docker, network_none_with_ports_refused_before_anything_is_created) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.host = NO_ENGINE;
  o.docker.network_mode = "none";
  const uint16_t ports[] = {8080};
  o.docker.exposed_ports = ports;
  o.docker.n_exposed_ports = 1;
  struct sbx_error e = {0};
  struct sandbox *s = NULL;
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -EINVAL);
  cr_expect_neq(strstr(e.msg, "network_mode \"none\""), NULL, "%s", e.msg);
  o.docker.n_exposed_ports = 0;
  o.docker.network_mode = "host";
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -EINVAL);
  cr_expect_neq(strstr(e.msg, "\"host\" is not supported"), NULL, "%s", e.msg);
}

/* The first line of FILE_A, else of FILE_B, in S ("" when neither). */
static char *first_of(struct sandbox *s, const char *a, const char *b) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "cat %s 2>/dev/null || cat %s 2>/dev/null || true", a, b);
  char *out = NULL;
  (void)sh(s, cmd, &out);
  return out;
}

Test(docker, resource_limits_visible_inside) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.memory_bytes = 96ll << 20;
  o.docker.pids_limit = 77;
  o.docker.cpus = 0.5;
  struct sandbox *s = create(&o);
  /* cgroup v2 files, else v1's. */
  char *mem = first_of(s, "/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  cr_expect_str_eq(mem, "100663296\n");
  char *pids =
      first_of(s, "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max");
  cr_expect_str_eq(pids, "77\n");
  char *cpu = first_of(s, "/sys/fs/cgroup/cpu.max",
                       "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  cr_expect(strcmp(cpu, "50000 100000\n") == 0 || strcmp(cpu, "50000\n") == 0,
            "cpu quota: %s", cpu);
  free(mem);
  free(pids);
  free(cpu);
  /* The pids limit bites: of 100 sleeping children, the shell can start
   * fewer than 77 (it counts those it started, then fails to fork). */
  char *out = NULL;
  (void)sh(s,
           "i=0; while [ $i -lt 100 ]; do sleep 30 >/dev/null 2>&1 & "
           "i=$((i+1)); echo $i; done",
           &out);
  const char *last = out;
  for (const char *p = out; *p; p++)
    if (p[0] == '\n' && p[1] && p[1] >= '0' && p[1] <= '9')
      last = p + 1;
  long started = strtol(last, NULL, 10);
  cr_expect(started > 0 && started < 77,
            "started %ld sleeps under "
            "pids_limit 77: %s",
            started, out);
  free(out);
  close_sandbox(s);
}

Test(docker, env_mounts_and_read_only_rootfs) {
  char host_dir[] = "/tmp/sbx-test-bind-XXXXXX";
  cr_assert_not_null(mkdtemp(host_dir));
  /* The container's root is no one on the host (userns): it reads what
   * anyone may. */
  cr_assert_eq(chmod(host_dir, 0755), 0);
  char f[128];
  (void)snprintf(f, sizeof(f), "%s/hello.txt", host_dir);
  FILE *fp = fopen(f, "w");
  cr_assert_not_null(fp);
  fputs("from the host\n", fp);
  fclose(fp);
  char vol[64], rnd[17];
  cr_assert_eq(sbx_random_hex(rnd, 8), 0);
  (void)snprintf(vol, sizeof(vol), "sbx-test-%s", rnd);

  struct opts o;
  base_options(&o, IMAGE);
  const char *env[] = {"GREETING=hi there", "EMPTY="};
  o.docker.env = env;
  o.docker.n_env = 2;
  struct docker_mount m[] = {
      {"bind", host_dir, "/data", true},
      {"volume", vol, "/cache", false},
  };
  o.docker.mounts = m;
  o.docker.n_mounts = 2;
  o.docker.read_only_rootfs = true;
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(sh(s,
                  "echo \"$GREETING|${EMPTY-unset}\"; cat /data/hello.txt; "
                  "touch /data/x 2>/dev/null || echo data-ro; "
                  "touch /etc/x 2>/dev/null || echo rootfs-ro; "
                  "echo w > /cache/w && echo cache-rw; "
                  "echo w > /workspace/w && echo workspace-rw",
                  &out),
               0, "%s", out);
  cr_expect_str_eq(out, "hi there|\nfrom the host\ndata-ro\nrootfs-ro\n"
                        "cache-rw\nworkspace-rw\n");
  free(out);
  close_sandbox(s);

  /* A named volume outlives the sandbox; remove it ourselves. */
  struct docker_engine *en = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(docker_engine_open(NULL, &en, &e), 0, "%s", e.msg);
  char path[128];
  (void)snprintf(path, sizeof(path), "/volumes/%s?force=1", vol);
  struct docker_request req = {.method = "DELETE", .path = path};
  cr_expect_eq(docker_engine_json(en, &req, NULL, &e), 0, "%s", e.msg);
  docker_engine_free(en);
  unlink(f);
  rmdir(host_dir);
}

Test(docker, runs_as_the_given_user) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.user = "1234:1234";
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(
      sh(s, "id -u; id -g; touch /workspace/mine && echo writable", &out), 0,
      "%s", out);
  cr_expect_str_eq(out, "1234\n1234\nwritable\n");
  free(out);
  close_sandbox(s);
}

/* The engine's HostConfig of the container of S (new). */
static json_t *host_config(struct sandbox *s) {
  json_t *j = inspect(docker_container_id(s));
  cr_assert_not_null(j);
  json_t *h = json_incref(json_object_get(j, "HostConfig"));
  json_decref(j);
  cr_assert_not_null(h);
  return h;
}

static bool has_string(json_t *arr, const char *v) {
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) {
    if (json_is_string(x) && strcmp(json_string_value(x), v) == 0)
      return true;
  }
  return false;
}

/* What sandboxd (the container's pid 1, as the engine made it) and a
 * workload command are: root with the reduced capabilities (CHOWN,
 * DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
 * NET_BIND_SERVICE, SYS_CHROOT = 0x405fb), no new privileges, seccomp in
 * filter mode. A command would have the last two from sandboxd's own
 * filter anyway; pid 1 has them from the engine only. */
#define CONFINED                                                               \
  "CapEff:00000000000405fb\nCapBnd:00000000000405fb\n"                         \
  "CapAmb:0000000000000000\nNoNewPrivs:1\nSeccomp:2\n"
#define STATUS_OF(pid)                                                         \
  "grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/" pid           \
  "/status | tr -d '\\t'"
#define STATUS_CMD STATUS_OF("self")

/* The first line of /proc/self/uid_map in S: inside, outside, count. */
static void uid_map(struct sandbox *s, unsigned long m[3]) {
  char *out = NULL;
  cr_assert_eq(sh(s, "cat /proc/self/uid_map", &out), 0, "%s", out);
  cr_assert_eq(sscanf(out, "%lu %lu %lu", &m[0], &m[1], &m[2]), 3, "%s", out);
  free(out);
}

Test(docker, confined_by_default) {
  char host_dir[] = "/tmp/sbx-test-userns-XXXXXX";
  cr_assert_not_null(mkdtemp(host_dir));
  cr_assert_eq(chmod(host_dir, 0777), 0); /* for whoever container root is */
  struct opts o;
  base_options(&o, IMAGE);
  struct docker_mount m[] = {{"bind", host_dir, "/shared", false}};
  o.docker.mounts = m;
  o.docker.n_mounts = 1;
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(sh(s, STATUS_CMD, &out), 0, "%s", out);
  cr_expect_str_eq(out, CONFINED);
  free(out);
  cr_expect_eq(sh(s, STATUS_OF("1"), &out), 0, "%s", out);
  cr_expect_str_eq(out, CONFINED, "sandboxd itself");
  free(out);

  /* Its own user namespace: root inside is an unprivileged uid outside,
   * and owns on the host what it makes in a bind mount. */
  unsigned long map[3];
  uid_map(s, map);
  cr_expect_eq(map[0], 0);
  cr_expect_neq(map[1], 0, "container root is the host's root");
  cr_expect_eq(map[2], 65536);
  cr_expect_eq(sh(s, "id -u && touch /shared/made-inside", &out), 0, "%s", out);
  cr_expect_str_eq(out, "0\n");
  free(out);
  char made[128];
  (void)snprintf(made, sizeof(made), "%s/made-inside", host_dir);
  struct stat st;
  cr_assert_eq(stat(made, &st), 0, "%s", made);
  cr_expect_eq(st.st_uid, (uid_t)map[1]);

  /* The default limits, inside and as the engine has them. */
  char *mem = first_of(s, "/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  cr_expect_str_eq(mem, "2147483648\n");
  char *pids =
      first_of(s, "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max");
  cr_expect_str_eq(pids, "4096\n");
  free(mem);
  free(pids);
  json_t *h = host_config(s);
  cr_expect(json_is_false(json_object_get(h, "Privileged")));
  cr_expect(has_string(json_object_get(h, "SecurityOpt"), "no-new-privileges"));
  cr_expect_eq(json_integer_value(json_object_get(h, "Memory")), 2ll << 30);
  cr_expect_eq(json_integer_value(json_object_get(h, "PidsLimit")), 4096);
  json_decref(h);

  /* run_as still switches users (useradd made this one), and a setuid
   * binary gains its user nothing. */
  Sbx__V1__User u = SBX__V1__USER__INIT;
  u.name = "sbxtester";
  Sbx__V1__User *up[] = {&u};
  Sbx__V1__UsersEnsure ue = SBX__V1__USERS_ENSURE__INIT;
  ue.users = up;
  ue.n_users = 1;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_users_ensure(s->client, &ue, &r, &e), 0, "%s", e.msg);
  sbx_client_reply_free(r);
  cr_assert_eq(
      sh(s, "cp /usr/bin/id /tmp/suid-id && chmod 4755 /tmp/suid-id", &out), 0,
      "%s", out);
  free(out);
  cr_expect_eq(run_as(s, "sbxtester", NULL,
                      "id -un; /tmp/suid-id -u; " STATUS_CMD, &out),
               0, "%s", out);
  cr_expect(strncmp(out, "sbxtester\n", 10) == 0, "%s", out);
  cr_expect(strncmp(out + 10, "0\n", 2) != 0,
            "a setuid-root binary ran as root: %s", out);
  cr_expect_neq(strstr(out, "NoNewPrivs:1\n"), NULL, "%s", out);
  free(out);
  close_sandbox(s);
  unlink(made);
  rmdir(host_dir);
}

Test(docker, userns_host_and_no_limits) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.userns = DOCKER_USERNS_HOST;
  o.docker.memory_bytes = DOCKER_NO_LIMIT;
  o.docker.pids_limit = DOCKER_NO_LIMIT;
  struct sandbox *s = create(&o);
  unsigned long map[3];
  uid_map(s, map);
  cr_expect(map[0] == 0 && map[1] == 0 && map[2] == 4294967295ul,
            "not the host's ids: %lu %lu %lu", map[0], map[1], map[2]);
  char *out = NULL;
  cr_expect_eq(sh(s, STATUS_CMD, &out), 0, "%s", out);
  cr_expect_str_eq(out, CONFINED, "capabilities do not depend on userns");
  free(out);
  char *mem = first_of(s, "/sys/fs/cgroup/memory.max",
                       "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  cr_expect(strcmp(mem, "max\n") == 0 || strlen(mem) > 15, "memory: %s", mem);
  char *pids =
      first_of(s, "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max");
  cr_expect_str_eq(pids, "max\n");
  free(mem);
  free(pids);
  close_sandbox(s);
}

/* What the workload tries on the runtime directory; each must fail: there
 * is nothing writable in it, nor a token. */
#define TAMPER                                                                 \
  "for c in 'mv /run/sbx/sandboxd.sock /run/sbx/moved' "                       \
  "'rm -f /run/sbx/sandboxd.sock' 'ln -sf /tmp/evil /run/sbx/sandboxd.sock' "  \
  "'chmod 0 /run/sbx/sandboxd.sock' 'touch /run/sbx/new' "                     \
  "'mkdir -p /run/sbx/listen' 'touch /run/sbx/listen/new' "                    \
  "'ln -sf /etc/passwd /run/sbx/listen/sandboxd.sock' "                        \
  "'umount -l /run/sbx' 'mount -o remount,rw /run/sbx' "                       \
  "'mount -t tmpfs none /run/sbx'; do "                                        \
  "$c 2>/dev/null && echo \"done: $c\"; done; "                                \
  "test -S /run/sbx/sandboxd.sock && echo socket-kept; "                       \
  "cat /run/sbx/token /run/sbx/listen/token 2>/dev/null || echo no-token"

Test(docker, runtime_directory_out_of_the_workloads_reach) {
  struct opts o;
  base_options(&o, IMAGE);
  struct sandbox *s = create(&o);
  char *out = NULL;
  cr_expect_eq(sh(s, "ls -A /run/sbx; " TAMPER, &out), 0, "%s", out);
  cr_expect_str_eq(out, "sandboxd.sock\nsocket-kept\nno-token\n");
  free(out);
  cr_expect_eq(sh(s, "echo still", &out), 0);
  cr_expect_str_eq(out, "still\n");
  free(out);

  /* The same after a stop and a start: the token, written anew, is
   * removed by sandboxd, and the directory it listened in is gone. */
  struct sbx_error e = {0};
  cr_assert_eq(backend_docker.stop(s, &e), 0, "%s", e.msg);
  cr_assert_eq(backend_docker.start(s, &e), 0, "%s", e.msg);
  cr_expect_eq(sh(s, TAMPER, &out), 0, "%s", out);
  cr_expect_str_eq(out, "socket-kept\nno-token\n");
  free(out);
  close_sandbox(s);
}

Test(docker, resume_live_container) {
  struct opts o;
  base_options(&o, IMAGE);
  o.b.heartbeat_ms = 4000;
  struct sandbox *s = create(&o);
  char *out = NULL;
  /* The heartbeat is recorded, for the commands that attach later. */
  json_t *saved = json_object();
  cr_assert_eq(backend_docker.save(s, saved), 0);
  cr_expect_eq(json_integer_value(json_object_get(saved, "heartbeat_ms")),
               4000);
  json_decref(saved);
  cr_expect_eq(sh(s, "echo kept > /workspace/state", &out), 0, "%s", out);
  free(out);
  char session[37], id[128], token[SBX_TOKEN_HEX + 1];
  memcpy(session, s->session_id, sizeof(session));
  (void)snprintf(id, sizeof(id), "%s", docker_container_id(s));
  (void)snprintf(token, sizeof(token), "%s", docker_token(s));
  /* A process started before the controller went away. */
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "sleep 300";
  st.shell = "/bin/sh";
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_start(s->client, &st, &r, &e), 0, "%s", e.msg);
  uint64_t exec_id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  docker_detach(s);

  struct docker_resume_args a = {session, id, token};
  struct sandbox *back = NULL;
  cr_assert_eq(docker_resume(&o.b, &a, &back, &e), 0, "%s", e.msg);
  cr_expect_str_eq(back->session_id, session);
  cr_expect_str_eq(back->root, "/workspace");
  cr_expect_eq(sh(back, "cat /workspace/state", &out), 0);
  cr_expect_str_eq(out, "kept\n");
  free(out);
  /* sandboxd still knows the process started before. */
  cr_expect_eq(sbx_exec_list(back->client, &r, &e), 0, "%s", e.msg);
  bool found = false;
  for (size_t i = 0; r && i < r->exec_list->n_execs; i++)
    found |= r->exec_list->execs[i]->exec_id == exec_id;
  cr_expect(found, "exec %llu is gone after resume",
            (unsigned long long)exec_id);
  sbx_client_reply_free(r);
  close_sandbox(back);
  cr_expect_null(inspect(id));

  /* Once removed, there is nothing to resume. */
  cr_expect_eq(docker_resume(&o.b, &a, &back, &e), -ENOENT);
  cr_expect_neq(strstr(e.msg, "is gone"), NULL, "%s", e.msg);
}

Test(docker, resume_refuses_another_session_or_token) {
  struct opts o;
  base_options(&o, IMAGE);
  struct sandbox *s = create(&o);
  char session[37], id[128], token[SBX_TOKEN_HEX + 1];
  memcpy(session, s->session_id, sizeof(session));
  (void)snprintf(id, sizeof(id), "%s", docker_container_id(s));
  (void)snprintf(token, sizeof(token), "%s", docker_token(s));
  docker_detach(s);

  struct sbx_error e = {0};
  struct sandbox *back = NULL;
  char other[37];
  cr_assert_eq(sbx_random_uuid(other), 0);
  struct docker_resume_args a = {other, id, token};
  cr_expect_eq(docker_resume(&o.b, &a, &back, &e), -EPERM);
  cr_expect_neq(strstr(e.msg, "belongs to session"), NULL, "%s", e.msg);
  cr_expect_null(back);

  char wrong[SBX_TOKEN_HEX + 1];
  cr_assert_eq(sbx_random_hex(wrong, SBX_TOKEN_BYTES), 0);
  a = (struct docker_resume_args){session, id, wrong};
  cr_expect_eq(docker_resume(&o.b, &a, &back, &e), -EACCES);
  cr_expect_neq(strstr(e.msg, "did not prove it holds the sandbox's secret"),
                NULL, "%s", e.msg);
  cr_expect_null(back);

  /* Refusals leave the container alone; the rightful owner gets it. */
  json_t *j = inspect(id);
  cr_expect_not_null(j);
  json_decref(j);
  a = (struct docker_resume_args){session, id, token};
  cr_assert_eq(docker_resume(&o.b, &a, &back, &e), 0, "%s", e.msg);
  close_sandbox(back);
}

Test(docker, engine_errors_show_the_engine_message) {
  struct opts o;
  base_options(&o, IMAGE);
  struct sbx_error e = {0};
  struct sandbox *s = NULL;
  /* The engine refuses a memory limit below its minimum, in its words. */
  o.docker.memory_bytes = 1 << 20;
  int r = backend_docker.create(&o.b, NULL, &s, &e);
  cr_expect_lt(r, 0);
  cr_expect_null(s);
  cr_expect_neq(strstr(e.msg, "container engine: "), NULL, "%s", e.msg);
  cr_expect_neq(strstr(e.msg, "memory"), NULL, "%s", e.msg);
  cr_expect_neq(strstr(e.msg, "HTTP "), NULL, "%s", e.msg);

  /* A baked image without sandboxd: the engine cannot start it. */
  base_options(&o, IMAGE_BARE);
  o.docker.sandboxd_mode = DOCKER_SANDBOXD_BAKED;
  r = backend_docker.create(&o.b, NULL, &s, &e);
  cr_expect_lt(r, 0);
  cr_expect_neq(strstr(e.msg, "/usr/local/bin/sandboxd"), NULL, "%s", e.msg);

  /* A missing image, with and without pulling (offline: the pull fails). */
  base_options(&o, "localhost/sbx-no-such-image:none");
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -ENOENT);
  cr_expect_neq(strstr(e.msg, "pulling is off"), NULL, "%s", e.msg);
  o.docker.never_pull = false;
  r = backend_docker.create(&o.b, NULL, &s, &e);
  cr_expect_lt(r, 0);
  cr_expect_neq(strstr(e.msg, "sbx-no-such-image"), NULL, "%s", e.msg);
}

Test(docker, sandboxd_failure_shows_its_output) {
  struct opts o;
  base_options(&o, IMAGE);
  o.b.seccomp = "bogus"; /* sandboxd refuses it and exits */
  struct sbx_error e = {0};
  struct sandbox *s = NULL;
  cr_expect_lt(backend_docker.create(&o.b, NULL, &s, &e), 0);
  cr_expect_neq(strstr(e.msg, "stopped"), NULL, "%s", e.msg);
  cr_expect_neq(strstr(e.msg, "bogus"), NULL, "%s", e.msg);
}

Test(docker, unreachable_engine_is_named) {
  struct opts o;
  base_options(&o, IMAGE);
  o.docker.host = NO_ENGINE;
  struct sbx_error e = {0};
  struct sandbox *s = NULL;
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -ENOENT);
  cr_expect_neq(strstr(e.msg, "cannot reach the container engine"), NULL, "%s",
                e.msg);
  o.docker.host = "tcp://127.0.0.1:2375";
  cr_expect_eq(backend_docker.create(&o.b, NULL, &s, &e), -ENOTSUP);
  cr_expect_neq(strstr(e.msg, "only unix://"), NULL, "%s", e.msg);
}

Test(docker, options_merge_run_over_client) {
  const uint16_t cports[] = {80, 443};
  struct docker_options client = {.image = "a",
                                  .network_mode = "none",
                                  .memory_bytes = 1,
                                  .exposed_ports = cports,
                                  .n_exposed_ports = 2};
  struct docker_options run = {.image = "b", .pids_limit = 5};
  struct docker_options m;
  docker_options_merge(&client, &run, &m);
  cr_expect_str_eq(m.image, "b");
  cr_expect_str_eq(m.network_mode, "none");
  cr_expect_eq(m.memory_bytes, 1);
  cr_expect_eq(m.pids_limit, 5);
  cr_expect_eq(m.n_exposed_ports, 2);
  docker_options_merge(NULL, &run, &m);
  cr_expect_null(m.network_mode);
}

/* ---- a scripted engine ---- */

/* Runs tests/support/fake_engine.py with FLAGS (after the socket and log;
 * NULL-terminated) and tries to create a sandbox with a published port and
 * USERNS through it; the requests it saw (new array) and the create's error
 * in *E. */
static json_t *create_through_fake(const char *const *flags,
                                   enum docker_userns userns,
                                   struct sbx_error *e) {
  char dir[] = "/tmp/sbx-fake-engine-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char sock[64], log[64], host[80];
  (void)snprintf(sock, sizeof(sock), "%s/engine.sock", dir);
  (void)snprintf(log, sizeof(log), "%s/requests.jsonl", dir);
  (void)snprintf(host, sizeof(host), "unix://%s", sock);
  const char *argv[12] = {
      "python3", SBX_SOURCE_DIR "/tests/support/fake_engine.py", sock, log};
  for (size_t i = 0; flags[i] && i + 5 < SBX_ARRAY_SIZE(argv); i++)
    argv[4 + i] = flags[i];
  pid_t pid = 0;
  test_pyserver_start(argv, "fake engine", &pid);
  struct opts o;
  memset(&o, 0, sizeof(o));
  o.b.own = &o.docker;
  o.docker.host = host;
  o.docker.image = "fake:latest";
  o.docker.sandboxd_static = STATIC_SANDBOXD;
  o.docker.never_pull = true;
  o.docker.userns = userns;
  const uint16_t ports[] = {8000};
  o.docker.exposed_ports = ports;
  o.docker.n_exposed_ports = 1;
  o.b.ready_timeout_ms = 3000;
  struct sandbox *s = NULL;
  cr_expect_lt(backend_docker.create(&o.b, NULL, &s, e), 0,
               "the fake engine's containers never run sandboxd");
  test_pyserver_stop(&pid);
  json_t *reqs = test_jsonl_read(log);
  (void)test_rm_rf(dir);
  return reqs;
}

static size_t count_requests(json_t *reqs, const char *method,
                             const char *path) {
  size_t n = 0, i;
  json_t *r;
  json_array_foreach(reqs, i, r) {
    if (strcmp(json_string_value(json_object_get(r, "method")), method) == 0 &&
        strcmp(json_string_value(json_object_get(r, "path")), path) == 0)
      n++;
  }
  return n;
}

/* Podman picks a published port's host port at create and binds it at
 * start; when another process took it in between, the container is made
 * again (at most three times). */
Test(docker_fake, start_that_finds_its_port_taken_makes_the_container_again) {
  struct sbx_error e = {0};
  const char *once[] = {"--busy-starts", "1", NULL};
  json_t *reqs = create_through_fake(once, DOCKER_USERNS_DEFAULT, &e);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/create"), 2);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/c1/start"), 1);
  cr_expect_eq(count_requests(reqs, "DELETE", "/containers/c1"), 1,
               "the first container is removed");
  cr_expect_eq(count_requests(reqs, "POST", "/containers/c2/start"), 1);
  /* The second one started; it then exited without sandboxd. */
  cr_expect(strstr(e.msg, "address already in use") == NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "stopped") != NULL, "%s", e.msg);
  json_decref(reqs);

  /* Taken every time: three attempts, then the engine's error. */
  e = (struct sbx_error){0};
  const char *always[] = {"--busy-starts", "100", NULL};
  reqs = create_through_fake(always, DOCKER_USERNS_DEFAULT, &e);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/create"), 3);
  cr_expect_eq(count_requests(reqs, "DELETE", "/containers/c1"), 1);
  cr_expect_eq(count_requests(reqs, "DELETE", "/containers/c2"), 1);
  cr_expect(strstr(e.msg, "address already in use") != NULL, "%s", e.msg);
  json_decref(reqs);
}

/* The UsernsMode of the Nth create in REQS ("" when it had none). */
static const char *create_userns(json_t *reqs, size_t n) {
  size_t i, k = 0;
  json_t *r;
  json_array_foreach(reqs, i, r) {
    if (strcmp(json_string_value(json_object_get(r, "path")),
               "/containers/create") != 0)
      continue;
    if (k++ == n) {
      const char *u = json_string_value(json_object_get(r, "userns"));
      return u ? u : "";
    }
  }
  return NULL;
}

/* A Podman without subordinate ids for "containers" refuses a user
 * namespace: by default the container is made without one; asked for
 * ("auto"), the error says how to set it up. Docker without userns-remap
 * has none to give, which "auto" learns before anything is created. */
Test(docker_fake, a_user_namespace_the_engine_cannot_give) {
  const char *podman[] = {"--podman", "--no-subids", NULL};
  struct sbx_error e = {0};
  json_t *reqs = create_through_fake(podman, DOCKER_USERNS_DEFAULT, &e);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/create"), 2);
  cr_expect_str_eq(create_userns(reqs, 0), "auto:size=65536");
  cr_expect_str_eq(create_userns(reqs, 1), "");
  cr_expect(strstr(e.msg, "stopped") != NULL, "%s", e.msg);
  json_decref(reqs);

  e = (struct sbx_error){0};
  reqs = create_through_fake(podman, DOCKER_USERNS_AUTO, &e);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/create"), 1);
  cr_expect_eq(e.err, ENOTSUP);
  cr_expect(strstr(e.msg, "userns \"auto\"") && strstr(e.msg, "/etc/subuid") &&
                strstr(e.msg, "enough available IDs"),
            "%s", e.msg);
  json_decref(reqs);

  /* Podman with ids: asked for, "host" is said, the default is "auto". */
  const char *ok[] = {"--podman", NULL};
  e = (struct sbx_error){0};
  reqs = create_through_fake(ok, DOCKER_USERNS_HOST, &e);
  cr_expect_str_eq(create_userns(reqs, 0), "host");
  json_decref(reqs);

  const char *docker[] = {NULL};
  e = (struct sbx_error){0};
  reqs = create_through_fake(docker, DOCKER_USERNS_AUTO, &e);
  cr_expect_eq(count_requests(reqs, "POST", "/containers/create"), 0);
  cr_expect(strstr(e.msg, "--userns-remap") != NULL, "%s", e.msg);
  json_decref(reqs);
  e = (struct sbx_error){0};
  reqs = create_through_fake(docker, DOCKER_USERNS_DEFAULT, &e);
  cr_expect_str_eq(create_userns(reqs, 0), "", "Docker maps by its daemon");
  json_decref(reqs);

  /* A Docker daemon that remaps gives "auto" by itself. */
  const char *remap[] = {"--remap", NULL};
  e = (struct sbx_error){0};
  reqs = create_through_fake(remap, DOCKER_USERNS_AUTO, &e);
  cr_expect_str_eq(create_userns(reqs, 0), "");
  cr_expect(strstr(e.msg, "stopped") != NULL, "%s", e.msg);
  json_decref(reqs);
}

/* The workspace is at the manifest's root, as the SDK's docker sandbox
 * mounts it; a root option that contradicts it is refused before anything
 * is made. */
Test(docker, manifest_root_places_the_workspace) {
  struct opts o;
  base_options(&o, IMAGE);
  struct sandbox_spec spec = {.root = "/srv/app"};
  struct sandbox *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(backend_docker.create(&o.b, &spec, &s, &e), 0, "%s", e.msg);
  cr_expect_str_eq(s->root, "/srv/app");
  char *out = NULL;
  cr_expect_eq(sh(s, "pwd", &out), 0, "%s", out);
  cr_expect_str_eq(out, "/srv/app\n");
  free(out);
  close_sandbox(s);
  s = NULL;
  o.docker.root = "/elsewhere";
  cr_expect_eq(backend_docker.create(&o.b, &spec, &s, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "the manifest's root \"/srv/app\" and the root "
                          "option \"/elsewhere\" differ: give the "
                          "workspace's place once");
  cr_expect_null(s);
  /* A manifest at the default root goes where the option says. */
  spec.root = "/workspace";
  cr_assert_eq(backend_docker.create(&o.b, &spec, &s, &e), 0, "%s", e.msg);
  cr_expect_str_eq(s->root, "/elsewhere");
  close_sandbox(s);
}
