/* The skills capability's object in "capabilities" (skills.h): its keys
 * checked, its sources resolved against the agent file's directory, and a
 * lazy source indexed from the host. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/agent_internal.h"
#include "controller/config/manifest.h"
#include "controller/config/skills.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/path.h"
#include "shared/utf8.h"

void skills_index_free(struct skill_meta *index, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(index[i].name);
    free(index[i].description);
    free(index[i].dir);
  }
  free(index);
}

struct agent_skills *skills_free(struct agent_skills *s) {
  if (!s)
    return NULL;
  free(s->skills_path);
  json_decref(s->from);
  free(s->lazy_src);
  skills_index_free(s->index, s->nindex);
  free(s);
  return NULL;
}

/* Whether S (N bytes) is UTF-8 text without NUL or other C0 controls than
 * tab and line ends. */
static bool is_text(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
      return false;
    bool valid = true;
    i += sbx_utf8_scan((const unsigned char *)s + i, n - i, &valid);
    if (!valid)
      return false;
  }
  return true;
}

static bool has_newline(const char *s) {
  return strpbrk(s, "\r\n") != NULL;
}

int skills_meta_from_md(const char *md, size_t len, const char *dir,
                        struct skill_meta *out, char *err, size_t errsz) {
  memset(out, 0, sizeof(*out));
  if (len > SKILLS_MAX_SKILL_MD) {
    (void)snprintf(err, errsz, "is over %u bytes", SKILLS_MAX_SKILL_MD);
    return -EFBIG;
  }
  if (!is_text(md, len)) {
    (void)snprintf(err, errsz, "is not UTF-8 text");
    return -EINVAL;
  }
  char *name = NULL, *desc = NULL;
  if (skills_frontmatter(md, len, &name, &desc) < 0)
    return -ENOMEM;
  out->name = name ? name : strdup(dir);
  out->description = desc ? desc : strdup(SKILLS_DEFAULT_DESCRIPTION);
  out->dir = strdup(dir);
  if (!out->name || !out->description || !out->dir) {
    free(out->name), free(out->description), free(out->dir);
    memset(out, 0, sizeof(*out));
    return -ENOMEM;
  }
  const char *bad = strlen(out->name) > SKILLS_MAX_NAME
                        ? "a name over 256 bytes"
                    : has_newline(out->name) ? "a name over several lines"
                    : strlen(out->description) > SKILLS_MAX_DESCRIPTION
                        ? "a description over 4096 bytes"
                        : NULL;
  if (bad) {
    (void)snprintf(err, errsz, "has %s", bad);
    free(out->name), free(out->description), free(out->dir);
    memset(out, 0, sizeof(*out));
    return -EINVAL;
  }
  return 0;
}

/* Reads DIR/SKILL.md under ROOT without following symbolic links, at most
 * SKILLS_MAX_SKILL_MD bytes (+1 to tell). *MD new; 1 when there is no
 * regular SKILL.md (skipped, as the SDK skips it). */
