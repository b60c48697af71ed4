/* The manifest parser: every entry type, permissions, environment, users,
 * groups and grants; one clear message per kind of bad input; the
 * persisted form; the live-sandbox rules; the concurrency option. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "backends/local/local.h"
#include "controller/config/manifest.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/sandbox/materialize.h"
#include "shared/cleanup.h"

static struct manifest *parse_ok(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  cr_assert_not_null(j, "bad test JSON: %s", je.text);
  struct manifest *m = NULL;
  struct sbx_error e = {0};
  int r = manifest_parse(j, "m.json", &m, &e);
  json_decref(j);
  cr_assert_eq(r, 0, "%s", e.msg);
  return m;
}

static const char *parse_err(const char *text, struct sbx_error *e) {
  json_error_t je;
  json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
  cr_assert_not_null(j, "bad test JSON: %s", je.text);
  struct manifest *m = NULL;
  memset(e, 0, sizeof(*e));
  int r = manifest_parse(j, "m.json", &m, e);
  json_decref(j);
  cr_assert_lt(r, 0, "accepted: %s", text);
  cr_assert_null(m);
  return e->msg;
}

static const struct manifest_entry *entry(const struct manifest *m,
                                          const char *path) {
  for (size_t i = 0; i < m->nentries; i++)
    if (strcmp(m->entries[i].path, path) == 0)
      return &m->entries[i];
  return NULL;
}

Test(manifest, every_entry_type_parses) {
  struct manifest *m = parse_ok(
      "{\"version\": 1, \"root\": \"/work//space/\", \"entries\": {"
      " \"a.txt\": {\"type\": \"file\", \"content\": \"hi\","
      "   \"permissions\": \"rw-r-----\", \"group\": \"staff\","
      "   \"description\": \"a file\"},"
      " \"b.bin\": {\"type\": \"file\", \"content_base64\": \"AAEC\"},"
      " \"d\": {\"type\": \"dir\", \"permissions\": {\"owner\": 7, "
      "\"group\": 5},"
      "   \"children\": {\"x\": {\"type\": \"file\", \"content\": \"x\"}}},"
      " \"lf\": {\"type\": \"local_file\", \"src\": \"data/f.txt\", "
      "\"sha256\": \""
      "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\"},"
      " \"ld\": {\"type\": \"local_dir\", \"src\": \"data\", \"ephemeral\": "
      "true},"
      " \"g1\": {\"type\": \"git_repo\", \"repo\": \"openai/codex\", \"ref\": "
      "\"main\", \"subpath\": \"docs\"},"
      " \"g2\": {\"type\": \"git_repo\", \"url\": \"file:///srv/r.git\", "
      "\"ref\": \"abc1234\"},"
      " \"mnt\": {\"type\": \"mount\", \"source\": \"/srv/data\", "
      "\"read_only\": false, \"mount_path\": \"./mnt\", \"mount_strategy\": "
      "{\"type\": \"local_bind\"}},"
      " \"s3\": {\"type\": \"s3_mount\", \"bucket\": \"b\", \"prefix\": \"p/\"}"
      "},"
      " \"environment\": {\"A\": \"1\", \"B\": {\"value\": \"2\", "
      "\"description\": \"bee\", \"ephemeral\": true}},"
      " \"users\": [\"alice\", {\"name\": \" bob \"}],"
      " \"groups\": [{\"name\": \"staff\", \"users\": [\"alice\", {\"name\": "
      "\"bob\"}]}],"
      " \"extra_path_grants\": [{\"path\": \"/srv/ref/\", \"read_only\": true, "
      "\"description\": \"docs\"}]}");
  cr_expect_str_eq(m->root, "/work/space");
  cr_expect_eq(m->nentries, 10);
  const struct manifest_entry *a = entry(m, "a.txt");
  cr_assert_not_null(a);
  cr_expect_eq(a->mode, 0640);
  cr_expect_str_eq(a->group, "staff");
  cr_expect_str_eq(a->content, "hi");
  const struct manifest_entry *b = entry(m, "b.bin");
  cr_expect_eq(b->content_len, 3);
  cr_expect_eq(b->mode, -1, "no permissions: the SDK's default later");
  cr_expect_eq(entry(m, "d")->mode, 0750);
  cr_expect_not_null(entry(m, "d/x"));
  cr_expect_str_eq(entry(m, "lf")->sha256,
                   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b"
                   "7852b855");
  cr_expect(entry(m, "ld")->ephemeral);
  cr_expect_str_eq(entry(m, "g1")->url, "https://github.com/openai/codex.git");
  cr_expect_str_eq(entry(m, "g1")->subpath, "docs");
  cr_expect_str_eq(entry(m, "g2")->url, "file:///srv/r.git");
  cr_expect_eq(entry(m, "mnt")->type, MANIFEST_MOUNT);
  cr_expect_not(entry(m, "mnt")->read_only);
  cr_expect_eq(entry(m, "s3")->type, MANIFEST_CLOUD_MOUNT);
  cr_expect(entry(m, "s3")->read_only, "mounts default to read-only");
  cr_expect_eq(m->nenv, 2);
  cr_expect_str_eq(manifest_getenv(m, "B"), "2");
  cr_expect_eq(m->nusers, 2);
  cr_expect_str_eq(m->users[1], "bob");
  cr_expect_eq(m->groups[0].nusers, 2);
  cr_expect_str_eq(m->grants[0].path, "/srv/ref");
  cr_expect(m->grants[0].read_only);

  /* Cloud mounts parse, then no backend takes them. */
  struct sbx_error e = {0};
  cr_expect_lt(lifecycle_check_manifest(m, &backend_local, &e), 0);
  cr_expect(strstr(e.msg, "s3_mount is not supported by backend local"), "%s",
            e.msg);
  manifest_free(m);
}

