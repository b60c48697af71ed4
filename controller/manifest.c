#include "manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cleanup.h"
#include "encode.h"
#include "path.h"

#define MANIFEST_MAX_ENTRIES 100000
#define MANIFEST_MAX_DEPTH 64
#define MANIFEST_MAX_CONTENT (64u << 20)

struct manifest *manifest_free(struct manifest *m) {
  if (!m)
    return NULL;
  for (size_t i = 0; i < m->nentries; i++) {
    free(m->entries[i].path);
    free(m->entries[i].content);
    free(m->entries[i].description);
  }
  free(m->entries);
  for (size_t i = 0; i < m->nenv; i++) {
    free(m->env_names[i]);
    free(m->env_values[i]);
  }
  free(m->env_names);
  free(m->env_values);
  free(m->root);
  free(m);
  return NULL;
}

static const char *json_type_name(json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  default:
    return "null";
  }
}

static int type_error(struct sbx_error *e, const char *where, const char *key,
                      const char *want, json_t *got) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%s: \"%s\" must be %s, not %s", where, key, want,
                       json_type_name(got));
}

/* Parses "rwxr-x---" (optionally with a leading type char and trailing
 * ./@/+) or an integer mode; -1 on error. */
static int parse_mode_string(const char *s) {
  size_t n = strlen(s);
  if (n == 10 || (n == 11 && strchr(".@+", s[10])))
    s++, n--;
  if (n == 10 && strchr(".@+", s[9]))
    n--;
  if (n != 9)
    return -1;
  int mode = 0;
  static const char want[] = "rwxrwxrwx";
  for (int i = 0; i < 9; i++) {
    char c = s[i];
    int bit = 1 << (8 - i);
    if (c == want[i])
      mode |= bit;
    else if ((i == 2 || i == 5) && (c == 's' || c == 'S'))
      mode |= c == 's' ? bit : 0;
    else if (i == 8 && (c == 't' || c == 'T'))
      mode |= (c == 't' ? bit : 0) | 01000;
    else if (c != '-')
      return -1;
  }
  return mode;
}

static int parse_permissions(json_t *v, const char *where, int *mode,
                             struct sbx_error *e) {
  if (json_is_integer(v)) {
    json_int_t m = json_integer_value(v);
    if (m < 0 || m > 07777)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: \"permissions\" %lld is not a mode", where,
                           (long long)m);
    *mode = (int)m;
    return 0;
  }
  if (json_is_string(v)) {
    int m = parse_mode_string(json_string_value(v));
    if (m < 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: \"permissions\" \"%s\" is not a mode string "
                           "like \"rwxr-x---\"",
                           where, json_string_value(v));
    *mode = m;
    return 0;
  }
  if (!json_is_object(v))
    return type_error(e, where, "permissions",
                      "an object, a mode string or an integer", v);
  /* Missing fields default to owner 7, group 0, other 0 (the SDK's). */
  int bits[3] = {7, 0, 0};
  static const char *names[3] = {"owner", "group", "other"};
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    int idx = -1;
    for (int i = 0; i < 3; i++)
      if (strcmp(k, names[i]) == 0)
        idx = i;
    if (strcmp(k, "directory") == 0 || strcmp(k, "sticky") == 0) {
      if (!json_is_boolean(x))
        return type_error(e, where, k, "a boolean", x);
      if (strcmp(k, "sticky") == 0 && json_is_true(x))
        bits[0] |= 0; /* applied below */
      continue;
    }
    if (idx < 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: unknown permissions key \"%s\"", where, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > 7)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: permissions \"%s\" must be an integer 0..7",
                           where, k);
    bits[idx] = (int)json_integer_value(x);
  }
  *mode = bits[0] << 6 | bits[1] << 3 | bits[2];
  if (json_is_true(json_object_get(v, "sticky")))
    *mode |= 01000;
  return 0;
}

static int add_entry(struct manifest *m, struct manifest_entry *ent,
                     size_t *cap) {
  if (m->nentries >= MANIFEST_MAX_ENTRIES)
    return -E2BIG;
  if (m->nentries == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    struct manifest_entry *n = realloc(m->entries, nc * sizeof(*n));
    if (!n)
      return -ENOMEM;
    m->entries = n;
    *cap = nc;
  }
  m->entries[m->nentries++] = *ent;
  return 0;
}

static int parse_entries(struct manifest *m, json_t *obj, const char *parent,
                         const char *where, unsigned depth, size_t *cap,
                         struct sbx_error *e);

