#include "controller/state/state.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/rand.h"

int state_dir_resolve(const char *given, char *out, size_t n,
                      struct sbx_error *e) {
  int k;
  const char *x = getenv("XDG_STATE_HOME");
  const char *home = getenv("HOME");
  if (given && *given)
    k = snprintf(out, n, "%s", given);
  else if (x && x[0] == '/')
    k = snprintf(out, n, "%s/sbx", x);
  else if (home && home[0] == '/')
    k = snprintf(out, n, "%s/.local/state/sbx", home);
  else
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "no state directory: set XDG_STATE_HOME or HOME, or "
                         "give --state-dir");
  if (k < 0 || (size_t)k >= n - 32)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the state directory path is too long");
  return 0;
}

static int mkdir_p(char *p, mode_t mode) {
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    int r = mkdir(p, mode);
    *s = '/';
    if (r < 0 && errno != EEXIST)
      return -errno;
  }
  if (mkdir(p, mode) < 0 && errno != EEXIST)
    return -errno;
  return 0;
}

int state_dir_ensure(const char *dir, struct sbx_error *e) {
  char p[PATH_MAX];
  int k = snprintf(p, sizeof(p), "%s/sandboxes", dir);
  if (k < 0 || (size_t)k >= sizeof(p))
    return -ENAMETOOLONG;
  int r = mkdir_p(p, 0700);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r,
                         "cannot create the state directory \"%s\": %s", p,
                         strerror(-r));
  return 0;
}

int state_new_id(char out[STATE_ID_LEN + 1]) {
  return sbx_random_hex(out, STATE_ID_LEN / 2);
}

int state_path(const char *dir, const char *id, const char *ext, char *out,
               size_t n) {
  int k = snprintf(out, n, "%s/sandboxes/%s.%s", dir, id, ext);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

int state_write(const char *dir, const char *id, json_t *rec,
                struct sbx_error *e) {
  char p[PATH_MAX];
  if (state_path(dir, id, "json", p, sizeof(p)) < 0)
    return -ENAMETOOLONG;
  _cleanup_free_ char *s = json_dumps(rec, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (!s)
    return -ENOMEM;
  size_t n = strlen(s);
  s[n] = '\0';
  _cleanup_free_ char *t = malloc(n + 2);
  if (!t)
    return -ENOMEM;
  memcpy(t, s, n);
  t[n] = '\n';
  int r = sbx_write_file_atomic(p, t, n + 1, 0600);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", p,
                         strerror(-r));
  return 0;
}

static bool valid_id(const char *s, size_t n) {
  if (n == 0 || n > STATE_ID_LEN)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

static int load(const char *dir, const char *id, json_t **out,
                struct sbx_error *e) {
  char p[PATH_MAX];
  if (state_path(dir, id, "json", p, sizeof(p)) < 0)
    return -ENAMETOOLONG;
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(p, STATE_MAX_BYTES, &text, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read \"%s\": %s", p,
                         strerror(-r));
  json_error_t je;
  json_t *j = json_loadb(text, len, 0, &je);
  if (!json_is_object(j)) {
    json_decref(j);
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a sandbox record: %s", p, je.text);
  }
  *out = j;
  return 0;
}

/* Calls FN for each record id in DIR. */
static int each_id(const char *dir, int (*fn)(void *, const char *), void *arg,
                   struct sbx_error *e) {
  char p[PATH_MAX];
  int k = snprintf(p, sizeof(p), "%s/sandboxes", dir);
  if (k < 0 || (size_t)k >= sizeof(p))
    return -ENAMETOOLONG;
  DIR *d = opendir(p);
  if (!d) {
    if (errno == ENOENT)
      return 0;
    return sbx_error_set(e, SBX_OK, errno, "cannot read \"%s\": %m", p);
  }
  int r = 0;
  size_t seen = 0;
  struct dirent *de;
  while (r == 0 && (de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n != STATE_ID_LEN + 5 || strcmp(de->d_name + STATE_ID_LEN, ".json"))
      continue;
    if (!valid_id(de->d_name, STATE_ID_LEN))
      continue;
    if (++seen > STATE_MAX_SANDBOXES)
      break;
    char id[STATE_ID_LEN + 1];
    memcpy(id, de->d_name, STATE_ID_LEN);
    id[STATE_ID_LEN] = '\0';
    r = fn(arg, id);
  }
  closedir(d);
  return r;
}

struct find {
  const char *want;
  char id[STATE_ID_LEN + 1];
  int matches;
};

static int find_one(void *arg, const char *id) {
  struct find *f = arg;
  if (strncmp(id, f->want, strlen(f->want)) == 0) {
    if (f->matches++ == 0)
      memcpy(f->id, id, sizeof(f->id));
  }
  return 0;
}

struct by_name {
  const char *dir, *want;
  char id[STATE_ID_LEN + 1];
  int matches;
};

static int find_name(void *arg, const char *id) {
  struct by_name *f = arg;
  json_t *j = NULL;
  struct sbx_error ignored = {0};
  if (load(f->dir, id, &j, &ignored) < 0)
    return 0;
  const char *name = json_string_value(json_object_get(j, "name"));
  if (name && strcmp(name, f->want) == 0 && f->matches++ == 0)
    memcpy(f->id, id, sizeof(f->id));
  json_decref(j);
  return 0;
}

int state_find_name(const char *dir, const char *name,
                    char id[STATE_ID_LEN + 1], struct sbx_error *e) {
  struct by_name f = {.dir = dir, .want = name};
  int r = each_id(dir, find_name, &f, e);
  if (r < 0)
    return r;
  if (f.matches)
    memcpy(id, f.id, STATE_ID_LEN + 1);
  return f.matches > 0;
}

int state_read(const char *dir, const char *want, json_t **out,
               char id[STATE_ID_LEN + 1], struct sbx_error *e) {
  bool hex = valid_id(want, strlen(want));
  struct find f = {.want = want};
  int r = hex ? each_id(dir, find_one, &f, e) : 0;
  if (r < 0)
    return r;
  /* As docker: a whole id, then a name, then an id prefix. */
  if (!(f.matches == 1 && strlen(want) == STATE_ID_LEN)) {
    char named[STATE_ID_LEN + 1];
    r = state_find_name(dir, want, named, e);
    if (r < 0)
      return r;
    if (r > 0) {
      memcpy(f.id, named, sizeof(f.id));
      f.matches = 1;
    }
  }
  if (f.matches == 0)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no sandbox \"%.64s\" in \"%s\" (see sbx sandbox ls)",
                         want, dir);
  if (f.matches > 1)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "sandbox id \"%s\" is ambiguous: give more of it",
                         want);
  r = load(dir, f.id, out, e);
  if (r == 0)
    memcpy(id, f.id, STATE_ID_LEN + 1);
  return r;
}