Test(manifest, permission_forms) {
  struct manifest *m = parse_ok(
      "{\"entries\": {"
      " \"a\": {\"type\": \"dir\", \"permissions\": \"drwxr-xr-x\"},"
      " \"b\": {\"type\": \"dir\", \"permissions\": \"rwxrwxrwt\"},"
      " \"c\": {\"type\": \"file\", \"permissions\": 420},"
      " \"d\": {\"type\": \"file\", \"permissions\": {}},"
      " \"e\": {\"type\": \"file\", \"permissions\": \"-rw-r--r--@\"},"
      " \"f\": {\"type\": \"dir\", \"permissions\": {\"owner\": 7, "
      "\"group\": 7, \"other\": 7, \"directory\": true, \"sticky\": true}}"
      "}}");
  cr_expect_eq(entry(m, "a")->mode, 0755);
  cr_expect_eq(entry(m, "b")->mode, 01777);
  cr_expect_eq(entry(m, "c")->mode, 0644);
  cr_expect_eq(entry(m, "d")->mode, 0700, "{} is 0700, as in the SDK");
  cr_expect_eq(entry(m, "e")->mode, 0644);
  cr_expect_eq(entry(m, "f")->mode, 01777);
  manifest_free(m);
}

/* Each kind of bad input gets its own message naming what is wrong. */
Test(manifest, bad_inputs_each_say_what_is_wrong) {
  static const struct {
    const char *json, *want;
  } cases[] = {
      {"[]", "a manifest must be an object, not an array"},
      {"{\"entires\": {}}", "unknown key \"entires\""},
      {"{\"extraPathGrants\": []}", "manifests use snake_case: "
                                    "\"extra_path_grants\""},
      {"{\"version\": 2}", "\"version\" must be 1"},
      {"{\"root\": \"workspace\"}", "\"root\" \"workspace\" must be an "
                                    "absolute POSIX path"},
      {"{\"entries\": {\"/etc/passwd\": {\"type\": \"file\"}}}",
       "entry \"/etc/passwd\": the path must be relative to the root"},
      {"{\"entries\": {\"a/../../x\": {\"type\": \"file\"}}}",
       "entry \"a/../../x\": the path must not contain \"..\""},
      {"{\"entries\": {\"\": {\"type\": \"file\"}}}",
       "entry \"\": the path is empty"},
      {"{\"entries\": {\"C:/x\": {\"type\": \"file\"}}}",
       "entry \"C:/x\": the path must not start with a Windows drive"},
      {"{\"entries\": {\"a\\\\b\": {\"type\": \"file\"}}}",
       "the path must use \"/\" separators"},
      {"{\"entries\": {\"a\": {\"content\": \"x\"}}}",
       "entry \"a\": \"type\" is required"},
      {"{\"entries\": {\"a\": {\"type\": \"symlink\"}}}",
       "entry \"a\": unknown entry type \"symlink\""},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"src\": \"x\"}}}",
       "entry \"a\": unknown key \"src\" for a file entry"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"x\", "
       "\"content_base64\": \"eA==\"}}}",
       "give \"content\" or \"content_base64\", not both"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"content_base64\": "
       "\"!!\"}}}",
       "\"content_base64\" is not valid base64"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"permissions\": "
       "\"rwxbad---\"}}}",
       "\"permissions\" \"rwxbad---\" is not a mode string"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"permissions\": "
       "{\"owner\": 9}}}}",
       "permissions \"owner\" must be an integer 0..7"},
      {"{\"entries\": {\"a\": {\"type\": \"local_file\"}}}",
       "entry \"a\": a local_file entry needs \"src\""},
      {"{\"entries\": {\"a\": {\"type\": \"git_repo\"}}}",
       "a git_repo needs \"repo\" or \"url\""},
      {"{\"entries\": {\"a\": {\"type\": \"git_repo\", \"repo\": "
       "\"--upload-pack=evil\"}}}",
       "\"repo\" must not start with \"-\""},
      {"{\"entries\": {\"a\": {\"type\": \"git_repo\", \"repo\": \"o/r\", "
       "\"subpath\": \"../up\"}}}",
       "entry \"a\": \"subpath\": the path must not contain \"..\""},
      {"{\"entries\": {\"a\": {\"type\": \"s3_mount\", \"prefix\": "
       "\"p\"}}}",
       "entry \"a\": a s3_mount entry needs \"bucket\""},
      {"{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": "
       "\"rel/dir\"}}}",
       "\"source\" \"rel/dir\" must be an absolute host path"},
      /* Accepted by the SDK's schema, but nothing here would do them. */
      {"{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": \"/srv\", "
       "\"mount_path\": \"elsewhere\"}}}",
       "entry \"m\": a \"mount_path\" other than the entry's own path is "
       "not supported"},
      {"{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": \"/srv\", "
       "\"permissions\": \"rwx------\"}}}",
       "entry \"m\": \"permissions\" is not supported on a mount entry: a "
       "bind mount keeps its source's owner and mode"},
      {"{\"entries\": {\"m\": {\"type\": \"local_bind\", \"source\": "
       "\"/srv\", \"group\": \"staff\"}}}",
       "entry \"m\": \"group\" is not supported on a mount entry"},
      {"{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": \"/srv\", "
       "\"provider\": \"rclone\"}}}",
       "entry \"m\": \"provider\" is not supported on a mount entry"},
      {"{\"entries\": {\"a\": {\"type\": \"file\"}, \"a/\": {\"type\": "
       "\"dir\"}}}",
       "\"a\" is given twice"},
      {"{\"entries\": {\"f\": {\"type\": \"file\"}, \"f/x\": {\"type\": "
       "\"file\"}}}",
       "\"f/x\" lies inside the file entry \"f\""},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"group\": \"Bad "
       "Name\"}}}",
       "group name \"Bad Name\" must match"},
      {"{\"environment\": {\"1X\": \"v\"}}",
       "environment name \"1X\" must match [A-Za-z_][A-Za-z0-9_]*"},
      {"{\"environment\": {\"X\": 5}}",
       "environment \"X\" must be a string or {\"value\": string"},
      {"{\"environment\": {\"X\": {\"description\": \"d\", \"value\": "
       "1}}}",
       "environment \"X\" must be a string or {\"value\": string"},
      {"{\"environment\": {\"X\": {\"value\": \"v\", \"secret\": true}}}",
       "environment \"X\": unknown key \"secret\""},
      {"{\"users\": [\"\"]}", "users[0]: a user name must not be empty"},
      {"{\"users\": [\"a\", \"a\"]}", "user \"a\" is listed twice"},
      {"{\"groups\": [{\"users\": [\"a\"]}]}",
       "groups[0]: a group needs \"name\""},
      {"{\"extra_path_grants\": [{\"path\": \"/\"}]}",
       "\"path\" must not be \"/\""},
      {"{\"extra_path_grants\": [{\"path\": \"srv\"}]}",
       "\"path\" \"srv\" must be absolute"},
      {"{\"extra_path_grants\": [{\"path\": \"/a/../b\"}]}",
       "\"path\" must not contain \"..\""},
      {"{\"extra_path_grants\": [{\"path\": \"/a\", \"read_only\": "
       "\"yes\"}]}",
       "\"read_only\" must be a boolean, not a string"},
  };
  cr_assert_geq(SBX_ARRAY_SIZE(cases), 20);
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    struct sbx_error e;
    const char *msg = parse_err(cases[i].json, &e);
    cr_expect(strstr(msg, cases[i].want) != NULL,
              "case %zu: want \"%s\" in \"%s\"", i, cases[i].want, msg);
    cr_expect(strncmp(msg, "m.json", 6) == 0, "case %zu names the file: %s", i,
              msg);
  }
}

