/* The persisted form of a manifest (manifest_to_json): what a second
 * process needs, without ephemeral entries, ephemeral environment values
 * or grant host paths. Each part is built whole or not at all; json_pack's
 * "o" steals the parts, NULL ones too, and fails on a NULL one. */
#include "controller/config/manifest.h"

#include "shared/cleanup.h"

/* {path: the entry as written} for each entry that is not ephemeral. */
static json_t *entries_json(const struct manifest *m) {
  _cleanup_json_ json_t *o = json_object();
  if (!o)
    return NULL;
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    if (en->ephemeral)
      continue;
    if (json_object_set(o, en->path, en->json) < 0)
      return NULL;
  }
  return TAKE_PTR(o);
}

/* {NAME: {"value", "description"?}} for each value that is not ephemeral. */
static json_t *environment_json(const struct manifest *m) {
  _cleanup_json_ json_t *o = json_object();
  if (!o)
    return NULL;
  for (size_t i = 0; i < m->nenv; i++) {
    const struct manifest_env *ev = &m->env[i];
    if (ev->ephemeral)
      continue;
    json_t *v = json_pack("{s:s, s:s*}", "value", ev->value, "description",
                          ev->description);
    if (!v || json_object_set_new(o, ev->name, v) < 0)
      return NULL;
  }
  return TAKE_PTR(o);
}

/* [{"name"}] for each user. */
static json_t *users_json(const struct manifest *m) {
  _cleanup_json_ json_t *a = json_array();
  if (!a)
    return NULL;
  for (size_t i = 0; i < m->nusers; i++)
    if (json_array_append_new(a, json_pack("{s:s}", "name", m->users[i])) < 0)
      return NULL;
  return TAKE_PTR(a);
}

/* [{"name", "users": [name]}] for each group. */
static json_t *groups_json(const struct manifest *m) {
  _cleanup_json_ json_t *a = json_array();
  if (!a)
    return NULL;
  for (size_t i = 0; i < m->ngroups; i++) {
    const struct manifest_group *g = &m->groups[i];
    _cleanup_json_ json_t *us = json_array();
    if (!us)
      return NULL;
    for (size_t k = 0; k < g->nusers; k++)
      if (json_array_append_new(us, json_string(g->users[k])) < 0)
        return NULL;
    if (json_array_append_new(a, json_pack("{s:s, s:o}", "name", g->name,
                                           "users", TAKE_PTR(us))) < 0)
      return NULL;
  }
  return TAKE_PTR(a);
}

/* [{"path", "read_only", "description"?}] for each grant: the host path
 * stays with the trusted manifest. */
static json_t *grants_json(const struct manifest *m) {
  _cleanup_json_ json_t *a = json_array();
  if (!a)
    return NULL;
  for (size_t i = 0; i < m->ngrants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    json_t *o = json_pack("{s:s, s:b, s:s*}", "path", g->path, "read_only",
                          g->read_only, "description", g->description);
    if (json_array_append_new(a, o) < 0)
      return NULL;
  }
  return TAKE_PTR(a);
}

json_t *manifest_to_json(const struct manifest *m) {
  return json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:o}", "version", m->version,
                   "root", m->root, "entries", entries_json(m), "environment",
                   environment_json(m), "users", users_json(m), "groups",
                   groups_json(m), "extra_path_grants", grants_json(m));
}
