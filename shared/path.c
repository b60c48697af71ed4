#include "shared/path.h"

#include <errno.h>
#include <string.h>

/* Splits IN into components and writes the normalized result to OUT.
 * ABS: keep a leading '/' and clamp ".." at the root instead of refusing. */
static int normalize(const char *in, size_t len, char *out, size_t outsz,
                     bool abs, unsigned flags, struct sbx_error *e,
                     const char *what) {
  if (outsz < 2)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "no room for a path");
  if (memchr(in, '\0', len))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s contains a NUL byte", what);
  if (len >= SBX_PATH_MAX)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "%s is longer than %d bytes", what, SBX_PATH_MAX - 1);
  if (flags & SBX_PATH_POSIX_ONLY) {
    if (memchr(in, '\\', len))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s \"%.*s\" must use \"/\" separators", what,
                           (int)len, in);
    if (len >= 2 && in[1] == ':' &&
        ((in[0] >= 'A' && in[0] <= 'Z') || (in[0] >= 'a' && in[0] <= 'z')))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s \"%.*s\" must not be a Windows drive path", what,
                           (int)len, in);
  }
  size_t o = 0;
  if (abs)
    out[o++] = '/';
  size_t depth = 0;
  size_t i = 0;
  while (i < len) {
    while (i < len && in[i] == '/')
      i++;
    size_t s = i;
    while (i < len && in[i] != '/')
      i++;
    size_t n = i - s;
    if (n == 0 || (n == 1 && in[s] == '.'))
      continue;
    if (n > SBX_NAME_MAX)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "%s has a component longer than %d bytes", what,
                           SBX_NAME_MAX);
    if (n == 2 && in[s] == '.' && in[s + 1] == '.') {
      if (flags & SBX_PATH_NO_DOTDOT)
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "%s \"%.*s\" must not contain parent segments",
                             what, (int)len, in);
      if (depth == 0) {
        if (abs)
          continue;
        return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                             "%s \"%.*s\" must not escape root", what,
                             (int)(len > 200 ? 200 : len), in);
      }
      /* Drop the last component (and its separator). */
      while (o > (abs ? 1 : 0) && out[o - 1] != '/')
        o--;
      if (o > (abs ? 1 : 0))
        o--;
      depth--;
      continue;
    }
    size_t need = o + (o > (abs ? 1 : 0) ? 1 : 0) + n + 1;
    if (need > outsz)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "%s is too long", what);
    if (o > (abs ? 1 : 0))
      out[o++] = '/';
    memcpy(out + o, in + s, n);
    o += n;
    depth++;
  }
  if (!abs && o == 0)
    out[o++] = '.';
  out[o] = '\0';
  return 0;
}

int sbx_path_normalize_rel(const char *in, size_t len, char *out, size_t outsz,
                           unsigned flags, struct sbx_error *e) {
  if (len == 0 && !(flags & SBX_PATH_EMPTY_IS_ROOT))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "path is empty");
  if (len > 0 && in[0] == '/')
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "path \"%.*s\" must be relative",
                         (int)(len > 200 ? 200 : len), in);
  return normalize(in, len, out, outsz, false, flags, e, "path");
}

int sbx_path_normalize_abs(const char *in, size_t len, char *out, size_t outsz,
                           struct sbx_error *e) {
  if (len == 0 || in[0] != '/')
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "path \"%.*s\" must be absolute",
                         (int)(len > 200 ? 200 : len), in);
  return normalize(in, len, out, outsz, true, 0, e, "path");
}

bool sbx_path_is_under(const char *parent, const char *child) {
  size_t n = strlen(parent);
  if (n == 1 && parent[0] == '/')
    return child[0] == '/';
  if (strncmp(parent, child, n) != 0)
    return false;
  return child[n] == '\0' || child[n] == '/';
}

/* REL of CHILD beneath PARENT (both normalized absolute), "." for equal. */
static void rel_under(const char *parent, const char *child, char *out,
                      size_t outsz) {
  size_t n = strlen(parent);
  const char *r = (n == 1) ? child + 1 : child + n;
  if (*r == '/')
    r++;
  if (!*r)
    r = ".";
  size_t l = strlen(r);
  if (l >= outsz)
    l = outsz - 1;
  memcpy(out, r, l);
  out[l] = '\0';
}

int sbx_path_resolve(const char *root, const struct sbx_grant *grants,
                     size_t ngrants, const char *in, size_t len, bool for_write,
                     struct sbx_resolved *out, struct sbx_error *e) {
  if (len == 0 || in[0] != '/') {
    out->grant = -1;
    return sbx_path_normalize_rel(in, len, out->rel, sizeof(out->rel),
                                  SBX_PATH_EMPTY_IS_ROOT, e);
  }
  char abs[SBX_PATH_MAX];
  int r = sbx_path_normalize_abs(in, len, abs, sizeof(abs), e);
  if (r < 0)
    return r;
  if (root && sbx_path_is_under(root, abs)) {
    out->grant = -1;
    rel_under(root, abs, out->rel, sizeof(out->rel));
    return 0;
  }
  int best = -1;
  size_t best_len = 0;
  for (size_t i = 0; i < ngrants; i++) {
    size_t gl = strlen(grants[i].path);
    if (gl > best_len && sbx_path_is_under(grants[i].path, abs)) {
      best = (int)i;
      best_len = gl;
    }
  }
  if (best < 0)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                         "path \"%s\" escapes the workspace root", abs);
  if (for_write && grants[best].read_only)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EROFS,
                         "path \"%s\" uses read-only extra path grant \"%s\"",
                         abs, grants[best].path);
  out->grant = best;
  rel_under(grants[best].path, abs, out->rel, sizeof(out->rel));
  return 0;
}

int sbx_path_join(const char *a, const char *b, char *out, size_t outsz) {
  bool a_root = strcmp(a, ".") == 0;
  bool b_root = strcmp(b, ".") == 0;
  const char *x = a_root ? b : a;
  const char *y = (a_root || b_root) ? "" : b;
  size_t xl = strlen(x), yl = strlen(y);
  size_t need = xl + (yl ? 1 + yl : 0) + 1;
  if (need > outsz)
    return -ENAMETOOLONG;
  memcpy(out, x, xl);
  if (yl) {
    out[xl] = '/';
    memcpy(out + xl + 1, y, yl);
  }
  out[need - 1] = '\0';
  return 0;
}
