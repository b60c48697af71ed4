#include "tests/support/sbxrun.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "controller/state/store.h"
#include "shared/buf.h"

const char *test_sbx_path(void) {
  const char *p = getenv("SBX_BIN");
  return p ? p : SBX_BUILD_DIR "/sbx";
}

const char *test_write_file(const char *dir, const char *name,
                            const char *text) {
  static char path[512];
  (void)snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
  return path;
}

void sbx_run(struct sbx_run_out *r, const char *base_url,
             const char *const *argv) {
  memset(r, 0, sizeof(*r));
  int out[2], err[2];
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
  const char *args[64];
  size_t n = 0;
  args[n++] = test_sbx_path();
  for (size_t i = 0; argv[i] && n < 63; i++)
    args[n++] = argv[i];
  args[n] = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    if (base_url)
      setenv("OPENAI_BASE_URL", base_url, 1);
    setenv("OPENAI_API_KEY", "test-key", 1);
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  struct sbx_buf bo, be;
  sbx_buf_init(&bo, 64u << 20);
  sbx_buf_init(&be, 64u << 20);
  struct pollfd p[2] = {{.fd = out[0], .events = POLLIN},
                        {.fd = err[0], .events = POLLIN}};
  int open_fds = 2;
  while (open_fds > 0) {
    int pr = poll(p, 2, 120000);
    if (pr <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      char buf[65536];
      ssize_t k = read(p[i].fd, buf, sizeof(buf));
      if (k <= 0) {
        close(p[i].fd);
        p[i].fd = -1;
        open_fds--;
        continue;
      }
      (void)sbx_buf_append(i == 0 ? &bo : &be, buf, (size_t)k);
    }
  }
  for (int i = 0; i < 2; i++)
    if (p[i].fd >= 0)
      close(p[i].fd);
  int st = 0;
  (void)waitpid(pid, &st, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  r->secs =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r->out = sbx_buf_steal(&bo, NULL);
  r->err = sbx_buf_steal(&be, NULL);
}

void sbx_run_free(struct sbx_run_out *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof(*r));
}

void sbx_sandbox_run(struct sbx_run_out *r, const char *state_dir,
                     const char *const *args) {
  const char *argv[32];
  size_t n = 0;
  argv[n++] = "sandbox";
  argv[n++] = "--state-dir";
  argv[n++] = state_dir;
  for (size_t i = 0; args[i] && n < 31; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  sbx_run(r, NULL, argv);
}

char *sbx_sandbox_line(const char *state_dir, const char *const *args) {
  struct sbx_run_out r;
  sbx_sandbox_run(&r, state_dir, args);
  cr_assert_eq(r.status, 0, "sbx sandbox %s: %s", args[0], r.err);
  char *line = strndup(r.out, strcspn(r.out, "\n"));
  sbx_run_free(&r);
  cr_assert_not_null(line);
  return line;
}

/* Runs LS (which prints a JSON array), then ACT with each listed id
 * appended: `sbx sandbox` commands on STATE_DIR when SANDBOX, else plain
 * sbx commands. Failures are ignored: this is cleanup. */
static void each_listed(const char *state_dir, bool sandbox,
                        const char *const *ls, const char *const *act) {
  struct sbx_run_out r;
  if (sandbox)
    sbx_sandbox_run(&r, state_dir, ls);
  else
    sbx_run(&r, NULL, ls);
  json_t *arr = json_loads(r.status == 0 && r.out ? r.out : "[]", 0, NULL);
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) {
    const char *id = json_string_value(json_object_get(x, "id"));
    if (!id)
      continue;
    const char *argv[16];
    size_t n = 0;
    for (; act[n] && n < 14; n++)
      argv[n] = act[n];
    argv[n++] = id;
    argv[n] = NULL;
    struct sbx_run_out q;
    if (sandbox)
      sbx_sandbox_run(&q, state_dir, argv);
    else
      sbx_run(&q, NULL, argv);
    sbx_run_free(&q);
  }
  json_decref(arr);
  sbx_run_free(&r);
}

