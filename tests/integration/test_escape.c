/* The escape suite on the local backend, isolated (the default): a hostile
 * command inside reaches nothing of the host, the controller or another
 * sandbox (tests/support/escape.c has the probes). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/daemon.h"
#include "tests/support/escape.h"
#include "tests/support/sbxrun.h"

static struct escape_ctx ctx;
static const char *const local_args[] = {NULL};

static void setup(void) {
  escape_setup(&ctx, local_args, false);
}
static void teardown(void) {
  escape_teardown(&ctx);
}

TestSuite(escape, .init = setup, .fini = teardown, .timeout = 180);

ESCAPE_TESTS(escape, ctx)

/* A read-only grant is read-only for a shell too; a read-write one is
 * written through. */
Test(escape, read_only_grant_written_by_a_shell) {
  char ro[128], rw[128], m[512];
  (void)snprintf(ro, sizeof(ro), "%s/ro", ctx.dir);
  (void)snprintf(rw, sizeof(rw), "%s/rw", ctx.dir);
  cr_assert_eq(mkdir(ro, 0755), 0);
  cr_assert_eq(mkdir(rw, 0755), 0);
  test_write_file(ro, "keep.txt", "original\n");
  (void)snprintf(m, sizeof(m),
                 "{\"extra_path_grants\": [{\"path\": \"%s\", \"read_only\": "
                 "true}, {\"path\": \"%s\"}]}",
                 ro, rw);
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s",
                 test_write_file(ctx.dir, "grants.json", m));
  char *id = escape_create(&ctx, (const char *const[]){"--manifest", mp, NULL});
  char script[1024], *out = NULL;
  (void)snprintf(script, sizeof(script),
                 "echo changed > %s/keep.txt; echo x > %s/new.txt; rm -f "
                 "%s/keep.txt; chmod 777 %s; cat %s/keep.txt; echo w > "
                 "%s/w.txt",
                 ro, ro, ro, ro, ro, rw);
  cr_expect_eq(escape_sh(&ctx, id, script, &out), 0, "%s", out);
  cr_expect(strstr(out, "original"), "%s", out);
  free(out);
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/new.txt", ro);
  struct stat st;
  cr_expect_neq(stat(p, &st), 0);
  cr_expect_eq(stat(ro, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0755);
  (void)snprintf(p, sizeof(p), "%s/w.txt", rw);
  cr_expect_eq(stat(p, &st), 0, "the read-write grant was written through");
  free(id);
}

/* A host that cannot isolate gets an error naming what is missing, never a
 * sandbox without isolation: here user namespaces are switched off in a
 * namespace of the test's own (the limit is per user namespace). */
Test(escape, a_host_that_cannot_isolate_is_told_why) {
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "unshare --user --map-root-user sh -c 'echo 0 > "
                 "/proc/sys/user/max_user_namespaces && exec %s sandbox "
                 "--state-dir %s create' 2>&1",
                 test_sbx_path(), ctx.state);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char out[2048] = "";
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, out);
  cr_expect(strstr(out, "cannot create the sandbox's namespaces") &&
                strstr(out, "max_user_namespaces") &&
                strstr(out, "isolation \"none\""),
            "%s", out);
}

