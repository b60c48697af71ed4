#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shared/cleanup.h"
#include "shared/errors.h"
#include "shared/patch.h"

SBX_DEFINE_CLEANUP(struct sbx_patch *, sbx_patch_free)
#define _cleanup_patch_ _cleanup_(sbx_patch_freep)

/* Parses TEXT, which must succeed. */
static struct sbx_patch *parse_ok(const char *text) {
  struct sbx_patch *p = NULL;
  struct sbx_error e = {0};
  int r = sbx_patch_parse(text, strlen(text), &p, &e);
  cr_assert_eq(r, 0, "parse failed: %s", e.msg);
  cr_assert_not_null(p);
  return p;
}

/* Parses TEXT (LEN bytes), which must fail with errno -ERR and CODE; returns
 * the message in E. */
static void parse_fails(const char *text, size_t len, int err,
                        enum sbx_code code, struct sbx_error *e) {
  struct sbx_patch *p = (struct sbx_patch *)1;
  sbx_error_clear(e);
  int r = sbx_patch_parse(text, len, &p, e);
  cr_assert_eq(r, -err, "parse returned %d (%s)", r, e->msg);
  cr_expect_null(p, "no patch on failure");
  cr_expect_eq(e->code, code, "code %d for %s", e->code, e->msg);
}

/* Expects parsing TEXT to fail with INVALID_ARGUMENT and exactly MSG. */
static void expect_parse_error(const char *text, const char *msg) {
  struct sbx_error e;
  parse_fails(text, strlen(text), EINVAL, SBX_INVALID_ARGUMENT, &e);
  cr_expect_str_eq(e.msg, msg);
}

/* Applies the one Update op of PATCH to IN (INLEN bytes), which must
 * succeed, and compares the result with WANT (WANTLEN bytes) byte for
 * byte. */
static void expect_update_eol(const char *patch, const char *in, size_t inlen,
                              enum sbx_patch_eol eol, const char *want,
                              size_t wantlen) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok(patch);
  cr_assert_eq(p->nops, 1);
  cr_assert_eq(p->ops[0].kind, SBX_PATCH_UPDATE);
  struct sbx_error e = {0};
  _cleanup_free_ char *out = NULL;
  size_t outlen = 12345;
  int r = sbx_patch_apply_update(&p->ops[0], in, inlen, eol, &out, &outlen, &e);
  cr_assert_eq(r, 0, "apply failed: %s", e.msg);
  cr_assert_not_null(out);
  cr_expect_eq(outlen, wantlen, "length %zu, want %zu: [%s]", outlen, wantlen,
               out);
  cr_expect(memcmp(out, want, wantlen < outlen ? wantlen : outlen) == 0,
            "got [%s], want [%s]", out, want);
  cr_expect_eq(out[outlen], '\0', "result is NUL-terminated");
}

/* With Codex's line ends, as a "*** Begin Patch" text gets them. */
static void expect_update_n(const char *patch, const char *in, size_t inlen,
                            const char *want, size_t wantlen) {
  expect_update_eol(patch, in, inlen, SBX_PATCH_EOL_CODEX, want, wantlen);
}

static void expect_update(const char *patch, const char *in, const char *want) {
  expect_update_n(patch, in, strlen(in), want, strlen(want));
}

/* With the SDK's line ends, as its update_file operations get them. */
static void expect_update_sdk(const char *patch, const char *in,
                              const char *want) {
  expect_update_eol(patch, in, strlen(in), SBX_PATCH_EOL_SDK, want,
                    strlen(want));
}

/* Applies the one Update op of PATCH to IN, which must fail with
 * INVALID_ARGUMENT and exactly MSG. */
static void expect_apply_error(const char *patch, const char *in,
                               const char *msg) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok(patch);
  cr_assert_eq(p->nops, 1);
  struct sbx_error e = {0};
  char *out = (char *)1;
  size_t outlen = 7;
  int r = sbx_patch_apply_update(&p->ops[0], in, strlen(in),
                                 SBX_PATCH_EOL_CODEX, &out, &outlen, &e);
  cr_assert_eq(r, -EINVAL, "apply returned %d (%s)", r, e.msg);
  cr_expect_null(out);
  cr_expect_eq(outlen, 0);
  cr_expect_eq(e.code, SBX_INVALID_ARGUMENT);
  cr_expect_str_eq(e.msg, msg);
}

/* ---- parsing ----------------------------------------------------------- */

