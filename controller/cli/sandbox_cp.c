/* sbx sandbox cp: files and directories between the host and a
 * sandbox, as docker cp copies them. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/sandbox/progress.h"
#include "controller/sandbox/tarball.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/json.h"
#include "shared/path.h"

/* Whether cp shows its progress (stderr is a terminal, not --json). */
static bool arg_progress;

/* ---- cp
 * ---------------------------------------------------------------------- */

/* Splits "ID:PATH": true when S names a sandbox (an id before a colon,
 * not a path with a slash before it). */
static bool split_remote(const char *s, char *id, size_t idn,
                         const char **path) {
  const char *colon = strchr(s, ':');
  if (!colon || colon == s || memchr(s, '/', (size_t)(colon - s)) ||
      (size_t)(colon - s) >= idn)
    return false;
  memcpy(id, s, (size_t)(colon - s));
  id[colon - s] = '\0';
  *path = colon + 1;
  return true;
}

/* A sandbox path as sandboxd takes it: relative to the root; absolute under
 * the workspace or the manifest root becomes relative; other absolute
 * paths go as they are (grants). */
static int sandbox_path(const struct sandbox *sb, const struct manifest *m,
                        const char *in, char *out, size_t n) {
  const char *roots[2] = {sb->root, m->root};
  if (in[0] == '/') {
    char abs[SBX_PATH_MAX];
    if (sbx_path_normalize_abs(in, strlen(in), abs, sizeof(abs), NULL) < 0)
      return -EINVAL;
    for (int i = 0; i < 2; i++) {
      if (!roots[i] || !sbx_path_is_under(roots[i], abs))
        continue;
      size_t l = strlen(roots[i]);
      const char *r = abs + (l == 1 ? 1 : l);
      if (*r == '/')
        r++;
      (void)snprintf(out, n, "%s", *r ? r : ".");
      return 0;
    }
    (void)snprintf(out, n, "%s", abs);
    return 0;
  }
  return sbx_path_normalize_rel(in, strlen(in), out, n, SBX_PATH_EMPTY_IS_ROOT,
                                NULL) < 0
             ? -EINVAL
             : 0;
}

static bool ends_with_dot(const char *p) {
  size_t n = strlen(p);
  return (n == 1 && p[0] == '.') ||
         (n >= 2 && p[n - 1] == '.' && p[n - 2] == '/');
}

static bool ends_with_slash(const char *p) {
  size_t n = strlen(p);
  return n > 0 && p[n - 1] == '/';
}

static const char *base_name(const char *p, char *buf, size_t n) {
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/')
    l--;
  const char *s = p;
  for (size_t i = 0; i < l; i++)
    if (p[i] == '/')
      s = p + i + 1;
  (void)snprintf(buf, n, "%.*s", (int)(l - (size_t)(s - p)), s);
  return buf;
}

static void parent_of(const char *p, char *out, size_t n) {
  char tmp[SBX_PATH_MAX];
  (void)snprintf(tmp, sizeof(tmp), "%s", p);
  size_t l = strlen(tmp);
  while (l > 1 && tmp[l - 1] == '/')
    tmp[--l] = '\0';
  char *s = strrchr(tmp, '/');
  if (!s)
    (void)snprintf(out, n, ".");
  else if (s == tmp)
    (void)snprintf(out, n, "/");
  else {
    *s = '\0';
    (void)snprintf(out, n, "%s", tmp);
  }
}

static int remote_type(struct sandbox *sb, const char *path,
                       Sbx__V1__FileType *type, struct sbx_error *e) {
  bool exists = false;
  int r = sbx_file_exists(sb->client, path, &exists, type, e);
  if (r < 0)
    return r;
  if (!exists)
    *type = SBX__V1__FILE_TYPE__FILE_TYPE_UNKNOWN;
  return 0;
}

