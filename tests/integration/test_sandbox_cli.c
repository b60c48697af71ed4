/* Developer-owned sandboxes and `sbx sandbox ...` end to end: the real sbx,
 * a detached sandboxd per sandbox, the scripted model server for runs, and
 * tmux for the interactive shell. Each test has its own state directory and
 * TMPDIR, and removes every sandbox it made. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/backend/backend.h"
#include "controller/cli/cli.h"
#include "controller/sandbox/lifecycle.h"
#include "shared/cleanup.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[128];
static char tmux_sock[160];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-cli-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  char tmp[128];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1);
  tmux_sock[0] = '\0';
}

static void sbx(struct sbx_run_out *o, const char *const *argv);

static void teardown(void) {
  char p[160];
  (void)snprintf(p, sizeof(p), "%s/sandboxes", state);
  DIR *d = opendir(p);
  while (d) {
    struct dirent *de = readdir(d);
    if (!de)
      break;
    size_t n = strlen(de->d_name);
    if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0)
      continue;
    char id[32];
    (void)snprintf(id, sizeof(id), "%.*s", (int)(n - 5), de->d_name);
    struct sbx_run_out o;
    sbx(&o, (const char *const[]){"rm", "--force", id, NULL});
    sbx_run_free(&o);
  }
  if (d)
    closedir(d);
  if (tmux_sock[0]) {
    char cmd[256];
    (void)snprintf(cmd, sizeof(cmd), "tmux -S %s kill-server 2>/dev/null",
                   tmux_sock);
    (void)!system(cmd);
  }
  (void)test_rm_rf(dir);
}

TestSuite(sandbox_cli, .init = setup, .fini = teardown, .timeout = 180);

/* Runs "sbx sandbox --state-dir STATE ARGV...". */
static void sbx(struct sbx_run_out *o, const char *const *argv) {
  const char *args[40];
  size_t n = 0;
  args[n++] = "sandbox";
  args[n++] = "--state-dir";
  args[n++] = state;
  for (size_t i = 0; argv[i] && n < 39; i++)
    args[n++] = argv[i];
  args[n] = NULL;
  sbx_run(o, NULL, args);
}

static char *trim(char *s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
    s[--n] = '\0';
  return s;
}

static void create(const char *const *extra, char *id, size_t n) {
  const char *args[20] = {"create"};
  size_t k = 1;
  for (size_t i = 0; extra && extra[i]; i++)
    args[k++] = extra[i];
  args[k] = NULL;
  struct sbx_run_out o;
  sbx(&o, args);
  cr_assert_eq(o.status, 0, "create: %s", o.err);
  (void)snprintf(id, n, "%s", trim(o.out));
  cr_assert_eq(strlen(id), 12, "id: \"%s\"", id);
  sbx_run_free(&o);
}

static const char *write_in(const char *name, const char *text) {
  return test_write_file(dir, name, text);
}

static json_t *parse_json(const char *s) {
  json_error_t je;
  json_t *j = json_loads(s, 0, &je);
  cr_assert_not_null(j, "not JSON (%s): %s", je.text, s);
  return j;
}

static bool pid_alive(pid_t pid) {
  char p[64], buf[512];
  (void)snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(p, "r");
  if (!f)
    return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *c = strrchr(buf, ')');
  return c && c[1] == ' ' && c[2] != 'Z' && c[2] != 'X';
}

static const char agent_text[] =
    "{\"name\": \"Dev\", \"model\": \"m\",\n"
    " \"default_manifest\": {\"entries\": {\"notes.txt\": {\"type\": "
    "\"file\", \"content\": \"from the manifest\\n\"}},\n"
    "   \"environment\": {\"GREETING\": \"hi\"}}}\n";

static void run_in(const char *id, const char *agent, const char *cmd,
                   const char *const *extra, struct sbx_run_out *out,
                   json_t **reqs) {
  char script[1024];
  json_t *s = json_pack("[{s:[{s:s, s:s, s:{s:s}}]}, {s:s}]", "tool_calls",
                        "name", "exec_command", "call_id", "c1", "arguments",
                        "cmd", cmd, "text", "done");
  char *st = json_dumps(s, JSON_COMPACT);
  (void)snprintf(script, sizeof(script), "%s", st);
  free(st);
  json_decref(s);
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  const char *argv[24] = {"run", "--sandbox", id, "--state-dir", state};
  size_t n = 5;
  for (size_t i = 0; extra && extra[i]; i++)
    argv[n++] = extra[i];
  argv[n++] = agent;
  argv[n++] = "Go.";
  argv[n] = NULL;
  sbx_run(out, srv.base_url, argv);
  *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
}

