/* Hard links to files outside the workspace, through the real daemon: a
 * workload that can `ln /outside/file ws/x` (the workspace and the file on
 * one filesystem) must not get the outside file changed by a FileWrite, a
 * FileChmod, a FileChown or a PatchApply of "x". Each test links a file of
 * the test's temp dir (beside the workspace, not in it) into the workspace
 * and checks its content, mode, owner and link count afterwards. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shared/fileio.h"
#include "tests/support/daemon.h"

#define SECRET "secret: the outside file\n"
#define OUT_MODE 0640
#define OUT_UID 65534 /* owned by someone else: a chown would show */

struct fixture {
  struct test_daemon t;
  char outside[160]; /* t.dir/outside, beside the workspace */
  mode_t mode;       /* the outside file's */
};

/* Starts sandboxd and makes the outside file, owned by OUT_UID (when the test
 * runs as root, as sandboxd must to chown), mode OUT_MODE. */
static void setup(struct fixture *f) {
  test_daemon_start(&f->t, NULL);
  (void)snprintf(f->outside, sizeof(f->outside), "%s/outside", f->t.dir);
  int fd = open(f->outside, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", f->outside, strerror(errno));
  cr_assert_eq(sbx_write_all(fd, SECRET, strlen(SECRET)), 0);
  cr_assert_eq(close(fd), 0);
  f->mode = OUT_MODE;
  cr_assert_eq(chmod(f->outside, f->mode), 0);
  if (geteuid() == 0)
    cr_assert_eq(chown(f->outside, OUT_UID, OUT_UID), 0);
}

/* Hard-links the outside file at REL in the workspace, as the workload
 * would. */
static void link_in(struct fixture *f, const char *rel) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/%s", f->t.root, rel);
  cr_assert_eq(link(f->outside, p), 0, "ln %s %s: %s", f->outside, p,
               strerror(errno));
}

/* Checks that the outside file still holds SECRET with its mode and owner,
 * and has NLINK links. */
static void expect_outside_unchanged(const struct fixture *f, nlink_t nlink) {
  struct stat st;
  cr_assert_eq(stat(f->outside, &st), 0);
  cr_expect_eq(st.st_mode & 07777, f->mode, "outside mode is now %o",
               st.st_mode & 07777);
  if (geteuid() == 0)
    cr_expect_eq(st.st_uid, OUT_UID, "outside owner is now %u",
                 (unsigned)st.st_uid);
  cr_expect_eq(st.st_nlink, nlink, "outside has %lu links, not %lu",
               (unsigned long)st.st_nlink, (unsigned long)nlink);
  char *data = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(f->outside, 1 << 16, &data, &len), 0);
  cr_expect(len == strlen(SECRET) && memcmp(data, SECRET, len) == 0,
            "outside now holds \"%.*s\"", (int)len, data);
  free(data);
}

/* Checks that REL in the workspace holds WANT and has one link. */
static void expect_ws_file(const struct fixture *f, const char *rel,
                           const char *want) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/%s", f->t.root, rel);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0, "%s: %s", p, strerror(errno));
  cr_expect_eq(st.st_nlink, 1, "%s has %lu links", rel,
               (unsigned long)st.st_nlink);
  char *data = NULL;
  size_t len = 0;
  cr_assert_eq(sbx_read_file(p, 1 << 16, &data, &len), 0);
  cr_expect(len == strlen(want) && memcmp(data, want, len) == 0,
            "%s holds \"%.*s\", not \"%s\"", rel, (int)len, data, want);
  free(data);
}

/* A FileWrite of DATA to PATH with MODE at OFFSET (not atomic). */
static int write_file(struct fixture *f, const char *path, const char *data,
                      Sbx__V1__WriteMode mode, uint64_t offset,
                      struct sbx_error *e) {
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = (char *)path;
  w.data.data = (uint8_t *)data;
  w.data.len = strlen(data);
  w.mode = mode;
  w.offset = offset;
  Sbx__V1__Response *r = NULL;
  int rc = sbx_file_write(f->t.client, &w, &r, e);
  sbx_client_reply_free(r);
  return rc;
}

