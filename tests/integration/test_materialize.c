/* Materialization through a real sandboxd: each entry type checked with
 * stat (mode, owner, group, content), local_dir with 2000 files under every
 * concurrency setting, git_repo from a local bare repository by branch and
 * by commit, and sources outside the base directory refused. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/local/local.h"
#include "controller/backend/backend.h"
#include "controller/config/manifest.h"
#include "controller/sandbox/materialize.h"
#include "tests/support/daemon.h"

static struct test_daemon d;
static char base[64]; /* host dir: the base directory of local sources */
static struct sandbox sb;

static void setup(void) {
  test_daemon_start(&d, NULL);
  (void)snprintf(base, sizeof(base), "/tmp/sbx-mat-base-XXXXXX");
  cr_assert_not_null(mkdtemp(base));
  memset(&sb, 0, sizeof(sb));
  sb.client = d.client;
  sb.root = d.root;
  sb.backend = &backend_local;
}

static void teardown(void) {
  for (size_t i = 0; i < sb.nenv; i++)
    free(sb.env[i]);
  free(sb.env);
  test_daemon_stop(&d);
  (void)sandbox_rm_rf(base);
}

TestSuite(materialize, .init = setup, .fini = teardown, .timeout = 240);

static void write_file(const char *rel, const char *text, mode_t mode) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", base, rel);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s", p);
  fputs(text, f);
  fclose(f);
  cr_assert_eq(chmod(p, mode), 0);
}

static void mkdir_base(const char *rel) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", base, rel);
  cr_assert_eq(mkdir(p, 0755), 0, "%s", p);
}

static struct manifest *parse(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  cr_assert_not_null(j, "%s", je.text);
  struct manifest *m = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(manifest_parse(j, "m", &m, &e), 0, "%s", e.msg);
  json_decref(j);
  return m;
}

static int run(const char *text, struct materialize_limits l, bool no_archive,
               struct sbx_error *e) {
  struct manifest *m = parse(text);
  struct materialize_options o = {
      .limits = l, .base_dir = base, .no_archive = no_archive};
  memset(e, 0, sizeof(*e));
  int r = materialize_manifest(&sb, m, &o, e);
  manifest_free(m);
  return r;
}

static void stat_ws(const char *rel, struct stat *st) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", d.root, rel);
  cr_assert_eq(lstat(p, st), 0, "%s: %s", p, strerror(errno));
}

static char *read_ws(const char *rel) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", d.root, rel);
  FILE *f = fopen(p, "r");
  if (!f)
    return NULL;
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