int state_lock(const char *dir, struct sbx_error *e) {
  char p[PATH_MAX];
  int k = snprintf(p, sizeof(p), "%s/sandboxes/.lock", dir);
  if (k < 0 || (size_t)k >= sizeof(p))
    return -ENAMETOOLONG;
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", p);
  while (flock(fd, LOCK_EX) < 0)
    if (errno != EINTR) {
      int err = errno;
      close(fd);
      return sbx_error_set(e, SBX_OK, err, "cannot lock \"%s\": %s", p,
                           strerror(err));
    }
  return fd;
}

struct lister {
  const char *dir;
  json_t *arr;
};

static int list_one(void *arg, const char *id) {
  struct lister *l = arg;
  json_t *j = NULL;
  struct sbx_error ignored = {0};
  if (load(l->dir, id, &j, &ignored) == 0 &&
      json_array_append_new(l->arr, j) < 0)
    return -ENOMEM;
  return 0;
}

static int by_created(const void *a, const void *b) {
  json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  const char *cx = json_string_value(json_object_get(x, "created_at"));
  const char *cy = json_string_value(json_object_get(y, "created_at"));
  int c = strcmp(cx ? cx : "", cy ? cy : "");
  if (c)
    return c;
  const char *ix = json_string_value(json_object_get(x, "id"));
  const char *iy = json_string_value(json_object_get(y, "id"));
  return strcmp(ix ? ix : "", iy ? iy : "");
}

int state_list(const char *dir, json_t **out, struct sbx_error *e) {
  struct lister l = {.dir = dir, .arr = json_array()};
  if (!l.arr)
    return -ENOMEM;
  int r = each_id(dir, list_one, &l, e);
  if (r < 0) {
    json_decref(l.arr);
    return r;
  }
  size_t n = json_array_size(l.arr);
  json_t **v = calloc(n + 1, sizeof(*v));
  if (!v) {
    json_decref(l.arr);
    return -ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    v[i] = json_array_get(l.arr, i); /* borrowed: L.ARR keeps them */
  qsort(v, n, sizeof(*v), by_created);
  json_t *sorted = json_array();
  for (size_t i = 0; sorted && i < n; i++)
    if (json_array_append(sorted, v[i]) < 0) {
      json_decref(sorted);
      sorted = NULL;
    }
  free(v);
  json_decref(l.arr);
  if (!sorted)
    return -ENOMEM;
  *out = sorted;
  return 0;
}

void state_remove(const char *dir, const char *id) {
  static const char *const ext[] = {"token", "log", "json"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ext); i++) {
    char p[PATH_MAX];
    if (state_path(dir, id, ext[i], p, sizeof(p)) == 0)
      (void)unlink(p);
  }
}

void state_now(char out[32]) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  (void)strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
