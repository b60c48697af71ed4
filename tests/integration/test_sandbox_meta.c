/* What an operator gives and asks of developer-owned sandboxes beyond
 * their files: names and labels (create --name, --label; every command
 * takes a name; ls --filter), a time to live and an idle timeout that the
 * real sandboxd enforces by itself, stats and prune. The real sbx and
 * sandboxd; each test has its own state directory and TMPDIR. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/sbxrun.h"

static char dir[64];
static char state[128];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-meta-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  char tmp[128];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(sandbox_meta, .init = setup, .fini = teardown, .timeout = 180);

static void sbx(struct sbx_run_out *o, const char *const *argv) {
  sbx_sandbox_run(o, state, argv);
}

/* Runs ARGV and expects exit status WANT: its stdout (new). */
static char *ok(int want, const char *const *argv) {
  struct sbx_run_out o;
  sbx(&o, argv);
  cr_assert_eq(o.status, want, "%s %s: status %d: %s%s", argv[0],
               argv[1] ? argv[1] : "", o.status, o.err, o.out);
  char *out = o.out;
  o.out = NULL;
  sbx_run_free(&o);
  return out;
}

/* Creates a sandbox with the options EXTRA: its id. */
static void create(const char *const *extra, char *id, size_t n) {
  const char *argv[24] = {"create"};
  size_t k = 1;
  for (size_t i = 0; extra && extra[i] && k < 23; i++)
    argv[k++] = extra[i];
  argv[k] = NULL;
  char *out = ok(0, argv);
  out[strcspn(out, "\n")] = '\0';
  (void)snprintf(id, n, "%s", out);
  free(out);
  cr_assert_eq(strlen(id), 12, "id: \"%s\"", id);
}

/* `ls --json` with FILTERS (NULL-terminated, each a --filter value): the
 * array (new). */
static json_t *ls(const char *const *filters) {
  const char *argv[24] = {"ls", "--json"};
  size_t k = 2;
  for (size_t i = 0; filters && filters[i] && k < 22; i++) {
    argv[k++] = "--filter";
    argv[k++] = filters[i];
  }
  argv[k] = NULL;
  char *out = ok(0, argv);
  json_t *j = json_loads(out, 0, NULL);
  cr_assert(json_is_array(j), "%s", out);
  free(out);
  return j;
}

static int by_text(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The ids in A (an ls array, freed), sorted, space-separated: records of
 * one second are listed by id, not by creation. */
static char *ids(json_t *a) {
  static char buf[512];
  const char *v[16];
  size_t n = 0;
  for (; n < json_array_size(a) && n < 16; n++)
    v[n] = json_string_value(json_object_get(json_array_get(a, n), "id"));
  qsort(v, n, sizeof(*v), by_text);
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat(buf, " ");
    strncat(buf, v[i], 12);
  }
  json_decref(a);
  return buf;
}

/* "X Y" of two ids, sorted, into OUT. */
static const char *two(const char *x, const char *y, char *out, size_t n) {
  bool xf = strcmp(x, y) < 0;
  (void)snprintf(out, n, "%s %s", xf ? x : y, xf ? y : x);
  return out;
}

/* The record of ID in `ls --json` (new), or NULL. */
static json_t *row(const char *id) {
  json_t *a = ls(NULL), *v, *found = NULL;
  size_t i;
  json_array_foreach(a, i, v) {
    if (strcmp(json_string_value(json_object_get(v, "id")), id) == 0)
      found = json_incref(v);
  }
  json_decref(a);
  return found;
}

static const char *status_of(const char *id) {
  static char s[32];
  json_t *r = row(id);
  cr_assert_not_null(r, "%s is not listed", id);
  (void)snprintf(s, sizeof(s), "%s",
                 json_string_value(json_object_get(r, "status")));
  json_decref(r);
  return s;
}