Test(sandbox_cli, two_runs_share_a_developer_owned_sandbox) {
  const char *agent = write_in("dev.json", agent_text);
  char agent_path[256];
  (void)snprintf(agent_path, sizeof(agent_path), "%s", agent);
  char id[32];
  create((const char *const[]){"--agent", agent_path, "--expose", "8080", NULL},
         id, sizeof(id));

  /* A second process sees it, running, with its record. */
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"ls", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  cr_expect(strncmp(o.out, "ID ", 3) == 0, "a table: %s", o.out);
  cr_expect(strstr(o.out, id) && strstr(o.out, "running"), "%s", o.out);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"info", "--json", id, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  json_t *info = parse_json(o.out);
  cr_expect_str_eq(json_string_value(json_object_get(info, "status")),
                   "running");
  const char *ep = json_string_value(
      json_object_get(json_object_get(info, "endpoints"), "8080"));
  cr_expect(ep && strncmp(ep, "127.0.0.1:", 10) == 0 &&
                strtol(ep + 10, NULL, 10) > 0,
            "%s", ep ? ep : "-");
  json_t *local = json_object_get(info, "local");
  pid_t pid = (pid_t)json_integer_value(json_object_get(local, "pid"));
  const char *tokf = json_string_value(json_object_get(local, "token_file"));
  cr_assert_not_null(tokf);
  struct stat st;
  cr_assert_eq(stat(tokf, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600, "the token file is 0600");
  char rec[256];
  (void)snprintf(rec, sizeof(rec), "%s/sandboxes/%s.json", state, id);
  cr_assert_eq(stat(rec, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600, "the record is 0600");
  char *token = NULL;
  {
    FILE *f = fopen(tokf, "r");
    char buf[128] = {0};
    cr_assert_not_null(f);
    cr_assert_gt(fread(buf, 1, sizeof(buf) - 1, f), 0);
    fclose(f);
    token = strdup(trim(buf));
  }
  cr_expect_null(strstr(o.out, token), "info never prints the token");
  cr_expect(pid > 0 && pid_alive(pid), "sandboxd outlived sbx create");
  sbx_run_free(&o);
  json_decref(info);

  /* Run 1 writes a file, run 2 (another sbx process) reads it. */
  json_t *reqs = NULL;
  run_in(id, agent_path, "echo one > run1.txt; echo $GREETING", NULL, &o,
         &reqs);
  cr_assert_eq(o.status, 0, "run 1: %s", o.err);
  const char *c1 = test_call_output(reqs, 1, "c1");
  cr_assert_not_null(c1);
  cr_expect(strstr(c1, "Output:\nhi\n"), "%s", c1);
  sbx_run_free(&o);
  json_decref(reqs);
  run_in(id, agent_path, "cat run1.txt notes.txt", NULL, &o, &reqs);
  cr_assert_eq(o.status, 0, "run 2: %s", o.err);
  c1 = test_call_output(reqs, 1, "c1");
  cr_assert_not_null(c1);
  cr_expect(strstr(c1, "Output:\none\nfrom the manifest\n"), "%s", c1);
  sbx_run_free(&o);
  json_decref(reqs);
  cr_expect(pid_alive(pid), "the runs left it running");

  /* An agent whose manifest changes the sandbox is refused by rule. */
  const char *other =
      write_in("other.json",
               "{\"name\": \"O\", \"model\": \"m\", \"default_manifest\": "
               "{\"entries\": {}, \"environment\": {\"GREETING\": \"hi\"}}}");
  char other_path[256];
  (void)snprintf(other_path, sizeof(other_path), "%s", other);
  run_in(id, other_path, "true", NULL, &o, &reqs);
  cr_expect_eq(o.status, 2, "%s", o.err);
  cr_expect(strstr(o.err, "Live sandbox sessions cannot change entries: "
                          "\"notes.txt\" would be removed"),
            "%s", o.err);
  sbx_run_free(&o);
  json_decref(reqs);

  /* Flags that make sandboxes would do nothing for an agent with no
   * other agent that makes one. */
  static const char *const nothing[][3] = {
      {"--memory-bytes", "100000000", "a backend option would do nothing"},
      {"--seccomp", "off", "--seccomp would do nothing"},
      {"--backend", "local", "--backend would do nothing"},
  };
  for (size_t i = 0; i < sizeof(nothing) / sizeof(nothing[0]); i++) {
    run_in(id, other_path, "true",
           (const char *const[]){nothing[i][0], nothing[i][1], NULL}, &o,
           &reqs);
    cr_expect_eq(o.status, 2, "%s", o.err);
    cr_expect(strstr(o.err, nothing[i][2]), "%s", o.err);
    cr_expect(strstr(o.err, "the run works in the live sandbox of --sandbox"),
              "%s", o.err);
    sbx_run_free(&o);
    json_decref(reqs);
  }

  /* An additive one is applied and recorded. */
  const char *more = write_in(
      "more.json",
      "{\"name\": \"M\", \"model\": \"m\", \"default_manifest\": "
      "{\"entries\": {\"notes.txt\": {\"type\": \"file\", \"content\": "
      "\"from the manifest\\n\"}, \"extra.txt\": {\"type\": \"file\", "
      "\"content\": \"added\\n\"}}, \"environment\": {\"GREETING\": "
      "\"hi\"}}}");
  char more_path[256];
  (void)snprintf(more_path, sizeof(more_path), "%s", more);
  run_in(id, more_path, "cat extra.txt", NULL, &o, &reqs);
  cr_expect_eq(o.status, 0, "%s", o.err);
  c1 = test_call_output(reqs, 1, "c1");
  cr_expect(c1 && strstr(c1, "Output:\nadded\n"), "%s", c1 ? c1 : "(none)");
  sbx_run_free(&o);
  json_decref(reqs);
  sbx(&o, (const char *const[]){"info", id, NULL});
  cr_expect(strstr(o.out, "extra.txt (file)"), "%s", o.out);
  sbx_run_free(&o);

  /* Stop and start keep the files; rm ends it. */
  sbx(&o, (const char *const[]){"stop", id, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  cr_expect_not(pid_alive(pid));
  sbx(&o, (const char *const[]){"stop", id, NULL});
  cr_expect_eq(o.status, 0, "stop is idempotent: %s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "--", "true", NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "is stopped"), "%s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"start", id, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"start", id, NULL});
  cr_expect_eq(o.status, 0, "start is idempotent: %s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "--", "cat", "run1.txt", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "one\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"info", "--json", id, NULL});
  info = parse_json(o.out);
  pid = (pid_t)json_integer_value(
      json_object_get(json_object_get(info, "local"), "pid"));
  /* The workspace's path on the host (root is the one inside). */
  const char *ws = json_string_value(
      json_object_get(json_object_get(info, "local"), "workspace"));
  char wsp[256];
  (void)snprintf(wsp, sizeof(wsp), "%s", ws ? ws : "");
  json_decref(info);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"rm", id, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  cr_expect_not(pid_alive(pid));
  cr_expect(wsp[0] == '/' && stat(wsp, &st) != 0, "the workspace %s is gone",
            wsp);
  cr_expect_neq(stat(tokf, &st), 0, "the token file is gone");
  sbx(&o, (const char *const[]){"ls", "--json", NULL});
  cr_expect_str_eq(trim(o.out), "[]");
  sbx_run_free(&o);
  free(token);
}

/* A run_as user reads the workspace, as in the SDK (its root is 0755, its
 * entries 0755), while the directory that holds it on the host is the
 * sandbox's own (0700): other users of the host do not. */
Test(sandbox_cli, a_run_as_user_reads_the_workspace) {
  const char *agent =
      write_in("ra.json", "{\"name\": \"A\", \"run_as\": \"builder\", "
                          "\"default_manifest\": {\"entries\": {\"f.txt\": "
                          "{\"type\": \"file\", \"content\": \"hi\"}}}}");
  char id[32];
  create((const char *const[]){"--agent", agent, NULL}, id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", "-u", "builder", id, "--", "sh", "-c",
                                "id -un; ls /workspace; cat /workspace/f.txt",
                                NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "builder\nf.txt\nhi");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"info", "--json", id, NULL});
  json_t *info = parse_json(o.out);
  sbx_run_free(&o);
  const char *ws = json_string_value(
      json_object_get(json_object_get(info, "local"), "workspace"));
  cr_assert_not_null(ws);
  char outer[256];
  (void)snprintf(outer, sizeof(outer), "%s", ws);
  char *slash = strrchr(outer, '/');
  cr_assert_not_null(slash);
  *slash = '\0';
  struct stat st;
  cr_assert_eq(stat(outer, &st), 0, "%s", outer);
  cr_expect_eq(st.st_mode & 07777, 0700, "%s is %o", outer, st.st_mode & 07777);
  json_decref(info);
  sbx(&o, (const char *const[]){"rm", id, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  cr_expect_neq(stat(outer, &st), 0, "%s is removed with it", outer);
}

Test(sandbox_cli, exec_streams_and_returns_the_exit_code) {
  char id[32];
  create(NULL, id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "echo out; echo err >&2; exit 7", NULL});
  cr_expect_eq(o.status, 7);
  cr_expect_str_eq(o.out, "out\n");
  cr_expect_str_eq(o.err, "err\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", "--json", "-e", "X=1", id, "--", "sh",
                                "-c", "echo $X; exit 3", NULL});
  cr_expect_eq(o.status, 3);
  json_t *j = parse_json(o.out);
  cr_expect_eq(json_integer_value(json_object_get(j, "exit_code")), 3);
  cr_expect_str_eq(json_string_value(json_object_get(j, "stdout")), "1\n");
  json_decref(j);
  sbx_run_free(&o);
  sbx(&o,
      (const char *const[]){"exec", id, "--", "sh", "-c", "kill -9 $$", NULL});
  cr_expect_eq(o.status, 128 + 9);
  sbx_run_free(&o);
  /* Output beyond the held window (8 MiB) and many reads, written while
   * the next is fetched: whole and in order. */
  sbx(&o, (const char *const[]){"exec", id, "--", "seq", "1", "2000000", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  size_t cap = 16u << 20, n = 0;
  char *want = malloc(cap);
  cr_assert_not_null(want);
  for (unsigned i = 1; i <= 2000000; i++)
    n += (size_t)snprintf(want + n, cap - n, "%u\n", i);
  cr_expect_eq(strlen(o.out), n);
  cr_expect(strcmp(o.out, want) == 0, "the output differs from seq's");
  free(want);
  sbx_run_free(&o);
}

static void make_tree(const char *root) {
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "mkdir -p %s/sub/deeper && cd %s && printf 'exe\\n' > run.sh "
                 "&& chmod 0751 run.sh && printf 'private\\n' > sub/secret && "
                 "chmod 0600 sub/secret && printf 'd\\n' > sub/deeper/d.txt "
                 "&& chmod 0750 sub && ln -s sub/secret link && "
                 "ln -s ../run.sh sub/up",
                 root, root);
  cr_assert_eq(system(cmd), 0);
}

static void same_tree(const char *a, const char *b) {
  char cmd[1024];
  /* name, type, mode, link target, size for every member, then contents */
  (void)snprintf(cmd, sizeof(cmd),
                 "cd %s && find . -printf '%%p %%y %%m %%l %%s\\n' | sort "
                 "> %s/a.list && cd %s && find . -printf "
                 "'%%p %%y %%m %%l %%s\\n' | sort > %s/b.list && "
                 "diff -r --no-dereference %s %s >/dev/null && "
                 "diff %s/a.list %s/b.list",
                 a, dir, b, dir, a, b, dir, dir);
  cr_expect_eq(system(cmd), 0, "trees differ: %s %s", a, b);
}

Test(sandbox_cli, cp_round_trip_keeps_symlinks_and_modes) {
  char id[32];
  create(NULL, id, sizeof(id));
  char src[128], back[128], back2[128];
  (void)snprintf(src, sizeof(src), "%s/tree", dir);
  (void)snprintf(back, sizeof(back), "%s/back", dir);
  (void)snprintf(back2, sizeof(back2), "%s/back2", dir);
  make_tree(src);
  char remote[64];
  struct sbx_run_out o;
  /* A missing destination receives the directory's contents. */
  (void)snprintf(remote, sizeof(remote), "%s:copy", id);
  sbx(&o, (const char *const[]){"cp", src, remote, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "--", "stat", "-c", "%a %F",
                                "copy/run.sh", "copy/sub", "copy/link", NULL});
  cr_expect_str_eq(o.out, "751 regular file\n750 directory\n777 symbolic "
                          "link\n");
  sbx_run_free(&o);
  /* Out again into a missing host directory: the same tree. */
  sbx(&o, (const char *const[]){"cp", remote, back, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  same_tree(src, back);
  /* An existing destination directory receives it by name; SRC/. copies
   * only the contents. */
  (void)snprintf(remote, sizeof(remote), "%s:.", id);
  sbx(&o, (const char *const[]){"cp", src, remote, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  char dot[160];
  (void)snprintf(dot, sizeof(dot), "%s/.", src);
  (void)snprintf(remote, sizeof(remote), "%s:flat", id);
  sbx(&o, (const char *const[]){"cp", dot, remote, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "test -f tree/run.sh && test -f flat/run.sh "
                                "&& test ! -e flat/tree && echo ok",
                                NULL});
  cr_expect_str_eq(o.out, "ok\n", "%s", o.err);
  sbx_run_free(&o);
  cr_assert_eq(mkdir(back2, 0755), 0);
  (void)snprintf(remote, sizeof(remote), "%s:tree", id);
  sbx(&o, (const char *const[]){"cp", "--json", remote, back2, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  json_t *j = parse_json(o.out);
  cr_expect_eq(json_integer_value(json_object_get(j, "files")), 3);
  json_decref(j);
  sbx_run_free(&o);
  char inner[160];
  (void)snprintf(inner, sizeof(inner), "%s/tree", back2);
  same_tree(src, inner);
  /* Single files and symlinks, both ways. */
  (void)snprintf(remote, sizeof(remote), "%s:copy/sub/secret", id);
  char one[160];
  (void)snprintf(one, sizeof(one), "%s/one", dir);
  sbx(&o, (const char *const[]){"cp", remote, one, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  struct stat st;
  cr_assert_eq(lstat(one, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  (void)snprintf(remote, sizeof(remote), "%s:copy/link", id);
  char lk[160], target[64] = {0};
  (void)snprintf(lk, sizeof(lk), "%s/lk", dir);
  sbx(&o, (const char *const[]){"cp", remote, lk, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  cr_expect_gt(readlink(lk, target, sizeof(target) - 1), 0);
  cr_expect_str_eq(target, "sub/secret");
}

Test(sandbox_cli, read_only_grants_refuse_writes_through_the_file_api) {
  char ro[128], rw[128];
  (void)snprintf(ro, sizeof(ro), "%s/ro", dir);
  (void)snprintf(rw, sizeof(rw), "%s/rw", dir);
  cr_assert_eq(mkdir(ro, 0755), 0);
  cr_assert_eq(mkdir(rw, 0755), 0);
  test_write_file(ro, "ref.txt", "reference\n");
  char text[512];
  (void)snprintf(text, sizeof(text),
                 "{\"extra_path_grants\": [{\"path\": \"%s\", \"read_only\": "
                 "true}, {\"path\": \"%s\"}]}",
                 ro, rw);
  const char *m = write_in("grants.json", text);
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", m);
  char id[32];
  create((const char *const[]){"--manifest", mp, NULL}, id, sizeof(id));
  /* This process attaches too, and uses the file API directly. */
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(cli_attach(state, id, &rec, &sb, &e), 0, "%s", e.msg);
  char path[256];
  (void)snprintf(path, sizeof(path), "%s/new.txt", ro);
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = path;
  w.data.data = (uint8_t *)"x";
  w.data.len = 1;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_write(sb->client, &w, &resp, &e);
  sbx_client_reply_free(resp);
  cr_expect_lt(r, 0, "a write under a read-only grant is refused");
  cr_expect(strstr(e.msg, "read-only"), "%s", e.msg);
  (void)snprintf(path, sizeof(path), "%s/ref.txt", ro);
  cr_expect_lt(sbx_file_remove(sb->client, path, false, false, &e), 0);
  Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
  rd.path = path;
  cr_expect_eq(sbx_file_read(sb->client, &rd, &resp, &e), 0, "%s", e.msg);
  sbx_client_reply_free(resp);
  (void)snprintf(path, sizeof(path), "%s/new.txt", rw);
  cr_expect_eq(sbx_file_write(sb->client, &w, &resp, &e), 0, "%s", e.msg);
  sbx_client_reply_free(resp);
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  /* The CLI's copies go through the same checks. */
  char remote[256];
  (void)snprintf(remote, sizeof(remote), "%s:%s/", id, ro);
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"cp", mp, remote, NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "read-only"), "%s", o.err);
  sbx_run_free(&o);
  struct stat st;
  (void)snprintf(path, sizeof(path), "%s/new.txt", rw);
  cr_expect_eq(stat(path, &st), 0);
}

Test(sandbox_cli, run_as_writes_files_owned_by_that_user) {
  if (geteuid() != 0)
    cr_skip_test("run_as needs root (sandboxd creates the user and "
                 "switches to it)");
  const char *user = "sbxclitu";
  (void)!system("userdel sbxclitu 2>/dev/null; groupdel sbxclitu "
                "2>/dev/null");
  const char *a = write_in(
      "ra.json",
      "{\"name\": \"R\", \"model\": \"m\", \"run_as\": \"sbxclitu\",\n"
      " \"default_manifest\": {\"groups\": [{\"name\": \"sbxclitu\"}],\n"
      "  \"entries\": {\"shared\": {\"type\": \"dir\", \"group\": "
      "\"sbxclitu\", \"permissions\": \"rwxrwx---\"}}}}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  char id[32];
  create((const char *const[]){"--agent", ap, NULL}, id, sizeof(id));
  struct sbx_run_out o;
  json_t *reqs = NULL;
  run_in(id, ap, "id -un; echo mine > mine.txt",
         (const char *const[]){"--cwd", "shared", NULL}, &o, &reqs);
  cr_expect_eq(o.status, 0, "%s", o.err);
  const char *c1 = test_call_output(reqs, 1, "c1");
  cr_expect(c1 && strstr(c1, "Output:\nsbxclitu\n"), "%s", c1 ? c1 : "-");
  json_decref(reqs);
  sbx_run_free(&o);
  /* The user exists in the sandbox only, and owns what it wrote there. */
  cr_expect_null(getpwnam(user), "the host's user database is untouched");
  sbx(&o, (const char *const[]){"exec", id, "--", "stat", "-c", "%U",
                                "shared/mine.txt", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "sbxclitu\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "mkdir private && chmod 700 private", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  /* A cwd the user cannot use is refused with the SDK's message. */
  run_in(id, ap, "true", (const char *const[]){"--cwd", "nosuch", NULL}, &o,
         &reqs);
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "Sandbox working directory \"nosuch\" does not "
                          "exist or is not accessible"),
            "%s", o.err);
  json_decref(reqs);
  sbx_run_free(&o);
  /* One that exists but the user may not enter: asked of a shell run as
   * the user. */
  run_in(id, ap, "true", (const char *const[]){"--cwd", "private", NULL}, &o,
         &reqs);
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "(user \"sbxclitu\" cannot enter and read it)"), "%s",
            o.err);
  json_decref(reqs);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"rm", id, NULL});
  sbx_run_free(&o);
  (void)!system("userdel sbxclitu 2>/dev/null; groupdel sbxclitu "
                "2>/dev/null");
}

static void tmux(const char *args) {
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd), "tmux -S %s %s", tmux_sock, args);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* Waits until the pane shows WANT; returns the pane's text (static). */
static const char *pane_until(const char *want) {
  static char buf[16384];
  for (int i = 0; i < 200; i++) {
    char cmd[512];
    (void)snprintf(cmd, sizeof(cmd), "tmux -S %s capture-pane -p -t t",
                   tmux_sock);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
      pclose(f);
    buf[n] = '\0';
    if (strstr(buf, want))
      return buf;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return buf;
}

Test(sandbox_cli, shell_through_a_real_terminal) {
  if (system("tmux -V >/dev/null 2>&1") != 0)
    cr_skip_test("tmux is not installed (scripts/install-deps.sh)");
  char id[32];
  create(NULL, id, sizeof(id));
  (void)snprintf(tmux_sock, sizeof(tmux_sock), "%s/tmux.sock", dir);
  char done[160];
  (void)snprintf(done, sizeof(done), "%s/done", dir);
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "new-session -d -s t -x 80 -y 24 \"%s sandbox --state-dir %s "
                 "shell %s; echo rc=\\$? > %s.tmp; stty -a | grep -o -- "
                 "'-\\?icanon' >> %s.tmp; mv %s.tmp %s; sleep 30\"",
                 test_sbx_path(), state, id, done, done, done, done);
  tmux(cmd);
  tmux("send-keys -t t 'PS1=\"$ \"; echo ready-$((6*7))' Enter");
  const char *p = pane_until("ready-42");
  cr_assert(strstr(p, "ready-42"), "the shell answered: %s", p);
  tmux("send-keys -t t 'stty size' Enter");
  p = pane_until("24 80");
  cr_expect(strstr(p, "24 80"), "%s", p);
  tmux("resize-window -t t -x 100 -y 30");
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  tmux("send-keys -t t 'clear; stty size' Enter");
  p = pane_until("30 100");
  cr_expect(strstr(p, "30 100"), "resize reached the PTY: %s", p);
  /* Ctrl-C stops the foreground command, not the shell. */
  tmux("send-keys -t t 'sleep 60' Enter");
  nanosleep(&ts, NULL);
  tmux("send-keys -t t C-c");
  tmux("send-keys -t t 'echo after-$((40+2))' Enter");
  p = pane_until("after-42");
  cr_expect(strstr(p, "after-42"), "Ctrl-C passed through: %s", p);
  tmux("send-keys -t t 'exit 5' Enter");
  char text[256] = {0};
  for (int i = 0; i < 200; i++) {
    FILE *f = fopen(done, "r");
    if (f) {
      size_t n = fread(text, 1, sizeof(text) - 1, f);
      text[n] = '\0';
      fclose(f);
      break;
    }
    nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  cr_expect(strstr(text, "rc=5"), "sbx exits with the shell's status: %s",
            text);
  cr_expect(strstr(text, "icanon") && !strstr(text, "-icanon"),
            "the terminal is restored: %s", text);
}

Test(sandbox_cli, exposed_ports_and_apply_patch) {
  char id[32];
  create((const char *const[]){"--expose", "8080", NULL}, id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"port", id, "8080", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  unsigned hp = 0;
  cr_expect_eq(sscanf(o.out, "127.0.0.1:%u\n", &hp), 1, "%s", o.out);
  cr_expect(hp > 0 && hp < 65536, "a forwarded host port: %s", o.out);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"port", id, "9090", NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "was not configured to expose port 9090."), "%s",
            o.err);
  sbx_run_free(&o);
  const char *patch = write_in("p.patch", "*** Begin Patch\n"
                                          "*** Add File: sub/a.txt\n"
                                          "+alpha\n"
                                          "*** End Patch\n");
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "%s sandbox --state-dir %s apply-patch %s < %s > %s/pout",
                 test_sbx_path(), state, id, patch, dir);
  cr_expect_eq(system(cmd), 0);
  (void)snprintf(cmd, sizeof(cmd), "grep -qx 'Created sub/a.txt' %s/pout", dir);
  cr_expect_eq(system(cmd), 0);
  const char *bad = write_in("bad.patch", "*** Begin Patch\n"
                                          "*** Update File: nope.txt\n"
                                          "@@\n-x\n+y\n"
                                          "*** End Patch\n");
  (void)snprintf(cmd, sizeof(cmd),
                 "%s sandbox --state-dir %s apply-patch --dir sub %s < %s "
                 "2>/dev/null",
                 test_sbx_path(), state, id, bad);
  int st = system(cmd);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "a failed patch is 1");
}

Test(sandbox_cli, error_paths_of_every_subcommand) {
  static const struct {
    const char *args[8];
    int status;
    const char *want;
  } cases[] = {
      {{"bogus", NULL}, 2, "unknown subcommand \"bogus\""},
      {{"info", "abcdef123456", NULL}, 1, "no sandbox \"abcdef123456\""},
      {{"info", "not-an-id", NULL}, 1, "no sandbox \"not-an-id\""},
      {{"info", NULL}, 2, "expected ID"},
      {{"exec", "abcdef123456", "--", "true", NULL}, 1, "no sandbox"},
      {{"exec", "abcdef123456", NULL}, 2, "expected a command"},
      {{"exec", "--timeout", "x", "i", "--", "true", NULL},
       2,
       "--timeout \"x\""},
      {{"shell", "abcdef123456", NULL}, 1, "no sandbox"},
      {{"cp", "a", "b", NULL}, 2, "exactly one of SRC and DST"},
      {{"cp", "abcdef123456:x", "/tmp/y", NULL}, 1, "no sandbox"},
      {{"cp", "onlyone", NULL}, 2, "expected SRC and DST"},
      {{"apply-patch", NULL}, 2, "expected ID"},
      {{"port", "abcdef123456", "70000", NULL},
       2,
       "Exposed ports must be integers between 1 and 65535."},
      {{"port", "abcdef123456", "80", NULL}, 1, "no sandbox"},
      {{"rm", NULL}, 2, "expected at least one ID"},
      {{"rm", "abcdef123456", NULL}, 1, "no sandbox"},
      {{"stop", "abcdef123456", NULL}, 1, "no sandbox"},
      {{"start", "abcdef123456", NULL}, 1, "no sandbox"},
      {{"create", "--manifest", "/nonexistent/m.json", NULL},
       2,
       "/nonexistent/m.json"},
      {{"create", "--expose", "0", NULL}, 2, "Exposed ports must be"},
      {{"create", "--concurrency", "threads=2", NULL},
       2,
       "expected manifest_entries=N"},
      {{"create", "extra", NULL}, 2, "unexpected argument \"extra\""},
      {{"create", "--heartbeat", "0", NULL},
       2,
       "--heartbeat \"0\": expected a whole number of seconds from 1 to "
       "3600"},
      {{"create", "--heartbeat", "1.5", NULL}, 2, "--heartbeat \"1.5\""},
      {{"create", "--heartbeat", "3601", NULL}, 2, "--heartbeat \"3601\""},
      {{"create", "--heartbeat", "-2", NULL}, 2, "--heartbeat \"-2\""},
      {{"ls", "--frobnicate", NULL}, 2, "unknown option"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out o;
    sbx(&o, cases[i].args);
    cr_expect_eq(o.status, cases[i].status, "case %zu (%s): status %d: %s", i,
                 cases[i].args[0], o.status, o.err);
    cr_expect(strstr(o.err, cases[i].want), "case %zu: want \"%s\" in: %s", i,
              cases[i].want, o.err);
    sbx_run_free(&o);
  }
  /* A missing state directory is an empty list, not an error. */
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"ls", "--json", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(trim(o.out), "[]");
  sbx_run_free(&o);
  /* Every subcommand has a --help that exits 0. */
  static const char *const subs[] = {"create", "ls",    "info", "exec",
                                     "shell",  "cp",    "port", "apply-patch",
                                     "stop",   "start", "rm"};
  for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
    sbx(&o, (const char *const[]){subs[i], "--help", NULL});
    cr_expect_eq(o.status, 0, "%s --help", subs[i]);
    cr_expect(strstr(o.out, "usage: sbx sandbox "), "%s: %s", subs[i], o.out);
    sbx_run_free(&o);
  }
  /* A manifest that cannot be materialized leaves nothing behind. */
  const char *m = write_in("bad.json", "{\"entries\": {\"x\": {\"type\": "
                                       "\"local_file\", \"src\": "
                                       "\"../../etc/passwd\"}}}");
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", m);
  sbx(&o, (const char *const[]){"create", "--manifest", mp, NULL});
  cr_expect_eq(o.status, 2, "%s", o.err);
  cr_expect(strstr(o.err, "entry \"x\": local_file source "
                          "\"../../etc/passwd\" is outside the base "
                          "directory"),
            "%s", o.err);
  sbx_run_free(&o);
  char cmd[256];
  (void)snprintf(cmd, sizeof(cmd),
                 "test -z \"$(ls -A %s/tmp)\" && test -z \"$(ls -A "
                 "%s/sandboxes)\"",
                 dir, state);
  cr_expect_eq(system(cmd), 0, "no workspace or record is left behind");
  /* sbx run --sandbox with an unknown id. */
  const char *agent = write_in("a.json", "{\"name\": \"A\"}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", agent);
  sbx_run(&o, NULL,
          (const char *const[]){"run", "--state-dir", state, "--sandbox",
                                "abcdef123456", ap, "x", NULL});
  cr_expect_eq(o.status, 1, "%s", o.err);
  cr_expect(strstr(o.err, "no sandbox \"abcdef123456\""), "%s", o.err);
  sbx_run_free(&o);
}

Test(sandbox_cli, local_bind_mounts_and_cloud_mounts) {
  char src[128];
  (void)snprintf(src, sizeof(src), "%s/shared", dir);
  cr_assert_eq(mkdir(src, 0755), 0);
  test_write_file(src, "in.txt", "bound\n");
  char text[512];
  (void)snprintf(text, sizeof(text),
                 "{\"entries\": {\"data/mnt\": {\"type\": \"mount\", "
                 "\"source\": \"%s\", \"read_only\": false, "
                 "\"mount_strategy\": \"local_bind\"}}}",
                 src);
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", write_in("bind.json", text));
  char id[32];
  create((const char *const[]){"--manifest", mp, NULL}, id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "cat data/mnt/in.txt; echo w > data/mnt/out",
                                NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "bound\n");
  sbx_run_free(&o);
  char out[160];
  (void)snprintf(out, sizeof(out), "%s/out", src);
  struct stat st;
  cr_expect_eq(stat(out, &st), 0, "writes reach the source");
  /* A read-only bind is read-only for every process; with isolation
   * "none" it cannot be enforced and is refused; cloud mounts are refused. */
  (void)snprintf(text, sizeof(text),
                 "{\"entries\": {\"m\": {\"type\": \"mount\", \"source\": "
                 "\"%s\"}}}",
                 src);
  (void)snprintf(mp, sizeof(mp), "%s", write_in("ro.json", text));
  create((const char *const[]){"--manifest", mp, NULL}, id, sizeof(id));
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "cat m/in.txt; echo w > m/ro-out", NULL});
  cr_expect_neq(o.status, 0);
  cr_expect_str_eq(o.out, "bound\n");
  cr_expect(strstr(o.err, "Read-only file system"), "%s", o.err);
  sbx_run_free(&o);
  (void)snprintf(out, sizeof(out), "%s/ro-out", src);
  cr_expect_neq(stat(out, &st), 0, "nothing was written to the source");
  sbx(&o, (const char *const[]){"create", "--isolation", "none", "--manifest",
                                mp, NULL});
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "cannot enforce a read-only local_bind mount"), "%s",
            o.err);
  sbx_run_free(&o);
  /* Nor can it put the workspace at a root of the manifest's own. */
  (void)snprintf(mp, sizeof(mp), "%s",
                 write_in("root.json", "{\"root\": \"/srv/app\"}"));
  sbx(&o, (const char *const[]){"create", "--isolation", "none", "--manifest",
                                mp, NULL});
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "the manifest's root \"/srv/app\" is not supported "
                          "with isolation \"none\""),
            "%s", o.err);
  sbx_run_free(&o);
  (void)snprintf(mp, sizeof(mp), "%s",
                 write_in("s3.json", "{\"entries\": {\"b\": {\"type\": "
                                     "\"s3_mount\", \"bucket\": \"x\"}}}"));
  sbx(&o, (const char *const[]){"create", "--manifest", mp, NULL});
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "entry \"b\": s3_mount is not supported by "
                          "backend local"),
            "%s", o.err);
  sbx_run_free(&o);
}

