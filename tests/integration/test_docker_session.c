/* Developer-owned sandboxes on the docker backend: create, attach from
 * another sbx process, save, and resume a live container, a removed one
 * from its snapshot, or refuse when neither is possible. Needs the engine
 * of scripts/containers.sh (DOCKER_HOST); fails without it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/docker/engine.h"
#include "tests/support/httpget.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64], sdir[96], snaps[96];

static void sbx(struct sbx_run_out *r, const char *const *args) {
  sbx_sandbox_run(r, sdir, args);
}

static void setup(void) {
  const char *h = getenv("DOCKER_HOST");
  if (!h || !*h)
    cr_assert_fail("DOCKER_HOST is unset: these tests need a container "
                   "engine; run `scripts/containers.sh` and export the "
                   "DOCKER_HOST it prints (`make check` does both)");
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-dksess-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(sdir, sizeof(sdir), "%s/state", dir);
  (void)snprintf(snaps, sizeof(snaps), "%s/snaps", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(sdir);
  (void)test_rm_rf(dir);
}

TestSuite(docker_session, .init = setup, .fini = teardown, .timeout = 180);

static char *create(void) {
  const char *m = test_write_file(
      dir, "m.json",
      "{\"entries\": {\"notes.txt\": {\"type\": \"file\", \"content\": "
      "\"hello\\n\"}}}");
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", m);
  const char *args[] = {"create", "--backend",  "docker", "--network",
                        "none",   "--manifest", mp,       NULL};
  char *id = sbx_sandbox_line(sdir, args);
  const char *ex[] = {"exec", id, "--", "sh", "-c", "echo more >> notes.txt",
                      NULL};
  free(sbx_sandbox_line(sdir, ex));
  return id;
}

static char *save(const char *id) {
  struct sbx_run_out r;
  const char *args[] = {"save", id, "--snapshot-dir", snaps, NULL};
  sbx(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *path = strdup(test_write_file(dir, "state.json", r.out));
  sbx_run_free(&r);
  return path;
}

/* Runs "sbx ARGS..." against a model that calls exec_command with CMD
 * once and then answers "ok"; the run must succeed. Returns the second
 * request's input as JSON text (new), where CMD's output is; *OUT (when
 * given) gets sbx's stdout (new). */
static char *run_one_command(const char *cmd, const char *const *args,
                             char **out) {
  json_t *script = json_pack("[{s:[{s:s, s:s, s:{s:s}}]}, {s:s}]", "tool_calls",
                             "name", "exec_command", "call_id", "c",
                             "arguments", "cmd", cmd, "text", "ok");
  char *text = json_dumps(script, JSON_COMPACT);
  json_decref(script);
  cr_assert_not_null(text);
  struct test_model_server srv;
  test_model_server_start(&srv, text, NULL);
  free(text);
  struct sbx_run_out r;
  sbx_run(&r, srv.base_url, args);
  cr_expect_eq(r.status, 0, "%s", r.err);
  if (out)
    *out = strdup(r.out);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  char *dump =
      json_dumps(json_object_get(
                     json_object_get(json_array_get(reqs, 1), "body"), "input"),
                 0);
  json_decref(reqs);
  cr_assert_not_null(dump);
  return dump;
}

Test(docker_session, runs_attach_to_a_developer_owned_container) {
  char *id = create();
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  const char *run[] = {"run", "--state-dir", sdir, "--sandbox", id,
                       ap,    "read",        NULL};
  char *dump = run_one_command("cat notes.txt; ls /sys/class/net", run, NULL);
  cr_expect(strstr(dump, "Output:\\nhello\\nmore\\nlo\\n"),
            "the container's workspace, network none: %s", dump);
  free(dump);
  struct sbx_run_out r;
  /* A second process sees it running. */
  const char *info[] = {"--json", "info", id, NULL};
  sbx(&r, info);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "\"docker\"") != NULL, "%s", r.out);
  sbx_run_free(&r);
  free(id);
}

