/* The scratch directory of a fuzz target that needs files: made once per
 * process under $TMPDIR, else /dev/shm (memory: a target that rewrites a
 * file every run would otherwise write to disk all the time), else /tmp;
 * and its removal, whatever the runs left in it. */
#ifndef SBX_FUZZ_TMP_H
#define SBX_FUZZ_TMP_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes a new directory "<base>/sbx-fuzz-NAME-XXXXXX" into DIR (SIZE
 * bytes); aborts when it cannot, as a target cannot run without it. */
static inline void fuzz_tmpdir(char *dir, size_t size, const char *name) {
  const char *base = getenv("TMPDIR");
  if (!base || !base[0])
    base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  int n = snprintf(dir, size, "%s/sbx-fuzz-%s-XXXXXX", base, name);
  if (n < 0 || (size_t)n >= size || !mkdtemp(dir))
    abort();
  char *real = realpath(dir, NULL); /* absolute and normalized */
  if (!real || strlen(real) >= size)
    abort();
  memcpy(dir, real, strlen(real) + 1);
  free(real);
}

/* Empties the directory FD of everything but directories, which it makes
 * removable (rwx for us); names the first directory left in SUB ("" when
 * none is left). */
static inline void fuzz_empty_level(int fd, char sub[256]) {
  int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = rfd >= 0 ? fdopendir(rfd) : NULL;
  if (!dir)
    abort();
  sub[0] = '\0';
  struct dirent *de;
  while ((de = readdir(dir))) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    if (unlinkat(fd, n, 0) == 0 || unlinkat(fd, n, AT_REMOVEDIR) == 0)
      continue;
    if (fchmodat(fd, n, 0700, 0) < 0)
      abort();
    if (!sub[0])
      (void)snprintf(sub, 256, "%s", n);
  }
  (void)closedir(dir);
}

/* rm -r of the directory NAME (one component) in DFD without following
 * links, whatever its depth or modes: one directory open at a time, down
 * to one without subdirectories, then up again through "..". Aborts when
 * it cannot: the next run would not start clean. */
static inline void fuzz_rmtree(int dfd, const char *name) {
  static char path[8192]; /* the way down from NAME: "a/b/c" */
  size_t len = 0;
  if (strchr(name, '/'))
    abort();
  (void)fchmodat(dfd, name, 0700, 0);
  int fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    abort();
  for (;;) {
    char sub[256];
    fuzz_empty_level(fd, sub);
    if (sub[0]) {
      int next = openat(fd, sub, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      int w =
          snprintf(path + len, sizeof(path) - len, "%s%s", len ? "/" : "", sub);
      if (next < 0 || w < 0 || (size_t)w >= sizeof(path) - len)
        abort();
      len += (size_t)w;
      (void)close(fd);
      fd = next;
      continue;
    }
    if (len == 0)
      break;
    char *slash = memrchr(path, '/', len);
    const char *last = slash ? slash + 1 : path;
    int up = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (up < 0 || unlinkat(up, last, AT_REMOVEDIR) < 0)
      abort();
    len = slash ? (size_t)(slash - path) : 0;
    path[len] = '\0';
    (void)close(fd);
    fd = up;
  }
  (void)close(fd);
  if (unlinkat(dfd, name, AT_REMOVEDIR) < 0)
    abort();
}

/* Removes DIR, made by fuzz_tmpdir, and all it holds. */
static inline void fuzz_tmpdir_remove(const char *dir) {
  const char *slash = strrchr(dir, '/');
  if (!slash || !slash[1])
    abort();
  char parent[4096];
  (void)snprintf(parent, sizeof(parent), "%.*s", (int)(slash - dir), dir);
  int pfd = open(parent[0] ? parent : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0)
    abort();
  fuzz_rmtree(pfd, slash + 1);
  (void)close(pfd);
}

#endif