static int parse_entry(struct manifest *m, const char *key, json_t *v,
                       const char *parent, const char *where, unsigned depth,
                       size_t *cap, struct sbx_error *e) {
  char ewhere[600];
  (void)snprintf(ewhere, sizeof(ewhere), "%s: entry \"%s\"", where, key);
  char rel[SBX_PATH_MAX];
  int r = sbx_path_normalize_rel(key, strlen(key), rel, sizeof(rel),
                                 SBX_PATH_NO_DOTDOT | SBX_PATH_POSIX_ONLY, e);
  if (r < 0) {
    char msg[SBX_ERROR_MSG_MAX] = "";
    if (e)
      memcpy(msg, e->msg, sizeof(msg));
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r, "%s: %s", ewhere, msg);
  }
  if (strcmp(rel, ".") == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s: the path must not be the root", ewhere);
  if (!json_is_object(v))
    return type_error(e, ewhere, key, "an object", v);
  json_t *type = json_object_get(v, "type");
  if (!json_is_string(type))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s: \"type\" is required (file, dir, ...)", ewhere);
  const char *t = json_string_value(type);
  struct manifest_entry ent = {.mode = -1};
  if (strcmp(t, "file") == 0)
    ent.type = MANIFEST_FILE;
  else if (strcmp(t, "dir") == 0)
    ent.type = MANIFEST_DIR;
  else if (strcmp(t, "local_file") == 0 || strcmp(t, "local_dir") == 0 ||
           strcmp(t, "git_repo") == 0 || strcmp(t, "mount") == 0 ||
           strcmp(t, "local_bind") == 0 || strstr(t, "_mount"))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "%s: entry type \"%s\" is not supported yet", ewhere,
                         t);
  else
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s: unknown entry type \"%s\"", ewhere, t);

  char full[SBX_PATH_MAX];
  if (sbx_path_join(parent, rel, full, sizeof(full)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "%s: path too long", ewhere);
  json_t *children = NULL;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (strcmp(k, "type") == 0)
      continue;
    if (strcmp(k, "description") == 0) {
      if (!json_is_string(x))
        return type_error(e, ewhere, k, "a string", x);
    } else if (strcmp(k, "ephemeral") == 0) {
      if (!json_is_boolean(x))
        return type_error(e, ewhere, k, "a boolean", x);
      ent.ephemeral = json_is_true(x);
    } else if (strcmp(k, "permissions") == 0) {
      r = parse_permissions(x, ewhere, &ent.mode, e);
      if (r < 0)
        return r;
    } else if (strcmp(k, "group") == 0) {
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "%s: \"group\" is not supported yet", ewhere);
    } else if (ent.type == MANIFEST_FILE &&
               (strcmp(k, "content") == 0 ||
                strcmp(k, "content_base64") == 0)) {
      if (!json_is_string(x))
        return type_error(e, ewhere, k, "a string", x);
    } else if (ent.type == MANIFEST_DIR && strcmp(k, "children") == 0) {
      if (!json_is_object(x))
        return type_error(e, ewhere, k, "an object", x);
      children = x;
    } else {
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: unknown key \"%s\" for a %s entry", ewhere, k,
                           t);
    }
  }
  if (ent.type == MANIFEST_FILE) {
    json_t *c = json_object_get(v, "content");
    json_t *c64 = json_object_get(v, "content_base64");
    if (c && c64)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: give \"content\" or \"content_base64\", not "
                           "both",
                           ewhere);
    if (c64) {
      size_t l = json_string_length(c64);
      if (l / 4 * 3 > MANIFEST_MAX_CONTENT)
        return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                             "%s: content is larger than 64 MiB", ewhere);
      ent.content = malloc(l / 4 * 3 + 4);
      if (!ent.content)
        return -ENOMEM;
      long n = sbx_base64_decode(json_string_value(c64), l, ent.content);
      if (n < 0) {
        free(ent.content);
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "%s: \"content_base64\" is not valid base64",
                             ewhere);
      }
      ent.content_len = (size_t)n;
    } else {
      const char *s = c ? json_string_value(c) : "";
      size_t l = c ? json_string_length(c) : 0;
      if (l > MANIFEST_MAX_CONTENT)
        return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                             "%s: content is larger than 64 MiB", ewhere);
      ent.content = malloc(l + 1);
      if (!ent.content)
        return -ENOMEM;
      memcpy(ent.content, s, l);
      ent.content[l] = '\0';
      ent.content_len = l;
    }
  }
  json_t *d = json_object_get(v, "description");
  if (d)
    ent.description = strdup(json_string_value(d));
  ent.path = strdup(full);
  if (!ent.path || (d && !ent.description)) {
    free(ent.path);
    free(ent.content);
    free(ent.description);
    return -ENOMEM;
  }
  for (size_t i = 0; i < m->nentries; i++)
    if (strcmp(m->entries[i].path, ent.path) == 0) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EEXIST,
                        "%s: \"%s\" is given twice", ewhere, ent.path);
      free(ent.path);
      free(ent.content);
      free(ent.description);
      return r;
    }
  r = add_entry(m, &ent, cap);
  if (r < 0) {
    free(ent.path);
    free(ent.content);
    free(ent.description);
    return r == -E2BIG ? sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                                       "%s: too many entries", where)
                       : r;
  }
  if (children)
    return parse_entries(m, children, full, where, depth + 1, cap, e);
  return 0;
}