Test(patch, add_file_content_is_plus_lines_each_with_newline) {
  _cleanup_patch_ struct sbx_patch *p =
      parse_ok("*** Begin Patch\n"
               "*** Add File: src/new file.txt\n"
               "+hello\n"
               "+\n"
               "+  world  \n"
               "*** End Patch\n");
  cr_assert_eq(p->nops, 1);
  const struct sbx_patch_op *op = &p->ops[0];
  cr_expect_eq(op->kind, SBX_PATCH_ADD);
  cr_expect_str_eq(op->path, "src/new file.txt");
  cr_expect_null(op->move_to);
  cr_expect_eq(op->line, 2);
  cr_expect_eq(op->content_len, 17);
  cr_expect_str_eq(op->content, "hello\n\n  world  \n");
}

Test(patch, add_file_without_lines_is_empty) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok("*** Begin Patch\n"
                                                 "*** Add File: empty\n"
                                                 "*** End Patch");
  cr_assert_eq(p->nops, 1);
  cr_expect_eq(p->ops[0].kind, SBX_PATCH_ADD);
  cr_assert_not_null(p->ops[0].content);
  cr_expect_eq(p->ops[0].content_len, 0);
  cr_expect_str_eq(p->ops[0].content, "");
}

Test(patch, delete_file) {
  _cleanup_patch_ struct sbx_patch *p =
      parse_ok("*** Begin Patch\n"
               "*** Delete File:   old/thing.c  \n"
               "*** End Patch\n");
  cr_assert_eq(p->nops, 1);
  cr_expect_eq(p->ops[0].kind, SBX_PATCH_DELETE);
  cr_expect_str_eq(p->ops[0].path, "old/thing.c");
  cr_expect_null(p->ops[0].content);
  cr_expect_eq(p->ops[0].nhunks, 0);
}

Test(patch, several_ops_in_order_with_their_lines) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok("*** Begin Patch\n"
                                                 "*** Add File: a\n"
                                                 "+1\n"
                                                 "*** Delete File: b\n"
                                                 "\n"
                                                 "*** Update File: c\n"
                                                 "*** Move to: d/e\n"
                                                 "@@ fn\n"
                                                 "-x\n"
                                                 "+y\n"
                                                 "@@\n"
                                                 " z\n"
                                                 "*** Update File: f\n"
                                                 "*** Move to: g\n"
                                                 "*** End Patch\n");
  cr_assert_eq(p->nops, 4);
  cr_expect_eq(p->ops[0].kind, SBX_PATCH_ADD);
  cr_expect_eq(p->ops[0].line, 2);
  cr_expect_str_eq(p->ops[0].content, "1\n");
  cr_expect_eq(p->ops[1].kind, SBX_PATCH_DELETE);
  cr_expect_str_eq(p->ops[1].path, "b");
  cr_expect_eq(p->ops[1].line, 4);
  cr_expect_eq(p->ops[2].kind, SBX_PATCH_UPDATE);
  cr_expect_str_eq(p->ops[2].path, "c");
  cr_expect_str_eq(p->ops[2].move_to, "d/e");
  cr_expect_eq(p->ops[2].nhunks, 2);
  cr_expect_eq(p->ops[2].line, 6);
  cr_expect_str_eq(p->ops[3].path, "f");
  cr_expect_str_eq(p->ops[3].move_to, "g");
  cr_expect_eq(p->ops[3].nhunks, 0, "a pure rename has no hunks");
}

Test(patch, surrounding_whitespace_and_padded_markers_are_tolerated) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok("\n  \n"
                                                 "  *** Begin Patch \n"
                                                 "  *** Add File: x \n"
                                                 "+a\n"
                                                 " *** End Patch\n\n\t\n");
  cr_assert_eq(p->nops, 1);
  cr_expect_str_eq(p->ops[0].path, "x");
  cr_expect_eq(p->ops[0].line, 4, "line numbers count the leading blanks");
}

Test(patch, heredoc_wrapper_is_unwrapped) {
  static const char *const forms[] = {"<<'EOF'", "<<EOF", "<<\"EOF\""};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(forms); i++) {
    char text[256];
    snprintf(text, sizeof(text),
             "%s\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEOF\n",
             forms[i]);
    _cleanup_patch_ struct sbx_patch *p = parse_ok(text);
    cr_expect_eq(p->nops, 1);
    cr_expect_eq(p->ops[0].line, 3);
  }
  expect_parse_error("<<'END'\n*** Begin Patch\n*** Delete File: a\n"
                     "*** End Patch\nEND\n",
                     "line 1: expected \"*** Begin Patch\", got \"<<'END'\"");
}

