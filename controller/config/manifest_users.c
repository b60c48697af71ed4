/* Manifest users and groups: names as the SDK accepts them, each listed
 * once, and the agent's run_as added to them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"

#define MANIFEST_MAX_NAME 32 /* user and group names */

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
int manifest_parse_name(json_t *v, const char *where, const char *what,
                        bool allow_object, char **out, struct sbx_error *e) {
  json_t *s = v;
  if (allow_object && json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
      if (strcmp(k, "name") != 0)
        return manifest_unknown_key(e, where, k, what);
    }
    s = json_object_get(v, "name");
  }
  if (!json_is_string(s))
    return manifest_invalid(e, "%s: a %s must be %s", where, what,
                            allow_object ? "a name or {\"name\": ...}"
                                         : "a name");
  const char *p = json_string_value(s);
  size_t n = json_string_length(s);
  while (n > 0 && (*p == ' ' || *p == '\t'))
    p++, n--;
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
    n--;
  char buf[MANIFEST_MAX_NAME + 1];
  if (n == 0)
    return manifest_invalid(e, "%s: a %s name must not be empty", where, what);
  if (n > MANIFEST_MAX_NAME)
    return manifest_invalid(
        e, "%s: %s name \"%.*s\" is longer than %d characters", where, what,
        (int)(n > 64 ? 64 : n), p, MANIFEST_MAX_NAME);
  memcpy(buf, p, n);
  buf[n] = '\0';
  if (!valid_name(buf))
    return manifest_invalid(
        e, "%s: %s name \"%s\" must match [a-z_][a-z0-9_-]*", where, what, buf);
  *out = strdup(buf);
  return *out ? 0 : -ENOMEM;
}

int manifest_parse_users(struct manifest *m, json_t *v, const char *where,
                         struct sbx_error *e) {
  int r = manifest_check_list(v, where, "users", e);
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
    if ((r = manifest_parse_name(u, w, "user", true, &name, e)) < 0)
      return r;
    for (size_t j = 0; j < m->nusers; j++)
      if (strcmp(m->users[j], name) == 0) {
        r = manifest_invalid(e, "%s: user \"%s\" is listed twice", w, name);
        free(name);
        return r;
      }
    m->users[m->nusers++] = name;
  }
  return 0;
}

int manifest_parse_groups(struct manifest *m, json_t *v, const char *where,
                          struct sbx_error *e) {
  int r = manifest_check_list(v, where, "groups", e);
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
      return manifest_type_error(e, w, "group",
                                 "an object {\"name\", \"users\"?}", g);
    const char *k;
    json_t *x;
    json_object_foreach(g, k, x) {
      if (strcmp(k, "name") && strcmp(k, "users"))
        return manifest_unknown_key(e, w, k, "a group");
    }
    struct manifest_group *mg = &m->groups[m->ngroups];
    json_t *name = json_object_get(g, "name");
    if (!name)
      return manifest_invalid(e, "%s: a group needs \"name\"", w);
    if ((r = manifest_parse_name(name, w, "group", false, &mg->name, e)) < 0)
      return r;
    m->ngroups++;
    for (size_t j = 0; j + 1 < m->ngroups; j++)
      if (strcmp(m->groups[j].name, mg->name) == 0)
        return manifest_invalid(e, "%s: group \"%s\" is listed twice", w,
                                mg->name);
    json_t *us = json_object_get(g, "users");
    if (!us)
      continue;
    if ((r = manifest_check_list(us, w, "users", e)) < 0)
      return r;
    mg->users = calloc(json_array_size(us) + 1, sizeof(char *));
    if (!mg->users)
      return -ENOMEM;
    size_t j;
    json_t *u;
    json_array_foreach(us, j, u) {
      if ((r = manifest_parse_name(u, w, "user", true, &mg->users[mg->nusers],
                                   e)) < 0)
        return r;
      mg->nusers++;
    }
  }
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
