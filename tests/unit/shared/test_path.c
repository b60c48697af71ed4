#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "shared/path.h"

/* One row: input (len -1 means strlen), flags, expected errno (0 = ok) and
 * the normalized output. */
struct rel_case {
  const char *in;
  int len;
  unsigned flags;
  int err;
  const char *out;
};

static const struct rel_case rel_cases[] = {
    {"a", -1, 0, 0, "a"},
    {"a/b/c", -1, 0, 0, "a/b/c"},
    {"./a//b/", -1, 0, 0, "a/b"},
    {"a/./b", -1, 0, 0, "a/b"},
    {"a/../b", -1, 0, 0, "b"},
    {"a/b/../../c", -1, 0, 0, "c"},
    {"a/..", -1, 0, 0, "."},
    {".", -1, 0, 0, "."},
    {"./", -1, 0, 0, "."},
    {"a/", -1, 0, 0, "a"},
    {"...", -1, 0, 0, "..."},
    {"..a", -1, 0, 0, "..a"},
    {"a..", -1, 0, 0, "a.."},
    {".hidden/x", -1, 0, 0, ".hidden/x"},
    {"a b/c d", -1, 0, 0, "a b/c d"},
    {"ünïcode/файл", -1, 0, 0, "ünïcode/файл"},
    {"a\\b", -1, 0, 0, "a\\b"},
    {"C:x", -1, 0, 0, "C:x"},
    {"", -1, SBX_PATH_EMPTY_IS_ROOT, 0, "."},
    {"a//////b", -1, 0, 0, "a/b"},
    {"x/y/z/../../..", -1, 0, 0, "."},
    {"a/./././b/.", -1, 0, 0, "a/b"},
    {"a/b/c/../d", -1, 0, 0, "a/b/d"},
    {"-rf", -1, 0, 0, "-rf"},
    {"a/b/", -1, SBX_PATH_NO_DOTDOT | SBX_PATH_POSIX_ONLY, 0, "a/b"},
    /* rejected */
    {"", -1, 0, EINVAL, NULL},
    {"/etc", -1, 0, EINVAL, NULL},
    {"/", -1, 0, EINVAL, NULL},
    {"..", -1, 0, EACCES, NULL},
    {"../a", -1, 0, EACCES, NULL},
    {"a/../..", -1, 0, EACCES, NULL},
    {"a/../../b", -1, 0, EACCES, NULL},
    {"./..", -1, 0, EACCES, NULL},
    {"a/b/../../../c", -1, 0, EACCES, NULL},
    {"a\0b", 3, 0, EINVAL, NULL},
    {"\0", 1, 0, EINVAL, NULL},
    {"a/..", -1, SBX_PATH_NO_DOTDOT, EINVAL, NULL},
    {"a/../b", -1, SBX_PATH_NO_DOTDOT, EINVAL, NULL},
    {"a\\b", -1, SBX_PATH_POSIX_ONLY, EINVAL, NULL},
    {"C:\\Users", -1, SBX_PATH_POSIX_ONLY, EINVAL, NULL},
    {"c:/x", -1, SBX_PATH_POSIX_ONLY, EINVAL, NULL},
    {"//etc", -1, 0, EINVAL, NULL},
};

Test(path, normalize_relative_table) {
  cr_assert_geq(sizeof(rel_cases) / sizeof(rel_cases[0]), 40);
  size_t n = sizeof(rel_cases) / sizeof(rel_cases[0]);
  for (size_t i = 0; i < n; i++) {
    const struct rel_case *c = &rel_cases[i];
    size_t len = c->len < 0 ? strlen(c->in) : (size_t)c->len;
    char out[SBX_PATH_MAX];
    struct sbx_error e = {0};
    int r = sbx_path_normalize_rel(c->in, len, out, sizeof(out), c->flags, &e);
    if (c->err == 0) {
      cr_expect_eq(r, 0, "case %zu \"%s\": got %d (%s)", i, c->in, r, e.msg);
      if (r == 0)
        cr_expect_str_eq(out, c->out, "case %zu \"%s\"", i, c->in);
    } else {
      cr_expect_eq(r, -c->err, "case %zu \"%s\": want -%d got %d", i, c->in,
                   c->err, r);
      cr_expect_neq(e.code, SBX_OK, "case %zu has no error code", i);
      cr_expect_gt(strlen(e.msg), 0, "case %zu has no message", i);
    }
  }
}

