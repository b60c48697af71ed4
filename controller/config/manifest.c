/* Manifests: the top-level keys, the wording of parse errors, and what a
 * backend can carry out. Entries, users and groups, the environment and
 * grants are parsed in their own files (manifest_internal.h); the persisted
 * form, the live-sandbox delta and the tree shown to the model too. */
#include "controller/config/manifest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"
#include "shared/cleanup.h"
#include "shared/json.h"
#include "shared/path.h"

struct manifest *manifest_free(struct manifest *m) {
  if (!m)
    return NULL;
  for (size_t i = 0; i < m->nentries; i++)
    manifest_entry_clear(&m->entries[i]);
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

int manifest_type_error(struct sbx_error *e, const char *where, const char *key,
                        const char *want, json_t *got) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%s: \"%s\" must be %s, not %s", where, key, want,
                       sbx_json_kind(got, true));
}

int manifest_invalid(struct sbx_error *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = sbx_error_setv(e, SBX_INVALID_ARGUMENT, EINVAL, fmt, ap);
  va_end(ap);
  return r;
}

/* snake_case is the manifest's spelling; a camelCase key gets a hint. */
int manifest_unknown_key(struct sbx_error *e, const char *where, const char *k,
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
      return manifest_invalid(
          e,
          "%s: unknown key \"%s\" (manifests use snake_case: "
          "\"%s\")",
          where, k, hints[i].snake);
  return manifest_invalid(e, "%s: unknown key \"%s\"%s%s", where, k,
                          what ? " for " : "", what ? what : "");
}

int manifest_check_list(json_t *v, const char *where, const char *k,
                        struct sbx_error *e) {
  if (!json_is_array(v))
    return manifest_type_error(e, where, k, "an array", v);
  if (json_array_size(v) > MANIFEST_MAX_LIST)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "%s: \"%s\" has more than %d items", where, k,
                         MANIFEST_MAX_LIST);
  return 0;
}

int manifest_parse(json_t *j, const char *where, struct manifest **out,
                   struct sbx_error *e) {
  if (!json_is_object(j))
    return manifest_invalid(e, "%s: a manifest must be an object, not %s",
                            where, sbx_json_kind(j, true));
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
        r = manifest_type_error(e, where, k, "a string", v);
        break;
      }
      char norm[SBX_PATH_MAX];
      const char *s = json_string_value(v);
      bool dotdot = false;
      for (const char *q = s; (q = strstr(q, "..")); q += 2)
        dotdot |= (q == s || q[-1] == '/') && (q[2] == '/' || q[2] == '\0');
      if (s[0] != '/' || strchr(s, '\\') || dotdot ||
          sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0) {
        r = manifest_invalid(
            e,
            "%s: \"root\" \"%.200s\" must be an absolute POSIX path "
            "without \"..\"",
            where, s);
        break;
      }
      if (!(m->root = strdup(norm)))
        r = -ENOMEM;
    } else if (strcmp(k, "version") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) != 1)
        r = manifest_invalid(e, "%s: \"version\" must be 1", where);
    } else if (strcmp(k, "entries") == 0) {
      if (!json_is_object(v))
        r = manifest_type_error(e, where, k, "an object", v);
      else
        r = manifest_parse_entries(m, v, ".", where, 0, &cap, e);
    } else if (strcmp(k, "environment") == 0) {
      if (!json_is_object(v))
        r = manifest_type_error(e, where, k, "an object", v);
      else
        r = manifest_parse_environment(m, v, where, e);
    } else if (strcmp(k, "users") == 0) {
      r = manifest_parse_users(m, v, where, e);
    } else if (strcmp(k, "groups") == 0) {
      r = manifest_parse_groups(m, v, where, e);
    } else if (strcmp(k, "extra_path_grants") == 0) {
      r = manifest_parse_grants(m, v, where, e);
    } else {
      r = manifest_unknown_key(e, where, k, "a manifest");
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
