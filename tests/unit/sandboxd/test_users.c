/* UsersEnsure: the file-editing path against a temporary etc directory, and
 * (only as root with shadow's tools installed) the real system. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "sandboxd/users/userdb.h"
#include "sandboxd/users/users.h"
#include "shared/rand.h"
#include "tests/support/harness.h"

static struct harness h;
static char etc[128];

static const char *etcp(const char *name) {
  static char p[4][256];
  static int i;
  i = (i + 1) % 4;
  (void)snprintf(p[i], sizeof(p[i]), "%s/%s", etc, name);
  return p[i];
}

static void put(const char *name, const char *content, mode_t mode) {
  FILE *f = fopen(etcp(name), "w");
  cr_assert_not_null(f);
  fputs(content, f);
  fclose(f);
  cr_assert_eq(chmod(etcp(name), mode), 0);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&buf, &cap, '\0', f);
  fclose(f);
  if (n < 0) {
    free(buf);
    return strdup("");
  }
  return buf;
}

static void setup(void) {
  harness_init(&h);
  (void)snprintf(etc, sizeof(etc), "%s/etc", h.dir);
  cr_assert_eq(mkdir(etc, 0755), 0);
  put("passwd",
      "root:x:0:0:root:/root:/bin/bash\n"
      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
      "old:x:1000:1000::/home/old:/bin/sh\n",
      0644);
  put("group", "root:x:0:\nnogroup:x:65534:\nold:x:1000:\nstaff:x:50:\n", 0644);
  put("shadow", "root:*:19000:0:99999:7:::\nold:!:19000:0:99999:7:::\n", 0640);
  put("gshadow", "root:*::\nold:!::\nstaff:!::\n", 0640);
}

static void teardown(void) {
  harness_fini(&h);
}

TestSuite(users, .init = setup, .fini = teardown);

static int ensure_in_tmp(struct rpc_call *c) {
  return users_ensure_files(c, etc);
}

/* Builds and runs a request with the given groups and users. */
static struct harness_call *ensure(Sbx__V1__Group **groups, size_t ng,
                                   Sbx__V1__User **users, size_t nu,
                                   int (*fn)(struct rpc_call *)) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__UsersEnsure m = SBX__V1__USERS_ENSURE__INIT;
  m.groups = groups;
  m.n_groups = ng;
  m.users = users;
  m.n_users = nu;
  req.body_case = SBX__V1__REQUEST__BODY_USERS_ENSURE;
  req.users_ensure = &m;
  return harness_call(&h, &req, fn);
}

static void expect_created(struct harness_call *hc, const char *const *want,
                           size_t n) {
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_assert_eq(hc->resp.body_case, SBX__V1__RESPONSE__BODY_USERS_ENSURE);
  Sbx__V1__UsersEnsureReply *r = hc->resp.users_ensure;
  cr_expect_eq(r->n_created, n, "created %zu, want %zu", r->n_created, n);
  for (size_t i = 0; i < n && i < r->n_created; i++)
    cr_expect_str_eq(r->created[i], want[i], "created[%zu]", i);
}

static bool in_groups(const struct userdb_user *u, gid_t g) {
  for (size_t i = 0; i < u->ngroups; i++)
    if (u->groups[i] == g)
      return true;
  return false;
}