Test(docker_session, resume_live_removed_and_neither) {
  char *id = create();
  char *st = save(id);
  json_t *sj = json_load_file(st, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(sj, "type")), "docker");
  cr_expect_eq(strlen(json_string_value(json_object_get(sj, "container_id"))),
               64, "the container id is in the state");
  json_decref(sj);
  struct sbx_run_out r;
  const char *res[] = {"resume", st, NULL};
  sbx(&r, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strncmp(r.out, id, strlen(id)) == 0, "live: %s", r.out);
  cr_expect(strstr(r.err, "reconnected") != NULL, "%s", r.err);
  sbx_run_free(&r);
  /* Removed: restored from the snapshot into a new container. */
  const char *rm[] = {"rm", id, NULL};
  free(sbx_sandbox_line(sdir, rm));
  sbx(&r, res);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *nid = strndup(r.out, strcspn(r.out, "\n"));
  cr_expect_str_neq(nid, id);
  sbx_run_free(&r);
  const char *cat[] = {"exec", nid, "--", "cat", "notes.txt", NULL};
  sbx(&r, cat);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "hello\nmore\n");
  sbx_run_free(&r);
  /* Neither: the container is gone and so is the snapshot. */
  const char *rm2[] = {"rm", nid, NULL};
  sbx(&r, rm2);
  sbx_run_free(&r);
  cr_assert_eq(test_rm_rf(snaps), 0);
  sbx(&r, res);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "the live sandbox is gone") &&
                strstr(r.err, "restoring the snapshot failed"),
            "%s", r.err);
  sbx_run_free(&r);
  free(nid);
  free(st);
  free(id);
}

Test(docker_session, create_flag_errors) {
  struct sbx_run_out r;
  const char *img[] = {"create", "--image", "x", NULL};
  sbx(&r, img);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--image needs --backend docker") != NULL, "%s",
            r.err);
  sbx_run_free(&r);
  const char *net[] = {"create",    "--backend", "docker",
                       "--network", "host",      NULL};
  sbx(&r, net);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "--network \"host\": network_mode \"host\" is "
                          "not supported") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
}

Test(docker_session, agent_run_config_selects_the_backend) {
  const char *a = test_write_file(
      dir, "d.json",
      "{\"name\": \"D\", \"run_config\": {\"backend\": \"docker\", "
      "\"network_mode\": \"none\"}}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  const char *run[] = {"run", "--state-dir", sdir, "--stream", ap, "x", NULL};
  char *out = NULL;
  char *dump = run_one_command("ls /sys/class/net", run, &out);
  cr_expect(strstr(out, "\"backend\":\"docker\"") != NULL, "%s", out);
  free(out);
  cr_expect(strstr(dump, "Output:\\nlo\\n"), "%s", dump);
  free(dump);
  struct sbx_run_out r;
  /* A bad run_config is a configuration error naming the key. */
  const char *b = test_write_file(
      dir, "b.json",
      "{\"name\": \"B\", \"run_config\": {\"backend\": \"vm\"}}");
  char bp[256];
  (void)snprintf(bp, sizeof(bp), "%s", b);
  const char *bad[] = {"run", bp, "x", NULL};
  sbx_run(&r, NULL, bad);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "run_config.backend") != NULL, "%s", r.err);
  sbx_run_free(&r);
}

/* run_config's docker options reach the container: its environment and
 * its limits, as the agent's commands see them. */
Test(docker_session, run_config_options_reach_the_container) {
  const char *a = test_write_file(
      dir, "o.json",
      "{\"name\": \"O\", \"run_config\": {\"backend\": \"docker\", "
      "\"env\": {\"SBX_FROM_RUN_CONFIG\": \"yes it is\"}, "
      "\"pids_limit\": 77, \"labels\": {\"team\": \"t1\"}}}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  const char *run[] = {"run", "--state-dir", sdir, ap, "x", NULL};
  char *dump = run_one_command(
      "echo \"[$SBX_FROM_RUN_CONFIG]\"; cat /sys/fs/cgroup/pids/pids.max "
      "/sys/fs/cgroup/pids.max 2>/dev/null",
      run, NULL);
  cr_expect(strstr(dump, "[yes it is]"), "%s", dump);
  cr_expect(strstr(dump, "77"), "the pids limit: %s", dump);
  free(dump);
  struct sbx_run_out r;
  /* sbx sandbox create --agent makes the sandbox the agent would run in. */
  const char *create[] = {"create", "--agent", ap, "--json", NULL};
  sbx(&r, create);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = json_loads(r.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "backend")), "docker");
  char id[64];
  (void)snprintf(id, sizeof(id), "%s",
                 json_string_value(json_object_get(j, "id")));
  json_decref(j);
  sbx_run_free(&r);
  const char *env[] = {
      "exec", id, "--", "sh", "-c", "echo \"[$SBX_FROM_RUN_CONFIG]\"", NULL};
  sbx(&r, env);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "[yes it is]\n");
  sbx_run_free(&r);
}