/* isolation "none" works as before and says so, once per sandbox. */
Test(escape, isolation_none_says_so) {
  struct sbx_run_out o;
  sbx_sandbox_run(&o, ctx.state,
                  (const char *const[]){"create", "--isolation", "none", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  cr_expect(strstr(o.err, "is not isolated (isolation \"none\")"), "%s", o.err);
  char id[32];
  (void)snprintf(id, sizeof(id), "%.12s", o.out);
  sbx_run_free(&o);
  char *out = NULL;
  cr_expect_eq(escape_sh(&ctx, id, "ls -d /proc/1/task && pwd", &out), 0, "%s",
               out);
  cr_expect(!strstr(out, "/workspace"), "the host's temporary workspace: %s",
            out);
  free(out);
}

/* An exposed port is forwarded from a free port on the host's 127.0.0.1
 * (the sandbox's network is its own: the same port number is not used). */
Test(escape, exposed_ports_are_forwarded_from_the_host_loopback) {
  char *id =
      escape_create(&ctx, (const char *const[]){"--expose", "8080", NULL});
  char *out = NULL;
  cr_assert_eq(escape_sh(&ctx, id,
                         "nohup python3 -c 'import socket\n"
                         "s=socket.socket()\n"
                         "s.bind((\"0.0.0.0\", 8080))\n"
                         "s.listen(1)\n"
                         "open(\"/tmp/listening\", \"w\").close()\n"
                         "c, _ = s.accept()\n"
                         "c.sendall(b\"from-the-sandbox\")\n"
                         "c.close()' >/dev/null 2>&1 &\n"
                         "while [ ! -e /tmp/listening ]; do sleep 0.05; done",
                         &out),
               0, "%s", out);
  free(out);
  struct sbx_run_out o;
  sbx_sandbox_run(&o, ctx.state,
                  (const char *const[]){"port", id, "8080", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  unsigned hp = 0;
  cr_assert_eq(sscanf(o.out, "127.0.0.1:%u", &hp), 1, "%s", o.out);
  sbx_run_free(&o);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)hp),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  char buf[64] = "";
  ssize_t n = 0, k;
  while ((k = read(fd, buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
    n += k;
  close(fd);
  cr_expect_str_eq(buf, "from-the-sandbox");
  free(id);
}

/* "sbx sandbox ARGS" as user nobody with HOME and TMPDIR in DIR, into CMD;
 * the copies of sbx and sandboxd in DIR run (the build tree may be closed
 * to nobody). */
static void as_nobody(char *cmd, size_t n, const char *dir, const char *args) {
  (void)snprintf(cmd, n,
                 "HOME=%s TMPDIR=%s setpriv --reuid=65534 --regid=65534 "
                 "--clear-groups %s/sbx sandbox --state-dir %s/state %s 2>&1",
                 dir, dir, dir, dir, args);
}

/* Run by an unprivileged user, the sandbox's root is that user; a limit
 * that needs a cgroup the user may not create is refused with the reason,
 * never dropped. */
Test(escape, an_unprivileged_user_isolates_as_itself) {
  if (geteuid() != 0)
    cr_skip_test("needs root to become another user");
  char dir[128], cmd[1024];
  (void)snprintf(dir, sizeof(dir), "%s/nobody", ctx.dir);
  cr_assert_eq(mkdir(dir, 0755), 0);
  cr_assert_eq(chown(dir, 65534, 65534), 0);
  cr_assert_eq(chmod(ctx.dir, 0755), 0);
  (void)snprintf(cmd, sizeof(cmd), "cp %s %s/sbx && cp %s %s/sandboxd",
                 test_sbx_path(), dir, test_sandboxd_path(), dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  as_nobody(cmd, sizeof(cmd), dir, "create --network none");
  FILE *p = popen(cmd, "r");
  char out[2048] = "";
  out[fread(out, 1, sizeof(out) - 1, p)] = '\0';
  cr_expect_neq(pclose(p), 0);
  cr_expect(strstr(out, "the memory limit needs a writable cgroup memory "
                        "controller") &&
                strstr(out, "set memory_bytes to 0"),
            "%s", out);
  as_nobody(cmd, sizeof(cmd), dir,
            "create --network none --memory-bytes 0 --pids-limit 0");
  p = popen(cmd, "r");
  char id[64] = "";
  id[fread(id, 1, sizeof(id) - 1, p)] = '\0';
  cr_assert_eq(pclose(p), 0, "%s", id);
  id[12] = '\0';
  char tail[128];
  (void)snprintf(tail, sizeof(tail),
                 "exec %s -- sh -c 'cat /proc/self/uid_map; touch f; stat -c "
                 "%%u f'",
                 id);
  as_nobody(cmd, sizeof(cmd), dir, tail);
  p = popen(cmd, "r");
  out[fread(out, 1, sizeof(out) - 1, p)] = '\0';
  cr_expect_eq(pclose(p), 0, "%s", out);
  unsigned in = 9, host = 9, count = 9, owner = 9;
  cr_expect_eq(sscanf(out, "%u %u %u %u", &in, &host, &count, &owner), 4, "%s",
               out);
  cr_expect(in == 0 && host == 65534 && count == 1 && owner == 0, "%s", out);
  (void)snprintf(tail, sizeof(tail), "rm %s", id);
  as_nobody(cmd, sizeof(cmd), dir, tail);
  (void)!system(cmd);
}

/* A size-limited workspace fills up inside the sandbox, not on the host;
 * being in memory, it cannot be stopped (that would lose it). */
Test(escape, a_size_limited_workspace_fills_up_and_is_not_stopped) {
  char *id = escape_create(
      &ctx, (const char *const[]){"--workspace-bytes", "1048576", NULL});
  char *out = NULL;
  cr_expect_neq(escape_sh(&ctx, id, "head -c 2000000 /dev/zero > big", &out), 0,
                "%s", out);
  cr_expect(strstr(out, "No space left on device"), "%s", out);
  free(out);
  cr_expect_eq(escape_sh(&ctx, id, "df -k . | tail -1", &out), 0, "%s", out);
  cr_expect(strstr(out, " 1024 "), "a 1 MiB workspace: %s", out);
  free(out);
  struct sbx_run_out o;
  sbx_sandbox_run(&o, ctx.state, (const char *const[]){"stop", id, NULL});
  cr_expect_neq(o.status, 0);
  cr_expect(strstr(o.err, "keeps its workspace in memory"), "%s", o.err);
  sbx_run_free(&o);
  cr_expect_eq(escape_sh(&ctx, id, "echo still", &out), 0, "%s", out);
  free(out);
  free(id);
}

/* The CPU limit is the sandbox's cgroup's quota, as the host sees it. */
Test(escape, the_cpu_limit_is_a_cgroup_quota) {
  if (access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", F_OK) != 0)
    cr_skip_test("no cgroup v1 cpu hierarchy here");
  char *id = escape_create(
      &ctx, (const char *const[]){"--cpus", "0.5", "--network", "none", NULL});
  char *out = NULL;
  cr_assert_eq(escape_sh(&ctx, id, "echo up", &out), 0, "%s", out);
  free(out);
  struct sbx_run_out o;
  sbx_sandbox_run(&o, ctx.state,
                  (const char *const[]){"info", "--json", id, NULL});
  json_t *j = json_loads(o.out, 0, NULL);
  sbx_run_free(&o);
  int sup = (int)json_integer_value(
      json_object_get(json_object_get(j, "local"), "pid"));
  json_decref(j);
  /* The sandbox's PID 1 is the supervisor's child; its cpu cgroup. */
  char path[640], line[512], cg[512] = "";
  (void)snprintf(path, sizeof(path), "/proc/%d/task/%d/children", sup, sup);
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  int pid1 = 0;
  cr_assert_eq(fscanf(f, "%d", &pid1), 1);
  fclose(f);
  (void)snprintf(path, sizeof(path), "/proc/%d/cgroup", pid1);
  f = fopen(path, "re");
  cr_assert_not_null(f);
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "%*d:cpu:%511s", cg) == 1)
      break;
  fclose(f);
  cr_assert(strstr(cg, "/sbx/sbx-"), "the sandbox's own cgroup: %s", cg);
  (void)snprintf(path, sizeof(path), "/sys/fs/cgroup/cpu%s/cpu.cfs_quota_us",
                 cg);
  f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  long quota = 0;
  cr_expect_eq(fscanf(f, "%ld", &quota), 1);
  fclose(f);
  cr_expect_eq(quota, 50000, "%s: %ld", path, quota);
  free(id);
}
