/* PatchApply: the apply_patch engine (shared/patch.c) over the workspace,
 * all or nothing. Every file the patch touches is read and every hunk
 * applied in memory first; only when all of them succeed are the new
 * contents staged as temporary files beside their targets, and only when
 * every one is staged are they renamed into place (and deleted files
 * unlinked). A patch that fails anywhere changes no file. */
#include "sandboxd/patch/patch_rpc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "sandboxd/fs/resolve.h"
#include "shared/cleanup.h"
#include "shared/patch.h"
#include "shared/rand.h"

#define PATCH_FILE_MAX (64u << 20)   /* one file read for patching */
#define PATCH_TOTAL_MAX (256u << 20) /* all files of one patch */

struct pfile {
  int grant;
  char rel[SBX_PATH_MAX];
  char path[SBX_PATH_MAX]; /* as resolved for messages */
  struct sbxd_loc loc;
  bool on_disk; /* existed before the patch */
  bool exists;  /* exists after the ops so far */
  bool changed;
  char *content;
  size_t len;
  mode_t mode;
  /* staging */
  int dir_fd;
  char tmp[40];
};

struct pstate {
  struct rpc_call *c;
  struct pfile *files;
  size_t n, cap;
  size_t total;
};

static void pstate_free(struct pstate *s) {
  for (size_t i = 0; i < s->n; i++) {
    free(s->files[i].content);
    if (s->files[i].dir_fd >= 0)
      close(s->files[i].dir_fd);
  }
  free(s->files);
}

/* Reads the regular file LOC into F; a missing file is not an error. */
static int load(struct pstate *s, struct pfile *f) {
  struct rpc_call *c = s->c;
  struct sbx_error e = {0};
  _cleanup_close_ int dfd = sbxd_open_parent(&f->loc, &e);
  if (dfd == -ENOENT)
    return 0;
  if (dfd < 0)
    return files_fail_path(c, -dfd, "cannot read", f->path);
  struct stat st;
  if (fstatat(dfd, f->loc.name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT)
      return 0;
    return files_fail_path(c, errno, "cannot read", f->path);
  }
  if (S_ISLNK(st.st_mode))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, ELOOP,
                    "\"%s\" is a symbolic link; patch its target instead",
                    f->path);
  if (!S_ISREG(st.st_mode))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EISDIR,
                    "\"%s\" is not a regular file", f->path);
  if ((uint64_t)st.st_size > PATCH_FILE_MAX ||
      s->total + (size_t)st.st_size > PATCH_TOTAL_MAX)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, EFBIG,
                    "\"%s\" is too large to patch (limit %u MiB per file)",
                    f->path, PATCH_FILE_MAX >> 20);
  _cleanup_close_ int fd =
      openat(dfd, f->loc.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return files_fail_path(c, errno, "cannot read", f->path);
  size_t cap = (size_t)st.st_size;
  char *buf = malloc(cap + 1);
  if (!buf)
    return -ENOMEM;
  size_t got = 0;
  while (got < cap) {
    ssize_t k = read(fd, buf + got, cap - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  buf[got] = '\0';
  f->content = buf;
  f->len = got;
  f->mode = st.st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID);
  f->on_disk = f->exists = true;
  s->total += got;
  return 0;
}

/* The entry for the patch path P (relative to DIR, or absolute under a
 * grant), loaded from disk on first use. */
static int get_file(struct pstate *s, const char *dir, const char *p,
                    size_t *out) {
  struct rpc_call *c = s->c;
  char full[SBX_PATH_MAX];
  int n;
  if (p[0] == '/' || !dir[0] || strcmp(dir, ".") == 0)
    n = snprintf(full, sizeof(full), "%s", p);
  else
    n = snprintf(full, sizeof(full), "%s/%s", dir, p);
  if (n < 0 || (size_t)n >= sizeof(full))
    return rpc_fail(c, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                    "patch path \"%.200s\" is too long", p);
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, full, true, &loc, &c->err);
  if (r < 0)
    return r;
  if (strcmp(loc.rel, ".") == 0)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EISDIR,
                    "patch path \"%s\" names a root directory", p);
  for (size_t i = 0; i < s->n; i++)
    if (s->files[i].grant == loc.grant &&
        strcmp(s->files[i].rel, loc.rel) == 0) {
      *out = i;
      return 0;
    }
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 8;
    struct pfile *nf = realloc(s->files, nc * sizeof(*nf));
    if (!nf)
      return -ENOMEM;
    s->files = nf;
    s->cap = nc;
  }
  struct pfile *f = &s->files[s->n++];
  memset(f, 0, sizeof(*f));
  f->dir_fd = -1;
  f->grant = loc.grant;
  f->loc = loc;
  /* loc.name points into loc.rel: re-aim it at the copy. */
  f->loc.name = f->loc.rel + (loc.name - loc.rel);
  memcpy(f->rel, loc.rel, sizeof(f->rel));
  (void)snprintf(f->path, sizeof(f->path), "%s", p);
  f->mode = 0644;
  r = load(s, f);
  if (r < 0)
    return r;
  *out = s->n - 1;
  return 0;
}

