#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/resolve.h"
#include "sandboxd/users/userdb.h"

static char tmpl[64];
static struct sandboxd d;

static void setup(void) {
  (void)snprintf(tmpl, sizeof(tmpl), "/tmp/sbx-resolve-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpl));
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/ws", tmpl);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/ws/sub", tmpl);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/secret", tmpl);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs("secret\n", f);
  fclose(f);
  (void)snprintf(p, sizeof(p), "%s/ws/sub/f", tmpl);
  f = fopen(p, "w");
  cr_assert_not_null(f);
  fputs("inside\n", f);
  fclose(f);
  char l[256];
  (void)snprintf(l, sizeof(l), "%s/ws/x", tmpl);
  cr_assert_eq(symlink("/", l), 0);
  (void)snprintf(l, sizeof(l), "%s/ws/up", tmpl);
  cr_assert_eq(symlink("..", l), 0);
  (void)snprintf(l, sizeof(l), "%s/ws/inner", tmpl);
  cr_assert_eq(symlink("sub", l), 0);
  memset(&d, 0, sizeof(d));
  (void)snprintf(p, sizeof(p), "%s/ws", tmpl);
  d.root = strdup(p);
  d.root_fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(d.root_fd, 0);
}

static void teardown(void) {
  close(d.root_fd);
  free(d.root);
  char cmd[128];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
  (void)!system(cmd);
}

TestSuite(resolve, .init = setup, .fini = teardown);

Test(resolve, opens_inside) {
  struct sbx_error e = {0};
  int fd = sbxd_open(&d, "sub/f", O_RDONLY, 0, false, &e);
  cr_expect_geq(fd, 0, "%s", e.msg);
  close(fd);
  fd = sbxd_open(&d, "inner/f", O_RDONLY, 0, false, &e);
  cr_expect_geq(fd, 0, "a symlink that stays inside is followed: %s", e.msg);
  close(fd);
}

Test(resolve, symlink_escapes_are_refused) {
  const char *bad[] = {"x/etc/passwd", "up/secret", "inner/../up/secret", "x",
                       "up"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct sbx_error e = {0};
    int fd = sbxd_open(&d, bad[i], O_RDONLY, 0, false, &e);
    cr_expect_lt(fd, 0, "%s must not open", bad[i]);
    if (fd >= 0)
      close(fd);
    cr_expect_eq(e.code, SBX_PERMISSION_DENIED, "%s: %s", bad[i], e.msg);
  }
  struct sbx_error e = {0};
  cr_expect_eq(sbxd_open(&d, "../secret", O_RDONLY, 0, false, &e), -EACCES);
  cr_expect_eq(sbxd_open(&d, "/etc/passwd", O_RDONLY, 0, false, &e), -EACCES);
}

Test(resolve, locate_splits_parent) {
  struct sbxd_loc loc;
  cr_assert_eq(sbxd_locate(&d, "a/b/c.txt", true, &loc, NULL), 0);
  cr_expect_str_eq(loc.parent, "a/b");
  cr_expect_str_eq(loc.name, "c.txt");
  cr_assert_eq(sbxd_locate(&d, "top", true, &loc, NULL), 0);
  cr_expect_str_eq(loc.parent, ".");
  cr_expect_str_eq(loc.name, "top");
  cr_assert_eq(sbxd_locate(&d, "", false, &loc, NULL), 0);
  cr_expect_str_eq(loc.rel, ".");
}

Test(userdb, lookups) {
  char etc[] = "/tmp/sbx-etc-XXXXXX";
  cr_assert_not_null(mkdtemp(etc));
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/passwd", etc);
  FILE *f = fopen(p, "w");
  fputs("root:x:0:0:root:/root:/bin/bash\n"
        "broken line\n"
        "alice:x:1000:1000::/home/alice:/bin/sh\n",
        f);
  fclose(f);
  (void)snprintf(p, sizeof(p), "%s/group", etc);
  f = fopen(p, "w");
  fputs("root:x:0:\nalice:x:1000:\ndev:x:2000:bob,alice\nops:x:2001:bob\n", f);
  fclose(f);
  struct userdb_user u;
  cr_expect_eq(userdb_user(etc, "alice", &u), 0);
  cr_expect_eq(u.uid, 1000);
  cr_expect_str_eq(u.home, "/home/alice");
  cr_expect_eq(u.ngroups, 2);
  cr_expect_eq(u.groups[1], 2000);
  cr_expect_eq(userdb_user(etc, "1000", &u), 0);
  cr_expect_str_eq(u.name, "alice");
  cr_expect_eq(userdb_user(etc, "4242", &u), 0, "unknown uid is accepted");
  cr_expect_eq(u.gid, 4242);
  cr_expect_eq(userdb_user(etc, "mallory", &u), -ENOENT);
  cr_expect_eq(userdb_user(etc, "Bad:Name", &u), -EINVAL);
  gid_t g;
  cr_expect_eq(userdb_group(etc, "ops", &g), 0);
  cr_expect_eq(g, 2001);
  cr_expect_eq(userdb_group(etc, "nope", &g), -ENOENT);
  cr_expect(userdb_valid_name("svc-1$"));
  cr_expect(!userdb_valid_name("-x"));
  cr_expect(!userdb_valid_name(""));
  (void)snprintf(p, sizeof(p), "rm -rf %s", etc);
  (void)!system(p);
}