/* --expose on the docker backend publishes the port on the host's
 * loopback; port and info say where, and a server inside is reached. */
Test(docker_session, exposed_port_is_published_and_resolved) {
  const char *args[] = {"create",   "--backend", "docker",
                        "--expose", "8000",      NULL};
  char *id = sbx_sandbox_line(sdir, args);
  const char *port[] = {"port", id, "8000", NULL};
  char *ep = sbx_sandbox_line(sdir, port);
  cr_assert(strncmp(ep, "127.0.0.1:", 10) == 0, "%s", ep);
  unsigned hp = (unsigned)strtoul(ep + 10, NULL, 10);
  cr_expect(hp > 0 && hp < 65536, "%s", ep);
  struct sbx_run_out r;
  const char *other[] = {"port", id, "8001", NULL};
  sbx(&r, other);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "not configured to expose port 8001"), "%s", r.err);
  sbx_run_free(&r);
  const char *info[] = {"info", id, NULL};
  sbx(&r, info);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "container:   "), "%s", r.out);
  cr_expect(strstr(r.out, ep), "%s", r.out);
  cr_expect_null(strstr(r.out, "(null)"), "%s", r.out);
  sbx_run_free(&r);
  /* A tiny HTTP server inside (perl comes with git), left running. */
  const char *serve[] = {
      "exec",
      id,
      "--",
      "sh",
      "-c",
      "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => "
      "8000, Listen => 5, ReuseAddr => 1) or die $!; while ($c = "
      "$s->accept) { <$c>; print $c \"HTTP/1.0 200 OK\\r\\n\\r\\nfrom "
      "inside\"; close $c }' >/dev/null 2>&1 &",
      NULL};
  sbx(&r, serve);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  char *got = test_http_get("127.0.0.1", hp);
  cr_expect(strstr(got, "from inside"), "got: %s", got);
  free(got);
  free(ep);
  free(id);
}

Test(docker_session, stop_and_start_keep_the_workspace) {
  char *id = create();
  struct sbx_run_out r;
  const char *stop[] = {"stop", id, NULL};
  for (int i = 0; i < 2; i++) { /* idempotent */
    sbx(&r, stop);
    cr_expect_eq(r.status, 0, "%s", r.err);
    sbx_run_free(&r);
  }
  const char *cat[] = {"exec", id, "--", "cat", "notes.txt", NULL};
  sbx(&r, cat);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "is stopped") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *start[] = {"start", id, NULL};
  sbx(&r, start);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  sbx(&r, cat);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "hello\nmore\n");
  sbx_run_free(&r);
  free(id);
}

/* A host directory with hello.txt in it, readable by anyone (the
 * container's users are no one on the host under a user namespace), for
 * a bind mount. DIR gets its path. */
static void host_dir_with_file(char *hd, size_t n) {
  (void)snprintf(hd, n, "%s/bind", dir);
  cr_assert_eq(mkdir(hd, 0755), 0);
  cr_assert_eq(chmod(hd, 0755), 0);
  test_write_file(hd, "hello.txt", "from the host\n");
  char f[256];
  (void)snprintf(f, sizeof(f), "%s/hello.txt", hd);
  cr_assert_eq(chmod(f, 0644), 0);
}

/* What the options of the tests below do inside sandbox ID: the user,
 * the environment, the bind mount, and the memory, CPU and process
 * limits (cgroup v2 files, else v1's). */
static void expect_options_inside(const char *id) {
  struct sbx_run_out r;
  const char *cmd[] = {
      "exec",
      id,
      "--",
      "sh",
      "-c",
      "id -u; echo \"[$GREETING|$OTHER]\"; cat /data/hello.txt; "
      "touch /data/x 2>/dev/null || echo data-ro; "
      "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
      "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
      "cat /sys/fs/cgroup/pids.max 2>/dev/null || "
      "cat /sys/fs/cgroup/pids/pids.max; "
      "cat /sys/fs/cgroup/cpu.max 2>/dev/null || "
      "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us",
      NULL};
  sbx(&r, cmd);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strncmp(r.out,
                    "1234\n[hi there|x=y]\nfrom the host\ndata-ro\n"
                    "100663296\n55\n",
                    strlen("1234\n[hi there|x=y]\nfrom the host\ndata-ro\n"
                           "100663296\n55\n")) == 0,
            "%s", r.out);
  cr_expect(strstr(r.out, "\n50000 100000\n") || strstr(r.out, "\n50000\n"),
            "cpu quota: %s", r.out);
  sbx_run_free(&r);
}

