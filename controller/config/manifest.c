#include "controller/config/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/path.h"

#define MANIFEST_MAX_DEPTH 64
#define MANIFEST_MAX_CONTENT (64u << 20)
#define MANIFEST_MAX_NAME 32 /* user and group names */

static void entry_clear(struct manifest_entry *en) {
  free(en->path);
  free(en->type_name);
  free(en->description);
  free(en->group);
  free(en->content);
  free(en->src);
  free(en->sha256);
  free(en->url);
  free(en->ref);
  free(en->subpath);
  free(en->source);
  json_decref(en->json);
  memset(en, 0, sizeof(*en));
}

struct manifest *manifest_free(struct manifest *m) {
  if (!m)
    return NULL;
  for (size_t i = 0; i < m->nentries; i++)
    entry_clear(&m->entries[i]);
  free(m->entries);
  for (size_t i = 0; i < m->nenv; i++) {
    free(m->env[i].name);
    free(m->env[i].value);
    free(m->env[i].description);
  }
  free(m->env);
  for (size_t i = 0; i < m->nusers; i++)
    free(m->users[i]);
  free(m->users);
  for (size_t i = 0; i < m->ngroups; i++) {
    free(m->groups[i].name);
    for (size_t j = 0; j < m->groups[i].nusers; j++)
      free(m->groups[i].users[j]);
    free(m->groups[i].users);
  }
  free(m->groups);
  for (size_t i = 0; i < m->ngrants; i++) {
    free(m->grants[i].path);
    free(m->grants[i].host_path);
    free(m->grants[i].description);
  }
  free(m->grants);
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

static int invalid(struct sbx_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int invalid(struct sbx_error *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = sbx_error_setv(e, SBX_INVALID_ARGUMENT, EINVAL, fmt, ap);
  va_end(ap);
  return r;
}

/* snake_case is the manifest's spelling; a camelCase key gets a hint. */
static int unknown_key(struct sbx_error *e, const char *where, const char *k,
                       const char *what) {
  static const struct {
    const char *camel, *snake;
  } hints[] = {
      {"extraPathGrants", "extra_path_grants"},
      {"readOnly", "read_only"},
      {"hostPath", "host_path"},
      {"mountPath", "mount_path"},
      {"mountStrategy", "mount_strategy"},
      {"contentBase64", "content_base64"},
      {"endpointUrl", "endpoint_url"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(hints); i++)
    if (strcmp(k, hints[i].camel) == 0)
      return invalid(e,
                     "%s: unknown key \"%s\" (manifests use snake_case: "
                     "\"%s\")",
                     where, k, hints[i].snake);
  return invalid(e, "%s: unknown key \"%s\"%s%s", where, k, what ? " for " : "",
                 what ? what : "");
}

static bool valid_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > MANIFEST_MAX_NAME)
    return false;
  if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z')))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!(s[i] == '_' || s[i] == '-' || (s[i] >= 'a' && s[i] <= 'z') ||
          (s[i] >= '0' && s[i] <= '9')))
      return false;
  return true;
}

/* A user or group name: a string, or {"name": string}; trimmed. */
static int parse_name(json_t *v, const char *where, const char *what,
                      bool allow_object, char **out, struct sbx_error *e) {
  json_t *s = v;
  if (allow_object && json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
      if (strcmp(k, "name") != 0)
        return unknown_key(e, where, k, what);
    }
    s = json_object_get(v, "name");
  }
  if (!json_is_string(s))
    return invalid(e, "%s: a %s must be %s", where, what,
                   allow_object ? "a name or {\"name\": ...}" : "a name");
  const char *p = json_string_value(s);
  size_t n = json_string_length(s);
  while (n > 0 && (*p == ' ' || *p == '\t'))
    p++, n--;
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  char buf[MANIFEST_MAX_NAME + 1];
  if (n == 0)
    return invalid(e, "%s: a %s name must not be empty", where, what);
  if (n > MANIFEST_MAX_NAME)
    return invalid(e, "%s: %s name \"%.*s\" is longer than %d characters",
                   where, what, (int)(n > 64 ? 64 : n), p, MANIFEST_MAX_NAME);
  memcpy(buf, p, n);
  buf[n] = '\0';
  if (!valid_name(buf))
    return invalid(e, "%s: %s name \"%s\" must match [a-z_][a-z0-9_-]*", where,
                   what, buf);
  *out = strdup(buf);
  return *out ? 0 : -ENOMEM;
}

/* Parses "rwxr-x---" or "drwxr-xr-x", optionally ending in '.', '@' or '+'
 * (ls's markers); s/S count as exec/no-exec, t/T in other means sticky.
 * -1 on error. */