Test(users, files_create_then_idempotent) {
  char home[256];
  (void)snprintf(home, sizeof(home), "%s/home-bob", h.dir);
  char *alice_groups[] = {"extra"};
  char *dev_members[] = {"alice", "old"};
  Sbx__V1__Group dev = SBX__V1__GROUP__INIT;
  dev.name = "dev";
  dev.members = dev_members;
  dev.n_members = 2;
  Sbx__V1__Group staff = SBX__V1__GROUP__INIT; /* exists already */
  staff.name = "staff";
  Sbx__V1__User alice = SBX__V1__USER__INIT;
  alice.name = "alice";
  alice.groups = alice_groups;
  alice.n_groups = 1;
  Sbx__V1__User bob = SBX__V1__USER__INIT;
  bob.name = "bob";
  bob.uid = 2000;
  bob.shell = "/bin/bash";
  bob.home = home;
  Sbx__V1__User old = SBX__V1__USER__INIT; /* exists already */
  old.name = "old";
  Sbx__V1__Group *groups[] = {&dev, &staff};
  Sbx__V1__User *users[] = {&alice, &bob, &old};

  struct harness_call *hc = ensure(groups, 2, users, 3, ensure_in_tmp);
  const char *want[] = {"group:dev",  "group:extra", "group:alice",
                        "user:alice", "group:bob",   "user:bob"};
  expect_created(hc, want, 6);
  harness_call_free(hc);

  struct userdb_user u;
  gid_t dev_gid, extra_gid;
  cr_assert_eq(userdb_group(etc, "dev", &dev_gid), 0);
  cr_assert_eq(userdb_group(etc, "extra", &extra_gid), 0);
  cr_expect_eq(dev_gid, 1001, "the lowest free gid from 1000");
  cr_expect_eq(extra_gid, 1002);
  cr_assert_eq(userdb_user(etc, "alice", &u), 0);
  cr_expect_eq(u.uid, 1001, "the lowest free uid from 1000");
  cr_expect_eq(u.gid, 1003, "uid 1001 is taken as a gid: the next free");
  cr_expect_str_eq(u.shell, "/usr/sbin/nologin");
  cr_expect_str_eq(u.home, "/home/alice");
  cr_expect(in_groups(&u, dev_gid), "alice is in dev");
  cr_expect(in_groups(&u, extra_gid), "alice is in extra");
  cr_assert_eq(userdb_user(etc, "bob", &u), 0);
  cr_expect_eq(u.uid, 2000);
  cr_expect_eq(u.gid, 2000, "the private group takes the uid's number");
  cr_expect_str_eq(u.shell, "/bin/bash");
  cr_expect_str_eq(u.home, home);
  struct stat st;
  cr_assert_eq(stat(home, &st), 0, "bob's home is created");
  cr_expect_eq(st.st_mode & 07777, 0700);
  if (getuid() == 0)
    cr_expect_eq(st.st_uid, 2000);
  cr_assert_eq(userdb_user(etc, "old", &u), 0);
  cr_expect(in_groups(&u, dev_gid), "an existing user joins dev");

  char *gs = slurp(etcp("gshadow"));
  cr_expect(strstr(gs, "\ndev:!::alice,old\n") != NULL, "gshadow: %s", gs);
  free(gs);
  char *sh = slurp(etcp("shadow"));
  cr_expect(strstr(sh, "\nalice:!:") != NULL, "shadow: %s", sh);
  cr_expect(strstr(sh, "\nbob:!:") != NULL);
  free(sh);
  char *pw = slurp(etcp("passwd"));
  cr_expect(strstr(pw, "\nalice:x:1001:1003::/home/alice:/usr/sbin/nologin\n"),
            "passwd: %s", pw);
  cr_expect(strncmp(pw, "root:x:0:0:root:/root:/bin/bash\n", 32) == 0,
            "existing lines are kept");
  cr_assert_eq(stat(etcp("shadow"), &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0640, "shadow keeps its mode");

  /* No temporary files are left in etc. */
  char cmd[300];
  (void)snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 5", etc);
  cr_expect_eq(system(cmd), 0,
               "etc holds passwd, group, shadow, gshadow and "
               ".pwd.lock only");

  /* A second run changes nothing and reports nothing. */
  char *before = slurp(etcp("group"));
  hc = ensure(groups, 2, users, 3, ensure_in_tmp);
  expect_created(hc, NULL, 0);
  harness_call_free(hc);
  char *after = slurp(etcp("group"));
  cr_expect_str_eq(after, before, "the second run is a no-op");
  char *pw2 = slurp(etcp("passwd"));
  cr_expect_str_eq(pw2, pw);
  free(before);
  free(after);
  free(pw);
  free(pw2);
}

Test(users, files_without_shadow) {
  cr_assert_eq(unlink(etcp("shadow")), 0);
  cr_assert_eq(unlink(etcp("gshadow")), 0);
  char *members[] = {"nobody"};
  Sbx__V1__Group g = SBX__V1__GROUP__INIT;
  g.name = "ops";
  g.gid = 3000;
  g.members = members;
  g.n_members = 1;
  Sbx__V1__Group *groups[] = {&g};
  struct harness_call *hc = ensure(groups, 1, NULL, 0, ensure_in_tmp);
  const char *want[] = {"group:ops"};
  expect_created(hc, want, 1);
  harness_call_free(hc);
  char *gr = slurp(etcp("group"));
  cr_expect(strstr(gr, "\nops:!:3000:nobody\n") != NULL, "group: %s", gr);
  free(gr);
  cr_expect_neq(access(etcp("shadow"), F_OK), 0, "no shadow is made up");
}

Test(users, files_refuse_bad_input_and_change_nothing) {
  char *before = slurp(etcp("passwd"));
  char *gbefore = slurp(etcp("group"));
  const char *bad[] = {"Alice",  "a:b",
                       "9lives", "",
                       "x\ny",   "a-very-long-name-that-is-over-32-chars"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    Sbx__V1__User u = SBX__V1__USER__INIT;
    u.name = (char *)bad[i];
    Sbx__V1__User *users[] = {&u};
    struct harness_call *hc = ensure(NULL, 0, users, 1, ensure_in_tmp);
    cr_expect_lt(hc->rc, 0, "user name \"%s\" must be refused", bad[i]);
    cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT, "%s",
                 hc->call.err.msg);
    harness_call_free(hc);
  }
  /* A good group before a bad member: nothing at all is created. */
  char *members[] = {"ok", "Bad"};
  Sbx__V1__Group g = SBX__V1__GROUP__INIT;
  g.name = "fine";
  g.members = members;
  g.n_members = 2;
  Sbx__V1__Group *groups[] = {&g};
  struct harness_call *hc = ensure(groups, 1, NULL, 0, ensure_in_tmp);
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT, "%s", hc->call.err.msg);
  harness_call_free(hc);

  Sbx__V1__User u = SBX__V1__USER__INIT;
  u.name = "carol";
  u.shell = "/bin/sh:evil";
  Sbx__V1__User *users[] = {&u};
  hc = ensure(NULL, 0, users, 1, ensure_in_tmp);
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT, "%s", hc->call.err.msg);
  harness_call_free(hc);

  char *after = slurp(etcp("passwd"));
  char *gafter = slurp(etcp("group"));
  cr_expect_str_eq(after, before);
  cr_expect_str_eq(gafter, gbefore);
  free(before);
  free(after);
  free(gbefore);
  free(gafter);

  /* A taken uid, an unknown member. */
  u.shell = "";
  u.uid = 1000;
  hc = ensure(NULL, 0, users, 1, ensure_in_tmp);
  cr_expect_eq(hc->call.err.code, SBX_CONFLICT, "%s", hc->call.err.msg);
  cr_expect(strstr(hc->call.err.msg, "uid 1000") != NULL, "%s",
            hc->call.err.msg);
  harness_call_free(hc);
  char *ghost[] = {"ghost"};
  g.name = "haunted";
  g.members = ghost;
  g.n_members = 1;
  hc = ensure(groups, 1, NULL, 0, ensure_in_tmp);
  cr_expect_eq(hc->call.err.code, SBX_NOT_FOUND, "%s", hc->call.err.msg);
  cr_expect(strstr(hc->call.err.msg, "\"ghost\"") != NULL, "%s",
            hc->call.err.msg);
  harness_call_free(hc);
}