/* --heartbeat is recorded with the sandbox, for the commands that attach
 * to it later; a sandbox made without it records none (the default). */
Test(sandbox_cli, heartbeat_is_recorded_with_the_sandbox) {
  _cleanup_free_ char *id = sbx_sandbox_line(
      state, (const char *const[]){"create", "--heartbeat", "3", NULL});
  _cleanup_free_ char *plain =
      sbx_sandbox_line(state, (const char *const[]){"create", NULL});
  const char *ids[] = {id, plain};
  const json_int_t want[] = {3000, 0};
  for (size_t i = 0; i < 2; i++) {
    char p[512];
    (void)snprintf(p, sizeof(p), "%s/sandboxes/%s.json", state, ids[i]);
    json_error_t je;
    json_t *rec = json_load_file(p, 0, &je);
    cr_assert_not_null(rec, "%s: %s", p, je.text);
    json_t *hb = json_object_get(json_object_get(rec, "local"), "heartbeat_ms");
    cr_expect_eq(json_integer_value(hb), want[i], "%s", ids[i]);
    cr_expect(want[i] || !hb, "%s records a heartbeat", ids[i]);
    json_decref(rec);
  }
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "echo", "ok", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "ok\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"rm", "-f", id, plain, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  /* sbx run takes it too, and refuses what create refuses. */
  const char *agent = write_in("a.json", "{\"name\": \"A\"}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", agent);
  sbx_run(&o, NULL,
          (const char *const[]){"run", "--state-dir", state, "--heartbeat", "0",
                                ap, "x", NULL});
  cr_expect_eq(o.status, 2, "%s", o.err);
  cr_expect(strstr(o.err, "sbx run: --heartbeat \"0\": expected a whole"), "%s",
            o.err);
  sbx_run_free(&o);
}