/* Every docker option can be given on the command line: dedicated flags
 * (--env, --user, --mount; repeated ones add up) and -o KEY=VALUE for
 * the rest, and each takes effect inside the container. */
Test(docker_session, command_line_options_reach_the_container) {
  char hd[160], mounts[400];
  host_dir_with_file(hd, sizeof(hd));
  (void)snprintf(mounts, sizeof(mounts),
                 "type=bind,source=%s,target=/data,readonly", hd);
  const char *args[] = {"create",
                        "--backend",
                        "docker",
                        "--env",
                        "GREETING=hi there",
                        "--env",
                        "OTHER=x=y",
                        "--user",
                        "1234:1234",
                        "-o",
                        "memory_bytes=100663296",
                        "--option",
                        "cpus=0.5",
                        "-o",
                        "pids_limit=55",
                        "--mount",
                        "type=volume,target=/cache",
                        "--mount",
                        mounts,
                        "-o",
                        "labels={\"team\": \"t2\"}",
                        NULL};
  char *id = sbx_sandbox_line(sdir, args);
  expect_options_inside(id);
  /* Both --mount flags hold: the volume too. */
  struct sbx_run_out r;
  const char *vol[] = {
      "exec", id,   "--",
      "sh",   "-c", "test -d /cache && grep -c ' /cache ' /proc/mounts",
      NULL};
  sbx(&r, vol);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "1\n");
  sbx_run_free(&r);
  free(id);
}

/* The same options from an agent file's run_config, with its
 * exposed_ports published as --expose publishes them. */
Test(docker_session, agent_file_options_reach_the_container) {
  char hd[160], text[1024];
  host_dir_with_file(hd, sizeof(hd));
  (void)snprintf(
      text, sizeof(text),
      "{\"name\": \"O\", \"run_config\": {\"backend\": \"docker\", "
      "\"env\": {\"GREETING\": \"hi there\", \"OTHER\": \"x=y\"}, "
      "\"user\": \"1234:1234\", \"memory_bytes\": 100663296, \"cpus\": 0.5, "
      "\"pids_limit\": 55, \"mounts\": [{\"type\": \"bind\", \"source\": "
      "\"%s\", \"target\": \"/data\", \"read_only\": true}], "
      "\"exposed_ports\": [8000]}}",
      hd);
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", test_write_file(dir, "o.json", text));
  const char *args[] = {"create", "--agent", ap, NULL};
  char *id = sbx_sandbox_line(sdir, args);
  expect_options_inside(id);
  const char *port[] = {"port", id, "8000", NULL};
  char *ep = sbx_sandbox_line(sdir, port);
  cr_expect(strncmp(ep, "127.0.0.1:", 10) == 0, "%s", ep);
  free(ep);
  free(id);
}

/* run_config.exposed_ports are published by the engine: a server in the
 * container answers on the loopback port the sandbox_created event names;
 * and --expose replaces them. */
