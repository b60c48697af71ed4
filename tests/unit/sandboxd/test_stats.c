/* The Stats numbers from fake cgroup and /proc files (stats_read), and
 * the handler's refusal of a request without its body. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/stats/stats.h"
#include "tests/support/sbxrun.h"

static char root[64];

static void setup(void) {
  (void)snprintf(root, sizeof(root), "/tmp/sbx-stats-test-XXXXXX");
  cr_assert_not_null(mkdtemp(root));
}

static void teardown(void) {
  (void)test_rm_rf(root);
}

TestSuite(stats, .init = setup, .fini = teardown);

/* Writes TEXT to ROOT/REL, making its directories. */
static void put(const char *rel, const char *text) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s%s", root, rel);
  for (char *s = p + strlen(root) + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      (void)mkdir(p, 0700);
      *s = '/';
    }
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s", p);
  fputs(text, f);
  fclose(f);
}

/* A /proc/PID/stat line with PPID, UTIME+STIME ticks and RSS pages. */
static void proc(int pid, int ppid, unsigned ticks, unsigned rss) {
  char rel[64], text[512];
  (void)snprintf(rel, sizeof(rel), "/proc/%d/stat", pid);
  /* A command name with a space and a ')' in it, as a hostile one may. */
  (void)snprintf(text, sizeof(text),
                 "%d (a) b) S %d 1 1 0 -1 4194304 10 0 0 0 %u 0 0 0 20 0 1 "
                 "0 100 1000 %u 18446744073709551615\n",
                 pid, ppid, ticks, rss);
  put(rel, text);
}

Test(stats, reads_the_cgroup_at_the_namespace_root) {
  put("/proc/self/cgroup", "0::/\n");
  put("/sys/fs/cgroup/cpu.stat", "usage_usec 1234567\nuser_usec 1\n");
  put("/sys/fs/cgroup/memory.current", "1048576\n");
  put("/sys/fs/cgroup/memory.peak", "2097152\n");
  put("/sys/fs/cgroup/memory.max", "max\n");
  put("/sys/fs/cgroup/pids.current", "7\n");
  put("/sys/fs/cgroup/pids.max", "512\n");
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_assert_eq(stats_read(root, 1, &s), 0);
  cr_expect_str_eq(s.source, "cgroup");
  cr_expect_eq(s.cpu_usec, 1234567);
  cr_expect_eq(s.memory_bytes, 1048576);
  cr_expect_eq(s.memory_peak_bytes, 2097152);
  cr_expect_eq(s.memory_limit_bytes, 0, "\"max\" is no limit");
  cr_expect_eq(s.pids, 7);
  cr_expect_eq(s.pids_limit, 512);
}

/* cgroup v1 as a container sees it: each hierarchy mounted with the
 * container's cgroup as its root. */
Test(stats, reads_v1_hierarchies_mounted_at_its_own_cgroup) {
  put("/proc/self/cgroup", "9:pids:/pod/c1\n4:memory:/pod/c1\n"
                           "2:cpu,cpuacct:/pod/c1\n0::/pod/c1\n");
  put("/proc/self/mountinfo",
      "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"
      "30 1 0:26 /pod/c1 /sys/fs/cgroup/memory ro - cgroup cgroup "
      "rw,memory\n"
      "31 1 0:27 /pod/c1 /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup "
      "rw,cpu,cpuacct\n"
      "32 1 0:28 /pod/c1 /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n");
  put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "4096\n");
  put("/sys/fs/cgroup/memory/memory.max_usage_in_bytes", "8192\n");
  put("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  put("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage", "5000000\n");
  put("/sys/fs/cgroup/pids/pids.current", "3\n");
  put("/sys/fs/cgroup/pids/pids.max", "77\n");
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_assert_eq(stats_read(root, 1, &s), 0);
  cr_expect_str_eq(s.source, "cgroup");
  cr_expect_eq(s.memory_bytes, 4096);
  cr_expect_eq(s.memory_peak_bytes, 8192);
  cr_expect_eq(s.memory_limit_bytes, 0, "the v1 \"no limit\" number");
  cr_expect_eq(s.cpu_usec, 5000);
  cr_expect_eq(s.pids, 3);
  cr_expect_eq(s.pids_limit, 77);
}

/* A host's v1 mounts hold the whole hierarchy (root "/"): not ours. */
Test(stats, a_hosts_v1_hierarchy_is_not_the_sandboxs) {
  put("/proc/self/cgroup", "4:memory:/user.slice\n0::/user.slice\n");
  put("/proc/self/mountinfo",
      "30 1 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  put("/sys/fs/cgroup/memory/memory.usage_in_bytes", "4096\n");
  proc(7, 1, 1, 1);
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_assert_eq(stats_read(root, 7, &s), 0);
  cr_expect_str_eq(s.source, "proc");
}

/* A cgroup that is not the namespace's root (the host's session, shared
 * with everything else) is not the sandbox's: /proc is summed instead,
 * over sandboxd and its descendants only. */
Test(stats, sums_sandboxd_and_its_descendants_elsewhere) {
  put("/proc/self/cgroup", "0::/user.slice/session-1.scope\n");
  put("/sys/fs/cgroup/cpu.stat", "usage_usec 99\n");
  put("/sys/fs/cgroup/memory.current", "99\n");
  long hz = sysconf(_SC_CLK_TCK);
  proc(1, 0, 1000, 1000); /* init: not ours */
  proc(40, 1, 5, 10);     /* sandboxd */
  proc(41, 40, 7, 20);    /* its child */
  proc(42, 41, 11, 30);   /* a grandchild */
  proc(43, 1, 500, 500);  /* a stranger */
  proc(39, 43, 500, 500); /* the stranger's child, listed first */
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_assert_eq(stats_read(root, 40, &s), 0);
  cr_expect_str_eq(s.source, "proc");
  cr_expect_eq(s.pids, 3);
  cr_expect_eq(s.cpu_usec, 23u * (1000000u / (unsigned)hz));
  cr_expect_eq(s.memory_bytes, 60u * (uint64_t)sysconf(_SC_PAGESIZE));
  cr_expect_eq(s.memory_peak_bytes, 0, "no peak from /proc");
}

/* At the namespace root without a readable cpu.stat (no /sys/fs/cgroup
 * mounted, as in an isolated local sandbox): /proc. */
Test(stats, falls_back_to_proc_without_the_cgroup_files) {
  put("/proc/self/cgroup", "0::/\n");
  proc(1, 0, 3, 4);
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_assert_eq(stats_read(root, 1, &s), 0);
  cr_expect_str_eq(s.source, "proc");
  cr_expect_eq(s.pids, 1);
}

Test(stats, no_proc_is_an_error) {
  Sbx__V1__StatsReply s = SBX__V1__STATS_REPLY__INIT;
  cr_expect_eq(stats_read(root, 1, &s), -ENOENT);
}

Test(stats, a_request_without_its_body_is_refused) {
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_HELLO;
  Sbx__V1__Response resp = SBX__V1__RESPONSE__INIT;
  struct rpc_call c = {.req = &req, .resp = &resp};
  cr_expect_eq(rpc_stats(&c), -EINVAL);
  cr_expect_eq(c.err.code, SBX_INVALID_ARGUMENT);
  cr_expect_str_eq(c.err.msg, "missing request body");
}