static int read_skill_md(int root, const char *dir, char **md, size_t *len) {
  char rel[NAME_MAX + 16];
  (void)snprintf(rel, sizeof(rel), "%s/SKILL.md", dir);
  struct stat st;
  if (fstatat(root, rel, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
    return 1;
  _cleanup_close_ int fd = sbx_openat2(root, rel, O_RDONLY | O_NOCTTY, 0,
                                       RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH);
  if (fd < 0)
    return 1;
  size_t cap = SKILLS_MAX_SKILL_MD + 1, n = 0;
  _cleanup_free_ char *buf = malloc(cap + 1);
  if (!buf)
    return -ENOMEM;
  while (n < cap) {
    ssize_t k = read(fd, buf + n, cap - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    if (k == 0)
      break;
    n += (size_t)k;
  }
  buf[n] = '\0';
  *md = TAKE_PTR(buf);
  *len = n;
  return 0;
}

static int by_string(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int by_dir(const void *x, const void *y) {
  return strcmp(((const struct skill_meta *)x)->dir,
                ((const struct skill_meta *)y)->dir);
}

/* Indexes the lazy source S->lazy_src: each child directory with a
 * regular SKILL.md. */
static int index_lazy(const struct agent_ctx *c, const char *key,
                      struct agent_skills *s) {
  _cleanup_close_ int root =
      open(s->lazy_src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    return agent_fail(c, SBX_OK, errno,
                      "\"%s.lazy_from\": cannot open \"%s\": %s", key,
                      s->lazy_src, strerror(errno));
  int dfd = dup(root);
  DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
  if (!d) {
    if (dfd >= 0)
      close(dfd);
    return agent_nomem(c);
  }
  s->index = calloc(SKILLS_MAX_SKILLS, sizeof(*s->index));
  int r = s->index ? 0 : agent_nomem(c);
  struct dirent *de;
  while (r == 0 && (de = readdir(d))) {
    struct stat st;
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
        fstatat(root, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
      continue;
    _cleanup_free_ char *md = NULL;
    size_t len = 0;
    int k = read_skill_md(root, de->d_name, &md, &len);
    if (k == 1)
      continue;
    if (k < 0) {
      r = agent_fail(c, SBX_OK, -k,
                     "\"%s.lazy_from\": cannot read %s/SKILL.md: %s", key,
                     de->d_name, strerror(-k));
      break;
    }
    if (s->nindex == SKILLS_MAX_SKILLS) {
      r = agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                     "\"%s.lazy_from\": \"%s\" holds more than %d skills", key,
                     s->lazy_src, SKILLS_MAX_SKILLS);
      break;
    }
    char err[128];
    k = skills_meta_from_md(md, len, de->d_name, &s->index[s->nindex], err,
                            sizeof(err));
    if (k == -ENOMEM)
      r = agent_nomem(c);
    else if (k < 0)
      r = agent_fail(c, k == -EFBIG ? SBX_LIMIT_EXCEEDED : SBX_INVALID_ARGUMENT,
                     -k, "\"%s.lazy_from\": bad SKILL.md: %s/%s/SKILL.md %s",
                     key, s->lazy_src, de->d_name, err);
    else
      s->nindex++;
  }
  (void)closedir(d);
  if (r == 0)
    qsort(s->index, s->nindex, sizeof(*s->index), by_dir);
  return r;
}

/* SRC (relative to the agent file's directory, or absolute) as an absolute
 * real path to a directory in *OUT (new). */
static int resolve_src(const struct agent_ctx *c, const char *key,
                       const char *src, char **out) {
  char joined[PATH_MAX];
  const char *slash = strrchr(c->path, '/');
  if (src[0] == '/' || !slash)
    (void)snprintf(joined, sizeof(joined), "%s", src);
  else
    (void)snprintf(joined, sizeof(joined), "%.*s/%s", (int)(slash - c->path),
                   c->path, src);
  char real[PATH_MAX];
  struct stat st;
  if (!realpath(joined, real) || stat(real, &st) < 0)
    return agent_fail(c, SBX_NOT_FOUND, errno, "\"%s.src\": \"%s\": %s", key,
                      src, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return agent_invalid(c, "\"%s.src\": \"%s\" is not a directory", key, src);
  *out = strdup(real);
  return *out ? 0 : agent_nomem(c);
}

/* "lazy_from": {"type": "local_dir", "src"}. */
static int parse_lazy(const struct agent_ctx *c, const char *key, json_t *v,
                      struct agent_skills *s) {
  char k[KEY_MAX];
  agent_key_path(k, "%s.lazy_from", key);
  if (!json_is_object(v))
    return agent_wrong_type(c, k, "an object", v);
  const char *type = json_string_value(json_object_get(v, "type"));
  if (!type || strcmp(type, "local_dir") != 0)
    return agent_invalid(c,
                         "\"%s.type\": lazy skill sources are local_dir "
                         "only (got %s%s%s)",
                         k, type ? "\"" : "", type ? type : "none",
                         type ? "\"" : "");
  const char *name;
  json_t *item;
  json_object_foreach(v, name, item) {
    if (strcmp(name, "type") != 0 && strcmp(name, "src") != 0)
      return agent_invalid(c,
                           "\"%s\": unknown key \"%.64s\" (lazy_from takes "
                           "\"type\" and \"src\")",
                           k, name);
  }
  const char *src = json_string_value(json_object_get(v, "src"));
  if (!src || !*src)
    return agent_invalid(c, "\"%s.src\" must be a non-empty string", k);
  int r = resolve_src(c, k, src, &s->lazy_src);
  return r < 0 ? r : index_lazy(c, key, s);
}

/* "from": a local_dir or git_repo manifest entry, checked as the manifest
 * checks it at SKILLS_PATH. */
static int parse_from(const struct agent_ctx *c, const char *key, json_t *v,
                      struct agent_skills *s) {
  char k[KEY_MAX];
  agent_key_path(k, "%s.from", key);
  if (!json_is_object(v))
    return agent_wrong_type(c, k, "an object", v);
  const char *type = json_string_value(json_object_get(v, "type"));
  if (!type || (strcmp(type, "local_dir") != 0 && strcmp(type, "git_repo")))
    return agent_invalid(c,
                         "\"%s.type\": skills from must be a directory-like "
                         "entry: local_dir or git_repo (got %s%s%s)",
                         k, type ? "\"" : "", type ? type : "none",
                         type ? "\"" : "");
  s->from = json_deep_copy(v);
  if (!s->from)
    return agent_nomem(c);
  if (strcmp(type, "local_dir") == 0) {
    const char *src = json_string_value(json_object_get(v, "src"));
    if (!src || !*src)
      return agent_invalid(c, "\"%s.src\" must be a non-empty string", k);
    _cleanup_free_ char *abs = NULL;
    int r = resolve_src(c, k, src, &abs);
    if (r < 0)
      return r;
    if (json_object_set_new(s->from, "src", json_string(abs)) < 0)
      return agent_nomem(c);
  }
  /* Every other key as a manifest entry has it. */
  _cleanup_json_ json_t *m =
      json_pack("{s:{s:O}}", "entries", s->skills_path, s->from);
  struct manifest *parsed = NULL;
  struct sbx_error me = {0};
  char where[KEY_MAX + 8];
  (void)snprintf(where, sizeof(where), "\"%s\"", k);
  int r = m ? manifest_parse(m, where, &parsed, &me) : -ENOMEM;
  manifest_free(parsed);
  if (r == -ENOMEM)
    return agent_nomem(c);
  if (r < 0)
    return agent_invalid(c, "%s", me.msg);
  return 0;
}

static int parse_skills_path(const struct agent_ctx *c, const char *key,
                             json_t *v, struct agent_skills *s) {
  char k[KEY_MAX], norm[SBX_PATH_MAX];
  agent_key_path(k, "%s.skills_path", key);
  const char *p = json_string_value(v);
  if (!p)
    return agent_wrong_type(c, k, "a string", v);
  if (sbx_path_normalize_rel(p, strlen(p), norm, sizeof(norm), 0, NULL) < 0 ||
      strcmp(norm, ".") == 0)
    return agent_invalid(c,
                         "\"%s\" must be a non-empty relative path that "
                         "stays in the workspace (got \"%.200s\")",
                         k, p);
  free(s->skills_path);
  s->skills_path = strdup(norm);
  return s->skills_path ? 0 : agent_nomem(c);
}

/* Whether the relative paths A and B (normalized) are one inside the
 * other, or the same. */
static bool overlap(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  size_t n = na < nb ? na : nb;
  return strncmp(a, b, n) == 0 &&
         (na == nb || (na < nb ? b[na] : a[nb]) == '/');
}

int agent_check_skills(const struct agent_ctx *c, const struct agent *a) {
  json_t *entries = json_object_get(a->default_manifest, "entries");
  if (!a->skills || !json_is_object(entries))
    return 0;
  const char *sp = a->skills->skills_path, *key;
  json_t *v;
  /* The SDK's message names the first overlap for "from" and all of them,
   * sorted, for "lazy_from". */
  _cleanup_json_ json_t *found = json_array();
  if (!found)
    return agent_nomem(c);
  json_object_foreach(entries, key, v) {
    char norm[SBX_PATH_MAX];
    if (sbx_path_normalize_rel(key, strlen(key), norm, sizeof(norm), 0, NULL) <
        0)
      continue; /* the manifest's to refuse */
    if (overlap(norm, sp) && json_array_append_new(found, json_string(norm)))
      return agent_nomem(c);
  }
  size_t n = json_array_size(found);
  if (n == 0)
    return 0;
  if (a->skills->from)
    return agent_invalid(c,
                         "skills path overlaps existing manifest entries: "
                         "%s",
                         json_string_value(json_array_get(found, 0)));
  _cleanup_free_ const char **names = calloc(n, sizeof(*names));
  if (!names)
    return agent_nomem(c);
  for (size_t i = 0; i < n; i++)
    names[i] = json_string_value(json_array_get(found, i));
  qsort(names, n, sizeof(*names), by_string);
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 64u << 10);
  for (size_t i = 0; i < n; i++)
    if (sbx_buf_printf(&b, "%s%s", i ? ", " : "", names[i]) < 0)
      break;
  _cleanup_free_ char *list = sbx_buf_steal(&b, NULL);
  return agent_invalid(c,
                       "skills lazy_from path overlaps existing manifest "
                       "entries: %s",
                       list ? list : "");
}

int agent_parse_skills(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v) {
  _cleanup_(skills_freep) struct agent_skills *s = calloc(1, sizeof(*s));
  if (!s || !(s->skills_path = strdup(".agents")))
    return agent_nomem(c);
  const char *name;
  json_t *item;
  json_object_foreach(v, name, item) {
    if (strcmp(name, "skills") == 0)
      return agent_invalid(c,
                           "\"%s.skills\": inline skills are not supported "
                           "(give \"from\" or \"lazy_from\")",
                           key);
    if (strcmp(name, "type") != 0 && strcmp(name, "from") != 0 &&
        strcmp(name, "lazy_from") != 0 && strcmp(name, "skills_path") != 0)
      return agent_invalid(c, "\"%s\": unknown key \"%.64s\"", key, name);
  }
  json_t *sp = json_object_get(v, "skills_path");
  json_t *from = json_object_get(v, "from");
  json_t *lazy = json_object_get(v, "lazy_from");
  int r = sp && !json_is_null(sp) ? parse_skills_path(c, key, sp, s) : 0;
  if (r < 0)
    return r;
  from = json_is_null(from) ? NULL : from;
  lazy = json_is_null(lazy) ? NULL : lazy;
  if (!from && !lazy)
    return agent_invalid(c,
                         "\"%s\": skills capability requires `skills`, "
                         "`from`, or `lazy_from` (sbx takes `from` or "
                         "`lazy_from`)",
                         key);
  if (from && lazy)
    return agent_invalid(c,
                         "\"%s\": skills capability accepts only one of "
                         "`skills`, `from`, or `lazy_from`",
                         key);
  r = from ? parse_from(c, key, from, s) : parse_lazy(c, key, lazy, s);
  if (r < 0)
    return r;
  skills_free(a->skills);
  a->skills = TAKE_PTR(s);
  return 0;
}