static int set_content(struct pfile *f, const char *data, size_t len) {
  char *copy = malloc(len + 1);
  if (!copy)
    return -ENOMEM;
  if (len)
    memcpy(copy, data, len);
  copy[len] = '\0';
  free(f->content);
  f->content = copy;
  f->len = len;
  return 0;
}

static Sbx__V1__PatchFileResult *result(struct rpc_call *c, const char *action,
                                        const char *path, const char *to) {
  Sbx__V1__PatchFileResult *r =
      sbx_arena_new(&c->arena, Sbx__V1__PatchFileResult);
  if (!r)
    return NULL;
  sbx__v1__patch_file_result__init(r);
  r->action = (char *)action;
  r->path = sbx_arena_strdup(&c->arena, path);
  r->move_to = sbx_arena_strdup(&c->arena, to ? to : "");
  char buf[2 * SBX_PATH_MAX + 32];
  if (strcmp(action, "add") == 0)
    (void)snprintf(buf, sizeof(buf), "Created %s", path);
  else if (strcmp(action, "delete") == 0)
    (void)snprintf(buf, sizeof(buf), "Deleted %s", path);
  else if (strcmp(action, "move") == 0)
    (void)snprintf(buf, sizeof(buf), "Moved %s to %s", path, to);
  else
    (void)snprintf(buf, sizeof(buf), "Updated %s", path);
  r->summary = sbx_arena_strdup(&c->arena, buf);
  if (!r->path || !r->move_to || !r->summary)
    return NULL;
  return r;
}

/* Applies every op in memory, with EOL's line ends. */
static int plan(struct pstate *s, const struct sbx_patch *p, const char *dir,
                enum sbx_patch_eol eol, Sbx__V1__PatchFileResult **results) {
  struct rpc_call *c = s->c;
  for (size_t i = 0; i < p->nops; i++) {
    const struct sbx_patch_op *op = &p->ops[i];
    size_t fi = 0;
    int r = get_file(s, dir, op->path, &fi);
    if (r < 0)
      return r;
    const char *action;
    const char *to = NULL;
    switch (op->kind) {
    case SBX_PATCH_ADD: {
      /* The SDK's create_file joins the lines without a final newline. */
      size_t len = op->content_len;
      if (eol == SBX_PATCH_EOL_SDK && len > 0 && op->content[len - 1] == '\n')
        len--;
      r = set_content(&s->files[fi], op->content, len);
      if (r < 0)
        return r;
      s->files[fi].exists = s->files[fi].changed = true;
      action = "add";
      break;
    }
    case SBX_PATCH_DELETE:
      if (!s->files[fi].exists)
        return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                        "%s: cannot delete: no such file (patch line %zu)",
                        op->path, op->line);
      s->files[fi].exists = false;
      s->files[fi].changed = true;
      action = "delete";
      break;
    case SBX_PATCH_UPDATE: {
      if (!s->files[fi].exists)
        return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                        "%s: cannot update: no such file (patch line %zu)",
                        op->path, op->line);
      size_t di = fi;
      if (op->move_to) {
        r = get_file(s, dir, op->move_to, &di);
        if (r < 0)
          return r;
        to = op->move_to;
      }
      struct pfile *f = &s->files[fi], *dst = &s->files[di];
      char *out = NULL;
      size_t outlen = 0;
      r = sbx_patch_apply_update(op, f->content ? f->content : "", f->len, eol,
                                 &out, &outlen, &c->err);
      if (r < 0)
        return r;
      if (dst != f) {
        dst->mode = f->mode;
        f->exists = false;
        f->changed = true;
      }
      free(dst->content);
      dst->content = out;
      dst->len = outlen;
      dst->exists = dst->changed = true;
      action = dst != f ? "move" : "update";
      break;
    }
    default:
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "unknown patch op");
    }
    results[i] = result(c, action, op->path, to);
    if (!results[i])
      return -ENOMEM;
  }
  return 0;
}