static int parse_mode_string(const char *s) {
  size_t n = strlen(s);
  if (n > 0 && strchr(".@+", s[n - 1]) && (n == 10 || n == 11))
    n--;
  if (n == 10) {
    if (!strchr("-dlbcps", s[0]))
      return -1;
    s++;
    n--;
  }
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
      mode |= (c == 's' ? bit : 0) | (i == 2 ? 04000 : 02000);
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
    /* 0o40000 marks a directory, as in the SDK's numeric form. */
    if (m < 0 || (m & ~(json_int_t)(040000 | 07777)))
      return invalid(e, "%s: \"permissions\" %lld is not a mode", where,
                     (long long)m);
    *mode = (int)(m & 07777);
    return 0;
  }
  if (json_is_string(v)) {
    int m = parse_mode_string(json_string_value(v));
    if (m < 0)
      return invalid(e,
                     "%s: \"permissions\" \"%.64s\" is not a mode string "
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
  bool sticky = false;
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
      if (strcmp(k, "sticky") == 0)
        sticky = json_is_true(x);
      continue;
    }
    if (idx < 0)
      return invalid(e, "%s: unknown permissions key \"%s\"", where, k);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > 7)
      return invalid(e, "%s: permissions \"%s\" must be an integer 0..7", where,
                     k);
    bits[idx] = (int)json_integer_value(x);
  }
  *mode = bits[0] << 6 | bits[1] << 3 | bits[2];
  if (sticky)
    *mode |= 01000;
  return 0;
}

/* Checks a manifest path (an entry key or a child's name) as the SDK does,
 * with a message per rule, and normalizes it into OUT. */
static int check_rel_path(const char *p, const char *ewhere, char *out,
                          size_t outsz, struct sbx_error *e) {
  size_t n = strlen(p);
  size_t a = 0;
  while (a < n && (p[a] == ' ' || p[a] == '\t'))
    a++;
  while (n > a && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  if (n == a)
    return invalid(e, "%s: the path is empty", ewhere);
  if (memchr(p + a, '\\', n - a))
    return invalid(e, "%s: the path must use \"/\" separators, not \"\\\"",
                   ewhere);
  if (n - a >= 2 && p[a + 1] == ':' &&
      ((p[a] >= 'A' && p[a] <= 'Z') || (p[a] >= 'a' && p[a] <= 'z')))
    return invalid(e, "%s: the path must not start with a Windows drive",
                   ewhere);
  if (p[a] == '/')
    return invalid(e,
                   "%s: the path must be relative to the root, not "
                   "absolute",
                   ewhere);
  for (size_t i = a; i < n;) {
    size_t j = i;
    while (j < n && p[j] != '/')
      j++;
    if (j - i == 2 && p[i] == '.' && p[i + 1] == '.')
      return invalid(e, "%s: the path must not contain \"..\"", ewhere);
    i = j + 1;
  }
  struct sbx_error pe = {0};
  int r = sbx_path_normalize_rel(p + a, n - a, out, outsz,
                                 SBX_PATH_NO_DOTDOT | SBX_PATH_POSIX_ONLY, &pe);
  if (r < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r, "%s: %s", ewhere, pe.msg);
  if (strcmp(out, ".") == 0)
    return invalid(e, "%s: the path must not be the root", ewhere);
  return 0;
}

static int dup_str(json_t *v, char **out) {
  *out = strndup(json_string_value(v), json_string_length(v));
  return *out ? 0 : -ENOMEM;
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

static const char *const cloud_mounts[] = {
    "s3_mount",         "gcs_mount", "r2_mount",
    "azure_blob_mount", "box_mount", "s3_files_mount",
};

static bool is_cloud_mount(const char *t) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cloud_mounts); i++)
    if (strcmp(t, cloud_mounts[i]) == 0)
      return true;
  return false;
}

/* The fields each type takes besides the common ones; "!" marks a
 * required one. Cloud mounts take their provider's fields as strings. */
static const char *const *type_fields(enum manifest_entry_type t,
                                      const char *name) {
  static const char *const file[] = {"content", "content_base64", NULL};
  static const char *const dir[] = {"children", NULL};
  static const char *const local_file[] = {"!src", "sha256", NULL};
  static const char *const local_dir[] = {"!src", NULL};
  static const char *const git[] = {"repo", "url",     "host",
                                    "ref",  "subpath", NULL};
  static const char *const mount[] = {
      "!source", "mount_path", "read_only", "mount_strategy", "provider", NULL};
  static const char *const s3[] = {"!bucket",
                                   "prefix",
                                   "region",
                                   "endpoint_url",
                                   "access_key_id",
                                   "secret_access_key",
                                   "session_token",
                                   "mount_path",
                                   "read_only",
                                   "mount_strategy",
                                   NULL};
  static const char *const gcs[] = {
      "!bucket",        "prefix", "credentials_json", "mount_path", "read_only",
      "mount_strategy", NULL};
  static const char *const r2[] = {
      "!bucket",       "account_id",        "prefix",
      "access_key_id", "secret_access_key", "mount_path",
      "read_only",     "mount_strategy",    NULL};
  static const char *const azure[] = {
      "!account",   "!container", "prefix",         "account_key", "sas_token",
      "mount_path", "read_only",  "mount_strategy", NULL};
  static const char *const box[] = {
      "!folder_id", "token", "mount_path", "read_only", "mount_strategy", NULL};
  switch (t) {
  case MANIFEST_FILE:
    return file;
  case MANIFEST_DIR:
    return dir;
  case MANIFEST_LOCAL_FILE:
    return local_file;
  case MANIFEST_LOCAL_DIR:
    return local_dir;
  case MANIFEST_GIT_REPO:
    return git;
  case MANIFEST_MOUNT:
    return mount;
  case MANIFEST_CLOUD_MOUNT:
    if (strcmp(name, "gcs_mount") == 0)
      return gcs;
    if (strcmp(name, "r2_mount") == 0)
      return r2;
    if (strcmp(name, "azure_blob_mount") == 0)
      return azure;
    if (strcmp(name, "box_mount") == 0)
      return box;
    return s3; /* s3_mount, s3_files_mount */
  }
  return file;
}