/* Waits up to MS for ID's status to become WANT. */
static bool status_becomes(const char *id, const char *want, unsigned ms) {
  for (unsigned w = 0; w <= ms; w += 250) {
    if (strcmp(status_of(id), want) == 0)
      return true;
    struct timespec ts = {0, 250 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return false;
}

Test(sandbox_meta, names_and_labels_name_and_select_sandboxes) {
  char a[16], b[16], c[16];
  create((const char *const[]){"--name", "web", "--label", "env=dev", "--label",
                               "team=x", NULL},
         a, sizeof(a));
  create(
      (const char *const[]){"--name", "worker.1", "--label", "env=prod", NULL},
      b, sizeof(b));
  create(NULL, c, sizeof(c));
  /* Every command that takes an id takes the name. */
  char *out = ok(0, (const char *const[]){"exec", "web", "--", "sh", "-c",
                                          "echo hi > f.txt; cat f.txt", NULL});
  cr_expect_str_eq(out, "hi\n");
  free(out);
  out = ok(0, (const char *const[]){"info", "web", NULL});
  cr_expect(strstr(out, "name:        web\n") && strstr(out, a), "%s", out);
  cr_expect(strstr(out, "label:       env=dev\n") &&
                strstr(out, "label:       team=x\n"),
            "%s", out);
  free(out);
  out = ok(0, (const char *const[]){"info", "--json", "worker.1", NULL});
  json_t *j = json_loads(out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "id")), b);
  cr_expect_str_eq(json_string_value(json_object_get(j, "name")), "worker.1");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_object_get(j, "labels"), "env")),
      "prod");
  json_decref(j);
  free(out);
  char dst[128];
  (void)snprintf(dst, sizeof(dst), "%s/f.txt", dir);
  free(ok(0, (const char *const[]){"cp", "web:f.txt", dst, NULL}));
  cr_expect_eq(access(dst, F_OK), 0);
  /* ls: the names in the table, and docker's filters. */
  out = ok(0, (const char *const[]){"ls", NULL});
  cr_expect(strstr(out, "NAME") && strstr(out, "web") &&
                strstr(out, "worker.1"),
            "%s", out);
  free(out);
  char want[64];
  two(a, b, want, sizeof(want));
  cr_expect_str_eq(ids(ls((const char *const[]){"label=env", NULL})), want);
  cr_expect_str_eq(ids(ls((const char *const[]){"label=env=dev", NULL})), a);
  cr_expect_str_eq(
      ids(ls((const char *const[]){"label=env", "label=team", NULL})), a,
      "every label must match");
  cr_expect_str_eq(ids(ls((const char *const[]){"name=work", NULL})), b);
  cr_expect_str_eq(
      ids(ls((const char *const[]){"name=web", "name=worker", NULL})), want,
      "one key's values are alternatives");
  cr_expect_str_eq(ids(ls((const char *const[]){"label=nope", NULL})), "");
  /* stop, start and rm by name. */
  free(ok(0, (const char *const[]){"stop", "worker.1", NULL}));
  cr_expect_str_eq(ids(ls((const char *const[]){"status=stopped", NULL})), b);
  two(a, c, want, sizeof(want));
  cr_expect_str_eq(ids(ls((const char *const[]){"status=running", NULL})),
                   want);
  free(ok(0, (const char *const[]){"start", "worker.1", NULL}));
  /* The name and labels outlive a stop and a start (the record is
   * rewritten then). */
  json_t *r = row(b);
  cr_expect_str_eq(json_string_value(json_object_get(r, "name")), "worker.1");
  cr_expect_str_eq(json_string_value(json_object_get(r, "status")), "running");
  json_decref(r);
  free(ok(0, (const char *const[]){"rm", "worker.1", NULL}));
  cr_expect_null(row(b));
  /* A name that was used is free again once its sandbox is gone. */
  create((const char *const[]){"--name", "worker.1", NULL}, b, sizeof(b));
}

