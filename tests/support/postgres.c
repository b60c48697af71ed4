#include "tests/support/postgres.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Where Debian puts the server's programs when pg_config does not say. */
#define PG_BINDIR_DEBIAN "/usr/lib/postgresql/15/bin"

static bool has_server(const char *bindir) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/initdb", bindir);
  if (access(p, X_OK) != 0)
    return false;
  (void)snprintf(p, sizeof(p), "%s/postgres", bindir);
  return access(p, X_OK) == 0;
}

/* The directory of initdb and postgres: pg_config's, else Debian's. */
static bool find_bindir(char *out, size_t n) {
  FILE *f = popen("pg_config --bindir 2>/dev/null", "r");
  if (f) {
    bool got = fgets(out, (int)n, f) != NULL;
    (void)pclose(f);
    out[strcspn(out, "\n")] = '\0';
    if (got && has_server(out))
      return true;
  }
  (void)snprintf(out, n, "%s", PG_BINDIR_DEBIAN);
  return has_server(out);
}

static void print_log(const struct test_pg *pg) {
  char p[96];
  (void)snprintf(p, sizeof(p), "%s/log", pg->dir);
  FILE *f = fopen(p, "re");
  if (!f)
    return;
  char line[512];
  fprintf(stderr, "---- %s ----\n", p);
  while (fgets(line, sizeof(line), f))
    fputs(line, stderr);
  fclose(f);
}

/* Starts ARGV (argv[0] a path) as PW (NULL: ourselves), its output
 * appended to DIR/log; killed when this process dies. */
static pid_t spawn(const struct test_pg *pg, const struct passwd *pw,
                   char *const argv[]) {
  char p[96];
  (void)snprintf(p, sizeof(p), "%s/log", pg->dir);
  int log = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  cr_assert_geq(log, 0, "open %s: %s", p, strerror(errno));
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* The death signal after setuid, which clears it. */
    if (pw && (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 ||
               setuid(pw->pw_uid) < 0))
      _exit(126);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
      _exit(126);
    if (dup2(log, 1) < 0 || dup2(log, 2) < 0)
      _exit(126);
    execv(argv[0], argv);
    _exit(127);
  }
  close(log);
  return pid;
}

static void fail(struct test_pg *pg, const char *what) {
  print_log(pg);
  test_pg_stop(pg);
  cr_assert_fail("PostgreSQL: %s (its log is above)", what);
}

static void wait_ready(struct test_pg *pg) {
  for (int i = 0; i < 3000; i++) {
    if (PQping(pg->url) == PQPING_OK)
      return;
    int status;
    if (waitpid(pg->pid, &status, WNOHANG) == pg->pid) {
      pg->pid = 0;
      fail(pg, "the server exited as it started");
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fail(pg, "the server did not answer within 30 s");
}

void test_pg_start(struct test_pg *pg) {
  memset(pg, 0, sizeof(*pg));
  char bin[256];
  if (!find_bindir(bin, sizeof(bin)))
    cr_skip_test("PostgreSQL's initdb and postgres are not installed (not "
                 "in pg_config --bindir nor in " PG_BINDIR_DEBIAN ")");
  const struct passwd *pw = NULL;
  if (geteuid() == 0 && !(pw = getpwnam("postgres")))
    cr_skip_test("running as root, and there is no postgres user to run "
                 "initdb as");
  (void)snprintf(pg->dir, sizeof(pg->dir), "/tmp/sbx-pg-XXXXXX");
  cr_assert_not_null(mkdtemp(pg->dir));
  if (pw)
    cr_assert_eq(chown(pg->dir, pw->pw_uid, pw->pw_gid), 0);
  (void)snprintf(pg->url, sizeof(pg->url),
                 "postgresql://postgres@/postgres?host=%s", pg->dir);
  char initdb[300], postgres[300], data[96];
  (void)snprintf(initdb, sizeof(initdb), "%s/initdb", bin);
  (void)snprintf(postgres, sizeof(postgres), "%s/postgres", bin);
  (void)snprintf(data, sizeof(data), "%s/data", pg->dir);
  char *const init_argv[] = {initdb,  "-D",         data,        "-A",
                             "trust", "-U",         "postgres",  "-E",
                             "UTF8",  "--locale=C", "--no-sync", NULL};
  pid_t pid = spawn(pg, pw, init_argv);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(pg, "initdb failed");
  /* -h '' is no TCP at all; -k the socket's directory. */
  char *const server_argv[] = {postgres,
                               "-D",
                               data,
                               "-k",
                               pg->dir,
                               "-h",
                               "",
                               "-c",
                               "fsync=off",
                               "-c",
                               "full_page_writes=off",
                               "-c",
                               "synchronous_commit=off",
                               "-c",
                               "shared_buffers=16MB",
                               "-c",
                               "max_connections=30",
                               NULL};
  pg->pid = spawn(pg, pw, server_argv);
  wait_ready(pg);
}

void test_pg_stop(struct test_pg *pg) {
  if (pg->pid > 0) {
    (void)kill(pg->pid, SIGQUIT);
    int status;
    for (int i = 0; waitpid(pg->pid, &status, WNOHANG) == 0; i++) {
      if (i == 500) {
        (void)kill(pg->pid, SIGKILL);
        (void)waitpid(pg->pid, &status, 0);
        break;
      }
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    pg->pid = 0;
  }
  if (pg->dir[0]) {
    char cmd[128];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", pg->dir);
    (void)!system(cmd);
    pg->dir[0] = '\0';
  }
}
