/* FileList: a directory's entries, recursively to a depth, in name order
 * and within the reply's limits; symbolic links are listed, never
 * followed beneath the top. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files_internal.h"
#include "sandboxd/fs/resolve.h"

/* Directory names a recursive list holds while sorting, across its levels. */
#define FILES_LIST_MAX_NAME_BYTES (64u << 20)
/* Room kept in a list reply for everything but the entries. */
#define FILES_REPLY_SLACK 4096

/* The smallest names of one directory, in order once read. */
struct names {
  char **v;
  size_t n, cap;
};

/* Frees the names S holds. */
static void names_free(struct names *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = 0;
}

/* Restores the max-heap V of N names below I. */
static void heap_down(char **v, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && strcmp(v[l], v[m]) > 0)
      m = l;
    if (r < n && strcmp(v[r], v[m]) > 0)
      m = r;
    if (m == i)
      return;
    char *t = v[i];
    v[i] = v[m];
    v[m] = t;
    i = m;
  }
}

/* qsort's order of names: bytewise. */
static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads DIR's names, keeping the CAP smallest (a max-heap), then sorts
 * them. *BYTES counts the bytes held, refused past FILES_LIST_MAX_NAME_BYTES.
 */
static int read_names(DIR *dir, size_t cap, struct names *out, size_t *bytes) {
  out->n = 0;
  out->cap = cap < 64 ? cap : 64;
  if (out->cap == 0)
    return 0;
  out->v = malloc(out->cap * sizeof(char *));
  if (!out->v)
    return -ENOMEM;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(dir);
    if (!de)
      break;
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    if (out->n == cap) {
      if (strcmp(n, out->v[0]) >= 0)
        continue;
      size_t ol = strlen(out->v[0]) + 1, nl = strlen(n) + 1;
      char *s = strdup(n);
      if (!s)
        return -ENOMEM;
      free(out->v[0]);
      out->v[0] = s;
      *bytes = *bytes - ol + nl;
      heap_down(out->v, out->n, 0);
      continue;
    }
    if (out->n == out->cap) {
      size_t nc = out->cap * 2 < cap ? out->cap * 2 : cap;
      char **nv = realloc(out->v, nc * sizeof(char *));
      if (!nv)
        return -ENOMEM;
      out->v = nv;
      out->cap = nc;
    }
    size_t nl = strlen(n) + 1;
    if (*bytes + nl > FILES_LIST_MAX_NAME_BYTES)
      return -E2BIG;
    char *s = strdup(n);
    if (!s)
      return -ENOMEM;
    *bytes += nl;
    /* Sift up. */
    size_t i = out->n++;
    out->v[i] = s;
    while (i > 0) {
      size_t p = (i - 1) / 2;
      if (strcmp(out->v[p], out->v[i]) >= 0)
        break;
      char *t = out->v[p];
      out->v[p] = out->v[i];
      out->v[i] = t;
      i = p;
    }
  }
  if (errno)
    return -errno;
  qsort(out->v, out->n, sizeof(char *), cmp_names);
  return 0;
}

struct list_level {
  DIR *dir;
  struct names names;
  size_t next;
  size_t plen; /* this directory's path (relative to the listed one) */
};

struct list_state {
  struct list_level *stack;
  size_t sp;
  size_t name_bytes;
  Sbx__V1__FileInfo **v; /* malloc'd; the entries are in the arena */
  size_t n, cap;
};

/* Closes the innermost directory and frees its names. */
static void list_pop(struct list_state *s) {
  struct list_level *l = &s->stack[--s->sp];
  for (size_t j = 0; j < l->names.n; j++)
    s->name_bytes -= strlen(l->names.v[j]) + 1;
  names_free(&l->names);
  if (l->dir)
    (void)closedir(l->dir);
  l->dir = NULL;
}

/* Closes every open directory of S and frees what it holds. */
static void list_state_free(struct list_state *s) {
  while (s->sp > 0)
    list_pop(s);
  free(s->stack);
  free(s->v);
}

/* Pushes the directory FD (taken) whose path is PLEN bytes of the path
 * buffer, reading at most CAP names. */
static int list_push(struct rpc_call *c, struct list_state *s, int fd,
                     size_t plen, size_t cap, const char *path) {
  struct list_level *l = &s->stack[s->sp];
  memset(l, 0, sizeof(*l));
  l->dir = fdopendir(fd);
  if (!l->dir) {
    int err = errno;
    close(fd);
    return files_fail_path(c, err, "cannot list", path);
  }
  l->plen = plen;
  s->sp++;
  int r = read_names(l->dir, cap, &l->names, &s->name_bytes);
  if (r == -E2BIG)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "cannot list \"%s\": too many names to sort (lower the "
                    "depth or the limit)",
                    path);
  if (r < 0)
    return files_fail_path(c, -r, "cannot list", path);
  return 0;
}