/* git_repo: the remote URL from url, or repo on host (the SDK's rule). */
static int git_fields(struct manifest_entry *ent, json_t *v, const char *ewhere,
                      struct sbx_error *e) {
  json_t *repo = json_object_get(v, "repo");
  json_t *url = json_object_get(v, "url");
  json_t *host = json_object_get(v, "host");
  json_t *ref = json_object_get(v, "ref");
  json_t *sub = json_object_get(v, "subpath");
  if (!repo == !url)
    return invalid(e, "%s: a git_repo needs \"repo\" or \"url\" (one of them)",
                   ewhere);
  const char *r = json_string_value(repo ? repo : url);
  if (!*r)
    return invalid(e, "%s: \"%s\" is empty", ewhere, repo ? "repo" : "url");
  if (r[0] == '-')
    return invalid(e, "%s: \"%s\" must not start with \"-\"", ewhere,
                   repo ? "repo" : "url");
  for (const char *p = r; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return invalid(e, "%s: \"%s\" holds a control character", ewhere,
                     repo ? "repo" : "url");
  if (url && host)
    return invalid(e, "%s: \"host\" goes with \"repo\", not \"url\"", ewhere);
  const char *h = host ? json_string_value(host) : "github.com";
  if (!*h || strpbrk(h, "/@:") || h[0] == '-')
    return invalid(e, "%s: \"host\" \"%.64s\" is not a host name", ewhere, h);
  if (url || strstr(r, "://") || strncmp(r, "git@", 4) == 0) {
    ent->url = strdup(r);
  } else {
    size_t n = strlen(h) + strlen(r) + 16;
    ent->url = malloc(n);
    if (ent->url)
      (void)snprintf(ent->url, n, "https://%s/%s.git", h, r);
  }
  if (!ent->url)
    return -ENOMEM;
  if (ref) {
    const char *s = json_string_value(ref);
    if (!*s || s[0] == '-' || strstr(s, "..") || strpbrk(s, " ~^:?*[\\"))
      return invalid(e, "%s: \"ref\" \"%.64s\" is not a branch, tag or commit",
                     ewhere, s);
    if (dup_str(ref, &ent->ref) < 0)
      return -ENOMEM;
  }
  if (sub) {
    const char *s = json_string_value(sub);
    char norm[SBX_PATH_MAX];
    char w[760];
    (void)snprintf(w, sizeof(w), "%.700s: \"subpath\"", ewhere);
    int k = check_rel_path(s, w, norm, sizeof(norm), e);
    if (k < 0)
      return k;
    if (!(ent->subpath = strdup(norm)))
      return -ENOMEM;
  }
  return 0;
}

static int mount_fields(struct manifest_entry *ent, json_t *v,
                        const char *ewhere, struct sbx_error *e) {
  ent->read_only = true; /* the SDK's default for mounts */
  json_t *ro = json_object_get(v, "read_only");
  if (ro)
    ent->read_only = json_is_true(ro);
  json_t *mp = json_object_get(v, "mount_path");
  if (mp && json_string_value(mp)[0] == '/')
    return invalid(e,
                   "%s: \"mount_path\" must be relative to the root (the "
                   "entry's key is where it is mounted)",
                   ewhere);
  json_t *st = json_object_get(v, "mount_strategy");
  if (st) {
    const char *s = json_is_object(st)
                        ? json_string_value(json_object_get(st, "type"))
                        : json_string_value(st);
    if (!s)
      return invalid(e,
                     "%s: \"mount_strategy\" must be a name or "
                     "{\"type\": name}",
                     ewhere);
    if (strcmp(s, "local_bind") != 0 && strcmp(s, "in_container") != 0 &&
        strcmp(s, "docker_volume") != 0)
      return invalid(e,
                     "%s: unknown mount_strategy \"%.64s\" (local_bind, "
                     "in_container or docker_volume)",
                     ewhere, s);
    if (ent->type == MANIFEST_MOUNT && strcmp(s, "local_bind") != 0)
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "%s: mount_strategy \"%s\" is not supported by "
                           "any backend yet (local_bind is)",
                           ewhere, s);
  }
  if (ent->type == MANIFEST_MOUNT) {
    json_t *src = json_object_get(v, "source");
    const char *s = json_string_value(src);
    char norm[SBX_PATH_MAX];
    if (s[0] != '/' ||
        sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0 ||
        strcmp(norm, "/") == 0)
      return invalid(e,
                     "%s: \"source\" \"%.200s\" must be an absolute host "
                     "path other than /",
                     ewhere, s);
    if (!(ent->source = strdup(norm)))
      return -ENOMEM;
  }
  return 0;
}

static int parse_entries(struct manifest *m, json_t *obj, const char *parent,
                         const char *where, unsigned depth, size_t *cap,
                         struct sbx_error *e);