Test(manifest, backend_checks_name_the_rule) {
  struct manifest *m =
      parse_ok("{\"extra_path_grants\": [{\"path\": \"/srv\", \"host_path\": "
               "\"/data\"}]}");
  struct sbx_error e = {0};
  cr_expect_lt(lifecycle_check_manifest(m, &backend_local, &e), 0);
  cr_expect(strstr(e.msg, "\"host_path\" is not supported by backend local"),
            "%s", e.msg);
  manifest_free(m);
  m = parse_ok("{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": "
               "\"/srv\"}}}");
  static const struct backend symlinks = {.name = "symlinks",
                                          .features = BACKEND_LOCAL_BIND};
  cr_expect_lt(lifecycle_check_manifest(m, &symlinks, &e), 0);
  cr_expect(strstr(e.msg, "cannot enforce a read-only local_bind mount"), "%s",
            e.msg);
  manifest_free(m);
}

/* A path that normalizing leaves with a space in front ("./ a") is
 * trimmed again: the path saved is the one it parses to again. */
Test(manifest, normalized_paths_parse_to_themselves) {
  struct manifest *m =
      parse_ok("{\"entries\": {\"./ a\": {\"type\": \"file\"}, \" ./ ./b \": "
               "{\"type\": \"file\"}}}");
  cr_expect_not_null(entry(m, "a"));
  cr_expect_not_null(entry(m, "b"));
  _cleanup_json_ json_t *j1 = manifest_to_json(m);
  struct manifest *m2 = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(manifest_parse(j1, "persisted", &m2, &e), 0, "%s", e.msg);
  _cleanup_json_ json_t *j2 = manifest_to_json(m2);
  cr_expect(json_equal(j1, j2));
  manifest_free(m2);
  manifest_free(m);
  /* Bared and trimmed over and over: in constant stack. */
  char text[4096];
  size_t n = (size_t)snprintf(text, sizeof(text), "{\"entries\": {\"");
  while (n < 3000)
    n += (size_t)snprintf(text + n, sizeof(text) - n, "./ ");
  (void)snprintf(text + n, sizeof(text) - n, "deep\": {\"type\": \"file\"}}}");
  m = parse_ok(text);
  cr_expect_not_null(entry(m, "deep"));
  manifest_free(m);
}

