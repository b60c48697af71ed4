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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

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

void sbx_sandbox_remove_all(const char *state_dir) {
  struct sbx_run_out r;
  const char *ls[] = {"ls", "--json", NULL};
  sbx_sandbox_run(&r, state_dir, ls);
  json_t *arr = json_loads(r.out ? r.out : "[]", 0, NULL);
  size_t i;
  json_t *x;
  json_array_foreach(arr, i, x) {
    const char *id = json_string_value(json_object_get(x, "id"));
    if (!id)
      continue;
    struct sbx_run_out q;
    const char *rm[] = {"rm", "--force", id, NULL};
    sbx_sandbox_run(&q, state_dir, rm);
    sbx_run_free(&q);
  }
  json_decref(arr);
  sbx_run_free(&r);
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

char *test_run_state(const char *state_dir) {
  char runs[4200];
  (void)snprintf(runs, sizeof(runs), "%s/runs", state_dir);
  DIR *d = opendir(runs);
  if (!d)
    return NULL;
  char *found = NULL;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n > 5 && strcmp(de->d_name + n - 5, ".json") == 0) {
      char p[4500];
      (void)snprintf(p, sizeof(p), "%s/%s", runs, de->d_name);
      free(found);
      found = strdup(p);
    }
  }
  closedir(d);
  return found;
}