Test(patch, crlf_patch_text_is_accepted) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok("*** Begin Patch\r\n"
                                                 "*** Add File: a\r\n"
                                                 "+x\r\n"
                                                 "*** End Patch\r\n");
  cr_expect_str_eq(p->ops[0].content, "x\n");
  expect_update("*** Begin Patch\r\n*** Update File: a\r\n@@\r\n-b\r\n+c\r\n"
                "*** End Patch\r\n",
                "a\nb\n", "a\nc\n");
}

Test(patch, parse_errors_name_the_line_and_what_was_expected) {
  expect_parse_error("", "line 1: empty patch; expected \"*** Begin Patch\"");
  expect_parse_error(" \n\t\n",
                     "line 1: empty patch; expected \"*** Begin Patch\"");
  expect_parse_error("\nhello\n*** End Patch\n",
                     "line 2: expected \"*** Begin Patch\", got \"hello\"");
  expect_parse_error("*** Begin Patch\n*** Delete File: a\n",
                     "line 2: expected \"*** End Patch\" as the last line, "
                     "got \"*** Delete File: a\"");
  expect_parse_error("*** Begin Patch\n",
                     "line 1: expected \"*** End Patch\" as the last line, "
                     "got \"*** Begin Patch\"");
  expect_parse_error("*** Begin Patch\n*** End Patch\nmore\n",
                     "line 3: expected \"*** End Patch\" as the last line, "
                     "got \"more\"");
  expect_parse_error("*** Begin Patch\n\n*** End Patch",
                     "line 3: expected a file operation (\"*** Add File: \", "
                     "\"*** Delete File: \" or \"*** Update File: \") before "
                     "\"*** End Patch\"");
  expect_parse_error("*** Begin Patch\n*** Rename File: a\n*** End Patch",
                     "line 2: expected \"*** Add File: \", \"*** Delete "
                     "File: \", \"*** Update File: \" or \"*** End Patch\", "
                     "got \"*** Rename File: a\"");
  expect_parse_error("*** Begin Patch\n*** Add File:   \n*** End Patch",
                     "line 2: missing path after *** Add File:");
  expect_parse_error("*** Begin Patch\n*** Delete File: a\n+x\n*** End Patch",
                     "line 3: expected \"*** Add File: \", \"*** Delete "
                     "File: \", \"*** Update File: \" or \"*** End Patch\", "
                     "got \"+x\"");
  expect_parse_error("*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch",
                     "line 4: expected an Add File line starting with '+', "
                     "got \"y\"");
  expect_parse_error("*** Begin Patch\n*** Add File: a\n+x\n\n+y\n"
                     "*** End Patch",
                     "line 4: expected an Add File line starting with '+', "
                     "got an empty line (write \"+\" for an empty line)");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n*** End Patch",
                     "line 2: Update File \"a\" has no hunks; expected \"@@\" "
                     "and lines starting with ' ', '-' or '+'");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n*** Move to:  \n"
                     "*** End Patch",
                     "line 3: missing path after \"*** Move to:\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n@@\n-x\n"
                     "*** Move to: b\n*** End Patch",
                     "line 5: \"*** Move to:\" must directly follow \"*** "
                     "Update File:\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n@@ f\n"
                     "*** End Patch",
                     "line 4: hunk 1 has no lines; expected lines starting "
                     "with ' ', '-' or '+', got \"*** End Patch\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n@@\n"
                     "*** End of File\n*** End Patch",
                     "line 4: hunk 1 has no lines; expected lines starting "
                     "with ' ', '-' or '+', got \"*** End of File\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\nfoo\n"
                     "*** End Patch",
                     "line 3: hunk 1 has no lines; expected lines starting "
                     "with ' ', '-' or '+', got \"foo\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n@@\n-x\nfoo\n"
                     "*** End Patch",
                     "line 5: expected a line starting with ' ', '-', '+' or "
                     "\"@@\" (to start hunk 2), got \"foo\"");
  expect_parse_error("*** Begin Patch\n*** Update File: a\n-x\n"
                     "*** End of File\n+y\n*** End Patch",
                     "line 5: expected a line starting with ' ', '-', '+' or "
                     "\"@@\" (to start hunk 2), got \"+y\"");
}

