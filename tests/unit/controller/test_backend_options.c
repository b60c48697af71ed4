/* The backend interface's option tables: checking JSON against them, a
 * flag's text as a value, the registry, and the manifest checks decided
 * by a backend's features (a backend of the test's own shows that nothing
 * depends on a backend's name). */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "backends/registry.h"
#include "controller/backend/backend.h"
#include "controller/sandbox/lifecycle.h"
#include "shared/cleanup.h"

static const struct backend_option test_options[] = {
    {"name", "name", "N", "a string", BACKEND_OPTION_STRING},
    {"count", "count", "N", "an integer", BACKEND_OPTION_INTEGER},
    {"share", "share", "X", "a number", BACKEND_OPTION_NUMBER},
    {"quiet", "quiet", NULL, "a boolean", BACKEND_OPTION_BOOLEAN},
    {"extra", NULL, NULL, "JSON only", BACKEND_OPTION_JSON},
    {"vars", "var", "NAME=VALUE", "strings", BACKEND_OPTION_STRING_MAP},
    {0},
};

static const struct backend test_backend = {
    .name = "test",
    .options = test_options,
    .features =
        BACKEND_LOCAL_BIND | BACKEND_READ_ONLY_BIND | BACKEND_HOST_PATH_GRANTS,
};

static json_t *load(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  cr_assert_not_null(j, "%s: %s", text, je.text);
  return j;
}

/* The message backend_options_check gives TEXT, "" when it passes. */
static const char *check(const char *text, const char *where) {
  static struct sbx_error e;
  memset(&e, 0, sizeof(e));
  _cleanup_json_ json_t *j = load(text);
  int r = backend_options_check(&test_backend, j, where, &e);
  cr_expect_eq(r < 0, e.msg[0] != '\0', "%s: %d %s", text, r, e.msg);
  return e.msg;
}

Test(backend_options, known_keys_of_their_types_pass) {
  cr_expect_str_eq(check("{\"name\": \"x\", \"count\": 3, \"share\": 0.5, "
                         "\"quiet\": false, \"extra\": [1]}",
                         NULL),
                   "");
  cr_expect_str_eq(check("{\"share\": 2, \"extra\": {}}", "run_config"), "");
  cr_expect_str_eq(check("{}", NULL), "");
  struct sbx_error e = {0};
  cr_expect_eq(backend_options_check(&test_backend, NULL, NULL, &e), 0);
}

Test(backend_options, unknown_keys_and_wrong_types_name_the_key) {
  cr_expect_str_eq(check("{\"nmae\": \"x\"}", "run_config"),
                   "\"run_config.nmae\": backend test has no such option");
  cr_expect_str_eq(check("{\"nmae\": \"x\"}", NULL),
                   "\"nmae\": backend test has no such option");
  cr_expect_str_eq(check("{\"count\": \"3\"}", "run_config"),
                   "\"run_config.count\" must be an integer (got string)");
  cr_expect_str_eq(check("{\"count\": 1.5}", NULL),
                   "\"count\" must be an integer (got number)");
  cr_expect_str_eq(check("{\"share\": true}", NULL),
                   "\"share\" must be a number (got boolean)");
  cr_expect_str_eq(check("{\"quiet\": 1}", NULL),
                   "\"quiet\" must be true or false (got integer)");
  cr_expect_str_eq(check("{\"name\": null}", NULL),
                   "\"name\" must be a string (got null)");
  cr_expect_str_eq(check("{\"extra\": \"x\"}", NULL),
                   "\"extra\" must be an array or an object (got string)");
  cr_expect_str_eq(check("{\"vars\": [\"A=1\"]}", NULL),
                   "\"vars\" must be an object of strings (got array)");
  cr_expect_str_eq(check("[1]", NULL),
                   "the options of backend test must be an object");
}

/* The JSON text of option KEY's value for flag text TEXT, or its error. */
static char *value(const char *key, const char *text) {
  const struct backend_option *o = backend_option_find(&test_backend, key);
  cr_assert_not_null(o, "%s", key);
  json_t *v = NULL;
  struct sbx_error e = {0};
  if (backend_option_value(o, text, &v, &e) < 0) {
    cr_expect_null(v);
    return strdup(e.msg);
  }
  char *s = json_dumps(v, JSON_ENCODE_ANY);
  json_decref(v);
  return s;
}