void sbx_sandbox_remove_all(const char *state_dir) {
  /* The failed runs of sbx run kept for a retry first: a cancel closes
   * their sandboxes at once, which would otherwise outlive the test
   * (their keep time is a day). */
  const char *runs[] = {"runs",   "ls",       "--state-dir", state_dir,
                        "--json", "--status", "failed",      NULL};
  const char *cancel[] = {"runs", "cancel", "--state-dir", state_dir, NULL};
  each_listed(state_dir, false, runs, cancel);
  const char *ls[] = {"ls", "--json", NULL};
  const char *rm[] = {"rm", "--force", NULL};
  each_listed(state_dir, true, ls, rm);
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw) {
  (void)st;
  (void)ftw;
  return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

int test_rm_rf(const char *path) {
  if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
    return -errno;
  return 0;
}

pid_t sbx_spawn(const char *base_url, const char *err_path, rlim_t fsize,
                const char *const *argv) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    const char *args[32];
    size_t n = 0;
    args[n++] = test_sbx_path();
    for (size_t i = 0; argv[i] && n < 31; i++)
      args[n++] = argv[i];
    args[n] = NULL;
    int devnull = open("/dev/null", O_RDWR);
    int err =
        err_path ? open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600) : devnull;
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(err, 2);
    if (base_url)
      setenv("OPENAI_BASE_URL", base_url, 1);
    setenv("OPENAI_API_KEY", "test-key", 1);
    if (fsize) {
      struct rlimit rl = {fsize, fsize};
      (void)signal(SIGXFSZ, SIG_IGN);
      (void)setrlimit(RLIMIT_FSIZE, &rl);
    }
    execv(args[0], (char *const *)args);
    _exit(127);
  }
  return pid;
}

/* The state store of STATE_DIR, opened (asserted). */
static struct store *test_store(const char *state_dir) {
  char url[4200];
  (void)snprintf(url, sizeof(url), "sqlite:%s/sbx.db", state_dir);
  struct store *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(store_open(url, &s, &e), 0, "%s", e.msg);
  return s;
}

bool test_run_has_state(const char *state_dir, const char *id) {
  struct store *s = test_store(state_dir);
  char *text = NULL;
  size_t len = 0;
  bool has = store_state_get(s, id, &text, &len, NULL) == 0 && len > 0;
  free(text);
  store_close(s);
  return has;
}

char *test_run_state(const char *state_dir) {
  char db[4200];
  (void)snprintf(db, sizeof(db), "%s/sbx.db", state_dir);
  if (access(db, F_OK) != 0)
    return NULL;
  struct store *s = test_store(state_dir);
  json_t *rows = NULL;
  int64_t next = 0;
  char *found = NULL;
  if (store_run_list(s, NULL, NULL, 0, STORE_LIST_MAX, &rows, &next, NULL) ==
      0) {
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      const char *id = json_string_value(json_object_get(row, "id"));
      const char *st = json_string_value(json_object_get(row, "status"));
      char *text = NULL;
      size_t len = 0;
      if (!found && strcmp(st, "completed") != 0 &&
          store_state_get(s, id, &text, &len, NULL) == 0 && len > 0)
        found = strdup(id);
      free(text);
    }
  }
  json_decref(rows);
  store_close(s);
  return found;
}

char *test_run_status(const char *state_dir, const char *id) {
  struct store *s = test_store(state_dir);
  json_t *row = NULL;
  char *status = NULL;
  if (store_run_get(s, id, &row, NULL) == 0)
    status = strdup(json_string_value(json_object_get(row, "status")));
  json_decref(row);
  store_close(s);
  return status;
}

json_t *test_run_state_json(const char *state_dir, const char *id) {
  struct store *s = test_store(state_dir);
  char *text = NULL;
  size_t len = 0;
  struct sbx_error e = {0};
  cr_assert_eq(store_state_get(s, id, &text, &len, &e), 0, "%s", e.msg);
  store_close(s);
  json_error_t je;
  json_t *j = json_loadb(text, len, 0, &je);
  cr_assert_not_null(j, "the state of %s: %s", id, je.text);
  free(text);
  return j;
}

void test_store_exec(const char *state_dir, const char *sql) {
  (void)mkdir(state_dir, 0700);
  store_close(test_store(state_dir));
  char path[4200];
  (void)snprintf(path, sizeof(path), "%s/sbx.db", state_dir);
  sqlite3 *db = NULL;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK, "%s", path);
  char *msg = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_close(db);
}

char *test_journal_read(const char *state_dir, const char *id) {
  struct store *s = test_store(state_dir);
  char *text = NULL;
  size_t len = 0;
  struct sbx_error e = {0};
  cr_assert_eq(store_journal_read(s, id, STORE_MAX_TEXT, &text, &len, &e), 0,
               "%s", e.msg);
  store_close(s);
  return text;
}

void test_journal_write(const char *state_dir, const char *id,
                        const char *text) {
  struct store *s = test_store(state_dir);
  struct sbx_error e = {0};
  cr_assert_eq(store_journal_cut(s, id, 0, &e), 0, "%s", e.msg);
  cr_assert_eq(store_journal_append(s, id, text, strlen(text), &e), 0, "%s",
               e.msg);
  store_close(s);
}
