/* The operator's path through `sbx sandbox`: exec and shell ending as soon
 * as the command's output has, shell reading a script from a pipe, options
 * before or after the id, JSON errors under --json, and cp with any file
 * name, many times in a row. The real sbx and a detached sandboxd per test;
 * each test has its own state directory and TMPDIR. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[128];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-ops-test-XXXXXX");
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

TestSuite(sandbox_ops, .init = setup, .fini = teardown, .timeout = 180);

/* Runs "sbx sandbox --state-dir STATE ARGV...". */
static void sbx(struct sbx_run_out *o, const char *const *argv) {
  sbx_sandbox_run(o, state, argv);
}

static void create(char *id, size_t n) {
  char *line = sbx_sandbox_line(state, (const char *const[]){"create", NULL});
  (void)snprintf(id, n, "%s", line);
  free(line);
  cr_assert_eq(strlen(id), 12, "id: \"%s\"", id);
}

/* The whole of the file PATH (new; "" when missing). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "re");
  if (!f)
    return strdup("");
  char *buf = calloc(1, 1 << 16);
  cr_assert_not_null(buf);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Runs the shell command line "sbx sandbox --state-dir STATE " ARGS with
 * stdin from INPUT (a file written with that text), stdout and stderr
 * kept in *OUT and *ERR (new); its exit status. */
static int sbx_piped(const char *input, const char *args, char **out,
                     char **err) {
  test_write_file(dir, "in.txt", input);
  char cmd[2048];
  (void)snprintf(cmd, sizeof(cmd),
                 "timeout 60 %s sandbox --state-dir %s %s < %s/in.txt "
                 "> %s/out.txt 2> %s/err.txt",
                 test_sbx_path(), state, args, dir, dir, dir);
  int st = system(cmd);
  char p[160];
  (void)snprintf(p, sizeof(p), "%s/out.txt", dir);
  *out = slurp(p);
  (void)snprintf(p, sizeof(p), "%s/err.txt", dir);
  *err = slurp(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* How long `exec -- true` takes is bench/bench_cli_exec's to measure;
 * here, what it returns. */
Test(sandbox_ops, exec_returns_all_output_and_the_status) {
  char id[32];
  create(id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "true", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "");
  sbx_run_free(&o);
  /* A command that outlives the start's wait streams through the readers:
   * all of both streams, and its status. */
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c",
                                "echo early; sleep 0.3; echo late >&2; "
                                "seq 200000 | tail -n 1; exit 6",
                                NULL});
  cr_expect_eq(o.status, 6, "%s", o.err);
  cr_expect_str_eq(o.out, "early\n200000\n");
  cr_expect_str_eq(o.err, "late\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", "--json", id, "--", "sh", "-c",
                                "sleep 0.2; seq 3; echo e >&2", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  json_t *j = json_loads(o.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "stdout")),
                   "1\n2\n3\n");
  cr_expect_str_eq(json_string_value(json_object_get(j, "stderr")), "e\n");
  json_decref(j);
  sbx_run_free(&o);
  /* -i: our stdin reaches the command and its end closes the command's. */
  char *out = NULL, *err = NULL;
  char args[128];
  (void)snprintf(args, sizeof(args), "exec -i %s -- sh -c 'cat; echo end'", id);
  cr_expect_eq(sbx_piped("one\ntwo\n", args, &out, &err), 0, "%s", err);
  cr_expect_str_eq(out, "one\ntwo\nend\n");
  free(out);
  free(err);
}

/* An attached exec whose readers are slower than the command (here pipes
 * that nobody reads for a while) gets every byte of both streams: the
 * command waits on a full pipe rather than lose output beyond the
 * retention (a gap's note would change stderr's sum too). */