Test(manifest, persisted_form_drops_ephemeral_values_and_host_paths) {
  struct manifest *m = parse_ok(
      "{\"entries\": {\"keep\": {\"type\": \"file\", \"content\": \"k\"},"
      " \"tmp\": {\"type\": \"file\", \"content\": \"t\", \"ephemeral\": "
      "true},"
      " \"d\": {\"type\": \"dir\", \"children\": {\"c\": {\"type\": \"file\"}}}"
      "}, \"environment\": {\"PUB\": \"p\", \"TOKEN\": {\"value\": \"s\", "
      "\"ephemeral\": true}},"
      " \"extra_path_grants\": [{\"path\": \"/g\", \"host_path\": \"/h\"}]}");
  json_t *j = manifest_to_json(m);
  cr_assert_not_null(j);
  char *s = json_dumps(j, JSON_SORT_KEYS);
  cr_expect(strstr(s, "\"keep\"") && strstr(s, "\"d/c\""), "%s", s);
  cr_expect_null(strstr(s, "tmp"), "%s", s);
  cr_expect_null(strstr(s, "TOKEN"), "%s", s);
  cr_expect_null(strstr(s, "\"s\""), "%s", s);
  cr_expect_null(strstr(s, "/h"), "%s", s);
  /* It parses back to the same entries. */
  struct manifest *back = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(manifest_parse(j, "state", &back, &e), 0, "%s", e.msg);
  cr_expect_eq(back->nentries, 3);
  free(s);
  json_decref(j);
  manifest_free(back);
  manifest_free(m);
}