Test(backend_options, flag_text_becomes_the_value_of_the_type) {
  static const struct {
    const char *key, *text, *want;
  } cases[] = {
      {"name", "a b", "\"a b\""},
      {"count", "42", "42"},
      {"count", "-7", "-7"},
      {"count", "4x", "--count \"4x\": expected an integer"},
      {"count", "", "--count \"\": expected an integer"},
      {"count", "99999999999999999999",
       "--count \"99999999999999999999\": "
       "expected an integer"},
      {"share", "0.25", "0.25"},
      {"share", "1e400", "--share \"1e400\": expected a number"},
      {"share", "nan", "--share \"nan\": expected a number"},
      {"share", "half", "--share \"half\": expected a number"},
      {"quiet", NULL, "true"},
      {"extra", "[]", "option \"extra\" has no command-line flag"},
      {"name", "\xff", "--name: the value must be UTF-8"},
      {"vars", "A=b=c", "{\"A\": \"b=c\"}"},
      {"vars", "A=", "{\"A\": \"\"}"},
      {"vars", "A", "--var \"A\": expected NAME=VALUE"},
      {"vars", "=b", "--var \"=b\": expected NAME=VALUE"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    char *got = value(cases[i].key, cases[i].text);
    cr_expect_str_eq(got, cases[i].want, "%s %s", cases[i].key,
                     cases[i].text ? cases[i].text : "(none)");
    free(got);
  }
  cr_expect_null(backend_option_find(&test_backend, "nothing"));
}

/* The JSON text of option KEY's value for -o KEY=VALUE (VALUE NULL: -o
 * KEY), or its error. */
static char *text_value(const char *key, const char *v) {
  const struct backend_option *o = backend_option_find(&test_backend, key);
  cr_assert_not_null(o, "%s", key);
  json_t *j = NULL;
  struct sbx_error e = {0};
  if (backend_option_text_value(o, v, &j, &e) < 0) {
    cr_expect_null(j);
    return strdup(e.msg);
  }
  char *s = json_dumps(j, JSON_ENCODE_ANY);
  json_decref(j);
  return s;
}

/* -o takes any option: a string as it is, a boolean as true or false (or
 * the key alone), the rest as JSON, and what is not JSON as a string for
 * the type check to refuse with the key. */
Test(backend_options, option_text_becomes_the_value_of_the_type) {
  static const struct {
    const char *key, *text, *want;
  } cases[] = {
      {"name", "42", "\"42\""},
      {"name", "{\"a\": 1}", "\"{\\\"a\\\": 1}\""},
      {"name", "", "\"\""},
      {"count", "42", "42"},
      {"count", "4x", "\"4x\""},
      {"share", "0.5", "0.5"},
      {"quiet", NULL, "true"},
      {"quiet", "true", "true"},
      {"quiet", "false", "false"},
      {"quiet", "yes", "-o quiet=yes: expected true or false"},
      {"extra", "[1, {\"a\": null}]", "[1, {\"a\": null}]"},
      {"extra", "[1,", "-o extra: the value is not JSON: "},
      {"extra", "{\"a\": 1, \"a\": 2}", "-o extra: the value is not JSON: "},
      {"vars", "{\"A\": \"1\"}", "{\"A\": \"1\"}"},
      {"count", NULL, "-o count: expected count=VALUE"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    char *got = text_value(cases[i].key, cases[i].text);
    cr_expect(strncmp(got, cases[i].want, strlen(cases[i].want)) == 0,
              "%s %s: %s", cases[i].key,
              cases[i].text ? cases[i].text : "(none)", got);
    free(got);
  }
  /* What is not of the option's type is refused naming the key. */
  _cleanup_json_ json_t *obj = json_object();
  json_t *v = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(backend_option_text_value(
                   backend_option_find(&test_backend, "count"), "4x", &v, &e),
               0);
  cr_assert_eq(json_object_set_new(obj, "count", v), 0);
  cr_expect_eq(backend_options_check(&test_backend, obj, NULL, &e), -EINVAL);
  cr_expect_str_eq(e.msg, "\"count\" must be an integer (got string)");
}

Test(backend_options, a_backend_without_options_refuses_every_key) {
  static const struct backend bare = {.name = "bare"};
  void *own = (void *)1;
  struct sbx_error e = {0};
  cr_expect_eq(backend_options_parse(&bare, NULL, NULL, &own, &e), 0);
  cr_expect_null(own);
  _cleanup_json_ json_t *j = load("{\"image\": \"x\"}");
  cr_expect_eq(backend_options_parse(&bare, j, "run_config", &own, &e),
               -EINVAL);
  cr_expect_str_eq(e.msg,
                   "\"run_config.image\": backend bare has no such option");
  backend_options_free(&bare, NULL);
}

Test(backend_options, the_registry_lists_every_backend) {
  cr_expect_eq(backend_find(NULL), backend_at(0));
  cr_expect_str_eq(backend_find(NULL)->name, "local");
  cr_expect_str_eq(backend_find("docker")->name, "docker");
  cr_expect_null(backend_find("vm"));
  cr_expect_null(backend_find(""));
  size_t n = 0;
  while (backend_at(n))
    n++;
  cr_expect_eq(n, 4);
  cr_expect_str_eq(backend_find("remote")->name, "remote");
  cr_expect_str_eq(backend_find("kubernetes")->name, "kubernetes");
  char buf[64];
  cr_expect_str_eq(backend_names(buf, sizeof(buf), "\"", " or "),
                   "\"local\", \"docker\", \"remote\" or \"kubernetes\"");
  cr_expect_str_eq(backend_names(buf, sizeof(buf), "", ", "),
                   "local, docker, remote, kubernetes");
  char small[8];
  cr_expect_str_eq(backend_names(small, sizeof(small), "", ", "), "local, ");
}

static struct manifest *manifest(const char *text) {
  _cleanup_json_ json_t *j = load(text);
  struct manifest *m = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(manifest_parse(j, "m", &m, &e), 0, "%s", e.msg);
  return m;
}

/* What lifecycle_check_manifest says of M on a backend with FEATURES. */
static char *check_manifest(const char *text, unsigned features) {
  struct backend b = {.name = "test", .features = features};
  struct manifest *m = manifest(text);
  struct sbx_error e = {0};
  int r = lifecycle_check_manifest(m, &b, &e);
  manifest_free(m);
  cr_expect_eq(r < 0, e.msg[0] != '\0');
  return strdup(e.msg);
}

Test(backend_options, manifest_checks_follow_the_features) {
  static const char ro_mount[] =
      "{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": \"/srv\"}}}";
  static const char rw_mount[] =
      "{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": \"/srv\", "
      "\"read_only\": false}}}";
  static const char host_grant[] = "{\"extra_path_grants\": [{\"path\": "
                                   "\"/srv\", \"host_path\": \"/data\"}]}";
  static const char cloud[] = "{\"entries\": {\"b\": {\"type\": \"s3_mount\", "
                              "\"bucket\": \"x\"}}}";
  static const struct {
    const char *manifest;
    unsigned features;
    const char *want; /* a part of the message, "" when it passes */
  } cases[] = {
      {rw_mount, BACKEND_LOCAL_BIND, ""},
      {rw_mount, 0, "local_bind mounts are not supported by backend test"},
      {ro_mount, BACKEND_LOCAL_BIND,
       "backend test cannot enforce a read-only local_bind mount"},
      {ro_mount, BACKEND_LOCAL_BIND | BACKEND_READ_ONLY_BIND, ""},
      {host_grant, 0, "\"host_path\" is not supported by backend test"},
      {host_grant, BACKEND_HOST_PATH_GRANTS, ""},
      {cloud, ~0u, "s3_mount is not supported by backend test"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    char *msg = check_manifest(cases[i].manifest, cases[i].features);
    if (!cases[i].want[0])
      cr_expect_str_eq(msg, "", "case %zu", i);
    else
      cr_expect(strstr(msg, cases[i].want), "case %zu: %s", i, msg);
    free(msg);
  }
}