/* Whether the comma-separated LIST names WORD. */
static bool in_list(const char *list, size_t len, const char *word) {
  size_t k = strlen(word);
  for (const char *p = list, *end = list + len; p < end;) {
    size_t w = strcspn(p, ",");
    if (w > (size_t)(end - p))
      w = (size_t)(end - p);
    if (w == k && !strncmp(p, word, k))
      return true;
    p += w + 1;
  }
  return false;
}

/* The first line of the host's cgroup file V1 (under CONTROLLER's v1
 * hierarchy) or else V2 of the process PID, found as the host sees it:
 * its /proc/PID/cgroup and the mount of that hierarchy in our
 * /proc/self/mountinfo, wherever and however the controllers are mounted.
 * New, "" when there is none. */
static char *host_cgroup(pid_t pid, const char *controller, const char *v1,
                         const char *v2) {
  char path[2048], line[1400], cg[1024] = "";
  bool is_v1 = false;
  (void)snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  while (fgets(line, sizeof(line), f)) {
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b)
      continue;
    bool v1_here = in_list(a + 1, (size_t)(b - a - 1), controller);
    if (v1_here || (b == a + 1 && !is_v1)) {
      (void)snprintf(cg, sizeof(cg), "%.*s", (int)strcspn(b + 1, "\n"), b + 1);
      is_v1 = v1_here;
    }
  }
  fclose(f);
  char point[512] = "", root[512] = "";
  f = fopen("/proc/self/mountinfo", "re");
  cr_assert_not_null(f);
  while (fgets(line, sizeof(line), f)) {
    char r[512], m[512], type[64], opts[512];
    const char *dash = strstr(line, " - ");
    if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", r, m) != 2 ||
        sscanf(dash, " - %63s %*s %511s", type, opts) != 2)
      continue;
    if (is_v1
            ? !strcmp(type, "cgroup") && in_list(opts, strlen(opts), controller)
            : !strcmp(type, "cgroup2")) {
      (void)snprintf(point, sizeof(point), "%s", m);
      (void)snprintf(root, sizeof(root), "%s", r);
      break;
    }
  }
  fclose(f);
  const char *rel = cg;
  size_t k = strlen(root);
  if (strcmp(root, "/") && !strncmp(cg, root, k))
    rel += k;
  (void)snprintf(path, sizeof(path), "%s%s/%s", point, rel, is_v1 ? v1 : v2);
  char value[128] = "";
  f = fopen(path, "re");
  if (f) {
    if (!fgets(value, sizeof(value), f))
      value[0] = '\0';
    fclose(f);
  }
  return strdup(trim(value));
}