/* Checks that a refusal E names PATH and says why. */
static void expect_refused(int rc, const struct sbx_error *e,
                           const char *path) {
  cr_expect_lt(rc, 0, "the request succeeded");
  cr_expect_eq(e->code, SBX_PERMISSION_DENIED, "code %d: %s", e->code, e->msg);
  char q[128];
  (void)snprintf(q, sizeof(q), "\"%s\"", path);
  cr_expect(strstr(e->msg, q) != NULL, "%s", e->msg);
  cr_expect(strstr(e->msg, "hard links") != NULL, "%s", e->msg);
}

/* A whole-file write (as the first chunk of an upload is) replaces the
 * linked file: the workspace name gets the data and a file of its own with
 * the old owner and mode (but not its setuid bit), the outside file keeps
 * its data. The chunks after it then write into that file of its own. */
Test(files_hardlinks, truncating_write_replaces_the_file) {
  struct fixture f;
  setup(&f);
  if (geteuid() == 0) { /* only root may keep a setuid bit */
    f.mode = 04000 | OUT_MODE;
    cr_assert_eq(chmod(f.outside, f.mode), 0);
  }
  link_in(&f, "x");
  struct sbx_error e = {0};
  cr_assert_eq(
      write_file(&f, "x", "first,", SBX__V1__WRITE_MODE__WRITE_TRUNCATE, 0, &e),
      0, "%s", e.msg);
  cr_assert_eq(
      write_file(&f, "x", "second", SBX__V1__WRITE_MODE__WRITE_AT, 6, &e), 0,
      "%s", e.msg);
  expect_outside_unchanged(&f, 1);
  expect_ws_file(&f, "x", "first,second");
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/x", f.t.root);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  cr_expect_eq(st.st_mode & 07777, OUT_MODE, "mode %o", st.st_mode & 07777);
  if (geteuid() == 0)
    cr_expect_eq(st.st_uid, OUT_UID, "owner %u", (unsigned)st.st_uid);
  test_daemon_stop(&f.t);
}

/* An append or a write at an offset would need the old data: it is
 * refused, and the outside file keeps its data and both links. */
Test(files_hardlinks, offset_and_append_writes_are_refused) {
  struct fixture f;
  setup(&f);
  link_in(&f, "x");
  struct sbx_error e = {0};
  int rc =
      write_file(&f, "x", "pwned", SBX__V1__WRITE_MODE__WRITE_APPEND, 0, &e);
  expect_refused(rc, &e, "x");
  e = (struct sbx_error){0};
  rc = write_file(&f, "x", "pwned", SBX__V1__WRITE_MODE__WRITE_AT, 2, &e);
  expect_refused(rc, &e, "x");
  expect_outside_unchanged(&f, 2);
  test_daemon_stop(&f.t);
}

/* Makes the tree the chmod and chown tests change: "x" and "d/y" linked to
 * the outside file, "d/mine" a file of the workspace's own (mode 0644,
 * owned by OUT_UID as the test runs as root), whose path goes to MINE. */