Test(materialize, each_entry_type_lands_with_its_mode_owner_and_content) {
  write_file("one.txt", "local one\n", 0640);
  mkdir_base("tree");
  mkdir_base("tree/sub");
  write_file("tree/top.sh", "#!/bin/sh\n", 0755);
  write_file("tree/sub/leaf.txt", "leaf\n", 0600);
  bool root = geteuid() == 0;
  char text[4096];
  (void)snprintf(
      text, sizeof(text),
      "{\"entries\": {"
      " \"notes.txt\": {\"type\": \"file\", \"content\": \"hello\\n\", "
      "\"permissions\": \"rw-r-----\"%s},"
      " \"plain.txt\": {\"type\": \"file\", \"content\": \"p\"},"
      " \"bin.dat\": {\"type\": \"file\", \"content_base64\": \"AAECAw==\"},"
      " \"docs\": {\"type\": \"dir\", \"permissions\": {\"owner\": 7, "
      "\"group\": 5, \"other\": 0},"
      "   \"children\": {\"readme.md\": {\"type\": \"file\", \"content\": "
      "\"# r\"}}},"
      " \"sticky\": {\"type\": \"dir\", \"permissions\": \"rwxrwxrwt\"},"
      " \"copy.txt\": {\"type\": \"local_file\", \"src\": \"one.txt\", "
      "\"sha256\": "
      "\"0a5d1c1ff5e5d2f2a2bb7c7d3d7f3c3e8c3cb5e0b6c4a4d1e5d86e0d8f5b3f47\"}"
      "}%s}",
      root ? ", \"group\": \"sbxmatgrp\"" : "",
      root ? ", \"groups\": [{\"name\": \"sbxmatgrp\"}]" : "");
  /* The SHA-256 above is wrong on purpose: refused, and nothing stays. */
  struct sbx_error e;
  int r = run(text, materialize_default_limits(), false, &e);
  cr_expect_lt(r, 0);
  cr_expect(strstr(e.msg, "entry \"copy.txt\"") &&
                strstr(e.msg, "has SHA-256 "),
            "%s", e.msg);
  struct stat st;
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/copy.txt", d.root);
  cr_expect_neq(lstat(p, &st), 0, "a refused local_file is removed");

  /* The right digest of "local one\n". */
  char *fix = strstr(text, "0a5d1c1f");
  cr_assert_not_null(fix);
  memcpy(fix,
         "6a1c0ec5fe3a2e6a7c1c3b5e4a28f6c9e0b5b3d7a4f1f1e6d3b2c0a9e8d7c6b5",
         64);
  r = run(text, materialize_default_limits(), false, &e);
  cr_assert_lt(r, 0, "still a made-up digest");
  /* Compute it instead: sha256sum is on every Debian. */
  char cmd[600], digest[65] = {0};
  (void)snprintf(cmd, sizeof(cmd), "sha256sum %s/one.txt", base);
  FILE *pf = popen(cmd, "r");
  cr_assert_not_null(pf);
  cr_assert_eq(fread(digest, 1, 64, pf), 64);
  pclose(pf);
  memcpy(fix, digest, 64);
  r = run(text, materialize_default_limits(), false, &e);
  cr_assert_eq(r, 0, "%s", e.msg);

  stat_ws("notes.txt", &st);
  cr_expect_eq(st.st_mode & 07777, 0640);
  cr_expect_str_eq(read_ws("notes.txt"), "hello\n");
  cr_expect_eq(st.st_uid, geteuid());
  if (root) {
    struct group *g = getgrnam("sbxmatgrp");
    cr_assert_not_null(g, "the manifest's group was created");
    cr_expect_eq(st.st_gid, g->gr_gid, "the entry's group was applied");
  }
  stat_ws("plain.txt", &st);
  cr_expect_eq(st.st_mode & 07777, 0755, "the SDK's default, files too");
  stat_ws("bin.dat", &st);
  cr_expect_eq(st.st_size, 4);
  stat_ws("docs", &st);
  cr_expect(S_ISDIR(st.st_mode));
  cr_expect_eq(st.st_mode & 07777, 0750);
  cr_expect_str_eq(read_ws("docs/readme.md"), "# r");
  stat_ws("sticky", &st);
  cr_expect_eq(st.st_mode & 07777, 01777);
  stat_ws("copy.txt", &st);
  cr_expect_str_eq(read_ws("copy.txt"), "local one\n");
  cr_expect_eq(st.st_mode & 07777, 0755);

  /* local_dir keeps the files' own modes; the entry gets its permissions. */
  r = run("{\"entries\": {\"t\": {\"type\": \"local_dir\", \"src\": "
          "\"tree\", \"permissions\": \"rwx------\"}}}",
          materialize_default_limits(), false, &e);
  cr_assert_eq(r, 0, "%s", e.msg);
  stat_ws("t", &st);
  cr_expect_eq(st.st_mode & 07777, 0700);
  stat_ws("t/top.sh", &st);
  cr_expect_eq(st.st_mode & 0777, 0755);
  stat_ws("t/sub/leaf.txt", &st);
  cr_expect_eq(st.st_mode & 0777, 0600);
  cr_expect_str_eq(read_ws("t/sub/leaf.txt"), "leaf\n");
  cr_expect_eq(sb.nenv, 0);
  if (root)
    (void)!system("groupdel sbxmatgrp 2>/dev/null");
}

Test(materialize, environment_reaches_the_sandbox) {
  struct sbx_error e;
  int r = run("{\"environment\": {\"A\": \"1\", \"B\": {\"value\": \"two\", "
              "\"ephemeral\": true}}}",
              materialize_default_limits(), false, &e);
  cr_assert_eq(r, 0, "%s", e.msg);
  cr_expect_eq(sb.nenv, 2);
  cr_expect_str_eq(sb.env[1], "B=two");
}