Test(manifest, live_sandbox_accepts_only_additions) {
  struct manifest *live = parse_ok(
      "{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"1\"}},"
      " \"environment\": {\"X\": \"1\"}, \"users\": [\"u\"]}");
  static const struct {
    const char *next, *want;
  } cases[] = {
      {"{\"root\": \"/other\", \"entries\": {\"a\": {\"type\": \"file\", "
       "\"content\": \"1\"}}, \"environment\": {\"X\": \"1\"}, \"users\": "
       "[\"u\"]}",
       "cannot change the root"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"1\"}}, "
       "\"environment\": {\"X\": \"2\"}, \"users\": [\"u\"]}",
       "cannot change the environment"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"1\"}}, "
       "\"environment\": {\"X\": \"1\"}, \"users\": [\"u\", \"v\"]}",
       "cannot change users"},
      {"{\"entries\": {}, \"environment\": {\"X\": \"1\"}, \"users\": "
       "[\"u\"]}",
       "entries: \"a\" would be removed"},
      {"{\"entries\": {\"a\": {\"type\": \"dir\"}}, \"environment\": {\"X\": "
       "\"1\"}, \"users\": [\"u\"]}",
       "\"a\" would change from file to dir"},
      {"{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"1\"}, "
       "\"m\": {\"type\": \"mount\", \"source\": \"/s\", \"read_only\": "
       "false}}, \"environment\": {\"X\": \"1\"}, \"users\": [\"u\"]}",
       "mounts: \"m\" would be added"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    struct manifest *next = parse_ok(cases[i].next);
    size_t *added = NULL, n = 0;
    struct sbx_error e = {0};
    cr_expect_lt(manifest_delta(live, next, &added, &n, &e), 0, "case %zu", i);
    cr_expect(strstr(e.msg, "Live sandbox sessions cannot change") &&
                  strstr(e.msg, cases[i].want),
              "case %zu: %s", i, e.msg);
    manifest_free(next);
  }
  /* Additions, and an ephemeral value (never recorded) brought again. */
  struct manifest *next = parse_ok(
      "{\"entries\": {\"a\": {\"type\": \"file\", \"content\": \"1\"}, "
      "\"b\": {\"type\": \"file\", \"content\": \"2\"}},"
      " \"environment\": {\"X\": \"1\", \"T\": {\"value\": \"t\", "
      "\"ephemeral\": true}}, \"users\": [\"u\"]}");
  size_t *added = NULL, n = 0;
  struct sbx_error e = {0};
  cr_expect_eq(manifest_delta(live, next, &added, &n, &e), 0, "%s", e.msg);
  cr_expect_eq(n, 1);
  cr_expect_str_eq(next->entries[added[0]].path, "b");
  free(added);
  manifest_free(next);
  manifest_free(live);
}

Test(manifest, concurrency_option) {
  struct materialize_limits l = materialize_default_limits();
  cr_expect_eq(l.manifest_entries, 4);
  cr_expect_eq(l.local_dir_files, 4);
  struct sbx_error e = {0};
  cr_expect_eq(materialize_parse_limits("local_dir_files=0", &l, &e), 0);
  cr_expect_eq(l.local_dir_files, 0);
  cr_expect_eq(l.manifest_entries, 4);
  cr_expect_eq(
      materialize_parse_limits("manifest_entries=1,local_dir_files=8", &l, &e),
      0);
  cr_expect_eq(l.manifest_entries, 1);
  cr_expect_eq(l.local_dir_files, 8);
  cr_expect_lt(materialize_parse_limits("entries=2", &l, &e), 0);
  cr_expect(strstr(e.msg, "expected manifest_entries=N"), "%s", e.msg);
  cr_expect_lt(materialize_parse_limits("local_dir_files=-1", &l, &e), 0);
  cr_expect(strstr(e.msg, "integer >= 0"), "%s", e.msg);
}

/* The # Filesystem tree as the SDK's renderManifestDescription draws it:
 * siblings in localeCompare order, entries under the dir that holds them,
 * a nested key at the top under its last segment, depth 3. */
Test(manifest, tree_is_drawn_as_the_sdk_draws_it) {
  struct manifest *m = parse_ok(
      "{\"entries\": {\"Zeta.txt\": {\"type\": \"file\", \"content\": \"\"},"
      " \"b.txt\": {\"type\": \"file\", \"content\": \"\"},"
      " \"README.md\": {\"type\": \"file\", \"content\": \"\"},"
      " \"_a\": {\"type\": \"file\", \"content\": \"\"},"
      " \"a1\": {\"type\": \"file\", \"content\": \"\"},"
      " \"A2\": {\"type\": \"file\", \"content\": \"\", \"description\": "
      "\"two\"},"
      " \"img/dot.png\": {\"type\": \"file\", \"content\": \"\"},"
      " \"src\": {\"type\": \"dir\", \"children\": {"
      "   \"main.c\": {\"type\": \"file\", \"content\": \"\"},"
      "   \"lib\": {\"type\": \"dir\", \"children\": {"
      "     \"deep\": {\"type\": \"dir\", \"children\": {"
      "       \"x.c\": {\"type\": \"file\", \"content\": \"\"}}},"
      "     \"a.c\": {\"type\": \"file\", \"content\": \"\"}}}}}}}");
  char *tree = manifest_describe(m, "/workspace", 3, 120, 12000);
  cr_assert_not_null(tree);
  cr_expect_str_eq(tree, "/workspace\n"
                         "_a # /workspace/_a\n"
                         "a1 # /workspace/a1\n"
                         "A2 # /workspace/A2 - two\n"
                         "b.txt # /workspace/b.txt\n"
                         "dot.png # /workspace/img/dot.png\n"
                         "README.md # /workspace/README.md\n"
                         "src/ # /workspace/src\n"
                         "  lib/ # /workspace/src/lib\n"
                         "    a.c # /workspace/src/lib/a.c\n"
                         "    deep/ # /workspace/src/lib/deep\n"
                         "  main.c # /workspace/src/main.c\n"
                         "Zeta.txt # /workspace/Zeta.txt");
  free(tree);
  /* Cut at 4 lines: the rest counted (within the depth), the hint after. */
  tree = manifest_describe(m, "/workspace", 3, 4, 12000);
  cr_expect_str_eq(tree, "/workspace\n"
                         "_a # /workspace/_a\n"
                         "a1 # /workspace/a1\n"
                         "A2 # /workspace/A2 - two\n"
                         "... (truncated 9 additional paths)\n"
                         "Hint: increase depth, maxLines, or maxChars to see "
                         "more of the manifest layout.");
  free(tree);
  manifest_free(m);
}