static int parse_entry(struct manifest *m, const char *key, json_t *v,
                       const char *parent, const char *where, unsigned depth,
                       size_t *cap, struct sbx_error *e) {
  char ewhere[700];
  if (strcmp(parent, ".") == 0)
    (void)snprintf(ewhere, sizeof(ewhere), "%s: entry \"%.200s\"", where, key);
  else
    (void)snprintf(ewhere, sizeof(ewhere), "%s: entry \"%.200s/%.200s\"", where,
                   parent, key);
  char rel[SBX_PATH_MAX];
  int r = check_rel_path(key, ewhere, rel, sizeof(rel), e);
  if (r < 0)
    return r;
  if (!json_is_object(v))
    return type_error(e, ewhere, key, "an object", v);
  json_t *type = json_object_get(v, "type");
  if (!type)
    return invalid(e,
                   "%s: \"type\" is required (file, dir, local_file, "
                   "local_dir, git_repo, mount, or a cloud mount type)",
                   ewhere);
  if (!json_is_string(type))
    return type_error(e, ewhere, "type", "a string", type);
  const char *t = json_string_value(type);
  struct manifest_entry ent = {.mode = -1};
  if (strcmp(t, "file") == 0)
    ent.type = MANIFEST_FILE;
  else if (strcmp(t, "dir") == 0)
    ent.type = MANIFEST_DIR;
  else if (strcmp(t, "local_file") == 0)
    ent.type = MANIFEST_LOCAL_FILE;
  else if (strcmp(t, "local_dir") == 0)
    ent.type = MANIFEST_LOCAL_DIR;
  else if (strcmp(t, "git_repo") == 0)
    ent.type = MANIFEST_GIT_REPO;
  else if (strcmp(t, "mount") == 0 || strcmp(t, "local_bind") == 0)
    ent.type = MANIFEST_MOUNT;
  else if (is_cloud_mount(t))
    ent.type = MANIFEST_CLOUD_MOUNT;
  else
    return invalid(e,
                   "%s: unknown entry type \"%.64s\" (file, dir, local_file, "
                   "local_dir, git_repo, mount, s3_mount, gcs_mount, "
                   "r2_mount, azure_blob_mount, box_mount, s3_files_mount)",
                   ewhere, t);
  char full[SBX_PATH_MAX];
  if (sbx_path_join(parent, rel, full, sizeof(full)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "%s: path too long", ewhere);
  const char *const *fields = type_fields(ent.type, t);
  json_t *children = NULL;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (strcmp(k, "type") == 0)
      continue;
    if (strcmp(k, "description") == 0 || strcmp(k, "group") == 0) {
      if (!json_is_string(x))
        return type_error(e, ewhere, k, "a string", x);
      continue;
    }
    if (strcmp(k, "ephemeral") == 0) {
      if (!json_is_boolean(x))
        return type_error(e, ewhere, k, "a boolean", x);
      continue;
    }
    if (strcmp(k, "permissions") == 0) {
      if ((r = parse_permissions(x, ewhere, &ent.mode, e)) < 0)
        return r;
      continue;
    }
    bool known = false;
    for (size_t i = 0; fields[i] && !known; i++)
      known = strcmp(fields[i] + (fields[i][0] == '!'), k) == 0;
    if (!known) {
      char what[80];
      (void)snprintf(what, sizeof(what), "a %s entry", t);
      return unknown_key(e, ewhere, k, what);
    }
    if (strcmp(k, "children") == 0) {
      if (!json_is_object(x))
        return type_error(e, ewhere, k, "an object", x);
      children = x;
    } else if (strcmp(k, "read_only") == 0) {
      if (!json_is_boolean(x))
        return type_error(e, ewhere, k, "a boolean", x);
    } else if (strcmp(k, "mount_strategy") == 0) {
      if (!json_is_string(x) && !json_is_object(x))
        return type_error(e, ewhere, k, "a string or an object", x);
    } else if (!json_is_string(x)) {
      return type_error(e, ewhere, k, "a string", x);
    }
  }
  for (size_t i = 0; fields[i]; i++)
    if (fields[i][0] == '!' && !json_object_get(v, fields[i] + 1))
      return invalid(e, "%s: a %s entry needs \"%s\"", ewhere, t,
                     fields[i] + 1);

  ent.ephemeral = json_is_true(json_object_get(v, "ephemeral"));
  json_t *g = json_object_get(v, "group");
  if (g) {
    r = parse_name(g, ewhere, "group", false, &ent.group, e);
    if (r < 0)
      goto fail;
  }
  json_t *d = json_object_get(v, "description");
  if (d && (r = dup_str(d, &ent.description)) < 0)
    goto fail;
  if (!(ent.path = strdup(full)) || !(ent.type_name = strdup(t))) {
    r = -ENOMEM;
    goto fail;
  }
  switch (ent.type) {
  case MANIFEST_FILE: {
    json_t *c = json_object_get(v, "content");
    json_t *c64 = json_object_get(v, "content_base64");
    if (c && c64) {
      r = invalid(e, "%s: give \"content\" or \"content_base64\", not both",
                  ewhere);
      goto fail;
    }
    size_t l = c64 ? json_string_length(c64) : (c ? json_string_length(c) : 0);
    if ((c64 ? l / 4 * 3 : l) > MANIFEST_MAX_CONTENT) {
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                        "%s: content is larger than 64 MiB", ewhere);
      goto fail;
    }
    ent.content = malloc(l + 4);
    if (!ent.content) {
      r = -ENOMEM;
      goto fail;
    }
    if (c64) {
      long n = sbx_base64_decode(json_string_value(c64), l, ent.content);
      if (n < 0) {
        r = invalid(e, "%s: \"content_base64\" is not valid base64", ewhere);
        goto fail;
      }
      ent.content_len = (size_t)n;
    } else {
      if (l)
        memcpy(ent.content, json_string_value(c), l);
      ent.content_len = l;
    }
    ent.content[ent.content_len] = '\0';
    break;
  }
  case MANIFEST_LOCAL_FILE:
  case MANIFEST_LOCAL_DIR: {
    json_t *src = json_object_get(v, "src");
    if (!json_string_length(src)) {
      r = invalid(e, "%s: \"src\" is empty", ewhere);
      goto fail;
    }
    if ((r = dup_str(src, &ent.src)) < 0)
      goto fail;
    json_t *sha = json_object_get(v, "sha256");
    if (sha) {
      const char *s = json_string_value(sha);
      bool ok = strlen(s) == 64;
      for (size_t i = 0; ok && i < 64; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
             (s[i] >= 'A' && s[i] <= 'F');
      if (!ok) {
        r = invalid(e, "%s: \"sha256\" must be 64 hex digits", ewhere);
        goto fail;
      }
      if ((r = dup_str(sha, &ent.sha256)) < 0)
        goto fail;
      for (char *p = ent.sha256; *p; p++)
        if (*p >= 'A' && *p <= 'F')
          *p = (char)(*p - 'A' + 'a');
    }
    break;
  }
  case MANIFEST_GIT_REPO:
    if ((r = git_fields(&ent, v, ewhere, e)) < 0)
      goto fail;
    break;
  case MANIFEST_MOUNT:
  case MANIFEST_CLOUD_MOUNT:
    if ((r = mount_fields(&ent, v, ewhere, e)) < 0)
      goto fail;
    for (size_t i = 0; fields[i]; i++) {
      json_t *f = json_object_get(v, fields[i] + (fields[i][0] == '!'));
      if (f && json_is_string(f) && fields[i][0] == '!' &&
          !json_string_length(f)) {
        r = invalid(e, "%s: \"%s\" is empty", ewhere, fields[i] + 1);
        goto fail;
      }
    }
    break;
  case MANIFEST_DIR:
    break;
  }
  if (children && ent.type != MANIFEST_DIR) {
    r = invalid(e, "%s: only a dir entry has children", ewhere);
    goto fail;
  }
  for (size_t i = 0; i < m->nentries; i++) {
    const char *o = m->entries[i].path;
    if (strcmp(o, ent.path) == 0) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EEXIST,
                        "%s: \"%s\" is given twice", ewhere, ent.path);
      goto fail;
    }
    enum manifest_entry_type ot = m->entries[i].type;
    if (ot != MANIFEST_DIR && sbx_path_is_under(o, ent.path)) {
      r = invalid(e, "%s: \"%s\" lies inside the %s entry \"%s\"", ewhere,
                  ent.path, m->entries[i].type_name, o);
      goto fail;
    }
    if (ent.type != MANIFEST_DIR && sbx_path_is_under(ent.path, o)) {
      r = invalid(e, "%s: the %s entry \"%s\" would contain the entry \"%s\"",
                  ewhere, t, ent.path, o);
      goto fail;
    }
  }
  /* The persisted form keeps each entry flat: children are entries too. */
  ent.json = json_deep_copy(v);
  if (!ent.json) {
    r = -ENOMEM;
    goto fail;
  }
  (void)json_object_del(ent.json, "children");
  r = add_entry(m, &ent, cap);
  if (r < 0) {
    if (r == -E2BIG)
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                        "%s: more than %d entries", where,
                        MANIFEST_MAX_ENTRIES);
    goto fail;
  }
  if (children)
    return parse_entries(m, children, full, where, depth + 1, cap, e);
  return 0;