Test(sandbox_meta, bad_names_labels_durations_and_filters_are_refused) {
  char a[16];
  create((const char *const[]){"--name", "taken", NULL}, a, sizeof(a));
  static const struct {
    const char *args[8];
    int status;
    const char *want;
  } cases[] = {
      {{"create", "--name", "taken", NULL},
       1,
       "the name \"taken\" is already used by sandbox"},
      {{"create", "--name", "bad name", NULL}, 2, "invalid name \"bad name\""},
      {{"create", "--name", "-x", NULL}, 2, "invalid name \"-x\""},
      {{"create", "--name", "abcdef012345", NULL},
       2,
       "it looks like a sandbox id"},
      {{"create", "--label", "=v", NULL}, 2, "invalid label \"=v\""},
      {{"create", "--label", "a b=v", NULL}, 2, "invalid label"},
      {{"create", "--label", "sbx.session=v", NULL},
       2,
       "label \"sbx.session\" is reserved"},
      {{"create", "--label", "k=1", "--label", "k=2", NULL},
       2,
       "label \"k\" is given twice"},
      {{"create", "--ttl", "0", NULL}, 2, "--ttl: invalid duration \"0\""},
      {{"create", "--ttl", "5x", NULL}, 2, "invalid duration \"5x\""},
      {{"create", "--idle-timeout", "1h30", NULL},
       2,
       "--idle-timeout: invalid duration \"1h30\""},
      {{"create", "--idle-timeout", "400d", NULL}, 2, "invalid duration"},
      {{"ls", "--filter", "color=red", NULL},
       2,
       "invalid filter \"color=red\""},
      {{"ls", "--filter", "status=paused", NULL},
       2,
       "a status is running, stopped or expired"},
      {{"ls", "--filter", "label", NULL}, 2, "invalid filter"},
      {{"prune", "--filter", "bogus=1", NULL}, 2, "invalid filter"},
      {{"prune", "extra", NULL}, 2, "unexpected argument \"extra\""},
      {{"stats", NULL}, 2, "expected ID"},
      {{"stats", "nosuchname", NULL}, 1, "no sandbox \"nosuchname\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out o;
    sbx(&o, cases[i].args);
    cr_expect_eq(o.status, cases[i].status, "case %zu: status %d: %s", i,
                 o.status, o.err);
    cr_expect(strstr(o.err, cases[i].want), "case %zu: want \"%s\" in: %s", i,
              cases[i].want, o.err);
    sbx_run_free(&o);
  }
  /* --help tells of each. */
  static const struct {
    const char *sub, *want[3];
  } helps[] = {
      {"create", {"--name NAME", "--label KEY=VALUE", "--idle-timeout"}},
      {"ls", {"--filter KEY=VALUE", "status=S", "label=KEY=VAL"}},
      {"stats", {"usage: sbx sandbox stats", "cgroup", "/proc"}},
      {"prune", {"--force", "stopped and expired", "y or yes"}},
  };
  for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++) {
    char *h = ok(0, (const char *const[]){helps[i].sub, "--help", NULL});
    for (int k = 0; k < 3; k++)
      cr_expect(strstr(h, helps[i].want[k]), "%s --help lacks \"%s\": %s",
                helps[i].sub, helps[i].want[k], h);
    free(h);
  }
  char *h = ok(0, (const char *const[]){"--help", NULL});
  cr_expect(strstr(h, "  stats ID") && strstr(h, "  prune [--filter F]"), "%s",
            h);
  free(h);
  /* Nothing refused was made. */
  cr_expect_str_eq(ids(ls(NULL)), a);
  /* Under --json the refusal is JSON on stdout. */
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"create", "--json", "--name", "taken", NULL});
  json_t *j = json_loads(o.out, 0, NULL);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_object_get(j, "error"), "code")),
      "already_exists", "%s", o.out);
  json_decref(j);
  sbx_run_free(&o);
}

/* The sandboxd log of ID says why it stopped. */
static bool log_says(const char *id, const char *want) {
  char p[256], buf[8192] = "";
  (void)snprintf(p, sizeof(p), "%s/sandboxes/%s.log", state, id);
  FILE *f = fopen(p, "r");
  if (!f)
    return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strstr(buf, want) != NULL;
}

Test(sandbox_meta, time_to_live_and_idle_timeout_stop_it_without_anyone) {
  char t[16], i[16];
  create((const char *const[]){"--ttl", "2s", NULL}, t, sizeof(t));
  create((const char *const[]){"--idle-timeout", "2", NULL}, i, sizeof(i));
  json_t *r = row(t);
  cr_expect_eq(json_integer_value(json_object_get(r, "ttl_seconds")), 2);
  cr_expect_leq(json_integer_value(json_object_get(r, "expires_in_seconds")),
                3);
  cr_expect(json_is_string(json_object_get(r, "expires_at")));
  json_decref(r);
  char *out = ok(0, (const char *const[]){"ls", NULL});
  cr_expect(strstr(out, "EXPIRES") && strstr(out, "in "), "%s", out);
  free(out);
  /* A command now and then keeps the idle one running past its timeout. */
  for (int k = 0; k < 4; k++) {
    free(ok(0, (const char *const[]){"exec", i, "--", "true", NULL}));
    struct timespec ts = {0, 700 * 1000000L};
    nanosleep(&ts, NULL);
  }
  cr_expect_str_eq(status_of(i), "running");
  /* The time to live is over: expired, and it cannot be started. */
  cr_expect(status_becomes(t, "expired", 3000), "%s", status_of(t));
  cr_expect(log_says(t, "stopping: its time to live has ended"));
  out = ok(0, (const char *const[]){"ls", NULL});
  cr_expect(strstr(out, "expired"), "%s", out);
  free(out);
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"start", t, NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "has expired"), "%s", o.err);
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", t, "--", "true", NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "is stopped"), "%s", o.err);
  sbx_run_free(&o);
  /* ls, info and stats do not count as activity: it goes idle while
   * they look at it. */
  cr_expect(status_becomes(i, "stopped", 4000), "%s", status_of(i));
  cr_expect(log_says(i, "stopping: idle for"));
  /* An idle stop is an ordinary stop: start it again. */
  free(ok(0, (const char *const[]){"start", i, NULL}));
  cr_expect_str_eq(status_of(i), "running");
  out = ok(0, (const char *const[]){"info", i, NULL});
  cr_expect(strstr(out, "idle stop:   after 2s without a request"), "%s", out);
  free(out);
}