static int parse_entries(struct manifest *m, json_t *obj, const char *parent,
                         const char *where, unsigned depth, size_t *cap,
                         struct sbx_error *e) {
  if (depth > MANIFEST_MAX_DEPTH)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: entries nest deeper than %d", where,
                         MANIFEST_MAX_DEPTH);
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    int r = parse_entry(m, k, v, parent, where, depth, cap, e);
    if (r < 0)
      return r;
  }
  return 0;
}

static int parse_environment(struct manifest *m, json_t *env, const char *where,
                             struct sbx_error *e) {
  size_t n = json_object_size(env);
  m->env_names = calloc(n + 1, sizeof(char *));
  m->env_values = calloc(n + 1, sizeof(char *));
  if (!m->env_names || !m->env_values)
    return -ENOMEM;
  const char *k;
  json_t *v;
  json_object_foreach(env, k, v) {
    bool ok = (k[0] == '_' || (k[0] >= 'A' && k[0] <= 'Z') ||
               (k[0] >= 'a' && k[0] <= 'z'));
    for (const char *p = k; *p && ok; p++)
      ok = *p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
           (*p >= '0' && *p <= '9');
    if (!ok)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: environment name \"%s\" must match "
                           "[A-Za-z_][A-Za-z0-9_]*",
                           where, k);
    json_t *val = v;
    if (json_is_object(v)) {
      const char *ik;
      json_t *iv;
      json_object_foreach(v, ik, iv) {
        if (strcmp(ik, "value") != 0 && strcmp(ik, "description") != 0 &&
            strcmp(ik, "ephemeral") != 0)
          return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                               "%s: environment \"%s\": unknown key \"%s\"",
                               where, k, ik);
      }
      val = json_object_get(v, "value");
    }
    if (!json_is_string(val))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: environment \"%s\" must be a string or "
                           "{\"value\": string}",
                           where, k);
    m->env_names[m->nenv] = strdup(k);
    m->env_values[m->nenv] = strdup(json_string_value(val));
    if (!m->env_names[m->nenv] || !m->env_values[m->nenv])
      return -ENOMEM;
    m->nenv++;
  }
  return 0;
}

int manifest_parse(json_t *j, const char *where, struct manifest **out,
                   struct sbx_error *e) {
  if (!json_is_object(j))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s: a manifest must be an object", where);
  struct manifest *m = calloc(1, sizeof(*m));
  if (!m)
    return -ENOMEM;
  m->version = 1;
  size_t cap = 0;
  int r = 0;
  const char *k;
  json_t *v;
  json_object_foreach(j, k, v) {
    if (strcmp(k, "root") == 0) {
      if (!json_is_string(v)) {
        r = type_error(e, where, k, "a string", v);
        break;
      }
      char norm[SBX_PATH_MAX];
      const char *s = json_string_value(v);
      if (strchr(s, '\\') || strstr(s, "/../") ||
          sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0) {
        r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                          "%s: \"root\" \"%s\" must be an absolute POSIX path",
                          where, s);
        break;
      }
      m->root = strdup(norm);
      if (!m->root) {
        r = -ENOMEM;
        break;
      }
    } else if (strcmp(k, "version") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) != 1) {
        r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                          "%s: \"version\" must be 1", where);
        break;
      }
    } else if (strcmp(k, "entries") == 0) {
      if (!json_is_object(v)) {
        r = type_error(e, where, k, "an object", v);
        break;
      }
      r = parse_entries(m, v, ".", where, 0, &cap, e);
    } else if (strcmp(k, "environment") == 0) {
      if (!json_is_object(v)) {
        r = type_error(e, where, k, "an object", v);
        break;
      }
      r = parse_environment(m, v, where, e);
    } else if (strcmp(k, "users") == 0 || strcmp(k, "groups") == 0 ||
               strcmp(k, "extra_path_grants") == 0) {
      if (!json_is_array(v)) {
        r = type_error(e, where, k, "an array", v);
        break;
      }
      if (json_array_size(v) > 0)
        r = sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                          "%s: \"%s\" is not supported yet", where, k);
    } else {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "%s: unknown manifest key \"%s\"", where, k);
    }
    if (r < 0)
      break;
  }
  if (r == 0 && !m->root && !(m->root = strdup("/workspace")))
    r = -ENOMEM;
  if (r < 0) {
    manifest_free(m);
    return r;
  }
  *out = m;
  return 0;
}

