/* Manifest entries: each type's fields, permissions, relative paths, and
 * the rules between entries (no path twice, nothing inside a file). */
#include <errno.h>
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

static int mount_fields(struct manifest_entry *ent, json_t *v,
                        const char *ewhere, struct sbx_error *e) {
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
  return 0;
}

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
  json_t *type = json_object_get(v, "type");
  if (!type)
    return manifest_invalid(
        e,
        "%s: \"type\" is required (file, dir, local_file, "
        "local_dir, git_repo, mount, or a cloud mount type)",
        ewhere);
  if (!json_is_string(type))
    return manifest_type_error(e, ewhere, "type", "a string", type);
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
    return manifest_invalid(
        e,
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
        return manifest_type_error(e, ewhere, k, "a string", x);
      continue;
    }
    if (strcmp(k, "ephemeral") == 0) {
      if (!json_is_boolean(x))
        return manifest_type_error(e, ewhere, k, "a boolean", x);
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
      return manifest_unknown_key(e, ewhere, k, what);
    }
    if (strcmp(k, "children") == 0) {
      if (!json_is_object(x))
        return manifest_type_error(e, ewhere, k, "an object", x);
      children = x;
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
    if (fields[i][0] == '!' && !json_object_get(v, fields[i] + 1))
      return manifest_invalid(e, "%s: a %s entry needs \"%s\"", ewhere, t,
                              fields[i] + 1);

  ent.ephemeral = json_is_true(json_object_get(v, "ephemeral"));
  json_t *g = json_object_get(v, "group");
  if (g) {
    r = manifest_parse_name(g, ewhere, "group", false, &ent.group, e);
    if (r < 0)
      goto fail;
  }
  json_t *d = json_object_get(v, "description");
  if (d && (r = manifest_dup_str(d, &ent.description)) < 0)
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
      r = manifest_invalid(
          e, "%s: give \"content\" or \"content_base64\", not both", ewhere);
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
        r = manifest_invalid(e, "%s: \"content_base64\" is not valid base64",
                             ewhere);
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
      r = manifest_invalid(e, "%s: \"src\" is empty", ewhere);
      goto fail;
    }
    if ((r = manifest_dup_str(src, &ent.src)) < 0)
      goto fail;
    json_t *sha = json_object_get(v, "sha256");
    if (sha) {
      const char *s = json_string_value(sha);
      bool ok = strlen(s) == 64;
      for (size_t i = 0; ok && i < 64; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
             (s[i] >= 'A' && s[i] <= 'F');
      if (!ok) {
        r = manifest_invalid(e, "%s: \"sha256\" must be 64 hex digits", ewhere);
        goto fail;
      }
      if ((r = manifest_dup_str(sha, &ent.sha256)) < 0)
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
        r = manifest_invalid(e, "%s: \"%s\" is empty", ewhere, fields[i] + 1);
        goto fail;
      }
    }
    break;
  case MANIFEST_DIR:
    break;
  }
  if (children && ent.type != MANIFEST_DIR) {
    r = manifest_invalid(e, "%s: only a dir entry has children", ewhere);
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
      r = manifest_invalid(e, "%s: \"%s\" lies inside the %s entry \"%s\"",
                           ewhere, ent.path, m->entries[i].type_name, o);
      goto fail;
    }
    if (ent.type != MANIFEST_DIR && sbx_path_is_under(ent.path, o)) {
      r = manifest_invalid(
          e, "%s: the %s entry \"%s\" would contain the entry \"%s\"", ewhere,
          t, ent.path, o);
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
    return manifest_parse_entries(m, children, full, where, depth + 1, cap, e);
  return 0;
fail:
  manifest_entry_clear(&ent);
  return r;
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
