/* The docker backend's options read from JSON (run_config, the CLI's
 * flags, the API): every key reaches its field, and every refusal names
 * what it refuses. No engine needed: nothing is created. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "backends/docker/docker.h"
#include "backends/docker/options.h"
#include "shared/cleanup.h"

static json_t *load(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  cr_assert_not_null(j, "%s: %s", text, je.text);
  return j;
}

/* Parses TEXT through the backend's table and parser: the options (free
 * with backend_options_free), or NULL with *MSG set. */
static const struct docker_options *parse(const char *text, const char *where,
                                          char *msg, size_t n) {
  _cleanup_json_ json_t *j = load(text);
  void *own = NULL;
  struct sbx_error e = {0};
  int r = backend_options_parse(&backend_docker, j, where, &own, &e);
  (void)snprintf(msg, n, "%s", e.msg);
  cr_expect_eq(r < 0, own == NULL, "%s", text);
  return own;
}

Test(docker_options, every_key_reaches_its_field) {
  char msg[600];
  const struct docker_options *o = parse(
      "{\"host\": \"unix:///run/x.sock\", \"image\": \"img:1\", "
      "\"sandboxd\": \"inject\", \"sandboxd_static\": \"/opt/sandboxd\", "
      "\"root\": \"/work\", \"network_mode\": \"none\", "
      "\"labels\": {\"team\": \"a\", \"tier\": \"b\"}, "
      "\"env\": {\"A\": \"1\", \"B_2\": \"x=y\"}, \"user\": \"1000:1000\", "
      "\"userns\": \"host\", "
      "\"memory_bytes\": 67108864, \"cpus\": 1.5, \"pids_limit\": 99, "
      "\"mounts\": [{\"type\": \"bind\", \"source\": \"/srv\", \"target\": "
      "\"/srv\", \"read_only\": true}, {\"type\": \"volume\", \"target\": "
      "\"/cache\"}], \"read_only_rootfs\": true, \"never_pull\": true}",
      "run_config", msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  cr_expect_str_eq(o->host, "unix:///run/x.sock");
  cr_expect_str_eq(o->image, "img:1");
  cr_expect_eq(o->sandboxd_mode, DOCKER_SANDBOXD_INJECT);
  cr_expect_str_eq(o->sandboxd_static, "/opt/sandboxd");
  cr_expect_str_eq(o->root, "/work");
  cr_expect_str_eq(o->network_mode, "none");
  cr_assert_eq(o->n_labels, 2);
  cr_expect_str_eq(o->labels[0].key, "team");
  cr_expect_str_eq(o->labels[1].value, "b");
  cr_assert_eq(o->n_env, 2);
  cr_expect_str_eq(o->env[0], "A=1");
  cr_expect_str_eq(o->env[1], "B_2=x=y");
  cr_expect_str_eq(o->user, "1000:1000");
  cr_expect_eq(o->userns, DOCKER_USERNS_HOST);
  cr_expect_eq(o->memory_bytes, 64ll << 20);
  cr_expect_float_eq(o->cpus, 1.5, 1e-9);
  cr_expect_eq(o->pids_limit, 99);
  cr_assert_eq(o->n_mounts, 2);
  cr_expect_str_eq(o->mounts[0].type, "bind");
  cr_expect_str_eq(o->mounts[0].source, "/srv");
  cr_expect(o->mounts[0].read_only);
  cr_expect_null(o->mounts[1].source);
  cr_expect_not(o->mounts[1].read_only);
  cr_expect(o->read_only_rootfs);
  cr_expect(o->never_pull);
  cr_expect_eq(o->n_exposed_ports, 0); /* the generic --expose gives them */
  backend_options_free(&backend_docker, (void *)o);
}

Test(docker_options, modes_and_defaults) {
  static const struct {
    const char *text;
    enum docker_sandboxd_mode mode;
  } modes[] = {
      {"{}", DOCKER_SANDBOXD_AUTO},
      {"{\"sandboxd\": \"auto\"}", DOCKER_SANDBOXD_AUTO},
      {"{\"sandboxd\": \"baked\"}", DOCKER_SANDBOXD_BAKED},
  };
  char msg[600];
  for (size_t i = 0; i < SBX_ARRAY_SIZE(modes); i++) {
    const struct docker_options *o =
        parse(modes[i].text, NULL, msg, sizeof(msg));
    cr_assert_not_null(o, "%s: %s", modes[i].text, msg);
    cr_expect_eq(o->sandboxd_mode, modes[i].mode, "%s", modes[i].text);
    cr_expect_null(o->image);
    cr_expect_eq(o->n_mounts + o->n_labels + o->n_env, 0);
    backend_options_free(&backend_docker, (void *)o);
  }
}

Test(docker_options, refusals_name_the_option) {
  static const struct {
    const char *text, *where, *want;
  } cases[] = {
      {"{\"imgae\": \"x\"}", "run_config",
       "\"run_config.imgae\": backend docker has no such option"},
      {"{\"image\": 5}", "run_config",
       "\"run_config.image\" must be a string (got integer)"},
      {"{\"cpus\": \"2\"}", NULL, "\"cpus\" must be a number (got string)"},
      {"{\"sandboxd\": \"always\"}", "run_config",
       "run_config: sandboxd \"always\": expected \"auto\", \"baked\" or "
       "\"inject\""},
      {"{\"labels\": [\"a\"]}", NULL,
       "\"labels\" must be an object of strings (got array)"},
      {"{\"labels\": {\"a\": 1}}", NULL,
       "label \"a\": its value must be a string"},
      {"{\"labels\": {\"sbx.session\": \"x\"}}", NULL,
       "label \"sbx.session\" is reserved: sbx.* labels are set by sbx "
       "itself"},
      {"{\"env\": [\"A=1\"]}", NULL,
       "\"env\" must be an object of strings (got array)"},
      {"{\"env\": {\"A\": 1}}", NULL, "env \"A\": its value must be a string"},
      {"{\"env\": {\"1A\": \"x\"}}", NULL,
       "env[0]: expected NAME=value with NAME made of letters, digits and _"},
      {"{\"mounts\": {}}", NULL, "mounts must be an array of objects"},
      {"{\"mounts\": [1]}", NULL, "mounts[0] must be an object"},
      {"{\"mounts\": [{\"type\": \"bind\", \"src\": \"/a\"}]}", NULL,
       "mounts[0]: unknown key \"src\""},
      {"{\"mounts\": [{\"type\": \"bind\", \"read_only\": \"yes\"}]}", NULL,
       "mounts[0]: \"read_only\" must be true or false"},
      {"{\"mounts\": [{\"type\": 3}]}", NULL,
       "mounts[0]: \"type\" must be a string"},
      {"{\"mounts\": [{\"type\": \"tmpfs\", \"target\": \"/t\"}]}", NULL,
       "mounts[0]: type \"tmpfs\": expected \"bind\" or \"volume\""},
      {"{\"mounts\": [{\"type\": \"bind\", \"target\": \"/workspace\", "
       "\"source\": \"/srv\"}]}",
       NULL, "would cover the workspace"},
      {"{\"network_mode\": \"host\"}", "run_config",
       "run_config: network_mode \"host\" is not supported: use \"none\" or "
       "leave it unset for the engine's default network"},
      {"{\"user\": \"root\"}", NULL, "user \"root\": expected a numeric uid"},
      {"{\"memory_bytes\": -1}", NULL, "memory must not be negative"},
      {"{\"pids_limit\": -5}", NULL, "pids_limit must not be negative"},
      {"{\"pids_limit\": -1}", NULL, "pids_limit must not be negative"},
      {"{\"memory_bytes\": -1}", "run_config",
       "run_config: memory must not be negative"},
      {"{\"userns\": \"keep-id\"}", "run_config",
       "run_config: userns \"keep-id\": expected \"auto\" or \"host\""},
      {"{\"userns\": \"\"}", NULL,
       "userns \"\": expected \"auto\" or \"host\""},
      {"{\"userns\": true}", NULL, "\"userns\" must be a string (got"},
      {"{\"cpus\": 5000}", NULL,
       "cpus must be a number from 0 (no limit) to 4096"},
      {"{\"root\": \"/\"}", NULL, "root \"/\" must be an absolute path"},
      {"{\"image\": \"a b\"}", NULL, "image \"a b\" is not an image reference"},
      {"{\"never_pull\": 1}", NULL,
       "\"never_pull\" must be true or false (got integer)"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    char msg[600];
    const struct docker_options *o =
        parse(cases[i].text, cases[i].where, msg, sizeof(msg));
    cr_expect_null(o, "%s was accepted", cases[i].text);
    cr_expect(strstr(msg, cases[i].want), "%s: %s", cases[i].text, msg);
    backend_options_free(&backend_docker, (void *)o);
  }
}

Test(docker_options, the_table_gives_the_cli_its_flags) {
  const struct backend_option *img =
      backend_option_find(&backend_docker, "image");
  cr_assert_not_null(img);
  cr_expect_str_eq(img->flag, "image");
  const struct backend_option *net =
      backend_option_find(&backend_docker, "network_mode");
  cr_assert_not_null(net);
  cr_expect_str_eq(net->flag, "network");
  /* Operators' usual flags; every other option is -o KEY=VALUE. */
  static const char *const flags[][2] = {
      {"env", "env"},
      {"user", "user"},
      {"userns", "userns"},
      {"read_only_rootfs", "read-only-rootfs"},
      {"never_pull", "never-pull"},
      {"memory_bytes", "memory-bytes"},
      {"mounts", "mount"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(flags); i++) {
    const struct backend_option *o =
        backend_option_find(&backend_docker, flags[i][0]);
    cr_assert_not_null(o, "%s", flags[i][0]);
    cr_expect_str_eq(o->flag, flags[i][1]);
  }
  cr_expect_eq(backend_option_find(&backend_docker, "env")->type,
               BACKEND_OPTION_STRING_MAP);
  cr_expect_eq(backend_option_find(&backend_docker, "labels")->type,
               BACKEND_OPTION_STRING_MAP);
  cr_expect_null(backend_option_find(&backend_docker, "labels")->flag,
                 "labels are set by -o, not a --label of their own");
  size_t keys = 0;
  for (const struct backend_option *o = backend_docker.options; o->key; o++) {
    keys++;
    cr_expect(o->help && *o->help, "%s has no help", o->key);
  }
  cr_expect_eq(keys, 16);
}

/* The JSON text of --mount TEXT's value (an array of one mount), or its
 * error (new). */
static char *mount_value(const char *text) {
  const struct backend_option *o =
      backend_option_find(&backend_docker, "mounts");
  cr_assert_not_null(o);
  cr_assert_str_eq(o->flag, "mount");
  json_t *v = NULL;
  struct sbx_error e = {0};
  if (backend_option_value(o, text, &v, &e) < 0) {
    cr_expect_null(v);
    return strdup(e.msg);
  }
  char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(v);
  return s;
}

/* --mount takes docker run's --mount fields, as one element of mounts. */
Test(docker_options, mount_flag_fields) {
  static const char *const cases[][2] = {
      {"type=bind,source=/srv,target=/data,readonly",
       "[{\"read_only\":true,\"source\":\"/srv\",\"target\":\"/data\","
       "\"type\":\"bind\"}]"},
      {"type=bind,src=/a,dst=/b,ro=false",
       "[{\"read_only\":false,\"source\":\"/a\",\"target\":\"/b\","
       "\"type\":\"bind\"}]"},
      {"type=volume,destination=/cache",
       "[{\"target\":\"/cache\",\"type\":\"volume\"}]"},
      {"type=bind,readonly=maybe",
       "--mount \"type=bind,readonly=maybe\": readonly takes true or false"},
      {"type=bind,size=1",
       "--mount \"type=bind,size=1\": unknown field \"size\" (expected "
       "type, source, target and readonly)"},
      {"type,target=/x", "--mount \"type,target=/x\": type needs a value"},
      {"type=bind,type=volume",
       "--mount \"type=bind,type=volume\": type is given twice"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    char *got = mount_value(cases[i][0]);
    cr_expect(strncmp(got, cases[i][1], strlen(cases[i][1])) == 0, "%s: %s",
              cases[i][0], got);
    free(got);
  }
}

/* A limit left out is the default; 0 lifts it; a number is kept. */
Test(docker_options, limits_default_none_or_given) {
  static const struct {
    const char *text;
    int64_t memory, pids;
  } cases[] = {
      {"{}", 0, 0},
      {"{\"memory_bytes\": 0, \"pids_limit\": 0}", DOCKER_NO_LIMIT,
       DOCKER_NO_LIMIT},
      {"{\"memory_bytes\": 1073741824, \"pids_limit\": 64}", 1ll << 30, 64},
  };
  char msg[600];
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    const struct docker_options *o =
        parse(cases[i].text, NULL, msg, sizeof(msg));
    cr_assert_not_null(o, "%s: %s", cases[i].text, msg);
    cr_expect_eq(o->memory_bytes, cases[i].memory, "%s", cases[i].text);
    cr_expect_eq(o->pids_limit, cases[i].pids, "%s", cases[i].text);
    cr_expect_eq(o->userns, DOCKER_USERNS_DEFAULT);
    backend_options_free(&backend_docker, (void *)o);
  }
}

/* The container create body's HostConfig for O with SP's user namespace. */
static json_t *host_config(const struct docker_options *o, const char *userns) {
  struct docker_spec sp = {.session_id = "s",
                           .image = "img",
                           .sandboxd = "/usr/local/bin/sandboxd",
                           .rundir = "/tmp/sbx-docker-x",
                           .root = "/workspace",
                           .seccomp = "default",
                           .userns = userns};
  json_t *j = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(docker_spec_json(o, &sp, &j, &e), 0, "%s", e.msg);
  json_t *h = json_incref(json_object_get(j, "HostConfig"));
  json_decref(j);
  return h;
}

static char *dump(json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  cr_assert_not_null(s);
  return s;
}

Test(docker_options, the_container_is_confined) {
  struct docker_options o = {0};
  _cleanup_json_ json_t *h = host_config(&o, "auto:size=65536");
  _cleanup_free_ char *drop = dump(json_object_get(h, "CapDrop"));
  _cleanup_free_ char *add = dump(json_object_get(h, "CapAdd"));
  _cleanup_free_ char *sec = dump(json_object_get(h, "SecurityOpt"));
  cr_expect_str_eq(drop, "[\"ALL\"]");
  cr_expect_str_eq(add, "[\"CHOWN\",\"DAC_OVERRIDE\",\"FOWNER\",\"FSETID\","
                        "\"KILL\",\"SETGID\",\"SETUID\",\"NET_BIND_SERVICE\","
                        "\"SYS_CHROOT\",\"SETPCAP\"]");
  /* no-new-privileges, and nothing that would replace the engine's
   * seccomp profile. */
  cr_expect_str_eq(sec, "[\"no-new-privileges\"]");
  cr_expect(json_is_false(json_object_get(h, "Privileged")));
  cr_expect_str_eq(json_string_value(json_object_get(h, "UsernsMode")),
                   "auto:size=65536");
  cr_expect_eq(json_integer_value(json_object_get(h, "Memory")), 2ll << 30);
  cr_expect_eq(json_integer_value(json_object_get(h, "PidsLimit")), 4096);
  cr_expect_null(json_object_get(h, "NanoCpus"));

  /* The runtime directory is read-only but for where sandboxd listens. */
  json_t *m = json_object_get(h, "Mounts");
  cr_assert_geq(json_array_size(m), 2);
  _cleanup_free_ char *m0 = dump(json_array_get(m, 0));
  _cleanup_free_ char *m1 = dump(json_array_get(m, 1));
  cr_expect_str_eq(m0, "{\"Type\":\"bind\",\"Source\":\"/tmp/sbx-docker-x\","
                       "\"Target\":\"/run/sbx\",\"ReadOnly\":true}");
  cr_expect_str_eq(m1, "{\"Type\":\"bind\",\"Source\":\"/tmp/sbx-docker-x/"
                       "listen\",\"Target\":\"/run/sbx/listen\",\"ReadOnly\":"
                       "false}");

  /* No limit, and the engine's user namespace. */
  o.memory_bytes = DOCKER_NO_LIMIT;
  o.pids_limit = DOCKER_NO_LIMIT;
  o.cpus = 1.5;
  _cleanup_json_ json_t *h2 = host_config(&o, NULL);
  cr_expect_null(json_object_get(h2, "Memory"));
  cr_expect_eq(json_integer_value(json_object_get(h2, "PidsLimit")), -1);
  cr_expect_eq(json_integer_value(json_object_get(h2, "NanoCpus")), 1500000000);
  cr_expect_null(json_object_get(h2, "UsernsMode"));
}