Test(sandbox_meta, stats_of_a_running_sandbox) {
  char a[16];
  create((const char *const[]){"--name", "s", NULL}, a, sizeof(a));
  free(ok(0, (const char *const[]){"exec", "s", "--", "sh", "-c",
                                   "head -c 300000 /dev/zero > big; "
                                   "nohup sleep 30 >/dev/null 2>&1 &",
                                   NULL}));
  char *out = ok(0, (const char *const[]){"stats", "--json", "s", NULL});
  json_t *j = json_loads(out, 0, NULL);
  cr_assert_not_null(j, "%s", out);
  cr_expect_str_eq(json_string_value(json_object_get(j, "id")), a);
  const char *src = json_string_value(json_object_get(j, "source"));
  cr_expect(src && (!strcmp(src, "proc") || !strcmp(src, "cgroup")), "%s", out);
  cr_expect_geq(json_integer_value(json_object_get(j, "pids")), 2, "%s", out);
  cr_expect_gt(json_integer_value(json_object_get(j, "memory_bytes")), 0);
  cr_expect_geq(json_integer_value(json_object_get(j, "disk_bytes")), 290000,
                "%s", out);
  cr_expect(json_is_integer(json_object_get(j, "cpu_usec")));
  cr_expect(json_object_get(j, "memory_limit_bytes") &&
                json_object_get(j, "pids_limit"),
            "a limit is a number or null: %s", out);
  json_decref(j);
  free(out);
  out = ok(0, (const char *const[]){"stats", "s", NULL});
  cr_expect(strstr(out, "cpu:") && strstr(out, "memory:") &&
                strstr(out, "pids:") && strstr(out, "disk:"),
            "%s", out);
  free(out);
  free(ok(0, (const char *const[]){"stop", "s", NULL}));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"stats", "s", NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "is stopped"), "%s", o.err);
  sbx_run_free(&o);
}

/* Runs "sbx sandbox --state-dir STATE ARGS" with INPUT on stdin: its exit
 * status; stdout in OUT (new). */