/* FileList: the entries beneath a directory, depth-first in name order,
 * at most the limit and what fits in a reply (then truncated). */
int rpc_file_list(struct rpc_call *c) {
  const Sbx__V1__FileList *m = RPC_BODY(c, FILE_LIST, file_list);
  if (!m)
    return rpc_no_body(c);
  const char *path = m->path ? m->path : "";
  size_t limit = c->d->limits.max_list_entries;
  if (m->limit && m->limit < limit)
    limit = m->limit;
  size_t depth = m->depth < 1 ? 1 : m->depth;
  if (depth > FILES_MAX_DEPTH)
    depth = FILES_MAX_DEPTH;
  uint64_t budget = c->d->limits.max_message_bytes > FILES_REPLY_SLACK * 2
                        ? c->d->limits.max_message_bytes - FILES_REPLY_SLACK
                        : FILES_REPLY_SLACK;
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, path, false, &loc, &c->err);
  if (r < 0)
    return r;
  int top = files_open_beneath(c, loc.base_fd, loc.rel,
                               O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0,
                               "cannot list", path);
  if (top < 0)
    return top;
  struct list_state s = {0};
  s.stack = calloc(depth, sizeof(*s.stack));
  if (!s.stack) {
    close(top);
    return -ENOMEM;
  }
  char rel[SBX_PATH_MAX];
  char eb[128];
  rel[0] = '\0';
  uint64_t used = 0;
  bool truncated = false;
  r = list_push(c, &s, top, 0, limit + 1, path);
  while (r == 0 && s.sp > 0) {
    struct list_level *l = &s.stack[s.sp - 1];
    if (l->next == l->names.n) {
      list_pop(&s);
      continue;
    }
    const char *name = l->names.v[l->next++];
    size_t nl = strlen(name);
    size_t need = l->plen + (l->plen ? 1 : 0) + nl;
    if (need >= sizeof(rel)) {
      r = rpc_fail(c, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                   "cannot list \"%s\": a path beneath it is too long", path);
      break;
    }
    size_t o = l->plen;
    if (o)
      rel[o++] = '/';
    memcpy(rel + o, name, nl + 1);
    int dfd = dirfd(l->dir);
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT)
        continue;
      r = files_fail_path(c, errno, "cannot list", path);
      break;
    }
    if (s.n == limit) {
      truncated = true;
      break;
    }
    Sbx__V1__FileInfo *fi = files_info(&c->arena, dfd, name, &st, rel);
    if (!fi) {
      r = -ENOMEM;
      break;
    }
    uint64_t cost = need + 64 + (fi->link_target ? strlen(fi->link_target) : 0);
    if (used + cost > budget) {
      truncated = true;
      break;
    }
    used += cost;
    if (s.n == s.cap) {
      size_t nc = s.cap ? s.cap * 2 : 64;
      Sbx__V1__FileInfo **nv = realloc(s.v, nc * sizeof(*nv));
      if (!nv) {
        r = -ENOMEM;
        break;
      }
      s.v = nv;
      s.cap = nc;
    }
    s.v[s.n++] = fi;
    if (S_ISDIR(st.st_mode) && s.sp < depth) {
      int cfd =
          openat(dfd, name,
                 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (cfd < 0) {
        if (errno == ENOENT)
          continue;
        r = rpc_fail(c, SBX_OK, errno,
                     "cannot list \"%s\": cannot open "
                     "\"%s\" beneath it: %s",
                     path, rel, sbx_strerror_lc(errno, eb, sizeof(eb)));
        break;
      }
      r = list_push(c, &s, cfd, need, limit - s.n + 1, path);
    }
  }
  Sbx__V1__FileListReply *rep = NULL;
  if (r == 0) {
    rep = sbx_arena_new(&c->arena, Sbx__V1__FileListReply);
    Sbx__V1__FileInfo **v =
        s.n ? sbx_arena_new_array(&c->arena, Sbx__V1__FileInfo *, s.n) : NULL;
    if (!rep || (s.n && !v)) {
      r = -ENOMEM;
    } else {
      sbx__v1__file_list_reply__init(rep);
      if (s.n)
        memcpy(v, s.v, s.n * sizeof(*v));
      rep->entries = v;
      rep->n_entries = s.n;
      rep->truncated = truncated;
    }
  }
  list_state_free(&s);
  if (r < 0)
    return r;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_FILE_LIST;
  c->resp->file_list = rep;
  return 0;
}