Test(patch, nul_byte_is_refused_with_its_line) {
  static const char text[] = "*** Begin Patch\n*** Add File: a\n+x\0y\n"
                             "*** End Patch\n";
  struct sbx_error e;
  parse_fails(text, sizeof(text) - 1, EINVAL, SBX_INVALID_ARGUMENT, &e);
  cr_expect_str_eq(e.msg, "line 3: NUL byte; a patch is text");
}

Test(patch, text_need_not_be_nul_terminated) {
  static const char text[] = "*** Begin Patch\n*** Delete File: a\n"
                             "*** End PatchGARBAGE";
  struct sbx_patch *p = NULL;
  cr_expect_eq(sbx_patch_parse(text, sizeof(text) - 1 - 7, &p, NULL), 0);
  cr_expect_eq(p->nops, 1);
  sbx_patch_free(p);
  cr_expect_null(sbx_patch_free(NULL));
}

Test(patch, too_many_ops_is_limit_exceeded) {
  size_t n = SBX_PATCH_MAX_OPS + 1, cap = 32 * n + 64, len = 0;
  _cleanup_free_ char *text = malloc(cap);
  cr_assert_not_null(text);
  len += (size_t)snprintf(text + len, cap - len, "*** Begin Patch\n");
  for (size_t i = 0; i < n; i++)
    len +=
        (size_t)snprintf(text + len, cap - len, "*** Delete File: f%zu\n", i);
  len += (size_t)snprintf(text + len, cap - len, "*** End Patch\n");
  struct sbx_error e;
  parse_fails(text, len, E2BIG, SBX_LIMIT_EXCEEDED, &e);
  cr_expect_str_eq(e.msg, "line 1026: more than 1024 file operations in the "
                          "patch");
  /* One fewer is fine. */
  struct sbx_patch *p = NULL;
  size_t cut = (size_t)(strstr(text, "*** Delete File: f1024\n") - text);
  memcpy(text + cut, "*** End Patch\n", 14);
  cr_expect_eq(sbx_patch_parse(text, cut + 14, &p, &e), 0, "%s", e.msg);
  cr_expect_eq(p->nops, SBX_PATCH_MAX_OPS);
  sbx_patch_free(p);
}

Test(patch, too_long_line_and_too_large_patch_are_limit_exceeded) {
  size_t n = SBX_PATCH_MAX_LINE + 1;
  _cleanup_free_ char *text = malloc(n + 64);
  cr_assert_not_null(text);
  size_t len = (size_t)snprintf(text, 64, "*** Begin Patch\n*** Add File: a\n");
  text[len++] = '+';
  memset(text + len, 'x', n - 1);
  len += n - 1;
  memcpy(text + len, "\n*** End Patch\n", 15);
  len += 15;
  struct sbx_error e;
  parse_fails(text, len, E2BIG, SBX_LIMIT_EXCEEDED, &e);
  cr_expect_str_eq(e.msg, "line 3: line of 1048577 bytes, more than the "
                          "limit of 1048576");

  size_t big = SBX_PATCH_MAX_BYTES + 1;
  _cleanup_free_ char *huge = malloc(big);
  cr_assert_not_null(huge);
  memset(huge, '\n', big);
  parse_fails(huge, big, E2BIG, SBX_LIMIT_EXCEEDED, &e);
  cr_expect_str_eq(e.msg, "patch of 16777217 bytes, more than the limit of "
                          "16777216");
}

Test(patch, too_many_hunks_is_limit_exceeded) {
  size_t n = SBX_PATCH_MAX_HUNKS + 1, cap = 8 * n + 64, len = 0;
  _cleanup_free_ char *text = malloc(cap);
  cr_assert_not_null(text);
  len += (size_t)snprintf(text, cap, "*** Begin Patch\n*** Update File: a\n");
  for (size_t i = 0; i < n; i++) {
    memcpy(text + len, "@@\n+x\n", 6);
    len += 6;
  }
  memcpy(text + len, "*** End Patch\n", 14);
  len += 14;
  struct sbx_error e;
  parse_fails(text, len, E2BIG, SBX_LIMIT_EXCEEDED, &e);
  cr_expect_str_eq(e.msg, "line 131075: more than 65536 hunks in the patch");
}

/* ---- applying ---------------------------------------------------------- */