/* The host pid of sandbox ID's PID 1, the child of its supervisor. */
static pid_t sandbox_init_pid(const char *id) {
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"info", "--json", id, NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  json_t *info = parse_json(o.out);
  int sup = (int)json_integer_value(
      json_object_get(json_object_get(info, "local"), "pid"));
  json_decref(info);
  sbx_run_free(&o);
  char path[128];
  (void)snprintf(path, sizeof(path), "/proc/%d/task/%d/children", sup, sup);
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  int pid1 = 0;
  cr_assert_eq(fscanf(f, "%d", &pid1), 1, "%s", path);
  fclose(f);
  return (pid_t)pid1;
}

/* Every option of the local backend can be given as -o KEY=VALUE, as in
 * run_config, and takes effect: the cgroup limits, no network, the
 * workspace in memory. */
Test(sandbox_cli, local_options_from_the_command_line) {
  char id[32];
  create((const char *const[]){"-o", "isolation=namespaces", "-o",
                               "memory_bytes=67108864", "--option",
                               "pids_limit=33", "-o", "cpus=0.5", "-o",
                               "network_mode=none", "-o",
                               "workspace_bytes=8388608", NULL},
         id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "echo ---; cat /proc/net/dev; "
                                "df -k /workspace",
                                NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  pid_t pid1 = sandbox_init_pid(id);
  char *mem =
      host_cgroup(pid1, "memory", "memory.limit_in_bytes", "memory.max");
  char *pids = host_cgroup(pid1, "pids", "pids.max", "pids.max");
  char *cpu = host_cgroup(pid1, "cpu", "cpu.cfs_quota_us", "cpu.max");
  cr_expect_str_eq(mem, "67108864");
  cr_expect_str_eq(pids, "33");
  cr_expect(strcmp(cpu, "50000") == 0 || strcmp(cpu, "50000 100000") == 0,
            "cpu quota: %s", cpu);
  free(mem);
  free(pids);
  free(cpu);
  const char *net = strstr(o.out, "---");
  cr_assert_not_null(net);
  cr_expect(strstr(net, " lo:") && !strstr(net, "eth") && !strstr(net, "tap"),
            "only loopback: %s", net);
  cr_expect(strstr(net, "tmpfs") && strstr(net, " 8192 "),
            "an 8 MiB workspace in memory: %s", net);
  sbx_run_free(&o);
  /* Refusals name the key, as run_config's do. */
  sbx(&o, (const char *const[]){"create", "-o", "cpus=2000", NULL});
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "-o \"cpus=2000\": cpus: expected 0 to 1024"), "%s",
            o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"create", "-o", "isolation=none", "-o",
                                "pids_limit=5", NULL});
  cr_expect_eq(o.status, 2);
  cr_expect(strstr(o.err, "isolation: \"none\" cannot limit"), "%s", o.err);
  sbx_run_free(&o);
}