Test(docker_session, run_config_exposed_ports_are_reached) {
  const char *a = test_write_file(
      dir, "p.json",
      "{\"name\": \"P\", \"run_config\": {\"backend\": \"docker\", "
      "\"exposed_ports\": [8000]}}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  const char *args[] = {"create", "--agent", ap, NULL};
  char *id = sbx_sandbox_line(sdir, args);
  const char *port[] = {"port", id, "8000", NULL};
  char *ep = sbx_sandbox_line(sdir, port);
  cr_assert(strncmp(ep, "127.0.0.1:", 10) == 0, "%s", ep);
  unsigned hp = (unsigned)strtoul(ep + 10, NULL, 10);
  struct sbx_run_out r;
  const char *serve[] = {
      "exec",
      id,
      "--",
      "sh",
      "-c",
      "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => "
      "8000, Listen => 5, ReuseAddr => 1) or die $!; while ($c = "
      "$s->accept) { <$c>; print $c \"HTTP/1.0 200 OK\\r\\n\\r\\nfrom "
      "run_config\"; close $c }' >/dev/null 2>&1 &",
      NULL};
  sbx(&r, serve);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  char *got = test_http_get("127.0.0.1", hp);
  cr_expect(strstr(got, "from run_config"), "got: %s", got);
  free(got);
  free(ep);
  free(id);
  /* sbx run reports it in sandbox_created; --expose replaces it. */
  for (int flag = 0; flag < 2; flag++) {
    const char *plain[] = {"run", "--state-dir", sdir, "--stream",
                           ap,    "x",           NULL};
    const char *expose[] = {"run",      "--state-dir", sdir,
                            "--stream", "--expose",    "9000",
                            ap,         "x",           NULL};
    char *out = NULL;
    free(run_one_command("true", flag ? expose : plain, &out));
    const char *want = flag ? "\"exposed_ports\":{\"9000\":\"127.0.0.1:"
                            : "\"exposed_ports\":{\"8000\":\"127.0.0.1:";
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
  }
}

/* Refusals on the command line and in run_config, before anything is
 * created: labels are strings and not sbx's, network none publishes no
 * ports. */
Test(docker_session, option_refusals_name_the_option) {
  static const struct {
    const char *flag, *value, *want;
  } cases[] = {
      {"-o", "labels={\"team\": 1}",
       "-o \"labels={\"team\": 1}\": label "
       "\"team\": its value must be a string"},
      {"-o", "labels={\"sbx.session\": \"x\"}",
       "label \"sbx.session\" is reserved: sbx.* labels are set by sbx "
       "itself"},
      {"-o", "labels=[\"a\"]",
       "\"labels\" must be an object of strings (got array)"},
      {"-o", "labels={oops", "-o labels: the value is not JSON"},
      {"-o", "imgae=x", "\"imgae\": backend docker has no such option"},
      {"-o", "never_pull=maybe", "-o never_pull=maybe: expected true or false"},
      {"-o", "user=root", "user \"root\": expected a numeric uid"},
      {"--env", "NOEQUALS", "--env \"NOEQUALS\": expected NAME=VALUE"},
      {"--user", "nobody",
       "--user \"nobody\": user \"nobody\": expected a "
       "numeric uid"},
      {"-o",
       "mounts=[{\"type\": \"bind\", \"source\": \"rel\", \"target\": "
       "\"/d\"}]",
       "mounts[0]: a bind mount needs an absolute host source path"},
      {"--mount", "type=bind,source=/srv,target=/run/sbx",
       "would cover sbx's own /run/sbx"},
      {"--mount", "type=bind,size=1", "unknown field \"size\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out r;
    const char *args[] = {"create",      "--backend",    "docker",
                          cases[i].flag, cases[i].value, NULL};
    sbx(&r, args);
    cr_expect_eq(r.status, 2, "%s %s", cases[i].flag, cases[i].value);
    cr_expect(strstr(r.err, cases[i].want) != NULL, "%s", r.err);
    sbx_run_free(&r);
  }
  struct sbx_run_out r;
  const char *none[] = {"create", "--backend", "docker", "--network",
                        "none",   "--expose",  "8000",   NULL};
  sbx(&r, none);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "network_mode \"none\" cannot be combined with "
                          "exposed_ports (port 8000)") != NULL,
            "%s", r.err);
  sbx_run_free(&r);
  static const char *const files[][2] = {
      {"{\"name\": \"L\", \"run_config\": {\"backend\": \"docker\", "
       "\"labels\": {\"sbx.managed\": \"no\"}}}",
       "label \"sbx.managed\" is reserved"},
      {"{\"name\": \"L\", \"run_config\": {\"backend\": \"docker\", "
       "\"labels\": {\"n\": 3}}}",
       "label \"n\": its value must be a string"},
      {"{\"name\": \"L\", \"run_config\": {\"backend\": \"docker\", "
       "\"network_mode\": \"none\", \"exposed_ports\": [8000]}}",
       "network_mode \"none\" cannot be combined with exposed_ports"},
      {"{\"name\": \"L\", \"run_config\": {\"exposed_ports\": [0]}}",
       "\"run_config.exposed_ports[0]\": Exposed ports must be integers "
       "between 1 and 65535."},
      {"{\"name\": \"L\", \"run_config\": {\"exposed_ports\": \"80\"}}",
       "run_config.exposed_ports"},
  };
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    char ap[256];
    (void)snprintf(ap, sizeof(ap), "%s",
                   test_write_file(dir, "bad.json", files[i][0]));
    const char *args[] = {"create", "--agent", ap, NULL};
    sbx(&r, args);
    cr_expect_eq(r.status, 2, "%s", files[i][0]);
    cr_expect(strstr(r.err, files[i][1]) != NULL, "%s: %s", files[i][0], r.err);
    sbx_run_free(&r);
  }
  /* Nothing was made. */
  const char *ls[] = {"--json", "ls", NULL};
  sbx(&r, ls);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "[]\n");
  sbx_run_free(&r);
}