Test(patch, update_one_hunk) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+B\n c\n"
                "*** End Patch",
                "a\nb\nc\nd\n", "a\nB\nc\nd\n");
}

Test(patch, update_several_hunks_first_without_at_at) {
  expect_update("*** Begin Patch\n"
                "*** Update File: a\n"
                " 1\n"
                "-2\n"
                "+two\n"
                "@@\n"
                " 5\n"
                "+5.5\n"
                " 6\n"
                "\n"
                "@@\n"
                "-9\n"
                "*** End Patch",
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n",
                "1\ntwo\n3\n4\n5\n5.5\n6\n7\n8\n10\n");
}

Test(patch, anchors_narrow_the_position_one_after_the_other) {
  static const char file[] = "class A:\n"
                             "    def f():\n"
                             "        return 1\n"
                             "class B:\n"
                             "    def f():\n"
                             "        return 1\n";
  expect_update("*** Begin Patch\n"
                "*** Update File: m.py\n"
                "@@ class B:\n"
                "@@   def f():\n"
                "-        return 1\n"
                "+        return 2\n"
                "*** End Patch",
                file,
                "class A:\n"
                "    def f():\n"
                "        return 1\n"
                "class B:\n"
                "    def f():\n"
                "        return 2\n");
  /* Without the anchor the first occurrence changes. */
  expect_update("*** Begin Patch\n*** Update File: m.py\n@@\n"
                "-        return 1\n+        return 2\n*** End Patch",
                file,
                "class A:\n"
                "    def f():\n"
                "        return 2\n"
                "class B:\n"
                "    def f():\n"
                "        return 1\n");
}

Test(patch, insertion_goes_after_its_anchor_or_else_at_the_end) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@ b\n+new\n"
                "*** End Patch",
                "a\nb\nc\n", "a\nb\nnew\nc\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n+new\n"
                "*** End Patch",
                "a\nb\nc\n", "a\nb\nc\nnew\n");
  /* An insertion at the end comes after a later hunk's change. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n+end\n@@\n-b\n+B\n"
                "*** End Patch",
                "a\nb\nc\n", "a\nB\nc\nend\n");
}

Test(patch, end_of_file_pins_the_hunk_to_the_end) {
  static const char patch[] = "*** Begin Patch\n*** Update File: a\n@@\n"
                              " x\n-b\n+B\n*** End of File\n*** End Patch";
  expect_update(patch, "x\nb\nx\nb\n", "x\nb\nx\nB\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n x\n-b\n+B\n"
                "*** End Patch",
                "x\nb\nx\nb\n", "x\nB\nx\nb\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n+z\n"
                "*** End of File\n*** End Patch",
                "x\ny", "x\ny\nz\n");
  expect_apply_error(patch, "x\nb\nx\nb\ny\n",
                     "a: hunk 1 (patch line 3): context found at line 1, but "
                     "\"*** End of File\" requires it to end the file (5 "
                     "lines)");
}

Test(patch, move_keeps_hunks_and_a_pure_rename_keeps_bytes) {
  _cleanup_patch_ struct sbx_patch *p = parse_ok("*** Begin Patch\n"
                                                 "*** Update File: old.txt\n"
                                                 "*** Move to: new/dir.txt\n"
                                                 "*** End Patch");
  cr_expect_str_eq(p->ops[0].path, "old.txt");
  cr_expect_str_eq(p->ops[0].move_to, "new/dir.txt");
  static const char in[] = "a\r\nb\n\0binary";
  _cleanup_free_ char *out = NULL;
  size_t outlen = 0;
  cr_assert_eq(sbx_patch_apply_update(&p->ops[0], in, sizeof(in) - 1,
                                      SBX_PATCH_EOL_CODEX, &out, &outlen, NULL),
               0);
  cr_expect_eq(outlen, sizeof(in) - 1);
  cr_expect(memcmp(out, in, outlen) == 0);

  expect_update("*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@\n-1\n"
                "+2\n*** End Patch",
                "1\n", "2\n");
}

Test(patch, context_tier_trailing_whitespace) {
  /* Unchanged context keeps the file's text; '+' lines are written as
   * given. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+c  \n"
                "*** End Patch",
                "a  \t\nb \n", "a  \t\nc  \n");
}

Test(patch, context_tier_surrounding_whitespace) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+c\n"
                "*** End Patch",
                "    a\n\tb  \n", "    a\nc\n");
}

Test(patch, context_tier_unicode_punctuation) {
  /* The file has an em dash, curly quotes, a minus sign and a no-break
   * space; the patch plain ASCII. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n"
                " x - y\n"
                "-say \"hi\" isn't\n"
                "+replaced\n"
                " 1 - 2\n"
                "*** End Patch",
                "x \xe2\x80\x94 y\n"
                "say \xe2\x80\x9chi\xe2\x80\x9d isn\xe2\x80\x99t\n"
                "1\xc2\xa0\xe2\x88\x92 2\n",
                "x \xe2\x80\x94 y\n"
                "replaced\n"
                "1\xc2\xa0\xe2\x88\x92 2\n");
  /* Other non-ASCII text must still match exactly. */
  expect_apply_error("*** Begin Patch\n*** Update File: a\n@@\n-caf\xc3\xa9\n"
                     "*** End Patch",
                     "cafe\n",
                     "a: hunk 1 (patch line 4): could not find context line "
                     "\"caf\xc3\xa9\"");
}