Test(path, long_paths) {
  static char big[5001];
  memset(big, 'a', 5000);
  for (int i = 100; i < 5000; i += 100)
    big[i] = '/';
  char out[SBX_PATH_MAX];
  struct sbx_error e = {0};
  cr_expect_eq(sbx_path_normalize_rel(big, 5000, out, sizeof(out), 0, &e),
               -ENAMETOOLONG);
  cr_expect_eq(e.code, SBX_INVALID_ARGUMENT);

  /* A single component over NAME_MAX. */
  char comp[300];
  memset(comp, 'b', 299);
  comp[299] = '\0';
  cr_expect_eq(sbx_path_normalize_rel(comp, 299, out, sizeof(out), 0, NULL),
               -ENAMETOOLONG);
  /* Exactly NAME_MAX is fine. */
  cr_expect_eq(sbx_path_normalize_rel(comp, 255, out, sizeof(out), 0, NULL), 0);
  cr_expect_eq(strlen(out), 255);
  /* A too-small output buffer is refused, not overrun. */
  char tiny[4];
  cr_expect_eq(sbx_path_normalize_rel("abcdef", 6, tiny, sizeof(tiny), 0, NULL),
               -ENAMETOOLONG);
}

struct res_case {
  const char *in;
  bool write;
  int err;
  int grant;
  const char *rel;
};

Test(path, resolve_grants) {
  struct sbx_grant grants[] = {
      {.path = "/data", .read_only = true},
      {.path = "/data/rw", .read_only = false},
      {.path = "/etc/app", .read_only = true},
  };
  static const struct res_case cases[] = {
      {"a/b", false, 0, -1, "a/b"},
      {"", false, 0, -1, "."},
      {"/workspace", false, 0, -1, "."},
      {"/workspace/x/../y", true, 0, -1, "y"},
      {"/workspace/../etc/passwd", false, EACCES, 0, NULL},
      {"/workspacefoo", false, EACCES, 0, NULL},
      {"/etc", false, EACCES, 0, NULL},
      {"/etc/passwd", false, EACCES, 0, NULL},
      {"/etc/app", false, 0, 2, "."},
      {"/etc/app/conf.d/x", false, 0, 2, "conf.d/x"},
      {"/etc/app/x", true, EROFS, 0, NULL},
      {"/data/x", false, 0, 0, "x"},
      {"/data/x", true, EROFS, 0, NULL},
      {"/data/rw/x", true, 0, 1, "x"},
      {"/data/rwx", true, EROFS, 0, NULL},
      {"/data/rw/../x", true, EROFS, 0, NULL},
      {"/../../data/rw/y", true, 0, 1, "y"},
      {"../x", false, EACCES, 0, NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const struct res_case *c = &cases[i];
    struct sbx_resolved out;
    struct sbx_error e = {0};
    int r = sbx_path_resolve("/workspace", grants, 3, c->in, strlen(c->in),
                             c->write, &out, &e);
    if (c->err) {
      cr_expect_eq(r, -c->err, "case %zu \"%s\": want -%d got %d", i, c->in,
                   c->err, r);
      cr_expect_eq(e.code, SBX_PERMISSION_DENIED, "case %zu", i);
    } else {
      cr_expect_eq(r, 0, "case %zu \"%s\": %s", i, c->in, e.msg);
      cr_expect_eq(out.grant, c->grant, "case %zu \"%s\"", i, c->in);
      if (r == 0)
        cr_expect_str_eq(out.rel, c->rel, "case %zu", i);
    }
  }
  /* Without any grant, /etc is outside. */
  struct sbx_resolved out;
  struct sbx_error e = {0};
  cr_expect_eq(
      sbx_path_resolve("/workspace", NULL, 0, "/etc", 4, false, &out, &e),
      -EACCES);
  cr_expect(strstr(e.msg, "escapes the workspace root") != NULL, "%s", e.msg);
}

Test(path, normalize_absolute) {
  char out[SBX_PATH_MAX];
  cr_expect_eq(
      sbx_path_normalize_abs("/a/../../b//c/.", 15, out, sizeof(out), NULL), 0);
  cr_expect_str_eq(out, "/b/c");
  cr_expect_eq(sbx_path_normalize_abs("/", 1, out, sizeof(out), NULL), 0);
  cr_expect_str_eq(out, "/");
  cr_expect_eq(sbx_path_normalize_abs("rel", 3, out, sizeof(out), NULL),
               -EINVAL);
}

Test(path, join_and_under) {
  char out[64];
  cr_expect_eq(sbx_path_join(".", "a/b", out, sizeof(out)), 0);
  cr_expect_str_eq(out, "a/b");
  cr_expect_eq(sbx_path_join("a", ".", out, sizeof(out)), 0);
  cr_expect_str_eq(out, "a");
  cr_expect_eq(sbx_path_join("a", "b", out, sizeof(out)), 0);
  cr_expect_str_eq(out, "a/b");
  cr_expect_eq(sbx_path_join("aaaa", "bbbb", out, 5), -ENAMETOOLONG);
  cr_expect(sbx_path_is_under("/a", "/a"));
  cr_expect(sbx_path_is_under("/a", "/a/b"));
  cr_expect(!sbx_path_is_under("/a", "/ab"));
  cr_expect(sbx_path_is_under("/", "/x"));
}