fail:
  entry_clear(&ent);
  return r;
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

static bool valid_env_name(const char *k) {
  if (!(k[0] == '_' || (k[0] >= 'A' && k[0] <= 'Z') ||
        (k[0] >= 'a' && k[0] <= 'z')))
    return false;
  for (const char *p = k; *p; p++)
    if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
          (*p >= '0' && *p <= '9')))
      return false;
  return strlen(k) <= 256;
}

static int parse_environment(struct manifest *m, json_t *env, const char *where,
                             struct sbx_error *e) {
  size_t n = json_object_size(env);
  if (n > 4 * MANIFEST_MAX_LIST)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: more than %d environment values", where,
                         4 * MANIFEST_MAX_LIST);
  m->env = calloc(n + 1, sizeof(*m->env));
  if (!m->env)
    return -ENOMEM;
  const char *k;
  json_t *v;
  json_object_foreach(env, k, v) {
    if (!valid_env_name(k))
      return invalid(e,
                     "%s: environment name \"%.64s\" must match "
                     "[A-Za-z_][A-Za-z0-9_]*",
                     where, k);
    char ew[400];
    (void)snprintf(ew, sizeof(ew), "%s: environment \"%s\"", where, k);
    struct manifest_env *ev = &m->env[m->nenv];
    json_t *val = v;
    if (json_is_object(v)) {
      const char *ik;
      json_t *iv;
      json_object_foreach(v, ik, iv) {
        if (strcmp(ik, "value") == 0)
          continue;
        if (strcmp(ik, "description") == 0 && !json_is_string(iv))
          return type_error(e, ew, ik, "a string", iv);
        if (strcmp(ik, "ephemeral") == 0 && !json_is_boolean(iv))
          return type_error(e, ew, ik, "a boolean", iv);
        if (strcmp(ik, "description") && strcmp(ik, "ephemeral"))
          return unknown_key(e, ew, ik, NULL);
      }
      val = json_object_get(v, "value");
      ev->ephemeral = json_is_true(json_object_get(v, "ephemeral"));
      json_t *d = json_object_get(v, "description");
      if (d && dup_str(d, &ev->description) < 0)
        return -ENOMEM;
    }
    if (!json_is_string(val))
      return invalid(e,
                     "%s must be a string or {\"value\": string, "
                     "\"description\"?, \"ephemeral\"?}",
                     ew);
    if (memchr(json_string_value(val), '\0', json_string_length(val)))
      return invalid(e, "%s holds a NUL character", ew);
    ev->name = strdup(k);
    m->nenv++;
    if (!ev->name || dup_str(val, &ev->value) < 0)
      return -ENOMEM;
  }
  return 0;
}