Test(patch, stricter_tier_wins_over_an_earlier_looser_match) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n-a\n+b\n"
                "*** End Patch",
                "  a\na\n", "  a\nb\n");
}

Test(patch, crlf_file_stays_crlf) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+B\n+B2\n"
                " c\n*** End Patch",
                "a\r\nb\r\nc\r\n", "a\r\nB\r\nB2\r\nc\r\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n+z\n"
                "*** End Patch",
                "a\r\nb", "a\r\nb\r\nz\r\n");
  /* Only the first line decides: an LF file keeps a stray '\r'. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n-b\n+B\n"
                "*** End Patch",
                "a\nb\r\nc\r\n", "a\nB\nc\r\n");
}

/* The SDK's applyDiff keeps a missing final newline missing. */
Test(patch, sdk_file_without_final_newline_stays_without) {
  expect_update_sdk("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+B\n"
                    "*** End Patch",
                    "a\nb", "a\nB");
  expect_update_sdk("*** Begin Patch\n*** Update File: a\n@@\n-a\n-b\n"
                    "*** End Patch",
                    "a\nb", "");
  expect_update_sdk("*** Begin Patch\n*** Update File: a\n@@\n+x\n"
                    "*** End Patch",
                    "", "x\n");
  expect_update_sdk("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+\n"
                    "*** End Patch",
                    "a\nb", "a\n");
}

/* Codex ends every line of an updated file with a newline (checked
 * against its apply_patch 0.169.0): a file that had none gets one, and a
 * last line replaced by an empty one is kept. */
Test(patch, codex_file_without_final_newline_gets_one) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+c\n"
                "*** End Patch",
                "a\nb", "a\nc\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+\n"
                "*** End Patch",
                "a\nb", "a\n\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n-b\n+\n"
                "*** End Patch",
                "a\nb\n", "a\n\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n-a\n-b\n"
                "*** End Patch",
                "a\nb", "");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n+x\n"
                "*** End Patch",
                "a\n\n", "a\nx\n\n");
}

/* Context lines ending in Unicode whitespace match as in Codex, whose
 * trim_end() knows White_Space (checked against its apply_patch). */
Test(patch, context_matches_across_unicode_whitespace) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n foo\n-bar\n+baz\n"
                "*** End Patch",
                "foo\xe2\x80\xa8\nbar\n", "foo\xe2\x80\xa8\nbaz\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n foo\n-bar\n+baz\n"
                "*** End Patch",
                "foo\xe1\x9a\x80\nbar\n", "foo\xe1\x9a\x80\nbaz\n");
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n foo\n-bar\n+baz\n"
                "*** End Patch",
                "foo\xc2\x85\nbar\n", "foo\xc2\x85\nbaz\n");
  /* Leading ones too, in the tier that trims both ends. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n foo\n-bar\n+baz\n"
                "*** End Patch",
                "\xe3\x80\x80"
                "foo\nbar\n",
                "\xe3\x80\x80"
                "foo\nbaz\n");
}

Test(patch, trailing_empty_context_line_stands_for_the_final_newline) {
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n-b\n+B\n\n"
                "*** End Patch",
                "a\nb\n", "a\nB\n");
  /* An empty context line in the middle is a real empty line. */
  expect_update("*** Begin Patch\n*** Update File: a\n@@\n a\n\n-b\n+B\n"
                "*** End Patch",
                "a\nb\na\n\nb\n", "a\nb\na\n\nB\n");
}