struct racer {
  Sbx__V1__User **users;
  size_t n;
  size_t created;
  int rc;
};

static void *race(void *arg) {
  struct racer *r = arg;
  struct harness_call *hc = ensure(NULL, 0, r->users, r->n, ensure_in_tmp);
  r->rc = hc->rc;
  if (hc->rc == 0)
    r->created = hc->resp.users_ensure->n_created;
  harness_call_free(hc);
  return NULL;
}

Test(users, files_concurrent_requests_create_once) {
  Sbx__V1__User a = SBX__V1__USER__INIT, b = SBX__V1__USER__INIT;
  a.name = "erin";
  b.name = "frank";
  Sbx__V1__User *users[] = {&a, &b};
  struct racer rs[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    rs[i] = (struct racer){.users = users, .n = 2};
    cr_assert_eq(pthread_create(&th[i], NULL, race, &rs[i]), 0);
  }
  size_t total = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    cr_expect_eq(rs[i].rc, 0);
    total += rs[i].created;
  }
  cr_expect_eq(total, 4, "two users and two groups, created once in all");
  char *pw = slurp(etcp("passwd"));
  char *first = strstr(pw, "\nerin:");
  cr_expect_not_null(first);
  cr_expect_null(first ? strstr(first + 1, "\nerin:") : NULL,
                 "one line per user: %s", pw);
  free(pw);
}