static int cp_in(struct sandbox *sb, const struct manifest *m, const char *src,
                 const char *dst_in, uint64_t *count, struct sbx_error *e) {
  struct stat st;
  if (lstat(src, &st) < 0)
    return sbx_error_set(e, SBX_NOT_FOUND, errno, "cannot stat \"%s\": %m",
                         src);
  char dst[SBX_PATH_MAX];
  if (sandbox_path(sb, m, dst_in, dst, sizeof(dst)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a valid sandbox path", dst_in);
  Sbx__V1__FileType dt;
  int r = remote_type(sb, dst, &dt, e);
  if (r < 0)
    return r;
  bool dst_dir = dt == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
  bool dst_missing = dt == SBX__V1__FILE_TYPE__FILE_TYPE_UNKNOWN;
  Sbx__V1__Response *resp = NULL;
  r = sbx_hello(sb->client, &resp, e);
  if (r < 0)
    return r;
  uint32_t uid = resp->hello->uid, gid = resp->hello->gid;
  sbx_client_reply_free(resp);
  struct host_tree t = {0};
  char dest[SBX_PATH_MAX], name[SBX_NAME_MAX + 1], parent[SBX_PATH_MAX];
  _cleanup_close_ int root = -1;
  if (S_ISDIR(st.st_mode)) {
    if (!dst_missing && !dst_dir)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "cannot copy a directory to a file: \"%s\"", dst_in);
    if (dst_dir && !ends_with_dot(src))
      (void)sbx_path_join(dst, base_name(src, name, sizeof(name)), dest,
                          sizeof(dest));
    else
      (void)snprintf(dest, sizeof(dest), "%s", dst);
    root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", src);
    r = host_tree_scan(&t, root, ".", "", HOST_TREE_SKIP_OTHER, src, e);
  } else {
    if (ends_with_slash(dst_in) && !dst_dir)
      return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                           "destination directory \"%s\" does not exist",
                           dst_in);
    if (dst_dir) {
      (void)snprintf(dest, sizeof(dest), "%s", dst);
      base_name(src, name, sizeof(name));
    } else {
      parent_of(dst, dest, sizeof(dest));
      base_name(dst, name, sizeof(name));
      Sbx__V1__FileType pt;
      r = remote_type(sb, dest, &pt, e);
      if (r < 0)
        return r;
      if (pt != SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY)
        return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                             "destination directory \"%s\" does not exist",
                             dest);
    }
    parent_of(src, parent, sizeof(parent));
    char sname[SBX_NAME_MAX + 1];
    root = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", parent);
    r = host_tree_add(&t, root, base_name(src, sname, sizeof(sname)), name, e);
  }
  if (r == 0) {
    _cleanup_close_ int fd = -1;
    uint64_t size = 0;
    r = tarball_build(&t, uid, gid, src, &fd, &size, e);
    if (r == 0) {
      struct progress_meter pm;
      progress_meter_start(&pm, arg_progress ? progress_snapshot : NULL, NULL,
                           "copying in");
      r = tarball_push(sb->client, fd, size, dest, &pm, e);
    }
    for (size_t i = 0; i < t.n; i++)
      *count += S_ISREG(t.items[i].st.st_mode);
  }
  host_tree_free(&t);
  return r;
}

static int cp_out_file(struct sandbox *sb, const char *src, const char *target,
                       unsigned mode, struct sbx_error *e) {
  char tmp[SBX_PATH_MAX * 2 + 32];
  int tl = snprintf(tmp, sizeof(tmp), "%s.sbx-cp-XXXXXX", target);
  if (tl < 0 || (size_t)tl >= sizeof(tmp))
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                         "path too long: \"%s\"", target);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", tmp);
  uint64_t off = 0;
  int r = 0;
  for (;;) {
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = (char *)src;
    rd.offset = off;
    rd.length = TARBALL_CHUNK;
    Sbx__V1__Response *resp = NULL;
    r = sbx_file_read(sb->client, &rd, &resp, e);
    if (r < 0)
      break;
    size_t n = resp->file_read->data.len;
    bool eof = resp->file_read->eof;
    r = sbx_write_all(fd, resp->file_read->data.data, n);
    sbx_client_reply_free(resp);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\"", tmp);
      break;
    }
    off += n;
    if (eof || n == 0)
      break;
  }
  if (r == 0 && fchmod(fd, mode & 01777) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot chmod \"%s\": %m", tmp);
  close(fd);
  if (r == 0 && rename(tmp, target) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %m", target);
  if (r < 0)
    (void)unlink(tmp);
  return r;
}