static int check_list(json_t *v, const char *where, const char *k,
                      struct sbx_error *e) {
  if (!json_is_array(v))
    return type_error(e, where, k, "an array", v);
  if (json_array_size(v) > MANIFEST_MAX_LIST)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: \"%s\" has more than %d items", where, k,
                         MANIFEST_MAX_LIST);
  return 0;
}

static int parse_users(struct manifest *m, json_t *v, const char *where,
                       struct sbx_error *e) {
  int r = check_list(v, where, "users", e);
  if (r < 0)
    return r;
  m->users = calloc(json_array_size(v) + 1, sizeof(char *));
  if (!m->users)
    return -ENOMEM;
  size_t i;
  json_t *u;
  json_array_foreach(v, i, u) {
    char w[400];
    (void)snprintf(w, sizeof(w), "%s: users[%zu]", where, i);
    char *name = NULL;
    if ((r = parse_name(u, w, "user", true, &name, e)) < 0)
      return r;
    for (size_t j = 0; j < m->nusers; j++)
      if (strcmp(m->users[j], name) == 0) {
        r = invalid(e, "%s: user \"%s\" is listed twice", w, name);
        free(name);
        return r;
      }
    m->users[m->nusers++] = name;
  }
  return 0;
}

static int parse_groups(struct manifest *m, json_t *v, const char *where,
                        struct sbx_error *e) {
  int r = check_list(v, where, "groups", e);
  if (r < 0)
    return r;
  m->groups = calloc(json_array_size(v) + 1, sizeof(*m->groups));
  if (!m->groups)
    return -ENOMEM;
  size_t i;
  json_t *g;
  json_array_foreach(v, i, g) {
    char w[400];
    (void)snprintf(w, sizeof(w), "%s: groups[%zu]", where, i);
    if (!json_is_object(g))
      return type_error(e, w, "group", "an object {\"name\", \"users\"?}", g);
    const char *k;
    json_t *x;
    json_object_foreach(g, k, x) {
      if (strcmp(k, "name") && strcmp(k, "users"))
        return unknown_key(e, w, k, "a group");
    }
    struct manifest_group *mg = &m->groups[m->ngroups];
    json_t *name = json_object_get(g, "name");
    if (!name)
      return invalid(e, "%s: a group needs \"name\"", w);
    if ((r = parse_name(name, w, "group", false, &mg->name, e)) < 0)
      return r;
    m->ngroups++;
    for (size_t j = 0; j + 1 < m->ngroups; j++)
      if (strcmp(m->groups[j].name, mg->name) == 0)
        return invalid(e, "%s: group \"%s\" is listed twice", w, mg->name);
    json_t *us = json_object_get(g, "users");
    if (!us)
      continue;
    if ((r = check_list(us, w, "users", e)) < 0)
      return r;
    mg->users = calloc(json_array_size(us) + 1, sizeof(char *));
    if (!mg->users)
      return -ENOMEM;
    size_t j;
    json_t *u;
    json_array_foreach(us, j, u) {
      if ((r = parse_name(u, w, "user", true, &mg->users[mg->nusers], e)) < 0)
        return r;
      mg->nusers++;
    }
  }
  return 0;
}