/* The engine's labels of the container of recorded sandbox ID (new). */
static json_t *container_labels(const char *id) {
  struct sbx_run_out r;
  const char *info[] = {"info", "--json", id, NULL};
  sbx(&r, info);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = json_loads(r.out, 0, NULL);
  sbx_run_free(&r);
  const char *c = json_string_value(
      json_object_get(json_object_get(j, "docker"), "container"));
  cr_assert_not_null(c);
  struct docker_engine *en = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(docker_engine_open(NULL, &en, &e), 0, "%s", e.msg);
  char path[256];
  (void)snprintf(path, sizeof(path), "/containers/%s/json", c);
  json_decref(j);
  struct docker_request req = {.method = "GET", .path = path};
  json_t *ins = NULL;
  cr_assert_eq(docker_engine_json(en, &req, &ins, &e), 0, "%s", e.msg);
  docker_engine_free(en);
  json_t *labels =
      json_incref(json_object_get(json_object_get(ins, "Config"), "Labels"));
  json_decref(ins);
  return labels;
}

/* --label goes on the container beside the labels option (over it for a
 * key both give) and sbx's own; --ttl is kept by sandboxd inside, so the
 * container stops by itself; stats reads the container's cgroup. */
Test(docker_session, labels_ttl_and_stats_on_a_container) {
  const char *a = test_write_file(
      dir, "l.json",
      "{\"name\": \"L\", \"run_config\": {\"backend\": \"docker\", "
      "\"labels\": {\"team\": \"t1\", \"other\": \"o\"}}}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  const char *create[] = {"create", "--agent", ap,        "--name",
                          "dk",     "--label", "team=t2", "--label",
                          "env=x",  "--ttl",   "6s",      NULL};
  char *id = sbx_sandbox_line(sdir, create);
  json_t *l = container_labels("dk");
  cr_expect_str_eq(json_string_value(json_object_get(l, "team")), "t2");
  cr_expect_str_eq(json_string_value(json_object_get(l, "other")), "o");
  cr_expect_str_eq(json_string_value(json_object_get(l, "env")), "x");
  cr_expect_str_eq(json_string_value(json_object_get(l, "sbx.managed")),
                   "true");
  json_decref(l);
  struct sbx_run_out r;
  const char *stats[] = {"stats", "--json", "dk", NULL};
  sbx(&r, stats);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = json_loads(r.out, 0, NULL);
  cr_expect_geq(json_integer_value(json_object_get(j, "pids")), 1, "%s", r.out);
  cr_expect_gt(json_integer_value(json_object_get(j, "memory_bytes")), 0);
  if (strcmp(json_string_value(json_object_get(j, "source")), "cgroup") == 0)
    cr_expect_gt(json_integer_value(json_object_get(j, "pids_limit")), 0,
                 "the container's pids limit: %s", r.out);
  json_decref(j);
  sbx_run_free(&r);
  /* Nobody stops it: its sandboxd does at the end of its time to live. */
  const char *ls[] = {"ls", "--json", "--filter", "status=expired", NULL};
  bool expired = false;
  for (int i = 0; i < 40 && !expired; i++) {
    sbx(&r, ls);
    expired = strstr(r.out, id) != NULL;
    sbx_run_free(&r);
    if (!expired) {
      struct timespec ts = {0, 250 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  cr_expect(expired, "the container still runs past its time to live");
  const char *start[] = {"start", "dk", NULL};
  sbx(&r, start);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "has expired"), "%s", r.err);
  sbx_run_free(&r);
  free(id);
}