Test(patch, mismatch_names_file_hunk_and_patch_line) {
  static const char patch[] = "*** Begin Patch\n" /* 1 */
                              "*** Update File: src/a.c\n"
                              "@@\n"
                              " int x;\n"
                              "-int y;\n" /* 5 */
                              "+int z;\n"
                              "@@ void f(void) {\n" /* 7 */
                              "   g();\n"
                              "-  foo();\n" /* 9 */
                              "+  bar();\n"
                              "*** End Patch";
  expect_apply_error(patch, "int x;\nint y;\nvoid f(void) {\n  h();\n}\n",
                     "src/a.c: hunk 2 (patch line 8): could not find context "
                     "line \"  g();\"");
  expect_apply_error(patch, "int x;\nint y;\nvoid f(void) {\n  g();\n}\n",
                     "src/a.c: hunk 2 (patch line 9): could not find context "
                     "line \"  foo();\" (the 1 line before it match at line "
                     "4)");
  expect_apply_error(patch, "int x;\nint y;\nvoid f(int) {\n",
                     "src/a.c: hunk 2 (patch line 7): could not find anchor "
                     "line \"void f(void) {\"");
  expect_apply_error(patch, "int x;\nint w;\n",
                     "src/a.c: hunk 1 (patch line 5): could not find context "
                     "line \"int y;\" (the 1 line before it match at line 1)");
}

Test(patch, hunks_out_of_order_are_explained) {
  expect_apply_error("*** Begin Patch\n*** Update File: a\n@@\n-c\n+C\n@@\n"
                     "-a\n+A\n*** End Patch",
                     "a\nb\nc\n",
                     "a: hunk 2 (patch line 6): context found at line 1, "
                     "before line 4 where the previous hunk or \"@@\" anchor "
                     "left off; hunks must follow the file's order");
}

Test(patch, long_context_line_is_quoted_truncated_and_escaped) {
  char patch[1024], want[512], line[301];
  memset(line, 'q', 300);
  line[0] = '"';
  line[1] = '\t';
  line[300] = '\0';
  snprintf(patch, sizeof(patch),
           "*** Begin Patch\n*** Update File: a\n@@\n-%s\n*** End Patch", line);
  /* '"' and '\t' take 2 and 4 bytes quoted: 194 q's fill 200 bytes. */
  char qs[195];
  memset(qs, 'q', 194);
  qs[194] = '\0';
  snprintf(want, sizeof(want),
           "a: hunk 1 (patch line 4): could not find context line "
           "\"\\\"\\x09%s...\"",
           qs);
  expect_apply_error(patch, "x\n", want);
}

Test(patch, apply_refuses_ops_that_are_not_updates) {
  _cleanup_patch_ struct sbx_patch *p =
      parse_ok("*** Begin Patch\n*** Delete File: a\n*** End Patch");
  char *out = NULL;
  size_t outlen = 0;
  struct sbx_error e = {0};
  cr_expect_eq(sbx_patch_apply_update(&p->ops[0], "x", 1, SBX_PATCH_EOL_CODEX,
                                      &out, &outlen, &e),
               -EINVAL);
  cr_expect_eq(e.code, SBX_INVALID_ARGUMENT);
  cr_expect_null(out);
}

Test(patch, search_stays_linear_on_repetitive_input, .timeout = 20) {
  /* 200000 lines of "a" and a hunk of 5000 "a" lines then "b": a naive
   * search makes 10^9 line comparisons per tier, KMP about 4 * 10^5. */
  size_t nfile = 200000, npat = 5000;
  _cleanup_free_ char *in = malloc(2 * nfile + 1);
  _cleanup_free_ char *patch = malloc(3 * npat + 128);
  cr_assert(in && patch);
  for (size_t i = 0; i < nfile; i++)
    memcpy(in + 2 * i, "a\n", 2);
  in[2 * nfile] = '\0';
  size_t cap = 3 * npat + 128;
  size_t len =
      (size_t)snprintf(patch, cap, "*** Begin Patch\n*** Update File: a\n@@\n");
  for (size_t i = 0; i < npat; i++) {
    memcpy(patch + len, " a\n", 3);
    len += 3;
  }
  len += (size_t)snprintf(patch + len, cap - len, "-b\n*** End Patch\n");
  expect_apply_error(patch, in,
                     "a: hunk 1 (patch line 5004): could not find context "
                     "line \"b\" (the 5000 lines before it match at line 1)");
}