static void make_many(const char *dir, int n) {
  mkdir_base(dir);
  for (int i = 0; i < n; i++) {
    char rel[128], text[64];
    if (i % 100 == 0) {
      (void)snprintf(rel, sizeof(rel), "%s/d%d", dir, i / 100);
      mkdir_base(rel);
    }
    (void)snprintf(rel, sizeof(rel), "%s/d%d/f%d.txt", dir, i / 100, i);
    (void)snprintf(text, sizeof(text), "file %d\n", i);
    write_file(rel, text, 0644);
  }
}

static int count_files(const char *rel) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", d.root, rel);
  DIR *dir = opendir(p);
  if (!dir)
    return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dir))) {
    if (de->d_name[0] == '.')
      continue;
    char sub[600];
    (void)snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name);
    struct stat st;
    stat_ws(sub, &st);
    n += S_ISDIR(st.st_mode) ? count_files(sub) : 1;
  }
  closedir(dir);
  return n;
}

Test(materialize, local_dir_with_2000_files_under_every_concurrency) {
  make_many("many", 2000);
  static const struct {
    unsigned entries, files;
    bool no_archive;
    const char *dest;
  } cases[] = {
      {1, 1, true, "c1"},
      {4, 4, true, "c4"},
      {0, 0, true, "c0"},
      {4, 4, false, "archive"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[256];
    (void)snprintf(text, sizeof(text),
                   "{\"entries\": {\"%s\": {\"type\": \"local_dir\", \"src\": "
                   "\"many\"}}}",
                   cases[i].dest);
    struct materialize_limits l = {cases[i].entries, cases[i].files};
    struct sbx_error e;
    int r = run(text, l, cases[i].no_archive, &e);
    cr_assert_eq(r, 0, "%s: %s", cases[i].dest, e.msg);
    cr_expect_eq(count_files(cases[i].dest), 2000, "%s", cases[i].dest);
    char rel[128];
    (void)snprintf(rel, sizeof(rel), "%s/d19/f1999.txt", cases[i].dest);
    cr_expect_str_eq(read_ws(rel), "file 1999\n");
  }
}

static void sh_in(const char *dir, const char *script) {
  char cmd[2048];
  (void)snprintf(cmd, sizeof(cmd), "cd %s && %s", dir, script);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void capture(const char *cmd, char *out, size_t n) {
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f);
  size_t k = fread(out, 1, n - 1, f);
  out[k] = '\0';
  pclose(f);
  while (k > 0 && out[k - 1] == '\n')
    out[--k] = '\0';
}

Test(materialize, git_repo_by_branch_and_by_commit) {
  if (system("git --version >/dev/null 2>&1") != 0)
    cr_skip_test("git is not installed");
  /* A bare repository with two commits on main and one on a branch. */
  sh_in(
      base,
      "git init -q -b main work && cd work && "
      "git config user.email t@e && git config user.name t && "
      "echo v1 > f.txt && mkdir -p sub && echo s > sub/s.txt && "
      "ln -s f.txt link && git add . && git commit -qm one && "
      "echo v2 > f.txt && git commit -qam two && "
      "git checkout -qb feature && echo feat > f.txt && git commit -qam three "
      "&& git checkout -q main && git clone -q --bare . ../bare.git");
  char first[64], cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "git -C %s/work rev-parse HEAD~1", base);
  capture(cmd, first, sizeof(first));
  cr_assert_eq(strlen(first), 40);
  char text[2048];
  (void)snprintf(text, sizeof(text),
                 "{\"entries\": {"
                 " \"main\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\"},"
                 " \"feat\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\", \"ref\": \"feature\"},"
                 " \"old\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\", \"ref\": \"%s\"},"
                 " \"short\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\", \"ref\": \"%.10s\"},"
                 " \"part\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\", \"subpath\": \"sub\"}"
                 "}}",
                 base, base, base, first, base, first, base);
  struct sbx_error e;
  int r = run(text, materialize_default_limits(), false, &e);
  cr_assert_eq(r, 0, "%s", e.msg);
  cr_expect_str_eq(read_ws("main/f.txt"), "v2\n");
  cr_expect_str_eq(read_ws("feat/f.txt"), "feat\n");
  cr_expect_str_eq(read_ws("old/f.txt"), "v1\n");
  cr_expect_str_eq(read_ws("short/f.txt"), "v1\n");
  cr_expect_str_eq(read_ws("part/s.txt"), "s\n");
  struct stat st;
  stat_ws("main/link", &st);
  cr_expect(S_ISLNK(st.st_mode), "symlinks in a repository are kept");
  stat_ws("main/.git", &st);
  cr_expect(S_ISDIR(st.st_mode), "a whole clone keeps .git");
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/part/.git", d.root);
  cr_expect_neq(lstat(p, &st), 0, "a subpath has no .git");

  /* A ref that is not there names the entry and git's complaint. */
  (void)snprintf(text, sizeof(text),
                 "{\"entries\": {\"bad\": {\"type\": \"git_repo\", \"url\": "
                 "\"file://%s/bare.git\", \"ref\": \"nosuchbranch\"}}}",
                 base);
  r = run(text, materialize_default_limits(), false, &e);
  cr_expect_lt(r, 0);
  cr_expect(strstr(e.msg, "entry \"bad\": git clone of") &&
                strstr(e.msg, "nosuchbranch"),
            "%s", e.msg);
}