static int piped(const char *input, const char *args, char **out) {
  test_write_file(dir, "in.txt", input);
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "timeout 60 %s sandbox --state-dir %s %s < %s/in.txt "
                 "> %s/out.txt 2>/dev/null",
                 test_sbx_path(), state, args, dir, dir);
  int st = system(cmd);
  char p[160];
  (void)snprintf(p, sizeof(p), "%s/out.txt", dir);
  FILE *f = fopen(p, "r");
  *out = calloc(1, 4096);
  if (f) {
    (void)!fread(*out, 1, 4095, f);
    fclose(f);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(sandbox_meta, prune_asks_then_removes_stopped_and_expired_ones) {
  char run[16], stop1[16], stop2[16], exp[16];
  create(NULL, run, sizeof(run));
  create((const char *const[]){"--label", "keep=no", NULL}, stop1,
         sizeof(stop1));
  create((const char *const[]){"--name", "other", NULL}, stop2, sizeof(stop2));
  create((const char *const[]){"--ttl", "1s", NULL}, exp, sizeof(exp));
  free(ok(0, (const char *const[]){"stop", stop1, NULL}));
  free(ok(0, (const char *const[]){"stop", stop2, NULL}));
  cr_assert(status_becomes(exp, "expired", 3000));
  /* No "y": nothing removed, exit 1 (stdin at its end is no too). */
  char *out = NULL;
  cr_expect_eq(piped("n\n", "prune", &out), 1);
  cr_expect_str_eq(out, "");
  free(out);
  cr_expect_eq(piped("", "prune", &out), 1);
  free(out);
  json_t *all = ls(NULL);
  cr_expect_eq(json_array_size(all), 4);
  json_decref(all);
  /* "y" with a filter: only the labelled one. */
  cr_expect_eq(piped("y\n", "prune --filter label=keep", &out), 0);
  char want[32];
  (void)snprintf(want, sizeof(want), "%s\n", stop1);
  cr_expect_str_eq(out, want);
  free(out);
  /* --force asks nothing; the running one stays. */
  out = ok(0, (const char *const[]){"prune", "--force", "--json", NULL});
  json_t *j = json_loads(out, 0, NULL);
  cr_expect_eq(json_array_size(j), 2, "%s", out);
  json_t *first = json_array_get(j, 0), *second = json_array_get(j, 1);
  if (strcmp(json_string_value(json_object_get(first, "id")), stop2)) {
    json_t *x = first; /* records of one second are listed by id */
    first = second;
    second = x;
  }
  cr_expect_str_eq(json_string_value(json_object_get(first, "id")), stop2);
  cr_expect_str_eq(json_string_value(json_object_get(first, "name")), "other");
  cr_expect_str_eq(json_string_value(json_object_get(first, "status")),
                   "stopped");
  cr_expect_str_eq(json_string_value(json_object_get(second, "id")), exp);
  cr_expect_str_eq(json_string_value(json_object_get(second, "status")),
                   "expired");
  json_decref(j);
  free(out);
  cr_expect_str_eq(ids(ls(NULL)), run);
  /* Nothing left to prune: no question, nothing printed. */
  out = ok(0, (const char *const[]){"prune", NULL});
  cr_expect_str_eq(out, "");
  free(out);
}

/* The path of the record of the sandbox ID (a prefix of its file's name)
 * into PATH. */
static void record_path(const char *id, char *path, size_t n) {
  char dirp[160];
  (void)snprintf(dirp, sizeof(dirp), "%s/sandboxes", state);
  DIR *d = opendir(dirp);
  cr_assert_not_null(d, "%s", dirp);
  path[0] = '\0';
  struct dirent *de;
  while ((de = readdir(d)))
    if (strncmp(de->d_name, id, strlen(id)) == 0 && strstr(de->d_name, ".json"))
      (void)snprintf(path, n, "%s/%s", dirp, de->d_name);
  closedir(d);
  cr_assert(path[0], "no record of %s in %s", id, dirp);
}

/* A stopped sandbox whose record's pid now names another process, with no
 * start time to tell them apart (as a record from before the start times
 * were kept): nothing takes that process for sandboxd, and rm leaves it
 * alone (it was killed before, as a sandboxd that would not stop). */
Test(sandbox_meta, a_pid_used_again_is_never_taken_for_sandboxd) {
  char id[16];
  create(NULL, id, sizeof(id));
  free(ok(0, (const char *const[]){"stop", id, NULL}));
  pid_t other = fork();
  cr_assert_geq(other, 0);
  if (other == 0) {
    execl("/bin/sleep", "sleep", "120", (char *)NULL);
    _exit(127);
  }
  char rec[512];
  record_path(id, rec, sizeof(rec));
  json_t *j = json_load_file(rec, 0, NULL);
  cr_assert_not_null(j, "%s", rec);
  json_t *local = NULL;
  const char *key;
  json_t *v;
  json_object_foreach(j, key, v) {
    if (json_is_object(v) && json_object_get(v, "pid_start"))
      local = v;
  }
  cr_assert_not_null(local, "no pid_start in %s", rec);
  json_object_set_new(local, "pid", json_integer(other));
  json_object_set_new(local, "pid_start", json_integer(0));
  cr_assert_eq(json_dump_file(j, rec, 0), 0);
  json_decref(j);
  cr_expect_str_eq(status_of(id), "stopped");
  free(ok(0, (const char *const[]){"rm", id, NULL}));
  int st;
  cr_expect_eq(waitpid(other, &st, WNOHANG), 0,
               "rm signalled process %d, which is not its sandboxd",
               (int)other);
  (void)kill(other, SIGKILL);
  (void)waitpid(other, &st, 0);
}