int manifest_materialize(const struct manifest *m, struct sandbox *sb,
                         struct sbx_error *e) {
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    unsigned mode = en->mode >= 0 ? (unsigned)en->mode : 0755;
    struct sbx_error ie = {0};
    int r;
    if (en->type == MANIFEST_DIR) {
      r = sbx_file_mkdir(sb->client, en->path, true, 0755, &ie);
      if (r == 0)
        r = sbx_file_chmod(sb->client, en->path, mode & 07777, false, &ie);
    } else {
      Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
      w.path = en->path;
      w.data.data = (uint8_t *)en->content;
      w.data.len = en->content_len;
      w.mode = SBX__V1__WRITE_MODE__WRITE_TRUNCATE;
      w.perm = mode & 0777;
      w.parents = true;
      w.atomic = true;
      Sbx__V1__Response *resp = NULL;
      r = sbx_file_write(sb->client, &w, &resp, &ie);
      sbx_client_reply_free(resp);
      if (r == 0 && (mode & 07000))
        r = sbx_file_chmod(sb->client, en->path, mode & 07777, false, &ie);
    }
    if (r < 0)
      return sbx_error_set(e, ie.code, ie.err,
                           "cannot materialize entry \"%s\": %s", en->path,
                           ie.msg);
  }
  for (size_t i = 0; i < m->nenv; i++) {
    int r = sandbox_setenv(sb, m->env_names[i], m->env_values[i]);
    if (r < 0)
      return r;
  }
  return 0;
}

static int cmp_entries(const void *a, const void *b) {
  const struct manifest_entry *x = *(const struct manifest_entry *const *)a;
  const struct manifest_entry *y = *(const struct manifest_entry *const *)b;
  /* Depth-first with siblings sorted: compare component by component. */
  const char *p = x->path, *q = y->path;
  for (;;) {
    size_t lp = strcspn(p, "/"), lq = strcspn(q, "/");
    size_t n = lp < lq ? lp : lq;
    int c = strncmp(p, q, n);
    if (c)
      return c;
    if (lp != lq)
      return lp < lq ? -1 : 1;
    if (!p[lp] || !q[lq])
      return p[lp] ? 1 : (q[lq] ? -1 : 0);
    p += lp + 1;
    q += lq + 1;
  }
}

char *manifest_describe(const struct manifest *m, const char *root,
                        unsigned depth, unsigned max_lines,
                        unsigned max_chars) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, (size_t)max_chars + 4096);
  if (sbx_buf_append_str(&b, root) < 0)
    return NULL;
  _cleanup_free_ const struct manifest_entry **sorted =
      calloc(m->nentries + 1, sizeof(*sorted));
  if (!sorted)
    return NULL;
  size_t n = 0;
  for (size_t i = 0; i < m->nentries; i++) {
    unsigned d = 1;
    for (const char *p = m->entries[i].path; *p; p++)
      d += *p == '/';
    if (d <= depth)
      sorted[n++] = &m->entries[i];
  }
  qsort(sorted, n, sizeof(*sorted), cmp_entries);
  unsigned lines = 1;
  size_t shown = 0;
  for (; shown < n; shown++) {
    const struct manifest_entry *en = sorted[shown];
    unsigned d = 1;
    for (const char *p = en->path; *p; p++)
      d += *p == '/';
    const char *name = strrchr(en->path, '/');
    name = name ? name + 1 : en->path;
    char line[8192];
    int l = snprintf(
        line, sizeof(line), "\n%*s%s%s # %s/%s%s%s", (int)(2 * (d - 1)), "",
        name, en->type == MANIFEST_DIR ? "/" : "",
        strcmp(root, "/") == 0 ? "" : root, en->path,
        en->description ? " - " : "", en->description ? en->description : "");
    if (l < 0)
      l = 0;
    if ((size_t)l >= sizeof(line))
      l = sizeof(line) - 1;
    if (lines >= max_lines || b.len + (size_t)l > max_chars)
      break;
    if (sbx_buf_append(&b, line, (size_t)l) < 0)
      return NULL;
    lines++;
  }
  if (shown < n) {
    char note[256];
    int l = snprintf(note, sizeof(note),
                     "\n... (truncated %zu additional paths)", n - shown);
    if (l > 0 && b.len + (size_t)l <= max_chars)
      (void)sbx_buf_append(&b, note, (size_t)l);
    static const char hint[] = "\nHint: increase depth, maxLines, or maxChars "
                               "to see more of the manifest layout.";
    if (b.len + sizeof(hint) - 1 <= max_chars)
      (void)sbx_buf_append(&b, hint, sizeof(hint) - 1);
  }
  return sbx_buf_steal(&b, NULL);
}
