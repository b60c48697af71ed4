#include "sandboxd/daemon/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* Entries the sweep looks at in all, so that it ends on any tree. */
#define LEFTOVERS_MAX_ENTRIES 4000000u

struct leftovers {
  int root_fd;
  struct timespec started; /* what was made since is this sandboxd's */
  pthread_t thread;
  atomic_bool stop;
  size_t seen, removed;
};

/* Whether S holds N lowercase hex digits and then END. */
static bool hex_then(const char *s, size_t n, const char *end) {
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return strcmp(s + n, end) == 0;
}

/* 'd' for a staging directory's name, 'f' for a temporary file's, 0 for
 * any other. */
static char leftover_kind(const char *name) {
  if (strncmp(name, ".sbx-import-", 12) == 0 && hex_then(name + 12, 16, ""))
    return 'd';
  if (strncmp(name, ".sbx-patch-", 11) == 0 && hex_then(name + 11, 16, ".tmp"))
    return 'f';
  if (strncmp(name, ".sbx-", 5) == 0 && hex_then(name + 5, 16, ".tmp"))
    return 'f';
  return 0;
}

static bool older(const struct stat *st, const struct timespec *t) {
  return st->st_ctim.tv_sec < t->tv_sec ||
         (st->st_ctim.tv_sec == t->tv_sec && st->st_ctim.tv_nsec < t->tv_nsec);
}

/* Sweeps the directory DFD (owned), DEPTH levels down. */
static void sweep_dir(struct leftovers *l, int dfd, unsigned depth) {
  DIR *d = fdopendir(dfd);
  if (!d) {
    (void)close(dfd);
    return;
  }
  struct dirent *de;
  while (!atomic_load(&l->stop) && (de = readdir(d)) &&
         l->seen++ < LEFTOVERS_MAX_ENTRIES) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    struct stat st;
    if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) < 0)
      continue;
    char kind = leftover_kind(n);
    if (kind == 'd' && S_ISDIR(st.st_mode) && older(&st, &l->started)) {
      struct sbx_error e = {0};
      if (files_remove_tree(dirfd(d), n, n, &e) == 0)
        l->removed++;
      continue;
    }
    if (kind == 'f' && S_ISREG(st.st_mode) && older(&st, &l->started)) {
      if (unlinkat(dirfd(d), n, 0) == 0)
        l->removed++;
      continue;
    }
    if (!S_ISDIR(st.st_mode) || depth >= FILES_MAX_DEPTH)
      continue;
    int sub =
        openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0)
      sweep_dir(l, sub, depth + 1);
  }
  (void)closedir(d);
}

static void *sweep_main(void *arg) {
  struct leftovers *l = arg;
  int fd = openat(l->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0)
    sweep_dir(l, fd, 0);
  if (l->removed)
    log_info("removed %zu staging leftovers of an earlier sandboxd",
             l->removed);
  return NULL;
}

struct leftovers *leftovers_sweep_start(int root_fd) {
  struct leftovers *l = calloc(1, sizeof(*l));
  if (!l)
    return NULL;
  atomic_init(&l->stop, false);
  /* The coarse clock, which is what a new file's ctime is taken from (or
   * at least): with the fine clock, a file this sandboxd made a moment
   * after could have a ctime a tick before "started" and be taken for a
   * leftover while it was being written. */
  (void)clock_gettime(CLOCK_REALTIME_COARSE, &l->started);
  l->root_fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
  if (l->root_fd < 0 || pthread_create(&l->thread, NULL, sweep_main, l) != 0) {
    log_warn("cannot sweep the workspace for staging leftovers: %m");
    if (l->root_fd >= 0)
      (void)close(l->root_fd);
    free(l);
    return NULL;
  }
  return l;
}

void leftovers_sweep_stop(struct leftovers *l) {
  if (!l)
    return;
  atomic_store(&l->stop, true);
  (void)pthread_join(l->thread, NULL);
  (void)close(l->root_fd);
  free(l);
}