Test(sandbox_ops, exec_gives_a_slow_reader_every_byte) {
  char id[32];
  create(id, sizeof(id));
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "{ timeout 120 %s sandbox --state-dir %s exec %s -- sh -c "
                 "'seq 1 3000000; seq 1 1500000 >&2' 2>&1 1>&3 3>&- | "
                 "(sleep 1; md5sum) > %s/err.txt; } 3>&1 | "
                 "(sleep 2; md5sum) > %s/out.txt; "
                 "seq 1 3000000 | md5sum > %s/want-out.txt; "
                 "seq 1 1500000 | md5sum > %s/want-err.txt",
                 test_sbx_path(), state, id, dir, dir, dir, dir);
  cr_assert_eq(system(cmd), 0);
  const char *names[] = {"out", "want-out", "err", "want-err"};
  char *text[4];
  for (int i = 0; i < 4; i++) {
    char p[160];
    (void)snprintf(p, sizeof(p), "%s/%s.txt", dir, names[i]);
    text[i] = slurp(p);
  }
  cr_expect_str_eq(text[0], text[1], "stdout whole");
  cr_expect_str_eq(text[2], text[3], "stderr whole");
  for (int i = 0; i < 4; i++)
    free(text[i]);
}

/* Waits at most 10 s for PID: its status as a shell gives it, or -1. */
static int wait_status(pid_t pid) {
  for (int i = 0; i < 200; i++) {
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  (void)waitpid(pid, NULL, 0);
  return -1;
}

Test(sandbox_ops, exec_passes_our_signals_on_and_ends_with_the_command) {
  char id[32];
  create(id, sizeof(id));
  char out[160];
  (void)snprintf(out, sizeof(out), "%s/sig.out", dir);
  /* The command says which signal it got and exits 7: sbx ends with that
   * status, not killed itself by a signal that no thread of it waited
   * for. */
  for (int round = 0; round < 2; round++) {
    int sig = round ? SIGHUP : SIGTERM;
    const char *script = round ? "trap 'echo got-hup; exit 7' HUP; "
                                 "touch started; while :; do sleep 0.1; done"
                               : "trap 'echo got-term; exit 7' TERM; "
                                 "touch started; while :; do sleep 0.1; done";
    struct sbx_run_out o;
    sbx(&o,
        (const char *const[]){"exec", id, "--", "rm", "-f", "started", NULL});
    sbx_run_free(&o);
    char cmd[1024];
    (void)snprintf(cmd, sizeof(cmd),
                   "%s sandbox --state-dir %s exec %s -- sh -c \"%s\" > %s "
                   "2>&1 & echo $!; wait $!; echo rc=$? >> %s",
                   test_sbx_path(), state, id, script, out, out);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int pid = 0;
    cr_assert_eq(fscanf(p, "%d", &pid), 1);
    bool started = false;
    for (int i = 0; i < 200 && !started; i++) {
      sbx(&o, (const char *const[]){"exec", id, "--", "test", "-e", "started",
                                    NULL});
      started = o.status == 0;
      sbx_run_free(&o);
    }
    cr_assert(started, "the command did not start");
    cr_assert_eq(kill(pid, sig), 0);
    pclose(p); /* the shell waits for sbx and appends its status */
    char *text = slurp(out);
    /* (The group's sleep, killed too, may be reported by sh.) */
    cr_expect(strstr(text, round ? "got-hup\n" : "got-term\n"), "%s", text);
    cr_expect(strstr(text, "\nrc=7\n"), "%s", text);
    free(text);
  }
}

Test(sandbox_ops, shell_reads_a_script_from_a_pipe_and_ends_at_its_end) {
  char id[32];
  create(id, sizeof(id));
  char *out = NULL, *err = NULL;
  char args[128];
  (void)snprintf(args, sizeof(args), "shell %s", id);
  int st = sbx_piped("pwd\necho oops >&2\nexit 3\n", args, &out, &err);
  cr_expect_eq(st, 3, "the shell's status: %d (%s)", st, err);
  cr_expect_str_eq(out, "/workspace\n");
  cr_expect_str_eq(err, "oops\n");
  free(out);
  free(err);
  /* Options after the id; an input without exit ends the shell too. */
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "mkdir", "sub", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  (void)snprintf(args, sizeof(args), "shell %s -w sub", id);
  st = sbx_piped("pwd\n", args, &out, &err);
  cr_expect_eq(st, 0, "%s", err);
  cr_expect_str_eq(out, "/workspace/sub\n");
  free(out);
  free(err);
}

Test(sandbox_ops, options_go_before_or_after_the_id) {
  char id[32];
  create(id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"exec", id, "--", "mkdir", "-p", "sub", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  /* The order exec --help shows. */
  sbx(&o, (const char *const[]){"exec", id, "-w", "sub", "-e", "X=after", "--",
                                "sh", "-c", "pwd; echo $X", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "/workspace/sub\nafter\n");
  sbx_run_free(&o);
  /* Before and after at once, and without "--": the first word that is
   * no option is the command, whose own options stay its own. */
  sbx(&o, (const char *const[]){"exec", "-e", "X=1", id, "--workdir=sub", "sh",
                                "-c", "echo $X; ls -d -- .", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "1\n.\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"exec", id, "ls", "-d", "sub", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "sub\n");
  sbx_run_free(&o);
  /* --json after the id, on info and exec. */
  sbx(&o, (const char *const[]){"info", id, "--json", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  json_t *j = json_loads(o.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "id")), id);
  json_decref(j);
  sbx_run_free(&o);
  sbx(&o,
      (const char *const[]){"exec", id, "--json", "--", "echo", "hi", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  j = json_loads(o.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "stdout")), "hi\n");
  json_decref(j);
  sbx_run_free(&o);
  /* The error paths of the new orders. */
  static const struct {
    const char *args[8];
    const char *want;
  } bad[] = {
      {{"exec", "ID", "-w", NULL}, "requires an argument -- 'w'"},
      {{"exec", "ID", "--bogus", "--", "true", NULL}, "unknown option"},
      {{"exec", "ID", "-e", "novalue", "--", "true", NULL},
       "--env \"novalue\": expected NAME=VALUE"},
      {{"exec", "ID", "-w", "sub", "--", NULL}, "expected a command"},
      {{"exec", "ID", "--timeout", "0", "--", "true", NULL},
       "--timeout \"0\": milliseconds"},
      {{"shell", "ID", "extra", NULL}, "expected ID"},
      {{"info", "ID", "ID", NULL}, "expected ID"},
      {{"apply-patch", "ID", "--dir", NULL}, "'--dir' requires an argument"},
      {{"apply-patch", "ID", "ID", NULL}, "expected ID"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *args[8];
    size_t n = 0;
    for (; bad[i].args[n]; n++)
      args[n] = strcmp(bad[i].args[n], "ID") == 0 ? id : bad[i].args[n];
    args[n] = NULL;
    sbx(&o, args);
    cr_expect_eq(o.status, 2, "case %zu: status %d: %s", i, o.status, o.err);
    cr_expect(strstr(o.err, bad[i].want), "case %zu: want \"%s\" in: %s", i,
              bad[i].want, o.err);
    sbx_run_free(&o);
  }
}

Test(sandbox_ops, help_lists_every_subcommand) {
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"--help", NULL});
  cr_assert_eq(o.status, 0);
  static const char *const subs[] = {
      "  create ",      "  ls ", "  info ", "  exec ",
      "  shell ",       "  cp ", "  port",  "  stop ",
      "  start",        "  rm ", "  save ", "  resume ",
      "  apply-patch ", "  ps ", "  logs ", "  kill "};
  for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
    cr_expect(strstr(o.out, subs[i]), "\"%s\" missing from: %s", subs[i],
              o.out);
  sbx_run_free(&o);
  static const char *const own[] = {"save", "resume"};
  for (size_t i = 0; i < 2; i++) {
    sbx(&o, (const char *const[]){own[i], "--help", NULL});
    cr_expect_eq(o.status, 0);
    cr_expect(strstr(o.out, "usage: sbx sandbox "), "%s", o.out);
    sbx_run_free(&o);
  }
}

/* Checks that O, run with --json, failed with STATUS and printed only
 * {"error": {"code": CODE, "message": ...WANT...}} on stdout. */
static void expect_json_error(struct sbx_run_out *o, int status,
                              const char *code, const char *want) {
  cr_expect_eq(o->status, status, "status %d: %s %s", o->status, o->out,
               o->err);
  json_error_t je;
  json_t *j = json_loads(o->out, 0, &je);
  cr_assert_not_null(j, "not JSON (%s): \"%s\"", je.text, o->out);
  json_t *e = json_object_get(j, "error");
  cr_expect_eq(json_object_size(j), 1, "%s", o->out);
  cr_expect_str_eq(json_string_value(json_object_get(e, "code")), code);
  const char *m = json_string_value(json_object_get(e, "message"));
  cr_expect(m && strstr(m, want), "want \"%s\" in %s", want, o->out);
  json_decref(j);
}

Test(sandbox_ops, errors_are_json_under_json) {
  static const struct {
    const char *args[8];
    int status;
    const char *code, *want;
  } cases[] = {
      {{"--json", "info", "abcdef123456", NULL},
       1,
       "not_found",
       "no sandbox \"abcdef123456\""},
      {{"info", "abcdef123456", "--json", NULL}, 1, "not_found", "no sandbox"},
      {{"exec", "--json", "abcdef123456", NULL},
       2,
       "usage",
       "expected a command"},
      {{"--json", "bogus", NULL}, 2, "usage", "unknown subcommand \"bogus\""},
      {{"--json", NULL}, 2, "usage", "expected a subcommand"},
      {{"cp", "--json", "a", "b", NULL}, 2, "usage", "exactly one of SRC"},
      {{"save", "abcdef123456", "--json", NULL}, 1, "not_found", "no sandbox"},
      {{"resume", "--json", "/nonexistent/state.json", NULL},
       1,
       "not_found",
       "/nonexistent/state.json"},
      {{"shell", "--json", "abcdef123456", NULL},
       2,
       "usage",
       "shell is interactive"},
      {{"create", "--json", "--expose", "0", NULL},
       2,
       "usage",
       "Exposed ports must be"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct sbx_run_out o;
    sbx(&o, cases[i].args);
    cr_expect(!strstr(o.err, cases[i].want), "case %zu: said twice: %s", i,
              o.err);
    expect_json_error(&o, cases[i].status, cases[i].code, cases[i].want);
    sbx_run_free(&o);
  }
  /* Without --json, the same error stays text on stderr. */
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"info", "abcdef123456", NULL});
  cr_expect_eq(o.status, 1);
  cr_expect_str_eq(o.out, "");
  cr_expect(strstr(o.err, "no sandbox \"abcdef123456\""), "%s", o.err);
  sbx_run_free(&o);
}

Test(sandbox_ops, cp_copies_any_name_both_ways_and_many_times) {
  char id[32];
  create(id, sizeof(id));
  /* Names the filesystem allows but the locale (C here, as sbx runs
   * without setlocale) cannot translate: a byte 0xff, and UTF-8. */
  static const char bad[] = "a\xff"
                            "b";
  static const char cafe[] = "caf\xc3\xa9";
  char src[128], p[256];
  (void)snprintf(src, sizeof(src), "%s/src", dir);
  cr_assert_eq(mkdir(src, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/%s", src, bad);
  test_write_file(src, bad, "bytes\n");
  test_write_file(src, cafe, "utf8\n");
  char remote[128];
  (void)snprintf(remote, sizeof(remote), "%s:in", id);
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"cp", src, remote, NULL});
  cr_assert_eq(o.status, 0, "cp in: %s", o.err);
  sbx_run_free(&o);
  char script[128];
  (void)snprintf(script, sizeof(script), "cat in/%s in/%s", bad, cafe);
  sbx(&o, (const char *const[]){"exec", id, "--", "sh", "-c", script, NULL});
  cr_expect_str_eq(o.out, "bytes\nutf8\n", "%s", o.err);
  sbx_run_free(&o);
  /* Out again, the directory and one file by its name. */
  char back[128];
  (void)snprintf(back, sizeof(back), "%s/back", dir);
  sbx(&o, (const char *const[]){"cp", remote, back, NULL});
  cr_assert_eq(o.status, 0, "cp out: %s", o.err);
  sbx_run_free(&o);
  char *text;
  (void)snprintf(p, sizeof(p), "%s/%s", back, bad);
  text = slurp(p);
  cr_expect_str_eq(text, "bytes\n", "%s", p);
  free(text);
  (void)snprintf(p, sizeof(p), "%s/%s", back, cafe);
  text = slurp(p);
  cr_expect_str_eq(text, "utf8\n");
  free(text);
  (void)snprintf(remote, sizeof(remote), "%s:in/%s", id, bad);
  char one[128];
  (void)snprintf(one, sizeof(one), "%s/one\xfe", dir);
  sbx(&o, (const char *const[]){"cp", remote, one, NULL});
  cr_assert_eq(o.status, 0, "cp out one: %s", o.err);
  sbx_run_free(&o);
  text = slurp(one);
  cr_expect_str_eq(text, "bytes\n");
  free(text);
  (void)snprintf(remote, sizeof(remote), "%s:single\xfe", id);
  sbx(&o, (const char *const[]){"cp", "--json", one, remote, NULL});
  cr_assert_eq(o.status, 0, "cp in one: %s %s", o.out, o.err);
  json_t *j = json_loads(o.out, 0, NULL);
  cr_expect_eq(json_integer_value(json_object_get(j, "files")), 1, "%s", o.out);
  json_decref(j);
  sbx_run_free(&o);
  /* Forty copies in a row, in and out: each frees its transfer at once
   * (sandboxd has 16). */
  sbx(&o, (const char *const[]){"exec", id, "--", "mkdir", "many", NULL});
  cr_assert_eq(o.status, 0, "%s", o.err);
  sbx_run_free(&o);
  (void)snprintf(p, sizeof(p), "%s/%s", src, cafe);
  for (int i = 0; i < 40; i++) {
    (void)snprintf(remote, sizeof(remote), "%s:many/%d", id, i);
    sbx(&o, (const char *const[]){"cp", p, remote, NULL});
    cr_assert_eq(o.status, 0, "copy %d in: %s", i, o.err);
    sbx_run_free(&o);
  }
  for (int i = 0; i < 40; i++) {
    char out[160];
    (void)snprintf(remote, sizeof(remote), "%s:many", id);
    (void)snprintf(out, sizeof(out), "%s/many%d", dir, i);
    sbx(&o, (const char *const[]){"cp", remote, out, NULL});
    cr_assert_eq(o.status, 0, "copy %d out: %s", i, o.err);
    sbx_run_free(&o);
  }
  (void)snprintf(p, sizeof(p), "%s/many39/39", dir);
  text = slurp(p);
  cr_expect_str_eq(text, "utf8\n");
  free(text);
}

/* The exec id of the first process "sbx sandbox ps ID --json" lists whose
 * command holds WHAT, waiting for it at most 10 s; NULL when none. */
static char *find_exec(const char *id, const char *what) {
  for (int i = 0; i < 200; i++) {
    struct sbx_run_out o;
    sbx(&o, (const char *const[]){"ps", id, "--json", NULL});
    cr_assert_eq(o.status, 0, "%s", o.err);
    json_t *arr = json_loads(o.out, 0, NULL);
    cr_assert(json_is_array(arr), "%s", o.out);
    size_t k;
    json_t *x;
    char *found = NULL;
    json_array_foreach(arr, k, x) {
      const char *cmd = json_string_value(json_object_get(x, "command"));
      if (!found && cmd && strstr(cmd, what))
        found = strdup(json_string_value(json_object_get(x, "exec_id")));
    }
    json_decref(arr);
    sbx_run_free(&o);
    if (found)
      return found;
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

Test(sandbox_ops, ps_logs_and_kill) {
  char id[32];
  create(id, sizeof(id));
  struct sbx_run_out o;
  sbx(&o, (const char *const[]){"ps", id, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "EXEC                  PID      STATUS          "
                          "STARTED               COMMAND\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"logs", id, NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "the sandbox keeps no process"), "%s", o.err);
  sbx_run_free(&o);

  /* A command whose sbx is killed stays in sandboxd, runs to its end and
   * is kept with its output. */
  pid_t pid = sbx_spawn(
      NULL, NULL, 0,
      (const char *const[]){
          "sandbox", "--state-dir", state, "exec", id, "--", "sh", "-c",
          "echo first; sleep 0.5; echo second >&2; exit 3", NULL});
  _cleanup_free_ char *done = find_exec(id, "echo first");
  cr_assert_not_null(done, "the command is not listed");
  cr_assert_eq(kill(pid, SIGKILL), 0);
  (void)wait_status(pid);
  /* -f: until it has ended. */
  sbx(&o, (const char *const[]){"logs", "-f", id, done, NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_str_eq(o.out, "first\n");
  cr_expect_str_eq(o.err, "second\n");
  sbx_run_free(&o);
  sbx(&o, (const char *const[]){"ps", id, NULL});
  cr_expect(strstr(o.out, "exited 3"), "%s", o.out);
  sbx_run_free(&o);
  /* Without EXEC: the one started last; --json. */
  sbx(&o, (const char *const[]){"logs", id, "--json", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  json_t *j = json_loads(o.out, 0, NULL);
  cr_expect_str_eq(json_string_value(json_object_get(j, "exec_id")), done);
  cr_expect_str_eq(json_string_value(json_object_get(j, "stdout")), "first\n");
  cr_expect_str_eq(json_string_value(json_object_get(j, "stderr")), "second\n");
  json_decref(j);
  sbx_run_free(&o);
  /* An ended process cannot be killed. */
  sbx(&o, (const char *const[]){"kill", id, done, NULL});
  cr_expect_eq(o.status, 1);
  cr_expect(strstr(o.err, "has exited"), "%s", o.err);
  sbx_run_free(&o);

  /* kill -s TERM reaches a running one: its attached exec ends with it. */
  pid = sbx_spawn(NULL, NULL, 0,
                  (const char *const[]){"sandbox", "--state-dir", state, "exec",
                                        id, "--", "sleep", "61", NULL});
  _cleanup_free_ char *running = find_exec(id, "sleep 61");
  cr_assert_not_null(running);
  sbx(&o, (const char *const[]){"kill", id, running, "-s", "TERM", NULL});
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect_eq(strncmp(o.out, running, strlen(running)), 0, "%s", o.out);
  sbx_run_free(&o);
  cr_expect_eq(wait_status(pid), 128 + SIGTERM);

  /* Error paths. */
  static const struct {
    const char *args[8];
    int status;
    const char *want;
  } bad[] = {
      {{"ps", NULL}, 2, "expected ID"},
      {{"ps", "ID", "extra", NULL}, 2, "expected ID"},
      {{"ps", "abcdef123456", NULL}, 1, "no sandbox"},
      {{"kill", "ID", NULL}, 2, "expected ID EXEC"},
      {{"kill", "ID", "x1", NULL}, 2, "EXEC \"x1\": expected an exec id"},
      {{"kill", "ID", "-5", NULL}, 2, "invalid option"},
      {{"kill", "ID", "1", "-s", "NOPE", NULL}, 2, "--signal \"NOPE\""},
      {{"kill", "ID", "1", "-s", "0", NULL}, 2, "--signal \"0\""},
      {{"kill", "ID", "99999", NULL}, 1, "exec 99999 not found"},
      {{"kill", "abcdef123456", "1", NULL}, 1, "no sandbox"},
      {{"logs", NULL}, 2, "expected ID [EXEC]"},
      {{"logs", "ID", "1", "2", NULL}, 2, "expected ID [EXEC]"},
      {{"logs", "ID", "one", NULL}, 2, "EXEC \"one\""},
      {{"logs", "ID", "99999", NULL}, 1, "exec 99999 not found"},
      {{"logs", "ID", "--bogus", NULL}, 2, "unknown option"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *args[8];
    size_t n = 0;
    for (; bad[i].args[n]; n++)
      args[n] = strcmp(bad[i].args[n], "ID") == 0 ? id : bad[i].args[n];
    args[n] = NULL;
    sbx(&o, args);
    cr_expect_eq(o.status, bad[i].status, "case %zu: status %d: %s", i,
                 o.status, o.err);
    cr_expect(strstr(o.err, bad[i].want), "case %zu: want \"%s\" in: %s", i,
              bad[i].want, o.err);
    sbx_run_free(&o);
  }
  /* Each has its --help. */
  static const char *const subs[] = {"ps", "logs", "kill"};
  for (size_t i = 0; i < 3; i++) {
    sbx(&o, (const char *const[]){subs[i], "--help", NULL});
    cr_expect_eq(o.status, 0);
    cr_expect(strstr(o.out, "usage: sbx sandbox "), "%s", o.out);
    sbx_run_free(&o);
  }
}