static int parse_grants(struct manifest *m, json_t *v, const char *where,
                        struct sbx_error *e) {
  int r = check_list(v, where, "extra_path_grants", e);
  if (r < 0)
    return r;
  m->grants = calloc(json_array_size(v) + 1, sizeof(*m->grants));
  if (!m->grants)
    return -ENOMEM;
  size_t i;
  json_t *g;
  json_array_foreach(v, i, g) {
    char w[400];
    (void)snprintf(w, sizeof(w), "%s: extra_path_grants[%zu]", where, i);
    if (!json_is_object(g))
      return type_error(e, w, "grant", "an object {\"path\", ...}", g);
    const char *k;
    json_t *x;
    json_object_foreach(g, k, x) {
      if (strcmp(k, "read_only") == 0) {
        if (!json_is_boolean(x))
          return type_error(e, w, k, "a boolean", x);
      } else if (strcmp(k, "path") == 0 || strcmp(k, "host_path") == 0 ||
                 strcmp(k, "description") == 0) {
        if (!json_is_string(x))
          return type_error(e, w, k, "a string", x);
      } else {
        return unknown_key(e, w, k, "a grant");
      }
    }
    struct manifest_grant *mg = &m->grants[m->ngrants];
    m->ngrants++;
    json_t *p = json_object_get(g, "path");
    if (!p)
      return invalid(e, "%s: a grant needs \"path\"", w);
    for (int pass = 0; pass < 2; pass++) {
      const char *key = pass ? "host_path" : "path";
      json_t *pv = json_object_get(g, key);
      if (!pv)
        continue;
      const char *s = json_string_value(pv);
      char norm[SBX_PATH_MAX];
      if (s[0] != '/')
        return invalid(e, "%s: \"%s\" \"%.200s\" must be absolute", w, key, s);
      if (strchr(s, '\\'))
        return invalid(e, "%s: \"%s\" must use \"/\" separators", w, key);
      for (const char *q = s; (q = strstr(q, "..")); q += 2)
        if (q[-1] == '/' && (q[2] == '/' || q[2] == '\0'))
          return invalid(e, "%s: \"%s\" must not contain \"..\"", w, key);
      if (sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0)
        return invalid(e, "%s: \"%s\" \"%.200s\" is not a valid path", w, key,
                       s);
      if (strcmp(norm, "/") == 0)
        return invalid(e, "%s: \"%s\" must not be \"/\"", w, key);
      char **dst = pass ? &mg->host_path : &mg->path;
      if (!(*dst = strdup(norm)))
        return -ENOMEM;
    }
    mg->read_only = json_is_true(json_object_get(g, "read_only"));
    json_t *d = json_object_get(g, "description");
    if (d && dup_str(d, &mg->description) < 0)
      return -ENOMEM;
    for (size_t j = 0; j + 1 < m->ngrants; j++)
      if (strcmp(m->grants[j].path, mg->path) == 0)
        return invalid(e, "%s: \"%s\" is granted twice", w, mg->path);
  }
  return 0;
}

int manifest_parse(json_t *j, const char *where, struct manifest **out,
                   struct sbx_error *e) {
  if (!json_is_object(j))
    return invalid(e, "%s: a manifest must be an object, not %s", where,
                   json_type_name(j));
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
      bool dotdot = false;
      for (const char *q = s; (q = strstr(q, "..")); q += 2)
        dotdot |= (q == s || q[-1] == '/') && (q[2] == '/' || q[2] == '\0');
      if (s[0] != '/' || strchr(s, '\\') || dotdot ||
          sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0) {
        r = invalid(e,
                    "%s: \"root\" \"%.200s\" must be an absolute POSIX path "
                    "without \"..\"",
                    where, s);
        break;
      }
      if (!(m->root = strdup(norm)))
        r = -ENOMEM;
    } else if (strcmp(k, "version") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) != 1)
        r = invalid(e, "%s: \"version\" must be 1", where);
    } else if (strcmp(k, "entries") == 0) {
      if (!json_is_object(v))
        r = type_error(e, where, k, "an object", v);
      else
        r = parse_entries(m, v, ".", where, 0, &cap, e);
    } else if (strcmp(k, "environment") == 0) {
      if (!json_is_object(v))
        r = type_error(e, where, k, "an object", v);
      else
        r = parse_environment(m, v, where, e);
    } else if (strcmp(k, "users") == 0) {
      r = parse_users(m, v, where, e);
    } else if (strcmp(k, "groups") == 0) {
      r = parse_groups(m, v, where, e);
    } else if (strcmp(k, "extra_path_grants") == 0) {
      r = parse_grants(m, v, where, e);
    } else {
      r = unknown_key(e, where, k, "a manifest");
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

int manifest_add_user(struct manifest *m, const char *name) {
  for (size_t i = 0; i < m->nusers; i++)
    if (strcmp(m->users[i], name) == 0)
      return 0;
  if (m->nusers >= MANIFEST_MAX_LIST)
    return -E2BIG;
  char **n = realloc(m->users, (m->nusers + 2) * sizeof(*n));
  if (!n)
    return -ENOMEM;
  m->users = n;
  if (!(m->users[m->nusers] = strdup(name)))
    return -ENOMEM;
  m->nusers++;
  return 0;
}

const char *manifest_getenv(const struct manifest *m, const char *name) {
  for (size_t i = 0; i < m->nenv; i++)
    if (strcmp(m->env[i].name, name) == 0)
      return m->env[i].value;
  return NULL;
}

json_t *manifest_to_json(const struct manifest *m) {
  json_t *j = json_pack("{s:i, s:s}", "version", m->version, "root", m->root);
  json_t *entries = json_object();
  json_t *env = json_object();
  json_t *users = json_array();
  json_t *groups = json_array();
  json_t *grants = json_array();
  if (!j || !entries || !env || !users || !groups || !grants)
    goto fail;
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    if (en->ephemeral)
      continue;
    if (json_object_set(entries, en->path, en->json) < 0)
      goto fail;
  }
  for (size_t i = 0; i < m->nenv; i++) {
    if (m->env[i].ephemeral)
      continue;
    json_t *v = json_pack("{s:s}", "value", m->env[i].value);
    if (v && m->env[i].description)
      json_object_set_new(v, "description", json_string(m->env[i].description));
    if (!v || json_object_set_new(env, m->env[i].name, v) < 0)
      goto fail;
  }
  for (size_t i = 0; i < m->nusers; i++)
    json_array_append_new(users, json_pack("{s:s}", "name", m->users[i]));
  for (size_t i = 0; i < m->ngroups; i++) {
    json_t *us = json_array();
    for (size_t k = 0; us && k < m->groups[i].nusers; k++)
      json_array_append_new(us, json_string(m->groups[i].users[k]));
    json_array_append_new(groups, json_pack("{s:s, s:o*}", "name",
                                            m->groups[i].name, "users", us));
  }
  for (size_t i = 0; i < m->ngrants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    json_t *o =
        json_pack("{s:s, s:b}", "path", g->path, "read_only", g->read_only);
    if (o && g->description)
      json_object_set_new(o, "description", json_string(g->description));
    json_array_append_new(grants, o);
  }
  json_object_set_new(j, "entries", entries);
  json_object_set_new(j, "environment", env);
  json_object_set_new(j, "users", users);
  json_object_set_new(j, "groups", groups);
  json_object_set_new(j, "extra_path_grants", grants);
  return j;
fail:
  json_decref(j);
  json_decref(entries);
  json_decref(env);
  json_decref(users);
  json_decref(groups);
  json_decref(grants);
  return NULL;
}

