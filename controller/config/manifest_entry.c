/* Manifest entries: each type's fields, permissions, relative paths, and
 * the rules between entries (no path twice, nothing inside a file). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/path.h"

#define MANIFEST_MAX_DEPTH 64
#define MANIFEST_MAX_CONTENT (64u << 20)

void manifest_entry_clear(struct manifest_entry *en) {
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
      return manifest_invalid(e, "%s: \"permissions\" %lld is not a mode",
                              where, (long long)m);
    *mode = (int)(m & 07777);
    return 0;
  }
  if (json_is_string(v)) {
    int m = parse_mode_string(json_string_value(v));
    if (m < 0)
      return manifest_invalid(
          e,
          "%s: \"permissions\" \"%.64s\" is not a mode string "
          "like \"rwxr-x---\"",
          where, json_string_value(v));
    *mode = m;
    return 0;
  }
  if (!json_is_object(v))
    return manifest_type_error(e, where, "permissions",
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
        return manifest_type_error(e, where, k, "a boolean", x);
      if (strcmp(k, "sticky") == 0)
        sticky = json_is_true(x);
      continue;
    }
    if (idx < 0)
      return manifest_invalid(e, "%s: unknown permissions key \"%s\"", where,
                              k);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        json_integer_value(x) > 7)
      return manifest_invalid(
          e, "%s: permissions \"%s\" must be an integer 0..7", where, k);
    bits[idx] = (int)json_integer_value(x);
  }
  *mode = bits[0] << 6 | bits[1] << 3 | bits[2];
  if (sticky)
    *mode |= 01000;
  return 0;
}

/* One pass of check_rel_path. */
static int check_rel_once(const char *p, const char *ewhere, char *out,
                          size_t outsz, struct sbx_error *e) {
  size_t n = strlen(p);
  size_t a = 0;
  while (a < n && (p[a] == ' ' || p[a] == '\t'))
    a++;
  while (n > a && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  if (n == a)
    return manifest_invalid(e, "%s: the path is empty", ewhere);
  if (memchr(p + a, '\\', n - a))
    return manifest_invalid(
        e, "%s: the path must use \"/\" separators, not \"\\\"", ewhere);
  if (n - a >= 2 && p[a + 1] == ':' &&
      ((p[a] >= 'A' && p[a] <= 'Z') || (p[a] >= 'a' && p[a] <= 'z')))
    return manifest_invalid(
        e, "%s: the path must not start with a Windows drive", ewhere);
  if (p[a] == '/')
    return manifest_invalid(e,
                            "%s: the path must be relative to the root, not "
                            "absolute",
                            ewhere);
  for (size_t i = a; i < n;) {
    size_t j = i;
    while (j < n && p[j] != '/')
      j++;
    if (j - i == 2 && p[i] == '.' && p[i + 1] == '.')
      return manifest_invalid(e, "%s: the path must not contain \"..\"",
                              ewhere);
    i = j + 1;
  }
  struct sbx_error pe = {0};
  int r = sbx_path_normalize_rel(p + a, n - a, out, outsz,
                                 SBX_PATH_NO_DOTDOT | SBX_PATH_POSIX_ONLY, &pe);
  if (r < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r, "%s: %s", ewhere, pe.msg);
  if (strcmp(out, ".") == 0)
    return manifest_invalid(e, "%s: the path must not be the root", ewhere);
  return 0;
}

/* Whether S begins or ends with a space or a tab. */
static bool bare_edge(const char *s) {
  size_t n = strlen(s);
  return n &&
         (s[0] == ' ' || s[0] == '\t' || s[n - 1] == ' ' || s[n - 1] == '\t');
}

/* Checks a manifest path (an entry key or a child's name) as the SDK does,
 * with a message per rule, and normalizes it into OUT. What normalizing
 * bares ("./ x" is " x") is trimmed and checked again, until nothing
 * changes (each pass is shorter), so that the path saved is the path it
 * parses to again. */
static int check_rel_path(const char *p, const char *ewhere, char *out,
                          size_t outsz, struct sbx_error *e) {
  int r = check_rel_once(p, ewhere, out, outsz, e);
  while (r == 0 && bare_edge(out)) {
    _cleanup_free_ char *again = strdup(out);
    if (!again)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
    r = check_rel_once(again, ewhere, out, outsz, e);
  }
  return r;
}

/* What the parsers of an entry work on: the entry being filled (cleared by
 * the caller on failure), its object as written and its type. */
struct entry_ctx {
  struct manifest_entry *ent;
  json_t *v; /* borrowed */
  const struct entry_type *type;
  const char *ewhere; /* "WHERE: entry \"path\"", for messages */
  struct sbx_error *e;
};

/* Each "type" an entry may have: its kind, the fields it takes besides the
 * common ones ("!" marks a required one) and the parser of those fields
 * (NULL: none to parse). Cloud mounts take their provider's fields as
 * strings. */
struct entry_type {
  const char *name;
  enum manifest_entry_type type;
  const char *const *fields;
  int (*parse)(struct entry_ctx *c);
};

/* file: the content, as text or as base64, at most 64 MiB. */
static int parse_file(struct entry_ctx *c) {
  struct manifest_entry *ent = c->ent;
  json_t *t = json_object_get(c->v, "content");
  json_t *t64 = json_object_get(c->v, "content_base64");
  if (t && t64)
    return manifest_invalid(
        c->e, "%s: give \"content\" or \"content_base64\", not both",
        c->ewhere);
  size_t l = t64 ? json_string_length(t64) : (t ? json_string_length(t) : 0);
  if ((t64 ? l / 4 * 3 : l) > MANIFEST_MAX_CONTENT)
    return sbx_error_set(c->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: content is larger than 64 MiB", c->ewhere);
  ent->content = malloc(l + 4);
  if (!ent->content)
    return -ENOMEM;
  if (t64) {
    long n = sbx_base64_decode(json_string_value(t64), l, ent->content);
    if (n < 0)
      return manifest_invalid(
          c->e, "%s: \"content_base64\" is not valid base64", c->ewhere);
    ent->content_len = (size_t)n;
  } else {
    if (l)
      memcpy(ent->content, json_string_value(t), l);
    ent->content_len = l;
  }
  ent->content[ent->content_len] = '\0';
  return 0;
}

/* local_file, local_dir: the host source, and the digest a local_file's
 * content must have (kept in lowercase). */
static int parse_local(struct entry_ctx *c) {
  struct manifest_entry *ent = c->ent;
  json_t *src = json_object_get(c->v, "src");
  if (!json_string_length(src))
    return manifest_invalid(c->e, "%s: \"src\" is empty", c->ewhere);
  int r = manifest_dup_str(src, &ent->src);
  if (r < 0)
    return r;
  json_t *sha = json_object_get(c->v, "sha256");
  if (!sha)
    return 0;
  const char *s = json_string_value(sha);
  bool ok = strlen(s) == 64;
  for (size_t i = 0; ok && i < 64; i++)
    ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
         (s[i] >= 'A' && s[i] <= 'F');
  if (!ok)
    return manifest_invalid(c->e, "%s: \"sha256\" must be 64 hex digits",
                            c->ewhere);
  if ((r = manifest_dup_str(sha, &ent->sha256)) < 0)
    return r;
  for (char *p = ent->sha256; *p; p++)
    if (*p >= 'A' && *p <= 'F')
      *p = (char)(*p - 'A' + 'a');
  return 0;
}

/* git_repo: the remote URL from url, or repo on host (the SDK's rule). */
static int parse_git(struct entry_ctx *c) {
  struct manifest_entry *ent = c->ent;
  json_t *v = c->v;
  const char *ewhere = c->ewhere;
  struct sbx_error *e = c->e;
  json_t *repo = json_object_get(v, "repo");
  json_t *url = json_object_get(v, "url");
  json_t *host = json_object_get(v, "host");
  json_t *ref = json_object_get(v, "ref");
  json_t *sub = json_object_get(v, "subpath");
  if (!repo == !url)
    return manifest_invalid(
        e, "%s: a git_repo needs \"repo\" or \"url\" (one of them)", ewhere);
  const char *r = json_string_value(repo ? repo : url);
  if (!*r)
    return manifest_invalid(e, "%s: \"%s\" is empty", ewhere,
                            repo ? "repo" : "url");
  if (r[0] == '-')
    return manifest_invalid(e, "%s: \"%s\" must not start with \"-\"", ewhere,
                            repo ? "repo" : "url");
  for (const char *p = r; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return manifest_invalid(e, "%s: \"%s\" holds a control character", ewhere,
                              repo ? "repo" : "url");
  if (url && host)
    return manifest_invalid(e, "%s: \"host\" goes with \"repo\", not \"url\"",
                            ewhere);
  const char *h = host ? json_string_value(host) : "github.com";
  if (!*h || strpbrk(h, "/@:") || h[0] == '-')
    return manifest_invalid(e, "%s: \"host\" \"%.64s\" is not a host name",
                            ewhere, h);
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
      return manifest_invalid(
          e, "%s: \"ref\" \"%.64s\" is not a branch, tag or commit", ewhere, s);
    if (manifest_dup_str(ref, &ent->ref) < 0)
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

/* mount, local_bind and the cloud mounts: read_only (true unless said),
 * the mount path and strategy; a local bind's host source; and no required
 * field empty. */
static int parse_mount(struct entry_ctx *c) {
  struct manifest_entry *ent = c->ent;
  json_t *v = c->v;
  const char *ewhere = c->ewhere;
  struct sbx_error *e = c->e;
  ent->read_only = true; /* the SDK's default for mounts */
  json_t *ro = json_object_get(v, "read_only");
  if (ro)
    ent->read_only = json_is_true(ro);
  json_t *mp = json_object_get(v, "mount_path");
  if (mp && json_string_value(mp)[0] == '/')
    return manifest_invalid(
        e,
        "%s: \"mount_path\" must be relative to the root (the "
        "entry's key is where it is mounted)",
        ewhere);
  /* Where it is mounted is the entry's key; a mount_path elsewhere would
   * be ignored, so only the key itself is taken. */
  char mpn[SBX_PATH_MAX];
  if (mp &&
      (sbx_path_normalize_rel(json_string_value(mp), json_string_length(mp),
                              mpn, sizeof(mpn), 0, NULL) < 0 ||
       strcmp(mpn, ent->path) != 0))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "%s: a \"mount_path\" other than the entry's own "
                         "path is not supported: the entry's key is where it "
                         "is mounted",
                         ewhere);
  /* A mount keeps its source's owner and mode, and its provider is an
   * in-container strategy's, which no backend has. */
  static const char *const mount_unsupported[] = {"group", "permissions",
                                                  "provider"};
  for (size_t i = 0;
       ent->type == MANIFEST_MOUNT && i < SBX_ARRAY_SIZE(mount_unsupported);
       i++)
    if (json_object_get(v, mount_unsupported[i]))
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "%s: \"%s\" is not supported on a mount entry: "
                           "%s",
                           ewhere, mount_unsupported[i],
                           i < 2 ? "a bind mount keeps its source's owner "
                                   "and mode"
                                 : "it names an in-container mount "
                                   "strategy's provider, which no backend "
                                   "supports");
  json_t *st = json_object_get(v, "mount_strategy");
  if (st) {
    const char *s = json_is_object(st)
                        ? json_string_value(json_object_get(st, "type"))
                        : json_string_value(st);
    if (!s)
      return manifest_invalid(e,
                              "%s: \"mount_strategy\" must be a name or "
                              "{\"type\": name}",
                              ewhere);
    if (strcmp(s, "local_bind") != 0 && strcmp(s, "in_container") != 0 &&
        strcmp(s, "docker_volume") != 0)
      return manifest_invalid(
          e,
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
      return manifest_invalid(
          e,
          "%s: \"source\" \"%.200s\" must be an absolute host "
          "path other than /",
          ewhere, s);
    if (!(ent->source = strdup(norm)))
      return -ENOMEM;
  }
  const char *const *fields = c->type->fields;
  for (size_t i = 0; fields[i]; i++) {
    if (fields[i][0] != '!')
      continue;
    json_t *f = json_object_get(v, fields[i] + 1);
    if (f && json_is_string(f) && !json_string_length(f))
      return manifest_invalid(e, "%s: \"%s\" is empty", ewhere, fields[i] + 1);
  }
  return 0;
}

static const char *const file_fields[] = {"content", "content_base64", NULL};
static const char *const dir_fields[] = {"children", NULL};
static const char *const local_file_fields[] = {"!src", "sha256", NULL};
static const char *const local_dir_fields[] = {"!src", NULL};
static const char *const git_fields[] = {"repo", "url",     "host",
                                         "ref",  "subpath", NULL};
static const char *const mount_fields[] = {
    "!source", "mount_path", "read_only", "mount_strategy", "provider", NULL};
static const char *const s3_fields[] = {"!bucket",
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
static const char *const gcs_fields[] = {
    "!bucket",        "prefix", "credentials_json", "mount_path", "read_only",
    "mount_strategy", NULL};
static const char *const r2_fields[] = {
    "!bucket",       "account_id",        "prefix",
    "access_key_id", "secret_access_key", "mount_path",
    "read_only",     "mount_strategy",    NULL};
static const char *const azure_fields[] = {
    "!account",   "!container", "prefix",         "account_key", "sas_token",
    "mount_path", "read_only",  "mount_strategy", NULL};
static const char *const box_fields[] = {
    "!folder_id", "token", "mount_path", "read_only", "mount_strategy", NULL};

/* "local_bind" is the same entry as "mount"; the cloud mounts are checked
 * here and carried out by no backend yet (lifecycle_check_manifest). */
static const struct entry_type entry_types[] = {
    {"file", MANIFEST_FILE, file_fields, parse_file},
    {"dir", MANIFEST_DIR, dir_fields, NULL},
    {"local_file", MANIFEST_LOCAL_FILE, local_file_fields, parse_local},
    {"local_dir", MANIFEST_LOCAL_DIR, local_dir_fields, parse_local},
    {"git_repo", MANIFEST_GIT_REPO, git_fields, parse_git},
    {"mount", MANIFEST_MOUNT, mount_fields, parse_mount},
    {"local_bind", MANIFEST_MOUNT, mount_fields, parse_mount},
    {"s3_mount", MANIFEST_CLOUD_MOUNT, s3_fields, parse_mount},
    {"gcs_mount", MANIFEST_CLOUD_MOUNT, gcs_fields, parse_mount},
    {"r2_mount", MANIFEST_CLOUD_MOUNT, r2_fields, parse_mount},
    {"azure_blob_mount", MANIFEST_CLOUD_MOUNT, azure_fields, parse_mount},
    {"box_mount", MANIFEST_CLOUD_MOUNT, box_fields, parse_mount},
    {"s3_files_mount", MANIFEST_CLOUD_MOUNT, s3_fields, parse_mount},
};

/* The type the entry V names in "type", from entry_types. */
static int find_type(json_t *v, const char *ewhere,
                     const struct entry_type **out, struct sbx_error *e) {
  json_t *type = json_object_get(v, "type");
  if (!type)
    return manifest_invalid(e,
                            "%s: \"type\" is required (file, dir, local_file, "
                            "local_dir, git_repo, mount, or a cloud mount "
                            "type)",
                            ewhere);
  if (!json_is_string(type))
    return manifest_type_error(e, ewhere, "type", "a string", type);
  const char *t = json_string_value(type);
  for (size_t i = 0; i < SBX_ARRAY_SIZE(entry_types); i++)
    if (strcmp(t, entry_types[i].name) == 0) {
      *out = &entry_types[i];
      return 0;
    }
  return manifest_invalid(e,
                          "%s: unknown entry type \"%.64s\" (file, dir, "
                          "local_file, local_dir, git_repo, mount, s3_mount, "
                          "gcs_mount, r2_mount, azure_blob_mount, box_mount, "
                          "s3_files_mount)",
                          ewhere, t);
}

/* Checks every key of the entry against its type: the common ones (type,
 * description, group, ephemeral, permissions, parsed into the entry's
 * mode), then the type's fields and their JSON types; then that the
 * required fields are there. *CHILDREN is a dir's children (borrowed) or
 * NULL. */
static int check_keys(struct entry_ctx *c, json_t **children) {
  const char *const *fields = c->type->fields;
  const char *ewhere = c->ewhere;
  struct sbx_error *e = c->e;
  const char *k;
  json_t *x;
  json_object_foreach(c->v, k, x) {
    if (strcmp(k, "type") == 0)
      continue;
    if (strcmp(k, "description") == 0 || strcmp(k, "group") == 0) {
      if (!json_is_string(x))
        return manifest_type_error(e, ewhere, k, "a string", x);
      continue;
    }
    if (strcmp(k, "ephemeral") == 0) {
      if (!json_is_boolean(x))
        return manifest_type_error(e, ewhere, k, "a boolean", x);
      continue;
    }
    if (strcmp(k, "permissions") == 0) {
      int r = parse_permissions(x, ewhere, &c->ent->mode, e);
      if (r < 0)
        return r;
      continue;
    }
    bool known = false;
    for (size_t i = 0; fields[i] && !known; i++)
      known = strcmp(fields[i] + (fields[i][0] == '!'), k) == 0;
    if (!known) {
      char what[80];
      (void)snprintf(what, sizeof(what), "a %s entry", c->type->name);
      return manifest_unknown_key(e, ewhere, k, what);
    }
    if (strcmp(k, "children") == 0) {
      if (!json_is_object(x))
        return manifest_type_error(e, ewhere, k, "an object", x);
      *children = x;
    } else if (strcmp(k, "read_only") == 0) {
      if (!json_is_boolean(x))
        return manifest_type_error(e, ewhere, k, "a boolean", x);
    } else if (strcmp(k, "mount_strategy") == 0) {
      if (!json_is_string(x) && !json_is_object(x))
        return manifest_type_error(e, ewhere, k, "a string or an object", x);
    } else if (!json_is_string(x)) {
      return manifest_type_error(e, ewhere, k, "a string", x);
    }
  }
  for (size_t i = 0; fields[i]; i++)
    if (fields[i][0] == '!' && !json_object_get(c->v, fields[i] + 1))
      return manifest_invalid(e, "%s: a %s entry needs \"%s\"", ewhere,
                              c->type->name, fields[i] + 1);
  return 0;
}

/* The fields every entry has: its path FULL, type name, ephemeral, group
 * and description. */
static int common_fields(struct entry_ctx *c, const char *full) {
  struct manifest_entry *ent = c->ent;
  ent->ephemeral = json_is_true(json_object_get(c->v, "ephemeral"));
  json_t *g = json_object_get(c->v, "group");
  int r;
  if (g && (r = manifest_parse_name(g, c->ewhere, "group", false, &ent->group,
                                    c->e)) < 0)
    return r;
  json_t *d = json_object_get(c->v, "description");
  if (d && (r = manifest_dup_str(d, &ent->description)) < 0)
    return r;
  if (!(ent->path = strdup(full)) || !(ent->type_name = strdup(c->type->name)))
    return -ENOMEM;
  return 0;
}

/* Refuses ENT when M has its path already, or when one of the two would
 * lie inside the other and that one is not a dir. */
static int check_overlap(const struct manifest *m,
                         const struct manifest_entry *ent, const char *ewhere,
                         struct sbx_error *e) {
  for (size_t i = 0; i < m->nentries; i++) {
    const char *o = m->entries[i].path;
    if (strcmp(o, ent->path) == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EEXIST,
                           "%s: \"%s\" is given twice", ewhere, ent->path);
    enum manifest_entry_type ot = m->entries[i].type;
    if (ot != MANIFEST_DIR && sbx_path_is_under(o, ent->path))
      return manifest_invalid(e, "%s: \"%s\" lies inside the %s entry \"%s\"",
                              ewhere, ent->path, m->entries[i].type_name, o);
    if (ent->type != MANIFEST_DIR && sbx_path_is_under(ent->path, o))
      return manifest_invalid(
          e, "%s: the %s entry \"%s\" would contain the entry \"%s\"", ewhere,
          ent->type_name, ent->path, o);
  }
  return 0;
}

/* Appends ENT to M, stealing its fields (ENT is left empty), with a copy
 * of its object V as written for the persisted form, kept flat: children
 * are entries too. */
static int add_entry(struct manifest *m, struct manifest_entry *ent, json_t *v,
                     const char *where, size_t *cap, struct sbx_error *e) {
  ent->json = json_deep_copy(v);
  if (!ent->json)
    return -ENOMEM;
  /* -1 when there are no children: nothing to remove. */
  (void)json_object_del(ent->json, "children");
  if (m->nentries >= MANIFEST_MAX_ENTRIES)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: more than %d entries", where,
                         MANIFEST_MAX_ENTRIES);
  if (m->nentries == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    struct manifest_entry *n = realloc(m->entries, nc * sizeof(*n));
    if (!n)
      return -ENOMEM;
    m->entries = n;
    *cap = nc;
  }
  m->entries[m->nentries++] = *ent;
  *ent = (struct manifest_entry){0};
  return 0;
}

static void entry_clearp(struct manifest_entry *en) {
  manifest_entry_clear(en);
}

/* Parses entry KEY (object V) beneath PARENT into M, then its children. */
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
    return manifest_type_error(e, ewhere, key, "an object", v);
  const struct entry_type *type = NULL;
  if ((r = find_type(v, ewhere, &type, e)) < 0)
    return r;
  char full[SBX_PATH_MAX];
  if (sbx_path_join(parent, rel, full, sizeof(full)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "%s: path too long", ewhere);
  _cleanup_(entry_clearp) struct manifest_entry ent = {.type = type->type,
                                                       .mode = -1};
  struct entry_ctx c = {
      .ent = &ent, .v = v, .type = type, .ewhere = ewhere, .e = e};
  json_t *children = NULL;
  if ((r = check_keys(&c, &children)) < 0 || (r = common_fields(&c, full)) < 0)
    return r;
  if (type->parse && (r = type->parse(&c)) < 0)
    return r;
  if ((r = check_overlap(m, &ent, ewhere, e)) < 0)
    return r;
  if ((r = add_entry(m, &ent, v, where, cap, e)) < 0)
    return r;
  if (children)
    return manifest_parse_entries(m, children, full, where, depth + 1, cap, e);
  return 0;
}

int manifest_parse_entries(struct manifest *m, json_t *obj, const char *parent,
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
