#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "sandboxd/patch/patch_rpc.h"
#include "tests/support/harness.h"

static struct harness h;
static void setup(void) {
  harness_init(&h);
}
static void teardown(void) {
  harness_fini(&h);
}
TestSuite(patch_rpc, .init = setup, .fini = teardown);

static struct harness_call *apply_eol(const char *patch, const char *dir,
                                      bool dry, bool sdk_line_ends) {
  static Sbx__V1__Request req;
  static Sbx__V1__PatchApply pa;
  sbx__v1__request__init(&req);
  sbx__v1__patch_apply__init(&pa);
  pa.patch = (char *)patch;
  pa.dir = (char *)(dir ? dir : "");
  pa.dry_run = dry;
  pa.sdk_line_ends = sdk_line_ends;
  req.body_case = SBX__V1__REQUEST__BODY_PATCH_APPLY;
  req.patch_apply = &pa;
  return harness_call(&h, &req, rpc_patch_apply);
}

static struct harness_call *apply(const char *patch, const char *dir,
                                  bool dry) {
  return apply_eol(patch, dir, dry, false);
}

static void expect_file(const char *rel, const char *want) {
  char *got = harness_read(&h, rel);
  if (!want) {
    cr_expect_null(got, "%s should not exist", rel);
  } else {
    cr_expect_not_null(got, "%s is missing", rel);
    if (got)
      cr_expect_str_eq(got, want, "%s", rel);
  }
  free(got);
}

Test(patch_rpc, multi_file_patch_applies_every_kind) {
  harness_write(&h, "src/a.c", "int a;\nint b;\nint c;\n");
  harness_write(&h, "old.txt", "bye\n");
  harness_write(&h, "mv/from.txt", "one\ntwo\n");
  struct harness_call *hc = apply("*** Begin Patch\n"
                                  "*** Add File: docs/new.md\n"
                                  "+# Title\n"
                                  "+text\n"
                                  "*** Update File: src/a.c\n"
                                  "@@\n"
                                  " int a;\n"
                                  "-int b;\n"
                                  "+long b;\n"
                                  "*** Delete File: old.txt\n"
                                  "*** Update File: mv/from.txt\n"
                                  "*** Move to: mv/to.txt\n"
                                  "@@\n"
                                  "-one\n"
                                  "+uno\n"
                                  "*** End Patch\n",
                                  NULL, false);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  Sbx__V1__PatchApplyReply *r = hc->resp.patch_apply;
  cr_assert_eq(r->n_results, 4);
  cr_expect_str_eq(r->results[0]->summary, "Created docs/new.md");
  cr_expect_str_eq(r->results[1]->summary, "Updated src/a.c");
  cr_expect_str_eq(r->results[2]->summary, "Deleted old.txt");
  cr_expect_str_eq(r->results[3]->summary, "Moved mv/from.txt to mv/to.txt");
  harness_call_free(hc);
  expect_file("docs/new.md", "# Title\ntext\n");
  expect_file("src/a.c", "int a;\nlong b;\nint c;\n");
  expect_file("old.txt", NULL);
  expect_file("mv/from.txt", NULL);
  expect_file("mv/to.txt", "uno\ntwo\n");
}

Test(patch_rpc, failure_in_the_last_file_changes_nothing) {
  harness_write(&h, "a.txt", "alpha\n");
  harness_write(&h, "b.txt", "beta\n");
  harness_write(&h, "c.txt", "gamma\n");
  struct harness_call *hc = apply("*** Begin Patch\n"
                                  "*** Update File: a.txt\n"
                                  "@@\n"
                                  "-alpha\n"
                                  "+ALPHA\n"
                                  "*** Delete File: b.txt\n"
                                  "*** Add File: d.txt\n"
                                  "+delta\n"
                                  "*** Update File: c.txt\n"
                                  "@@\n"
                                  "-no such line\n"
                                  "+x\n"
                                  "*** End Patch\n",
                                  NULL, false);
  cr_expect_lt(hc->rc, 0);
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT);
  cr_expect(strstr(hc->call.err.msg, "c.txt") != NULL, "%s", hc->call.err.msg);
  cr_expect(strstr(hc->call.err.msg, "hunk 1") != NULL, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("a.txt", "alpha\n");
  expect_file("b.txt", "beta\n");
  expect_file("c.txt", "gamma\n");
  expect_file("d.txt", NULL);
}