static const struct manifest_entry *find_entry(const struct manifest *m,
                                               const char *path) {
  for (size_t i = 0; i < m->nentries; i++)
    if (strcmp(m->entries[i].path, path) == 0)
      return &m->entries[i];
  return NULL;
}

static bool same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int manifest_delta(const struct manifest *live, const struct manifest *next,
                   size_t **added, size_t *nadded, struct sbx_error *e) {
  static const char pre[] = "Live sandbox sessions cannot change";
  if (strcmp(live->root, next->root) != 0)
    return invalid(e, "%s the root (\"%s\" is not \"%s\")", pre, next->root,
                   live->root);
  /* Ephemeral values are never recorded: the trusted manifest brings them
   * again each time, so only the recorded ones must match. */
  size_t nl = 0, nn = 0;
  for (size_t i = 0; i < live->nenv; i++)
    nl += !live->env[i].ephemeral;
  for (size_t i = 0; i < next->nenv; i++)
    nn += !next->env[i].ephemeral;
  bool env_same = nl == nn;
  for (size_t i = 0; env_same && i < next->nenv; i++)
    env_same =
        next->env[i].ephemeral ||
        same_str(manifest_getenv(live, next->env[i].name), next->env[i].value);
  if (!env_same)
    return invalid(e, "%s the environment", pre);
  bool users_same = live->nusers == next->nusers;
  for (size_t i = 0; users_same && i < next->nusers; i++) {
    bool found = false;
    for (size_t k = 0; k < live->nusers && !found; k++)
      found = strcmp(live->users[k], next->users[i]) == 0;
    users_same = found;
  }
  if (!users_same)
    return invalid(e, "%s users", pre);
  bool groups_same = live->ngroups == next->ngroups;
  for (size_t i = 0; groups_same && i < next->ngroups; i++) {
    bool found = false;
    for (size_t k = 0; k < live->ngroups && !found; k++) {
      const struct manifest_group *a = &live->groups[k], *b = &next->groups[i];
      found = strcmp(a->name, b->name) == 0 && a->nusers == b->nusers;
      for (size_t u = 0; found && u < b->nusers; u++)
        found = strcmp(a->users[u], b->users[u]) == 0;
    }
    groups_same = found;
  }
  if (!groups_same)
    return invalid(e, "%s groups", pre);
  bool grants_same = live->ngrants == next->ngrants;
  for (size_t i = 0; grants_same && i < next->ngrants; i++)
    grants_same = strcmp(live->grants[i].path, next->grants[i].path) == 0 &&
                  live->grants[i].read_only == next->grants[i].read_only;
  if (!grants_same)
    return invalid(e, "%s extra_path_grants", pre);
  for (size_t i = 0; i < live->nentries; i++) {
    const struct manifest_entry *a = &live->entries[i];
    if (a->ephemeral)
      continue;
    const struct manifest_entry *b = find_entry(next, a->path);
    if (!b)
      return invalid(e, "%s entries: \"%s\" would be removed", pre, a->path);
    if (a->type != b->type || strcmp(a->type_name, b->type_name) != 0)
      return invalid(e, "%s entries: \"%s\" would change from %s to %s", pre,
                     a->path, a->type_name, b->type_name);
    if (a->type == MANIFEST_MOUNT || a->type == MANIFEST_CLOUD_MOUNT) {
      if (!json_equal(a->json, b->json))
        return invalid(e, "%s mounts: \"%s\" would change", pre, a->path);
    } else if (!json_equal(a->json, b->json)) {
      return invalid(e, "%s entries: \"%s\" would change", pre, a->path);
    }
  }
  size_t *v = calloc(next->nentries + 1, sizeof(*v));
  if (!v)
    return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < next->nentries; i++) {
    const struct manifest_entry *b = &next->entries[i];
    if (find_entry(live, b->path))
      continue;
    if (b->type == MANIFEST_MOUNT || b->type == MANIFEST_CLOUD_MOUNT) {
      free(v);
      return invalid(e, "%s mounts: \"%s\" would be added", pre, b->path);
    }
    v[n++] = i;
  }
  *added = v;
  *nadded = n;
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