static void make_tree(struct fixture *f, char *mine, size_t size) {
  link_in(f, "x");
  (void)snprintf(mine, size, "%s/d", f->t.root);
  cr_assert_eq(mkdir(mine, 0755), 0);
  link_in(f, "d/y");
  (void)snprintf(mine, size, "%s/d/mine", f->t.root);
  int fd = open(mine, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  cr_assert_eq(close(fd), 0);
  if (geteuid() == 0)
    cr_assert_eq(chown(mine, OUT_UID, OUT_UID), 0);
}

/* chmod of the linked file, named or met beneath a directory, is refused:
 * the mode of one name is every name's. A recursive chmod refuses before it
 * changes anything. */
Test(files_hardlinks, chmod_is_refused) {
  struct fixture f;
  setup(&f);
  char mine[256];
  make_tree(&f, mine, sizeof(mine));
  struct sbx_error e = {0};
  int rc = sbx_file_chmod(f.t.client, "x", 04777, false, &e);
  expect_refused(rc, &e, "x");
  e = (struct sbx_error){0};
  rc = sbx_file_chmod(f.t.client, "d", 04777, true, &e);
  expect_refused(rc, &e, "d");
  cr_expect(strstr(e.msg, "\"y\"") != NULL, "%s", e.msg);
  expect_outside_unchanged(&f, 3);
  struct stat st;
  cr_assert_eq(stat(mine, &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0644, "d/mine was changed to %o",
               st.st_mode & 07777);
  test_daemon_stop(&f.t);
}

/* chown of the linked file, named or met beneath a directory, is refused,
 * the recursive one before it changes anything. */
Test(files_hardlinks, chown_is_refused) {
  if (geteuid() != 0)
    cr_skip_test("chown needs sandboxd to run as root");
  struct fixture f;
  setup(&f);
  char mine[256];
  make_tree(&f, mine, sizeof(mine));
  struct sbx_error e = {0};
  int rc = sbx_file_chown(f.t.client, "x", "0", "0", false, &e);
  expect_refused(rc, &e, "x");
  e = (struct sbx_error){0};
  rc = sbx_file_chown(f.t.client, "d", "0", "0", true, &e);
  expect_refused(rc, &e, "d");
  cr_expect(strstr(e.msg, "\"y\"") != NULL, "%s", e.msg);
  expect_outside_unchanged(&f, 3);
  struct stat st;
  cr_assert_eq(stat(mine, &st), 0);
  cr_expect_eq(st.st_uid, OUT_UID, "d/mine was given to %u",
               (unsigned)st.st_uid);
  test_daemon_stop(&f.t);
}

/* A patch of the linked file gives the workspace name the new content in a
 * file of its own; the outside file keeps its data and mode. */
Test(files_hardlinks, patch_replaces_the_file) {
  struct fixture f;
  setup(&f);
  link_in(&f, "x");
  const char *patch = "*** Begin Patch\n"
                      "*** Update File: x\n"
                      "@@\n"
                      "-" SECRET "+patched\n"
                      "*** End Patch\n";
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  cr_assert_eq(sbx_patch_apply(f.t.client, patch, "", false, &r, &e), 0, "%s",
               e.msg);
  sbx_client_reply_free(r);
  expect_outside_unchanged(&f, 1);
  expect_ws_file(&f, "x", "patched\n");
  test_daemon_stop(&f.t);
}

struct swapper {
  struct fixture *f;
  atomic_bool stop;
};

/* The workload racing the RPCs: "x" is swapped, by renames, between a hard
 * link to the outside file and a file of the workspace's own, so an RPC
 * that checks one and changes the other would reach the outside file. */
static void *swap_links(void *arg) {
  struct swapper *sw = arg;
  char x[256], l[256], own[256];
  (void)snprintf(x, sizeof(x), "%s/x", sw->f->t.root);
  (void)snprintf(l, sizeof(l), "%s/l", sw->f->t.root);
  (void)snprintf(own, sizeof(own), "%s/own", sw->f->t.root);
  while (!atomic_load(&sw->stop)) {
    if (link(sw->f->outside, l) == 0)
      (void)rename(l, x);
    int fd = open(own, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)close(fd);
      (void)rename(own, x);
    }
  }
  return NULL;
}

/* Whatever the RPCs meet while "x" is swapped under them, the outside file
 * keeps its data, mode and owner. */
Test(files_hardlinks, swapped_links_never_reach_outside) {
  struct fixture f;
  setup(&f);
  struct swapper sw = {.f = &f};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, swap_links, &sw), 0);
  unsigned done = 0;
  for (int i = 0; i < 500; i++) {
    struct sbx_error e = {0};
    done += sbx_file_chmod(f.t.client, "x", 04777, false, &e) == 0;
    if (geteuid() == 0)
      (void)sbx_file_chown(f.t.client, "x", "0", "0", false, &e);
    (void)write_file(&f, "x", "pwned", SBX__V1__WRITE_MODE__WRITE_TRUNCATE, 0,
                     &e);
    (void)write_file(&f, "x", "pwned", SBX__V1__WRITE_MODE__WRITE_APPEND, 0,
                     &e);
  }
  atomic_store(&sw.stop, true);
  cr_assert_eq(pthread_join(th, NULL), 0);
  fprintf(stderr, "%u of 500 chmods went through\n", done);
  char x[256];
  (void)snprintf(x, sizeof(x), "%s/x", f.t.root);
  struct stat st, out;
  bool linked = stat(x, &st) == 0 && stat(f.outside, &out) == 0 &&
                st.st_ino == out.st_ino;
  expect_outside_unchanged(&f, linked ? 2 : 1);
  test_daemon_stop(&f.t);
}