/* Writes F's new content to a temporary file in its directory. */
static int stage(struct pstate *s, struct pfile *f) {
  struct rpc_call *c = s->c;
  f->dir_fd = files_mkdir_p(c, f->loc.base_fd, f->loc.parent, 0755, f->path);
  if (f->dir_fd < 0) {
    int r = f->dir_fd;
    f->dir_fd = -1;
    return r;
  }
  /* O_PATH fds cannot be used for openat of a new file's data; reopen. */
  struct sbx_error e = {0};
  int dfd =
      sbxd_openat(f->loc.base_fd, f->loc.parent, O_RDONLY | O_DIRECTORY, 0, &e);
  if (dfd < 0)
    return files_fail_path(c, -dfd, "cannot write", f->path);
  close(f->dir_fd);
  f->dir_fd = dfd;
  _cleanup_close_ int fd = -1;
  for (int tries = 0; fd < 0; tries++) {
    char hex[17];
    int r = sbx_random_hex(hex, 8);
    if (r < 0)
      return r;
    (void)snprintf(f->tmp, sizeof(f->tmp), ".sbx-patch-%s.tmp", hex);
    fd = openat(dfd, f->tmp,
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && (errno != EEXIST || tries == 4)) {
      f->tmp[0] = '\0';
      return files_fail_path(c, errno, "cannot stage", f->path);
    }
  }
  int r = files_write_all(fd, (const uint8_t *)f->content, f->len, 0);
  if (r == 0 && fchmod(fd, f->mode) < 0)
    r = -errno;
  if (r == 0 && fsync(fd) < 0)
    r = -errno;
  if (r < 0)
    return files_fail_path(c, -r, "cannot stage", f->path);
  return 0;
}

static int commit(struct pstate *s) {
  struct rpc_call *c = s->c;
  int r = 0;
  for (size_t i = 0; i < s->n && r == 0; i++)
    if (s->files[i].changed && s->files[i].exists)
      r = stage(s, &s->files[i]);
  if (r < 0) {
    for (size_t i = 0; i < s->n; i++)
      if (s->files[i].tmp[0] && s->files[i].dir_fd >= 0)
        (void)unlinkat(s->files[i].dir_fd, s->files[i].tmp, 0);
    return r;
  }
  /* Everything is staged: from here only renames and unlinks. */
  for (size_t i = 0; i < s->n; i++) {
    struct pfile *f = &s->files[i];
    if (!f->changed)
      continue;
    if (f->exists) {
      if (renameat(f->dir_fd, f->tmp, f->dir_fd, f->loc.name) < 0 && r == 0)
        r = files_fail_path(c, errno, "cannot replace", f->path);
    } else if (f->on_disk) {
      struct sbx_error e = {0};
      _cleanup_close_ int dfd = sbxd_open_parent(&f->loc, &e);
      if ((dfd < 0 || unlinkat(dfd, f->loc.name, 0) < 0) && r == 0)
        r = files_fail_path(c, dfd < 0 ? -dfd : errno, "cannot delete",
                            f->path);
    }
  }
  return r;
}

int rpc_patch_apply(struct rpc_call *c) {
  const Sbx__V1__PatchApply *m = RPC_BODY(c, PATCH_APPLY, patch_apply);
  if (!m)
    return rpc_no_body(c);
  const char *text = m->patch ? m->patch : "";
  const char *dir = m->dir ? m->dir : "";
  struct sbx_patch *p = NULL;
  int r = sbx_patch_parse(text, strlen(text), &p, &c->err);
  if (r < 0)
    return r;
  struct pstate s = {.c = c};
  Sbx__V1__PatchFileResult **results =
      sbx_arena_new_array(&c->arena, Sbx__V1__PatchFileResult *, p->nops);
  Sbx__V1__PatchApplyReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__PatchApplyReply);
  if (!results || !reply) {
    sbx_patch_free(p);
    return -ENOMEM;
  }
  r = plan(&s, p, dir,
           m->sdk_line_ends ? SBX_PATCH_EOL_SDK : SBX_PATCH_EOL_CODEX, results);
  if (r == 0 && !m->dry_run)
    r = commit(&s);
  size_t nops = p->nops;
  sbx_patch_free(p);
  pstate_free(&s);
  if (r < 0)
    return r;
  sbx__v1__patch_apply_reply__init(reply);
  reply->results = results;
  reply->n_results = nops;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_PATCH_APPLY;
  c->resp->patch_apply = reply;
  return 0;
}
