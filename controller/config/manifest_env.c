/* The manifest's environment: names, values, descriptions, and which
 * values are ephemeral (never recorded). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"

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

int manifest_parse_environment(struct manifest *m, json_t *env,
                               const char *where, struct sbx_error *e) {
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
      return manifest_invalid(e,
                              "%s: environment name \"%.64s\" must match "
                              "[A-Za-z_][A-Za-z0-9_]*",
                              where, k);
    char ew[400];
    (void)snprintf(ew, sizeof(ew), "%s: environment \"%s\"", where, k);
    /* Counted at once, so that manifest_free frees what it gets even when
     * the value is refused below. */
    struct manifest_env *ev = &m->env[m->nenv++];
    json_t *val = v;
    if (json_is_object(v)) {
      const char *ik;
      json_t *iv;
      json_object_foreach(v, ik, iv) {
        if (strcmp(ik, "value") == 0)
          continue;
        if (strcmp(ik, "description") == 0 && !json_is_string(iv))
          return manifest_type_error(e, ew, ik, "a string", iv);
        if (strcmp(ik, "ephemeral") == 0 && !json_is_boolean(iv))
          return manifest_type_error(e, ew, ik, "a boolean", iv);
        if (strcmp(ik, "description") && strcmp(ik, "ephemeral"))
          return manifest_unknown_key(e, ew, ik, NULL);
      }
      val = json_object_get(v, "value");
      ev->ephemeral = json_is_true(json_object_get(v, "ephemeral"));
      json_t *d = json_object_get(v, "description");
      if (d && manifest_dup_str(d, &ev->description) < 0)
        return -ENOMEM;
    }
    if (!json_is_string(val))
      return manifest_invalid(e,
                              "%s must be a string or {\"value\": string, "
                              "\"description\"?, \"ephemeral\"?}",
                              ew);
    if (memchr(json_string_value(val), '\0', json_string_length(val)))
      return manifest_invalid(e, "%s holds a NUL character", ew);
    ev->name = strdup(k);
    if (!ev->name || manifest_dup_str(val, &ev->value) < 0)
      return -ENOMEM;
  }
  return 0;
}

const char *manifest_getenv(const struct manifest *m, const char *name) {
  for (size_t i = 0; i < m->nenv; i++)
    if (strcmp(m->env[i].name, name) == 0)
      return m->env[i].value;
  return NULL;
}