Test(users, needs_root) {
  h.d.is_root = false;
  Sbx__V1__User u = SBX__V1__USER__INIT;
  u.name = "dave";
  Sbx__V1__User *users[] = {&u};
  struct harness_call *hc = ensure(NULL, 0, users, 1, rpc_users_ensure);
  cr_expect_lt(hc->rc, 0);
  cr_expect_eq(hc->call.err.code, SBX_PERMISSION_DENIED);
  cr_expect_str_eq(hc->call.err.msg,
                   "creating users needs sandboxd to run as root");
  harness_call_free(hc);
}

/* The real system: a uniquely named user and group, removed afterwards. */
static char sys_user[32], sys_group[32];

static void sys_cleanup(void) {
  char cmd[128];
  if (sys_user[0]) {
    (void)snprintf(cmd, sizeof(cmd), "userdel %s >/dev/null 2>&1", sys_user);
    (void)!system(cmd);
    (void)snprintf(cmd, sizeof(cmd), "groupdel %s >/dev/null 2>&1", sys_user);
    (void)!system(cmd);
  }
  if (sys_group[0]) {
    (void)snprintf(cmd, sizeof(cmd), "groupdel %s >/dev/null 2>&1", sys_group);
    (void)!system(cmd);
  }
  teardown();
}

Test(users_system, tools_create_and_are_idempotent, .init = setup,
     .fini = sys_cleanup) {
  if (getuid() != 0 || access("/usr/sbin/useradd", X_OK) != 0 ||
      access("/usr/sbin/groupadd", X_OK) != 0 ||
      access("/usr/sbin/usermod", X_OK) != 0)
    cr_skip_test("needs root and useradd, groupadd and usermod");
  char hex[9];
  cr_assert_eq(sbx_random_hex(hex, 4), 0);
  (void)snprintf(sys_user, sizeof(sys_user), "sbxu%s", hex);
  (void)snprintf(sys_group, sizeof(sys_group), "sbxg%s", hex);
  char *ugroups[] = {sys_group};
  Sbx__V1__User u = SBX__V1__USER__INIT;
  u.name = sys_user;
  u.groups = ugroups;
  u.n_groups = 1;
  Sbx__V1__User *users[] = {&u};
  struct harness_call *hc = ensure(NULL, 0, users, 1, rpc_users_ensure);
  char gw[48], uw[48], pw[48];
  (void)snprintf(gw, sizeof(gw), "group:%s", sys_group);
  (void)snprintf(pw, sizeof(pw), "group:%s", sys_user);
  (void)snprintf(uw, sizeof(uw), "user:%s", sys_user);
  const char *want[] = {gw, pw, uw};
  expect_created(hc, want, 3);
  harness_call_free(hc);
  struct userdb_user du;
  cr_assert_eq(userdb_user(NULL, sys_user, &du), 0);
  cr_expect_str_eq(du.shell, "/usr/sbin/nologin");
  gid_t g;
  cr_assert_eq(userdb_group(NULL, sys_group, &g), 0);
  cr_expect(in_groups(&du, g), "the user is in the supplementary group");
  hc = ensure(NULL, 0, users, 1, rpc_users_ensure);
  expect_created(hc, NULL, 0);
  harness_call_free(hc);
}