Test(materialize, sources_outside_the_base_directory_are_refused) {
  char outside[64];
  (void)snprintf(outside, sizeof(outside), "/tmp/sbx-mat-out-XXXXXX");
  cr_assert_not_null(mkdtemp(outside));
  char secret[128];
  (void)snprintf(secret, sizeof(secret), "%s/secret.txt", outside);
  FILE *f = fopen(secret, "w");
  fputs("secret\n", f);
  fclose(f);
  mkdir_base("in");
  write_file("in/ok.txt", "ok\n", 0644);
  char link[256];
  (void)snprintf(link, sizeof(link), "%s/in/escape.txt", base);
  cr_assert_eq(symlink(secret, link), 0);
  (void)snprintf(link, sizeof(link), "%s/linkdir", base);
  cr_assert_eq(symlink(outside, link), 0);

  char text[1024];
  static const char *const bad[] = {"../x", NULL, "in/escape.txt",
                                    "linkdir/secret.txt"};
  static const char *const want[] = {
      "is outside the base directory", "is outside the base directory",
      "symbolic links are not followed", "symbolic links are not followed"};
  for (size_t i = 0; i < 4; i++) {
    (void)snprintf(text, sizeof(text),
                   "{\"entries\": {\"e%zu\": {\"type\": \"local_file\", "
                   "\"src\": \"%s\"}}}",
                   i, bad[i] ? bad[i] : secret);
    struct sbx_error e;
    int r = run(text, materialize_default_limits(), false, &e);
    cr_expect_lt(r, 0, "case %zu accepted", i);
    char name[16];
    (void)snprintf(name, sizeof(name), "entry \"e%zu\"", i);
    cr_expect(strstr(e.msg, name) && strstr(e.msg, want[i]), "case %zu: %s", i,
              e.msg);
  }
  /* A grant makes a host directory a legitimate source. */
  (void)snprintf(text, sizeof(text),
                 "{\"entries\": {\"g\": {\"type\": \"local_file\", \"src\": "
                 "\"%s\"}}, \"extra_path_grants\": [{\"path\": \"%s\", "
                 "\"read_only\": true}]}",
                 secret, outside);
  struct sbx_error e;
  cr_expect_eq(run(text, materialize_default_limits(), false, &e), 0, "%s",
               e.msg);
  cr_expect_str_eq(read_ws("g"), "secret\n");
  /* local_dir refuses a symlink inside the tree. */
  int r = run("{\"entries\": {\"tree\": {\"type\": \"local_dir\", \"src\": "
              "\"in\"}}}",
              materialize_default_limits(), true, &e);
  cr_expect_lt(r, 0);
  cr_expect(strstr(e.msg, "local_dir entries do not support symbolic links") &&
                strstr(e.msg, "escape.txt"),
            "%s", e.msg);
  (void)sandbox_rm_rf(outside);
}