Test(patch_rpc, missing_file_in_the_middle_changes_nothing) {
  harness_write(&h, "a.txt", "alpha\n");
  struct harness_call *hc = apply("*** Begin Patch\n"
                                  "*** Update File: a.txt\n"
                                  "@@\n"
                                  "-alpha\n"
                                  "+ALPHA\n"
                                  "*** Delete File: nope.txt\n"
                                  "*** End Patch\n",
                                  NULL, false);
  cr_expect_eq(hc->call.err.code, SBX_NOT_FOUND, "%s", hc->call.err.msg);
  cr_expect(strstr(hc->call.err.msg, "nope.txt") != NULL);
  harness_call_free(hc);
  expect_file("a.txt", "alpha\n");
}

Test(patch_rpc, dry_run_checks_without_writing) {
  harness_write(&h, "a.txt", "alpha\n");
  struct harness_call *hc = apply("*** Begin Patch\n*** Update File: a.txt\n"
                                  "@@\n-alpha\n+ALPHA\n*** End Patch\n",
                                  NULL, true);
  cr_expect_eq(hc->rc, 0, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("a.txt", "alpha\n");
}

Test(patch_rpc, paths_are_relative_to_dir_and_cannot_escape) {
  harness_write(&h, "sub/x.txt", "x\n");
  struct harness_call *hc = apply("*** Begin Patch\n*** Update File: x.txt\n"
                                  "@@\n-x\n+y\n*** End Patch\n",
                                  "sub", false);
  cr_expect_eq(hc->rc, 0, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("sub/x.txt", "y\n");
  hc = apply("*** Begin Patch\n*** Add File: ../../evil.txt\n+x\n"
             "*** End Patch\n",
             NULL, false);
  cr_expect_eq(hc->call.err.code, SBX_PERMISSION_DENIED, "%s",
               hc->call.err.msg);
  harness_call_free(hc);
  char outside[200];
  (void)snprintf(outside, sizeof(outside), "%s/evil.txt", h.dir);
  struct stat st;
  cr_expect_neq(stat(outside, &st), 0, "nothing was written outside");
  /* A symlink to outside is not written through. */
  char link[200];
  (void)snprintf(link, sizeof(link), "%s/out", h.root);
  cr_assert_eq(symlink(h.dir, link), 0);
  hc = apply("*** Begin Patch\n*** Add File: out/evil.txt\n+x\n"
             "*** End Patch\n",
             NULL, false);
  cr_expect_lt(hc->rc, 0);
  harness_call_free(hc);
  cr_expect_neq(stat(outside, &st), 0, "nothing was written through a link");
}

Test(patch_rpc, crlf_files_stay_crlf_and_modes_are_kept) {
  harness_write(&h, "w.txt", "one\r\ntwo\r\n");
  char p[200];
  (void)snprintf(p, sizeof(p), "%s/w.txt", h.root);
  cr_assert_eq(chmod(p, 0751), 0);
  struct harness_call *hc = apply("*** Begin Patch\n*** Update File: w.txt\n"
                                  "@@\n one\n-two\n+deux\n*** End Patch\n",
                                  NULL, false);
  cr_expect_eq(hc->rc, 0, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("w.txt", "one\r\ndeux\r\n");
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0751);
}

Test(patch_rpc, parse_errors_are_reported) {
  struct harness_call *hc = apply("not a patch", NULL, false);
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT);
  cr_expect_gt(strlen(hc->call.err.msg), 0);
  harness_call_free(hc);
}

/* Codex's line ends for a patch text, the SDK's for its operations: a
 * created file without a final newline, an updated one keeping its lack
 * of one. */
Test(patch_rpc, line_ends_are_codex_or_the_sdk) {
  static const char patch[] = "*** Begin Patch\n"
                              "*** Add File: new.txt\n"
                              "+alpha\n"
                              "+beta\n"
                              "*** Update File: old.txt\n"
                              "@@\n"
                              " a\n"
                              "-b\n"
                              "+c\n"
                              "*** End Patch";
  harness_write(&h, "old.txt", "a\nb");
  struct harness_call *hc = apply(patch, NULL, false);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("new.txt", "alpha\nbeta\n");
  expect_file("old.txt", "a\nc\n");

  harness_write(&h, "old.txt", "a\nb");
  static const char sdk[] = "*** Begin Patch\n"
                            "*** Add File: sdk.txt\n"
                            "+alpha\n"
                            "+beta\n"
                            "*** Update File: old.txt\n"
                            "@@\n"
                            " a\n"
                            "-b\n"
                            "+c\n"
                            "*** End Patch";
  hc = apply_eol(sdk, NULL, false, true);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  harness_call_free(hc);
  expect_file("sdk.txt", "alpha\nbeta");
  expect_file("old.txt", "a\nc");
}