static int cp_out(struct sandbox *sb, const struct manifest *m,
                  const char *src_in, const char *dst, uint64_t *count,
                  struct sbx_error *e) {
  char src[SBX_PATH_MAX];
  if (sandbox_path(sb, m, src_in, src, sizeof(src)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a valid sandbox path", src_in);
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_stat(sb->client, src, &resp, e);
  if (r < 0)
    return r;
  Sbx__V1__FileType type = resp->file_stat->type;
  unsigned mode = resp->file_stat->mode;
  char link[SBX_PATH_MAX];
  (void)snprintf(link, sizeof(link), "%s",
                 resp->file_stat->link_target ? resp->file_stat->link_target
                                              : "");
  sbx_client_reply_free(resp);
  struct stat dst_st;
  bool dst_exists = lstat(dst, &dst_st) == 0;
  bool dst_dir = dst_exists && S_ISDIR(dst_st.st_mode);
  char target[SBX_PATH_MAX * 2], name[SBX_NAME_MAX + 1];
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY) {
    if (dst_exists && !dst_dir)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "cannot copy a directory to a file: \"%s\"", dst);
    if (dst_dir && !ends_with_dot(src_in))
      (void)snprintf(target, sizeof(target), "%s/%s", dst,
                     base_name(src, name, sizeof(name)));
    else
      (void)snprintf(target, sizeof(target), "%s", dst);
    if (mkdir(target, 0755) < 0 && errno != EEXIST)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m",
                           target);
    struct progress_meter pm;
    progress_meter_start(&pm, arg_progress ? progress_snapshot : NULL, NULL,
                         "copying out");
    return tarball_pull(sb->client, src, target, &pm, count, e);
  }
  if (ends_with_slash(dst) && !dst_dir)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "destination directory \"%s\" does not exist", dst);
  if (dst_dir)
    (void)snprintf(target, sizeof(target), "%s/%s", dst,
                   base_name(src, name, sizeof(name)));
  else
    (void)snprintf(target, sizeof(target), "%s", dst);
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK) {
    (void)unlink(target);
    if (symlink(link, target) < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m",
                           target);
    return 0;
  }
  if (type != SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a file, directory or symbolic link",
                         src_in);
  (*count)++;
  return cp_out_file(sb, src, target, mode, e);
}

int cli_sandbox_cp(struct cli_common *c, int argc, char **argv) {
  arg_progress = progress_enabled(c->json);
  int u = cli_parse_common_only(c, "cp", argc, argv, NULL);
  if (u >= 0)
    return u;
  if (argc - optind != 2)
    return cli_usage_error(c, "cp", "expected SRC and DST");
  const char *src = argv[optind], *dst = argv[optind + 1];
  char sid[64], did[64];
  const char *spath = NULL, *dpath = NULL;
  bool sr = split_remote(src, sid, sizeof(sid), &spath);
  bool dr = split_remote(dst, did, sizeof(did), &dpath);
  if (sr == dr)
    return cli_usage_error(c, "cp",
                           "exactly one of SRC and DST must be ID:PATH (copies "
                           "go between the host and a sandbox)");
  if ((sr && !*spath) || (dr && !*dpath))
    return cli_usage_error(c, "cp", "the path after \"ID:\" is empty");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach_for(c, "cp", sr ? sid : did, &rec, &sb);
  if (k)
    return k;
  uint64_t files = 0;
  int r = sr ? cp_out(sb, rec.manifest, spath, dst, &files, &e)
             : cp_in(sb, rec.manifest, src, dpath, &files, &e);
  int code = 0;
  if (r < 0)
    code = cli_fail(c, &e, r);
  else if (c->json) {
    /* Paths need not be UTF-8: others bytes show as U+FFFD. */
    _cleanup_json_ json_t *j = json_pack(
        "{s:o, s:o, s:I}", "source", sbx_json_stringn_utf8(src, strlen(src)),
        "destination", sbx_json_stringn_utf8(dst, strlen(dst)), "files",
        (json_int_t)files);
    code = cli_print_json(c, j);
  }
  return cli_detach_done(sb, &rec, code);
}
